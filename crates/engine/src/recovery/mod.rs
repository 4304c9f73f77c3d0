//! Start-up and recovery: cluster state, then the latest checkpoint, then the segments sealed
//! after it (in id order), then the layer graph (from the cluster state, with merges not yet
//! applied spliced back in), then the journal records no sealed segment reflects, then the
//! cluster state's pending layer operations (a no-op for those already applied). What comes
//! out is the state the engine had when it stopped, minus nothing that was acknowledged.
//!
//! Nothing is discarded on the strength of not seeing it ([`proof`]): a stripe recovery can
//! neither read nor prove torn makes it wait, listing again every
//! [`RECOVERY_RETRY_INTERVAL`], saying what it waits for in the log and in
//! [`crate::recovery_status::RecoveryStatus`], until the d.nodes that hold it are back.

mod proof;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::checkpoint::{self, SealedSegment, CHECKPOINT_SEGMENT_BASE};
use crate::config::Backends;
use crate::config::EngineConfig;
use crate::error::{EngineError, IoFailure};
use crate::family::Family;
use crate::journal::JournalSource;
use crate::journal::RecordKind;
use crate::layers::LayerOp;
use crate::metastore::{ClusterState, ClusterStore, IgnoredStripe};
use crate::recovery_status::{BlockedStripe, RecoveryWait};
use crate::segment::{self, SummaryEntry, SEGMENT_HEADER_BYTES};
use crate::state::{Counters, Shared, State};
use crate::stripe::{FamilyListing, StripeListing, StripeStore, StripeToSync};
use crate::units::{FamilyId, LayerId, SegmentId, BLOCK_SIZE_BYTES};
use proof::{JournalEvidence, Verdict};

