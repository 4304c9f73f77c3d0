//! The engine: owns the journal, the write buffer, the families, the chunk store and the
//! destager and sealer threads, and serves the I/O calls of front ends and the maintenance
//! calls of the management API (volumes and snapshots are in [`crate::catalog`]).
//!
//! Locks, in the order they may be taken: `meta` → `range_gate` → journal (inside
//! [`Journal::append`]) → `state`. Disk reads and writes happen with `state` released; data in
//! open or sealing segments is read from memory under it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use serde::Serialize;

use crate::block_map::Mapping;
use crate::checkpoint::SealedSegment;
use crate::chunk_store::ChunkStore;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::journal::{
    Journal, JournalOptions, RecordHeader, RecordKind, JOURNAL_PAYLOAD_MAX_BYTES,
};
use crate::metastore::{MetaStore, PendingLayerOp};
use crate::units::{FamilyId, LayerId, SegmentId, VolumeId, BLOCK_SIZE_BYTES, BLOCK_SIZE_U64};
use crate::write_buffer::WriteBuffer;

/// A read that finds its segment gone (moved by GC meanwhile) looks the blocks up again.
const READ_RETRIES_MAX: usize = 4;
/// How long a writer waits for buffer space before checking again for shutdown or a full disk.
const BACKPRESSURE_WAIT: Duration = Duration::from_millis(50);

/// Tunables of one engine; see the `weft serve` flags for defaults and units.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// A family's open segment is sealed when its block data reaches this size.
    pub segment_size_bytes: usize,
    /// Writers wait when this much acknowledged data is waiting for destage.
    pub write_buffer_max_bytes: u64,
    /// The most the chunk store may hold; `None`: until the file system is full.
    pub capacity_bytes: Option<u64>,
    /// Read chunks with O_DIRECT (no page cache).
    pub direct_io: bool,
    /// Take a checkpoint after this many bytes of segments were sealed.
    pub checkpoint_every_bytes: u64,
    /// Seal an open segment that saw no new block for this long.
    pub idle_seal_ms: u64,
    /// GC compacts segments whose live fraction is below this.
    pub gc_live_fraction_max: f64,
    /// How often the destager considers GC.
    pub gc_interval_ms: u64,
    /// A dropped layer (refresh, rollback, delete) with more blocks than this is released in
    /// slices of this many LBAs, one per destage step, so a big drop never holds I/O.
    pub drop_slice_blocks: u64,
    pub journal: JournalOptions,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            data_dir: data_dir.into(),
            segment_size_bytes: 8 << 20,
            write_buffer_max_bytes: 512 << 20,
            capacity_bytes: None,
            direct_io: true,
            checkpoint_every_bytes: 4 << 30,
            idle_seal_ms: 1000,
            gc_live_fraction_max: 0.5,
            gc_interval_ms: 2000,
            drop_slice_blocks: 32 << 10,
            journal: JournalOptions::default(),
        }
    }

    /// Tiny limits, so tests reach "segment full", "buffer full" and "GC" quickly.
    pub fn for_tests(data_dir: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            segment_size_bytes: 64 << 10,
            write_buffer_max_bytes: 1 << 20,
            checkpoint_every_bytes: 1 << 20,
            idle_seal_ms: 50,
            gc_interval_ms: 100,
            drop_slice_blocks: 16,
            journal: JournalOptions {
                file_bytes: 256 << 10,
                prefill: false,
            },
            ..EngineConfig::new(data_dir)
        }
    }
}

/// Data reduction across all families: every layer's own entries (a block a clone reads
/// from its base is counted once, in the base).
#[derive(Debug, Clone, Serialize, Default)]
pub struct ReductionStats {
    /// 4096 × mapped blocks (written data or zeroes, not trimmed).
    pub logical_bytes: u64,
    /// 4096 × blocks eliminated as zero.
    pub zero_bytes: u64,
    /// 4096 × (non-zero mapped blocks − unique stored blocks).
    pub dedup_saved_bytes: u64,
    /// 4096 × unique stored blocks − stored bytes.
    pub compression_saved_bytes: u64,
    /// Bytes of live stored blocks, after compression.
    pub stored_bytes: u64,
    pub unique_blocks: u64,
    /// logical / stored; absent when nothing is stored.
    pub ratio: Option<f64>,
}

