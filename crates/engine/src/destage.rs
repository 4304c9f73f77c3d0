//! The destager thread and the engine's data-path helpers that touch several parts of the
//! state: destage (reduce, dedup, append, map), sealing stripes, GC, checkpoints, and reads
//! that resolve blocks through buffer, maps and chunks.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::block_map::Mapping;
use crate::block_table::BlockLocation;
use crate::checkpoint::{self, SealedSegment};
use crate::chunk_store::ChunkId;
use crate::engine::{
    release_journal, Command, EngineStats, GcReport, GcStats, ReductionStats, SealingSegment,
    Shared, State,
};
use crate::error::{EngineError, IoFailure};
use crate::journal::{RecordHeader, RecordKind};
use crate::reduce::{self, Reduced};
use crate::segment::{self, SegmentBuilder, StripeLayout, SummaryEntry, SEGMENT_HEADER_BYTES};
use crate::units::{FamilyId, LayerId, SegmentId, VolumeId, BLOCK_SIZE_BYTES, BLOCK_SIZE_U64};
use crate::write_buffer::{Pending, RangeRecord};

/// Records taken from the FIFO per destage batch: big enough to amortise the lock, small
/// enough that the lock is never held long.
const DESTAGE_BATCH_RECORDS_MAX: usize = 64;
/// How long the destager sleeps when there is nothing to do.
const IDLE_WAIT: Duration = Duration::from_millis(20);
/// After a failed stripe write (full disk), wait this long before trying again.
const SEAL_RETRY_INTERVAL: Duration = Duration::from_millis(500);
/// One GC run moves at most this many live bytes when the datastore is idle.
const GC_MOVE_PER_RUN_BYTES_MAX: u64 = 256 << 20;
/// Under host load a GC run moves at most this much, so destage (which it pauses) keeps up.
const GC_MOVE_UNDER_LOAD_BYTES_MAX: u64 = 32 << 20;
/// Under host load GC runs only when the store holds this many times the live stored bytes:
/// compacting early costs the host throughput, compacting late costs disk space.
const GC_UNDER_LOAD_SPACE_AMPLIFICATION_MIN: f64 = 2.0;

/// The destager thread's loop.
pub(crate) fn run(shared: &Shared) {
    let mut last_activity = Instant::now();
    let mut last_gc = Instant::now();
    let mut last_seal_failure: Option<Instant> = None;
    loop {
        if shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let commands: Vec<Command> = std::mem::take(&mut *shared.commands.lock());
        for command in commands {
            execute(shared, command);
        }
        if let Some(at) = last_seal_failure {
            // The sealer retries the failed stripe; destage resumes once it succeeds.
            if at.elapsed() < SEAL_RETRY_INTERVAL && !shared.shutdown.load(Ordering::Acquire) {
                std::thread::sleep(IDLE_WAIT);
                continue;
            }
            last_seal_failure = None;
        }
        let did = match destage_batch(shared) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!(error = %e, "stripe write failed; writes get ENOSPC/EIO until it succeeds");
                last_seal_failure = Some(Instant::now());
                continue;
            }
        };
        if did > 0 {
            last_activity = Instant::now();
            shared.space.notify_all();
        } else if last_activity.elapsed() >= Duration::from_millis(shared.config.idle_seal_ms) {
            // Idle: seal open segments so their data is in stripes and the journal can go.
            if let Err(e) = seal_all(shared) {
                tracing::error!(error = %e, "idle seal failed");
                last_seal_failure = Some(Instant::now());
                continue;
            }
        }
        // Checkpoints and GC run under load too, not only when idle: a busy datastore must
        // not fill with garbage or grow its replay without bound.
        if let Err(e) = reap_checkpoint_writer(shared, false) {
            tracing::error!(error = %e, "checkpoint failed");
        }
        forget_covered_layer_ops(shared);
        let (due, busy, amplification) = {
            let st = shared.state.lock();
            let live: u64 = st.families.values().map(|f| f.table.stored_bytes()).sum();
            let amplification = shared.store.used_bytes() as f64 / live.max(1) as f64;
            (
                st.sealed_bytes_since_checkpoint >= shared.config.checkpoint_every_bytes,
                did > 0 || !st.buffer.is_empty(),
                amplification,
            )
        };
        if due {
            // Under load the file is written in the background; destage goes on.
            if let Err(e) = take_checkpoint_with(shared, !busy) {
                tracing::error!(error = %e, "checkpoint failed");
            }
        }
        if last_gc.elapsed() >= Duration::from_millis(shared.config.gc_interval_ms) {
            last_gc = Instant::now();
            let budget = if !busy {
                Some(GC_MOVE_PER_RUN_BYTES_MAX)
            } else if amplification >= GC_UNDER_LOAD_SPACE_AMPLIFICATION_MIN {
                Some(GC_MOVE_UNDER_LOAD_BYTES_MAX)
            } else {
                None
            };
            if let Some(budget) = budget {
                if let Err(e) = collect_garbage(shared, shared.config.gc_live_fraction_max, budget)
                {
                    tracing::error!(error = %e, "gc failed");
                }
            }
        }
        if shared.shutdown.load(Ordering::Acquire) {
            let drained = shared.state.lock().buffer.is_empty();
            if drained {
                if let Err(e) = seal_all(shared).and_then(|()| take_checkpoint(shared)) {
                    tracing::error!(error = %e, "final checkpoint failed; the next start replays the journal");
                }
                return;
            }
            continue;
        }
        if did > 0 {
            continue;
        }
        let mut st = shared.state.lock();
        if st.buffer.is_empty() && shared.commands.lock().is_empty() {
            shared.work.wait_for(&mut st, IDLE_WAIT);
        }
    }
}

