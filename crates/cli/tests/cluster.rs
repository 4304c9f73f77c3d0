//! Cluster mode end to end: a real etcd, `weft dnode` processes and `weft cnode` processes on
//! 127.0.0.1, driven through NBD (fio, our own client) and the CLI, while d.nodes are killed
//! with SIGKILL, restarted, marked out, and their chunk files corrupted on disk.
//!
//! Every scenario is its own test; they run one at a time (see `cluster_support`). Each prints
//! its seed and a timed step log; a failure prints the tail of every process's output and keeps
//! the temp dir (data dirs and full logs). Replay: `WEFT_E2E_SEED=N cargo test -p weft --test
//! cluster NAME -- --nocapture`.

mod cluster_support;
mod common;

use std::collections::BTreeSet;
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::Value;
use weft_chunk::{ChunkError, ChunkKey, ChunkMeta, ChunkStore};
use weft_dnode_client::{ClientOptions, RemoteChunkStore};

/// fio's 4k random-write job with crc32c verify headers; the same arguments (and seed) make the
/// verify-only pass read back exactly what the write pass wrote.
fn fio_job(size: &str, seed: u64) -> Vec<String> {
    let mut v = strs(&[
        "--name=cluster",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=16",
        "--numjobs=1",
        "--verify=crc32c",
        "--randrepeat=1",
        "--group_reporting",
    ]);
    v.push(format!("--size={size}"));
    v.push(format!("--randseed={seed}"));
    v
}

fn fio_write_args(size: &str, seed: u64, extra: &[&str]) -> Vec<String> {
    let mut v = fio_job(size, seed);
    v.push("--do_verify=0".into());
    v.extend(strs(extra));
    v
}

fn fio_verify_args(size: &str, seed: u64) -> Vec<String> {
    let mut v = fio_job(size, seed);
    v.push("--verify_only=1".into());
    v
}

/// fio exited 0, printed no verify failure, and reported `err= 0`.
fn assert_fio_clean(out: &CmdOut, what: &str) {
    assert_fio_ok(out, what);
    assert!(
        out.stdout.contains("err= 0"),
        "fio {what}: no `err= 0` in its report:\n$ {}\n{}",
        out.cmdline,
        out.all()
    );
}

fn fio_verify(c: &Cluster, size: &str, seed: u64, what: &str) {
    let t = Instant::now();
    let out = fio(
        c.scratch.path(),
        &c.nbd_uri("vol0"),
        &fio_verify_args(size, seed),
        Duration::from_secs(180),
    );
    assert_fio_clean(&out, what);
    c.step(&format!(
        "fio {what}: every block verified in {:.1}s",
        t.elapsed().as_secs_f64()
    ));
}

fn fio_write(c: &Cluster, size: &str, seed: u64) {
    let t = Instant::now();
    let out = fio(
        c.scratch.path(),
        &c.nbd_uri("vol0"),
        &fio_write_args(size, seed, &[]),
        Duration::from_secs(180),
    );
    assert_fio_clean(&out, "write");
    c.step(&format!(
        "fio wrote {size} in {:.1}s",
        t.elapsed().as_secs_f64()
    ));
}

/// `n` distinct d.node indexes out of `0..total`, not in `except`.
fn pick(rng: &mut impl Rng, total: usize, n: usize, except: &[usize]) -> Vec<usize> {
    let mut v: Vec<usize> = (0..total).filter(|i| !except.contains(i)).collect();
    v.shuffle(rng);
    v.truncate(n);
    v
}

fn u64_at(v: &Value, path: &[&str]) -> u64 {
    let mut x = v;
    for p in path {
        x = &x[*p];
    }
    x.as_u64()
        .unwrap_or_else(|| panic!("no number at {path:?} in {v}"))
}

// ------------------------------------------------------------------------------------------
// 1. one d.node killed under load
// ------------------------------------------------------------------------------------------

