//! `weft bench` and the data it could destroy, through the `weft` binary against `weft serve`:
//! a plan that writes to an NBD export or an iSCSI LUN is refused without `--allow-destructive`
//! (exit 2, nothing written); `--create-volume SIZE` benches a volume made for the run, over
//! NBD or iSCSI, prefilled first, and deletes it afterwards: after a run, after a failed run,
//! and after Ctrl-C; a read run on a thin volume over iSCSI finds its unwritten ranges (GET
//! LBA STATUS), warns, and writes nothing without the flag.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use serde_json::Value;

/// Short points: what the bench does to volumes is tested, not the numbers.
const QUICK: &[&str] = &[
    "--duration",
    "300ms",
    "--warmup",
    "0s",
    "--no-progress",
    "--qd",
    "1,4",
    "--large-qd",
    "1",
];

fn code(out: &CmdOut) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

/// `weft bench ARGS... QUICK -o PREFIX` against the server.
fn bench(srv: &Server, prefix: &Path, args: &[&str]) -> CmdOut {
    let mut all = vec!["bench"];
    all.extend_from_slice(args);
    all.extend_from_slice(QUICK);
    all.extend_from_slice(&["-o", prefix.to_str().unwrap()]);
    srv.cli(&all)
}

fn results(prefix: &Path) -> Value {
    let text = std::fs::read_to_string(prefix.with_extension("json")).expect("a result file");
    serde_json::from_str(&text).expect("results are JSON")
}