fn execute(shared: &Shared, command: Command) {
    match command {
        Command::Sync(reply) => {
            let result = drain(shared).and_then(|()| seal_all(shared));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
        Command::Gc(reply) => {
            let result = take_checkpoint(shared)
                .and_then(|()| collect_garbage(shared, 1.0, GC_MOVE_PER_RUN_BYTES_MAX));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
        Command::Checkpoint(reply) => {
            let result = drain(shared).and_then(|()| take_checkpoint(shared));
            let _ = reply.send(result.map_err(|e| e.to_string()));
        }
    }
}

fn drain(shared: &Shared) -> Result<(), IoFailure> {
    while destage_batch(shared)? > 0 {
        shared.space.notify_all();
    }
    Ok(())
}

/// Buffer a trim or zeroing: applied to the map at once, its releases deferred to destage.
pub(crate) fn buffer_range(st: &mut State, seq: u64, family: FamilyId, header: RecordHeader) {
    let RecordHeader {
        kind,
        layer,
        lba,
        count,
    } = header;
    let mapping = if kind == RecordKind::Trim {
        Mapping::Absent
    } else {
        Mapping::Zero
    };
    // A queued merge into the layer must see the map as it was before this record (live,
    // trims wait for it; in replay they are applied when destaged).
    let applied = !st.merging_into.contains_key(&layer);
    let released = match st.families.get_mut(&family) {
        Some(f) if applied => f.set_range(layer, lba, count, mapping),
        Some(_) => Vec::new(),
        None => return,
    };
    let pending = RangeRecord {
        seq,
        family,
        layer,
        lba,
        count,
        released,
        zero: kind == RecordKind::Zero,
        applied,
    };
    st.buffer.push_range(pending);
}

/// Where one block of an image reads from.
pub(crate) enum Resolved<'a> {
    Buffered(&'a [u8]),
    Mapped(Mapping),
}

/// Resolve a block through a chain of layers: each layer's buffered writes, then its map.
pub(crate) fn resolve<'a>(
    buffer: &'a crate::write_buffer::WriteBuffer,
    family: &crate::family::Family,
    chain: &[LayerId],
    lba: u64,
) -> Resolved<'a> {
    for &layer in chain {
        if let Some(data) = buffer.lookup(layer, lba) {
            return Resolved::Buffered(data);
        }
        match family
            .layers
            .get(&layer)
            .map(|m| m.get(crate::units::Lba(lba)))
        {
            Some(Mapping::Absent) | None => continue,
            Some(found) => return Resolved::Mapped(found),
        }
    }
    Resolved::Mapped(Mapping::Absent)
}

/// Hands out segment ids from a copy of the engine's counter (written back by the caller).
fn segment_ids(next: &mut u64) -> impl FnMut() -> SegmentId + '_ {
    move || {
        let id = SegmentId(*next);
        *next += 1;
        id
    }
}

/// Below this many blocks a batch is reduced on the destager thread alone; above, the work is
/// split with a second thread (hashing and lz4 are most of destage's CPU on large writes).
const PARALLEL_REDUCE_BLOCKS_MIN: usize = 512;

/// A block of a write to destage: (seq, family, layer, lba, data).
type BlockWork<'a> = (u64, FamilyId, LayerId, u64, &'a [u8]);