/// GC counters since start.
#[derive(Debug, Clone, Serialize, Default)]
pub struct GcStats {
    pub runs: u64,
    pub segments_reclaimed: u64,
    pub bytes_moved: u64,
    pub bytes_reclaimed: u64,
}

/// What one GC run did.
#[derive(Debug, Clone, Serialize, Default)]
pub struct GcReport {
    pub segments_reclaimed: u64,
    pub bytes_moved: u64,
    pub bytes_reclaimed: u64,
}

/// Engine-wide figures for the API and metrics.
#[derive(Debug, Clone, Serialize)]
pub struct EngineStats {
    pub reduction: ReductionStats,
    /// Bytes written to chunks (segments, GC moves, summaries) per byte written by hosts.
    pub write_amplification: Option<f64>,
    pub host_written_bytes: u64,
    pub chunk_written_bytes: u64,
    pub gc: GcStats,
    pub buffer_bytes: u64,
    pub buffer_records: u64,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: u64,
    pub sealed_segments: u64,
    pub journal_files: u64,
    pub corrupt_reads: u64,
    pub out_of_space: bool,
    pub volumes: u64,
    /// Snapshots that can be opened (deleted ones kept hidden for clones are not counted).
    pub snapshots: u64,
    /// Estimated metadata memory: 8 bytes per map entry of allocated pages + 80 per stored block.
    pub metadata_memory_bytes: u64,
}

/// One extent of a block-status answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u64,
    pub hole: bool,
    pub zero: bool,
}

/// An open-able image (a volume, or a snapshot exported read-only) as the engine state holds
/// it, under a key that lives as long as the image keeps its contents: refresh and rollback
/// give the volume a new key, so requests of clients that still hold the old one fail.
#[derive(Debug)]
pub(crate) struct Image {
    pub name: String,
    pub family: FamilyId,
    pub size_bytes: u64,
    /// The layer reads start from: a volume's top, a snapshot's own layer.
    pub layer: LayerId,
    /// Writes go to `layer`; false for snapshots.
    pub writable: bool,
    /// Set when the image is deleted, refreshed or rolled back: front ends disconnect.
    pub gone: Arc<AtomicBool>,
}

/// A segment whose stripe is being written (or failed to be): still readable from memory.
#[derive(Debug)]
pub(crate) struct SealingSegment {
    pub bytes: Arc<Vec<u8>>,
    pub family: FamilyId,
    pub since_seq: Option<u64>,
    pub journal_hwm: u64,
    pub data_bytes: u64,
}

/// Everything behind the state lock.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Open-able images by key (see [`Image`]).
    pub images: HashMap<VolumeId, Image>,
    /// Image keys by name.
    pub image_keys: HashMap<String, VolumeId>,
    pub next_image_key: u64,
    pub families: HashMap<FamilyId, Family>,
    /// Merges queued into each layer: trims of that layer wait until they are applied (a trim
    /// changes the map when it is buffered; the merge must see the map as of its turn).
    pub merging_into: HashMap<LayerId, usize>,
    /// Big layers being dropped a slice at a time: (family, layer, next LBA).
    pub dropping: std::collections::VecDeque<(FamilyId, LayerId, u64)>,
    /// Layer operations the destager applied; once a checkpoint covers them they leave the
    /// cluster state's pending list.
    pub applied_layer_ops: Vec<PendingLayerOp>,
    /// Applied layer operations a durable checkpoint covers: the destager removes them from
    /// the cluster state's pending list.
    pub covered_layer_ops: Vec<PendingLayerOp>,
    pub buffer: WriteBuffer,
    pub sealing: BTreeMap<SegmentId, SealingSegment>,
    pub sealed: BTreeMap<SegmentId, SealedSegment>,
    pub next_segment_id: u64,
    /// Seq of the last record the destager took from the FIFO.
    pub processed_seq: u64,
    /// Segments with id below this are reflected in the checkpoint (GC may delete them).
    pub checkpoint_below: u64,
    pub sealed_bytes_since_checkpoint: u64,
    /// A stripe write failed for lack of space: writers get ENOSPC until one succeeds.
    pub out_of_space: bool,
    /// The last stripe write failed with this; cleared by the next success.
    pub seal_failure: Option<String>,
}

