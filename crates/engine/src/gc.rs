//! Garbage collection: compact sealed segments whose live fraction is low (live blocks
//! re-appended with `Relocate` summary entries, old chunks deleted once the new segment is
//! durable). Only segments a durable checkpoint covers are collected: replay needs the others.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::checkpointer::take_checkpoint_with;
use crate::error::IoFailure;
use crate::seal::{seal_all, start_sealing};
use crate::state::Shared;
use crate::stats::GcReport;
use crate::units::{FamilyId, SegmentId};

/// One GC run moves at most this many live bytes when the datastore is idle.
pub(crate) const GC_MOVE_PER_RUN_BYTES_MAX: u64 = 256 << 20;
/// Under host load a GC run moves at most this much, so destage (which it pauses) keeps up.
pub(crate) const GC_MOVE_UNDER_LOAD_BYTES_MAX: u64 = 32 << 20;
/// Under host load GC runs only when the store holds this many times the live stored bytes:
/// compacting early costs the host throughput, compacting late costs disk space.
pub(crate) const GC_UNDER_LOAD_SPACE_AMPLIFICATION_MIN: f64 = 2.0;

/// When the store is this full (used / capacity), GC runs under load whatever the space
/// amplification, more often, and takes fuller victims: the alternative is ENOSPC.
pub(crate) const GC_SPACE_PRESSURE_MIN: f64 = 0.95;
/// Under space pressure, segments up to this live fraction are victims (best first).
pub(crate) const GC_PRESSED_LIVE_FRACTION_MAX: f64 = 0.9;
/// Under space pressure one GC run moves at most this much and runs this often.
pub(crate) const GC_PRESSED_MOVE_BYTES_MAX: u64 = 32 << 20;
pub(crate) const GC_PRESSED_INTERVAL_MS: u64 = 50;
/// Under space pressure, a checkpoint (which lets GC take newer segments) is taken once this
/// many bytes were sealed since the last one, rather than a quarter of the usual interval.
const GC_PRESSED_CHECKPOINT_BYTES: u64 = 128 << 20;

/// How much collecting a segment is worth per byte it costs to move (the cost-benefit policy
/// of log-structured file systems): the space it frees, `1 - live`, times its age (data that
/// has stayed put for long is cold and will likely stay: compacting it frees space for
/// good), over the cost of reading it and writing its live part, `1 + live`. `age` counts
/// segments sealed since, so it needs no clock.
fn victim_score(live_fraction: f64, age_segments: u64) -> f64 {
    (1.0 - live_fraction) * (age_segments as f64 + 1.0) / (1.0 + live_fraction)
}

