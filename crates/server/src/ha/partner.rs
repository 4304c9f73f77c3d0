//! The standby partner: it keeps the owner's write-buffer mirror and takes over when the
//! owner's lease expires.
//!
//! Each connection from an owner writes a new mirror generation, a journal in
//! `<data dir>/mirror/<owner id>/<generation>` in the engine's own format and with the
//! owner's seqs, answering `RECEIVED` once a record is in it (handed to the OS) and `SYNCED`
//! once synced. When the owner says `CAUGHT_UP` (every record of its journal was sent), the
//! generation is synced and marked complete, and older generations of that owner are removed:
//! the new one holds everything they did that is not yet in stripes. At takeover the newest
//! complete generation becomes the new owner's journal, and recovery replays it.

use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use parking_lot::Mutex;
use weft_engine::journal::{Journal, JournalOptions, JournalRecord};

use super::wire;

/// The marker of a complete generation.
const COMPLETE_FILE: &str = "complete";
/// Records that arrived together are appended once they reach this many payload bytes.
const BATCH_BYTES_MAX: usize = 4 << 20;

#[derive(Debug)]
pub struct Partner {
    /// This c.node's id, told to the owner.
    id: String,
    dir: PathBuf,
    options: JournalOptions,
    addr: SocketAddr,
    /// Set at takeover: no more mirroring; the current connection is cut.
    took_over: AtomicBool,
    current: Mutex<Option<TcpStream>>,
    /// Mirror connections still running (stop waits for them: none may append to a
    /// generation once a successor recovers on it).
    active: std::sync::atomic::AtomicUsize,
}

