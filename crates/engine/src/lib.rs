//! The volume engine of a c.node: everything between a front end's block request and the
//! chunks on a d.node's disk.
//!
//! Write path: [`journal`] (durable write buffer) → [`write_buffer`] (read-your-writes, FIFO to
//! destage) → [`reduce`] (zero elimination, fingerprint, lz4) → [`family`] (dedup index, block
//! table, block maps, open segment) → [`segment`] (self-describing log unit) →
//! [`stripe`] (stripes of k+m chunks on the chunk stores of d.nodes, `weft_chunk`).
//! Read path: write buffer → block map → block table → chunk byte range, checksum verified,
//! decompressed. Recovery: [`checkpoint`] + replay of sealed segments + replay of the journal.
//!
//! The pure state (maps, tables, dedup, segment building) has no I/O and is tested against
//! simple models; [`engine`] owns the threads and files and drives it.

pub mod block_map;
pub mod block_table;
pub mod catalog;
pub mod checkpoint;
pub mod config;
pub mod deferred_acks;
pub mod engine;
mod engine_figures;
pub mod error;
pub mod family;
pub mod group_records;
pub mod host_records;
pub mod hosts;
pub mod journal;
pub mod layers;
pub mod lock_timing;
mod lun_claims;
pub mod metastore;
pub mod name_claims;
pub mod names;
pub mod qos_settings;
pub mod reduce;
pub mod schedule_records;
pub mod schedules;
pub mod segment;
mod shard_claims;
pub mod space;
pub mod stripe;
pub mod units;
pub mod write_buffer;
pub mod write_log;
mod write_waits;

mod checkpointer;
mod destage;
mod destager;
mod gc;
mod images;
mod layer_work;
mod read;
pub mod read_cache;
mod recovery;
pub mod recovery_status;
mod reduce_pool;
pub mod repair;
mod repair_status;
mod seal;
mod segments;
mod state;
mod stats;
mod syncer;

pub use catalog::{
    image_summaries, snapshot_short_name, FamilySummary, GroupInfo, GroupMemberInfo,
    GroupSnapshotInfo, GroupSpace, ImageSummary, Renamed, SnapshotInfo, VolumeInfo,
    SNAPSHOT_SEPARATOR,
};
pub use engine::{Backends, Engine, EngineConfig, LocalStoreConfig};
pub use error::{EngineError, IoFailure};
pub use hosts::{ChapSpec, HostInfo, HostRecord, HostSpec, LunInfo};
pub use repair_status::RepairStatus;
pub use schedules::ScheduleRecord;
pub use space::{FamilyReduction, SpaceUsage};
pub use stats::{EngineStats, GcReport, GcStats, ReductionStats};
pub use units::{
    BlockId, FamilyId, Lba, LogicalBlockSize, SegmentId, ShardId, VolumeId, BLOCK_SIZE_BYTES,
};
