//! Start-up and recovery: cluster state, then the latest checkpoint, then the segments sealed
//! after it (in id order), then the layer graph (from the cluster state, with merges not yet
//! applied spliced back in), then the journal records no sealed segment reflects, then the
//! cluster state's pending layer operations (a no-op for those already applied). What comes
//! out is the state the engine had when it stopped, minus nothing that was acknowledged.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::{self, SealedSegment, CHECKPOINT_SEGMENT_BASE};
use crate::config::Backends;
use crate::config::EngineConfig;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::journal::JournalSource;
use crate::journal::RecordKind;
use crate::layers::LayerOp;
use crate::metastore::{ClusterState, ClusterStore};
use crate::segment::{self, SummaryEntry, SEGMENT_HEADER_BYTES};
use crate::state::{Counters, Shared, State};
use crate::stripe::{StripeListing, StripeStore};
use crate::units::{FamilyId, LayerId, SegmentId, BLOCK_SIZE_BYTES};

pub(crate) fn recover(config: EngineConfig, backends: Backends) -> Result<Shared, EngineError> {
    let Backends {
        placement,
        metastore: kv,
        write_log,
        epoch,
    } = backends;
    let started = Instant::now();
    let dir = &config.data_dir;
    let lock = lock_data_dir(dir)?;
    let meta = ClusterStore::open(kv)?;
    let stripes = Arc::new(StripeStore::new(placement));
    stripes.set_default_epoch(epoch);

    let counters = Counters::restore(meta.state.counters);
    let mut st = State::default();
    let layer_family = layer_families(&meta.state);
    let alive: HashSet<FamilyId> = layer_family.values().copied().collect();
    for (&family, pool) in &meta.state.family_pools {
        stripes
            .placement()
            .bind_family(family, pool)
            .map_err(|reason| EngineError::InvalidPool {
                pool: pool.clone(),
                reason,
            })?;
    }
    let mut replayed = 0u64;
    for &fid in &alive {
        replayed += recover_family(&stripes, &meta.state, fid, &mut st)?;
    }
    // Chunks of families no volume or snapshot knows any more (deleted while a c.node was
    // down, or their deletion was cut short).
    for family in stripes.families()? {
        if !alive.contains(&FamilyId(family)) {
            tracing::warn!(family, "deleting the stripes of a deleted family");
            for (segment, s) in stripes.list(family)? {
                if let Err(e) = stripes.delete(family, segment, s.redundancy) {
                    tracing::warn!(family, segment, error = %e, "could not delete a stripe");
                }
            }
        }
    }
    for image in crate::state::images_of(&meta.state) {
        st.insert_image(image);
    }

    build_graphs(&meta.state, &mut st);

    // Replay the journal after each family's high-water mark.
    let min_next_seq = st
        .families
        .values()
        .map(|f| f.journal_hwm + 1)
        .max()
        .unwrap_or(1);
    let write_log = write_log.unwrap_or_else(|| {
        Arc::new(JournalSource {
            dir: dir.join("journal"),
            options: config.journal,
        })
    });
    let (journal, records) = write_log.open(min_next_seq)?;
    let mut replayed_records = 0u64;
    let mut first_pending = None;
    let mut skipped_write_through = 0u64;
    for r in records {
        let h = r.header;
        // Records of layers no volume, snapshot or pending operation knows were dropped.
        let Some(&fid) = layer_family.get(&h.layer) else {
            continue;
        };
        let Some(f) = st.families.get(&fid) else {
            continue;
        };
        if r.seq <= f.journal_hwm {
            continue;
        }
        if h.kind == RecordKind::WriteThrough {
            // Never acknowledged: acknowledgement waits for a durable segment past it.
            skipped_write_through += 1;
            continue;
        }
        first_pending.get_or_insert(r.seq);
        replayed_records += 1;
        match h.kind {
            RecordKind::Write => {
                if r.payload.len() as u64 != h.count * BLOCK_SIZE_BYTES as u64 {
                    tracing::error!(
                        seq = r.seq,
                        "journal record length does not match its block count; skipped"
                    );
                    continue;
                }
                st.buffer
                    .push_write(r.seq, fid, h.layer, h.lba, r.payload.into());
            }
            RecordKind::Trim | RecordKind::Zero => {
                crate::destage::buffer_range(&mut st, r.seq, fid, h);
            }
            RecordKind::DropLayer => {
                queue_layer_op(&mut st, r.seq, fid, LayerOp::Drop { layer: h.layer })
            }
            RecordKind::WriteThrough => unreachable!("skipped above"),
            RecordKind::MergeLayer => queue_layer_op(
                &mut st,
                r.seq,
                fid,
                LayerOp::Merge {
                    from: h.layer,
                    into: LayerId(h.lba),
                },
            ),
        }
    }
    st.processed_seq = match first_pending {
        Some(first) => first - 1,
        None => journal.written_seq(),
    };
    // Operations the cluster state holds but the journal may not: again, after everything
    // (an operation already applied or queued above is a no-op the second time).
    for op in &meta.state.pending_layer_ops {
        queue_layer_op(&mut st, journal.written_seq(), op.family, op.op);
    }
    tracing::info!(
        images = st.images.len(),
        segments_replayed = replayed,
        journal_records_replayed = replayed_records,
        unacknowledged_write_through = skipped_write_through,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Shared {
        config,
        meta: Mutex::new(meta),
        hosts_generation: std::sync::atomic::AtomicU64::new(1),
        range_gate: Mutex::new(()),
        write_through_waiting: AtomicUsize::new(0),
        space_wanted: AtomicBool::new(false),
        journal,
        stripes,
        state: Mutex::new(st),
        work: Condvar::new(),
        space: Condvar::new(),
        seal_work: Condvar::new(),
        sealed: Condvar::new(),
        stop_sealer: AtomicBool::new(false),
        checkpoint_writer: Mutex::new(None),
        commands: Mutex::new(Vec::new()),
        shutdown: AtomicBool::new(false),
        abandon: AtomicBool::new(false),
        counters,
        repair: crate::repair_status::RepairControl::default(),
        _data_dir_lock: lock,
    })
}

