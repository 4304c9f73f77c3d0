//! Engine-wide figures for the API and metrics: data reduction, write amplification, GC,
//! buffer, space.

use serde::{Deserialize, Serialize};

/// Data reduction across all families: every layer's own entries (a block a clone reads
/// from its base is counted once, in the base).
#[derive(Debug, Clone, Serialize, Deserialize, Default, utoipa::ToSchema)]
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
#[derive(Debug, Clone, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct GcStats {
    pub runs: u64,
    pub segments_reclaimed: u64,
    pub bytes_moved: u64,
    pub bytes_reclaimed: u64,
}

/// What one GC run did.
#[derive(Debug, Clone, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct GcReport {
    pub segments_reclaimed: u64,
    pub bytes_moved: u64,
    pub bytes_reclaimed: u64,
}

/// Engine-wide figures for the API and metrics.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct EngineStats {
    /// Reads that had to reconstruct a chunk from the rest of its stripe.
    pub degraded_reads: u64,
    /// Since start: chunks that could not be written with their stripe (the stripe was
    /// durable without them; the repairer writes them later). Only ever counts up.
    pub chunks_missed_at_write: u64,
    pub repair: crate::repair_status::RepairStatus,
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
    /// The c.node's cache of blocks read from chunks.
    #[serde(default)]
    pub read_cache: crate::read_cache::ReadCacheStats,
}