/// Reduce blocks (no lock held), on two threads when there are many.
fn reduce_blocks(blocks: &[BlockWork<'_>]) -> Vec<Reduced> {
    let reduce_all = |part: &[BlockWork<'_>]| -> Vec<Reduced> {
        part.iter().map(|b| reduce::reduce(b.4)).collect()
    };
    if blocks.len() < PARALLEL_REDUCE_BLOCKS_MIN {
        return reduce_all(blocks);
    }
    let (first, second) = blocks.split_at(blocks.len() / 2);
    std::thread::scope(|scope| {
        let helper = scope.spawn(|| reduce_all(second));
        let mut out = reduce_all(first);
        out.extend(helper.join().expect("reduction does not panic"));
        out
    })
}

/// A block of a write taken for destage, with its reduction computed off the lock.
struct Work<'a> {
    seq: u64,
    family: FamilyId,
    layer: LayerId,
    lba: u64,
    reduced: Reduced,
    raw: &'a [u8],
}

/// Destage one batch; returns how many records it took.
fn destage_batch(shared: &Shared) -> Result<usize, IoFailure> {
    // Take a batch and, in the same lock, note which blocks of its writes are still current.
    let (batch, mut current) = {
        let mut st = shared.state.lock();
        let batch = st.buffer.pop_front(DESTAGE_BATCH_RECORDS_MAX);
        if batch.is_empty() {
            if st.dropping.is_empty() {
                return Ok(0);
            }
            let mut next_segment = st.next_segment_id;
            let mut to_seal = Vec::new();
            let mut alloc = segment_ids(&mut next_segment);
            let (span, cap) = (
                shared.config.drop_slice_blocks,
                shared.config.segment_size_bytes,
            );
            advance_drop(&mut st, span, cap, &mut alloc, &mut to_seal);
            drop(alloc);
            st.next_segment_id = next_segment;
            for (b, since, hwm) in to_seal {
                start_sealing(&mut st, b, since, hwm);
            }
            drop(st);
            finish_sealing(shared, SEALING_SEGMENTS_MAX)?;
            return Ok(1);
        }
        let current: Vec<Vec<u64>> = batch
            .iter()
            .map(|p| match p {
                Pending::Write {
                    seq,
                    layer,
                    lba,
                    data,
                    ..
                } => (0..(data.len() / BLOCK_SIZE_BYTES) as u64)
                    .filter(|&i| st.buffer.is_current(*layer, lba + i, *seq))
                    .collect(),
                _ => Vec::new(),
            })
            .collect();
        (batch, current.into_iter())
    };
    let taken = batch.len();
    let batch_last_seq = batch.last().map_or(0, Pending::seq);
    // Reduce the blocks that are still current, without the lock.
    // Trims, zeroings and layer operations, with the position of the first block after them.
    let mut ranges = Vec::new();
    let mut blocks: Vec<BlockWork<'_>> = Vec::new();
    for p in &batch {
        let current_blocks = current.next().expect("one entry per record");
        match p {
            Pending::Write {
                seq,
                family,
                layer,
                lba,
                data,
            } => {
                for i in current_blocks {
                    let start = i as usize * BLOCK_SIZE_BYTES;
                    blocks.push((
                        *seq,
                        *family,
                        *layer,
                        lba + i,
                        &data[start..start + BLOCK_SIZE_BYTES],
                    ));
                }
            }
            other => ranges.push((blocks.len(), other.clone())),
        }
    }
    let reduced = reduce_blocks(&blocks);
    let work: Vec<(usize, Work)> = blocks
        .iter()
        .zip(reduced)
        .enumerate()
        .map(|(position, (&(seq, family, layer, lba, raw), reduced))| {
            (
                position,
                Work {
                    seq,
                    family,
                    layer,
                    lba,
                    reduced,
                    raw,
                },
            )
        })
        .collect();
    let mut to_seal = Vec::new();
    {
        let mut guard = shared.state.lock();
        let st = &mut *guard;
        let cap = shared.config.segment_size_bytes;
        let span = shared.config.drop_slice_blocks;
        let mut ranges = ranges.into_iter().peekable();
        let mut next_segment = st.next_segment_id;
        let mut alloc = segment_ids(&mut next_segment);
        let mut last_seq = st.processed_seq;
        let apply_range = |st: &mut State,
                           p: Pending,
                           alloc: &mut dyn FnMut() -> SegmentId,
                           to_seal: &mut Vec<_>| {
            let seq = p.seq();
            match p {
                Pending::Range(RangeRecord {
                    family,
                    layer,
                    lba,
                    count,
                    mut released,
                    zero,
                    applied,
                    ..
                }) => {
                    if let Some(f) = st.families.get_mut(&family) {
                        if !applied {
                            let mapping = if zero { Mapping::Zero } else { Mapping::Absent };
                            released = f.set_range(layer, lba, count, mapping);
                        }
                        let entry = if zero {
                            SummaryEntry::MapZero { layer, lba, count }
                        } else {
                            SummaryEntry::Unmap { layer, lba, count }
                        };
                        f.destage_range(entry, &released, seq, alloc, cap);
                        if let Some((b, since)) = f.take_open_if_full(cap) {
                            to_seal.push((b, since, seq));
                        }
                    }
                }
                Pending::Layer { family, op, .. } => {
                    if let crate::layers::LayerOp::Merge { into, .. } = op {
                        if let Some(n) = st.merging_into.get_mut(&into) {
                            *n -= 1;
                            if *n == 0 {
                                st.merging_into.remove(&into);
                            }
                        }
                    }
                    let big_drop = match (op, st.families.get(&family)) {
                        (crate::layers::LayerOp::Drop { layer }, Some(f)) => f
                            .layers
                            .get(&layer)
                            .is_some_and(|m| m.present_entries() > span),
                        _ => false,
                    };
                    if big_drop {
                        // Released a slice per destage step (see `advance_drop`).
                        let layer = op.removed();
                        if !st.dropping.iter().any(|d| d.1 == layer) {
                            st.dropping.push_back((family, layer, 0));
                        }
                    } else if let Some(f) = st.families.get_mut(&family) {
                        f.destage_layer_op(op, seq, alloc, cap);
                        if let Some((b, since)) = f.take_open_if_full(cap) {
                            to_seal.push((b, since, seq));
                        }
                        st.applied_layer_ops
                            .push(crate::metastore::PendingLayerOp { family, op });
                    }
                }
                Pending::Write { .. } => unreachable!("writes are destaged block by block"),
            }
            seq
        };
        for (position, w) in work {
            while ranges.peek().is_some_and(|(at, _)| *at <= position) {
                let (_, p) = ranges.next().expect("peeked");
                last_seq = last_seq.max(apply_range(st, p, &mut alloc, &mut to_seal));
            }
            last_seq = last_seq.max(w.seq);
            if !st.buffer.is_current(w.layer, w.lba, w.seq) {
                continue;
            }
            let Some(f) = st.families.get_mut(&w.family) else {
                continue;
            };
            f.apply_block(w.layer, w.lba, &w.reduced, w.raw, w.seq, &mut alloc, cap);
            if let Some((b, since)) = f.take_open_if_full(cap) {
                // Later blocks of this record go to the next segment: the one sealed here
                // reflects the records before it only.
                to_seal.push((b, since, w.seq - 1));
            }
            st.buffer.retire(w.layer, w.lba, w.seq);
        }
        for (_, p) in ranges {
            last_seq = last_seq.max(apply_range(st, p, &mut alloc, &mut to_seal));
        }
        advance_drop(st, span, cap, &mut alloc, &mut to_seal);
        drop(alloc);
        st.next_segment_id = next_segment;
        st.processed_seq = st.processed_seq.max(last_seq).max(batch_last_seq);
        for (b, since, hwm) in to_seal {
            start_sealing(st, b, since, hwm);
        }
    }
    finish_sealing(shared, SEALING_SEGMENTS_MAX)?;
    Ok(taken)
}

