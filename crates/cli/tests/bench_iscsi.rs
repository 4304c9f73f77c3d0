//! `weft bench iscsi://...` against `weft serve`: weft's own benchmark initiator drives a LUN
//! like an NBD export. A short random read/write run on a volume's own target (plus 1 MiB
//! writes, which need R2Ts) reports I/O in every point and no error; a host with CHAP benches
//! its LUN on the array target; a wrong secret is refused at login with exit code 2; the
//! secret shows nowhere (terminal, JSON, HTML, the server's log); every session the benchmark
//! opened ended with a logout, not an error.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::Value;

const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";
/// The initiator name `weft bench` uses unless the URI names one.
const BENCH_INITIATOR: &str = "iqn.2026-11.dev.weft:bench";
const CHAP_SECRET: &str = "bench-secret-123";
const BENCH_TIMEOUT: Duration = Duration::from_secs(60);
/// Short points: correctness, not numbers, is tested.
const QUICK: &[&str] = &["--duration", "1s", "--warmup", "0s", "--no-progress"];
/// vol0 holds nothing of value here.
const WRITES: &str = "--allow-destructive";
/// The protocol is tested, not the prefill (`bench_volume.rs`): do not fill 1 GiB first.
const NO_PREFILL: &str = "--no-prefill";

/// `weft bench URI ARGS... -o PREFIX`: its output and the result file it wrote.
fn bench(uri: &str, prefix: &Path, args: &[&str]) -> (CmdOut, Option<Value>) {
    let mut cmd = Command::new(weft_bin());
    cmd.arg("bench")
        .arg(uri)
        .args(QUICK)
        .args(args)
        .arg("-o")
        .arg(prefix);
    let out = run(&mut cmd, BENCH_TIMEOUT);
    let json = std::fs::read_to_string(prefix.with_extension("json"))
        .ok()
        .map(|text| serde_json::from_str(&text).expect("results are JSON"));
    (out, json)
}

/// Every point did I/O, and the target is the iSCSI LUN.
fn assert_points_did_io(out: &CmdOut, results: &Value) {
    assert!(out.success(), "weft bench failed:\n{}", out.all());
    assert!(
        !out.stderr.contains("error"),
        "weft bench printed an error:\n{}",
        out.stderr
    );
    assert_eq!(results["target"]["kind"], "iscsi");
    // vol0 is 512e (the default): 512-byte logical blocks.
    assert_eq!(results["target"]["block_size_min_bytes"], 512);
    let points = results["points"].as_array().expect("points");
    assert!(!points.is_empty());
    for p in points {
        assert!(p["total"]["iops"].as_f64().unwrap() > 0.0, "no I/O: {p}");
        let write_pct = p["write_pct"].as_u64().unwrap();
        if write_pct > 0 {
            assert!(p["write"]["ios"].as_u64().unwrap() > 0, "no writes: {p}");
        }
        if write_pct < 100 {
            assert!(p["read"]["ios"].as_u64().unwrap() > 0, "no reads: {p}");
        }
    }
}

/// Every iSCSI session the server saw ended with a logout (or a refused login), none with an
/// error.
fn assert_sessions_ended_cleanly(srv: &Server) {
    let log = srv.server_output();
    let ended: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("iscsi session ended"))
        .collect();
    assert!(!ended.is_empty(), "no iSCSI session ended:\n{log}");
    for line in ended {
        assert!(!line.contains("error"), "a session ended badly: {line}");
    }
}

#[test]
fn bench_drives_a_volume_target_with_random_io_and_large_writes() {
    let srv = Server::start_with("bench-iscsi", ServeOpts::default().volume_size("1G"));
    let portal = srv.iscsi.expect("serve.json names an iSCSI portal");
    let uri = format!("iscsi://{portal}/{TARGET_PREFIX}vol0/0");
    let (out, results) = bench(
        &uri,
        &srv.scratch.join("oltp"),
        &[
            "--mode", "oltp", "--qd", "1,16", "-w", "0,30", "--small", "4k", WRITES, NO_PREFILL,
        ],
    );
    let results = results.unwrap_or_else(|| panic!("no results:\n{}", out.all()));
    assert_points_did_io(&out, &results);
    assert_eq!(results["points"].as_array().unwrap().len(), 4);
    assert_eq!(results["target"]["size_bytes"], 1u64 << 30);
    assert_eq!(results["target"]["read_only"], false);
    // 1 MiB writes outgrow the immediate data (FirstBurstLength): the rest goes on R2Ts.
    let (out, results) = bench(
        &uri,
        &srv.scratch.join("dss"),
        &[
            "--mode",
            "dss",
            "--large",
            "1m",
            "--large-qd",
            "4",
            "-w",
            "100",
            WRITES,
        ],
    );
    let results = results.unwrap_or_else(|| panic!("no results:\n{}", out.all()));
    assert_points_did_io(&out, &results);
    assert_sessions_ended_cleanly(&srv);
}

#[test]
fn bench_logs_in_with_chap_to_the_array_target() {
    let srv = Server::start_with("bench-iscsi-chap", ServeOpts::default().volume_size("1G"));
    let portal = srv.iscsi.expect("serve.json names an iSCSI portal");
    srv.cli_ok(&[
        "host",
        "create",
        "b1",
        "--iqn",
        BENCH_INITIATOR,
        "--chap-user",
        "b1",
        "--chap-secret",
        CHAP_SECRET,
    ]);
    srv.cli_ok(&["volume", "map", "vol0", "--host", "b1"]);
    let info = srv.cli_json(&["host", "info", "b1", "--json"]);
    let array_target = info["iscsi_target"].as_str().expect("iscsi_target");
    let uri = format!("iscsi://b1%{CHAP_SECRET}@{portal}/{array_target}/0");
    let prefix = srv.scratch.join("chap");
    let (out, results) = bench(
        &uri,
        &prefix,
        &[
            "--mode", "oltp", "--qd", "8", "-w", "50", "--small", "8k", WRITES, NO_PREFILL,
        ],
    );
    let results = results.unwrap_or_else(|| panic!("no results:\n{}", out.all()));
    assert_points_did_io(&out, &results);
    assert_eq!(
        results["target"]["uri"],
        format!("iscsi://b1%***@{portal}/{array_target}/0")
    );
    // A wrong secret is refused at login: a usage error naming the cause.
    let (wrong, _) = bench(
        &format!("iscsi://b1%not-the-secret-0@{portal}/{array_target}/0"),
        &srv.scratch.join("wrong"),
        &["--mode", "oltp", "--qd", "1", "-w", "0"],
    );
    assert_eq!(
        wrong.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        wrong.all()
    );
    assert!(
        wrong
            .stderr
            .contains("authentication failure (status 0x0201)"),
        "{}",
        wrong.stderr
    );
    // Without credentials the message says what to add.
    let (none, _) = bench(
        &format!("iscsi://{portal}/{array_target}/0"),
        &srv.scratch.join("none"),
        &["--mode", "oltp", "--qd", "1", "-w", "0"],
    );
    assert_eq!(
        none.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        none.all()
    );
    assert!(none.stderr.contains("requires CHAP"), "{}", none.stderr);
    // The secret reaches no output, result file or log.
    let mut seen = vec![out.all(), wrong.all(), none.all(), srv.server_output()];
    for ext in ["json", "csv", "html"] {
        seen.push(std::fs::read_to_string(prefix.with_extension(ext)).unwrap());
    }
    for text in seen {
        assert!(!text.contains(CHAP_SECRET), "the secret leaked:\n{text}");
    }
    assert_sessions_ended_cleanly(&srv);
}
