//! 512e and 4Kn volumes end to end: sector-granular I/O from qemu over NBD and over iSCSI
//! against a model, concurrent writers of different sectors of the same 4 KiB blocks on
//! separate NBD connections (read-modify-write must not lose an update), and the geometry
//! every interface reports for each kind of volume, its snapshots and clones, and for volumes
//! of a data dir written before the property existed.

mod common;

use std::process::Command;
use std::thread;
use std::time::Duration;

use common::*;
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::{json, Value};
use weft_meta::MetaStore;

const SECTOR: u64 = 512;
const TOOL_TIMEOUT: Duration = Duration::from_secs(180);
const EINVAL: u32 = 22;

fn tool(name: &str, args: &[&str]) -> CmdOut {
    let mut cmd = Command::new(require_tool(name));
    cmd.args(args);
    run(&mut cmd, TOOL_TIMEOUT)
}

/// LUN 0 of an export's own target (snapshot `VOLUME@NAME` is target `...:VOLUME:NAME`).
fn lun_url(srv: &Server, export: &str) -> String {
    let portal = srv.iscsi.expect("serve.json names the iSCSI portal");
    let name = export.replace('@', ":");
    format!("iscsi://{portal}/iqn.2026-11.dev.weft:{name}/0")
}

/// Random sector writes and zeroings inside `[start, start + len)`, mostly at odd sectors and
/// mostly a sector or two long, as qemu-io commands; applied to `model` as they go. Every few
/// commands read back what was just written (`read -P` fails loudly on a mismatch).
fn sector_ops(
    rng: &mut StdRng,
    model: &mut [u8],
    start: u64,
    len: u64,
    count: usize,
) -> Vec<String> {
    let sectors_in_region = len / SECTOR;
    let mut cmds = Vec::new();
    for i in 0..count {
        let mut sector = rng.random_range(0..sectors_in_region);
        if rng.random_bool(0.8) {
            sector |= 1;
        }
        sector = sector.min(sectors_in_region - 1);
        let max = (sectors_in_region - sector).min(12);
        let sectors = if rng.random_bool(0.6) {
            1
        } else {
            rng.random_range(1..=max)
        };
        let offset = start + sector * SECTOR;
        let bytes = sectors * SECTOR;
        let range = offset as usize..(offset + bytes) as usize;
        if rng.random_bool(0.15) {
            cmds.push(format!("write -z {offset} {bytes}"));
            model[range].fill(0);
        } else {
            let pattern = (i % 250) as u8 + 1;
            cmds.push(format!("write -P {pattern} {offset} {bytes}"));
            model[range].fill(pattern);
            if i % 5 == 0 {
                cmds.push(format!("read -P {pattern} {offset} {bytes}"));
            }
        }
    }
    cmds
}

/// Run qemu-io commands against `url` in one process; fails on any error or mismatch.
fn qemu_io(url: &str, cmds: &[String]) {
    let mut args: Vec<&str> = vec!["-f", "raw"];
    for c in cmds {
        args.push("-c");
        args.push(c);
    }
    args.push(url);
    let out = tool("qemu-io", &args).ok();
    let text = out.all();
    assert!(
        !text.contains("Pattern verification failed")
            && !text.contains("failed")
            && !text.to_lowercase().contains("error"),
        "qemu-io on {url}:\n{text}"
    );
}

fn assert_same(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(at) = first_diff(got, want) {
        panic!(
            "{what}: first difference at byte {at} (sector {}, block {}): got {:#04x}, model {:#04x}",
            at / SECTOR as usize,
            at / BLOCK as usize,
            got[at],
            want[at]
        );
    }
}

