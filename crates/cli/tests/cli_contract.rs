//! The CLI's contract with scripts: every client command prints JSON with `--json`; exit
//! codes tell usage errors (2), an unreachable server (3), not found (4), conflict (5) and a
//! refused token (6) apart; destructive commands refuse to run off a terminal without
//! `--yes`, and on a terminal ask with the facts; `ls`/`rm` aliases; `weft status`; shell
//! completions and man pages generated from the CLI definition.

mod cluster_support;
mod common;

use std::net::TcpListener;
use std::process::Command;
use std::time::Duration;

use cluster_support::{serial, Cluster, ClusterOpts};
use common::*;
use serde_json::{json, Value};

const USAGE: i32 = 2;
const UNREACHABLE: i32 = 3;
const NOT_FOUND: i32 = 4;
const CONFLICT: i32 = 5;
const DENIED: i32 = 6;

fn code(out: &CmdOut) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

/// `weft ARGS` must exit with `want`, saying `error: ...` on stderr.
fn assert_exit(out: &CmdOut, want: i32, what: &str) {
    assert_eq!(
        code(out),
        Some(want),
        "{what}: `{}` exited {:?}, want {want}\n{}",
        out.cmdline,
        out.status,
        out.all()
    );
    if want != 0 {
        assert!(
            out.stderr.contains("error"),
            "{what}: no error message: {}",
            out.all()
        );
    }
}

/// `weft --help`, with the exit-code table.
fn weft_cli_help() -> String {
    run(
        Command::new(weft_bin()).arg("--help"),
        Duration::from_secs(30),
    )
    .ok()
    .stdout
}

fn json_of(out: &CmdOut) -> Value {
    assert_eq!(
        code(out),
        Some(0),
        "`{}` failed:\n{}",
        out.cmdline,
        out.all()
    );
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "`{}` did not print JSON ({e}):\n{}",
            out.cmdline, out.stdout
        )
    })
}

/// `weft` with explicit `--api`/`--token` (no data dir to find them in).
fn cli_with(api: &str, token: &str, args: &[&str]) -> CmdOut {
    let mut cmd = Command::new(weft_bin());
    cmd.args([
        "--data-dir",
        "/nonexistent/weft-data",
        "--api",
        api,
        "--token",
        token,
    ])
    .args(args)
    .env_remove("WEFT_API")
    .env_remove("WEFT_TOKEN")
    .env_remove("WEFT_DATA_DIR");
    run(&mut cmd, Duration::from_secs(60))
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .filter_map(|v| v["name"].as_str().map(str::to_string))
        .collect()
}