pub(crate) fn recover(config: EngineConfig, backends: Backends) -> Result<Shared, EngineError> {
    let Backends {
        placement,
        metastore: kv,
        write_log,
        epoch,
        shard,
    } = backends;
    let started = Instant::now();
    let dir = &config.data_dir;
    let lock = lock_data_dir(dir)?;
    let mut meta = ClusterStore::open_shard(kv, shard)?;
    let stripes = Arc::new(StripeStore::new(placement));
    stripes.set_default_epoch(epoch);

    // Before anything is served: the catalog's names and LUNs claimed, this shard's stale
    // claims gone.
    crate::name_claims::settle(meta.kv(), shard, &meta.state)?;
    crate::lun_claims::settle(meta.kv(), shard, &meta.state)?;
    let counters = Counters::restore(meta.state.counters);
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
    // The journal first, read only: its records are evidence about stripes recovery cannot
    // read. It is opened for writing after the families, whose high-water marks say where
    // new records must start.
    let write_log = write_log.unwrap_or_else(|| {
        Arc::new(JournalSource {
            dir: dir.join("journal"),
            options: config.journal,
        })
    });
    let evidence = JournalEvidence::new(&write_log.scan()?);
    let (mut st, replayed, ignored) =
        recover_families(&config, &stripes, &meta.state, &alive, &evidence)?;
    // A replayed stripe may be written but not synced (its c.node stopped before the sync,
    // its d.node did not): durable before anything relies on it (the journal releasing
    // what it reflects). A no-op for stripes already durable.
    stripes
        .sync_reachable(&replayed)
        .map_err(IoFailure::Stripe)?;
    if !ignored.is_empty() {
        // Before anything is served, so before the journal can release their records: a
        // later recovery must skip these stripes even when it cannot prove it again.
        let mut next = meta.state.clone();
        next.ignored_stripes.extend(ignored);
        next.ignored_stripes.sort_unstable();
        next.ignored_stripes.dedup();
        meta.commit(next)?;
    }
    // Chunks of families no volume or snapshot knows any more (deleted while a c.node was
    // down, or their deletion was cut short). Proof: the family's id is from this shard's
    // range, so only this shard's cluster state can name it, and that state, written with
    // compare-and-swap, no longer does. A family of another shard is never this shard's to
    // judge, whatever its catalog says.
    for family in stripes.families()? {
        if shard.holds(family) && !alive.contains(&FamilyId(family)) {
            tracing::warn!(family, "deleting the stripes of a deleted family");
            for (segment, s) in stripes.list(family)?.stripes {
                if let Err(e) = stripes.delete(family, segment, s.redundancy) {
                    tracing::warn!(family, segment, error = %e, "could not delete a stripe");
                }
            }
        }
    }
    for image in crate::images::images_of(&meta.state) {
        st.images.insert(image);
    }

    build_graphs(&meta.state, &mut st);

    // Replay the journal after each family's high-water mark.
    let min_next_seq = st
        .families
        .values()
        .map(|f| f.journal_hwm + 1)
        .max()
        .unwrap_or(1);
    let (journal, records) = write_log.open(min_next_seq)?;
    let mut replayed_records = 0u64;
    let mut first_pending = None;
    let mut skipped_write_through = 0u64;
    for r in records {
        let h = r.header;
        if h.kind == RecordKind::SegmentDurable {
            // Evidence for recovery (above), not a change to replay.
            continue;
        }
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
                st.queue_layer_op(r.seq, fid, LayerOp::Drop { layer: h.layer })
            }
            RecordKind::WriteThrough | RecordKind::SegmentDurable => {
                unreachable!("skipped above")
            }
            RecordKind::MergeLayer => st.queue_layer_op(
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
        st.queue_layer_op(journal.written_seq(), op.family, op.op);
    }
    tracing::info!(
        images = st.images.len(),
        segments_replayed = replayed.len(),
        journal_records_replayed = replayed_records,
        unacknowledged_write_through = skipped_write_through,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered"
    );
    let config_threads = config.reduction_threads;
    Ok(Shared {
        config,
        meta: Mutex::new(meta),
        hosts_generation: std::sync::atomic::AtomicU64::new(1),
        range_gate: Mutex::new(()),
        write_through_waiting: AtomicUsize::new(0),
        space_wanted: AtomicBool::new(false),
        journal,
        stripes,
        state: crate::lock_timing::TimedMutex::new(st),
        work: Condvar::new(),
        space: Condvar::new(),
        seal_work: Condvar::new(),
        sync_work: Condvar::new(),
        sealed: Condvar::new(),
        stop_sealer: AtomicBool::new(false),
        stop_syncer: AtomicBool::new(false),
        checkpoint_writer: Mutex::new(None),
        commands: Mutex::new(Vec::new()),
        shutdown: AtomicBool::new(false),
        abandon: AtomicBool::new(false),
        counters,
        repair: crate::repair_status::RepairControl::default(),
        reduce_pool: crate::reduce_pool::ReducePool::new(config_threads)
            .map_err(|e| IoFailure::disk("reduction threads", e))?,
        _data_dir_lock: lock,
    })
}

/// How often recovery lists again while it waits for d.nodes.
pub(crate) const RECOVERY_RETRY_INTERVAL: Duration = Duration::from_secs(2);

/// Recover every family; while any has a stripe it may neither replay nor discard, wait
/// for the d.nodes and start over (nothing was changed but proven discards). Returns the
/// state and the segments replayed.
fn recover_families(
    config: &EngineConfig,
    stripes: &StripeStore,
    state: &ClusterState,
    alive: &HashSet<FamilyId>,
    evidence: &JournalEvidence,
) -> Result<(State, Vec<StripeToSync>, Vec<IgnoredStripe>), EngineError> {
    let started = Instant::now();
    let since_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut attempts = 0u64;
    loop {
        attempts += 1;
        let mut st = State::default();
        let mut replayed = Vec::new();
        let mut ignored: Vec<IgnoredStripe> = Vec::new();
        let mut blocked: Vec<BlockedStripe> = Vec::new();
        let mut waiting_for: Vec<String> = Vec::new();
        let mut families: Vec<FamilyId> = alive.iter().copied().collect();
        families.sort_unstable();
        for fid in families {
            match recover_family(stripes, state, fid, &mut st, evidence, &mut ignored)? {
                FamilyOutcome::Recovered(n) => replayed.extend(n),
                FamilyOutcome::Waiting(stripe, unanswered) => {
                    blocked.push(stripe);
                    waiting_for.extend(unanswered);
                }
            }
        }
        if blocked.is_empty() {
            if attempts > 1 {
                tracing::info!(
                    waited_s = started.elapsed().as_secs(),
                    "every stripe recovery waited for is readable or proven torn now"
                );
            }
            config.recovery_status.set(None);
            return Ok((st, replayed, ignored));
        }
        waiting_for.sort_unstable();
        waiting_for.dedup();
        let wait = RecoveryWait {
            stripes: blocked,
            waiting_for,
            since_unix_s,
            attempts,
        };
        if attempts == 1 || attempts.is_multiple_of(15) {
            tracing::error!(
                waited_s = started.elapsed().as_secs(),
                "recovery waits: {wait}; nothing is discarded or served until they answer"
            );
        }
        config.recovery_status.set(Some(wait.clone()));
        if config
            .recovery_wait
            .is_some_and(|limit| started.elapsed() >= limit)
        {
            return Err(EngineError::RecoveryBlocked(wait));
        }
        std::thread::sleep(RECOVERY_RETRY_INTERVAL);
    }
}

