//! Start-up and recovery: cluster state, then the latest checkpoint, then the segments sealed
//! after it (in id order), then the layer graph (from the cluster state, with merges not yet
//! applied spliced back in), then the journal records no sealed segment reflects, then the
//! cluster state's pending layer operations (a no-op for those already applied). What comes
//! out is the state the engine had when it stopped, minus nothing that was acknowledged.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::{self, SealedSegment};
use crate::chunk_store::{ChunkId, ChunkStore, LocalChunkStore};
use crate::config::EngineConfig;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::journal::{Journal, RecordKind};
use crate::layers::LayerOp;
use crate::metastore::{ClusterState, MetaStore};
use crate::segment::{self, SummaryEntry, SEGMENT_HEADER_BYTES};
use crate::state::{Counters, Shared, State};
use crate::units::{FamilyId, LayerId, SegmentId, BLOCK_SIZE_BYTES};

pub(crate) fn recover(config: EngineConfig) -> Result<Shared, EngineError> {
    let started = Instant::now();
    let dir = &config.data_dir;
    let lock = lock_data_dir(dir)?;
    let meta_dir = dir.join("meta");
    let meta = MetaStore::open(&meta_dir)?;
    let store = Arc::new(LocalChunkStore::open(
        &dir.join("dnode0").join("chunks"),
        config.direct_io,
        config.capacity_bytes,
    )?);

    let image = checkpoint::load(&meta_dir)?.unwrap_or_default();
    let counters = Counters::restore(image.counters);
    let mut families: HashMap<_, _> = image.families.into_iter().map(|f| (f.id, f)).collect();
    let mut st = State {
        next_segment_id: image.next_segment_id,
        checkpoint_below: image.next_segment_id,
        ..State::default()
    };
    let layer_family = layer_families(&meta.state);
    let alive: HashSet<FamilyId> = layer_family.values().copied().collect();
    for fid in alive {
        let family = families.remove(&fid).unwrap_or_else(|| Family::new(fid));
        st.families.insert(fid, family);
    }
    for image in crate::state::images_of(&meta.state) {
        st.insert_image(image);
    }
    st.sealed = image
        .sealed
        .into_iter()
        .filter(|(_, s)| st.families.contains_key(&s.family))
        .collect();

    // Replay segments sealed after the checkpoint; drop torn, orphaned and deleted ones.
    // Segments GC deleted after the checkpoint are gone: their blocks were relocated by
    // segments replayed below.
    let chunks = store.list()?;
    let present: std::collections::HashSet<_> = chunks.iter().map(|c| c.segment).collect();
    st.sealed.retain(|id, _| present.contains(id));
    let mut replayed = 0u64;
    for chunk in chunks {
        let id = chunk.segment;
        if id.0 < image.next_segment_id {
            if !st.sealed.contains_key(&id) {
                discard(
                    &*store,
                    chunk,
                    "not in the checkpoint (deleted volume or finished GC)",
                );
            }
            continue;
        }
        let Some((header, entries)) = read_summary(&*store, id)? else {
            discard(
                &*store,
                chunk,
                "torn: its writes are replayed from the journal",
            );
            continue;
        };
        let Some(family) = st.families.get_mut(&header.family) else {
            discard(&*store, chunk, "belongs to a deleted volume");
            continue;
        };
        family.replay(id, &entries);
        family.journal_hwm = family.journal_hwm.max(header.journal_hwm);
        let stored_bytes = std::fs::metadata(
            dir.join("dnode0")
                .join("chunks")
                .join(format!("{:016x}.0.chunk", id.0)),
        )
        .map_or(0, |m| m.len());
        let data_bytes =
            u64::from(header.data_end_bytes) - crate::segment::SEGMENT_HEADER_BYTES as u64;
        st.sealed.insert(
            id,
            SealedSegment {
                family: header.family,
                data_bytes,
                stored_bytes,
            },
        );
        st.next_segment_id = st.next_segment_id.max(id.0 + 1);
        replayed += 1;
    }
    let mut missing = 0;
    for f in st.families.values_mut() {
        f.table.rebuild_free_ids();
        missing += f
            .table
            .live_entries()
            .filter(|(_, e)| !st.sealed.contains_key(&e.location.segment))
            .count();
    }
    if missing > 0 {
        tracing::error!(
            blocks = missing,
            "blocks point at missing segments: reads of them fail with EIO"
        );
    }

    build_graphs(&meta.state, &mut st);

    // Replay the journal after each family's high-water mark.
    let min_next_seq = st
        .families
        .values()
        .map(|f| f.journal_hwm + 1)
        .max()
        .unwrap_or(1);
    let (journal, records) = Journal::open(&dir.join("journal"), min_next_seq, config.journal)?;
    let mut replayed_records = 0u64;
    let mut first_pending = None;
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
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    Ok(Shared {
        config,
        meta: Mutex::new(meta),
        range_gate: Mutex::new(()),
        journal,
        store,
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
        _data_dir_lock: lock,
    })
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

fn discard(store: &dyn ChunkStore, chunk: ChunkId, why: &str) {
    tracing::warn!(segment = chunk.segment.0, why, "discarding segment");
    if let Err(e) = store.delete(chunk) {
        tracing::warn!(segment = chunk.segment.0, error = %e, "could not delete segment");
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