impl State {
    pub fn image(&self, key: VolumeId) -> Result<&Image, EngineError> {
        self.images.get(&key).ok_or(EngineError::Gone)
    }

    /// Make an image open-able under a new key; returns the key.
    pub fn insert_image(&mut self, image: Image) -> VolumeId {
        self.next_image_key += 1;
        let key = VolumeId(self.next_image_key);
        self.image_keys.insert(image.name.clone(), key);
        self.images.insert(key, image);
        key
    }

    /// Remove an image by name; its clients are told it is gone.
    pub fn remove_image(&mut self, name: &str) {
        if let Some(key) = self.image_keys.remove(name) {
            if let Some(image) = self.images.remove(&key) {
                image.gone.store(true, Ordering::Release);
            }
        }
    }

    /// The layers an image reads through, top first.
    pub fn chain(&self, image: &Image) -> Vec<LayerId> {
        match self.families.get(&image.family) {
            Some(f) => f.graph.chain(image.layer),
            None => vec![image.layer],
        }
    }

    /// Journal records with seq <= this are reflected in sealed segments.
    pub fn durable_journal_hwm(&self) -> u64 {
        let mut hwm = self.processed_seq;
        for f in self.families.values() {
            if let Some(since) = f.open_since_seq {
                hwm = hwm.min(since - 1);
            }
        }
        for s in self.sealing.values() {
            if let Some(since) = s.since_seq {
                hwm = hwm.min(since - 1);
            }
        }
        hwm
    }
}

/// What a durable checkpoint covers.
pub(crate) type CheckpointCovers = (u64, Vec<PendingLayerOp>);

/// Requests to the destager thread from API calls.
#[derive(Debug)]
pub(crate) enum Command {
    Sync(std::sync::mpsc::Sender<Result<(), String>>),
    Gc(std::sync::mpsc::Sender<Result<GcReport, String>>),
    Checkpoint(std::sync::mpsc::Sender<Result<(), String>>),
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub host_written_bytes: AtomicU64,
    pub chunk_written_bytes: AtomicU64,
    pub corrupt_reads: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_segments_reclaimed: AtomicU64,
    pub gc_bytes_moved: AtomicU64,
    pub gc_bytes_reclaimed: AtomicU64,
}

impl Counters {
    pub fn restore(c: crate::checkpoint::LifetimeCounters) -> Counters {
        Counters {
            host_written_bytes: AtomicU64::new(c.host_written_bytes),
            chunk_written_bytes: AtomicU64::new(c.chunk_written_bytes),
            corrupt_reads: AtomicU64::new(0),
            gc_runs: AtomicU64::new(c.gc_runs),
            gc_segments_reclaimed: AtomicU64::new(c.gc_segments_reclaimed),
            gc_bytes_moved: AtomicU64::new(c.gc_bytes_moved),
            gc_bytes_reclaimed: AtomicU64::new(c.gc_bytes_reclaimed),
        }
    }

    pub fn lifetime(&self) -> crate::checkpoint::LifetimeCounters {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        crate::checkpoint::LifetimeCounters {
            host_written_bytes: get(&self.host_written_bytes),
            chunk_written_bytes: get(&self.chunk_written_bytes),
            gc_runs: get(&self.gc_runs),
            gc_segments_reclaimed: get(&self.gc_segments_reclaimed),
            gc_bytes_moved: get(&self.gc_bytes_moved),
            gc_bytes_reclaimed: get(&self.gc_bytes_reclaimed),
        }
    }
}

