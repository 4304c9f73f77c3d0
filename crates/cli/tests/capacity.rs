//! True capacity through the real `weft` binary: `weft status` (screen and `--json`),
//! `GET /api/v1/capacity` and `/metrics` report the file system under the data dir once (the
//! data dir and the local chunk store share it), with the size and free space `df` gives;
//! what a `--capacity` limit leaves; the overcommit of the provisioned volumes; a growth
//! rate and days to full once data is written; and the warnings at 80 % and 90 %.
//!
//! Needs `df` (coreutils).

mod common;

use std::time::Duration;

use common::*;
use rand::RngCore;
use serde_json::Value;

const GIB: u64 = 1 << 30;
/// The data dir's file system is shared with the rest of the machine: its free space may
/// move between our `df` and the server's statvfs.
const FREE_SLACK_BYTES: u64 = 256 * MIB;

fn capacity(srv: &Server) -> Value {
    let status = srv.cli_json(&["status", "--json"]);
    let c = status["capacity"].clone();
    assert!(
        c.is_object(),
        "weft status --json has no capacity: {status:#}"
    );
    c
}

fn u(v: &Value) -> u64 {
    v.as_u64()
        .unwrap_or_else(|| panic!("not a byte count: {v}"))
}

fn close(a: u64, b: u64, slack: u64) -> bool {
    a.abs_diff(b) <= slack
}

/// The sample of `/metrics` named exactly `name` (no labels).
fn metric(srv: &Server, name: &str) -> Option<f64> {
    let url = srv.metrics.as_deref().expect("a metrics listener");
    let base = url.trim_end_matches("/metrics");
    let (status, text) = api_request(base, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{text}");
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.trim().parse().expect("a number"))
}