#[test]
fn sector_writes_at_odd_offsets_match_a_model_over_nbd_and_iscsi() {
    let srv = Server::start_with("sectors-model", ServeOpts::default().volume_size("8M"));
    if srv.skip_without_api("sector_writes_at_odd_offsets_match_a_model_over_nbd_and_iscsi") {
        return;
    }
    let (mut rng, _) = test_rng("sector_writes_at_odd_offsets_match_a_model_over_nbd_and_iscsi");
    let mut model = vec![0u8; 8 << 20];
    // A background of data the sector writes land in: whole blocks through our client.
    let background = random_bytes(&mut rng, 3 << 20);
    let mut c = srv.nbd_client("vol0");
    c.write(0, &background).unwrap();
    model[..3 << 20].copy_from_slice(&background);

    // qemu over NBD in the first MiB, qemu over iSCSI in the second.
    let cmds = sector_ops(&mut rng, &mut model, 0, MIB, 300);
    qemu_io(&srv.nbd_uri("vol0"), &cmds);
    let cmds = sector_ops(&mut rng, &mut model, MIB, MIB, 300);
    qemu_io(&lun_url(&srv, "vol0"), &cmds);

    // Our client in the third: sector trims, zeroings and FUA writes.
    for _ in 0..100 {
        let sector = rng.random_range(0..MIB / SECTOR);
        let sectors = rng.random_range(1..=(MIB / SECTOR - sector).min(20));
        let offset = 2 * MIB + sector * SECTOR;
        let len = (sectors * SECTOR) as u32;
        let range = offset as usize..offset as usize + len as usize;
        match rng.random_range(0..3) {
            0 => c.trim(offset, len).unwrap(),
            1 => c.write_zeroes(offset, len).unwrap(),
            _ => {
                let data = random_bytes(&mut rng, len as usize);
                c.write_fua(offset, &data).unwrap();
                model[range.clone()].copy_from_slice(&data);
                continue;
            }
        }
        model[range].fill(0);
    }
    c.flush().unwrap();

    // Everything reads back as the model: through NBD, and through iSCSI.
    assert_same(
        &c.read(0, 4 << 20).unwrap(),
        &model[..4 << 20],
        "NBD read-back",
    );
    c.disconnect();
    let copy = srv.scratch.join("lun.img");
    tool(
        "qemu-img",
        &[
            "convert",
            "-f",
            "raw",
            "-O",
            "raw",
            &lun_url(&srv, "vol0"),
            copy.to_str().unwrap(),
        ],
    )
    .ok();
    assert_same(
        &std::fs::read(&copy).unwrap(),
        &model,
        "iSCSI read-back (qemu-img convert)",
    );
}

/// Writers per connection, blocks they share, rounds each writes over every sector it owns.
const WRITERS: u64 = 4;
const SHARED_BLOCKS: u64 = 8;
const ROUNDS: u64 = 60;

/// The content a writer puts in a sector: who, which round, where; the rest a fill.
fn stamp(writer: u64, round: u64, sector: u64) -> Vec<u8> {
    let mut s = vec![(writer * 64 + round % 64) as u8; SECTOR as usize];
    s[..8].copy_from_slice(&writer.to_le_bytes());
    s[8..16].copy_from_slice(&round.to_le_bytes());
    s[16..24].copy_from_slice(&sector.to_le_bytes());
    s
}