#[test]
fn four_plus_two_survives_a_dnode_killed_mid_write() {
    let _serial = serial();
    let test = "four_plus_two_survives_a_dnode_killed_mid_write";
    let (mut rng, seed) = test_rng(test);
    let mut c = Cluster::start(test, seed, ClusterOpts::new(6));
    // The six d.nodes share one file system: the engine admits writes against its space
    // once, not six times (cluster/raw_space.rs).
    let fs_size: u64 = run(
        Command::new("df")
            .args(["-B1", "--output=size"])
            .arg(c.scratch.path()),
        Duration::from_secs(10),
    )
    .stdout
    .lines()
    .nth(1)
    .and_then(|l| l.trim().parse().ok())
    .expect("df's size");
    let stats = c.cli_json(&["stats", "--json"]);
    let capacity = stats["capacity_bytes"].as_u64().unwrap_or(u64::MAX);
    assert!(
        capacity <= fs_size,
        "capacity {capacity} counts the shared file system ({fs_size} bytes) more than once"
    );
    let victim = rng.random_range(0..6);
    let fio_seed: u64 = rng.random_range(1..1_000_000);
    let kill_after = Duration::from_millis(rng.random_range(1500..3000));
    let size = "128M";

    // ~5 s of writes at 24 MiB/s; the d.node dies 1.5-3 s in.
    c.step(&format!(
        "fio randwrite {size} (seed {fio_seed}); d.node {victim} is killed after {kill_after:?}"
    ));
    let t = Instant::now();
    let mut writer = Bg::spawn_group(&mut fio_cmd(
        c.scratch.path(),
        &c.nbd_uri("vol0"),
        &fio_write_args(size, fio_seed, &["--rate=24m"]),
    ));
    std::thread::sleep(kill_after);
    assert!(
        writer.try_wait().is_none(),
        "fio finished before the kill point ({kill_after:?}): the test would prove nothing:\n{}",
        writer.all_so_far()
    );
    c.kill_dnode(victim);
    let out = writer.wait(Duration::from_secs(120));
    assert_fio_clean(&out, "write with a d.node killed mid-run");
    c.step(&format!(
        "fio write finished after {:.1}s with no error",
        t.elapsed().as_secs_f64()
    ));

    // Its lease runs out: down (not out: the grace is 5 min).
    c.wait_node_state(victim, "down", Duration::from_secs(20));
    c.sync();
    let before = u64_at(&c.status(), &["degraded_reads"]);

    fio_verify(&c, size, fio_seed, "verify-only with the d.node down");
    let s = c.status();
    let degraded = u64_at(&s, &["degraded_reads"]);
    assert!(
        degraded > before,
        "reads with a d.node down should have been reconstructed (degraded_reads {before} -> {degraded}):\n{s:#}"
    );
    assert_eq!(s["healthy"], Value::Bool(false), "a d.node is down:\n{s:#}");
    c.step(&format!("degraded reads: {before} -> {degraded}"));

    // Back on the same data dir and port: it rejoins, and the repairer fills in what it missed.
    c.restart_dnode(victim);
    let s = c.wait_node_state(victim, "up", Duration::from_secs(20));
    c.step(&format!(
        "at rejoin: healthy {}, repair {}",
        s["healthy"], s["repair"]
    ));
    c.wait_repaired(Duration::from_secs(60), 1, true);

    // Everything reads back with the rebuilt chunks in place (read directly, not reconstructed).
    fio_verify(&c, size, fio_seed, "verify-only after the rebuild");
    let s = c.status();
    assert_eq!(s["healthy"], Value::Bool(true), "{s:#}");
    c.step("done");
}

// ------------------------------------------------------------------------------------------
// 2. out, rebuild, then two more losses
// ------------------------------------------------------------------------------------------

#[test]
fn rebuild_after_out_then_survive_two_more_losses() {
    let _serial = serial();
    let test = "rebuild_after_out_then_survive_two_more_losses";
    let (mut rng, seed) = test_rng(test);
    let mut c = Cluster::start(test, seed, ClusterOpts::new(8).out_grace("3s"));
    let fio_seed: u64 = rng.random_range(1..1_000_000);
    let size = "64M";
    fio_write(&c, size, fio_seed);
    c.sync();

    let first = pick(&mut rng, 8, 1, &[])[0];
    c.kill_dnode(first);
    c.wait_node_state(first, "out", Duration::from_secs(30));
    // Its positions move to the 7 others, and its chunks are rebuilt there.
    let s = c.wait_repaired(Duration::from_secs(90), 1, true);
    let id = c.dnodes[first].id.clone();
    let node = s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id.as_str())
        .unwrap_or_else(|| panic!("d.node {id} missing from the status:\n{s:#}"));
    assert_eq!(
        node["pg_positions"].as_u64(),
        Some(0),
        "an out d.node keeps no PG positions:\n{s:#}"
    );
    assert_eq!(
        pools_sum(&s, "pgs_healthy"),
        u64::from(c.opts.pg_count),
        "every PG healthy again on 7 d.nodes:\n{s:#}"
    );
    fio_verify(&c, size, fio_seed, "verify-only after the rebuild");
    assert_dnode_metrics(&c, &id);

    // Two more: every stripe keeps at least 4 of its 6 chunks.
    let more = pick(&mut rng, 8, 2, &[first]);
    c.step(&format!("killing d.nodes {more:?} too"));
    for &i in &more {
        c.kill_dnode(i);
    }
    fio_verify(&c, size, fio_seed, "verify-only right after two more kills");
    for &i in &more {
        c.wait_node_state(i, "out", Duration::from_secs(30));
    }
    let s = c.status();
    assert!(
        pools_sum(&s, "pgs_incomplete") > 0,
        "5 d.nodes for 6 positions: PGs must be incomplete:\n{s:#}"
    );
    fio_verify(&c, size, fio_seed, "verify-only with three d.nodes out");
    c.step("done");
}

