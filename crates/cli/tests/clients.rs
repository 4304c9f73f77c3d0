//! Real NBD clients against `weft serve`: nbdinfo, qemu-img, fio's nbd engine, and our own
//! raw client for protocol edge cases.

mod common;

use std::fs;
use std::process::Command;
use std::time::Duration;

use common::*;

#[test]
fn nbdinfo_sees_export_size_and_flags() {
    require_tool("nbdinfo");
    let srv = Server::start_with("nbdinfo", ServeOpts::default().volume_size("1G"));
    let uri = srv.nbd_uri("vol0");
    let info = nbdinfo_json(&uri);
    let exports = info["exports"]
        .as_array()
        .unwrap_or_else(|| panic!("no exports in {info}"));
    let e = exports
        .iter()
        .find(|e| e["export-name"] == "vol0")
        .unwrap_or_else(|| panic!("export vol0 not listed: {info}"));
    assert_eq!(e["export-size"].as_u64(), Some(1 << 30), "export size: {e}");
    for flag in [
        "can_flush",
        "can_fua",
        "can_trim",
        "can_zero",
        "can_multi_conn",
    ] {
        assert_eq!(e[flag].as_bool(), Some(true), "{flag} should be true: {e}");
    }
    assert_eq!(e["is_read_only"].as_bool(), Some(false), "{e}");
    let contexts: Vec<&str> = e["contexts"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c.as_str()).collect())
        .unwrap_or_default();
    assert!(
        contexts.contains(&"base:allocation"),
        "base:allocation not offered: {e}"
    );
    if srv.is_weft() {
        // vol0 is 512e (the default): 512-byte sectors, 4 KiB preferred.
        assert_eq!(
            e["block_size_minimum"].as_u64(),
            Some(512),
            "minimum block size: {e}"
        );
        assert_eq!(
            e["block_size_preferred"].as_u64(),
            Some(4096),
            "preferred block size: {e}"
        );
    }

    // base:allocation: a fresh volume is one hole; after a write, the map shows data there.
    let mut c = srv.nbd_client("vol0");
    c.write(1 << 20, &vec![0x5a; 64 << 10]).unwrap();
    c.flush().unwrap();
    c.disconnect();
    let out = run(
        Command::new("nbdinfo").args(["--map", "--json"]).arg(&uri),
        Duration::from_secs(60),
    )
    .ok();
    let map: serde_json::Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("nbdinfo --map: {e}\n{}", out.stdout));
    let extents = map.as_array().unwrap_or_else(|| panic!("map: {map}"));
    let covering = extents
        .iter()
        .find(|x| {
            let off = x["offset"].as_u64().unwrap();
            let len = x["length"].as_u64().unwrap();
            off <= (1 << 20) && (1 << 20) < off + len
        })
        .unwrap_or_else(|| panic!("no extent covers 1 MiB: {map}"));
    assert_eq!(
        covering["type"].as_u64(),
        Some(0),
        "written range should be allocated data (type 0): {covering}\nfull map: {map}"
    );
    let total: u64 = extents.iter().map(|x| x["length"].as_u64().unwrap()).sum();
    assert_eq!(total, 1 << 30, "extents should cover the export: {map}");
}

#[test]
fn qemu_img_convert_roundtrip_is_byte_identical() {
    require_tool("qemu-img");
    let srv = Server::start_with("qemu-img", ServeOpts::default().volume_size("64M"));
    let (mut rng, _) = test_rng("qemu_img_convert_roundtrip_is_byte_identical");
    let src = srv.scratch.join("src.raw");
    let back = srv.scratch.join("back.raw");
    let data = random_bytes(&mut rng, 64 << 20);
    fs::write(&src, &data).unwrap();
    let uri = srv.nbd_uri("vol0");
    run(
        Command::new("qemu-img")
            .args(["convert", "-n", "-f", "raw", "-O", "raw"])
            .arg(&src)
            .arg(&uri),
        Duration::from_secs(300),
    )
    .ok();
    let got = qemu_img_read_all(&uri, &back);
    assert_eq!(got.len(), data.len(), "read-back size");
    if let Some(at) = first_diff(&got, &data) {
        panic!(
            "qemu-img round trip differs first at byte {at} (block {})",
            at / 4096
        );
    }
    // And qemu-img's own comparison agrees.
    run(
        Command::new("qemu-img")
            .args(["compare", "-f", "raw", "-F", "raw"])
            .arg(&src)
            .arg(&uri),
        Duration::from_secs(300),
    )
    .ok();
}

