//! What the engine's threads share ([`Shared`]) and the state behind its lock ([`State`]):
//! open-able images, families, the write buffer, segments being sealed and sealed, counters.
//! No I/O here beyond releasing journal files.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::SealedSegment;
use crate::config::EngineConfig;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::metastore::{ClusterState, ClusterStore, PendingLayerOp, SnapshotRecord, VolumeRecord};
use crate::stats::GcReport;
use crate::stripe::StripeStore;
use crate::units::{
    FamilyId, LayerId, LogicalBlockSize, SegmentId, VolumeId, BLOCK_SIZE_BYTES, BLOCK_SIZE_U64,
};
use crate::write_buffer::WriteBuffer;
use crate::write_log::WriteLog;

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
    /// The sector size front ends present (metadata: the engine works in 4 KiB blocks).
    pub logical_block_size: LogicalBlockSize,
}

/// A segment whose stripe is being written (or failed to be): still readable from memory.
#[derive(Debug)]
pub(crate) struct SealingSegment {
    pub bytes: Arc<Vec<u8>>,
    pub redundancy: weft_ec::Redundancy,
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
    /// Keyed by family and segment: segment ids are per family, and the sealer writes each
    /// family's segments in id order.
    pub sealing: BTreeMap<(FamilyId, SegmentId), SealingSegment>,
    pub sealed: BTreeMap<(FamilyId, SegmentId), SealedSegment>,
    /// The next segment id of each family.
    pub next_segment: HashMap<FamilyId, u64>,
    /// Seq of the last record the destager took from the FIFO.
    pub processed_seq: u64,
    /// Per family: segments with id below this are reflected in its durable checkpoint (GC
    /// may delete them).
    pub checkpoint_below: HashMap<FamilyId, u64>,
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

impl Image {
    /// A volume as an open-able image.
    pub fn of_volume(r: &VolumeRecord) -> Image {
        Image {
            name: r.name.clone(),
            family: r.family,
            size_bytes: r.size_bytes,
            layer: r.layer,
            writable: true,
            gone: Arc::new(AtomicBool::new(false)),
            logical_block_size: r.logical_block_size,
        }
    }

    /// A snapshot as a read-only image.
    pub fn of_snapshot(s: &SnapshotRecord) -> Image {
        Image {
            name: s.name.clone(),
            family: s.family,
            size_bytes: s.size_bytes,
            layer: s.layer,
            writable: false,
            gone: Arc::new(AtomicBool::new(false)),
            logical_block_size: s.logical_block_size,
        }
    }
}

/// The images of a cluster state (volumes and visible snapshots), for recovery.
pub(crate) fn images_of(state: &ClusterState) -> Vec<Image> {
    let volumes = state.volumes.iter().map(Image::of_volume);
    let snapshots = state
        .snapshots
        .iter()
        .filter(|s| !s.hidden)
        .map(Image::of_snapshot);
    volumes.chain(snapshots).collect()
}

/// A checkpoint whose stripes are durable, not yet referenced by the cluster state.
#[derive(Debug)]
pub(crate) struct CheckpointWritten {
    pub refs: Vec<(FamilyId, crate::checkpoint::CheckpointRef)>,
    pub counters: crate::checkpoint::LifetimeCounters,
    /// The layer operations it reflects.
    pub covered: Vec<PendingLayerOp>,
}

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
    pub meta: Mutex<ClusterStore>,
    /// Bumped on every host or mapping change (`hosts`); starts at 1, so 0 means "never read".
    pub hosts_generation: std::sync::atomic::AtomicU64,
    pub range_gate: Mutex<()>,
    pub journal: Box<dyn WriteLog>,
    /// Writers waiting for their write-through record to reach a durable segment: while
    /// there are any, the destager seals open segments as soon as the buffer is drained.
    pub write_through_waiting: AtomicUsize,
    /// A writer waits for GC to free space (the store is full but holds garbage).
    pub space_wanted: AtomicBool,
    pub stripes: Arc<StripeStore>,
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
    pub checkpoint_writer: Mutex<Option<JoinHandle<Result<CheckpointWritten, IoFailure>>>>,
    pub commands: Mutex<Vec<Command>>,
    pub shutdown: AtomicBool,
    /// Stop the destager at once, as a killed process would (tests).
    pub abandon: AtomicBool,
    pub counters: Counters,
    pub repair: crate::repair_status::RepairControl,
    /// Held for the engine's life: see `recovery::lock_data_dir`.
    pub _data_dir_lock: std::fs::File,
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