/// How one family's recovery ended.
enum FamilyOutcome {
    /// Recovered, with these segments replayed.
    Recovered(Vec<StripeToSync>),
    /// A stripe it may neither replay nor discard, and the stores that did not answer.
    Waiting(BlockedStripe, Vec<String>),
}

/// A stripe after the checkpoint, as recovery found it.
enum Probe {
    Replayable(segment::SegmentHeader, Vec<SummaryEntry>),
    /// Read, but its header or summary fails its checks: never completed.
    Garbage,
    /// Not read: too few chunks listed, or a read failed.
    Unreadable {
        read_failed: bool,
    },
}

/// Recover one family: its checkpoint (from the stripes the cluster state points at), then
/// its segments sealed after it, in id order, each on the proof [`proof`] asks for. Adds
/// nothing to `st` when it has to wait.
fn recover_family(
    stripes: &StripeStore,
    state: &ClusterState,
    fid: FamilyId,
    st: &mut State,
    evidence: &JournalEvidence,
    ignored: &mut Vec<IgnoredStripe>,
) -> Result<FamilyOutcome, EngineError> {
    let corrupt = |detail: String| IoFailure::CorruptMetadata {
        what: format!("checkpoint of family {}", fid.0),
        detail,
    };
    let listing = stripes.list(fid.0).map_err(IoFailure::Stripe)?;
    let (mut family, mut sealed, below) = match state.checkpoints.get(&fid.0) {
        Some(r) => {
            let mut image = Vec::with_capacity(usize::try_from(r.len_bytes).unwrap_or(0));
            for (segment, len) in r.parts() {
                let mut part = vec![0u8; usize::try_from(len).expect("bounded part")];
                if let Err(e) = stripes.read(fid.0, segment.0, r.redundancy.0, len, 0, &mut part) {
                    // Its d.nodes may only be down: wait for them.
                    tracing::warn!(family = fid.0, segment = segment.0, error = %e, "could not read the checkpoint");
                    let blocked = BlockedStripe {
                        family: fid.0,
                        segment: segment.0,
                        chunks_found: listing.stripes.get(&segment.0).map_or(0, |s| s.chunks),
                        chunks_needed: r.redundancy.0.data_chunks(),
                        why: format!("the family's checkpoint is unreadable: {e}"),
                    };
                    return Ok(FamilyOutcome::Waiting(blocked, listing.unanswered.clone()));
                }
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
    let current_generation = state.checkpoints.get(&fid.0).map(|r| r.generation);
    // Segments the checkpoint's block table points at: never deleted as "finished GC".
    let referenced: HashSet<SegmentId> = family
        .table
        .live_entries()
        .map(|(_, e)| e.location.segment)
        .collect();
    let mut replayed = Vec::new();
    let mut next_segment = below;
    let mut discards: Vec<(u64, &StripeListing, &str)> = Vec::new();
    let mut ignoring = false;
    for (&segment, s) in &listing.stripes {
        if segment >= CHECKPOINT_SEGMENT_BASE {
            // Proof: the cluster state names the current generation; another one is an
            // older checkpoint or one whose commit never happened.
            let generation = (segment - CHECKPOINT_SEGMENT_BASE) >> 20;
            if Some(generation) != current_generation {
                discards.push((segment, s, "checkpoint stripe of another generation"));
            }
            continue;
        }
        if segment < below {
            // Proof: the checkpoint covers every segment below it that is still live, and
            // its block table does not point here (GC finished, or a segment ignored at an
            // earlier recovery whose records later segments reflect).
            if !sealed.contains_key(&SegmentId(segment))
                && !referenced.contains(&SegmentId(segment))
            {
                discards.push((segment, s, "not in the checkpoint (finished GC)"));
            }
            continue;
        }
        // Never reuse the id of a stripe that exists, whatever happens to it below.
        next_segment = next_segment.max(segment + 1);
        let key = IgnoredStripe {
            family: fid.0,
            segment,
        };
        if state.ignored_stripes.binary_search(&key).is_ok() {
            // Proof: an earlier recovery proved it never durable and replayed its records
            // from the journal into later segments; replaying it now would apply them twice.
            continue;
        }
        // Whether a discard below proves the stripe torn by a crash (not only unfit).
        let mut torn = false;
        let verdict = if ignoring {
            proof::after_ignored(fid, segment, s, evidence)
        } else {
            match probe(stripes, fid, segment, s) {
                Probe::Replayable(header, _) if header.family != fid => {
                    Verdict::Discard("its header names another family")
                }
                Probe::Replayable(header, _)
                    if header
                        .previous_hwm
                        .is_some_and(|previous| previous > family.journal_hwm) =>
                {
                    // Whole, but the records of a segment before it are in none replayed:
                    // that one was lost (a power cut before its sync, which came after
                    // this one's pages reached the disk). It was never synced, nor this one.
                    Verdict::Ignore("a segment before it is missing (lost before its sync)")
                }
                Probe::Replayable(header, entries) => {
                    family.replay(SegmentId(segment), &entries);
                    family.journal_hwm = family.journal_hwm.max(header.journal_hwm);
                    let data_bytes = u64::from(header.data_end_bytes)
                        - crate::segment::SEGMENT_HEADER_BYTES as u64;
                    sealed.insert(
                        SegmentId(segment),
                        SealedSegment {
                            family: fid,
                            redundancy: s.redundancy,
                            data_bytes,
                            stored_bytes: s.stripe_len_bytes,
                        },
                    );
                    replayed.push(StripeToSync {
                        family: fid.0,
                        segment,
                        redundancy: s.redundancy,
                        chunks: (0..s.redundancy.total_chunks()).collect(),
                    });
                    continue;
                }
                Probe::Garbage => {
                    torn = true;
                    Verdict::Discard("torn: its header or summary fails its checks")
                }
                Probe::Unreadable { read_failed } => {
                    torn = true;
                    proof::unreadable(
                        fid,
                        segment,
                        s,
                        &listing,
                        evidence,
                        family.journal_hwm,
                        read_failed,
                    )
                }
            }
        };
        match verdict {
            Verdict::Discard(why) => {
                discards.push((segment, s, why));
                // A stripe never synced that a crash tore: no later one was synced either,
                // and a later one whole (its pages written back by the OS before a power
                // cut) reflects records the torn one needed. See `proof`.
                if torn && !evidence.marked_durable(fid, segment) {
                    ignoring = true;
                }
            }
            Verdict::Ignore(why) => {
                tracing::warn!(family = fid.0, segment, why, "not replaying stripe");
                ignored.push(key);
                ignoring = true;
            }
            Verdict::Wait(blocked) => {
                return Ok(FamilyOutcome::Waiting(blocked, listing.unanswered.clone()));
            }
        }
    }
    if let Some(blocked) = hidden_segments(
        fid,
        &listing,
        stripes,
        evidence,
        family.journal_hwm,
        next_segment,
    ) {
        return Ok(FamilyOutcome::Waiting(blocked, listing.unanswered.clone()));
    }
    for (segment, s, why) in discards {
        tracing::warn!(family = fid.0, segment, why, "discarding stripe");
        if let Err(e) = stripes.delete(fid.0, segment, s.redundancy) {
            tracing::warn!(family = fid.0, segment, error = %e, "could not delete stripe");
        }
    }
    // A checkpointed segment that no store listed and no block points into after the replay
    // above was reclaimed by GC after the checkpoint (its relocations were replayed): it is
    // forgotten, as GC forgets it. Proof: no live block is in it, so nothing can be lost;
    // if a store that did not answer still holds a stripe of it, that stripe is below the
    // next checkpoint and goes as finished GC.
    sealed.retain(|id, _| {
        listing.stripes.contains_key(&id.0) || family.table.segment_usage(*id).live_bytes > 0
    });
    // Segments the checkpoint holds stay, readable or not: a d.node that is down now may
    // hold them, and the repairer rebuilds them once it is back. Reads of their blocks fail
    // with EIO meanwhile.
    let unreadable_sealed: Vec<u64> = sealed
        .keys()
        .filter(|id| {
            !listing
                .stripes
                .get(&id.0)
                .is_some_and(StripeListing::readable)
        })
        .map(|id| id.0)
        .collect();
    if !unreadable_sealed.is_empty() {
        tracing::error!(
            family = fid.0,
            segments = ?unreadable_sealed,
            waiting_for = ?listing.unanswered,
            "checkpointed segments unreadable now: reads of their blocks fail with EIO until their d.nodes are back"
        );
    }
    family.table.rebuild_free_ids();
    for (id, s) in sealed {
        st.segments.recovered((fid, id), s);
    }
    st.segment_ids.set(fid, next_segment);
    st.segments.checkpoint_covers(fid, below);
    st.segments.set_sealed_hwm(fid, family.journal_hwm);
    st.families.insert(fid, family);
    Ok(FamilyOutcome::Recovered(replayed))
}

/// With so many stores unanswered that a written stripe could have no chunk on the others,
/// a segment may exist that no listing shows. Proof there is none: the journal holds every
/// record after the family's high-water mark and no marker for a segment at or above
/// `next_segment`.
fn hidden_segments(
    fid: FamilyId,
    listing: &FamilyListing,
    stripes: &StripeStore,
    evidence: &JournalEvidence,
    hwm: u64,
    next_segment: u64,
) -> Option<BlockedStripe> {
    let redundancy = stripes.placement().redundancy(fid.0);
    let min_durable = stripes.placement().min_durable_chunks(fid.0, redundancy);
    if listing.unanswered.len() < usize::from(min_durable) {
        return None;
    }
    if evidence.no_written_segment_from(fid, next_segment, hwm) {
        return None;
    }
    Some(BlockedStripe {
        family: fid.0,
        segment: next_segment,
        chunks_found: 0,
        chunks_needed: redundancy.data_chunks(),
        why: "as many d.nodes are down as a durable stripe needs chunks: a later segment may be on them alone".into(),
    })
}

/// Read a segment's header and summary, telling a read that failed from bytes that fail
/// their checks.
fn probe(stripes: &StripeStore, fid: FamilyId, segment: u64, s: &StripeListing) -> Probe {
    if !s.readable() {
        return Probe::Unreadable { read_failed: false };
    }
    match read_summary(stripes, fid, segment, s) {
        Ok(Some((header, entries))) => Probe::Replayable(header, entries),
        Ok(None) => Probe::Garbage,
        Err(e) => {
            tracing::warn!(family = fid.0, segment, error = %e, "could not read a segment's summary");
            Probe::Unreadable { read_failed: true }
        }
    }
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

/// Read a sealed segment's header and summary; `None` when they fail their checks (torn),
/// an error when a read failed (which proves nothing).
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
    read(0, &mut head).map_err(IoFailure::Stripe)?;
    let Ok(header) = segment::parse_header(&head) else {
        return Ok(None);
    };
    let mut summary = vec![0u8; header.summary_len_bytes as usize];
    read(u64::from(header.data_end_bytes), &mut summary).map_err(IoFailure::Stripe)?;
    match segment::parse_summary(&header, &summary) {
        Ok(entries) => Ok(Some((header, entries))),
        Err(_) => Ok(None),
    }
}