/// Release the next slice of the first big layer being dropped; when it is empty, log the drop
/// complete. One slice per destage step keeps the state lock short whatever the layer's size.
fn advance_drop(
    st: &mut State,
    span: u64,
    cap: usize,
    alloc: &mut dyn FnMut() -> SegmentId,
    to_seal: &mut Vec<(SegmentBuilder, Option<u64>, u64)>,
) {
    let Some(&(family, layer, from_lba)) = st.dropping.front() else {
        return;
    };
    // A slice reflects no journal record; the open segment keeps the journal from here on.
    let seq = st.processed_seq.max(1);
    let Some(f) = st.families.get_mut(&family) else {
        st.dropping.pop_front();
        return;
    };
    let next = f.destage_drop_slice(layer, from_lba, span, seq, alloc, cap);
    if let Some((b, since)) = f.take_open_if_full(cap) {
        to_seal.push((b, since, seq));
    }
    match next {
        Some(lba) => st.dropping[0].2 = lba,
        None => {
            st.dropping.pop_front();
            st.applied_layer_ops.push(crate::metastore::PendingLayerOp {
                family,
                op: crate::layers::LayerOp::Drop { layer },
            });
        }
    }
}

/// Move a taken open segment to the sealing set (still readable from memory).
/// `since_seq` is the seq of the first journal record the segment reflects: the journal must
/// keep it until the stripe is durable. `hwm`: every record of the family up to it is
/// reflected in this segment or earlier ones.
fn start_sealing(st: &mut State, builder: SegmentBuilder, since_seq: Option<u64>, hwm: u64) {
    let id = builder.id;
    let family = builder.family;
    let data_bytes = builder.data_bytes() as u64;
    let bytes = Arc::new(builder.seal(hwm, StripeLayout::SINGLE));
    st.sealing.insert(
        id,
        SealingSegment {
            bytes,
            family,
            since_seq,
            journal_hwm: hwm,
            data_bytes,
        },
    );
}

