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

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use parking_lot::Mutex;
use weft_engine::journal::{Journal, JournalOptions, RecordHeader};

use super::wire;

/// The marker of a complete generation.
const COMPLETE_FILE: &str = "complete";
/// Records that arrived together are appended once they reach this many payload bytes.
const BATCH_BYTES_MAX: usize = 4 << 20;
/// The connection's read buffer: one `read` takes in this much of the owner's stream (it
/// grows for a larger record, up to the protocol's frame limit).
const READ_BUFFER_BYTES: usize = 1 << 20;

#[derive(Debug)]
pub struct Partner {
    /// This c.node's id, told to the owner.
    id: String,
    dir: PathBuf,
    options: JournalOptions,
    /// Its own listener's address (`None`: detached, see [`Partner::detached`]).
    addr: Option<SocketAddr>,
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
            addr: Some(listener.local_addr()?),
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

    /// A partner without a listener of its own: the connections of one shard's owner are
    /// handed to it ([`Partner::serve`]) by [`super::shard_mirrors`]; mirrors go under
    /// `data_dir/mirror` (the shard's dir).
    pub fn detached(data_dir: &Path, options: JournalOptions, id: String) -> Arc<Partner> {
        Arc::new(Partner {
            id,
            dir: data_dir.join("mirror"),
            options,
            addr: None,
            took_over: AtomicBool::new(false),
            current: Mutex::new(None),
            active: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The listener's address (a detached partner has none).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.addr
    }

    /// Stop mirroring: the owner (should it still be alive) is cut off and refused.
    pub fn stop(&self) {
        self.took_over.store(true, Ordering::Release);
        if let Some(s) = self.current.lock().take() {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        // Wake the accept loop so it sees the flag and closes the listener.
        if let Some(addr) = self.addr {
            let _ = TcpStream::connect(addr);
        }
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
            self.serve(conn);
        }
    }

    /// Mirror what the owner on `conn` sends, on a thread of its own; a new connection
    /// replaces (cuts) the one before it.
    pub fn serve(self: &Arc<Self>, conn: TcpStream) {
        let _ = conn.set_nodelay(true);
        if let Ok(clone) = conn.try_clone() {
            if let Some(old) = self.current.lock().replace(clone) {
                let _ = old.shutdown(std::net::Shutdown::Both);
            }
        }
        let me = Arc::clone(self);
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

    /// One owner connection: a new generation.
    fn mirror(&self, conn: TcpStream) -> anyhow::Result<()> {
        let mut out = conn.try_clone()?;
        let mut input = conn;
        let mut frames = wire::FrameReader::new(READ_BUFFER_BYTES);
        let hello = loop {
            if let Some(f) = frames.next_frame()? {
                break f;
            }
            anyhow::ensure!(
                frames.fill(&mut input)? > 0,
                "the owner closed the connection"
            );
        };
        anyhow::ensure!(hello.kind == wire::HELLO, "the owner did not say hello");
        let name = String::from_utf8(frames.body(&hello).to_vec())?;
        // `<owner id>@<shard>` for a shard owned besides the owner's own (the shard chose
        // this partner, see `super::shard_mirrors`); the owner id alone names the mirror.
        let owner = name
            .split_once('@')
            .map_or(name.as_str(), |(o, _)| o)
            .to_string();
        anyhow::ensure!(
            !owner.is_empty()
                && owner.len() <= 64
                && owner
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-'),
            "bad owner id {owner:?}"
        );
        let mut answers = Vec::new();
        if self.took_over.load(Ordering::Acquire) {
            wire::write_frame(
                &mut answers,
                wire::REFUSED,
                b"this c.node took over; it mirrors no more",
            )?;
            out.write_all(&answers)?;
            return Ok(());
        }
        wire::write_frame(&mut answers, wire::HELLO, self.id.as_bytes())?;
        out.write_all(&answers)?;
        answers.clear();
        let owner_dir = self.dir.join(&owner);
        std::fs::create_dir_all(&owner_dir)?;
        let generation = next_generation(&owner_dir)?;
        let mut mirror = Generation {
            dir: owner_dir.join(format!("{generation:016x}")),
            options: self.options,
            journal: None,
        };
        tracing::info!(%owner, dir = %mirror.dir.display(), "mirroring an owner's write buffer");
        let mut received = 0u64;
        let mut answered = 0u64;
        // The records of one read, appended with one write before they are answered or any
        // other frame is handled: (seq, header, the frame whose body holds it).
        let mut batch: Vec<(u64, RecordHeader, wire::Frame)> = Vec::new();
        let mut batch_bytes = 0usize;
        loop {
            if self.took_over.load(Ordering::Acquire) {
                anyhow::bail!("took over");
            }
            while let Some(frame) = frames.next_frame()? {
                let body = frames.body(&frame);
                if frame.kind == wire::RECORD {
                    let (seq, header, payload) = wire::record_parts(body)?;
                    received = seq;
                    batch_bytes += payload.len();
                    batch.push((seq, header, frame));
                    if batch_bytes >= BATCH_BYTES_MAX {
                        mirror.append(&frames, &mut batch)?;
                        batch_bytes = 0;
                    }
                    continue;
                }
                mirror.append(&frames, &mut batch)?;
                batch_bytes = 0;
                match frame.kind {
                    wire::CAUGHT_UP => {
                        let seq = wire::seq_of(body)?;
                        let j = mirror.open(seq.max(1))?;
                        j.sync(j.written_seq())?;
                        crate::data_files::write_atomically(
                            &mirror.dir,
                            COMPLETE_FILE,
                            owner.as_bytes(),
                        )?;
                        remove_older(&owner_dir, generation);
                        tracing::info!(%owner, through = seq, "write-buffer mirror complete");
                        wire::write_seq(&mut answers, wire::SYNCED, seq)?;
                    }
                    wire::SYNC => {
                        let seq = wire::seq_of(body)?;
                        if let Some(j) = &mirror.journal {
                            j.sync(seq.min(j.written_seq()))?;
                        }
                        wire::write_seq(&mut answers, wire::SYNCED, seq)?;
                    }
                    wire::RELEASE => {
                        let seq = wire::seq_of(body)?;
                        if let Some(j) = &mirror.journal {
                            j.release_upto(seq)?;
                        }
                    }
                    other => anyhow::bail!("unexpected frame {other} from the owner"),
                }
            }
            // Answer once the frames of this read are in the journal: one RECEIVED for all
            // its records, with the other answers in one write.
            mirror.append(&frames, &mut batch)?;
            batch_bytes = 0;
            if received > answered {
                wire::write_seq(&mut answers, wire::RECEIVED, received)?;
                answered = received;
            }
            if !answers.is_empty() {
                out.write_all(&answers)?;
                answers.clear();
            }
            anyhow::ensure!(
                frames.fill(&mut input)? > 0,
                "the owner closed the connection"
            );
        }
    }
}

/// The mirror generation one connection writes.
struct Generation {
    dir: PathBuf,
    options: JournalOptions,
    /// Opened at the first record (under its seq) or at `CAUGHT_UP`.
    journal: Option<Journal>,
}

impl Generation {
    fn open(&mut self, first_seq: u64) -> anyhow::Result<&Journal> {
        if self.journal.is_none() {
            let (j, _) = Journal::open(&self.dir, first_seq, self.options)?;
            self.journal = Some(j);
        }
        Ok(self.journal.as_ref().expect("just opened"))
    }

    /// Append the records of `batch` (emptied; their payloads are in `frames`) under their
    /// own seqs: each run of consecutive seqs with one write (a gap in the owner's seqs
    /// reopens the journal past it).
    fn append(
        &mut self,
        frames: &wire::FrameReader,
        batch: &mut Vec<(u64, RecordHeader, wire::Frame)>,
    ) -> anyhow::Result<()> {
        let mut run: Vec<(RecordHeader, &[u8])> = Vec::with_capacity(batch.len());
        let mut start = 0;
        while start < batch.len() {
            let first = batch[start].0;
            let len = 1 + batch[start + 1..]
                .iter()
                .enumerate()
                .take_while(|(i, (seq, _, _))| *seq == first + 1 + *i as u64)
                .count();
            run.clear();
            for (_, header, frame) in &batch[start..start + len] {
                let (_, _, payload) = wire::record_parts(frames.body(frame))?;
                run.push((*header, payload));
            }
            let j = self.at(first)?;
            let last = j.append_batch(&run)?;
            let expected = first + len as u64 - 1;
            anyhow::ensure!(
                last == expected,
                "mirror journal gave seq {last} to record {expected}"
            );
            start += len;
        }
        batch.clear();
        Ok(())
    }

    /// The journal, where the next record is `seq` (a gap in the owner's seqs reopens it
    /// past the gap).
    fn at(&mut self, seq: u64) -> anyhow::Result<&Journal> {
        let expected = self.journal.as_ref().map(|j| j.written_seq() + 1);
        if let Some(e) = expected {
            anyhow::ensure!(e <= seq, "record {seq} arrived after {}", e - 1);
            if e < seq {
                // Drop first: the journal's files are reopened, continuing after the gap.
                self.journal = None;
            }
        }
        self.open(seq)
    }
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
