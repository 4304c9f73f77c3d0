//! Destage: take acknowledged records from the write buffer's FIFO in journal order, reduce
//! their blocks (zero, fingerprint, lz4) off the lock, and apply them to the families (dedup,
//! append to the open segment, map, release) under it; trims, zeroings and layer operations
//! in the same order. Full segments go to the sealer ([`crate::seal`]).

use std::sync::atomic::Ordering;

use bytes::Bytes;

use crate::block_map::Mapping;
use crate::error::IoFailure;
use crate::journal::{RecordHeader, RecordKind};
use crate::layer_work::Dropping;
use crate::reduce::Reduced;
use crate::seal::{finish_sealing, start_sealing, SEALING_SEGMENTS_MAX};
use crate::segment::{SegmentBuilder, SummaryEntry};
use crate::state::{Shared, State};
use crate::units::{FamilyId, LayerId, SegmentId, BLOCK_SIZE_BYTES};
use crate::write_buffer::{Pending, RangeRecord};

/// Records taken from the FIFO per destage batch: big enough to amortise the lock, small
/// enough that the lock is never held long.
pub(crate) const DESTAGE_BATCH_RECORDS_MAX: usize = 64;

pub(crate) fn drain(shared: &Shared) -> Result<(), IoFailure> {
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
    let applied = !st.layer_work.is_merging_into(layer);
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

/// While writers wait for write-through, segments are sealed at this size.
pub(crate) const WRITE_THROUGH_SEGMENT_BYTES: usize = 4 << 20;

/// A block of a write to destage: (seq, family, layer, lba); its data goes to the reduction
/// pool beside it.
type BlockWork = (u64, FamilyId, LayerId, u64);

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
pub(crate) fn destage_batch(shared: &Shared) -> Result<usize, IoFailure> {
    // Take a batch and, in the same lock, note which blocks of its writes are still current.
    let (batch, mut current) = {
        let mut st = shared.state.lock();
        let batch = st.buffer.pop_front(DESTAGE_BATCH_RECORDS_MAX);
        if batch.is_empty() {
            if !st.layer_work.is_dropping() {
                return Ok(0);
            }
            let mut ids = std::mem::take(&mut st.segment_ids);
            let mut to_seal = Vec::new();
            let mut alloc = ids.allocator();
            let (span, cap) = (
                shared.config.drop_slice_blocks,
                shared.config.segment_size_bytes,
            );
            advance_drop(&mut st, span, cap, &mut alloc, &mut to_seal);
            drop(alloc);
            st.segment_ids = ids;
            for (b, since, hwm) in to_seal {
                start_sealing(&shared.stripes, &mut st, b, since, hwm);
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
    let mut blocks: Vec<BlockWork> = Vec::new();
    let mut block_data: Vec<Bytes> = Vec::new();
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
                    blocks.push((*seq, *family, *layer, lba + i));
                    block_data.push(data.slice(start..start + BLOCK_SIZE_BYTES));
                }
            }
            other => ranges.push((blocks.len(), other.clone())),
        }
    }
    // Off the lock, on the reduction pool (this thread included).
    let reduced = shared.reduce_pool.reduce(&block_data);
    let work: Vec<(usize, Work)> = blocks
        .iter()
        .zip(&block_data)
        .zip(reduced)
        .enumerate()
        .map(|(position, ((&(seq, family, layer, lba), raw), reduced))| {
            (
                position,
                Work {
                    seq,
                    family,
                    layer,
                    lba,
                    reduced,
                    raw: &raw[..],
                },
            )
        })
        .collect();
    let mut to_seal = Vec::new();
    {
        let mut guard = shared.state.lock();
        let st = &mut *guard;
        let cap = if shared.write_through_waiting.load(Ordering::Acquire) > 0 {
            // Writers wait for a durable stripe: seal in smaller pieces so the stripe writes
            // overlap destage instead of following it.
            shared
                .config
                .segment_size_bytes
                .min(WRITE_THROUGH_SEGMENT_BYTES)
        } else {
            shared.config.segment_size_bytes
        };
        let span = shared.config.drop_slice_blocks;
        let mut ranges = ranges.into_iter().peekable();
        let mut ids = std::mem::take(&mut st.segment_ids);
        let mut alloc = ids.allocator();
        let mut last_seq = st.processed_seq;
        let apply_range = |st: &mut State,
                           p: Pending,
                           alloc: &mut dyn FnMut(FamilyId) -> SegmentId,
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
                        st.layer_work.merge_dequeued(into);
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
                        st.layer_work.drop_queued(family, layer);
                    } else if let Some(f) = st.families.get_mut(&family) {
                        f.destage_layer_op(op, seq, alloc, cap);
                        if let Some((b, since)) = f.take_open_if_full(cap) {
                            to_seal.push((b, since, seq));
                        }
                        st.layer_work
                            .applied(crate::metastore::PendingLayerOp { family, op });
                    }
                }
                Pending::Write { .. } => unreachable!("writes are destaged block by block"),
            }
            seq
        };
        let mut work = work.into_iter().peekable();
        while let Some((position, w)) = work.next() {
            let last_of_record = work.peek().is_none_or(|(_, next)| next.seq != w.seq);
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
            if f.open.is_none() && f.spare_buffer.is_none() {
                f.spare_buffer = st.segments.take_spare_buffer();
            }
            f.apply_block(w.layer, w.lba, &w.reduced, w.raw, w.seq, &mut alloc, cap);
            if f.open.is_none() {
                // A zero or a dedup hit opened no segment: no family keeps a spare parked.
                if let Some(spare) = f.spare_buffer.take() {
                    st.segments.put_spare_buffer(spare);
                }
            }
            if let Some((b, since)) = f.take_open_if_full(cap) {
                // Later blocks of this record go to the next segment: the one sealed here
                // reflects the records before it only, unless this was the record's last.
                let hwm = if last_of_record { w.seq } else { w.seq - 1 };
                to_seal.push((b, since, hwm));
            }
            st.buffer.retire(w.layer, w.lba, w.seq);
        }
        for (_, p) in ranges {
            last_seq = last_seq.max(apply_range(st, p, &mut alloc, &mut to_seal));
        }
        advance_drop(st, span, cap, &mut alloc, &mut to_seal);
        drop(alloc);
        st.segment_ids = ids;
        st.processed_seq = st.processed_seq.max(last_seq).max(batch_last_seq);
        for (b, since, hwm) in to_seal {
            start_sealing(&shared.stripes, st, b, since, hwm);
        }
    }
    finish_sealing(shared, SEALING_SEGMENTS_MAX)?;
    Ok(taken)
}