/// How many sealed segments may wait for their stripe write before destage waits: bounds the
/// memory they hold (8 MiB each by default) while letting destage overlap the disk writes.
const SEALING_SEGMENTS_MAX: usize = 4;

/// Hand sealing segments to the sealer thread and wait until at most `in_flight_max` remain;
/// fails when a stripe write failed (the sealer keeps retrying it).
fn finish_sealing(shared: &Shared, in_flight_max: usize) -> Result<(), IoFailure> {
    shared.seal_work.notify_one();
    let mut st = shared.state.lock();
    loop {
        if st.sealing.len() <= in_flight_max {
            return Ok(());
        }
        if let Some(detail) = &st.seal_failure {
            let detail = detail.clone();
            let no_space = st.out_of_space;
            drop(st);
            return Err(if no_space {
                IoFailure::disk(
                    "stripe write",
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                )
            } else {
                IoFailure::disk("stripe write", std::io::Error::other(detail))
            });
        }
        if shared.abandon.load(Ordering::Acquire) {
            return Err(IoFailure::disk(
                "stripe write",
                std::io::Error::other("engine stopped"),
            ));
        }
        shared.sealed.wait_for(&mut st, IDLE_WAIT);
    }
}

/// The sealer thread: writes sealing segments as stripes, in id order, one at a time (so a
/// family's segments become durable in order, which replay relies on), retrying failures.
pub(crate) fn run_sealer(shared: &Shared) {
    loop {
        if shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let next = {
            let mut st = shared.state.lock();
            if st.sealing.is_empty() {
                if shared.stop_sealer.load(Ordering::Acquire) {
                    return;
                }
                shared.seal_work.wait_for(&mut st, IDLE_WAIT);
                continue;
            }
            st.sealing
                .iter()
                .next()
                .map(|(&id, s)| (id, s.bytes.clone()))
        };
        let Some((id, bytes)) = next else { continue };
        match write_stripe(shared, id, &bytes) {
            Ok(()) => {
                shared.sealed.notify_all();
                release_journal(shared);
            }
            Err(e) => {
                tracing::error!(segment = id.0, error = %e, "stripe write failed; retrying; writes get ENOSPC/EIO meanwhile");
                {
                    let mut st = shared.state.lock();
                    st.out_of_space |= e.is_no_space();
                    st.seal_failure = Some(e.to_string());
                }
                shared.sealed.notify_all();
                shared.space.notify_all();
                if shared.stop_sealer.load(Ordering::Acquire) {
                    // Shutting down: what is not written is still in the journal.
                    return;
                }
                std::thread::sleep(SEAL_RETRY_INTERVAL);
            }
        }
    }
}

/// Write one segment's stripe and move it from sealing to sealed.
fn write_stripe(shared: &Shared, id: SegmentId, bytes: &[u8]) -> Result<(), IoFailure> {
    let chunk = ChunkId {
        segment: id,
        index: 0,
    };
    shared.store.put(chunk, bytes)?;
    shared
        .counters
        .chunk_written_bytes
        .fetch_add(bytes.len() as u64, Ordering::Relaxed);
    let orphan = {
        let mut st = shared.state.lock();
        let s = st
            .sealing
            .remove(&id)
            .expect("only the sealer removes sealing segments");
        st.out_of_space = false;
        st.seal_failure = None;
        match st.families.get_mut(&s.family) {
            Some(f) => {
                f.journal_hwm = f.journal_hwm.max(s.journal_hwm);
                let sealed = SealedSegment {
                    family: s.family,
                    data_bytes: s.data_bytes,
                    stored_bytes: bytes.len() as u64,
                };
                st.sealed.insert(id, sealed);
                st.sealed_bytes_since_checkpoint += bytes.len() as u64;
                false
            }
            None => true,
        }
    };
    if orphan {
        shared.store.delete(chunk)?;
    }
    Ok(())
}

