//! The engine: owns the journal, the write buffer, the families, the chunk store and the
//! destager, sealer, syncer and repair threads, and serves the I/O calls of front ends and the
//! maintenance calls of the management API (volumes and snapshots are in [`crate::catalog`];
//! the waits for stripes in [`crate::write_waits`]; its figures in `engine_figures`).
//!
//! Locks, in the order they may be taken: `meta` → `range_gate` → journal (inside
//! [`Journal::append`]) → `state`. Disk reads and writes happen with `state` released; data in
//! open or sealing segments is read from memory under it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;

use weft_chunk::{FileDisk, LocalChunkStore};

use crate::block_map::Mapping;
pub use crate::config::{Backends, EngineConfig, LocalStoreConfig};
use crate::engine_figures::{repair_status, stats};
use crate::error::{EngineError, IoFailure};
use crate::journal::{RecordHeader, RecordKind, JOURNAL_PAYLOAD_MAX_BYTES};
use crate::read::{resolve, Resolved};
use crate::state::{map_io, Command, Shared, State};
use crate::stats::{EngineStats, GcReport};
use crate::stripe::SingleStore;
use crate::units::{FamilyId, LayerId, LogicalBlockSize, VolumeId, BLOCK_SIZE_U64};
use crate::write_waits::{wait_acked_durable, wait_written_through};

/// A read that finds its segment gone (moved by GC meanwhile) looks the blocks up again.
const READ_RETRIES_MAX: usize = 4;
/// How long a writer waits for buffer space before checking again for shutdown or a full disk.
const BACKPRESSURE_WAIT: Duration = Duration::from_millis(50);
/// A write to a full datastore that holds garbage waits this long for GC before ENOSPC.
const SPACE_WAIT_MAX: Duration = Duration::from_secs(30);

/// How far [`Engine::write_journaled`] took a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Journaled {
    /// Acknowledged already (nothing to write, or written through).
    Done,
    /// Journaled as record `seq`: acknowledged once the journal says it is replicated.
    Replicate(u64),
}

/// One extent of a block-status answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    pub hole: bool,
    pub zero: bool,
}

/// The volume engine of a c.node.
#[derive(Debug)]
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
    destager: Mutex<Option<JoinHandle<()>>>,
    sealer: Mutex<Option<JoinHandle<()>>>,
    syncer: Mutex<Option<JoinHandle<()>>>,
    repairer: Mutex<Option<JoinHandle<()>>>,
    /// Blocks read from chunks, by what they are (`read_cache`).
    read_cache: crate::read_cache::ReadCache,
}

/// An open volume or snapshot, for a front end. `id` is the key I/O calls take.
#[derive(Debug, Clone)]
pub struct VolumeHandle {
    pub id: VolumeId,
    pub name: String,
    /// Snapshots are read-only: writes fail with [`EngineError::ReadOnly`].
    pub read_only: bool,
    /// The sector size front ends present; engine I/O is still in whole 4 KiB blocks.
    pub logical_block_size: LogicalBlockSize,
    pub gone: Arc<AtomicBool>,
}

/// How long a maintenance command (sync, GC, checkpoint) keeps trying before it answers
/// that it cannot finish now.
const MAINTENANCE_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(5);

impl Engine {
    /// Open (or create) the datastore in `config.data_dir`, recovering after a crash.
    pub fn open(config: EngineConfig) -> Result<Engine, EngineError> {
        Engine::open_local(config, LocalStoreConfig::default())
    }