/// Recover one family: its checkpoint (from the stripes the cluster state points at), then
/// its segments sealed after it, in id order. Torn stripes (fewer than k chunks, or a summary
/// that fails its checksum) are deleted: their writes are still in the journal. Returns how
/// many segments were replayed.
fn recover_family(
    stripes: &StripeStore,
    state: &ClusterState,
    fid: FamilyId,
    st: &mut State,
) -> Result<u64, EngineError> {
    let corrupt = |detail: String| IoFailure::CorruptMetadata {
        what: format!("checkpoint of family {}", fid.0),
        detail,
    };
    let (mut family, mut sealed, below) = match state.checkpoints.get(&fid.0) {
        Some(r) => {
            let mut image = Vec::with_capacity(usize::try_from(r.len_bytes).unwrap_or(0));
            for (segment, len) in r.parts() {
                let mut part = vec![0u8; usize::try_from(len).expect("bounded part")];
                stripes
                    .read(fid.0, segment.0, r.redundancy.0, len, 0, &mut part)
                    .map_err(IoFailure::Stripe)?;
                image.extend_from_slice(&part);
            }
            if crc32c::crc32c(&image) != r.crc32c {
                return Err(corrupt("checksum mismatch".into()).into());
            }
            let c = checkpoint::decode(&image).map_err(corrupt)?;
            (c.family, c.sealed, c.next_segment_id)
        }
        None => (Family::new(fid), BTreeMap::new(), 1),
    };
    let listed = stripes.list(fid.0).map_err(IoFailure::Stripe)?;
    let current_generation = state.checkpoints.get(&fid.0).map(|r| r.generation);
    let mut replayed = 0;
    let mut next_segment = below;
    let mut missing_sealed = Vec::new();
    for &id in sealed.keys() {
        if !listed.get(&id.0).is_some_and(StripeListing::readable) {
            missing_sealed.push(id);
        }
    }
    for (&segment, s) in &listed {
        let discard = |why: &str| {
            tracing::warn!(family = fid.0, segment, why, "discarding stripe");
            if let Err(e) = stripes.delete(fid.0, segment, s.redundancy) {
                tracing::warn!(family = fid.0, segment, error = %e, "could not delete stripe");
            }
        };
        if segment >= CHECKPOINT_SEGMENT_BASE {
            let generation = (segment - CHECKPOINT_SEGMENT_BASE) >> 20;
            if Some(generation) != current_generation {
                discard("checkpoint stripe of another generation");
            }
            continue;
        }
        if segment < below {
            if !sealed.contains_key(&SegmentId(segment)) {
                discard("not in the checkpoint (finished GC)");
            }
            continue;
        }
        if !s.readable() {
            discard("torn: fewer than k chunks; its writes are replayed from the journal");
            continue;
        }
        let Some((header, entries)) = read_summary(stripes, fid, segment, s)? else {
            discard("torn: its writes are replayed from the journal");
            continue;
        };
        if header.family != fid {
            discard("its header names another family");
            continue;
        }
        family.replay(SegmentId(segment), &entries);
        family.journal_hwm = family.journal_hwm.max(header.journal_hwm);
        let data_bytes =
            u64::from(header.data_end_bytes) - crate::segment::SEGMENT_HEADER_BYTES as u64;
        sealed.insert(
            SegmentId(segment),
            SealedSegment {
                family: fid,
                redundancy: s.redundancy,
                data_bytes,
                stored_bytes: s.stripe_len_bytes,
            },
        );
        next_segment = next_segment.max(segment + 1);
        replayed += 1;
    }
    for id in missing_sealed {
        sealed.remove(&id);
    }
    family.table.rebuild_free_ids();
    let missing = family
        .table
        .live_entries()
        .filter(|(_, e)| !sealed.contains_key(&e.location.segment))
        .count();
    if missing > 0 {
        tracing::error!(
            family = fid.0,
            blocks = missing,
            "blocks point at missing stripes: reads of them fail with EIO"
        );
    }
    for (id, s) in sealed {
        st.sealed.insert((fid, id), s);
    }
    st.next_segment.insert(fid, next_segment);
    st.checkpoint_below.insert(fid, below);
    st.families.insert(fid, family);
    Ok(replayed)
}

