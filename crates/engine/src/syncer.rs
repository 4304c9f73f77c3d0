//! The syncer thread: makes written stripes durable behind the sealer, a group at a time (one
//! sync per chunk store for every stripe written since the last group: one directory sync,
//! not one per stripe), then marks each one durable in its family's id order: a journal
//! marker, the family's durable high-water mark, the sealed set, the journal released up to
//! it. A stripe whose sync failed goes back to the sealer, to be written again replacing its
//! chunks (a second sync could pass for pages the failed one dropped); the later stripes of
//! its family wait. No other thread makes a sealing segment durable; checkpoints and repair
//! write their stripes durably.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::checkpoint::SealedSegment;
use crate::error::IoFailure;
use crate::seal::{note_segment, IDLE_WAIT, SEAL_RETRY_INTERVAL};
use crate::state::{release_journal, Shared};
use crate::units::{FamilyId, SegmentId};
use crate::write_log::SEGMENT_DURABLE;

/// The syncer thread's loop; it stops once told to and nothing written is left.
pub(crate) fn run_syncer(shared: &Shared) {
    loop {
        if shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let batch = {
            let mut st = shared.state.lock();
            let batch = st.segments.to_sync();
            if batch.is_empty() {
                if shared.stop_syncer.load(Ordering::Acquire) {
                    return;
                }
                st.wait_for(&shared.sync_work, IDLE_WAIT);
                continue;
            }
            batch
        };
        let (keys, requests): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let results = shared.stripes.sync(&requests);
        let mut failed: HashSet<FamilyId> = HashSet::new();
        for (id, result) in keys.into_iter().zip(results) {
            if failed.contains(&id.0) {
                // Durable in id order: after the one that failed.
                continue;
            }
            let outcome = result
                .map_err(IoFailure::Stripe)
                .and_then(|()| make_durable(shared, id));
            if let Err(e) = outcome {
                tracing::error!(family = id.0 .0, segment = id.1 .0, error = %e, "stripe sync failed; writing it again (FLUSH waits meanwhile)");
                shared.state.lock().segments.sync_failed(id, &e);
                failed.insert(id.0);
            }
        }
        release_journal(shared);
        shared.sealed.notify_all();
        shared.space.notify_all();
        if !failed.is_empty() && !shared.abandon.load(Ordering::Acquire) {
            shared.seal_work.notify_one();
            std::thread::sleep(SEAL_RETRY_INTERVAL);
        }
    }
}

/// The stripe of `id` is synced: journal its durable marker, then move it from sealing to
/// sealed and raise its family's durable high-water mark (or delete it, if its family went
/// meanwhile).
fn make_durable(shared: &Shared, id: (FamilyId, SegmentId)) -> Result<(), IoFailure> {
    note_segment(shared, id, SEGMENT_DURABLE)?;
    let (s, orphan) = {
        let mut st = shared.state.lock();
        let s = st.segments.durable(id);
        let orphan = match st.families.get_mut(&s.family) {
            Some(f) => {
                f.journal_hwm = f.journal_hwm.max(s.journal_hwm);
                let sealed = SealedSegment {
                    family: s.family,
                    redundancy: s.redundancy,
                    data_bytes: s.data_bytes,
                    stored_bytes: s.bytes.len() as u64,
                };
                st.segments.sealed_now(id, sealed);
                false
            }
            None => true,
        };
        (s, orphan)
    };
    shared
        .counters
        .chunk_written_bytes
        .fetch_add(s.bytes.len() as u64, Ordering::Relaxed);
    if orphan {
        if let Err(e) = shared.stripes.delete(id.0 .0, id.1 .0, s.redundancy) {
            tracing::warn!(family = id.0 .0, segment = id.1 .0, error = %e, "could not delete the stripe of a deleted family");
        }
    } else {
        let missed = s.written.as_ref().map_or(0, |w| w.missed);
        shared.stripes.note_missed_at_write(missed);
    }
    // The sealing set let go of it: unless a reader still holds it, its buffer serves a new
    // open segment.
    if let Ok(buffer) = Arc::try_unwrap(s.bytes) {
        shared.state.lock().segments.put_spare_buffer(buffer);
    }
    Ok(())
}
