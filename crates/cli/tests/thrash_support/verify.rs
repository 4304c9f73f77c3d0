//! The check after each fault: with the writers paused, read every block of every image
//! (volumes, the clone, every live snapshot) over NBD and judge it against the model.
//!
//! Each image is read on its own connection and thread, 16 blocks at a time; a run that fails is read again block by block, so one
//! unreadable stripe costs only its blocks. An EIO is allowed while more than m d.nodes are
//! down ([`Expect::EioAllowed`]); otherwise the block is retried for a while (the c.node's links
//! to restarted d.nodes may still be backing off) and is a problem if it stays unreadable.
//! Wrong bytes are never allowed.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::common::{NbdClient, NbdError};
use crate::thrash_support::block::{decode, Decoded, BLOCK_BYTES};
use crate::thrash_support::model::{Models, Verdict};
use crate::thrash_support::writer::Shared;

/// Blocks per read request.
const READ_BLOCKS: u64 = 16;
/// How long connecting to an export may fail before the check gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(60);
/// Between two passes over blocks that failed with EIO.
const EIO_RETRY_GAP: Duration = Duration::from_millis(500);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// At most m d.nodes down: every block must read (after `retry_for`).
    Exact { retry_for: Duration },
    /// More than m down: EIO or the right bytes.
    EioAllowed,
}

/// What one check found.
#[derive(Debug, Default)]
pub struct Report {
    pub blocks: u64,
    /// Blocks whose floor was an acknowledged version (not the base).
    pub acked_checked: u64,
    pub eio_allowed: u64,
    pub wrong: Vec<String>,
    pub lost: Vec<String>,
    /// Blocks still EIO when they must read.
    pub unreadable: Vec<String>,
    /// Of those, blocks that held an acknowledged version: lost writes too.
    pub unreadable_acked: u64,
    /// Blocks reading an older version than acknowledged, but not older than flushed, after
    /// the c.node that acknowledged it was killed (allowed: never flushed).
    pub unflushed_gone: u64,
}

impl Report {
    /// Adds what another part of the same check found.
    fn absorb(&mut self, o: Report) {
        self.blocks += o.blocks;
        self.acked_checked += o.acked_checked;
        self.eio_allowed += o.eio_allowed;
        self.wrong.extend(o.wrong);
        self.lost.extend(o.lost);
        self.unreadable.extend(o.unreadable);
        self.unreadable_acked += o.unreadable_acked;
        self.unflushed_gone += o.unflushed_gone;
    }

    pub fn clean(&self) -> bool {
        self.wrong.is_empty() && self.lost.is_empty() && self.unreadable.is_empty()
    }

    pub fn summary(&self) -> String {
        format!(
            "{} blocks verified ({} with an acknowledged floor), {} EIO (allowed), {} wrong, {} lost, {} unreadable",
            self.blocks,
            self.acked_checked,
            self.eio_allowed,
            self.wrong.len(),
            self.lost.len(),
            self.unreadable.len()
        )
    }
}

/// Which image a block belongs to.
#[derive(Clone, Copy, Debug)]
enum Which {
    Image(usize),
    Snap(usize),
}

