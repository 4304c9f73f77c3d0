//! iSCSI against `weft serve` through initiators nobody here wrote: libiscsi's `iscsi-ls`,
//! `iscsi-inq` and `iscsi-readcapacity16`, and qemu's iSCSI block driver (`qemu-img`,
//! `qemu-io`, from Debian's qemu-block-extra).

mod common;

use std::fs;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use common::*;

const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";

fn portal(srv: &Server) -> SocketAddr {
    srv.iscsi
        .unwrap_or_else(|| panic!("serve.json names no iSCSI portal"))
}

fn lun_url(srv: &Server, export: &str) -> String {
    format!("iscsi://{}/{TARGET_PREFIX}{export}/0", portal(srv))
}

/// The whole LUN at `url`, copied by `qemu-img convert` into the file `copy`.
fn read_lun(url: &str, copy: &std::path::Path) -> Vec<u8> {
    tool(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            url,
            copy.to_str().unwrap(),
        ],
    )
    .ok();
    fs::read(copy).unwrap()
}

#[test]
fn discovery_lists_every_volume_and_snapshot_as_a_target() {
    let srv = Server::start_with("iscsi-ls", ServeOpts::default().volume_size("1G"));
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "256M"]);
    srv.cli_ok(&["snapshot", "create", "pgdata", "monday"]);
    srv.cli_ok(&["snapshot", "create", "vol0", "vol0@monday"]);
    let out = tool("iscsi-ls", &["-s", &format!("iscsi://{}", portal(&srv))]).ok();
    let text = out.all();
    // Snapshot VOLUME@NAME is target VOLUME:NAME: an iSCSI name has no '@' (RFC 3722).
    assert!(!text.contains('@'), "{text}");
    for export in ["vol0", "pgdata", "pgdata:monday", "vol0:monday"] {
        let line = format!("Target:{TARGET_PREFIX}{export} Portal:{},1", portal(&srv));
        assert!(text.contains(&line), "no {line:?} in:\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with("Lun:0") && l.contains("Type:DIRECT_ACCESS")),
        "{text}"
    );
}

#[test]
fn inquiry_and_capacity_through_libiscsi_tools() {
    let srv = Server::start_with("iscsi-inq", ServeOpts::default().volume_size("1G"));
    let url = lun_url(&srv, "vol0");
    let inq = tool("iscsi-inq", &[&url]).ok().all();
    assert!(inq.contains("Vendor:WEFT"), "vendor in INQUIRY:\n{inq}");
    assert!(
        inq.contains("Product:weft volume"),
        "product in INQUIRY:\n{inq}"
    );
    assert!(inq.contains("TPGS:1"), "implicit ALUA in INQUIRY:\n{inq}");
    let pages = tool("iscsi-inq", &["-e", "1", "-c", "0", &url]).ok().all();
    for page in ["0x80", "0x83", "0xb0", "0xb1", "0xb2"] {
        assert!(
            pages.contains(&format!("Page:{page}")),
            "VPD page {page} not listed:\n{pages}"
        );
    }
    // vol0 is 512e: 512-byte logical blocks, 8 to a 4 KiB physical block (4Kn: sectors.rs).
    let cap = tool("iscsi-readcapacity16", &[&url]).ok().all();
    assert!(cap.contains("LOGICAL BLOCK LENGTH IN BYTES:512"), "{cap}");
    assert!(cap.contains("PHYSICAL BLOCK EXPONENT:3"), "{cap}");
    assert!(
        cap.contains(&format!(
            "RETURNED LOGICAL BLOCK ADDRESS:{}",
            (1u64 << 30) / 512 - 1
        )),
        "{cap}"
    );
    // Thin provisioned, and unmapped blocks read back as zeroes.
    assert!(cap.contains("LBPME:1"), "{cap}");
}