#[test]
fn concurrent_sector_writers_of_the_same_blocks_lose_no_update() {
    let srv = Server::start_with("sectors-race", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("concurrent_sector_writers_of_the_same_blocks_lose_no_update") {
        return;
    }
    let (mut seed_rng, _) = test_rng("concurrent_sector_writers_of_the_same_blocks_lose_no_update");
    // The blocks start full of data, so a lost update would show an older round or the fill.
    let mut c = srv.nbd_client("vol0");
    c.write(0, &vec![0xee; (SHARED_BLOCKS * BLOCK) as usize])
        .unwrap();
    c.disconnect();
    let started = std::time::Instant::now();
    thread::scope(|s| {
        for w in 0..WRITERS {
            let mut c = srv.nbd_client("vol0");
            let mut rng: StdRng = rand::SeedableRng::seed_from_u64(seed_rng.random());
            s.spawn(move || {
                // Writer w owns sectors 2w and 2w+1 of every shared block; every round it
                // checks and rewrites each of them, one or both sectors per request, blocks
                // in a random order, so all writers hit the same blocks at the same time.
                for round in 0..ROUNDS {
                    let mut blocks: Vec<u64> = (0..SHARED_BLOCKS).collect();
                    for i in (1..blocks.len()).rev() {
                        blocks.swap(i, rng.random_range(0..=i));
                    }
                    for b in blocks {
                        let first = b * 8 + 2 * w;
                        let offset = first * SECTOR;
                        // Nobody else writes these sectors: they still hold this writer's
                        // previous round (a read-modify-write of another writer must not
                        // have put back an older copy since).
                        let held = c.read(offset, 2 * SECTOR as u32).unwrap();
                        let expected: Vec<u8> = match round.checked_sub(1) {
                            Some(prev) => {
                                [stamp(w, prev, first), stamp(w, prev, first + 1)].concat()
                            }
                            None => vec![0xee; 2 * SECTOR as usize],
                        };
                        assert!(
                            held == expected,
                            "writer {w} round {round}: sectors {first}-{} lost an update \
                             (they hold round {})",
                            first + 1,
                            u64::from_le_bytes(held[8..16].try_into().unwrap())
                        );
                        if rng.random_bool(0.5) {
                            let mut data = stamp(w, round, first);
                            data.extend(stamp(w, round, first + 1));
                            c.write(offset, &data).unwrap();
                        } else {
                            for sector in [first, first + 1] {
                                let data = stamp(w, round, sector);
                                if rng.random_bool(0.1) {
                                    c.write_fua(sector * SECTOR, &data).unwrap();
                                } else {
                                    c.write(sector * SECTOR, &data).unwrap();
                                }
                            }
                        }
                    }
                }
                c.flush().unwrap();
                c.disconnect();
            });
        }
    });
    let writes = WRITERS * ROUNDS * SHARED_BLOCKS * 2;
    eprintln!(
        "{WRITERS} connections wrote {writes} sectors of {SHARED_BLOCKS} shared blocks in {:?}",
        started.elapsed()
    );
    let mut c = srv.nbd_client("vol0");
    let all = c.read(0, (SHARED_BLOCKS * BLOCK) as u32).unwrap();
    for (sector, got) in all.chunks(SECTOR as usize).enumerate() {
        let sector = sector as u64;
        let writer = (sector % 8) / 2;
        let want = stamp(writer, ROUNDS - 1, sector);
        if got != want.as_slice() {
            panic!(
                "sector {sector} (block {}) lost an update: holds writer {} round {} (fill {:#04x}), wanted writer {writer} round {}",
                sector / 8,
                u64::from_le_bytes(got[..8].try_into().unwrap()),
                u64::from_le_bytes(got[8..16].try_into().unwrap()),
                got[100],
                ROUNDS - 1
            );
        }
    }
}

/// `iscsi-readcapacity16` and the Block Limits page of a LUN: (logical block length,
/// logical blocks per physical block exponent, optimal transfer length granularity, optimal
/// unmap granularity).
fn scsi_geometry(url: &str) -> (u64, u64, u64, u64) {
    let field = |text: &str, key: &str| -> u64 {
        text.split_once(key)
            .and_then(|(_, rest)| {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                digits.parse().ok()
            })
            .unwrap_or_else(|| panic!("no {key} in:\n{text}"))
    };
    let cap = tool("iscsi-readcapacity16", &[url]).ok().all();
    let limits = tool("iscsi-inq", &["-e", "1", "-c", "176", url]).ok().all();
    (
        field(&cap, "LOGICAL BLOCK LENGTH IN BYTES:"),
        field(&cap, "PHYSICAL BLOCK EXPONENT:"),
        field(&limits, "optimal transfer length granularity:"),
        field(&limits, "optimal unmap granularity:"),
    )
}

fn nbd_block_sizes(srv: &Server, export: &str) -> (u64, u64) {
    let info = nbdinfo_json(&srv.nbd_uri(export));
    let e = &info["exports"][0];
    (
        e["block_size_minimum"].as_u64().unwrap(),
        e["block_size_preferred"].as_u64().unwrap(),
    )
}

/// The geometry of `export` through every interface: API, NBD, iSCSI, and what a sector
/// write gets.
fn assert_geometry(srv: &Server, export: &str, api_path: &str, logical: u64) {
    let info = srv.api_json("GET", api_path, None);
    assert_eq!(info["logical_block_size"], logical, "{api_path}: {info}");
    assert_eq!(info["block_size_bytes"], 4096, "{api_path}: {info}");
    assert_eq!(nbd_block_sizes(srv, export), (logical, 4096), "{export}");
    let per_physical = 4096 / logical;
    assert_eq!(
        scsi_geometry(&lun_url(srv, export)),
        (
            logical,
            u64::from(per_physical.trailing_zeros()),
            per_physical,
            per_physical
        ),
        "{export}: SCSI block length, LBPPBE, transfer and unmap granularity"
    );
}

#[test]
fn each_volume_reports_its_block_size_everywhere_and_snapshots_and_clones_inherit_it() {
    let mut srv = Server::start_with("sectors-geometry", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("each_volume_reports_its_block_size_everywhere") {
        return;
    }
    // vol0 was created by `weft serve` with the default: 512e.
    assert_geometry(&srv, "vol0", "/api/v1/volumes/vol0", 512);
    let out = srv.cli_ok(&[
        "volume",
        "create",
        "four",
        "--size",
        "64M",
        "--block-size",
        "4096",
    ]);
    assert!(out.contains("4096-byte blocks"), "{out}");
    assert_geometry(&srv, "four", "/api/v1/volumes/four", 4096);
    let info = srv.cli_ok(&["volume", "info", "four"]);
    assert!(info.contains("block size   4096 (4Kn)"), "{info}");
    let info = srv.cli_ok(&["volume", "info", "vol0"]);
    assert!(info.contains("block size   512 (512e"), "{info}");
    // The API takes it too; 512 explicitly.
    let created = srv.api_json(
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": "five", "size_bytes": 64 << 20, "logical_block_size": 512})),
    );
    assert_eq!(created["logical_block_size"], 512, "{created}");

    // Snapshots and clones have their volume's geometry.
    srv.cli_ok(&["snapshot", "create", "four", "four-snap"]);
    srv.cli_ok(&["clone", "create", "four-snap", "four-clone"]);
    srv.cli_ok(&["snapshot", "create", "vol0", "vol0-snap"]);
    srv.cli_ok(&["clone", "create", "vol0-snap", "vol0-clone"]);
    // Snapshots by their full names: NBD `nbd://HOST/four@four-snap` (nbdinfo), iSCSI target
    // `...:four:four-snap`, the API with the '@' plain and percent-encoded.
    assert_geometry(
        &srv,
        "four@four-snap",
        "/api/v1/snapshots/four@four-snap",
        4096,
    );
    assert_geometry(&srv, "four-clone", "/api/v1/volumes/four-clone", 4096);
    assert_geometry(
        &srv,
        "vol0@vol0-snap",
        "/api/v1/snapshots/vol0%40vol0-snap",
        512,
    );
    assert_geometry(&srv, "vol0-clone", "/api/v1/volumes/vol0-clone", 512);
    let info = srv.cli_ok(&["snapshot", "info", "four-snap"]);
    assert!(info.contains("block size   4096 (4Kn)"), "{info}");

    // A sector write: fine on 512e, EINVAL on 4Kn (NBD asks for 4 KiB alignment there).
    let mut c = srv.nbd_client("vol0-clone");
    c.write(512, &[1u8; 512]).unwrap();
    let mut c4 = srv.nbd_client("four");
    match c4.write(512, &[1u8; 512]) {
        Err(NbdError::Server(EINVAL)) => {}
        other => panic!("a 512-byte write to a 4Kn volume: {other:?}"),
    }
    c4.write(4096, &[1u8; 4096]).unwrap();

    // Anything but 512 or 4096 is refused: a usage error, a 400.
    let bad = srv.cli(&[
        "volume",
        "create",
        "bad",
        "--size",
        "64M",
        "--block-size",
        "1024",
    ]);
    assert_eq!(bad.status.and_then(|s| s.code()), Some(2), "{}", bad.all());
    assert!(bad.all().contains("512 or 4096"), "{}", bad.all());
    for value in [json!(1024), json!(0), json!("512")] {
        let (status, body) = srv.api(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "bad", "size_bytes": 64 << 20, "logical_block_size": value})),
        );
        assert_eq!(status, 400, "logical_block_size {value}: {body}");
    }
    assert_eq!(srv.api("GET", "/api/v1/volumes/bad", None).0, 404);
    c.disconnect();
    c4.disconnect();

    // The geometry survives a restart.
    srv.kill9_and_restart();
    assert_geometry(&srv, "four-clone", "/api/v1/volumes/four-clone", 4096);
    assert_geometry(&srv, "vol0", "/api/v1/volumes/vol0", 512);
}

