//! The repairer: rebuilds chunks that are missing where the placement says they belong (a
//! d.node marked out and replaced, a d.node that missed writes while it was down, a chunk its
//! d.node found corrupt and dropped) or that a read found corrupt. It scans every stripe of
//! every family (log segments and checkpoints) against each d.node's chunk listing, so a scan
//! after a restart picks up where the last one stopped; rebuilding is throttled to a rate
//! the operator can change, and progress (with an ETA) is reported.
//!
//! A d.node that cannot be listed (down, or its link still backing off) is skipped: its
//! chunks are not rebuilt until it is out (then its positions point elsewhere) or back (then
//! it is listed). Such a scan is incomplete: the status names the d.node, the repairer has not
//! caught up (so the cluster is not healthy), and it scans again within [`RESCAN_INCOMPLETE`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use weft_ec::Redundancy;

use crate::checkpoint::CheckpointRef;
pub use crate::repair_status::RepairStatus;
use crate::state::Shared;

/// How often the repairer polls for its next scan or for shutdown.
const POLL: Duration = Duration::from_millis(100);
/// How soon a scan that could not list every d.node is repeated, and the soonest a scan
/// follows a stripe written with chunks missing. Doubled after each scan that still could not
/// list them all (a d.node down for long is not listed every second), up to the interval.
const RESCAN_INCOMPLETE: Duration = Duration::from_secs(1);

/// A stripe to check: (family, segment, redundancy, stripe length).
type StripeRef = (u64, u64, Redundancy, u64);

/// The repairer thread: a scan every `repair_interval_ms`, or when kicked.
pub(crate) fn run_repairer(shared: &Shared) {
    let mut last = Instant::now();
    let mut scanned_generation = None;
    let mut complete = true;
    let mut soon = RESCAN_INCOMPLETE;
    loop {
        if shared.shutdown.load(Ordering::Acquire) || shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let interval = Duration::from_millis(shared.config.repair_interval_ms);
        let missed = shared
            .stripes
            .counters
            .chunks_missed_at_write
            .load(Ordering::Acquire);
        let written_degraded = missed != shared.repair.missed_at_write_seen.load(Ordering::Acquire);
        let due = last.elapsed() >= interval
            || ((written_degraded || !complete) && last.elapsed() >= soon.min(interval));
        let kicked = shared.repair.kick.swap(false, Ordering::AcqRel);
        let generation = shared.stripes.placement().generation();
        let moved = scanned_generation != Some(generation);
        if !(due || kicked || moved) {
            std::thread::sleep(POLL);
            continue;
        }
        last = Instant::now();
        match scan(shared) {
            Ok(listed_all) => {
                soon = if listed_all || complete {
                    RESCAN_INCOMPLETE
                } else {
                    (soon * 2).min(interval)
                };
                complete = listed_all;
                scanned_generation = Some(generation);
                shared.repair.status.lock().scanned_generation = generation;
            }
            Err(e) => tracing::warn!(error = %e, "repair scan failed; retrying later"),
        }
    }
}

fn stripes_of(shared: &Shared) -> Vec<StripeRef> {
    let mut out: Vec<StripeRef> = shared
        .state
        .lock()
        .segments
        .sealed_iter()
        .map(|((f, s), v)| (f.0, s.0, v.redundancy, v.stored_bytes))
        .collect();
    let checkpoints: Vec<(u64, CheckpointRef)> = shared
        .meta
        .lock()
        .state
        .checkpoints
        .iter()
        .map(|(&f, &r)| (f, r))
        .collect();
    for (family, r) in checkpoints {
        for (segment, len) in r.parts() {
            out.push((family, segment.0, r.redundancy.0, len));
        }
    }
    out
}