/// The c.node's `/metrics` shows every d.node, the out one down, chunk I/O to the others and
/// the rebuild done.
fn assert_dnode_metrics(c: &Cluster, out_id: &str) {
    let cnode = c.cnode.as_ref().unwrap();
    let base = cnode.metrics.trim_end_matches("/metrics");
    let (status, text) = api_request(base, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "{text}");
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit_once(' ')?.1.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix}… in /metrics:\n{text}"))
    };
    for d in &c.dnodes {
        let up = value(&format!("weft_dnode_up{{dnode=\"{}\"", d.id));
        assert_eq!(
            up,
            if d.id == out_id { 0.0 } else { 1.0 },
            "d.node {}",
            d.id
        );
    }
    let puts: f64 = text
        .lines()
        .filter(|l| l.starts_with("weft_dnode_chunk_requests_total{") && l.contains("op=\"put\""))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum();
    assert!(puts > 0.0, "chunk puts counted per d.node:\n{text}");
    assert!(
        value("weft_repair_chunks_rebuilt_all_total ") > 0.0,
        "{text}"
    );
}

// ------------------------------------------------------------------------------------------
// 3. a corrupt chunk file
// ------------------------------------------------------------------------------------------

/// A chunk file of a d.node.
#[derive(Clone, Debug)]
struct ChunkFile {
    dnode: usize,
    path: PathBuf,
    family: u64,
    segment: u64,
    index: u8,
    data_offset: u64,
    data_len: u64,
}

impl ChunkFile {
    fn key(&self) -> String {
        format!("{:x}/{:x}.{}", self.family, self.segment, self.index)
    }
}

/// Segment ids from here up are checkpoint stripes.
const CHECKPOINT_SEGMENT_BASE: u64 = 0x4000_0000_0000_0000;

/// Every `.chunk` file of `family` on the d.nodes, with its header's data offset and length.
fn chunk_files(c: &Cluster, family: u64) -> Vec<ChunkFile> {
    let mut out = Vec::new();
    for d in &c.dnodes {
        let dir = d.data.join(format!("{family:016x}"));
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let path = e.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let Some(stem) = name.strip_suffix(".chunk") else {
                continue;
            };
            let Some((seg, idx)) = stem.split_once('.') else {
                continue;
            };
            let (Ok(segment), Ok(index)) = (u64::from_str_radix(seg, 16), idx.parse::<u8>()) else {
                continue;
            };
            let head = read_head(&path, 64);
            out.push(ChunkFile {
                dnode: d.index,
                path: path.clone(),
                family,
                segment,
                index,
                data_len: u64::from_le_bytes(head[48..56].try_into().unwrap()),
                data_offset: u64::from(u32::from_le_bytes(head[56..60].try_into().unwrap())),
            });
        }
    }
    out
}

fn read_head(path: &Path, n: usize) -> Vec<u8> {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    assert!(
        bytes.len() >= n && &bytes[..8] == b"WEFTCHK1",
        "{} is not a chunk file",
        path.display()
    );
    bytes[..n].to_vec()
}

/// Flips one byte of the second data page; returns (file offset, old byte).
fn flip_byte(f: &ChunkFile) -> (u64, u8) {
    let at = f.data_offset + 4096 + 100;
    let mut bytes = fs::read(&f.path).unwrap();
    let old = bytes[at as usize];
    bytes[at as usize] = !old;
    // Rewrite in place (same inode, as rot would be).
    fs::OpenOptions::new()
        .write(true)
        .open(&f.path)
        .and_then(|mut h| {
            use std::io::{Seek, SeekFrom, Write};
            h.seek(SeekFrom::Start(at))?;
            h.write_all(&bytes[at as usize..at as usize + 1])?;
            h.sync_all()
        })
        .unwrap_or_else(|e| panic!("corrupting {}: {e}", f.path.display()));
    (at, old)
}

/// Reads vol0 (the first `len` bytes) block run by block run and compares with `expected`.
fn assert_reads(c: &Cluster, expected: &[u8], what: &str) {
    let mut nbd = c.nbd_client("vol0");
    let got = read_all(&mut nbd, 0, expected.len() as u64)
        .unwrap_or_else(|(at, e)| panic!("{what}: read at {at} failed: {e}"));
    if let Some(d) = first_diff(&got, expected) {
        panic!("{what}: wrong data at byte {d} (block {})", d / 4096);
    }
    nbd.disconnect();
    c.step(&format!(
        "{what}: {} MiB read back correct",
        expected.len() >> 20
    ));
}