#[test]
fn volumes_of_a_data_dir_from_before_the_property_stay_4kn() {
    let mut srv = Server::start_with("sectors-legacy", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("volumes_of_a_data_dir_from_before_the_property_stay_4kn") {
        return;
    }
    srv.cli_ok(&["snapshot", "create", "vol0", "old-snap"]);
    srv.stop();
    // Rewrite the cluster state as an older weft wrote it: no logical_block_size anywhere.
    {
        let meta = weft_meta::EmbeddedMetaStore::open(&srv.data_dir.join("meta")).unwrap();
        let key = "weft/cluster/state";
        let stored = meta.get(key).unwrap().expect("cluster state");
        let mut state: Value = serde_json::from_slice(&stored.value).unwrap();
        let mut stripped = 0;
        for list in ["volumes", "snapshots"] {
            for record in state[list].as_array_mut().unwrap() {
                assert!(record
                    .as_object_mut()
                    .unwrap()
                    .remove("logical_block_size")
                    .is_some());
                stripped += 1;
            }
        }
        assert_eq!(stripped, 2);
        let bytes = serde_json::to_vec_pretty(&state).unwrap();
        meta.compare_and_put(key, stored.mod_revision, &bytes, None)
            .unwrap();
    }
    srv.restart();
    assert_geometry(&srv, "vol0", "/api/v1/volumes/vol0", 4096);
    assert_geometry(
        &srv,
        "vol0@old-snap",
        "/api/v1/snapshots/vol0@old-snap",
        4096,
    );
    // New volumes next to them get the new default.
    srv.cli_ok(&["volume", "create", "new", "--size", "64M"]);
    assert_geometry(&srv, "new", "/api/v1/volumes/new", 512);
}