/// One pass over every stripe: find chunks missing from their d.node (or suspected corrupt)
/// and rebuild them, throttled. `Ok(false)`: some d.node could not be listed.
fn scan(shared: &Shared) -> Result<bool, String> {
    // Before the listings: a stripe written degraded from now on makes the next scan due.
    let missed = shared
        .stripes
        .counters
        .chunks_missed_at_write
        .load(Ordering::Acquire);
    shared
        .repair
        .missed_at_write_seen
        .store(missed, Ordering::Release);
    let stripes = stripes_of(shared);
    let placement = shared.stripes.placement().clone();
    let suspects = shared.stripes.take_suspects();
    // Each reachable store's chunks, per family: store name -> {(segment, index)}.
    let families: HashSet<u64> = stripes.iter().map(|s| s.0).collect();
    let mut listed: HashMap<(String, u64), HashSet<(u64, u8)>> = HashMap::new();
    let mut unlisted: Vec<String> = Vec::new();
    for store in placement.all_stores() {
        for &family in &families {
            match store.list(family) {
                Ok(chunks) => {
                    listed.insert(
                        (store.name(), family),
                        chunks
                            .iter()
                            .map(|c| (c.meta.key.segment, c.meta.key.index))
                            .collect(),
                    );
                }
                Err(e) => {
                    tracing::debug!(store = store.name(), error = %e, "cannot list a d.node; its chunks are checked when it is back or out");
                    unlisted.push(store.name());
                    break;
                }
            }
        }
    }
    let mut todo: Vec<(StripeRef, u8)> = Vec::new();
    for &stripe in &stripes {
        let (family, segment, redundancy, _) = stripe;
        if redundancy.total_chunks() < 2 {
            continue;
        }
        for (i, store) in placement
            .stores(family, segment, redundancy)
            .into_iter()
            .enumerate()
        {
            let Some(store) = store else { continue };
            let index = u8::try_from(i).expect("few chunks");
            let Some(have) = listed.get(&(store.name(), family)) else {
                continue;
            };
            if !have.contains(&(segment, index)) || suspects.contains(&(family, segment, index)) {
                todo.push((stripe, index));
            }
        }
    }
    let started = Instant::now();
    {
        let mut st = shared.repair.status.lock();
        st.scans += 1;
        st.stripes_checked = stripes.len() as u64;
        st.chunks_to_rebuild = todo.len() as u64;
        st.chunks_rebuilt = 0;
        st.chunks_failed = 0;
        st.unlisted = unlisted.clone();
        st.running = !todo.is_empty();
        st.rate_bytes_per_s = 0;
        st.eta_s = None;
    }
    if !todo.is_empty() {
        tracing::info!(
            chunks = todo.len(),
            stripes = stripes.len(),
            "repair: rebuilding chunks"
        );
    }
    let mut bytes_done = 0u64;
    for (n, ((family, segment, redundancy, len), index)) in todo.iter().copied().enumerate() {
        if shared.shutdown.load(Ordering::Acquire) || shared.abandon.load(Ordering::Acquire) {
            break;
        }
        // A stripe GC deleted meanwhile needs no repair.
        let still_there = segment >= crate::checkpoint::CHECKPOINT_SEGMENT_BASE
            || shared.state.lock().segments.is_sealed((
                crate::units::FamilyId(family),
                crate::units::SegmentId(segment),
            ));
        if !still_there {
            continue;
        }
        match shared
            .stripes
            .rebuild_chunk(family, segment, redundancy, len, index)
        {
            Ok(bytes) => {
                bytes_done += bytes;
                let mut st = shared.repair.status.lock();
                st.chunks_rebuilt += 1;
                st.chunks_rebuilt_total += 1;
                st.bytes_rebuilt_total += bytes;
            }
            Err(e) => {
                tracing::warn!(family, segment, index, error = %e, "repair: chunk not rebuilt");
                shared.repair.status.lock().chunks_failed += 1;
            }
        }
        // Throttle: never ahead of the rate limit.
        let limit = shared.repair.status.lock().rate_limit_bytes_per_s.max(1);
        let due = Duration::from_secs_f64(bytes_done as f64 / limit as f64);
        let elapsed = started.elapsed();
        if due > elapsed {
            std::thread::sleep(due - elapsed);
        }
        let elapsed_s = started.elapsed().as_secs_f64().max(1e-3);
        let rate = bytes_done as f64 / elapsed_s;
        let left = (todo.len() - n - 1) as f64;
        let per_chunk = bytes_done as f64 / (n + 1) as f64;
        let mut st = shared.repair.status.lock();
        st.rate_bytes_per_s = rate as u64;
        st.eta_s = (rate > 0.0).then(|| (left * per_chunk / rate).ceil() as u64);
    }
    let mut st = shared.repair.status.lock();
    st.running = false;
    st.eta_s = Some(0);
    Ok(unlisted.is_empty())
}