#[test]
fn status_reports_the_data_dirs_file_system_once_with_a_limit_overcommit_and_growth() {
    const TEST: &str =
        "status_reports_the_data_dirs_file_system_once_with_a_limit_overcommit_and_growth";
    let srv = Server::start_with(
        TEST,
        ServeOpts::default()
            .volume_size("256M")
            .arg("--capacity")
            .arg("1G"),
    );
    if srv.skip_without_api(TEST) {
        return;
    }
    srv.cli_ok(&["volume", "create", "big", "--size", "3G"]);

    let c = capacity(&srv);
    // The data dir and the chunk store under it: one file system, listed once, as df sees it.
    let fss = c["filesystems"].as_array().expect("filesystems");
    assert_eq!(fss.len(), 1, "one file system: {c:#}");
    let fs = &fss[0];
    let paths: Vec<&str> = fs["paths"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(paths.len(), 2, "{paths:?}");
    assert!(
        paths[0].starts_with("data dir ") && paths[1].starts_with("local "),
        "{paths:?}"
    );
    let (df_size, df_free) = df(&srv.data_dir);
    assert_eq!(u(&fs["size_bytes"]), df_size, "size as df says: {fs:#}");
    assert!(
        close(u(&fs["free_bytes"]), df_free, FREE_SLACK_BYTES),
        "free {fs:#} vs df {df_free}"
    );

    // The limit caps the room (when the file system has more); raw = used + free.
    let (used, free, raw) = (u(&c["used_bytes"]), u(&c["free_bytes"]), u(&c["raw_bytes"]));
    assert_eq!(raw, used + free);
    if df_free > GIB + FREE_SLACK_BYTES {
        // Less the room kept for sealing and GC, which writes never get.
        assert_eq!(
            raw + u(&c["reserved_bytes"]),
            GIB,
            "the --capacity limit: {c:#}"
        );
        assert!(u(&c["reserved_bytes"]) > 0);
    }
    assert_eq!(c["redundancy"], "none");
    assert_eq!(u(&c["usable_bytes"]), raw);
    // 256 MiB + 3 GiB provisioned over the usable space.
    let provisioned = 256 * MIB + 3 * GIB;
    assert_eq!(u(&c["provisioned_bytes"]), provisioned);
    let overcommit = c["overcommit"].as_f64().expect("overcommit");
    assert!(
        (overcommit - provisioned as f64 / raw as f64).abs() < 1e-6,
        "{c:#}"
    );

    // Write 48 MiB of incompressible data: used grows, and so does the measured growth.
    let mut nbd = srv.nbd_client("vol0");
    let mut rng = test_rng(TEST).0;
    let mut chunk = vec![0u8; MIB as usize];
    for i in 0..48 {
        rng.fill_bytes(&mut chunk);
        nbd.write(i * MIB, &chunk).unwrap();
    }
    nbd.flush().unwrap();
    nbd.disconnect();
    srv.cli_ok(&["sync"]);
    std::thread::sleep(Duration::from_millis(1100));
    let c = capacity(&srv);
    let used_after = u(&c["used_bytes"]);
    assert!(
        used_after >= used + 40 * MIB,
        "used {used} -> {used_after}: {c:#}"
    );
    let growth = c["growth_bytes_per_day"].as_f64().expect("a growth rate");
    assert!(growth > 0.0, "{c:#}");
    assert!(c["growth_window_s"].as_u64().unwrap() >= 1);
    let days = c["days_to_full"]
        .as_f64()
        .expect("days to full while growing");
    let expected = u(&c["free_bytes"]) as f64 / growth;
    assert!(
        (days - expected).abs() <= expected * 1e-6,
        "{days} vs {expected}: {c:#}"
    );

    // The screen says the same.
    let screen = srv.cli_ok(&["status"]);
    for needle in [
        "space ",
        "usable ",
        &format!("overcommit    {overcommit:.2}x"),
        "/day over the last",
        "full in ",
        "file system   ",
    ] {
        assert!(screen.contains(needle), "no {needle:?} in:\n{screen}");
    }
    // The file system is shared with whatever else runs here: its use may move between the
    // two calls, so the screen's percentage is compared within a few points.
    let shown: f64 = screen
        .lines()
        .find_map(|l| l.strip_prefix("file system   "))
        .and_then(|rest| rest.split(' ').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no file system percentage in:\n{screen}"));
    let json_percent = fs["used_percent"].as_f64().unwrap();
    assert!(
        (shown - json_percent).abs() <= 5.0,
        "the screen says {shown} % full, --json {json_percent} %:\n{screen}"
    );
    assert!(!screen.contains("no capacity limit"), "{screen}");

    // And /metrics.
    assert_eq!(metric(&srv, "weft_capacity_raw_bytes"), Some(raw as f64));
    assert_eq!(
        metric(&srv, "weft_capacity_provisioned_bytes"),
        Some(provisioned as f64)
    );
    assert!(metric(&srv, "weft_capacity_days_to_full").is_some_and(|d| d > 0.0));
}

#[test]
fn warnings_start_at_80_and_90_percent_of_the_space() {
    const TEST: &str = "warnings_start_at_80_and_90_percent_of_the_space";
    let srv = Server::start_with(
        TEST,
        ServeOpts::default()
            .volume_size("256M")
            .arg("--capacity")
            .arg("96M"),
    );
    if srv.skip_without_api(TEST) {
        return;
    }
    let (_, df_free) = df(&srv.data_dir);
    assert!(
        df_free > GIB,
        "the test needs 1 GiB free under {}",
        srv.data_dir.display()
    );
    let c = capacity(&srv);
    assert_eq!(u(&c["raw_bytes"]) + u(&c["reserved_bytes"]), 96 * MIB);
    assert!(
        !c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().starts_with("weft's space")),
        "an empty store warns: {c:#}"
    );

    // Fill it a MiB at a time to past 90 %, checking the level at every step.
    let mut nbd = srv.nbd_client("vol0");
    let mut rng = test_rng(TEST).0;
    let mut chunk = vec![0u8; MIB as usize];
    let mut seen = Vec::new();
    for i in 0..96u64 {
        rng.fill_bytes(&mut chunk);
        if nbd
            .write(i * MIB, &chunk)
            .and_then(|()| nbd.flush())
            .is_err()
        {
            break; // ENOSPC: full
        }
        srv.cli_ok(&["sync"]);
        let c = capacity(&srv);
        let pct = c["used_percent"].as_f64().unwrap();
        let ours: Vec<&str> = c["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .filter(|w| w.starts_with("weft's space"))
            .collect();
        // The file system under the test may itself be past 80 %: the level is the worst of
        // both, so only weft's own warning is checked against weft's own figure.
        assert_eq!(ours.len(), usize::from(pct >= 80.0), "{pct} %: {c:#}");
        let fs_pct = c["filesystems"][0]["used_percent"].as_f64().unwrap();
        let worst = pct.max(fs_pct);
        let level = if worst >= 90.0 {
            "critical"
        } else if worst >= 80.0 {
            "warning"
        } else {
            "ok"
        };
        assert_eq!(c["level"], level, "{pct} % / {fs_pct} %: {c:#}");
        seen.push(pct);
        if pct >= 90.0 {
            let screen = srv.cli_ok(&["status"]);
            assert!(screen.contains("weft's space is"), "{screen}");
            assert!(screen.contains("CRITICAL"), "{screen}");
            assert_eq!(metric(&srv, "weft_capacity_level"), Some(2.0));
            return;
        }
    }
    panic!("never reached 90 % of 96 MiB less the reserve; used percentages seen: {seen:?}");
}