#[test]
fn qemu_img_round_trips_64_mib_byte_identical() {
    require_qemu_iscsi();
    let srv = Server::start_with("iscsi-qemu", ServeOpts::default().volume_size("64M"));
    let (mut rng, _) = test_rng("iscsi-qemu");
    let src = srv.scratch.join("src.img");
    let back = srv.scratch.join("back.img");
    let bytes = random_bytes(&mut rng, 64 << 20);
    fs::write(&src, &bytes).unwrap();
    let url = lun_url(&srv, "vol0");
    tool(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            src.to_str().unwrap(),
            &url,
        ],
    )
    .ok();
    let got = read_lun(&url, &back);
    assert!(
        got == bytes,
        "64 MiB read back over iSCSI differ from what was written"
    );
    // And the same bytes through NBD: one volume, two protocols.
    let mut nbd = srv.nbd_client("vol0");
    assert_eq!(
        nbd.read(40 << 20, 65536).unwrap(),
        bytes[40 << 20..(40 << 20) + 65536]
    );
    let io = tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            "-c",
            "write -P 0xab 1M 64k",
            "-c",
            "read -P 0xab 1M 64k",
            "-c",
            "flush",
            &url,
        ],
    )
    .ok();
    assert!(!io.all().contains("fail"), "{}", io.all());
}

#[test]
fn a_snapshot_target_is_write_protected() {
    require_qemu_iscsi();
    let srv = Server::start_with("iscsi-ro", ServeOpts::default().volume_size("64M"));
    let url = lun_url(&srv, "vol0");
    tool(
        "qemu-io",
        &["-f", "raw", "-c", "write -P 0x5a 0 1M", "-c", "flush", &url],
    )
    .ok();
    srv.cli_ok(&["snapshot", "create", "vol0", "frozen"]);
    let frozen = lun_url(&srv, "vol0:frozen");
    // MODE SENSE reports the LUN write-protected: qemu refuses to open it for writing.
    let write = tool("qemu-io", &["-f", "raw", "-c", "write -P 1 0 4k", &frozen]);
    assert!(
        !write.success() && write.all().contains("write protected"),
        "a snapshot LUN opened for writing:\n{}",
        write.all()
    );
    // And it reads what the volume held when the snapshot was taken.
    let copy = srv.scratch.join("frozen.img");
    let bytes = read_lun(&frozen, &copy);
    assert!(
        bytes[..1 << 20].iter().all(|&b| b == 0x5a),
        "snapshot lost its data"
    );
    assert!(
        bytes[1 << 20..].iter().all(|&b| b == 0),
        "snapshot grew data"
    );
}

#[test]
fn an_unknown_target_is_refused_at_login() {
    let srv = Server::start_with("iscsi-unknown", ServeOpts::default().volume_size("64M"));
    let url = format!("iscsi://{}/{TARGET_PREFIX}nosuchvolume/0", portal(&srv));
    let out = tool("iscsi-inq", &[&url]);
    assert!(
        !out.success(),
        "logged in to a target that does not exist:\n{}",
        out.all()
    );
    // The server is still there for everyone else.
    tool("iscsi-inq", &[&lun_url(&srv, "vol0")]).ok();
}

/// Bytes per write of the crash test's writer, and writes between its flushes.
const CRASH_WRITE_BYTES: u64 = 64 << 10;
const CRASH_WRITES: u64 = 1024;
const CRASH_FLUSH_EVERY: u64 = 16;