/// Only one engine may use a data dir: a second process would write the same segment ids and
/// journal files. The lock is released when the process exits, however it exits.
fn lock_data_dir(dir: &std::path::Path) -> Result<std::fs::File, EngineError> {
    let path = dir.join("lock");
    std::fs::create_dir_all(dir).map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| IoFailure::disk(path.display().to_string(), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(EngineError::DataDirInUse {
            path: dir.display().to_string(),
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(IoFailure::disk(path.display().to_string(), e).into())
        }
    }
}

/// The family of every layer the cluster state knows: volumes' tops, snapshots' layers (also
/// hidden ones) and the layers of pending operations.
fn layer_families(state: &ClusterState) -> HashMap<LayerId, FamilyId> {
    let mut out = HashMap::new();
    for v in &state.volumes {
        out.insert(v.layer, v.family);
    }
    for s in &state.snapshots {
        out.insert(s.layer, s.family);
    }
    for op in &state.pending_layer_ops {
        match op.op {
            LayerOp::Drop { layer } => {
                out.insert(layer, op.family);
            }
            LayerOp::Merge { from, into } => {
                out.insert(from, op.family);
                out.insert(into, op.family);
            }
        }
    }
    out
}

/// The layer graphs as the cluster state describes them, with each pending merge spliced back
/// between its target and the layer below (its layer may still hold entries or journaled
/// writes; if the merge was applied already, the layer is empty and the replayed operation
/// takes it out again).
fn build_graphs(state: &ClusterState, st: &mut State) {
    for v in &state.volumes {
        if let Some(f) = st.families.get_mut(&v.family) {
            f.graph.set_parent(v.layer, v.base);
        }
    }
    for s in &state.snapshots {
        if let Some(f) = st.families.get_mut(&s.family) {
            f.graph.set_parent(s.layer, s.parent);
        }
    }
    for op in state.pending_layer_ops.iter().rev() {
        let LayerOp::Merge { from, into } = op.op else {
            continue;
        };
        let Some(f) = st.families.get_mut(&op.family) else {
            continue;
        };
        if f.graph.contains(into) && !f.graph.contains(from) {
            let below = f.graph.parent(into);
            f.graph.set_parent(from, below);
            f.graph.set_parent(into, Some(from));
        }
    }
}

fn queue_layer_op(st: &mut State, seq: u64, family: FamilyId, op: LayerOp) {
    if let LayerOp::Merge { into, .. } = op {
        *st.merging_into.entry(into).or_default() += 1;
    }
    st.buffer.push_layer_op(seq, family, op);
}

/// Read a sealed segment's header and summary; `None` when they fail their checks (torn).
fn read_summary(
    stripes: &StripeStore,
    fid: FamilyId,
    segment: u64,
    s: &StripeListing,
) -> Result<Option<(segment::SegmentHeader, Vec<SummaryEntry>)>, IoFailure> {
    let read = |offset: u64, buf: &mut [u8]| {
        stripes.read(
            fid.0,
            segment,
            s.redundancy,
            s.stripe_len_bytes,
            offset,
            buf,
        )
    };
    let mut head = vec![0u8; SEGMENT_HEADER_BYTES];
    if read(0, &mut head).is_err() {
        return Ok(None);
    }
    let Ok(header) = segment::parse_header(&head) else {
        return Ok(None);
    };
    let mut summary = vec![0u8; header.summary_len_bytes as usize];
    if read(u64::from(header.data_end_bytes), &mut summary).is_err() {
        return Ok(None);
    }
    match segment::parse_summary(&header, &summary) {
        Ok(entries) => Ok(Some((header, entries))),
        Err(_) => Ok(None),
    }
}