/// What the engine's threads share.
#[derive(Debug)]
pub(crate) struct Shared {
    pub config: EngineConfig,
    pub meta: Mutex<MetaStore>,
    pub range_gate: Mutex<()>,
    pub journal: Journal,
    pub store: Arc<dyn ChunkStore>,
    pub state: Mutex<State>,
    /// Wakes the destager (new records, commands, shutdown).
    pub work: Condvar,
    /// Wakes writers waiting for buffer space.
    pub space: Condvar,
    /// Wakes the sealer (segments to write).
    pub seal_work: Condvar,
    /// Wakes whoever waits for stripe writes to finish.
    pub sealed: Condvar,
    /// Set after the destager stopped: the sealer exits once nothing is left to write.
    pub stop_sealer: AtomicBool,
    /// A checkpoint file being written in the background; yields the segment id it covers
    /// and the layer operations it reflects.
    pub checkpoint_writer: Mutex<Option<JoinHandle<Result<CheckpointCovers, IoFailure>>>>,
    pub commands: Mutex<Vec<Command>>,
    pub shutdown: AtomicBool,
    /// Stop the destager at once, as a killed process would (tests).
    pub abandon: AtomicBool,
    pub counters: Counters,
    /// Held for the engine's life: see `recovery::lock_data_dir`.
    pub _data_dir_lock: std::fs::File,
}

/// The volume engine of a c.node.
#[derive(Debug)]
pub struct Engine {
    pub(crate) shared: Arc<Shared>,
    destager: Mutex<Option<JoinHandle<()>>>,
    sealer: Mutex<Option<JoinHandle<()>>>,
}

/// An open volume or snapshot, for a front end. `id` is the key I/O calls take.
#[derive(Debug, Clone)]
pub struct VolumeHandle {
    pub id: VolumeId,
    pub name: String,
    /// Snapshots are read-only: writes fail with [`EngineError::ReadOnly`].
    pub read_only: bool,
    pub gone: Arc<AtomicBool>,
}

