//! The NBD listener against real clients: libnbd's nbdinfo, qemu-img, qemu-io and fio's nbd
//! engine. Each test is skipped with a printed message when its tool is not installed.

#[path = "nbd_support/harness.rs"]
mod harness;
#[path = "nbd_support/memory_backend.rs"]
mod memory_backend;

use std::process::Command;

use harness::{have_tool, run_ok, TestServer};

#[test]
fn nbdinfo_lists_exports_and_reports_flags_size_and_block_size() {
    if !have_tool("nbdinfo") {
        return;
    }
    let server = TestServer::start_default();
    let list = run_ok(Command::new("nbdinfo").arg("--list").arg(server.uri("")));
    for name in [
        "export=\"disk\"",
        "export=\"small\"",
        "export=\"ro\"",
        "base:allocation",
    ] {
        assert!(list.contains(name), "{name} missing from:\n{list}");
    }

    let json = run_ok(Command::new("nbdinfo").arg("--json").arg(server.uri("ro")));
    let v: serde_json::Value = serde_json::from_str(&json).expect("nbdinfo json");
    let export = &v["exports"][0];
    assert_eq!(export["export-size"], 1 << 20);
    assert_eq!(export["is_read_only"], true);
    assert_eq!(export["can_flush"], true);
    assert_eq!(export["can_fua"], true);
    assert_eq!(export["can_trim"], true);
    assert_eq!(export["can_zero"], true);
    assert_eq!(export["can_multi_conn"], true);
    assert_eq!(export["can_fast_zero"], false);
    assert_eq!(export["block_size_minimum"], 4096);
    assert_eq!(export["block_size_preferred"], 4096);
    assert_eq!(export["block_size_maximum"], 32 << 20);
    assert_eq!(v["structured"], true);

    let json = run_ok(Command::new("nbdinfo").arg("--json").arg(server.uri("")));
    let v: serde_json::Value = serde_json::from_str(&json).expect("nbdinfo json");
    assert_eq!(
        v["exports"][0]["export-size"],
        64 << 20,
        "empty name is the default export"
    );
    assert_eq!(v["exports"][0]["is_read_only"], false);

    let missing = Command::new("nbdinfo")
        .arg(server.uri("nope"))
        .output()
        .expect("nbdinfo");
    assert!(!missing.status.success(), "unknown export fails");
}

#[test]
fn qemu_img_convert_round_trips_a_random_image() {
    if !have_tool("qemu-img") {
        return;
    }
    let server = TestServer::start_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let src = dir.path().join("src.raw");
    let back = dir.path().join("back.raw");
    let mut data = vec![0u8; 64 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for (i, chunk) in data.chunks_mut(8).enumerate() {
        // Leave some zero runs so qemu exercises write-zeroes / trim paths.
        if (i / 4096) % 5 == 3 {
            continue;
        }
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes());
    }
    std::fs::write(&src, &data).expect("write src");
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(server.uri("disk")),
    );
    run_ok(
        Command::new("qemu-img")
            .args(["convert", "-f", "raw", "-O", "raw"])
            .arg(server.uri("disk"))
            .arg(&back),
    );
    let got = std::fs::read(&back).expect("read back");
    assert!(got == data, "image differs after the round trip");
    let cmp = run_ok(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(server.uri("disk")),
    );
    assert!(cmp.contains("identical"), "{cmp}");
}

#[test]
fn qemu_io_writes_and_reads_a_pattern() {
    if !have_tool("qemu-io") {
        return;
    }
    let server = TestServer::start_default();
    let out = run_ok(
        Command::new("qemu-io")
            .args(["-f", "raw"])
            .args(["-c", "write -P 0xab 0 64k"])
            .args(["-c", "read -P 0xab 0 64k"])
            .args(["-c", "write -z 64k 64k"])
            .args(["-c", "read -P 0 64k 64k"])
            .args(["-c", "discard 0 64k"])
            .args(["-c", "read -P 0 0 64k"])
            .args(["-c", "flush"])
            .arg(server.uri("small")),
    );
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert!(!out.to_lowercase().contains("error"), "{out}");

    // Read-only export: reads work, writes fail.
    let ro = Command::new("qemu-io")
        .args(["-f", "raw", "-r", "-c", "read -P 0 0 64k"])
        .arg(server.uri("ro"))
        .output()
        .expect("qemu-io");
    assert!(
        ro.status.success(),
        "{}",
        String::from_utf8_lossy(&ro.stderr)
    );
    let rw = Command::new("qemu-io")
        .args(["-f", "raw", "-c", "write -P 1 0 4k"])
        .arg(server.uri("ro"))
        .output()
        .expect("qemu-io");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&rw.stdout),
        String::from_utf8_lossy(&rw.stderr)
    );
    assert!(
        !rw.status.success()
            || text.contains("failed")
            || text.contains("read-only")
            || text.contains("ermission"),
        "{text}"
    );
}

fn fio(server: &TestServer, args: &[&str]) -> String {
    run_ok(
        Command::new("fio")
            .args([
                "--name=t",
                "--ioengine=nbd",
                "--output-format=normal",
                "--verify_state_save=0",
            ])
            .arg(format!("--uri={}", server.uri("disk")))
            .args(args),
    )
}

#[test]
fn fio_random_writes_verify_and_sequential_megabyte_io() {
    if !have_tool("fio") {
        return;
    }
    let server = TestServer::start_default();
    let out = fio(
        &server,
        &[
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=32",
            "--size=16m",
            "--verify=crc32c",
            "--do_verify=1",
        ],
    );
    assert!(out.contains("err= 0"), "{out}");
    assert!(!out.contains("verify:"), "verify failure: {out}");
    let out = fio(
        &server,
        &["--rw=write", "--bs=1m", "--iodepth=8", "--size=32m"],
    );
    assert!(out.contains("err= 0"), "{out}");
    let out = fio(
        &server,
        &["--rw=read", "--bs=1m", "--iodepth=8", "--size=32m"],
    );
    assert!(out.contains("err= 0"), "{out}");
}
