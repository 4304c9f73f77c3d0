//! What the engine's threads share ([`Shared`]) and the state behind its lock ([`State`]):
//! open-able images ([`crate::images`]), families, layer work ([`crate::layer_work`]), the
//! write buffer, segments being sealed and sealed ([`crate::segments`]), counters.
//! No I/O here beyond releasing journal files.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::config::EngineConfig;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::images::{Image, Images};
use crate::layer_work::LayerWork;
use crate::layers::LayerOp;
use crate::metastore::{ClusterStore, PendingLayerOp};
use crate::segments::{SegmentIds, Segments};
use crate::stats::GcReport;
use crate::stripe::StripeStore;
use crate::units::{FamilyId, LayerId, VolumeId, BLOCK_SIZE_BYTES, BLOCK_SIZE_U64};
use crate::write_buffer::WriteBuffer;
use crate::write_log::WriteLog;

/// Everything behind the state lock: each part owns its fields (see its module).
#[derive(Debug, Default)]
pub(crate) struct State {
    pub images: Images,
    pub families: HashMap<FamilyId, Family>,
    pub layer_work: LayerWork,
    pub buffer: WriteBuffer,
    /// Seq of the last record the destager took from the FIFO.
    pub processed_seq: u64,
    pub segments: Segments,
    /// Taken out while a destage step allocates (see [`SegmentIds::allocator`]).
    pub segment_ids: SegmentIds,
}

impl State {
    pub fn image(&self, key: VolumeId) -> Result<&Image, EngineError> {
        self.images.get(key)
    }

    /// The layers an image reads through, top first.
    pub fn chain(&self, image: &Image) -> Vec<LayerId> {
        match self.families.get(&image.family) {
            Some(f) => f.graph.chain(image.layer),
            None => vec![image.layer],
        }
    }

    /// Queue a journaled layer operation for the destager.
    pub fn queue_layer_op(&mut self, seq: u64, family: FamilyId, op: LayerOp) {
        if let LayerOp::Merge { into, .. } = op {
            self.layer_work.merge_queued(into);
        }
        self.buffer.push_layer_op(seq, family, op);
    }

    /// Journal records with seq <= this are reflected in sealed segments.
    pub fn durable_journal_hwm(&self) -> u64 {
        let mut hwm = self.processed_seq;
        for f in self.families.values() {
            if let Some(since) = f.open_since_seq {
                hwm = hwm.min(since - 1);
            }
        }
        for since in self.segments.sealing_since_seqs() {
            hwm = hwm.min(since - 1);
        }
        hwm
    }
}

/// A checkpoint whose stripes are durable, not yet referenced by the cluster state.
#[derive(Debug)]
pub(crate) struct CheckpointWritten {
    pub refs: Vec<(FamilyId, crate::checkpoint::CheckpointRef)>,
    pub counters: crate::checkpoint::LifetimeCounters,
    /// Chunks of its stripes left for the repairer (d.nodes that missed the write).
    pub missed_at_write: u64,
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
    /// Writers waiting for their write-through record to reach a written segment: while
    /// there are any, the destager seals open segments as soon as the buffer is drained.
    pub write_through_waiting: AtomicUsize,
    /// A writer waits for GC to free space (the store is full but holds garbage).
    pub space_wanted: AtomicBool,
    pub stripes: Arc<StripeStore>,
    /// Timed per call site (`lock_timing`): its hold times bound scaling with cores.
    pub state: crate::lock_timing::TimedMutex<State>,
    /// Wakes the destager (new records, commands, shutdown).
    pub work: Condvar,
    /// Wakes writers waiting for buffer space.
    pub space: Condvar,
    /// Wakes the sealer (segments to write).
    pub seal_work: Condvar,
    /// Wakes the syncer (written stripes to make durable, a FLUSH waiting).
    pub sync_work: Condvar,
    /// Wakes whoever waits for stripe writes or syncs to finish.
    pub sealed: Condvar,
    /// Set after the destager stopped: the sealer exits once nothing is left to write.
    pub stop_sealer: AtomicBool,
    /// Set after the sealer stopped: the syncer exits once nothing written is left.
    pub stop_syncer: AtomicBool,
    /// A checkpoint file being written in the background; yields the segment id it covers
    /// and the layer operations it reflects.
    pub checkpoint_writer: Mutex<Option<JoinHandle<Result<CheckpointWritten, IoFailure>>>>,
    pub commands: Mutex<Vec<Command>>,
    pub shutdown: AtomicBool,
    /// Stop the destager at once, as a killed process would (tests).
    pub abandon: AtomicBool,
    pub counters: Counters,
    pub repair: crate::repair_status::RepairControl,
    /// The destager's reduction threads.
    pub reduce_pool: crate::reduce_pool::ReducePool,
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
