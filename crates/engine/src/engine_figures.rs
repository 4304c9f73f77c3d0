//! The engine's figures, gathered from its state for [`crate::Engine::stats`] and the
//! repairer's status: data reduction, write amplification, GC, buffer, space, repair.

use std::sync::atomic::Ordering;

use crate::state::Shared;
use crate::stats::{EngineStats, GcStats, ReductionStats};
use crate::units::BLOCK_SIZE_U64;

/// Engine-wide statistics.
pub(crate) fn stats(shared: &Shared) -> EngineStats {
    // Before the state lock: writers hold the journal's lock while they take the state's
    // (lock order journal -> state), so asking the journal under the state lock deadlocks.
    let journal_files = shared.journal.pieces_in_use() as u64;
    let st = shared.state.lock();
    let mut r = ReductionStats::default();
    let mut map_entries = 0u64;
    let mut table_bytes = 0u64;
    let mut nonzero_refs = 0;
    for f in st.families.values() {
        r.unique_blocks += f.table.live_blocks();
        table_bytes += f.table.memory_bytes() as u64;
        r.stored_bytes += f.table.stored_bytes();
        for map in f.layers.values() {
            let zeroes = map.zero_entries();
            r.logical_bytes += map.present_entries() * BLOCK_SIZE_U64;
            r.zero_bytes += zeroes * BLOCK_SIZE_U64;
            map_entries += map.allocated_pages() as u64 * crate::block_map::PAGE_ENTRIES as u64;
            nonzero_refs += map.present_entries() - zeroes;
        }
    }
    r.dedup_saved_bytes = nonzero_refs.saturating_sub(r.unique_blocks) * BLOCK_SIZE_U64;
    r.compression_saved_bytes = (r.unique_blocks * BLOCK_SIZE_U64).saturating_sub(r.stored_bytes);
    r.ratio = (r.stored_bytes > 0).then(|| r.logical_bytes as f64 / r.stored_bytes as f64);
    let c = &shared.counters;
    let host = c.host_written_bytes.load(Ordering::Relaxed);
    let chunk = c.chunk_written_bytes.load(Ordering::Relaxed);
    let sc = &shared.stripes.counters;
    EngineStats {
        degraded_reads: sc.degraded_reads.load(Ordering::Relaxed),
        chunks_missed_at_write: sc.chunks_missed_at_write.load(Ordering::Relaxed),
        repair: repair_status(shared),
        write_amplification: (host > 0).then(|| chunk as f64 / host as f64),
        host_written_bytes: host,
        chunk_written_bytes: chunk,
        gc: GcStats {
            runs: c.gc_runs.load(Ordering::Relaxed),
            segments_reclaimed: c.gc_segments_reclaimed.load(Ordering::Relaxed),
            bytes_moved: c.gc_bytes_moved.load(Ordering::Relaxed),
            bytes_reclaimed: c.gc_bytes_reclaimed.load(Ordering::Relaxed),
        },
        buffer_bytes: st.buffer.data_bytes(),
        buffer_records: st.buffer.len() as u64,
        capacity_bytes: shared.stripes.space().0,
        used_bytes: shared.stripes.space().1,
        sealed_segments: st.segments.sealed_count() as u64,
        journal_files,
        corrupt_reads: c.corrupt_reads.load(Ordering::Relaxed)
            + shared
                .stripes
                .counters
                .corrupt_chunks
                .load(Ordering::Relaxed),
        out_of_space: st.segments.out_of_space(),
        volumes: st.images.iter().filter(|i| i.writable).count() as u64,
        snapshots: st.images.iter().filter(|i| !i.writable).count() as u64,
        metadata_memory_bytes: map_entries * 8 + table_bytes,
        reduction: r,
        read_cache: Default::default(),
    }
}

/// The repairer's status, with whether it has caught up with the placement's last change.
pub(crate) fn repair_status(shared: &Shared) -> crate::repair::RepairStatus {
    let mut status = shared.repair.status.lock().clone();
    let redundant = shared.stripes.placement().redundancy(0).total_chunks() > 1;
    status.caught_up = !redundant
        || (status.scans > 0
            && !status.running
            && status.chunks_failed == 0
            && status.unlisted.is_empty()
            && shared.repair.missed_at_write_seen.load(Ordering::Acquire)
                == shared
                    .stripes
                    .counters
                    .chunks_missed_at_write
                    .load(Ordering::Acquire)
            && status.scanned_generation >= shared.stripes.placement().generation());
    status
}