#[test]
fn corrupt_chunk_is_repaired_by_scrub() {
    let _serial = serial();
    let test = "corrupt_chunk_is_repaired_by_scrub";
    let (mut rng, seed) = test_rng(test);
    let c = Cluster::start(test, seed, ClusterOpts::new(6).volume_size("64M"));
    let blocks = 48 * MIB / 4096;
    let data = blocks_data(seed, 3, 0, blocks);
    let mut nbd = c.nbd_client("vol0");
    write_all(&mut nbd, 0, &data);
    nbd.flush().unwrap();
    nbd.disconnect();
    c.sync();

    // Data chunks (index < 4) of full log segments, from the middle of their stripe.
    let files = chunk_files(&c, 1);
    let full = files
        .iter()
        .map(|f| f.data_len)
        .max()
        .expect("no chunk files of family 1");
    let mut candidates: Vec<ChunkFile> = files
        .iter()
        .filter(|f| {
            f.segment < CHECKPOINT_SEGMENT_BASE
                && (1..3).contains(&f.index)
                && f.data_len == full
                && f.data_len > 3 * 4096
        })
        .cloned()
        .collect();
    candidates.sort_by_key(|f| (f.segment, f.index));
    candidates.shuffle(&mut rng);
    let b = candidates.first().cloned().expect("no candidate chunk");
    let a = candidates
        .iter()
        .find(|f| f.segment != b.segment)
        .cloned()
        .expect("a second segment");
    c.step(&format!(
        "{} chunk files of family 1; corrupting B = {} on d.node {} ({}), later A = {} on d.node {}",
        files.len(),
        b.key(),
        b.dnode,
        b.path.display(),
        a.key(),
        a.dnode
    ));

    // B: a read meets the bad page, reconstructs it from the stripe and never serves it.
    let before = u64_at(&c.status(), &["degraded_reads"]);
    flip_byte(&b);
    assert_reads(&c, &data, "read with chunk B corrupt");
    let after = u64_at(&c.status(), &["degraded_reads"]);
    assert!(
        after > before,
        "the corrupt page of {} should have been caught and reconstructed (degraded_reads {before} -> {after})",
        b.key()
    );

    // A: no read touches it; scrub finds it, quarantines it, and the repairer rebuilds it.
    let (at, old) = flip_byte(&a);
    let scrub = c.cli_json(&["cluster", "scrub", "--json"]);
    c.step(&format!("scrub: {scrub}"));
    let corrupt: BTreeSet<String> = scrub["corrupt"]
        .as_array()
        .expect("corrupt list")
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect();
    assert!(
        corrupt.contains(&a.key()),
        "scrub must report {} corrupt: {scrub}",
        a.key()
    );
    // B may be reported too if the repairer has not replaced it since the read found it.
    let allowed: BTreeSet<String> = [a.key(), b.key()].into();
    assert!(
        corrupt.is_subset(&allowed),
        "scrub reports chunks nobody corrupted: {scrub}"
    );
    assert!(
        scrub["failed_stores"].as_array().is_some_and(Vec::is_empty),
        "{scrub}"
    );
    let quarantined = PathBuf::from(format!("{}.corrupt", a.path.display()));

    c.wait_repaired(Duration::from_secs(60), 1, true);
    let scrub = c.cli_json(&["cluster", "scrub", "--json"]);
    assert_eq!(
        scrub["corrupt"].as_array().map(Vec::len),
        Some(0),
        "after the repair, scrub must find nothing: {scrub}"
    );
    assert!(
        u64_at(&scrub, &["checked"]) >= files.len() as u64,
        "scrub checked fewer chunks than there are: {scrub}"
    );
    assert!(
        quarantined.exists(),
        "the corrupt chunk should be kept as {}",
        quarantined.display()
    );
    // A fresh, correct copy of A is back (same PG position, so the same d.node).
    let fresh = chunk_files(&c, 1)
        .into_iter()
        .find(|f| f.segment == a.segment && f.index == a.index)
        .unwrap_or_else(|| panic!("no chunk file for {} after the repair", a.key()));
    let fresh_bytes = fs::read(&fresh.path).unwrap();
    assert_eq!(
        fresh_bytes[(fresh.data_offset + 4096 + 100) as usize],
        old,
        "the rebuilt {} (at {}) does not hold the original byte at {at}",
        a.key(),
        fresh.path.display()
    );
    c.step(&format!(
        "A rebuilt at {}, quarantined copy at {}",
        fresh.path.display(),
        quarantined.display()
    ));
    assert_reads(&c, &data, "read after the repair");
    c.step("done");
}

// ------------------------------------------------------------------------------------------
// 4. more losses than the code tolerates
// ------------------------------------------------------------------------------------------