    /// Single-process mode: the chunks on one local d.node store in `<data dir>/dnode0/chunks`.
    pub fn open_local(
        config: EngineConfig,
        store: LocalStoreConfig,
    ) -> Result<Engine, EngineError> {
        let meta_dir = config.data_dir.join("meta");
        if meta_dir.join("cluster.json").exists() && !meta_dir.join("meta.json").exists() {
            return Err(IoFailure::CorruptMetadata {
                what: meta_dir.display().to_string(),
                detail: "this data dir was written by an older weft (format 2: one JSON cluster state, chunks without headers); this one reads format 3 (chunks with headers and per-page checksums, per-family checkpoints on the d.nodes): start with a new --data-dir, and copy volumes over NBD (qemu-img convert) from the old version".into(),
            }
            .into());
        }
        let dir = config.data_dir.join("dnode0").join("chunks");
        let disk = FileDisk::open(&dir, store.direct_io)
            .map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
        let chunks = LocalChunkStore::open(Arc::new(disk), store.capacity_bytes)
            .map_err(|e| IoFailure::Stripe(e.into()))?;
        let kv = weft_meta::EmbeddedMetaStore::open(&meta_dir).map_err(|e| {
            IoFailure::CorruptMetadata {
                what: meta_dir.display().to_string(),
                detail: e.to_string(),
            }
        })?;
        let backends = Backends {
            placement: Arc::new(SingleStore(Arc::new(chunks))),
            metastore: Arc::new(kv),
            write_log: None,
            epoch: 0,
            shard: crate::units::ShardId::default(),
        };
        Engine::open_with(config, backends)
    }