#[test]
fn fio_randwrite_4k_verify_crc32c() {
    require_tool("fio");
    let srv = Server::start_with("fio-4k", ServeOpts::default().volume_size("1G"));
    let (_, seed) = test_rng("fio_randwrite_4k_verify_crc32c");
    let out = fio(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &[
            "--name=rand4k".into(),
            "--rw=randwrite".into(),
            "--bs=4k".into(),
            "--size=64M".into(),
            "--iodepth=16".into(),
            "--verify=crc32c".into(),
            "--verify_fatal=1".into(),
            format!("--randseed={}", seed % 1_000_000_007),
        ],
        Duration::from_secs(300),
    );
    assert_fio_ok(&out, "4k randwrite + verify");
}

#[test]
fn fio_seqwrite_1m_verify_crc32c_multi_conn() {
    require_tool("fio");
    let srv = Server::start_with("fio-1m", ServeOpts::default().volume_size("1G"));
    // Two jobs = two NBD connections to the same export, each in its own 64 MiB range.
    let out = fio(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &strs(&[
            "--name=seq1m",
            "--rw=write",
            "--bs=1M",
            "--size=64M",
            "--numjobs=2",
            "--offset_increment=64M",
            "--iodepth=4",
            "--verify=crc32c",
            "--verify_fatal=1",
        ]),
        Duration::from_secs(300),
    );
    assert_fio_ok(&out, "1M sequential write + verify");
}

#[test]
fn own_client_write_read_trim_zero_and_misaligned() {
    let srv = Server::start_with("rawnbd", ServeOpts::default().volume_size("64M"));
    let mut c = srv.nbd_client("vol0");
    assert_eq!(c.size, 64 << 20);
    for (flag, name) in [
        (NBD_FLAG_SEND_FLUSH, "FLUSH"),
        (NBD_FLAG_SEND_FUA, "FUA"),
        (NBD_FLAG_SEND_TRIM, "TRIM"),
        (NBD_FLAG_SEND_WRITE_ZEROES, "WRITE_ZEROES"),
        (NBD_FLAG_CAN_MULTI_CONN, "MULTI_CONN"),
    ] {
        assert!(
            c.flags & flag != 0,
            "transmission flag {name} missing (flags {:#x})",
            c.flags
        );
    }
    let (mut rng, _) = test_rng("own_client_write_read_trim_zero_and_misaligned");
    let a = random_bytes(&mut rng, 256 << 10);
    c.write(0, &a).unwrap();
    c.write_fua(1 << 20, &a[..4096]).unwrap();
    assert_eq!(c.read(0, a.len() as u32).unwrap(), a);
    assert_eq!(c.read(1 << 20, 4096).unwrap(), &a[..4096]);
    // Unwritten space reads as zeroes.
    assert!(c.read(8 << 20, 8192).unwrap().iter().all(|&b| b == 0));
    // Trim and write-zeroes read back as zeroes; the neighbours are untouched.
    c.trim(4096, 8192).unwrap();
    c.write_zeroes(65536, 4096).unwrap();
    let back = c.read(0, a.len() as u32).unwrap();
    assert_eq!(&back[..4096], &a[..4096]);
    assert!(
        back[4096..12288].iter().all(|&b| b == 0),
        "trimmed range not zero"
    );
    assert_eq!(&back[12288..65536], &a[12288..65536]);
    assert!(
        back[65536..69632].iter().all(|&b| b == 0),
        "write-zeroes range not zero"
    );
    assert_eq!(&back[69632..], &a[69632..]);
    c.flush().unwrap();
    if !srv.is_weft() {
        return; // nbdkit accepts misaligned requests; the rest is weft's contract.
    }
    // Misaligned requests: EINVAL (22), and the connection stays usable.
    match c.read(1, 4096) {
        Err(NbdError::Server(22)) => {}
        other => panic!(
            "misaligned read should fail with EINVAL (22), got {:?}",
            other.map(|v| v.len())
        ),
    }
    match c.write(4096, &[1u8; 100]) {
        Err(NbdError::Server(22)) => {}
        other => panic!("short (misaligned) write should fail with EINVAL (22), got {other:?}"),
    }
    // Beyond the end: an error, not a crash.
    assert!(
        c.read(64 << 20, 4096).is_err(),
        "read past the end should fail"
    );
    assert_eq!(
        c.read(0, 4096).unwrap(),
        &a[..4096],
        "connection unusable after errors"
    );
    c.disconnect();
}