/// A loopback port nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn every_client_command_prints_json() {
    let srv = Server::start_with("contract-json", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("every_client_command_prints_json") {
        return;
    }
    let j = |args: &[&str]| -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        json_of(&srv.cli(&a))
    };

    let v = j(&["volume", "create", "pgdata", "--size", "64M"]);
    assert_eq!(v["name"], "pgdata", "{v}");
    assert_eq!(v["size_bytes"], 64u64 << 20, "{v}");
    // The global flag works before the command too.
    let list = json_of(&srv.cli(&["--json", "volume", "list"]));
    assert_eq!(names(&list), ["vol0", "pgdata"], "{list}");
    assert_eq!(names(&j(&["volume", "ls"])), ["vol0", "pgdata"]);
    assert_eq!(j(&["volume", "info", "pgdata"])["name"], "pgdata");
    let v = j(&["volume", "resize", "pgdata", "--size", "128M"]);
    assert_eq!(v["size_bytes"], 128u64 << 20, "{v}");

    // Snapshots are VOLUME@SNAPSHOT; the short name finds the one snapshot that has it.
    let v = j(&["snapshot", "create", "pgdata", "mon"]);
    assert_eq!(v["name"], "pgdata@mon", "{v}");
    assert_eq!(v["short_name"], "mon", "{v}");
    assert_eq!(names(&j(&["snapshot", "list"])), ["pgdata@mon"]);
    assert_eq!(names(&j(&["snapshot", "ls", "pgdata"])), ["pgdata@mon"]);
    assert_eq!(j(&["snapshot", "info", "mon"])["volume"], "pgdata");
    assert_eq!(j(&["clone", "create", "mon", "dev"])["name"], "dev");
    let v = j(&["volume", "refresh", "dev", "--to", "mon", "--yes"]);
    assert_eq!(v["origin"], "pgdata@mon", "{v}");
    j(&["snapshot", "create", "pgdata", "tue"]);
    // One argument, as zfs and rbd take it.
    let v = j(&["snapshot", "create", "pgdata@wed"]);
    assert_eq!(
        (&v["name"], &v["short_name"]),
        (&json!("pgdata@wed"), &json!("wed")),
        "{v}"
    );
    assert_eq!(
        j(&["snapshot", "rm", "pgdata@wed", "--yes"])["deleted"],
        "snapshot"
    );
    assert_exit(
        &srv.cli(&["snapshot", "create", "pgdata"]),
        2,
        "a snapshot without a name",
    );
    assert_exit(
        &srv.cli(&["snapshot", "create", "pgdata@wed", "thu"]),
        2,
        "a snapshot named twice",
    );
    let v = j(&["volume", "rollback", "pgdata", "--to", "tue", "-y"]);
    assert_eq!(v["origin"], "pgdata@tue", "{v}");

    let v = j(&["host", "create", "db1", "--iqn", "iqn.2026-11.test:db1"]);
    assert_eq!(v["name"], "db1", "{v}");
    assert_eq!(names(&j(&["host", "list"])), ["db1"]);
    assert_eq!(names(&j(&["host", "ls"])), ["db1"]);
    assert_eq!(j(&["host", "info", "db1"])["name"], "db1");
    let v = j(&["volume", "map", "pgdata", "--host", "db1"]);
    assert_eq!(v["lun"], 0, "{v}");
    // volume info and list say who sees the volume, under which LUN, and the URI to log in to.
    let array = j(&["host", "info", "db1"])["iscsi_target"].clone();
    let uri = format!(
        "iscsi://{}/{}/0",
        srv.iscsi.unwrap(),
        array.as_str().unwrap()
    );
    let info = j(&["volume", "info", "pgdata"]);
    assert_eq!(
        info["hosts"],
        json!([{"host": "db1", "lun": 0, "iscsi_uri": uri}]),
        "{info}"
    );
    let human = srv.cli_ok(&["volume", "info", "pgdata"]);
    assert!(human.contains(&format!("  db1: LUN 0, {uri}")), "{human}");
    assert!(human.contains("hosts        1 host"), "{human}");
    assert!(human.contains("allocated    "), "{human}");
    assert!(human.contains("iscsi uri    iscsi://"), "{human}");
    let list = srv.cli_ok(&["volume", "list"]);
    let row = list
        .lines()
        .find(|l| l.starts_with("pgdata "))
        .expect("a pgdata row");
    assert!(row.contains(" db1:0 "), "{list}");
    assert!(list.lines().next().unwrap().contains("ALLOCATED"), "{list}");
    j(&["volume", "map", "pgdata@tue", "--host", "db1", "--lun", "3"]);
    // host ls has a header row; host info's LUN lines are aligned columns.
    let ls = srv.cli_ok(&["host", "ls"]);
    let mut lines = ls.lines();
    assert!(
        lines.next().unwrap().starts_with("HOST  LUNS  CHAP"),
        "{ls}"
    );
    assert!(lines.next().unwrap().starts_with("db1      2  "), "{ls}");
    let info = srv.cli_ok(&["host", "info", "db1"]);
    let luns: Vec<&str> = info.lines().filter(|l| l.starts_with("  LUN ")).collect();
    assert_eq!(luns.len(), 2, "{info}");
    assert!(
        luns[0].starts_with("  LUN   0  pgdata      read-write  iscsi://"),
        "{info}"
    );
    assert!(
        luns[1].starts_with("  LUN   3  pgdata@tue  read-only   iscsi://"),
        "{info}"
    );
    let snap = j(&["snapshot", "info", "pgdata@tue"]);
    assert_eq!(snap["hosts"][0]["lun"], 3, "{snap}");
    j(&["volume", "unmap", "pgdata@tue", "--host", "db1"]);
    let v = j(&["volume", "unmap", "pgdata", "--host", "db1"]);
    assert_eq!(v["unmapped"], "pgdata", "{v}");
    assert_eq!(j(&["host", "rm", "db1"])["deleted"], "host");

    assert!(j(&["stats"])["reduction"].is_object());
    // Two named figures where one "write amplification" was, and the GC lines help promises.
    let human = srv.cli_ok(&["stats"]);
    for line in [
        "disk per host    ",
        "GC amplification ",
        "gc               ",
    ] {
        assert!(
            human.lines().any(|l| l.starts_with(line)),
            "no {line:?} line:\n{human}"
        );
    }
    assert!(
        human.contains(" run") && human.contains(" reclaimed, ") && human.contains(" freed"),
        "{human}"
    );
    // The space line says what `weft status` says, never "unlimited" beside a file system.
    let space = human
        .lines()
        .find(|l| l.starts_with("space "))
        .unwrap_or("");
    assert!(
        space.contains(" used, ") && space.contains(" weft can fill"),
        "{human}"
    );
    assert!(!human.contains("unlimited"), "{human}");
    // The local d.node of cluster status has the size of its file system, not 0 B.
    let status = srv.cli_ok(&["cluster", "status"]);
    let local = status
        .lines()
        .find(|l| l.trim_start().starts_with("local "))
        .unwrap_or_else(|| panic!("no local d.node line:\n{status}"));
    assert!(!local.contains("/ 0 B"), "{status}");
    let cluster = j(&["cluster", "status"]);
    let (fs_size, _) = df(&srv.data_dir);
    assert_eq!(
        cluster["nodes"][0]["capacity_bytes"], fs_size,
        "the local store's file system: {cluster}"
    );
    let top = j(&["top"]);
    assert!(top.is_object() || top.is_array(), "top --json: {top}");
    assert_eq!(j(&["sync"])["synced"], true);
    assert!(j(&["gc"]).is_object());
    assert_eq!(j(&["checkpoint"])["checkpointed"], true);
    assert_eq!(j(&["cluster", "status"])["mode"], "single-process");
    assert!(j(&["cluster", "scrub"])["checked"].is_u64());
    assert_eq!(j(&["cluster", "repair"])["scan"], "started");
    let v = j(&["cluster", "repair", "--rate", "100M"]);
    assert_eq!(v["rate_bytes_per_s"], 100u64 << 20, "{v}");

    let st = j(&["status"]);
    assert_eq!(st["reachable"], true, "{st}");
    assert_eq!(st["volumes"], 3, "{st}");
    assert_eq!(st["snapshots"], 2, "{st}");
    assert_eq!(st["nbd"], srv.nbd.to_string(), "{st}");
    assert_eq!(st["cluster"]["mode"], "single-process", "{st}");

    let v = j(&["volume", "delete", "dev", "--yes"]);
    assert!(v["deleted"] == "volume" && v["name"] == "dev", "{v}");
    let v = j(&["snapshot", "rm", "mon", "--yes"]);
    assert!(v["deleted"] == "snapshot" && v["name"] == "mon", "{v}");
    let v = j(&["volume", "rm", "pgdata", "--with-snapshots", "--yes"]);
    assert_eq!(v["with_snapshots"], true, "{v}");
    assert_eq!(names(&j(&["volume", "list"])), ["vol0"]);
    assert!(names(&j(&["snapshot", "list"])).is_empty());
}