/// Release the next slice of the first big layer being dropped; when it is empty, log the drop
/// complete. One slice per destage step keeps the state lock short whatever the layer's size.
pub(crate) fn advance_drop(
    st: &mut State,
    span: u64,
    cap: usize,
    alloc: &mut dyn FnMut(FamilyId) -> SegmentId,
    to_seal: &mut Vec<(SegmentBuilder, Option<u64>, u64)>,
) {
    let Some(Dropping {
        family,
        layer,
        next_lba: from_lba,
    }) = st.layer_work.next_drop()
    else {
        return;
    };
    // A slice reflects no journal record; the open segment keeps the journal from here on.
    let seq = st.processed_seq.max(1);
    let Some(f) = st.families.get_mut(&family) else {
        st.layer_work.drop_ended();
        return;
    };
    let next = f.destage_drop_slice(layer, from_lba, span, seq, alloc, cap);
    if let Some((b, since)) = f.take_open_if_full(cap) {
        to_seal.push((b, since, seq));
    }
    match next {
        Some(lba) => st.layer_work.drop_advanced(lba),
        None => {
            st.layer_work.drop_ended();
            st.layer_work.applied(crate::metastore::PendingLayerOp {
                family,
                op: crate::layers::LayerOp::Drop { layer },
            });
        }
    }
}