/// Reads and checks everything through c.node incarnation `inc` at `nbd`. The writers must
/// be paused.
pub fn verify(shared: &Shared, nbd: SocketAddr, inc: u64, expect: Expect) -> Report {
    let mut report = Report::default();
    let list: Vec<(Which, String, u64)> = {
        let m = shared.models.lock().unwrap();
        let imgs = m
            .images
            .iter()
            .enumerate()
            .map(|(i, x)| (Which::Image(i), x.export.clone(), x.blocks.len() as u64));
        let snaps = m
            .snaps
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.deleted)
            .map(|(i, s)| (Which::Snap(i), s.export.clone(), s.blocks.len() as u64));
        imgs.chain(snaps).collect()
    };
    // Every image is read on its own connection and thread: the check is round-trip bound.
    let passes: Vec<(Report, Which, String, Vec<u64>)> = std::thread::scope(|scope| {
        let handles: Vec<_> = list
            .into_iter()
            .map(|(which, export, blocks)| {
                scope.spawn(move || {
                    let (r, bad) = first_pass(shared, nbd, inc, which, &export, blocks);
                    (r, which, export, bad)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("verify thread panicked"))
            .collect()
    });
    let mut failed: Vec<(Which, String, Vec<u64>)> = Vec::new();
    for (r, which, export, bad) in passes {
        report.absorb(r);
        if !bad.is_empty() {
            failed.push((which, export, bad));
        }
    }
    match expect {
        Expect::EioAllowed => {
            report.eio_allowed += failed.iter().map(|(_, _, b)| b.len() as u64).sum::<u64>();
        }
        Expect::Exact { retry_for } => {
            // One deadline for the whole check: the links back off once, not per image.
            let deadline = Instant::now() + retry_for;
            let mut last_err = String::new();
            while !failed.is_empty() && Instant::now() < deadline {
                std::thread::sleep(EIO_RETRY_GAP);
                for (which, export, bad) in &mut failed {
                    let mut conn = connect(nbd, export);
                    let mut still = Vec::new();
                    for &l in bad.iter() {
                        match read(&mut conn, nbd, export, l, 1) {
                            Ok(data) => judge(shared, *which, export, l, &data, inc, &mut report),
                            Err(e) => {
                                last_err = e;
                                still.push(l);
                            }
                        }
                    }
                    conn.disconnect();
                    *bad = still;
                }
                failed.retain(|(_, _, b)| !b.is_empty());
            }
            let m = shared.models.lock().unwrap();
            for (which, export, bad) in &failed {
                for &l in bad {
                    let floor = match which {
                        Which::Image(i) => m.images[*i].blocks[l as usize].floor(inc),
                        Which::Snap(s) => snap_floor(&m, *s, l, inc),
                    };
                    report.unreadable.push(format!(
                        "{export} block {l}: {last_err} for {retry_for:?} with every d.node up (acknowledged version {floor} unreadable)"
                    ));
                    if floor > 0 {
                        report.unreadable_acked += 1;
                    }
                }
            }
        }
    }
    report
}

/// One image read once: what it found, and the blocks that failed with an NBD error.
fn first_pass(
    shared: &Shared,
    nbd: SocketAddr,
    inc: u64,
    which: Which,
    export: &str,
    blocks: u64,
) -> (Report, Vec<u64>) {
    let mut report = Report::default();
    let mut conn = connect(nbd, export);
    let mut bad = Vec::new();
    let mut lba = 0;
    while lba < blocks {
        let n = READ_BLOCKS.min(blocks - lba);
        match read(&mut conn, nbd, export, lba, n) {
            Ok(data) => {
                for i in 0..n {
                    let at = (i as usize) * BLOCK_BYTES;
                    let block = &data[at..at + BLOCK_BYTES];
                    judge(shared, which, export, lba + i, block, inc, &mut report);
                }
            }
            Err(_) => {
                for l in lba..lba + n {
                    match read(&mut conn, nbd, export, l, 1) {
                        Ok(data) => judge(shared, which, export, l, &data, inc, &mut report),
                        Err(_) => bad.push(l),
                    }
                }
            }
        }
        lba += n;
    }
    conn.disconnect();
    (report, bad)
}

fn connect(nbd: SocketAddr, export: &str) -> NbdClient {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        match NbdClient::connect(nbd, export) {
            Ok(c) => return c,
            Err(e) => {
                assert!(
                    Instant::now() < deadline,
                    "verify: cannot connect to {nbd}/{export} for {CONNECT_TIMEOUT:?}: {e}"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
}

/// Reads `n` blocks at `lba`: an NBD error reply is `Err` with its errno; a broken connection is
/// reconnected and the read retried (a few times).
fn read(
    conn: &mut NbdClient,
    nbd: SocketAddr,
    export: &str,
    lba: u64,
    n: u64,
) -> Result<Vec<u8>, String> {
    for _ in 0..3 {
        match conn.read(lba * BLOCK_BYTES as u64, (n as usize * BLOCK_BYTES) as u32) {
            Ok(d) => return Ok(d),
            Err(NbdError::Server(e)) => return Err(format!("NBD error {e}")),
            Err(e) => {
                eprintln!("verify: {export} read at block {lba}: {e}; reconnecting");
                *conn = connect(nbd, export);
            }
        }
    }
    panic!("verify: {export} read at block {lba}: the connection keeps breaking");
}

fn judge(
    shared: &Shared,
    which: Which,
    export: &str,
    lba: u64,
    data: &[u8],
    inc: u64,
    r: &mut Report,
) {
    r.blocks += 1;
    let decoded = match decode(shared.salt, data) {
        Ok(d) => d,
        Err(why) => {
            r.wrong.push(format!("{export} block {lba}: {why}"));
            return;
        }
    };
    let mut m = shared.models.lock().unwrap();
    let (verdict, floor) = match which {
        Which::Image(i) => (
            m.check_image(i, lba, &decoded, inc),
            m.images[i].blocks[lba as usize].floor(inc),
        ),
        Which::Snap(s) => (
            m.check_snap_content(s, lba, &decoded, inc),
            snap_floor(&m, s, lba, inc),
        ),
    };
    if floor > 0 {
        r.acked_checked += 1;
    }
    match verdict {
        Verdict::Ok(v) => match which {
            Which::Image(i) => {
                if v < m.images[i].blocks[lba as usize].acked {
                    r.unflushed_gone += 1;
                }
                m.settle_image(i, lba, v, inc)
            }
            Which::Snap(s) => m.pin_snap(s, lba, v, inc),
        },
        Verdict::Wrong(w) => r.wrong.push(format!(
            "{export} block {lba}: {w} (read {})",
            show(&decoded)
        )),
        Verdict::Lost(w) => r.lost.push(format!("{export} block {lba}: {w}")),
    }
}

fn snap_floor(m: &Models, s: usize, lba: u64, inc: u64) -> u64 {
    let b = m.snaps[s].blocks[lba as usize];
    if b.lo_inc == inc {
        b.lo_acked
    } else {
        b.lo_flushed
    }
}

fn show(d: &Decoded) -> String {
    match d {
        Decoded::Zero => "zeroes".into(),
        Decoded::Version { tag, lba, version } => format!("tag {tag} lba {lba} version {version}"),
    }
}