impl Engine {
    /// Open (or create) the datastore in `config.data_dir`, recovering after a crash.
    pub fn open(config: EngineConfig) -> Result<Engine, EngineError> {
        let shared = Arc::new(crate::recovery::recover(config)?);
        let thread_shared = shared.clone();
        let sealer = std::thread::Builder::new()
            .name("weft-seal".into())
            .spawn(move || crate::destage::run_sealer(&thread_shared))
            .map_err(|e| IoFailure::disk("sealer thread", e))?;
        let thread_shared = shared.clone();
        let destager = std::thread::Builder::new()
            .name("weft-destage".into())
            .spawn(move || crate::destage::run(&thread_shared))
            .map_err(|e| IoFailure::disk("destager thread", e))?;
        let engine = Engine {
            shared,
            destager: Mutex::new(Some(destager)),
            sealer: Mutex::new(Some(sealer)),
        };
        if !engine.shared.state.lock().merging_into.is_empty() {
            // Replayed trims queued behind a merge change their maps only when destaged:
            // apply them before serving reads.
            engine.sync()?;
        }
        Ok(engine)
    }

    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
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
    /// `fua`.
    pub fn write(
        &self,
        id: VolumeId,
        offset_bytes: u64,
        data: &[u8],
        fua: bool,
    ) -> Result<(), EngineError> {
        let count = self.check_range(id, offset_bytes, data.len() as u64)?;
        if count == 0 {
            return Ok(());
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
        let buffered: Arc<[u8]> = Arc::from(data);
        let shared = &self.shared;
        let family = std::cell::Cell::new(FamilyId(0));
        let seq = shared.journal.append_resolved(
            data,
            || {
                let st = shared.state.lock();
                let (fid, layer) = writable_layer(&st, id)?;
                family.set(fid);
                Ok::<_, EngineError>(RecordHeader {
                    kind: RecordKind::Write,
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
        shared
            .counters
            .host_written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        shared.work.notify_one();
        if fua {
            shared.journal.sync(seq).map_err(map_io)?;
        }
        Ok(())
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

    /// Make every acknowledged write durable against power loss (all volumes).
    pub fn flush(&self) -> Result<(), EngineError> {
        let upto = self.shared.journal.written_seq();
        self.shared.journal.sync(upto).map_err(map_io)
    }

    /// Read whole blocks (of a volume or a snapshot).
    pub fn read(&self, id: VolumeId, offset_bytes: u64, buf: &mut [u8]) -> Result<(), EngineError> {
        let count = self.check_range(id, offset_bytes, buf.len() as u64)?;
        let lba = offset_bytes / BLOCK_SIZE_U64;
        let mut last_err = None;
        for _ in 0..READ_RETRIES_MAX {
            match crate::destage::read_blocks(&self.shared, id, lba, count, buf) {
                Ok(()) => return Ok(()),
                Err(EngineError::Io(IoFailure::Disk { source, what }))
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    last_err = Some(EngineError::Io(IoFailure::Disk { source, what }));
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
            let (hole, zero) = match crate::destage::resolve(&st.buffer, family, &chain, l) {
                crate::destage::Resolved::Buffered(_)
                | crate::destage::Resolved::Mapped(Mapping::Block(_)) => (false, false),
                crate::destage::Resolved::Mapped(Mapping::Zero) => (false, true),
                crate::destage::Resolved::Mapped(Mapping::Absent) => (true, true),
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
        self.command(Command::Sync)
    }

    /// Run GC now over every segment below the live-fraction threshold.
    pub fn gc_now(&self) -> Result<GcReport, EngineError> {
        self.command(Command::Gc)
    }

    pub fn checkpoint_now(&self) -> Result<(), EngineError> {
        self.command(Command::Checkpoint)
    }

    pub fn stats(&self) -> EngineStats {
        crate::destage::stats(&self.shared)
    }

    // ---- helpers -------------------------------------------------------------------------

    fn command<T>(
        &self,
        make: impl FnOnce(std::sync::mpsc::Sender<Result<T, String>>) -> Command,
    ) -> Result<T, EngineError> {
        let (tx, rx) = std::sync::mpsc::channel();
        self.shared.commands.lock().push(make(tx));
        self.shared.work.notify_all();
        match rx.recv() {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(detail)) => Err(EngineError::Io(IoFailure::CorruptMetadata {
                what: "maintenance".into(),
                detail,
            })),
            Err(_) => Err(EngineError::Gone),
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

    /// Wait for buffer space; refuse when the datastore is full.
    fn admit(&self, bytes: u64) -> Result<(), EngineError> {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        loop {
            if shared.shutdown.load(Ordering::Acquire) {
                return Err(EngineError::Gone);
            }
            if st.out_of_space {
                return Err(EngineError::NoSpace);
            }
            if let Some(cap) = shared.store.capacity_bytes() {
                // Everything not yet in the store will be: buffered data (before reduction,
                // so this errs on the safe side), open segments, stripes being written; plus
                // room for GC to move blocks.
                let reserve = 2 * shared.config.segment_size_bytes as u64;
                let open: u64 = st
                    .families
                    .values()
                    .filter_map(|f| f.open.as_ref())
                    .map(|o| o.data_bytes() as u64)
                    .sum();
                let sealing: u64 = st.sealing.values().map(|s| s.bytes.len() as u64).sum();
                let pending = st.buffer.data_bytes() + open + sealing + bytes + reserve;
                if shared.store.used_bytes() + pending > cap {
                    return Err(EngineError::NoSpace);
                }
            }
            if st.buffer.data_bytes() + bytes <= shared.config.write_buffer_max_bytes
                || st.buffer.is_empty()
            {
                return Ok(());
            }
            shared.work.notify_one();
            shared.space.wait_for(&mut st, BACKPRESSURE_WAIT);
        }
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
                    if st.merging_into.contains_key(&layer) {
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

pub(crate) fn map_io(e: IoFailure) -> EngineError {
    if e.is_no_space() {
        EngineError::NoSpace
    } else {
        EngineError::Io(e)
    }
}

/// Release the journal up to what sealed segments now reflect.
pub(crate) fn release_journal(shared: &Shared) {
    let hwm = shared.state.lock().durable_journal_hwm();
    if let Err(e) = shared.journal.release_upto(hwm) {
        tracing::warn!(error = %e, "could not delete an old journal file");
    }
}

const _: () = assert!(BLOCK_SIZE_BYTES as u64 == BLOCK_SIZE_U64);
