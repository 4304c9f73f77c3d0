//! How writers and FLUSH wait for stripes: a write-through write until its segment's stripe
//! is written (with FUA: durable), noting for FLUSH what it acknowledged from a stripe not
//! yet synced; a FLUSH until every such write is in a durable stripe. The sealer and the
//! syncer do the work; these only wait, and turn a stripe-write failure into the writer's
//! error.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::error::{EngineError, IoFailure};
use crate::state::Shared;
use crate::units::FamilyId;

/// Wait until a written segment of `family` reflects record `seq` (a write-through write),
/// or with `durable` a durable one. One acknowledged from a stripe not yet durable is noted
/// for FLUSH ([`wait_acked_durable`]).
pub(crate) fn wait_written_through(
    shared: &Shared,
    family: FamilyId,
    seq: u64,
    durable: bool,
) -> Result<(), EngineError> {
    shared.write_through_waiting.fetch_add(1, Ordering::AcqRel);
    shared.work.notify_one();
    let result = (|| {
        let mut st = shared.state.lock();
        loop {
            match st.families.get(&family) {
                Some(f) if f.journal_hwm >= seq => return Ok(()),
                Some(_) if !durable && st.segments.written_hwm(family) >= seq => {
                    st.segments.note_acked_unsynced(family, seq);
                    return Ok(());
                }
                Some(_) => {}
                // The family was deleted meanwhile.
                None => return Ok(()),
            }
            if shared.abandon.load(Ordering::Acquire) {
                return Err(EngineError::Gone);
            }
            // A clean stop drains and seals everything first: wait for it, unless nothing is
            // left that could still write this record.
            if shared.stop_sealer.load(Ordering::Acquire)
                && (st.segments.sealing_count() == 0 || st.segments.failure().is_some())
            {
                return Err(EngineError::Gone);
            }
            if let Some(failure) = st.segments.failure() {
                return Err(if st.segments.out_of_space() {
                    EngineError::NoSpace
                } else {
                    EngineError::Io(IoFailure::disk(
                        "stripe write",
                        std::io::Error::other(failure.to_string()),
                    ))
                });
            }
            st.wait_for(&shared.sealed, crate::seal::IDLE_WAIT);
        }
    })();
    shared.write_through_waiting.fetch_sub(1, Ordering::AcqRel);
    result
}

/// How long a FLUSH waits for stripes to become durable while stripe writes or syncs fail
/// (the sealer and syncer retry meanwhile) before it answers with the error.
const FLUSH_FAILURE_WAIT_MAX: Duration = Duration::from_secs(30);

/// Wait until every write-through write acknowledged so far from a written stripe is in a
/// durable one: the syncer makes written stripes durable on its own; a FLUSH only waits.
pub(crate) fn wait_acked_durable(shared: &Shared) -> Result<(), EngineError> {
    let started = std::time::Instant::now();
    let mut st = shared.state.lock();
    let targets: Vec<(FamilyId, u64)> = st.segments.acked_unsynced().collect();
    loop {
        let pending = targets
            .iter()
            .any(|&(fid, seq)| st.families.get(&fid).is_some_and(|f| f.journal_hwm < seq));
        if !pending {
            return Ok(());
        }
        if shared.abandon.load(Ordering::Acquire) {
            return Err(EngineError::Gone);
        }
        if let Some(failure) = st.segments.failure() {
            // Stopping with stripe writes failing: nobody will retry them.
            let stopped = shared.stop_sealer.load(Ordering::Acquire);
            if stopped || started.elapsed() >= FLUSH_FAILURE_WAIT_MAX {
                return Err(if st.segments.out_of_space() {
                    EngineError::NoSpace
                } else {
                    EngineError::Io(IoFailure::disk(
                        "stripe sync",
                        std::io::Error::other(failure.to_string()),
                    ))
                });
            }
        }
        shared.sync_work.notify_one();
        st.wait_for(&shared.sealed, crate::seal::IDLE_WAIT);
    }
}
