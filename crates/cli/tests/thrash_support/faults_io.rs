//! Disk and network faults: bytes flipped in chunk files (scrub must find them and the repair
//! rebuild them; reads must never return them), a d.node's disk full (`--capacity` just above
//! what it holds), and latency, a partition or connection resets between the c.node and a
//! d.node (through its proxy).

use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;

use crate::thrash_support::proxy::NetMode;
use crate::thrash_support::thrasher::{Thrasher, EIO_RETRY, PROXIED};
use crate::thrash_support::verify::Expect;

const EXACT: Expect = Expect::Exact {
    retry_for: EIO_RETRY,
};
/// Chunk file header: data length at 48..56 (u64), data offset at 56..60 (u32), little-endian.
const CHUNK_HEADER_BYTES: usize = 64;

impl Thrasher {
    /// Flip one byte in 1-3 chunk files of one d.node; reads must reconstruct, scrub must
    /// report them, the repair must rebuild them.
    pub fn fault_corrupt_chunks(&mut self) {
        let i = self.pick_dnodes(1)[0];
        let n = self.rng.random_range(1..=3usize);
        let picks: Vec<(u64, u64)> = (0..n)
            .map(|_| (self.rng.random(), self.rng.random()))
            .collect();
        let mut files = Vec::new();
        chunk_files(&self.c.dnodes[i].data, &mut files);
        files.sort();
        let mut flipped = Vec::new();
        for (f, off) in picks {
            if files.is_empty() {
                break;
            }
            let path = &files[(f % files.len() as u64) as usize];
            match flip(path, off) {
                Ok(at) => flipped.push(format!("{} @{at}", key_of(path))),
                Err(e) => self.log.record(
                    "note",
                    &self.dnode_name(i),
                    &format!("{}: {e}", path.display()),
                ),
            }
        }
        self.log
            .record("corrupt", &self.dnode_name(i), &flipped.join(", "));
        self.check("chunks corrupted", EXACT);
        let out = self.c.cli(&["cluster", "scrub", "--json"]);
        if !out.success() {
            self.fail(&format!("scrub failed: {}\n{}", out.stdout, out.stderr));
        }
        let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap_or_default();
        let corrupt: Vec<String> = v["corrupt"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|k| k.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let foreign: Vec<&String> = corrupt
            .iter()
            .filter(|k| {
                !flipped
                    .iter()
                    .any(|f| f.split(' ').next() == Some(k.as_str()))
            })
            .collect();
        self.log.record(
            "scrub",
            "cluster",
            &format!(
                "{} corrupt: {corrupt:?}; checked {}",
                corrupt.len(),
                v["checked"]
            ),
        );
        if !foreign.is_empty() {
            let note = format!("scrub found corrupt chunks nobody flipped: {foreign:?}");
            self.log.record("NOTE", "cluster", &note);
            self.notes.push(note);
        }
        self.heal();
        self.check("scrub and repair", EXACT);
    }

    /// Restart a d.node with `--capacity` a few MiB above what it holds; load fills it; then
    /// restart it without the limit.
    pub fn fault_disk_full(&mut self) {
        let i = self.pick_dnodes(1)[0];
        let spare_mib = self.rng.random_range(1..=8u64);
        let full_ms = self.rng.random_range(3000..10_000);
        let used = dir_bytes(&self.c.dnodes[i].data);
        let cap = used + (spare_mib << 20);
        self.kill_dnode(i);
        self.c.dnodes[i].extra_args = vec!["--capacity".into(), format!("{}K", cap >> 10)];
        self.restart_dnode(i);
        self.log.record(
            "disk full",
            &self.dnode_name(i),
            &format!("capacity {} MiB, {used} bytes used", cap >> 20),
        );
        std::thread::sleep(Duration::from_millis(full_ms));
        self.check("a d.node's disk full", EXACT);
        self.kill_dnode(i);
        self.c.dnodes[i].extra_args.clear();
        self.restart_dnode(i);
        self.wait_all_up();
        self.check("disk no longer full", EXACT);
    }

    /// Latency, a partition or a reset between the c.node and a proxied d.node.
    pub fn fault_network(&mut self) {
        let p = self.rng.random_range(0..PROXIED);
        let kind = self.rng.random_range(0..3);
        let ms = self.rng.random_range(2000..8000u64);
        let delay = Duration::from_millis(self.rng.random_range(20..300));
        let proxy = Arc::clone(&self.proxies[p]);
        let target = self.dnode_name(p);
        match kind {
            0 | 1 => {
                let mode = if kind == 0 {
                    NetMode::Delay(delay)
                } else {
                    NetMode::Partition
                };
                proxy.set_mode(mode);
                self.log
                    .record("network", &target, &format!("{mode:?} for {ms} ms"));
                // Undone by the clock, not by this thread: the check below may wait on it.
                let p2 = Arc::clone(&proxy);
                let healer = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(ms));
                    p2.set_mode(NetMode::Pass);
                });
                self.check(&format!("{mode:?}"), EXACT);
                let _ = healer.join();
                self.log.record("network", &target, "Pass");
            }
            _ => {
                let n = proxy.reset_all();
                self.log
                    .record("network", &target, &format!("reset {n} connections"));
            }
        }
        self.check("network healed", EXACT);
    }
}

/// Every `*.chunk` file under `dir`.
fn chunk_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            chunk_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "chunk") {
            out.push(p);
        }
    }
}

/// `family/segment.index` as scrub names it, from `.../<family:016x>/<segment:x>.<index>.chunk`.
fn key_of(path: &Path) -> String {
    let fam = path
        .parent()
        .and_then(|d| d.file_name())
        .and_then(|f| u64::from_str_radix(&f.to_string_lossy(), 16).ok())
        .unwrap_or(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.trim_end_matches(".chunk");
    match stem.split_once('.') {
        Some((seg, idx)) => {
            let seg = u64::from_str_radix(seg, 16).unwrap_or(0);
            format!("{fam:x}/{seg:x}.{idx}")
        }
        None => format!("{fam:x}/{stem}"),
    }
}

/// Flips one byte of the data of a chunk file in place; returns its file offset.
fn flip(path: &Path, pick: u64) -> std::io::Result<u64> {
    let bytes = fs::read(path)?;
    if bytes.len() < CHUNK_HEADER_BYTES || &bytes[..8] != b"WEFTCHK1" {
        return Err(std::io::Error::other("not a chunk file"));
    }
    let data_len = u64::from_le_bytes(bytes[48..56].try_into().expect("8 bytes"));
    let data_off = u64::from(u32::from_le_bytes(
        bytes[56..60].try_into().expect("4 bytes"),
    ));
    if data_len == 0 || data_off + data_len > bytes.len() as u64 {
        return Err(std::io::Error::other("no data"));
    }
    let at = data_off + pick % data_len;
    let mut f = fs::OpenOptions::new().write(true).open(path)?;
    f.seek(SeekFrom::Start(at))?;
    f.write_all(&[!bytes[at as usize]])?;
    f.sync_all()?;
    Ok(at)
}

/// Bytes of the files under `dir`.
fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    rd.flatten()
        .map(|e| {
            let p = e.path();
            if p.is_dir() {
                dir_bytes(&p)
            } else {
                e.metadata().map(|m| m.len()).unwrap_or(0)
            }
        })
        .sum()
}
