//! Running as a service: `--config FILE` for `weft serve` and `weft dnode` (the file's
//! listeners are used, a flag overrides the file, an unknown key or a bad value stops the
//! start naming the key and the file), `--log-format json`, a clean exit on SIGTERM, the
//! example configs in packaging/ and the systemd units (`systemd-analyze verify`).
//!
//! The listeners in the files are on 127.0.0.2..4 with port 0: the address proves the file's
//! value was used (the default is 127.0.0.1), and port 0 takes a free port with no race.

mod common;

use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;
use weft_meta::testing::EtcdServer;

/// How long a daemon may take to print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a daemon may take to exit after SIGTERM (destage and checkpoint of a tiny store).
const STOP_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a command that exits at once (a rejected config, --check-config) may take.
const QUICK_TIMEOUT: Duration = Duration::from_secs(30);

/// The environment variables that would change what the daemons read.
const WEFT_ENV: [&str; 7] = [
    "WEFT_CONFIG",
    "WEFT_DATA_DIR",
    "WEFT_LOG_FORMAT",
    "WEFT_LOG",
    "WEFT_CLUSTER",
    "WEFT_API",
    "WEFT_TOKEN",
];

/// `weft ARGS`, with none of the weft environment inherited.
fn weft(args: &[&str]) -> Command {
    let mut cmd = Command::new(weft_bin());
    cmd.args(args);
    for var in WEFT_ENV {
        cmd.env_remove(var);
    }
    cmd
}

fn write_config(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).expect("write config file");
    path
}

/// The repository's packaging/ directory.
fn packaging_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging")
}

/// Starts `weft serve` and waits for `ready` and a serve.json in `data_dir` written by it.
fn start_serve(cmd: &mut Command, data_dir: &Path) -> (Bg, Value) {
    // Tests run in parallel: no fixed metrics port (none of them is about it).
    cmd.args(["--metrics-listen", "127.0.0.1:0"]);
    let mut child = Bg::spawn(cmd);
    let pid = u64::from(child.pid());
    let serve_json = data_dir.join("serve.json");
    let info = poll_until(READY_TIMEOUT, "weft serve to be ready", || {
        if let Some(status) = child.try_wait() {
            panic!(
                "weft serve exited before ready ({status}):\n{}",
                child.all_so_far()
            );
        }
        if !child.stdout_so_far().lines().any(|l| l.trim() == "ready") {
            return None;
        }
        let v: Value = serde_json::from_str(&fs::read_to_string(&serve_json).ok()?).ok()?;
        (v["pid"].as_u64() == Some(pid)).then_some(v)
    });
    (child, info)
}

/// SIGTERM by pid, then the exit must be clean (status 0) and prompt.
fn terminate(child: Bg) -> CmdOut {
    child.signal("TERM");
    let out = child.wait(STOP_TIMEOUT);
    assert!(
        !out.timed_out,
        "no exit within {STOP_TIMEOUT:?} of SIGTERM:\n{}",
        out.describe()
    );
    assert!(
        out.success(),
        "SIGTERM must end in a clean exit (0):\n{}",
        out.describe()
    );
    out
}

fn addr(info: &Value, field: &str) -> SocketAddr {
    info[field]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("serve.json \"{field}\" is not host:port: {info}"))
}

#[test]
fn serve_takes_listeners_and_settings_from_the_config_file() {
    let scratch = Scratch::new("config-serve");
    let data = scratch.join("data");
    let config = write_config(
        scratch.path(),
        "weft.toml",
        &format!(
            "data-dir = {:?}\n\
             nbd-listen = \"127.0.0.2:0\"\n\
             api-listen = \"127.0.0.3:0\"\n\
             iscsi-listen = \"127.0.0.2:0,127.0.0.3:0\"\n\
             default-volume = \"fromfile\"\n\
             default-volume-size = \"64M\"\n\
             write-buffer-size = \"64M\"\n\
             journal-file-size = \"8M\"\n\
             buffered-reads = true\n",
            data.display().to_string()
        ),
    );
    let mut cmd = weft(&["serve", "--config", config.to_str().unwrap()]);
    cmd.current_dir(scratch.path());
    let (child, info) = start_serve(&mut cmd, &data);

    let nbd = addr(&info, "nbd");
    assert_eq!(
        nbd.ip().to_string(),
        "127.0.0.2",
        "nbd-listen from the file"
    );
    let api = info["api"].as_str().unwrap_or_default();
    assert!(
        api.contains("127.0.0.3:"),
        "api-listen from the file: {info}"
    );
    let portals: Vec<String> = info["iscsi_portals"]
        .as_array()
        .unwrap_or_else(|| panic!("serve.json lacks iscsi_portals: {info}"))
        .iter()
        .filter_map(|p| Some(p.as_str()?.split(':').next()?.to_string()))
        .collect();
    assert_eq!(portals, ["127.0.0.2", "127.0.0.3"], "iscsi-listen: {info}");
    // default-volume and its size from the file: the export exists with that size.
    let client = NbdClient::connect(nbd, "fromfile").expect("the file's default volume");
    assert_eq!(client.size, 64 << 20);
    client.disconnect();

    terminate(child);
}