/// Reads every block once: each must be the expected data or EIO. Returns the blocks that
/// failed.
fn read_blocks_eio_or_exact(c: &Cluster, seed: u64, tag: u64, blocks: u64, what: &str) -> Vec<u64> {
    let mut nbd = c.nbd_client("vol0");
    let mut failed = Vec::new();
    for lba in 0..blocks {
        match nbd.read(lba * 4096, 4096) {
            Ok(got) => {
                let want = block_data(seed, tag, lba);
                if got != want {
                    let lba_in = u64::from_le_bytes(got[..8].try_into().unwrap());
                    let tag_in = u64::from_le_bytes(got[8..16].try_into().unwrap());
                    panic!(
                        "{what}: block {lba} read WRONG data (first diff at byte {:?}; its header says lba {lba_in}, tag {tag_in}; zero block: {})",
                        first_diff(&got, &want),
                        got.iter().all(|&x| x == 0)
                    );
                }
            }
            Err(NbdError::Server(5)) => failed.push(lba),
            Err(e) => panic!("{what}: block {lba}: expected the data or EIO, got {e}"),
        }
    }
    nbd.disconnect();
    c.step(&format!(
        "{what}: {} of {blocks} blocks EIO, the rest exact",
        failed.len()
    ));
    failed
}

#[test]
fn three_lost_dnodes_give_io_errors_never_wrong_bytes() {
    let _serial = serial();
    let test = "three_lost_dnodes_give_io_errors_never_wrong_bytes";
    let (mut rng, seed) = test_rng(test);
    // No read cache: it would serve every block read while all d.nodes were up (exact bytes,
    // so still correct), and this test is about what reads from d.nodes do after losses.
    let mut opts = ClusterOpts::new(6).volume_size("64M");
    opts.cnode_args
        .insert("c1".into(), vec!["--read-cache-size".into(), "0".into()]);
    let mut c = Cluster::start(test, seed, opts);
    let tag = 4;
    let blocks = 32 * MIB / 4096;
    let mut nbd = c.nbd_client("vol0");
    write_all(&mut nbd, 0, &blocks_data(seed, tag, 0, blocks));
    nbd.flush().unwrap();
    nbd.disconnect();
    c.sync();
    let failed = read_blocks_eio_or_exact(&c, seed, tag, blocks, "all d.nodes up");
    assert!(
        failed.is_empty(),
        "reads failed with every d.node up: {failed:?}"
    );

    let lost = pick(&mut rng, 6, 3, &[]);
    c.step(&format!("killing d.nodes {lost:?}"));
    for &i in &lost {
        c.kill_dnode(i);
    }
    let failed_now = read_blocks_eio_or_exact(&c, seed, tag, blocks, "right after 3 kills");
    for &i in &lost {
        c.wait_node_state(i, "down", Duration::from_secs(20));
    }
    let failed = read_blocks_eio_or_exact(&c, seed, tag, blocks, "3 d.nodes down");
    assert!(
        !failed.is_empty() && !failed_now.is_empty(),
        "with 3 of 6 chunks of every stripe gone, some blocks must be unreadable"
    );

    for &i in &lost {
        c.restart_dnode(i);
    }
    c.wait_status(Duration::from_secs(30), "all d.nodes up", |s| {
        c.dnodes
            .iter()
            .all(|d| node_state(s, &d.id).as_deref() == Some("up"))
    });
    // The c.node's links to the restarted d.nodes may still be backing off: retry the failed
    // blocks (never accepting wrong data) until every one reads back.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut pending: Vec<u64> = (0..blocks).collect();
    let mut rounds = 0;
    while !pending.is_empty() {
        rounds += 1;
        assert!(
            Instant::now() < deadline,
            "{} blocks still EIO 30 s after the d.nodes came back (e.g. {:?})",
            pending.len(),
            &pending[..pending.len().min(8)]
        );
        let mut nbd = c.nbd_client("vol0");
        let mut still = Vec::new();
        for &lba in &pending {
            match nbd.read(lba * 4096, 4096) {
                Ok(got) => assert!(
                    got == block_data(seed, tag, lba),
                    "block {lba} read wrong data after the d.nodes came back"
                ),
                Err(NbdError::Server(5)) => still.push(lba),
                Err(e) => panic!("block {lba}: {e}"),
            }
        }
        nbd.disconnect();
        pending = still;
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    c.step(&format!("every block reads back exactly ({rounds} rounds)"));
}

// ------------------------------------------------------------------------------------------
// 5/6. a fresh c.node takes over; the old epoch is fenced
// ------------------------------------------------------------------------------------------

const VOL_BYTES: u64 = 32 * MIB;

/// What each image should read: vol0, snapshot s1 and clone k1.
struct Images {
    vol0: Vec<u8>,
    s1: Vec<u8>,
    k1: Vec<u8>,
}

fn write_model(
    c: &Cluster,
    img: &mut [u8],
    export: &str,
    seed: u64,
    tag: u64,
    lba: u64,
    count: u64,
) {
    let data = blocks_data(seed, tag, lba, count);
    let mut nbd = c.nbd_client(export);
    write_all(&mut nbd, lba * 4096, &data);
    nbd.flush().unwrap();
    nbd.disconnect();
    img[(lba * 4096) as usize..((lba + count) * 4096) as usize].copy_from_slice(&data);
}

/// vol0 written, snapshot s1, vol0 overwritten in part, clone k1 of s1 written in part.
fn build_images(c: &Cluster, seed: u64) -> Images {
    let mut vol0 = vec![0u8; VOL_BYTES as usize];
    write_model(c, &mut vol0, "vol0", seed, 10, 0, 2048); // 8 MiB
    write_model(c, &mut vol0, "vol0", seed, 11, 4096, 256); // 1 MiB at 16 MiB
    write_model(c, &mut vol0, "vol0", seed, 12, 7000, 3); // a few blocks
    c.cli_ok(&["snapshot", "create", "vol0", "s1"]);
    let s1 = vol0.clone();
    write_model(c, &mut vol0, "vol0", seed, 13, 256, 512); // overwrite 2 MiB at 1 MiB
    write_model(c, &mut vol0, "vol0", seed, 14, 6000, 256); // new 1 MiB at ~23 MiB
    c.cli_ok(&["clone", "create", "s1", "k1"]);
    let mut k1 = s1.clone();
    write_model(c, &mut k1, "k1", seed, 15, 1024, 300); // over the snapshot's data
    write_model(c, &mut k1, "k1", seed, 16, 7800, 100); // where the snapshot has zeroes
    c.step("wrote vol0, snapshot s1, clone k1");
    Images { vol0, s1, k1 }
}

fn assert_images(c: &Cluster, img: &Images, what: &str) {
    for (export, want) in [("vol0", &img.vol0), ("vol0@s1", &img.s1), ("k1", &img.k1)] {
        let mut nbd = c.nbd_client(export);
        assert_eq!(nbd.size, VOL_BYTES, "{what}: size of {export}");
        let got = read_all(&mut nbd, 0, VOL_BYTES)
            .unwrap_or_else(|(at, e)| panic!("{what}: reading {export} at {at}: {e}"));
        if let Some(d) = first_diff(&got, want) {
            panic!(
                "{what}: {export} differs at byte {d} (block {}): got {:02x?}, want {:02x?}",
                d / 4096,
                &got[d..(d + 16).min(got.len())],
                &want[d..(d + 16).min(want.len())]
            );
        }
        nbd.disconnect();
    }
    // The snapshot stays read-only under the new c.node.
    let mut snap = c.nbd_client("vol0@s1");
    assert!(
        snap.write(0, &[0u8; 4096]).is_err(),
        "{what}: a write to snapshot s1 was accepted"
    );
    c.step(&format!("{what}: vol0, s1 and k1 read back byte for byte"));
}

/// A chunk put to a d.node with the first c.node's epoch (1), for vol0's family (1), after
/// c.node B (epoch 2) fenced it, is refused with `Fenced { current: 2 }`.
fn assert_stale_epoch_refused(c: &Cluster) {
    let kv = c.etcd.connect().expect("etcd client");
    let (epoch, _) = weft_meta::get_json::<u64>(&kv, "weft/cnode/epoch")
        .expect("reading the epoch")
        .expect("no c.node epoch in etcd");
    assert_eq!(epoch, 2, "c.node B should hold epoch 2");
    let list = c.cli_json(&["dnode", "list", "--json"]);
    let nodes = list.as_array().expect("dnode list is an array");
    assert_eq!(nodes.len(), c.dnodes.len(), "{list:#}");
    for n in nodes {
        assert_eq!(n["state"], "up", "{list:#}");
    }
    // Every d.node refuses it; check two of them (by the API's list and by our own records).
    for n in nodes.iter().take(2) {
        let id = n["id"].as_str().unwrap().to_string();
        let addr: SocketAddr = n["addr"].as_str().unwrap().parse().unwrap();
        assert!(
            c.dnodes.iter().any(|d| d.id == id && d.addr == addr),
            "d.node {id} at {addr} is not one we started"
        );
        let store =
            RemoteChunkStore::new(id.clone(), addr, "weft".into(), ClientOptions::default());
        let segment = 0x3fff_0000_0000_0001;
        let meta = ChunkMeta {
            key: ChunkKey::new(1, segment, 0),
            epoch: 1,
            codec_id: 2,
            data_chunks: 4,
            parity_chunks: 2,
            stripe_len_bytes: 4 * 4096,
        };
        match store.put(&meta, &[0x5a; 4096]) {
            Err(ChunkError::Fenced {
                family: 1,
                epoch: 1,
                current: 2,
            }) => {}
            other => panic!("d.node {id}: a put with the stale epoch 1 gave {other:?}, not Fenced {{ current: 2 }}"),
        }
        let listed = store.list(1).expect("listing family 1");
        assert!(
            !listed.iter().any(|ci| ci.meta.key.segment == segment),
            "d.node {id} stored the refused chunk"
        );
        assert!(!listed.is_empty(), "d.node {id} has no chunk of family 1");
    }
    c.step("a chunk put with the stale epoch 1 is refused: Fenced { current: 2 }");
}

fn fresh_cnode_recovers(test: &str, kill9: bool) {
    let _serial = serial();
    let (_, seed) = test_rng(test);
    let mut c = Cluster::start(test, seed, ClusterOpts::new(6).volume_size("32M"));
    let images = build_images(&c, seed);
    c.sync();
    assert_images(&c, &images, "c.node A");
    if kill9 {
        c.cnode().kill9();
        c.step("c.node A killed -9 after weft sync");
    } else {
        c.cnode().terminate(Duration::from_secs(60));
        c.step("c.node A stopped (SIGTERM)");
    }
    c.start_cnode("b");
    assert_images(&c, &images, "c.node B (new empty data dir)");
    assert_stale_epoch_refused(&c);
    c.step("done");
}

#[test]
fn a_fresh_cnode_recovers_everything_after_sync() {
    fresh_cnode_recovers("a_fresh_cnode_recovers_everything_after_sync", false);
}

#[test]
fn a_fresh_cnode_recovers_everything_after_sync_and_kill9() {
    fresh_cnode_recovers(
        "a_fresh_cnode_recovers_everything_after_sync_and_kill9",
        true,
    );
}

// ------------------------------------------------------------------------------------------
// 7. a c.node restarted while more than m d.nodes are down waits for them; nothing is lost
// ------------------------------------------------------------------------------------------

/// The sequence: synced data, then flushed data, the c.node killed -9, then three of
/// six d.nodes (a rack losing power), the c.node started again on its data dir. It must not
/// discard what it cannot see: it waits, says for which d.nodes (`weft cluster status`,
/// `/readyz`, `/metrics`), and once they are back every block reads exactly.
#[test]
fn restart_with_three_dnodes_down_keeps_synced_data() {
    let _serial = serial();
    let test = "restart_with_three_dnodes_down_keeps_synced_data";
    let (mut rng, seed) = test_rng(test);
    let mut c = Cluster::start(test, seed, ClusterOpts::new(6).volume_size("64M"));
    let tag = 17;
    let half = 12 * MIB / 4096;
    let mut nbd = c.nbd_client("vol0");
    write_all(&mut nbd, 0, &blocks_data(seed, tag, 0, half));
    nbd.flush().unwrap();
    nbd.disconnect();
    c.sync();
    let mut nbd = c.nbd_client("vol0");
    write_all(&mut nbd, half * 4096, &blocks_data(seed, tag, half, half));
    nbd.flush().unwrap();
    nbd.disconnect();
    c.step("second half written and flushed; letting destage seal part of it");
    std::thread::sleep(Duration::from_secs(3));
    c.cnode().kill9();
    let lost = pick(&mut rng, 6, 3, &[]);
    let lost_ids: BTreeSet<String> = lost.iter().map(|&i| c.dnodes[i].id.clone()).collect();
    for &i in &lost {
        c.kill_dnode(i);
    }
    // Until their leases expire: the new c.node must learn of them from the placement-group
    // map alone (down since its start, positions kept), not from their registrations.
    let kv = c.etcd.connect().expect("etcd client");
    poll_until(
        Duration::from_secs(30),
        "the killed d.nodes' leases to expire",
        || {
            let registered = weft_meta::MetaStore::list(&kv, "weft/dnodes/").ok()?;
            (!registered
                .iter()
                .any(|(key, _)| lost_ids.iter().any(|id| key.ends_with(id.as_str()))))
            .then_some(())
        },
    );
    c.step("their registrations are gone");

    // The c.node again, on its own data dir (its journal), while three d.nodes are down.
    let data_dir = c.cnode().data_dir.clone();
    let mut cmd = std::process::Command::new(weft_bin());
    cmd.arg("--data-dir")
        .arg(&data_dir)
        .arg("cnode")
        .args(["--cluster", &c.etcd_url()])
        .args(["--nbd-listen", "127.0.0.1:0", "--api-listen", "127.0.0.1:0"])
        .args(["--metrics-listen", "127.0.0.1:0", "--iscsi-listen", "off"])
        .args(["--out-grace", &c.opts.out_grace])
        .args(["--wait-for-dnodes", "2s"])
        .args(["--redundancy", &c.opts.redundancy])
        .args(["--pg-count", &c.opts.pg_count.to_string()])
        .env("NO_COLOR", "1")
        .env_remove("WEFT_CLUSTER")
        .env_remove("WEFT_LOG")
        .env_remove("WEFT_DATA_DIR");
    let mut cnode = Bg::spawn(&mut cmd);
    let pid = cnode.pid();
    let early: Value = poll_until(
        Duration::from_secs(60),
        "the restarted c.node's serve.json",
        || {
            if let Some(st) = cnode.try_wait() {
                panic!("the c.node exited ({st}):\n{}", cnode.all_so_far());
            }
            let v: Value =
                serde_json::from_str(&fs::read_to_string(data_dir.join("serve.json")).ok()?)
                    .ok()?;
            (v["pid"].as_u64() == Some(u64::from(pid))).then_some(v)
        },
    );
    let api = early["api"].as_str().unwrap().to_string();
    let metrics = early["metrics"].as_str().unwrap().to_string();
    let status = poll_until(
        Duration::from_secs(60),
        "recovery to say what it waits for",
        || {
            if let Some(st) = cnode.try_wait() {
                panic!(
                    "the c.node exited instead of waiting ({st}):\n{}",
                    cnode.all_so_far()
                );
            }
            let out = c.cli(&["cluster", "status", "--json"]);
            let v: Value = serde_json::from_str(&out.stdout).ok()?;
            (v["mode"] == "recovering"
                && v["recovery"]["stripes"]
                    .as_array()
                    .is_some_and(|s| !s.is_empty()))
            .then_some(v)
        },
    );
    let waiting: BTreeSet<String> = status["recovery"]["waiting_for"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().split('@').next().unwrap().to_string())
        .collect();
    assert_eq!(
        waiting, lost_ids,
        "it must name exactly the d.nodes that are down (id@address): {status:#}"
    );
    c.step(&format!(
        "the c.node waits for {waiting:?}: {}",
        status["recovery"]["stripes"][0]["why"]
    ));
    let text = c.cli_ok(&["cluster", "status"]);
    assert!(text.contains("recovery: WAITING for d.nodes"), "{text}");
    let (code, body) = api_request(&api, "GET", "/readyz", None, None);
    assert_eq!(code, 503, "/readyz while recovering: {body}");
    let (code, _) = api_request(&api, "GET", "/api/v1/volumes", None, None);
    assert_eq!(code, 401, "no token, no answer, even while recovering");
    // A monitor's read-only token reads the recovering status and may change nothing.
    let read_only = fs::read_to_string(data_dir.join("api-token-read-only")).unwrap();
    let out = c.cli(&["--token", read_only.trim(), "cluster", "status", "--json"]);
    let v: Value = serde_json::from_str(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "cluster status with the read-only token ({e}):\n{}",
            out.all()
        )
    });
    assert_eq!(v["mode"], "recovering", "{v}");
    let (code, body) = api_request(
        &api,
        "POST",
        "/api/v1/volumes",
        Some(serde_json::json!({"name": "x", "size_bytes": 1u64 << 20})),
        Some(read_only.trim()),
    );
    assert_eq!(code, 403, "the read-only token while recovering: {body}");
    let (code, body) = api_request(&metrics, "GET", "", None, None);
    assert_eq!(code, 200);
    assert!(body.contains("weft_recovery_waiting 1"), "{body}");
    for id in &lost_ids {
        assert!(
            body.contains(&format!(
                "weft_recovery_waiting_for_dnode{{dnode=\"{id}\"}} 1"
            )),
            "{body}"
        );
    }
    assert!(
        !cnode.stdout_so_far().lines().any(|l| l.trim() == "ready"),
        "the c.node must not serve while it waits"
    );
    assert!(
        !cnode.all_so_far().contains("discarding stripe"),
        "nothing may be discarded while d.nodes are down:\n{}",
        cnode.all_so_far()
    );

    for &i in &lost {
        c.restart_dnode(i);
    }
    poll_until(
        Duration::from_secs(90),
        "the c.node to finish recovery",
        || {
            if let Some(st) = cnode.try_wait() {
                panic!("the c.node exited ({st}):\n{}", cnode.all_so_far());
            }
            cnode
                .stdout_so_far()
                .lines()
                .any(|l| l.trim() == "ready")
                .then_some(())
        },
    );
    let info: Value =
        serde_json::from_str(&fs::read_to_string(data_dir.join("serve.json")).unwrap()).unwrap();
    let nbd_addr: SocketAddr = info["nbd"].as_str().unwrap().parse().unwrap();
    c.step("recovered once the d.nodes were back");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut pending: Vec<u64> = (0..2 * half).collect();
    while !pending.is_empty() {
        assert!(
            Instant::now() < deadline,
            "{} blocks still EIO 60 s after recovery (e.g. {:?})",
            pending.len(),
            &pending[..pending.len().min(8)]
        );
        let mut nbd = NbdClient::connect(nbd_addr, "vol0").expect("NBD connect");
        let mut still = Vec::new();
        for &lba in &pending {
            match nbd.read(lba * 4096, 4096) {
                Ok(got) => assert!(
                    got == block_data(seed, tag, lba),
                    "block {lba} read wrong data after recovery (zero: {})",
                    got.iter().all(|&b| b == 0)
                ),
                Err(NbdError::Server(5)) => still.push(lba),
                Err(e) => panic!("block {lba}: {e}"),
            }
        }
        nbd.disconnect();
        pending = still;
        if !pending.is_empty() {
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    c.step("every block, synced and flushed, reads back exactly");
    assert!(
        !cnode.all_so_far().contains("discarding stripe"),
        "{}",
        cnode.all_so_far()
    );
    cnode.sigkill();
}
