//! The c.node engine's tunables. Settings of the disks themselves (capacity, direct I/O) belong
//! to the d.node's chunk store, not here.

use std::path::PathBuf;
use std::sync::Arc;

use crate::journal::JournalOptions;
use crate::stripe::Placement;
use crate::write_log::WriteLogSource;

/// Tunables of one engine; see the `weft serve` flags for defaults and units.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    pub data_dir: PathBuf,
    /// A family's open segment is sealed when its block data reaches this size.
    pub segment_size_bytes: usize,
    /// Writers wait when this much acknowledged data is waiting for destage.
    pub write_buffer_max_bytes: u64,
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
    /// How often the repairer scans for chunks to rebuild (only with redundancy).
    pub repair_interval_ms: u64,
    /// Rebuild at most this many bytes per second (changeable at run time).
    pub repair_rate_bytes_per_s: u64,
    /// Writes of at least this many bytes are written once: straight through destage into a
    /// stripe, the journal holding only a reference, and acknowledged once the stripe is
    /// written (durable with FUA, or at the next FLUSH); 0: every write is journaled.
    pub write_through_min_bytes: u64,
    /// How long recovery waits for d.nodes that hold stripes it cannot read and may not
    /// discard (see `recovery`): `None` waits until they return; tests set a bound, after
    /// which opening fails with [`crate::error::EngineError::RecoveryBlocked`].
    pub recovery_wait: Option<std::time::Duration>,
    /// Where recovery says what it waits for, so the server can report it while the
    /// engine is not open yet.
    pub recovery_status: crate::recovery_status::RecoveryStatus,
    /// Threads that reduce destaged blocks (zero check, fingerprint, lz4, block checksum):
    /// the destager and `reduction_threads - 1` helpers (`reduce_pool`). 0: one per core.
    pub reduction_threads: usize,
    /// Bytes of RAM for blocks read from chunks (`read_cache`), shared by every image that
    /// maps them. 0 (the default here; `weft cnode` sets 256 MiB): no cache.
    pub read_cache_bytes: u64,
}

impl EngineConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> EngineConfig {
        EngineConfig {
            data_dir: data_dir.into(),
            segment_size_bytes: 8 << 20,
            write_buffer_max_bytes: 512 << 20,
            checkpoint_every_bytes: 4 << 30,
            idle_seal_ms: 1000,
            gc_live_fraction_max: 0.5,
            gc_interval_ms: 2000,
            drop_slice_blocks: 32 << 10,
            journal: JournalOptions::default(),
            repair_interval_ms: 10_000,
            repair_rate_bytes_per_s: 256 << 20,
            write_through_min_bytes: 256 << 10,
            recovery_wait: None,
            recovery_status: Default::default(),
            reduction_threads: 0,
            read_cache_bytes: 0,
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
            repair_interval_ms: 200,
            write_through_min_bytes: 16 << 10,
            journal: JournalOptions {
                file_bytes: 256 << 10,
                prefill: false,
            },
            // A test that makes recovery wait fails instead of hanging.
            recovery_wait: Some(std::time::Duration::from_secs(20)),
            // Two, whatever the machine: batches of 128+ blocks are reduced in parts on both.
            reduction_threads: 2,
            ..EngineConfig::new(data_dir)
        }
    }
}

/// The local d.node of single-process mode: one chunk store in `<data dir>/dnode0/chunks`.
#[derive(Debug, Clone)]
pub struct LocalStoreConfig {
    /// The most the chunk store may hold; `None`: until the file system is full.
    pub capacity_bytes: Option<u64>,
    /// Read chunks with O_DIRECT (no page cache).
    pub direct_io: bool,
}

impl Default for LocalStoreConfig {
    fn default() -> LocalStoreConfig {
        LocalStoreConfig {
            capacity_bytes: None,
            direct_io: true,
        }
    }
}

/// What an engine stores its data, cluster state and write log in.
#[derive(Debug, Clone)]
pub struct Backends {
    /// Where stripes go (the chunk stores of d.nodes).
    pub placement: Arc<dyn Placement>,
    /// The cluster state's store (embedded, etcd).
    pub metastore: Arc<dyn weft_meta::MetaStore>,
    /// The write log; `None`: the journal in `<data dir>/journal`.
    pub write_log: Option<Arc<dyn WriteLogSource>>,
    /// This c.node's epoch, stamped into every chunk write (d.nodes refuse older ones once a
    /// family is fenced at a newer one). 0 in single-process mode.
    pub epoch: u64,
    /// The shard this engine serves: which catalog document it opens, which id range it
    /// allocates from, which families' stripes it may delete (see [`crate::units::ShardId`]).
    pub shard: crate::units::ShardId,
}