#[test]
fn command_line_flags_override_the_config_file() {
    let scratch = Scratch::new("config-override");
    let file_data = scratch.join("file-data");
    let flag_data = scratch.join("flag-data");
    let config = write_config(
        scratch.path(),
        "weft.toml",
        &format!(
            "data-dir = {:?}\n\
             nbd-listen = \"127.0.0.2:0\"\n\
             api-listen = \"127.0.0.2:0\"\n\
             iscsi-listen = \"off\"\n\
             default-volume-size = \"64M\"\n\
             journal-file-size = \"8M\"\n",
            file_data.display().to_string()
        ),
    );
    let mut cmd = weft(&[
        "serve",
        "--config",
        config.to_str().unwrap(),
        "--nbd-listen",
        "127.0.0.4:0",
    ]);
    // A global flag after the subcommand, and one before it, both beat the file.
    cmd.arg("--data-dir").arg(&flag_data);
    cmd.current_dir(scratch.path());
    let (child, info) = start_serve(&mut cmd, &flag_data);
    assert_eq!(addr(&info, "nbd").ip().to_string(), "127.0.0.4", "{info}");
    assert!(
        info["api"]
            .as_str()
            .unwrap_or_default()
            .contains("127.0.0.2:"),
        "the file's api-listen still applies: {info}"
    );
    assert!(
        !file_data.exists(),
        "--data-dir on the command line must replace the file's data-dir"
    );
    terminate(child);

    // The environment beats the file as well (WEFT_DATA_DIR), and loses to a flag.
    let env_data = scratch.join("env-data");
    let out = run(
        weft(&[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--check-config",
        ])
        .env("WEFT_DATA_DIR", &env_data),
        QUICK_TIMEOUT,
    );
    assert!(out.success(), "{}", out.describe());
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("data-dir = "))
        .unwrap_or_else(|| panic!("no data-dir line:\n{}", out.stdout));
    assert!(
        line.contains("env-data") && line.ends_with("# environment"),
        "{line}"
    );
    assert!(
        out.stdout
            .contains("nbd-listen = \"127.0.0.2:0\"  # config file"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("segment-size = \"8M\"  # default"),
        "{}",
        out.stdout
    );
}

#[test]
fn unknown_keys_and_bad_values_stop_the_start_naming_key_and_file() {
    let scratch = Scratch::new("config-bad");
    let data = scratch.join("data");
    for (name, line, key, why) in [
        (
            "typo.toml",
            "nbd-listn = \"127.0.0.1:0\"",
            "nbd-listn",
            "unknown key",
        ),
        (
            "type.toml",
            "buffered-reads = \"yes\"",
            "buffered-reads",
            "expected a boolean",
        ),
        (
            "value.toml",
            "write-buffer-size = \"lots\"",
            "write-buffer-size",
            "lots",
        ),
        (
            "table.toml",
            "[serve]\nnbd-listen = \"127.0.0.1:0\"",
            "serve",
            "unknown key",
        ),
    ] {
        let config = write_config(
            scratch.path(),
            name,
            &format!("data-dir = {:?}\n{line}\n", data.display().to_string()),
        );
        let out = run(
            &mut weft(&["serve", "--config", config.to_str().unwrap()]),
            QUICK_TIMEOUT,
        );
        assert_eq!(
            out.status.and_then(|s| s.code()),
            Some(2),
            "{}",
            out.describe()
        );
        let first = out.stderr.lines().next().unwrap_or_default();
        assert!(
            first.contains(&format!("{key}: ")) && first.contains(why),
            "{name}: the error should name `{key}` and say {why:?}: {first}"
        );
        assert!(
            first.contains(&config.display().to_string()),
            "{name}: the error should name the file: {first}"
        );
        assert!(!data.exists(), "{name}: nothing may start with a bad file");
    }

    let missing = scratch.join("missing.toml");
    let out = run(
        &mut weft(&["serve", "--config", missing.to_str().unwrap()]),
        QUICK_TIMEOUT,
    );
    assert!(
        !out.success() && out.stderr.contains("missing.toml"),
        "{}",
        out.describe()
    );
}

#[test]
fn json_log_format_writes_one_json_object_per_line() {
    let scratch = Scratch::new("config-json-logs");
    let data = scratch.join("data");
    let mut cmd = weft(&[
        "serve",
        "--log-format",
        "json",
        "--nbd-listen",
        "127.0.0.1:0",
        "--api-listen",
        "127.0.0.1:0",
        "--iscsi-listen",
        "127.0.0.1:0",
        "--default-volume-size",
        "64M",
        "--journal-file-size",
        "8M",
    ]);
    cmd.arg("--data-dir").arg(&data).current_dir(scratch.path());
    let (child, _) = start_serve(&mut cmd, &data);
    let out = terminate(child);

    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        lines.len() >= 2,
        "expected start and stop events on stderr:\n{}",
        out.stderr
    );
    for line in &lines {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
        for field in ["timestamp", "level", "target", "fields"] {
            assert!(event.get(field).is_some(), "no {field:?} in {line}");
        }
        assert!(
            ["ERROR", "WARN", "INFO"].contains(&event["level"].as_str().unwrap_or_default()),
            "level above the default filter (info): {line}"
        );
    }
    assert!(
        !out.stderr.contains('\u{1b}'),
        "no ANSI colour in JSON logs:\n{}",
        out.stderr
    );
}