/// Seal every open segment (idle, sync, checkpoint, GC).
fn seal_all(shared: &Shared) -> Result<(), IoFailure> {
    {
        let mut st = shared.state.lock();
        let open: Vec<FamilyId> = st
            .families
            .iter()
            .filter(|(_, f)| f.open.is_some())
            .map(|(&id, _)| id)
            .collect();
        for fid in open {
            if let Some((b, since)) = st.families.get_mut(&fid).and_then(|f| f.take_open()) {
                let hwm = st.processed_seq;
                start_sealing(&mut st, b, since, hwm);
            }
        }
    }
    finish_sealing(shared, 0)
}

/// Checkpoint and wait until it is durable.
fn take_checkpoint(shared: &Shared) -> Result<(), IoFailure> {
    take_checkpoint_with(shared, true)
}

/// Collect a background checkpoint write: wait for it (`block`) or only if it has finished.
/// Once it is durable, GC may delete the segments it covers.
fn reap_checkpoint_writer(shared: &Shared, block: bool) -> Result<(), IoFailure> {
    let mut slot = shared.checkpoint_writer.lock();
    if !slot.as_ref().is_some_and(|h| block || h.is_finished()) {
        return Ok(());
    }
    let handle = slot.take().expect("checked above");
    drop(slot);
    let (below, covered) = handle
        .join()
        .map_err(|_| IoFailure::disk("checkpoint", std::io::Error::other("writer panicked")))??;
    let mut st = shared.state.lock();
    st.checkpoint_below = st.checkpoint_below.max(below);
    st.covered_layer_ops.extend(covered);
    Ok(())
}

/// Remove layer operations a checkpoint covers from the cluster state's pending list (they
/// need no replay any more). Called with no lock held.
fn forget_covered_layer_ops(shared: &Shared) {
    let covered = std::mem::take(&mut shared.state.lock().covered_layer_ops);
    if covered.is_empty() {
        return;
    }
    let mut meta = shared.meta.lock();
    let mut next = meta.state.clone();
    next.pending_layer_ops.retain(|op| !covered.contains(op));
    if next != meta.state {
        if let Err(e) = meta.commit(next) {
            tracing::warn!(error = %e, "could not trim the pending layer operations; they replay as no-ops");
        }
    }
}

/// Checkpoint: drain trims (so refcounts match maps), seal everything, copy the state under the
/// lock (maps and tables share their pages and chunks copy-on-write: a pointer each, the only
/// I/O pause it costs), then encode and write it on a background thread. With `wait` the
/// caller waits for the file; without, destage goes on and the writer is collected later.
fn take_checkpoint_with(shared: &Shared, wait: bool) -> Result<(), IoFailure> {
    // One checkpoint file write at a time.
    reap_checkpoint_writer(shared, true)?;
    let _gate = shared.range_gate.lock();
    while shared.state.lock().buffer.pending_ranges() > 0 {
        destage_batch(shared)?;
    }
    seal_all(shared)?;
    let started = Instant::now();
    let (images, sealed, next_segment_id, covered) = {
        let mut st = shared.state.lock();
        if !st.sealing.is_empty() {
            return Err(IoFailure::CorruptMetadata {
                what: "checkpoint".into(),
                detail: "stripes still being written".into(),
            });
        }
        let images: Vec<checkpoint::FamilyImage> = st
            .families
            .values()
            .map(checkpoint::FamilyImage::of)
            .collect();
        st.sealed_bytes_since_checkpoint = 0;
        let covered = std::mem::take(&mut st.applied_layer_ops);
        (images, st.sealed.clone(), st.next_segment_id, covered)
    };
    let counters = shared.counters.lifetime();
    let pause_us = started.elapsed().as_micros() as u64;
    let dir = shared.config.data_dir.join("meta");
    let write = move || -> Result<crate::engine::CheckpointCovers, IoFailure> {
        let body = checkpoint::encode(next_segment_id, &images, &sealed, counters);
        let encode_ms = started.elapsed().as_millis() as u64;
        drop(images);
        checkpoint::store(&dir, &body)?;
        tracing::info!(
            bytes = body.len(),
            segments_below = next_segment_id,
            pause_us,
            encode_ms,
            total_ms = started.elapsed().as_millis() as u64,
            "checkpoint written"
        );
        Ok((next_segment_id, covered))
    };
    let handle = std::thread::Builder::new()
        .name("weft-checkpoint".into())
        .spawn(write)
        .map_err(|e| IoFailure::disk("checkpoint thread", e))?;
    *shared.checkpoint_writer.lock() = Some(handle);
    if wait {
        reap_checkpoint_writer(shared, true)?;
    }
    Ok(())
}

