//! Listeners off loopback, in a network namespace of the test's own (its `lo` carries
//! 10.201.0.1, an address that is not loopback): a volume mapped to a host is served to that
//! host only (iSCSI by initiator name, NBD by client address); a volume mapped to nobody is
//! invisible there unless the operator opened the listener (`--iscsi-open-network`,
//! `--nbd-open-network`), which `weft serve` says at start. Needs root (`ip netns`).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;

const ADDRESS: &str = "10.201.0.1";
const TOOL_TIMEOUT: Duration = Duration::from_secs(120);
const HOST_IQN: &str = "iqn.2026-01.test:db1";

/// A network namespace, deleted on drop (also when the test fails).
struct Netns(String);

impl Netns {
    fn new() -> Netns {
        let name = format!("weft-test-{}", std::process::id());
        let ns = Netns(name.clone());
        let ip = require_tool("ip");
        run(
            Command::new(&ip).args(["netns", "add", &name]),
            TOOL_TIMEOUT,
        )
        .ok();
        for args in [
            vec!["link", "set", "lo", "up"],
            vec!["addr", "add", &format!("{ADDRESS}/32"), "dev", "lo"],
        ] {
            ns.run(&ip.to_string_lossy(), &args).ok();
        }
        ns
    }

    fn command(&self, program: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.0, program]).args(args);
        cmd
    }

    fn run(&self, program: &str, args: &[&str]) -> CmdOut {
        run(&mut self.command(program, args), TOOL_TIMEOUT)
    }

    fn weft(&self, data: &Path, args: &[&str]) -> CmdOut {
        let mut full = vec!["--data-dir", data.to_str().unwrap()];
        full.extend_from_slice(args);
        self.run(weft_bin().to_str().unwrap(), &full)
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// `weft serve` in the namespace, NBD and iSCSI on 10.201.0.1, the API on its loopback.
/// `ip netns exec` execs weft, so the pid is weft's.
fn serve(ns: &Netns, data: &Path, extra: &[&str]) -> Bg {
    let mut args = vec![
        "--data-dir",
        data.to_str().unwrap(),
        "serve",
        "--nbd-listen",
        "10.201.0.1:10809",
        "--iscsi-listen",
        "10.201.0.1:3260",
        "--api-listen",
        "127.0.0.1:10810",
        "--default-volume-size",
        "64M",
    ];
    args.extend_from_slice(extra);
    let mut bg = Bg::spawn(&mut ns.command(weft_bin().to_str().unwrap(), &args));
    poll_until(Duration::from_secs(60), "weft serve to be ready", || {
        if let Some(st) = bg.try_wait() {
            panic!("weft serve exited ({st}):\n{}", bg.all_so_far());
        }
        bg.stdout_so_far()
            .lines()
            .any(|l| l.trim() == "ready")
            .then_some(())
    });
    bg
}

fn nbd_exports(ns: &Netns) -> Vec<String> {
    let out = ns.run("nbdinfo", &["--list", "--json", "nbd://10.201.0.1:10809"]);
    if !out.success() {
        return Vec::new();
    }
    nbdinfo_export_names(&out)
}

fn iscsi_targets(ns: &Netns, initiator: &str) -> Vec<String> {
    let out = ns.run("iscsi-ls", &["-i", initiator, "iscsi://10.201.0.1:3260"]);
    let mut t: Vec<String> = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("Target:"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|t| t.rsplit(':').next().unwrap_or(t).to_string())
        .collect();
    t.sort();
    t
}

#[test]
fn off_loopback_each_host_sees_only_its_volumes_unless_opened() {
    require_tools(&["ip", "nbdinfo", "iscsi-ls"]);
    let ns = Netns::new();
    let scratch = Scratch::new("off-loopback");
    let data = scratch.join("data");

    let srv = serve(&ns, &data, &[]);
    let log = srv.all_so_far();
    assert!(
        log.contains("off loopback serves each host only the volumes mapped to it"),
        "{log}"
    );
    for args in [
        vec!["volume", "create", "pgdata", "--size", "64M"],
        vec!["volume", "create", "reports", "--size", "64M"],
        vec![
            "host",
            "create",
            "db1",
            "--iqn",
            HOST_IQN,
            "--nbd-address",
            ADDRESS,
        ],
        vec!["host", "create", "etl", "--nbd-address", "10.9.0.0/16"],
        vec!["volume", "map", "pgdata", "--host", "db1"],
        vec!["volume", "map", "reports", "--host", "etl"],
    ] {
        ns.weft(&data, &args).ok();
    }
    // NBD from 10.201.0.1: db1's volume only (not etl's, not the unmapped vol0).
    assert_eq!(nbd_exports(&ns), ["pgdata"]);
    // iSCSI: db1 sees the array target and pgdata; a stranger sees nothing.
    let mut want = vec!["pgdata".to_string(), iscsi_array_id(&data)];
    want.sort();
    assert_eq!(iscsi_targets(&ns, HOST_IQN), want);
    assert!(iscsi_targets(&ns, "iqn.2026-01.test:stranger").is_empty());
    let refused = ns.run(
        "iscsi-inq",
        &[
            "-i",
            "iqn.2026-01.test:stranger",
            "iscsi://10.201.0.1:3260/iqn.2026-11.dev.weft:vol0/0",
        ],
    );
    assert!(
        !refused.success() && refused.all().contains("not found"),
        "{}",
        refused.all()
    );
    srv.signal("TERM");
    srv.wait(Duration::from_secs(60));

    // Opened explicitly: unmapped volumes are served to anyone, mapped ones still not.
    let srv = serve(&ns, &data, &["--nbd-open-network", "--iscsi-open-network"]);
    let log = srv.all_so_far();
    assert!(
        log.contains("open to the network (--nbd-open-network)"),
        "{log}"
    );
    assert!(
        log.contains("open to the network (--iscsi-open-network)"),
        "{log}"
    );
    assert_eq!(nbd_exports(&ns), ["pgdata", "vol0"]);
    assert_eq!(iscsi_targets(&ns, "iqn.2026-01.test:stranger"), ["vol0"]);
    srv.signal("TERM");
    srv.wait(Duration::from_secs(60));
}

/// The end of the array target's name: the data dir's `array-id`.
fn iscsi_array_id(data: &Path) -> String {
    std::fs::read_to_string(data.join("array-id"))
        .expect("array-id")
        .trim()
        .to_string()
}