#[test]
fn dnode_runs_from_a_config_file() {
    let etcd = EtcdServer::start().unwrap_or_else(|e| panic!("etcd for the d.node test: {e}"));
    let scratch = Scratch::new("config-dnode");
    let disk = scratch.join("disk0");
    let config = write_config(
        scratch.path(),
        "dnode.toml",
        &format!(
            "cluster = {:?}\n\
             listen = \"127.0.0.2:0\"\n\
             data = [{:?}]\n\
             zone = \"z1\"\n\
             lease-ttl = \"2s\"\n\
             log-format = \"json\"\n",
            etcd.url(),
            disk.display().to_string()
        ),
    );
    let mut child = Bg::spawn(&mut weft(&["dnode", "--config", config.to_str().unwrap()]));
    let listening = poll_until(READY_TIMEOUT, "weft dnode to be ready", || {
        if let Some(status) = child.try_wait() {
            panic!(
                "weft dnode exited before ready ({status}):\n{}",
                child.all_so_far()
            );
        }
        let out = child.stdout_so_far();
        if !out.lines().any(|l| l.trim() == "ready") {
            return None;
        }
        // dnode <id> listening on <addr>
        out.lines()
            .find(|l| l.starts_with("dnode "))
            .and_then(|l| l.split_whitespace().nth(4))
            .map(str::to_string)
    });
    assert!(
        listening.starts_with("127.0.0.2:"),
        "listen from the file: {listening}"
    );
    assert!(
        fs::read_dir(&disk).map(|d| d.count() > 0).unwrap_or(false),
        "the file's data dir {} was not initialised",
        disk.display()
    );
    let out = terminate(child);
    for line in out.stderr.lines().filter(|l| !l.trim().is_empty()) {
        let event: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("log-format from the file: not JSON ({e}): {line}"));
        assert!(event.get("level").is_some(), "{line}");
    }
}

#[test]
fn packaged_example_configs_are_valid() {
    let dir = packaging_dir();
    for (config, extra, expect) in [
        (
            "weft.toml",
            vec!["serve"],
            "nbd-listen = \"0.0.0.0:10809\"  # config file",
        ),
        (
            "cnode.toml",
            vec!["cnode"],
            "redundancy = \"4+2\"  # config file",
        ),
        (
            "dnode.toml",
            vec!["dnode", "--data", "/var/lib/weft-dnode/nvme0"],
            "zone = \"rack1\"  # config file",
        ),
    ] {
        let path = dir.join(config);
        let mut cmd = weft(&extra);
        cmd.arg("--config").arg(&path).arg("--check-config");
        let out = run(&mut cmd, QUICK_TIMEOUT);
        assert!(out.success(), "{config}:\n{}", out.describe());
        assert!(out.stdout.contains(expect), "{config}:\n{}", out.stdout);
    }
}

#[test]
fn systemd_units_verify() {
    let Some(analyze) = which("systemd-analyze") else {
        eprintln!(
            "SKIPPED systemd_units_verify: systemd-analyze is not installed \
             (Debian package systemd; .ci/run installs it)"
        );
        return;
    };
    let scratch = Scratch::new("config-units");
    let units = packaging_dir().join("systemd");
    let bin = weft_bin();
    let mut paths = Vec::new();
    for (file, as_name) in [
        ("weft.service", "weft.service"),
        ("weft-cnode.service", "weft-cnode.service"),
        // A template is verified as one of its instances.
        ("weft-dnode@.service", "weft-dnode@nvme0.service"),
    ] {
        let text = fs::read_to_string(units.join(file)).expect("read unit");
        assert!(text.contains("ExecStart=/usr/bin/weft "), "{file}");
        // verify checks that ExecStart's binary exists: point it at the one under test.
        let text = text.replace("/usr/bin/weft ", &format!("{} ", bin.display()));
        let path = scratch.join(as_name);
        fs::write(&path, text).expect("write unit copy");
        paths.push(path);
    }
    let mut cmd = Command::new(analyze);
    cmd.args(["verify", "--man=no"]).args(&paths);
    let out = run(&mut cmd, QUICK_TIMEOUT);
    assert!(out.success(), "{}", out.describe());
    // verify exits 0 on some warnings; our units should have none about themselves.
    let all = out.all();
    let ours: Vec<&str> = all.lines().filter(|l| l.contains("weft")).collect();
    assert!(
        ours.is_empty(),
        "systemd-analyze verify:\n{}",
        ours.join("\n")
    );
}