#[test]
fn acknowledged_iscsi_writes_survive_kill9() {
    require_qemu_iscsi();
    let mut srv = Server::start_with("iscsi-kill9", ServeOpts::default().volume_size("64M"));
    let (mut rng, _) = test_rng("iscsi-kill9");
    let mut cut_mid_run = 0;
    for round in 1..=3u8 {
        let old = round;
        let new = round + 100;
        let url = lun_url(&srv, "vol0");
        // The whole LUN holds `old`, written and flushed.
        tool(
            "qemu-io",
            &[
                "-f",
                "raw",
                "-c",
                &format!("write -P {old} 0 64M"),
                "-c",
                "flush",
                &url,
            ],
        )
        .ok();
        // qemu-io overwrites it with `new`, 64 KiB at a time (each command waits for the
        // previous one), a flush every 16 writes; weft is killed -9 somewhere in the run.
        let mut cmd = Command::new(require_tool("qemu-io"));
        cmd.args(["-f", "raw"]);
        for i in 0..CRASH_WRITES {
            cmd.arg("-c")
                .arg(format!("write -P {new} {} 64k", i * CRASH_WRITE_BYTES));
            if i % CRASH_FLUSH_EVERY == CRASH_FLUSH_EVERY - 1 {
                cmd.args(["-c", "flush"]);
            }
        }
        cmd.arg(&url);
        let writer = Bg::spawn(&mut cmd);
        std::thread::sleep(Duration::from_millis(rand::Rng::random_range(
            &mut rng,
            20..250,
        )));
        srv.kill9();
        let out = writer.wait(Duration::from_secs(5));
        srv.restart();
        // Every write qemu-io saw acknowledged is there (kill -9 loses nothing acknowledged,
        // flushed or not); every 4 KiB block holds one of the two patterns.
        let acknowledged: Vec<u64> = out
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("wrote 65536/65536 bytes at offset "))
            .map(|o| o.trim().parse().unwrap())
            .collect();
        if (acknowledged.len() as u64) < CRASH_WRITES {
            cut_mid_run += 1;
        }
        let copy = srv.scratch.join(format!("after-kill-{round}.img"));
        let url = lun_url(&srv, "vol0");
        let bytes = read_lun(&url, &copy);
        for (i, block) in bytes.chunks(4096).enumerate() {
            assert!(
                block.iter().all(|&b| b == old) || block.iter().all(|&b| b == new),
                "round {round}: 4 KiB block {i} holds neither pattern"
            );
        }
        for offset in &acknowledged {
            let at = *offset as usize;
            assert!(
                bytes[at..at + CRASH_WRITE_BYTES as usize].iter().all(|&b| b == new),
                "round {round}: the acknowledged write at {offset} was lost ({} of {CRASH_WRITES} acknowledged)",
                acknowledged.len()
            );
        }
        eprintln!(
            "round {round}: {} of {CRASH_WRITES} writes acknowledged before kill -9, all there",
            acknowledged.len()
        );
    }
    assert!(cut_mid_run > 0, "no kill landed while the writer ran");
}

/// Read one PDU (BHS, then its data segment padded to 4 bytes; no digests): its opcode, or
/// `None` at end of stream.
fn read_pdu(stream: &mut std::net::TcpStream) -> Option<u8> {
    use std::io::Read;
    let mut bhs = [0u8; weft_iscsi::wire::BHS_BYTES];
    stream.read_exact(&mut bhs).ok()?;
    let data_len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
    let ahs_len = usize::from(bhs[4]) * 4;
    let mut rest = vec![0u8; ahs_len + data_len.div_ceil(4) * 4];
    stream.read_exact(&mut rest).ok()?;
    Some(bhs[0] & 0x3f)
}

#[test]
fn a_silent_initiator_is_pinged_then_disconnected() {
    use std::io::Write;
    let srv = Server::start_with(
        "iscsi-nop",
        ServeOpts::default()
            .volume_size("64M")
            .arg("--iscsi-nop-interval")
            .arg("1s"),
    );
    let mut stream = std::net::TcpStream::connect(portal(&srv)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    // A discovery login straight from the security stage to full feature phase.
    let text = b"InitiatorName=iqn.2026-01.test:silent\0SessionType=Discovery\0AuthMethod=None\0";
    let mut out = Vec::new();
    weft_iscsi::initiator::login_request(
        &weft_iscsi::initiator::LoginRequestPdu {
            transit: true,
            current_stage: 0,
            next_stage: 3,
            isid: [0x80, 0, 0, 0, 0, 1],
            itt: 1,
            cmd_sn: 1,
            exp_stat_sn: 0,
            text,
        },
        &mut out,
    );
    stream.write_all(&out).unwrap();
    assert_eq!(
        read_pdu(&mut stream),
        Some(weft_iscsi::wire::OP_LOGIN_RESPONSE)
    );
    // Silent from here: a NOP-In ping after about a second, then the target hangs up.
    let started = std::time::Instant::now();
    assert_eq!(read_pdu(&mut stream), Some(weft_iscsi::wire::OP_NOP_IN));
    assert_eq!(
        read_pdu(&mut stream),
        None,
        "the target kept a dead session"
    );
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(2) && waited < Duration::from_secs(15),
        "closed after {waited:?}"
    );
}