#[test]
fn exit_codes_tell_failures_apart() {
    let srv = Server::start_with("contract-exit", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("exit_codes_tell_failures_apart") {
        return;
    }
    assert_exit(&srv.cli(&["volume", "info", "vol0"]), 0, "success");

    // usage: clap's own, and values the server refuses (HTTP 400)
    assert_exit(
        &srv.cli(&["volume", "create", "x"]),
        USAGE,
        "missing --size",
    );
    assert_exit(
        &srv.cli(&["volume", "frobnicate"]),
        USAGE,
        "unknown command",
    );
    assert_exit(
        &srv.cli(&["volume", "ls", "--bogus"]),
        USAGE,
        "unknown flag",
    );
    let bad = srv.cli(&["volume", "create", "bad/name", "--size", "1M"]);
    assert_exit(&bad, USAGE, "invalid name (HTTP 400)");
    assert!(bad.stderr.contains("400"), "{}", bad.all());
    assert_exit(
        &srv.cli(&["pool", "create", "p"]),
        USAGE,
        "pool without redundancy",
    );

    // not found (HTTP 404)
    for args in [
        &["volume", "info", "nosuch"][..],
        &["volume", "delete", "nosuch", "--yes"],
        &["volume", "resize", "nosuch", "--size", "1G"],
        &["snapshot", "info", "nosuch"],
        &["snapshot", "create", "nosuch", "s"],
        &["clone", "create", "nosuch", "c"],
        &["host", "info", "nosuch"],
        &["host", "delete", "nosuch"],
    ] {
        let out = srv.cli(args);
        assert_exit(&out, NOT_FOUND, "not found");
        assert!(out.stderr.contains("404"), "{}", out.all());
    }
    // a 404 found while gathering the facts to ask about is a 404 too
    assert_exit(
        &srv.cli(&["--json", "volume", "info", "nosuch"]),
        NOT_FOUND,
        "not found with --json",
    );

    // conflict (HTTP 409)
    srv.cli_ok(&["snapshot", "create", "vol0", "s1"]);
    for args in [
        &["volume", "create", "vol0", "--size", "64M"][..],
        &["snapshot", "create", "vol0", "s1"],
        &["volume", "delete", "vol0", "--yes"],
        &["pool", "list"],
        &["dnode", "list"],
    ] {
        let out = srv.cli(args);
        assert_exit(&out, CONFLICT, "conflict");
        assert!(out.stderr.contains("409"), "{}", out.all());
    }

    // a wrong token (HTTP 401)
    assert_exit(
        &cli_with(&srv.api, "not-the-token", &["volume", "list"]),
        DENIED,
        "wrong token",
    );

    // no server: none in the data dir, or nothing listening where it was said to be
    let empty = Scratch::new("contract-empty");
    assert_exit(
        &cli_in(empty.path(), &["volume", "list"]),
        UNREACHABLE,
        "no serve.json",
    );
    let closed = format!("http://127.0.0.1:{}", closed_port());
    assert_exit(
        &cli_with(&closed, "t", &["volume", "list"]),
        UNREACHABLE,
        "nothing listening",
    );
    // status says so on stdout too, as JSON for scripts
    let out = cli_with(&closed, "t", &["status", "--json"]);
    assert_exit(&out, UNREACHABLE, "status of a server that is down");
    let v: Value = serde_json::from_str(&out.stdout).expect("status --json prints JSON");
    assert_eq!(v["reachable"], false, "{v}");
    let out = cli_in(empty.path(), &["status"]);
    assert_exit(&out, UNREACHABLE, "status without a server");
    assert!(out.stdout.contains("NOT reachable"), "{}", out.all());

    // the codes are documented where users look
    let help = cli_in(empty.path(), &["--help"]);
    assert_exit(&help, 0, "help");
    for line in ["Exit codes", "3  no server", "4  not found", "5  conflict"] {
        assert!(
            help.stdout.contains(line),
            "--help lacks {line:?}:\n{}",
            help.stdout
        );
    }
}

#[test]
fn destructive_commands_refuse_without_a_terminal_and_yes() {
    let srv = Server::start_with("contract-yes", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("destructive_commands_refuse_without_a_terminal_and_yes") {
        return;
    }
    srv.cli_ok(&["snapshot", "create", "vol0", "s1"]);
    srv.cli_ok(&["clone", "create", "s1", "c1"]);
    let catalog = || {
        (
            srv.cli(&["volume", "list", "--json"]).stdout,
            srv.cli(&["snapshot", "list", "--json"]).stdout,
        )
    };
    let before = catalog();
    // stdin is /dev/null here (common::Bg), as in cron or a pipeline
    for args in [
        &["volume", "delete", "c1"][..],
        &["volume", "rm", "c1", "--json"],
        &["volume", "delete", "vol0", "--with-snapshots"],
        &["volume", "rollback", "vol0", "--to", "s1"],
        &["volume", "refresh", "c1", "--to", "s1"],
        &["snapshot", "delete", "s1", "--keep-hidden"],
        &["snapshot", "rm", "s1"],
    ] {
        let out = srv.cli(args);
        assert_exit(&out, USAGE, "destructive without --yes off a terminal");
        assert!(
            out.stderr.contains("--yes") && out.stderr.contains("terminal"),
            "the refusal should say why and what to pass: {}",
            out.all()
        );
        assert!(out.stdout.is_empty(), "{}", out.all());
    }
    assert_eq!(catalog(), before, "a refused command changed something");
    // ... and with --yes they act
    srv.cli_ok(&["volume", "rm", "c1", "-y"]);
    srv.cli_ok(&["snapshot", "delete", "s1", "--yes"]);
    assert!(names(&srv.cli_json(&["snapshot", "list", "--json"])).is_empty());
}

#[test]
fn destructive_commands_ask_on_a_terminal_with_the_facts() {
    let srv = Server::start_with("contract-ask", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("destructive_commands_ask_on_a_terminal_with_the_facts") {
        return;
    }
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "1536G"]);
    for s in ["mon", "tue", "wed"] {
        srv.cli_ok(&["snapshot", "create", "pgdata", s]);
    }
    let Some((code, text)) = on_terminal(&srv, &["volume", "delete", "pgdata"], "n\n") else {
        eprintln!("SKIPPED: util-linux `script` is not installed");
        return;
    };
    assert!(
        text.contains("Delete volume pgdata (1.5 TiB, 3 snapshots)? [y/N]"),
        "{text}"
    );
    assert_eq!(code, Some(1), "answered no: {text}");
    assert!(names(&srv.cli_json(&["volume", "list", "--json"])).contains(&"pgdata".into()));

    let (code, text) = on_terminal(
        &srv,
        &["volume", "rollback", "pgdata", "--to", "mon"],
        "y\n",
    )
    .expect("script");
    assert!(
        text.contains("Roll back volume pgdata (1.5 TiB) to snapshot mon (taken 20"),
        "{text}"
    );
    assert!(text.contains("Z)?"), "the time says its zone: {text}");
    assert_eq!(code, Some(0), "{text}");
    // Rolled back, not cloned: the list says so beside the origin.
    let ls = srv.cli_ok(&["volume", "ls"]);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("pgdata ") && l.contains(" pgdata@mon (rollback) ")),
        "{ls}"
    );

    let args = ["volume", "delete", "pgdata", "--with-snapshots"];
    let (code, text) = on_terminal(&srv, &args, "y\n").expect("script");
    assert!(
        text.contains(
            "Delete volume pgdata (1.5 TiB) and its 3 snapshots (pgdata@mon, pgdata@tue, pgdata@wed)?"
        ),
        "{text}"
    );
    assert_eq!(code, Some(0), "{text}");
    assert_eq!(
        names(&srv.cli_json(&["volume", "list", "--json"])),
        ["vol0"]
    );
}