/// Compact segments whose live fraction is below `live_fraction_max`.
fn collect_garbage(
    shared: &Shared,
    live_fraction_max: f64,
    move_budget_bytes: u64,
) -> Result<GcReport, IoFailure> {
    let mut report = GcReport::default();
    let (victims, uncovered_garbage) = {
        let st = shared.state.lock();
        let mut victims = Vec::new();
        let mut uncovered = false;
        for (&id, s) in &st.sealed {
            let Some(f) = st.families.get(&s.family) else {
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
            if id.0 < st.checkpoint_below {
                victims.push((fraction, id, s.family, usage.live_bytes));
            } else {
                uncovered = true;
            }
        }
        victims.sort_by(|a, b| a.0.total_cmp(&b.0));
        (victims, uncovered)
    };
    if victims.is_empty() {
        let since = shared.state.lock().sealed_bytes_since_checkpoint;
        if uncovered_garbage
            && live_fraction_max < 1.0
            && since >= shared.config.checkpoint_every_bytes / 4
        {
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
    let mut live_by_segment: HashMap<SegmentId, Vec<crate::units::BlockId>> = HashMap::new();
    {
        let st = shared.state.lock();
        let families: std::collections::HashSet<FamilyId> = victims.iter().map(|v| v.2).collect();
        let ids: std::collections::HashSet<SegmentId> = victims.iter().map(|v| v.1).collect();
        for fid in families {
            if let Some(f) = st.families.get(&fid) {
                for (block, segment) in f.table.live_blocks_in_any(&ids) {
                    live_by_segment.entry(segment).or_default().push(block);
                }
            }
        }
    }
    let mut done = Vec::new();
    for (_, id, fid, live_bytes) in victims {
        let stored_bytes = match shared.state.lock().sealed.get(&id) {
            Some(s) => s.stored_bytes,
            None => continue,
        };
        let mut bytes = vec![0u8; usize::try_from(stored_bytes).expect("segment fits in memory")];
        if live_bytes > 0 {
            shared.store.read(
                ChunkId {
                    segment: id,
                    index: 0,
                },
                0,
                &mut bytes,
            )?;
        }
        let mut st = shared.state.lock();
        let cap = shared.config.segment_size_bytes;
        let mut next_segment = st.next_segment_id;
        let mut to_seal = Vec::new();
        if let Some(f) = st.families.get_mut(&fid) {
            let mut alloc = segment_ids(&mut next_segment);
            for &block in live_by_segment.get(&id).into_iter().flatten() {
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
                f.relocate(block, stored, loc.compressed, &mut alloc, cap);
                report.bytes_moved += u64::from(loc.stored_len_bytes);
                if let Some(b) = f.take_open_if_full(cap) {
                    to_seal.push(b);
                }
            }
        }
        st.next_segment_id = next_segment;
        let hwm = st.processed_seq;
        for (b, since) in to_seal {
            start_sealing(&mut st, b, since, hwm);
        }
        drop(st);
        done.push((id, stored_bytes));
    }
    // The relocated blocks must be durable before their old copies go.
    seal_all(shared)?;
    for (id, stored_bytes) in done {
        shared.state.lock().sealed.remove(&id);
        match shared.store.delete(ChunkId {
            segment: id,
            index: 0,
        }) {
            Ok(()) => {}
            Err(IoFailure::Disk { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
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
    shared.state.lock().out_of_space = false;
    Ok(report)
}

/// Where a block to read comes from, decided under the lock.
enum Source {
    Ready,
    Disk {
        index: usize,
        location: BlockLocation,
    },
}

/// Read `count` blocks from `lba` into `buf`: buffer, then map, then chunk.
pub(crate) fn read_blocks(
    shared: &Shared,
    volume: VolumeId,
    lba: u64,
    count: u64,
    buf: &mut [u8],
) -> Result<(), EngineError> {
    let mut disk = Vec::new();
    {
        let st = shared.state.lock();
        let image = st.image(volume)?;
        let family = st.families.get(&image.family).ok_or(EngineError::Gone)?;
        let chain = st.chain(image);
        for i in 0..count as usize {
            let out = &mut buf[i * BLOCK_SIZE_BYTES..(i + 1) * BLOCK_SIZE_BYTES];
            let l = lba + i as u64;
            let source = match resolve(&st.buffer, family, &chain, l) {
                Resolved::Buffered(data) => {
                    out.copy_from_slice(data);
                    Source::Ready
                }
                Resolved::Mapped(mapping) => match mapping {
                    Mapping::Absent | Mapping::Zero => {
                        out.fill(0);
                        Source::Ready
                    }
                    Mapping::Block(b) => {
                        let location = family.location(b).expect("mapped blocks are live");
                        let in_memory = match (&family.open, st.sealing.get(&location.segment)) {
                            (Some(open), _) if open.id == location.segment => {
                                Some(open.bytes(location.offset_bytes, location.stored_len_bytes))
                            }
                            (_, Some(s)) => {
                                let start = location.offset_bytes as usize;
                                Some(
                                    &s.bytes[start..start + usize::from(location.stored_len_bytes)],
                                )
                            }
                            _ => None,
                        };
                        match in_memory {
                            Some(stored) => {
                                restore_block(shared, stored, location, out)?;
                                Source::Ready
                            }
                            None => Source::Disk { index: i, location },
                        }
                    }
                },
            };
            if let Source::Disk { index, location } = source {
                disk.push((index, location));
            }
        }
    }
    // Coalesce runs of blocks stored back to back in one segment into one chunk read.
    let mut i = 0;
    let mut scratch = Vec::new();
    while i < disk.len() {
        let (_, first) = disk[i];
        let mut j = i + 1;
        let mut end = u64::from(first.offset_bytes) + u64::from(first.stored_len_bytes);
        while j < disk.len()
            && disk[j].1.segment == first.segment
            && u64::from(disk[j].1.offset_bytes) == end
            && end - u64::from(first.offset_bytes) < (1 << 20)
        {
            end += u64::from(disk[j].1.stored_len_bytes);
            j += 1;
        }
        let start = u64::from(first.offset_bytes);
        scratch.resize(usize::try_from(end - start).expect("bounded run"), 0);
        shared.store.read(
            ChunkId {
                segment: first.segment,
                index: 0,
            },
            start,
            &mut scratch,
        )?;
        for &(index, loc) in &disk[i..j] {
            let at = usize::try_from(u64::from(loc.offset_bytes) - start).expect("inside run");
            let stored = &scratch[at..at + usize::from(loc.stored_len_bytes)];
            restore_block(
                shared,
                stored,
                loc,
                &mut buf[index * BLOCK_SIZE_BYTES..(index + 1) * BLOCK_SIZE_BYTES],
            )?;
        }
        i = j;
    }
    Ok(())
}

fn restore_block(
    shared: &Shared,
    stored: &[u8],
    loc: BlockLocation,
    out: &mut [u8],
) -> Result<(), EngineError> {
    let corrupt = || {
        shared
            .counters
            .corrupt_reads
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            segment = loc.segment.0,
            offset = loc.offset_bytes,
            "checksum mismatch: block not served"
        );
        EngineError::Io(IoFailure::Corrupt {
            block: crate::units::BlockId(u64::MAX),
            segment: loc.segment,
            offset_bytes: u64::from(loc.offset_bytes),
        })
    };
    if crc32c::crc32c(stored) != loc.crc32c {
        return Err(corrupt());
    }
    reduce::restore(stored, loc.compressed, out).ok_or_else(corrupt)
}

/// Engine-wide statistics.
pub(crate) fn stats(shared: &Shared) -> EngineStats {
    let st = shared.state.lock();
    let mut r = ReductionStats::default();
    let mut map_entries = 0u64;
    let mut nonzero_refs = 0;
    for f in st.families.values() {
        r.unique_blocks += f.table.live_blocks();
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
    EngineStats {
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
        capacity_bytes: shared.store.capacity_bytes(),
        used_bytes: shared.store.used_bytes(),
        sealed_segments: st.sealed.len() as u64,
        journal_files: shared.journal.file_count() as u64,
        corrupt_reads: c.corrupt_reads.load(Ordering::Relaxed),
        out_of_space: st.out_of_space,
        volumes: st.images.values().filter(|i| i.writable).count() as u64,
        snapshots: st.images.values().filter(|i| !i.writable).count() as u64,
        metadata_memory_bytes: map_entries * 8 + r.unique_blocks * 80,
        reduction: r,
    }
}

/// Read a sealed segment's header and summary (recovery).
pub(crate) fn read_summary(
    store: &dyn crate::chunk_store::ChunkStore,
    id: SegmentId,
) -> Result<Option<(segment::SegmentHeader, Vec<SummaryEntry>)>, IoFailure> {
    let chunk = ChunkId {
        segment: id,
        index: 0,
    };
    let mut head = vec![0u8; SEGMENT_HEADER_BYTES];
    if store.read(chunk, 0, &mut head).is_err() {
        return Ok(None);
    }
    let Ok(header) = segment::parse_header(&head) else {
        return Ok(None);
    };
    let mut summary = vec![0u8; header.summary_len_bytes as usize];
    if store
        .read(chunk, u64::from(header.data_end_bytes), &mut summary)
        .is_err()
    {
        return Ok(None);
    }
    match segment::parse_summary(&header, &summary) {
        Ok(entries) => Ok(Some((header, entries))),
        Err(_) => Ok(None),
    }
}