fn volume_names(srv: &Server) -> Vec<String> {
    srv.cli_json(&["volume", "list", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

fn mapped_bytes(srv: &Server, volume: &str) -> u64 {
    let v = srv.cli_json(&["volume", "info", volume, "--json"]);
    v["space"]["mapped_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{v}"))
}

fn iscsi_uri(srv: &Server, volume: &str) -> String {
    let portal = srv.iscsi.expect("an iSCSI portal");
    format!("iscsi://{portal}/iqn.2026-11.dev.weft:{volume}/0")
}

#[test]
fn writes_to_an_export_need_allow_destructive_over_nbd_and_iscsi() {
    const TEST: &str = "writes_to_an_export_need_allow_destructive_over_nbd_and_iscsi";
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let prefix = srv.scratch.join("refused");
    for (uri, plan) in [
        (srv.nbd_uri("vol0"), &["--mode", "oltp"][..]),
        (srv.nbd_uri("vol0"), &["--mode", "dss", "-w", "100"]),
        (iscsi_uri(&srv, "vol0"), &["--mode", "oltp", "-w", "10"]),
    ] {
        let mut args = vec![uri.as_str()];
        args.extend_from_slice(plan);
        let out = bench(&srv, &prefix, &args);
        assert_eq!(code(&out), Some(2), "{}", out.all());
        for word in [
            "destroys what it holds",
            "--allow-destructive",
            "--create-volume",
        ] {
            assert!(out.stderr.contains(word), "lacks {word:?}: {}", out.all());
        }
    }
    assert_eq!(mapped_bytes(&srv, "vol0"), 0, "a refused bench wrote");
    assert!(!prefix.with_extension("json").exists());
    // With the flag it writes.
    let out = bench(
        &srv,
        &prefix,
        &[
            &srv.nbd_uri("vol0"),
            "--mode",
            "oltp",
            "-w",
            "100",
            "--allow-destructive",
        ],
    );
    assert!(out.success(), "{}", out.all());
    assert!(mapped_bytes(&srv, "vol0") > 0);
}

#[test]
fn create_volume_benches_a_volume_of_its_own_and_always_deletes_it() {
    const TEST: &str = "create_volume_benches_a_volume_of_its_own_and_always_deletes_it";
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }

    // Over NBD, a plan that writes: no --allow-destructive needed; prefilled, then deleted.
    let prefix = srv.scratch.join("nbd");
    let out = bench(&srv, &prefix, &["--create-volume", "64M", "--mode", "oltp"]);
    assert!(out.success(), "{}", out.all());
    assert!(
        out.stderr.contains("created volume bench-"),
        "{}",
        out.all()
    );
    assert!(
        out.stderr.contains("deleted volume bench-"),
        "{}",
        out.all()
    );
    let v = results(&prefix);
    assert_eq!(v["target"]["kind"], "nbd");
    assert!(
        v["target"]["uri"].as_str().unwrap().contains("/bench-"),
        "{}",
        v["target"]
    );
    assert_eq!(v["target"]["size_bytes"], 64u64 << 20);
    let u = &v["unwritten"];
    assert_eq!(u["method"], "nbd base:allocation", "{u}");
    assert_eq!(u["prefilled_bytes"], 64u64 << 20, "{u}");
    assert_eq!(u["measured_bytes"], 0, "{u}");
    assert!(u["warning"].is_null(), "{u}");
    for p in v["points"].as_array().unwrap() {
        assert!(p["total"]["ios"].as_u64().unwrap() > 0, "no I/O: {p}");
    }
    assert_eq!(volume_names(&srv), ["vol0"]);
    let log = srv.server_output();
    assert!(
        log.contains("volume created"),
        "the server saw no volume made"
    );

    // Over iSCSI: GET LBA STATUS finds the new volume unwritten; prefilled, then deleted.
    let prefix = srv.scratch.join("iscsi");
    let out = bench(
        &srv,
        &prefix,
        &["--create-volume", "64M", "--protocol", "iscsi"],
    );
    assert!(out.success(), "{}", out.all());
    let v = results(&prefix);
    assert_eq!(v["target"]["kind"], "iscsi");
    let u = &v["unwritten"];
    assert_eq!(u["method"], "iscsi GET LBA STATUS", "{u}");
    assert_eq!(u["before_bytes"], 64u64 << 20, "{u}");
    assert_eq!(u["prefilled_bytes"], 64u64 << 20, "{u}");
    assert_eq!(u["measured_bytes"], 0, "{u}");
    assert_eq!(volume_names(&srv), ["vol0"]);

    // A run that fails after the volume was made still deletes it.
    let prefix = srv.scratch.join("failed");
    let out = bench(
        &srv,
        &prefix,
        &["--create-volume", "64M", "--region", "0-200%"],
    );
    assert_eq!(code(&out), Some(2), "{}", out.all());
    assert!(out.stderr.contains("outside the device"), "{}", out.all());
    assert!(
        out.stderr.contains("deleted volume bench-"),
        "{}",
        out.all()
    );
    assert_eq!(volume_names(&srv), ["vol0"]);

    // Ctrl-C: the run stops, writes no results, and the volume goes.
    let prefix = srv.scratch.join("interrupted");
    let mut cmd = std::process::Command::new(weft_bin());
    cmd.arg("--data-dir")
        .arg(&srv.data_dir)
        .args(["bench", "--create-volume", "64M", "--duration", "20s"])
        .args(["--warmup", "0s", "--no-progress", "-o"])
        .arg(&prefix);
    let mut running = Bg::spawn(&mut cmd);
    poll_until(
        Duration::from_secs(30),
        "the bench to start its points",
        || {
            assert!(
                running.try_wait().is_none(),
                "the bench ended early:\n{}",
                running.all_so_far()
            );
            running.all_so_far().contains("prefilled").then_some(())
        },
    );
    assert_eq!(
        volume_names(&srv).len(),
        2,
        "the bench's volume exists while it runs"
    );
    std::thread::sleep(Duration::from_millis(300));
    running.signal("INT");
    let out = running.wait(Duration::from_secs(30));
    assert_eq!(code(&out), Some(130), "{}", out.all());
    assert!(
        out.stderr.contains("deleted volume bench-"),
        "{}",
        out.all()
    );
    assert!(!prefix.with_extension("json").exists());
    assert_eq!(volume_names(&srv), ["vol0"]);
}

#[test]
fn reads_of_a_thin_volume_over_iscsi_are_warned_about() {
    const TEST: &str = "reads_of_a_thin_volume_over_iscsi_are_warned_about";
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    srv.cli_ok(&["volume", "create", "thin", "--size", "128M"]);
    let prefix = srv.scratch.join("thin");
    let out = bench(&srv, &prefix, &[&iscsi_uri(&srv, "thin")]);
    assert!(out.success(), "{}", out.all());
    assert!(
        out.stdout
            .contains("warning: 128.0 MiB of the 128.0 MiB measured (100.0%) was never written"),
        "{}",
        out.all()
    );
    let u = results(&prefix)["unwritten"].clone();
    assert_eq!(u["method"], "iscsi GET LBA STATUS", "{u}");
    assert_eq!(u["measured_bytes"], 128u64 << 20, "{u}");
    assert!(
        u["prefill_skipped"]
            .as_str()
            .unwrap()
            .contains("--allow-destructive"),
        "{u}"
    );
    assert_eq!(mapped_bytes(&srv, "thin"), 0, "a read run wrote");
}