/// `weft volume info pg | head -1`: the reader goes away; weft ends on SIGPIPE as any filter
/// does, without the panic and backtrace it printed before.
#[test]
fn a_closed_pipe_ends_a_listing_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let srv = Server::start_with("contract-pipe", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("a_closed_pipe_ends_a_listing_quietly") {
        return;
    }
    for args in [
        &["volume", "info", "vol0"][..],
        &["volume", "ls"],
        &["stats"],
    ] {
        let (reader, writer) = std::io::pipe().expect("pipe");
        drop(reader);
        let out = Command::new(weft_bin())
            .arg("--data-dir")
            .arg(&srv.data_dir)
            .args(args)
            .env_remove("WEFT_API")
            .env_remove("WEFT_TOKEN")
            .env_remove("WEFT_DATA_DIR")
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .expect("run weft");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.signal(),
            Some(13),
            "weft {args:?} did not end on SIGPIPE: {:?}\n{stderr}",
            out.status
        );
        assert!(!stderr.contains("panicked"), "weft {args:?}: {stderr}");
    }
}

#[test]
fn status_is_one_screen() {
    let srv = Server::start_with("contract-status", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("status_is_one_screen") {
        return;
    }
    let out = srv.cli_ok(&["status"]);
    for word in [
        "reachable",
        &srv.api,
        &srv.nbd.to_string(),
        "iqn.",
        "1 (64.0 MiB provisioned), 0 snapshots",
        "reduction",
        "write buffer",
        "single-process",
        &format!("weft {}", env!("CARGO_PKG_VERSION")),
    ] {
        assert!(out.contains(word), "status lacks {word:?}:\n{out}");
    }
    assert_eq!(
        srv.cli_json(&["status", "--json"])["server_version"],
        env!("CARGO_PKG_VERSION")
    );
    assert!(out.lines().count() <= 24, "more than a screen:\n{out}");
}

#[test]
fn completions_and_man_pages_come_from_the_cli_definition() {
    let dir = Scratch::new("contract-man");
    for shell in ["bash", "zsh", "fish"] {
        let out = cli_in(dir.path(), &["completions", shell]).ok();
        for word in [
            "volume",
            "snapshot",
            "rollback",
            "--with-snapshots",
            "status",
        ] {
            assert!(
                out.stdout.contains(word.trim_start_matches('-')),
                "{shell} completions lack {word}"
            );
        }
    }
    assert_exit(
        &cli_in(dir.path(), &["completions", "tcsh"]),
        USAGE,
        "unknown shell",
    );

    let man = dir.join("man1");
    cli_in(dir.path(), &["man", "--output", man.to_str().unwrap()]).ok();
    for page in [
        "weft.1",
        "weft-volume.1",
        "weft-volume-delete.1",
        "weft-snapshot-create.1",
        "weft-status.1",
        "weft-serve.1",
    ] {
        let text = std::fs::read_to_string(man.join(page))
            .unwrap_or_else(|e| panic!("man page {page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not a man page:\n{text}");
    }
    let delete = std::fs::read_to_string(man.join("weft-volume-delete.1")).unwrap();
    assert!(delete.contains("yes"), "{delete}");
    if let Some(man_bin) = which("man") {
        let mut cmd = Command::new(man_bin);
        cmd.arg("-l")
            .arg(man.join("weft-volume-delete.1"))
            .env("MANPAGER", "cat")
            .env("PAGER", "cat")
            .env("MANWIDTH", "100");
        let out = run(&mut cmd, Duration::from_secs(60)).ok();
        // (groff may render the hyphens of option names as other characters)
        assert!(out.stdout.contains("snapshots"), "{}", out.all());
    } else {
        eprintln!("man is not installed: rendering not checked");
    }
}

#[test]
fn cluster_commands_print_json_and_dnode_out_asks() {
    let _serial = serial();
    let mut opts = ClusterOpts::new(3);
    opts.redundancy = "2+1".into();
    opts.pg_count = 8;
    opts.volume_size = "64M".into();
    let (_, seed) = test_rng("cluster_commands_print_json_and_dnode_out_asks");
    let c = Cluster::start("contract-cluster", seed, opts);
    let j = |args: &[&str]| -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        json_of(&c.cli(&a))
    };
    // `cluster status` exits 0 once healthy (the first repair scan has run)...
    poll_until(Duration::from_secs(60), "a healthy cluster", || {
        let out = c.cli(&["cluster", "status"]);
        (code(&out) == Some(0)).then_some(())
    });
    let v = j(&[
        "pool",
        "create",
        "fast",
        "--replicas",
        "2",
        "--pg-count",
        "8",
    ]);
    assert_eq!(v["name"], "fast", "{v}");
    let pools = j(&["pool", "ls"]);
    assert!(names(&pools).contains(&"fast".to_string()), "{pools}");
    assert_eq!(j(&["pool", "info", "fast"])["name"], "fast");
    let nodes = j(&["dnode", "list"]);
    let ids: Vec<String> = nodes
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|n| n["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 3, "{nodes}");
    assert_eq!(j(&["dnode", "info", &ids[0]])["id"], ids[0].as_str());
    assert_exit(
        &c.cli(&["dnode", "info", "nosuch"]),
        NOT_FOUND,
        "no such d.node",
    );

    let out = c.cli(&["dnode", "out", &ids[0]]);
    assert_exit(&out, USAGE, "dnode out without --yes off a terminal");
    let state_of = |id: &str| -> Value {
        let list = j(&["dnode", "list"]);
        let n = list
            .as_array()
            .unwrap()
            .iter()
            .find(|n| n["id"] == id)
            .cloned();
        n.unwrap_or_else(|| panic!("{id} not listed: {list}"))["state"].clone()
    };
    assert_eq!(state_of(&ids[0]), "up", "a refused out changed the d.node");
    let v = j(&["dnode", "out", &ids[0], "--yes"]);
    assert_eq!(v["id"], ids[0].as_str(), "{v}");
    let v = j(&["dnode", "in", &ids[0]]);
    assert_eq!(v["id"], ids[0].as_str(), "{v}");
    let out = c.cli(&["cluster", "status", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(v["mode"], "cluster");
    let st = j(&["status"]);
    assert_eq!(st["cluster"]["mode"], "cluster", "{st}");
    let out = c.cli_ok(&["status"]);
    assert!(out.contains("d.nodes       3:"), "{out}");

    // ...and 7 (documented) with a pool whose PGs need more d.nodes than there are, saying
    // what is missing and what to do, in JSON too.
    j(&["pool", "create", "wide", "--ec", "3+1", "--pg-count", "4"]);
    // The monitor maps the new pool's PGs at its next round.
    let out = poll_until(
        Duration::from_secs(30),
        "the wide pool's PGs mapped",
        || {
            let out = c.cli(&["cluster", "status"]);
            out.stdout
                .contains("4 PGs: 0 healthy, 0 degraded, 4 incomplete")
                .then_some(out)
        },
    );
    assert_exit(&out, 7, "cluster status with incomplete PGs");
    assert!(
        out.stderr.contains("NOT healthy") && out.stderr.contains("pool wide: 4 PGs incomplete"),
        "{}",
        out.all()
    );
    assert!(out.stdout.contains("min_size 4, 4 PGs:"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("hint: pool wide: 3+1 puts each PG on 4 d.nodes")
            && out.stdout.contains("add 1 d.node"),
        "{}",
        out.stdout
    );
    let out = c.cli(&["cluster", "status", "--json"]);
    assert_exit(&out, 7, "cluster status --json with incomplete PGs");
    let v: Value = serde_json::from_str(&out.stdout).expect("JSON before the exit code");
    assert_eq!(v["healthy"], false, "{v}");
    assert!(
        weft_cli_help().contains("  7  cluster status: the cluster answered but is NOT healthy")
    );
}