impl Partner {
    /// Listen for an owner's mirror on `listen`; mirrors go under `data_dir/mirror`.
    pub fn start(
        listen: SocketAddr,
        data_dir: &Path,
        options: JournalOptions,
        id: String,
    ) -> anyhow::Result<Arc<Partner>> {
        let listener = TcpListener::bind(listen)
            .with_context(|| format!("binding the mirror listener on {listen}"))?;
        let partner = Arc::new(Partner {
            id,
            dir: data_dir.join("mirror"),
            options,
            addr: listener.local_addr()?,
            took_over: AtomicBool::new(false),
            current: Mutex::new(None),
            active: std::sync::atomic::AtomicUsize::new(0),
        });
        let p = Arc::clone(&partner);
        std::thread::Builder::new()
            .name("weft-partner".into())
            .spawn(move || p.accept(listener))?;
        Ok(partner)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop mirroring: the owner (should it still be alive) is cut off and refused.
    pub fn stop(&self) {
        self.took_over.store(true, Ordering::Release);
        if let Some(s) = self.current.lock().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Wake the accept loop so it sees the flag and closes the listener.
        let _ = TcpStream::connect(self.addr);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.active.load(Ordering::Acquire) > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    fn accept(self: Arc<Self>, listener: TcpListener) {
        for conn in listener.incoming() {
            if self.took_over.load(Ordering::Acquire) {
                return;
            }
            let Ok(conn) = conn else { continue };
            let _ = conn.set_nodelay(true);
            if let Ok(clone) = conn.try_clone() {
                if let Some(old) = self.current.lock().replace(clone) {
                    let _ = old.shutdown(std::net::Shutdown::Both);
                }
            }
            let me = Arc::clone(&self);
            self.active.fetch_add(1, Ordering::AcqRel);
            let spawned = std::thread::Builder::new()
                .name("weft-partner-conn".into())
                .spawn(move || {
                    let peer = conn.peer_addr().map(|a| a.to_string()).unwrap_or_default();
                    if let Err(e) = me.mirror(conn) {
                        tracing::warn!(owner = %peer, error = %e, "write-buffer mirror connection ended");
                    }
                    me.active.fetch_sub(1, Ordering::AcqRel);
                });
            if spawned.is_err() {
                self.active.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }

    /// One owner connection: a new generation.
    fn mirror(&self, conn: TcpStream) -> anyhow::Result<()> {
        let mut out = BufWriter::new(conn.try_clone()?);
        let mut input = BufReader::with_capacity(1 << 20, conn);
        let (kind, body) = wire::read_frame(&mut input)?;
        anyhow::ensure!(kind == wire::HELLO, "the owner did not say hello");
        let owner = String::from_utf8(body)?;
        anyhow::ensure!(
            !owner.is_empty()
                && owner.len() <= 64
                && owner
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "bad owner id {owner:?}"
        );
        if self.took_over.load(Ordering::Acquire) {
            wire::write_frame(
                &mut out,
                wire::REFUSED,
                b"this c.node took over; it mirrors no more",
            )?;
            out.flush()?;
            return Ok(());
        }
        wire::write_frame(&mut out, wire::HELLO, self.id.as_bytes())?;
        out.flush()?;
        let owner_dir = self.dir.join(&owner);
        std::fs::create_dir_all(&owner_dir)?;
        let generation = next_generation(&owner_dir)?;
        let gen_dir = owner_dir.join(format!("{generation:016x}"));
        tracing::info!(%owner, dir = %gen_dir.display(), "mirroring an owner's write buffer");
        let mut journal: Option<Journal> = None;
        let mut received = 0u64;
        let mut answered = 0u64;
        // Records that arrived together, appended with one write before they are answered
        // or any other frame is handled.
        let mut batch: Vec<JournalRecord> = Vec::new();
        let mut batch_bytes = 0usize;
        loop {
            if self.took_over.load(Ordering::Acquire) {
                anyhow::bail!("took over");
            }
            let (kind, body) = wire::read_frame(&mut input)?;
            if kind != wire::RECORD {
                append_all(&mut journal, &gen_dir, self.options, &mut batch)?;
                batch_bytes = 0;
            }
            match kind {
                wire::RECORD => {
                    let r = wire::record_of(body)?;
                    received = r.seq;
                    batch_bytes += r.payload.len();
                    batch.push(r);
                    if batch_bytes >= BATCH_BYTES_MAX {
                        append_all(&mut journal, &gen_dir, self.options, &mut batch)?;
                        batch_bytes = 0;
                    }
                }
                wire::CAUGHT_UP => {
                    let seq = wire::seq_of(&body)?;
                    let j = open_if_needed(&mut journal, &gen_dir, self.options, seq.max(1))?;
                    j.sync(j.written_seq())?;
                    crate::data_files::write_atomically(&gen_dir, COMPLETE_FILE, owner.as_bytes())?;
                    remove_older(&owner_dir, generation);
                    tracing::info!(%owner, through = seq, "write-buffer mirror complete");
                    wire::write_seq(&mut out, wire::SYNCED, seq)?;
                }
                wire::SYNC => {
                    let seq = wire::seq_of(&body)?;
                    if let Some(j) = &journal {
                        j.sync(seq.min(j.written_seq()))?;
                    }
                    wire::write_seq(&mut out, wire::SYNCED, seq)?;
                }
                wire::RELEASE => {
                    let seq = wire::seq_of(&body)?;
                    if let Some(j) = &journal {
                        j.release_upto(seq)?;
                    }
                }
                other => anyhow::bail!("unexpected frame {other} from the owner"),
            }
            // Answer once the frames that arrived together are in the journal.
            if input.buffer().is_empty() {
                append_all(&mut journal, &gen_dir, self.options, &mut batch)?;
                batch_bytes = 0;
                if received > answered {
                    wire::write_seq(&mut out, wire::RECEIVED, received)?;
                    answered = received;
                }
                out.flush()?;
            }
        }
    }
}

fn open_if_needed<'a>(
    journal: &'a mut Option<Journal>,
    dir: &Path,
    options: JournalOptions,
    first_seq: u64,
) -> anyhow::Result<&'a Journal> {
    if journal.is_none() {
        let (j, _) = Journal::open(dir, first_seq, options)?;
        *journal = Some(j);
    }
    Ok(journal.as_ref().expect("just opened"))
}

/// Append the records of `batch` (emptied) under their own seqs: each run of consecutive
/// seqs with one write, its first record through [`append`] (which opens the journal, or
/// reopens it past a gap).
fn append_all(
    journal: &mut Option<Journal>,
    dir: &Path,
    options: JournalOptions,
    batch: &mut Vec<JournalRecord>,
) -> anyhow::Result<()> {
    let mut start = 0;
    while start < batch.len() {
        append(journal, dir, options, &batch[start])?;
        let first = batch[start].seq;
        let run = batch[start + 1..]
            .iter()
            .enumerate()
            .take_while(|(i, r)| r.seq == first + 1 + *i as u64)
            .count();
        let end = start + 1 + run;
        if run > 0 {
            let j = journal.as_ref().expect("append opened it");
            let last = j.append_batch(&batch[start + 1..end])?;
            anyhow::ensure!(
                last == batch[end - 1].seq,
                "mirror journal gave seq {last} to record {}",
                batch[end - 1].seq
            );
        }
        start = end;
    }
    batch.clear();
    Ok(())
}

/// Append `r` under its own seq (a gap in the owner's seqs reopens the journal past it).
fn append(
    journal: &mut Option<Journal>,
    dir: &Path,
    options: JournalOptions,
    r: &JournalRecord,
) -> anyhow::Result<()> {
    let expected = journal.as_ref().map(|j| j.written_seq() + 1);
    if expected.is_some_and(|e| e > r.seq) {
        anyhow::bail!(
            "record {} arrived after {}",
            r.seq,
            expected.unwrap_or(0) - 1
        );
    }
    if expected.is_some_and(|e| e < r.seq) {
        // Drop first: the journal's files are reopened, continuing after the gap.
        *journal = None;
    }
    let j = open_if_needed(journal, dir, options, r.seq)?;
    let seq = j.append(r.header, &r.payload, |s| s)?;
    anyhow::ensure!(
        seq == r.seq,
        "mirror journal gave seq {seq} to record {}",
        r.seq
    );
    Ok(())
}

fn generations(owner_dir: &Path) -> anyhow::Result<Vec<(u64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(owner_dir)? {
        let entry = entry?;
        if let Some(g) = entry
            .file_name()
            .to_str()
            .and_then(|n| u64::from_str_radix(n, 16).ok())
        {
            out.push((g, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

fn next_generation(owner_dir: &Path) -> anyhow::Result<u64> {
    Ok(generations(owner_dir)?.last().map_or(1, |(g, _)| g + 1))
}

/// Older generations go once a newer one is complete (it holds all they held that is not in
/// stripes); incomplete newer ones never replace a complete older one.
fn remove_older(owner_dir: &Path, complete: u64) {
    if let Ok(gens) = generations(owner_dir) {
        for (g, path) in gens {
            if g < complete {
                if let Err(e) = std::fs::remove_dir_all(&path) {
                    tracing::warn!(dir = %path.display(), error = %e, "could not remove an old mirror generation");
                }
            }
        }
    }
}

/// The newest complete generation of `owner`'s mirror in `data_dir`: what a successor
/// recovers on.
pub fn complete_mirror(data_dir: &Path, owner: &str) -> Option<PathBuf> {
    newest_complete(&data_dir.join("mirror").join(owner))
        .ok()
        .flatten()
}

fn newest_complete(owner_dir: &Path) -> anyhow::Result<Option<PathBuf>> {
    if !owner_dir.exists() {
        return Ok(None);
    }
    Ok(generations(owner_dir)?
        .into_iter()
        .rev()
        .map(|(_, p)| p)
        .find(|p| p.join(COMPLETE_FILE).exists()))
}