/// Compact segments whose live fraction is below `live_fraction_max`, best cost-benefit
/// first. `pressed`: the store is nearly full, checkpoints come sooner.
pub(crate) fn collect_garbage(
    shared: &Shared,
    live_fraction_max: f64,
    move_budget_bytes: u64,
    pressed: bool,
) -> Result<GcReport, IoFailure> {
    let mut report = GcReport::default();
    let (victims, uncovered_garbage) = {
        let st = shared.state.lock();
        let mut victims = Vec::new();
        let mut uncovered = false;
        for ((fid, id), s) in st.segments.sealed_iter() {
            let Some(f) = st.families.get(&fid) else {
                continue;
            };
            let usage = f.table.segment_usage(id);
            let fraction = if s.data_bytes == 0 {
                0.0
            } else {
                usage.live_bytes as f64 / s.data_bytes as f64
            };
            let garbage = fraction < live_fraction_max
                && (usage.live_bytes < s.data_bytes || s.data_bytes == 0);
            if !garbage {
                continue;
            }
            if id.0 < st.segments.checkpoint_below(fid) {
                let newest = st.segment_ids.peek(fid).unwrap_or(id.0 + 1);
                let age = newest.saturating_sub(id.0 + 1);
                victims.push((victim_score(fraction, age), id, s.family, usage.live_bytes));
            } else {
                uncovered = true;
            }
        }
        victims.sort_by(|a, b| b.0.total_cmp(&a.0));
        (victims, uncovered)
    };
    if victims.is_empty() {
        let since = shared.state.lock().segments.bytes_since_checkpoint();
        let due = if pressed {
            GC_PRESSED_CHECKPOINT_BYTES.min(shared.config.checkpoint_every_bytes / 4)
        } else {
            shared.config.checkpoint_every_bytes / 4
        };
        if uncovered_garbage && live_fraction_max < 1.0 && since >= due {
            // Segments not yet in a checkpoint cannot be deleted (replay needs them); take one
            // early (written in the background), but not at every GC tick (a checkpoint pauses
            // I/O while it is encoded).
            take_checkpoint_with(shared, false)?;
        }
        return Ok(report);
    }
    shared.counters.gc_runs.fetch_add(1, Ordering::Relaxed);
    let mut moved_budget = move_budget_bytes;
    let victims: Vec<_> = victims
        .into_iter()
        .take_while(|&(_, _, _, live_bytes)| {
            let fits = live_bytes <= moved_budget;
            moved_budget = moved_budget.saturating_sub(live_bytes);
            fits
        })
        .collect();
    // One pass over each family's table finds the live blocks of all its victims.
    let mut live_by_segment: HashMap<(FamilyId, SegmentId), Vec<crate::units::BlockId>> =
        HashMap::new();
    {
        let st = shared.state.lock();
        let families: std::collections::HashSet<FamilyId> = victims.iter().map(|v| v.2).collect();
        for fid in families {
            let ids: std::collections::HashSet<SegmentId> =
                victims.iter().filter(|v| v.2 == fid).map(|v| v.1).collect();
            if let Some(f) = st.families.get(&fid) {
                for (block, segment) in f.table.live_blocks_in_any(&ids) {
                    live_by_segment
                        .entry((fid, segment))
                        .or_default()
                        .push(block);
                }
            }
        }
    }
    let mut done = Vec::new();
    for (_, id, fid, live_bytes) in victims {
        let (stored_bytes, redundancy) = match shared.state.lock().segments.sealed((fid, id)) {
            Some(s) => (s.stored_bytes, s.redundancy),
            None => continue,
        };
        let mut bytes = vec![0u8; usize::try_from(stored_bytes).expect("segment fits in memory")];
        if live_bytes > 0 {
            shared
                .stripes
                .read(fid.0, id.0, redundancy, stored_bytes, 0, &mut bytes)?;
        }
        let mut st = shared.state.lock();
        let cap = shared.config.segment_size_bytes;
        let mut ids = std::mem::take(&mut st.segment_ids);
        let mut to_seal = Vec::new();
        if let Some(f) = st.families.get_mut(&fid) {
            let mut alloc = ids.allocator();
            for &block in live_by_segment.get(&(fid, id)).into_iter().flatten() {
                // Blocks freed or moved since the scan are skipped.
                let Some(entry) = f.table.get(block) else {
                    continue;
                };
                if entry.location.segment != id {
                    continue;
                }
                let loc = entry.location;
                let start = loc.offset_bytes as usize;
                let stored = &bytes[start..start + usize::from(loc.stored_len_bytes)];
                if crc32c::crc32c(stored) != loc.crc32c {
                    shared
                        .counters
                        .corrupt_reads
                        .fetch_add(1, Ordering::Relaxed);
                    return Err(IoFailure::Corrupt {
                        block,
                        segment: id,
                        offset_bytes: u64::from(loc.offset_bytes),
                    });
                }
                f.relocate(block, stored, loc.compressed, loc.crc32c, &mut alloc, cap);
                report.bytes_moved += u64::from(loc.stored_len_bytes);
                if let Some(b) = f.take_open_if_full(cap) {
                    to_seal.push(b);
                }
            }
        }
        st.segment_ids = ids;
        let hwm = st.processed_seq;
        for (b, since) in to_seal {
            start_sealing(&shared.stripes, &mut st, b, since, hwm);
        }
        drop(st);
        done.push((fid, id, redundancy, stored_bytes));
    }
    // The relocated blocks must be durable before their old copies go, and so must the
    // journal's markers saying so: recovery waits for a durable stripe it cannot read only
    // when it can tell it was durable.
    seal_all(shared)?;
    shared.journal.sync(shared.journal.written_seq())?;
    for (fid, id, redundancy, stored_bytes) in done {
        shared.state.lock().segments.reclaimed((fid, id));
        shared.stripes.delete(fid.0, id.0, redundancy)?;
        report.segments_reclaimed += 1;
        report.bytes_reclaimed += stored_bytes;
    }
    let c = &shared.counters;
    c.gc_segments_reclaimed
        .fetch_add(report.segments_reclaimed, Ordering::Relaxed);
    c.gc_bytes_moved
        .fetch_add(report.bytes_moved, Ordering::Relaxed);
    c.gc_bytes_reclaimed
        .fetch_add(report.bytes_reclaimed, Ordering::Relaxed);
    shared.state.lock().segments.space_freed();
    Ok(report)
}