    /// Open over any backends: placement of chunk stores (local, remote d.nodes,
    /// fault-injecting), metadata store (embedded, etcd) and write log.
    pub fn open_with(config: EngineConfig, backends: Backends) -> Result<Engine, EngineError> {
        let shared = Arc::new(crate::recovery::recover(config, backends)?);
        let thread_shared = shared.clone();
        let sealer = std::thread::Builder::new()
            .name("weft-seal".into())
            .spawn(move || crate::seal::run_sealer(&thread_shared))
            .map_err(|e| IoFailure::disk("sealer thread", e))?;
        let thread_shared = shared.clone();
        let syncer = std::thread::Builder::new()
            .name("weft-sync".into())
            .spawn(move || crate::syncer::run_syncer(&thread_shared))
            .map_err(|e| IoFailure::disk("syncer thread", e))?;
        let thread_shared = shared.clone();
        let destager = std::thread::Builder::new()
            .name("weft-destage".into())
            .spawn(move || crate::destager::run(&thread_shared))
            .map_err(|e| IoFailure::disk("destager thread", e))?;
        shared.repair.status.lock().rate_limit_bytes_per_s = shared.config.repair_rate_bytes_per_s;
        // Only stripes with redundancy can be repaired.
        let repairer = if shared.stripes.placement().redundancy(0).total_chunks() > 1 {
            let thread_shared = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("weft-repair".into())
                    .spawn(move || crate::repair::run_repairer(&thread_shared))
                    .map_err(|e| IoFailure::disk("repair thread", e))?,
            )
        } else {
            None
        };
        let read_cache = crate::read_cache::ReadCache::new(shared.config.read_cache_bytes);
        let engine = Engine {
            read_cache,
            shared,
            destager: Mutex::new(Some(destager)),
            sealer: Mutex::new(Some(sealer)),
            syncer: Mutex::new(Some(syncer)),
            repairer: Mutex::new(repairer),
        };
        // Replayed trims queued behind a merge change their maps only when destaged: apply
        // them before serving reads. What that needs is destage, not durable stripes: with
        // d.nodes down a sync may fail to seal (the records stay in the journal), and the
        // engine starts once the merges are applied, waiting for destage meanwhile.
        let mut logged = false;
        while engine.shared.state.lock().layer_work.any_merge_queued() {
            match engine.sync() {
                Ok(()) => break,
                Err(EngineError::MaintenanceFailed { detail, .. }) => {
                    if !logged {
                        tracing::warn!(%detail, "replayed layer merges wait for destage; stripes cannot be sealed now");
                        logged = true;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(engine)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }

    /// Threads that reduce destaged blocks, the destager included
    /// (`EngineConfig::reduction_threads`, 0 resolved to the machine's cores).
    pub fn reduction_threads(&self) -> usize {
        self.shared.reduce_pool.threads()
    }

    /// Destage everything, checkpoint, and stop the destager. Calls after this fail.
    pub fn shutdown(&self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.work.notify_all();
        self.shared.space.notify_all();
        if let Some(handle) = self.destager.lock().take() {
            let _ = handle.join();
        }
        if let Some(writer) = self.shared.checkpoint_writer.lock().take() {
            // Nothing may write in the data dir after the engine (and its lock) is gone.
            let _ = writer.join();
        }
        self.shared.stop_sealer.store(true, Ordering::Release);
        self.shared.seal_work.notify_all();
        if let Some(handle) = self.sealer.lock().take() {
            let _ = handle.join();
        }
        // After the sealer: what it wrote last is synced before the syncer stops.
        self.shared.stop_syncer.store(true, Ordering::Release);
        self.shared.sync_work.notify_all();
        if let Some(handle) = self.syncer.lock().take() {
            let _ = handle.join();
        }
        if let Some(handle) = self.repairer.lock().take() {
            let _ = handle.join();
        }
    }

    // ---- redundancy ----------------------------------------------------------------------

    /// What the repairer has done and is doing.
    pub fn repair_status(&self) -> crate::repair::RepairStatus {
        repair_status(&self.shared)
    }

    /// Change the rebuild rate limit.
    pub fn set_repair_rate(&self, bytes_per_s: u64) {
        self.shared.repair.status.lock().rate_limit_bytes_per_s = bytes_per_s.max(1);
    }

    /// Scrub every reachable store (each verifies every chunk's checksums; a d.node of a
    /// cluster quarantines corrupt chunks), then start a repair scan so they are rebuilt.
    /// Returns (chunks checked, corrupt chunks found, stores that could not be scrubbed).
    pub fn scrub(&self) -> (u64, Vec<weft_chunk::ChunkKey>, Vec<String>) {
        let mut checked = 0;
        let mut corrupt = Vec::new();
        let mut failed = Vec::new();
        for store in self.shared.stripes.placement().all_stores() {
            match store.scrub(None) {
                Ok(r) => {
                    checked += r.checked;
                    corrupt.extend(r.corrupt);
                }
                Err(e) => failed.push(format!("{}: {e}", store.name())),
            }
        }
        for key in &corrupt {
            tracing::warn!(chunk = %key, "scrub found a corrupt chunk; rebuilding it from its stripe");
        }
        self.repair_now();
        (checked, corrupt, failed)
    }

    /// Start a repair scan now.
    pub fn repair_now(&self) {
        self.shared.repair.kick.store(true, Ordering::Release);
    }

    /// The stripe store (epochs, counters).
    pub fn stripes(&self) -> &crate::stripe::StripeStore {
        &self.shared.stripes
    }

    /// The families the cluster state knows (for fencing them all).
    pub fn family_ids(&self) -> Vec<u64> {
        let meta = self.shared.meta.lock();
        let mut out: Vec<u64> = meta
            .state
            .volumes
            .iter()
            .map(|v| v.family.0)
            .chain(meta.state.snapshots.iter().map(|s| s.family.0))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// Stop as if the process had been killed: nothing more is destaged, sealed or
    /// checkpointed; what the journal handed to the OS stays. For crash tests.
    pub fn crash(&self) {
        self.shared.abandon.store(true, Ordering::Release);
        self.shutdown();
    }

    /// The current size of an open volume or snapshot.
    pub fn volume_size(&self, id: VolumeId) -> Result<u64, EngineError> {
        Ok(self.shared.state.lock().image(id)?.size_bytes)
    }

    // ---- I/O -----------------------------------------------------------------------------

    /// Write whole blocks; durable against a process crash on return, against power loss with
    /// `fua` or after a later [`Engine::flush`]. The write buffer keeps a copy of `data` until
    /// it is destaged; a caller that owns its buffer saves that copy with
    /// [`Engine::write_owned`].
    pub fn write(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), EngineError> {
        self.write_from(id, offset_bytes, data, None, fua)
    }

    /// [`Engine::write`] of a buffer the caller hands over (a `Vec<u8>` or `Bytes`): the write
    /// buffer keeps it as it is, for reads and destage, instead of copying it.
    pub fn write_owned(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        data: impl Into<Bytes>,
        fua: bool,
    ) -> Result<(), EngineError> {
        let data: Bytes = data.into();
        self.write_from(id, offset_bytes, &data, Some(&data), fua)
    }

    /// The write; `owned`, when given, holds the same bytes as `data` and is buffered as is.
    fn write_from(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        data: &[u8],
        owned: Option<&Bytes>,
        fua: bool,
    ) -> Result<(), EngineError> {
        let Journaled::Replicate(seq) = self.write_journaled(id, offset_bytes, data, owned, fua)?
        else {
            return Ok(());
        };
        let shared = &self.shared;
        shared.journal.replicated(seq).map_err(map_io)?;
        if fua {
            shared.journal.sync(seq).map_err(map_io)?;
        }
        Ok(())
    }

    /// A write up to its acknowledgement's wait: journaled (or written through, waited for
    /// and checked: done), with the data buffered. What is left is [`Journaled::Replicate`]:
    /// wait for the journal's second copy, then (with `fua`) sync.
    pub(crate) fn write_journaled(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        data: &[u8],
        owned: Option<&Bytes>,
        fua: bool,
    ) -> Result<Journaled, EngineError> {
        let count = self.check_range(id, offset_bytes, data.len() as u64)?;
        if count == 0 {
            return Ok(Journaled::Done);
        }
        self.check_writable(id)?;
        if data.len() > JOURNAL_PAYLOAD_MAX_BYTES as usize {
            return Err(EngineError::OutOfRange {
                offset_bytes,
                length_bytes: data.len() as u64,
            });
        }
        self.admit(data.len() as u64)?;
        let lba = offset_bytes / BLOCK_SIZE_U64;
        let shared = &self.shared;
        let min = shared.config.write_through_min_bytes;
        // Not while stripe writes fail (a store down, a full disk): the journal can still
        // take the write, a stripe cannot.
        let through =
            min > 0 && data.len() as u64 >= min && shared.state.lock().segments.failure().is_none();
        let kind = if through {
            RecordKind::WriteThrough
        } else {
            RecordKind::Write
        };
        let (seq, family) = self.append_write(id, lba, count, data, owned, kind)?;
        shared
            .counters
            .host_written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let seq = if through {
            // Acknowledged once its segment's stripe is written (it survives a kill of any
            // process); with FUA once it is durable. FLUSH waits for the sync.
            match wait_written_through(shared, family, seq, fua) {
                // Not if this process may have lost the ownership of its volumes meanwhile
                // (the journal's record stands; the epoch fence refuses a successor's
                // d.nodes the rest).
                Ok(()) => {
                    shared.journal.may_serve().map_err(map_io)?;
                    return Ok(Journaled::Done);
                }
                Err(EngineError::Io(_) | EngineError::NoSpace) => {
                    // Stripe writes started failing meanwhile: journal the data after all. It
                    // was not acknowledged yet, so a later seq is as good as the first one.
                    self.append_write(id, lba, count, data, owned, RecordKind::Write)?
                        .0
                }
                Err(e) => return Err(e),
            }
        } else {
            seq
        };
        Ok(Journaled::Replicate(seq))
    }

    /// Append a write's record (with its data, or a write-through reference) and buffer its
    /// data (`owned` as it is, else a copy of `data`); returns the record's seq and the
    /// volume's family.
    fn append_write(
        &self,
        id: VolumeId,
        lba: u64,
        count: u64,
        data: &[u8],
        owned: Option<&Bytes>,
        kind: RecordKind,
    ) -> Result<(u64, FamilyId), EngineError> {
        let shared = &self.shared;
        // The buffer must hold the data whatever the record's kind: reads of blocks not yet
        // destaged are served from it, and destage reduces from it (a write-through record
        // has no payload to replay, but its blocks still pass through the buffer).
        let buffered = match owned {
            Some(b) => b.clone(),
            None => Bytes::copy_from_slice(data),
        };
        let payload = if kind == RecordKind::WriteThrough {
            &[][..]
        } else {
            data
        };
        let family = std::cell::Cell::new(FamilyId(0));
        let seq = shared.journal.append_resolved(
            payload,
            || {
                let st = shared.state.lock();
                let (fid, layer) = writable_layer(&st, id)?;
                family.set(fid);
                Ok::<_, EngineError>(RecordHeader {
                    kind,
                    layer,
                    lba,
                    count,
                })
            },
            |seq, header| {
                shared.state.lock().buffer.push_write(
                    seq,
                    family.get(),
                    header.layer,
                    lba,
                    buffered,
                );
                seq
            },
        )?;
        shared.work.notify_one();
        Ok((seq, family.get()))
    }

    /// Unmap a range (reads return zeroes); its space becomes garbage.
    pub fn trim(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        length_bytes: u64,
        fua: bool,
    ) -> Result<(), EngineError> {
        self.apply_range(id, offset_bytes, length_bytes, RecordKind::Trim, fua)
    }

    /// Make a range read as zeroes. With `may_unmap` it is trimmed; without, it stays
    /// allocated as written zeroes (NBD NO_HOLE), which costs no data space either.
    pub fn write_zeroes(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        length_bytes: u64,
        may_unmap: bool,
        fua: bool,
    ) -> Result<(), EngineError> {
        let kind = if may_unmap {
            RecordKind::Trim
        } else {
            RecordKind::Zero
        };
        self.apply_range(id, offset_bytes, length_bytes, kind, fua)
    }

    /// Make every acknowledged write durable against power loss (all volumes): write-through
    /// writes acknowledged from stripes not yet synced wait for the syncer, then one journal
    /// sync covers every journaled record (and the stripes' durable markers).
    pub fn flush(&self) -> Result<(), EngineError> {
        wait_acked_durable(&self.shared)?;
        let upto = self.shared.journal.written_seq();
        self.shared.journal.sync(upto).map_err(map_io)
    }

    /// Read whole blocks (of a volume or a snapshot).
    pub fn read(&self, id: VolumeId, offset_bytes: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        let count = self.check_range(id, offset_bytes, buf.len() as u64)?;
        let lba = offset_bytes / BLOCK_SIZE_U64;
        let mut last_err = None;
        for _ in 0..READ_RETRIES_MAX {
            match crate::read::read_blocks(&self.shared, &self.read_cache, id, lba, count, buf) {
                // Checked after the read: a c.node that lost its ownership meanwhile may have
                // read what its successor has since overwritten.
                Ok(()) => return self.shared.journal.may_serve().map_err(map_io),
                Err(EngineError::Io(e)) if e.is_moved() => {
                    last_err = Some(EngineError::Io(e));
                }
                Err(e) => return Err(e),
            }
        }
        Err(last_err.expect("retried at least once"))
    }

    /// Allocation status of a range, as runs of equal status.
    pub fn block_status(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<Extent>, EngineError> {
        let count = self.check_range(id, offset_bytes, length_bytes)?;
        let lba = offset_bytes / BLOCK_SIZE_U64;
        let st = self.shared.state.lock();
        let image = st.image(id)?;
        let family = st.families.get(&image.family).ok_or(EngineError::Gone)?;
        let chain = st.chain(image);
        let mut out: Vec<Extent> = Vec::new();
        for l in lba..lba + count {
            let (hole, zero) = match resolve(&st.buffer, family, &chain, l) {
                Resolved::Buffered(_) | Resolved::Mapped(Mapping::Block(_)) => (false, false),
                Resolved::Mapped(Mapping::Zero) => (false, true),
                Resolved::Mapped(Mapping::Absent) => (true, true),
            };
            match out.last_mut() {
                Some(last) if last.hole == hole && last.zero == zero => {
                    last.length_bytes += BLOCK_SIZE_U64
                }
                _ => out.push(Extent {
                    length_bytes: BLOCK_SIZE_U64,
                    hole,
                    zero,
                }),
            }
        }
        Ok(out)
    }

    // ---- maintenance ---------------------------------------------------------------------

    /// Wait until every buffered write is destaged into sealed segments.
    pub fn sync(&self) -> Result<(), EngineError> {
        self.command("sync", Command::Sync)
    }

    /// Run GC now over every segment below the live-fraction threshold.
    pub fn gc_now(&self) -> Result<GcReport, EngineError> {
        self.command("gc", Command::Gc)
    }

    pub fn checkpoint_now(&self) -> Result<(), EngineError> {
        self.command("checkpoint", Command::Checkpoint)
    }

    pub fn stats(&self) -> EngineStats {
        EngineStats {
            read_cache: self.read_cache.stats(),
            ..stats(&self.shared)
        }
    }

    /// How long each call site has held the engine's state lock (see `lock_timing`).
    pub fn lock_holds(&self) -> Vec<crate::lock_timing::SiteHolds> {
        self.shared.state.holds()
    }

    // ---- helpers -------------------------------------------------------------------------

    /// Hand a maintenance command to the destager and wait for its answer. A failure is
    /// what the command ran into (a stripe write that cannot be made durable while d.nodes
    /// are down, a full store), not corrupt metadata.
    /// A command that failed is tried again for [`MAINTENANCE_RETRY_FOR`] (the sealer retries
    /// stripe writes meanwhile): a d.node that has just come back may still be reconnecting.
    fn command<T>(
        &self,
        what: &'static str,
        make: impl Fn(std::sync::mpsc::Sender<Result<T, String>>) -> Command,
    ) -> Result<T, EngineError> {
        let started = std::time::Instant::now();
        loop {
            let (tx, rx) = std::sync::mpsc::channel();
            self.shared.commands.lock().push(make(tx));
            self.shared.work.notify_all();
            match rx.recv() {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(detail)) if started.elapsed() >= MAINTENANCE_RETRY_FOR => {
                    return Err(EngineError::MaintenanceFailed { what, detail })
                }
                Ok(Err(_)) => std::thread::sleep(crate::seal::SEAL_RETRY_INTERVAL),
                Err(_) => return Err(EngineError::Gone),
            }
        }
    }

    /// Check a request against the volume; returns its length in blocks.
    fn check_range(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<u64, EngineError> {
        let size = self.volume_size(id)?;
        let bad = EngineError::OutOfRange {
            offset_bytes,
            length_bytes,
        };
        if !offset_bytes.is_multiple_of(BLOCK_SIZE_U64)
            || !length_bytes.is_multiple_of(BLOCK_SIZE_U64)
        {
            return Err(bad);
        }
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= size => Ok(length_bytes / BLOCK_SIZE_U64),
            _ => Err(bad),
        }
    }

    fn check_writable(&self, id: VolumeId) -> Result<(), EngineError> {
        if self.shared.state.lock().image(id)?.writable {
            Ok(())
        } else {
            Err(EngineError::ReadOnly)
        }
    }

    /// Wait for buffer space; refuse when the datastore is full and GC cannot free enough
    /// within [`SPACE_WAIT_MAX`].
    fn admit(&self, bytes: u64) -> Result<(), EngineError> {
        let shared = &self.shared;
        let started = std::time::Instant::now();
        let mut st = shared.state.lock();
        let result = loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return Err(EngineError::Gone);
            }
            if st.segments.out_of_space() {
                return Err(EngineError::NoSpace);
            }
            let (capacity, used) = shared.stripes.space();
            if let Some(cap) = capacity {
                // Everything not yet in the store will be: buffered data (before reduction,
                // so this errs on the safe side), open segments, stripes being written; plus
                // room for GC to move blocks (it writes their new segments before it deletes
                // the old ones, so a store full to the last byte could never free any).
                let reserve = 2 * shared.config.segment_size_bytes as u64
                    + crate::gc::GC_PRESSED_MOVE_BYTES_MAX;
                let open: u64 = st
                    .families
                    .values()
                    .filter_map(|f| f.open.as_ref())
                    .map(|o| o.data_bytes() as u64)
                    .sum();
                let sealing = st.segments.sealing_bytes();
                let pending = st.buffer.data_bytes() + open + sealing + bytes + reserve;
                if used + pending > cap {
                    // Garbage GC could free: wait for it (it runs more often meanwhile).
                    let live: u64 = st.families.values().map(|f| f.table.stored_bytes()).sum();
                    let garbage = used.saturating_sub(live);
                    if garbage <= pending || started.elapsed() >= SPACE_WAIT_MAX {
                        break Err(EngineError::NoSpace);
                    }
                    shared.space_wanted.store(true, Ordering::Release);
                    shared.work.notify_one();
                    st.wait_for(&shared.space, BACKPRESSURE_WAIT);
                    continue;
                }
            }
            if st.buffer.data_bytes() + bytes <= shared.config.write_buffer_max_bytes
                || st.buffer.is_empty()
            {
                break Ok(());
            }
            shared.work.notify_one();
            st.wait_for(&shared.space, BACKPRESSURE_WAIT);
        };
        if shared.space_wanted.load(Ordering::Relaxed) && result.is_ok() {
            shared.space_wanted.store(false, Ordering::Release);
        }
        result
    }

    fn apply_range(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        length_bytes: u64,
        kind: RecordKind,
        fua: bool,
    ) -> Result<(), EngineError> {
        let count = self.check_range(id, offset_bytes, length_bytes)?;
        if count == 0 {
            return Ok(());
        }
        self.check_writable(id)?;
        let lba = offset_bytes / BLOCK_SIZE_U64;
        let shared = &self.shared;
        let family = std::cell::Cell::new(FamilyId(0));
        let seq = loop {
            let gate = shared.range_gate.lock();
            let appended = shared.journal.append_resolved(
                &[],
                || {
                    let st = shared.state.lock();
                    let (fid, layer) = writable_layer(&st, id)?;
                    if st.layer_work.is_merging_into(layer) {
                        return Err(EngineError::LayerBusy);
                    }
                    family.set(fid);
                    // A trim above a base must hide the base's blocks: it zeroes instead.
                    let has_base = st
                        .families
                        .get(&fid)
                        .is_some_and(|f| f.graph.parent(layer).is_some());
                    let kind = if kind == RecordKind::Trim && has_base {
                        RecordKind::Zero
                    } else {
                        kind
                    };
                    Ok(RecordHeader {
                        kind,
                        layer,
                        lba,
                        count,
                    })
                },
                |seq, header| {
                    let mut st = shared.state.lock();
                    crate::destage::buffer_range(&mut st, seq, family.get(), header);
                    seq
                },
            );
            match appended {
                Err(EngineError::LayerBusy) => {
                    // A snapshot merge into this volume is queued; the destager applies it
                    // soon (it holds no lock this thread holds once the gate is dropped).
                    drop(gate);
                    shared.work.notify_one();
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => break other?,
            }
        };
        shared.work.notify_one();
        shared.journal.replicated(seq).map_err(map_io)?;
        if fua {
            shared.journal.sync(seq).map_err(map_io)?;
        }
        Ok(())
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The family and layer a write to image `id` goes to.
fn writable_layer(st: &State, id: VolumeId) -> Result<(FamilyId, LayerId), EngineError> {
    let image = st.image(id)?;
    if !image.writable {
        return Err(EngineError::ReadOnly);
    }
    Ok((image.family, image.layer))
}
