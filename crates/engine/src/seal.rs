//! Sealing: open segments become sealed stripes. The destager hands segments over
//! ([`start_sealing`]), the sealer thread writes them in id order ([`run_sealer`]) without a
//! sync, the syncer thread makes them durable behind it ([`crate::syncer`]), and whoever needs
//! them durable waits ([`finish_sealing`], [`seal_all`]). A sealing segment stays readable
//! from memory until its stripe is durable.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::error::IoFailure;
use crate::segment::{SegmentBuilder, StripeLayout};
use crate::segments::{SealingSegment, ToWrite};
use crate::state::{Shared, State};
use crate::stripe::{StripeStore, StripeWrite, WrittenStripe};
use crate::units::{FamilyId, SegmentId};
use crate::write_log::{RecordHeader, RecordKind, SEGMENT_DURABLE, SEGMENT_WRITTEN};

/// How long the engine's threads sleep when there is nothing to do.
pub(crate) const IDLE_WAIT: Duration = Duration::from_millis(20);
/// After a failed stripe write (full disk), wait this long before trying again.
pub(crate) const SEAL_RETRY_INTERVAL: Duration = Duration::from_millis(500);

/// Move a taken open segment to the sealing set (still readable from memory).
/// `since_seq` is the seq of the first journal record the segment reflects: the journal must
/// keep it until the stripe is durable. `hwm`: every record of the family up to it is
/// reflected in this segment or earlier ones.
pub(crate) fn start_sealing(
    stripes: &StripeStore,
    st: &mut State,
    builder: SegmentBuilder,
    since_seq: Option<u64>,
    hwm: u64,
) {
    let id = builder.id;
    let family = builder.family;
    let data_bytes = builder.data_bytes() as u64;
    let redundancy = stripes.placement().redundancy(family.0);
    let layout = StripeLayout {
        codec_id: redundancy.codec_id().to_u8(),
        data_chunks: redundancy.data_chunks(),
        parity_chunks: redundancy.parity_chunks(),
    };
    // What this segment's records follow: its family's segment sealed before it.
    let previous = st
        .segments
        .sealed_hwm(family)
        .unwrap_or_else(|| st.families.get(&family).map_or(0, |f| f.journal_hwm));
    st.segments.set_sealed_hwm(family, hwm.max(previous));
    let sealed = builder.seal(hwm, previous, layout);
    st.segments.start_sealing(
        (family, id),
        SealingSegment {
            bytes: Arc::new(sealed.bytes),
            known_page_crcs: Arc::new(sealed.known_page_crcs),
            redundancy,
            family,
            since_seq,
            journal_hwm: hwm,
            data_bytes,
            written: None,
            rewrite: false,
        },
    );
}

/// How many sealed segments may wait for their stripe write before destage waits: bounds the
/// memory they hold (8 MiB each by default) while letting destage overlap the disk writes.
pub(crate) const SEALING_SEGMENTS_MAX: usize = 4;

/// Hand sealing segments to the sealer thread and wait until at most `in_flight_max` remain;
/// fails when a stripe write failed (the sealer keeps retrying it).
pub(crate) fn finish_sealing(shared: &Shared, in_flight_max: usize) -> Result<(), IoFailure> {
    shared.seal_work.notify_one();
    let mut st = shared.state.lock();
    loop {
        if st.segments.sealing_count() <= in_flight_max {
            return Ok(());
        }
        if let Some(detail) = st.segments.failure() {
            let detail = detail.to_string();
            let no_space = st.segments.out_of_space();
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
        st.wait_for(&shared.sealed, IDLE_WAIT);
    }
}

/// The sealer thread: writes sealing segments as stripes, in id order, one at a time (so a
/// family's segments are written in order), without a sync (the syncer's work), retrying
/// failures. A segment is *written* once its chunks are: its write-through records may be
/// acknowledged from then on.
pub(crate) fn run_sealer(shared: &Shared) {
    loop {
        if shared.abandon.load(Ordering::Acquire) {
            return;
        }
        let next = {
            let mut st = shared.state.lock();
            let next = st.segments.next_to_write();
            if next.is_none() {
                if shared.stop_sealer.load(Ordering::Acquire) {
                    return;
                }
                st.wait_for(&shared.seal_work, IDLE_WAIT);
                continue;
            }
            next
        };
        let Some((id, to_write)) = next else {
            continue;
        };
        match write_stripe(shared, id, &to_write) {
            Ok(written) => {
                shared.state.lock().segments.mark_written(id, written);
                shared.sealed.notify_all();
                shared.sync_work.notify_one();
            }
            Err(e) => {
                tracing::error!(family = id.0 .0, segment = id.1 .0, error = %e, "stripe write failed; retrying (writes that must wait for a stripe get ENOSPC/EIO meanwhile)");
                {
                    shared.state.lock().segments.write_failed(&e);
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

/// Write one segment's stripe (unsynced, or replacing after a failed sync) and journal that
/// it is written.
fn write_stripe(
    shared: &Shared,
    id: (FamilyId, SegmentId),
    to_write: &ToWrite,
) -> Result<WrittenStripe, IoFailure> {
    let how = if to_write.rewrite {
        StripeWrite::Replacing
    } else {
        StripeWrite::Unsynced
    };
    let written = shared.stripes.write(
        id.0 .0,
        id.1 .0,
        to_write.redundancy,
        &to_write.bytes,
        &to_write.known_page_crcs,
        how,
    )?;
    note_segment(shared, id, SEGMENT_WRITTEN)?;
    Ok(written)
}

/// Journal a marker for the stripe of `id` (`SEGMENT_WRITTEN` or `SEGMENT_DURABLE`), before
/// anything relies on what it says: a write-through acknowledged from a written stripe; the
/// journal releasing records, GC deleting what it relocated once durable. At recovery the
/// markers tell a stripe that is unreadable for now (its d.nodes are down) from one that
/// never became what they say (see `recovery/proof.rs`). A FLUSH syncs a marker with
/// everything before it.
pub(crate) fn note_segment(
    shared: &Shared,
    id: (FamilyId, SegmentId),
    mark: u64,
) -> Result<(), IoFailure> {
    let header = RecordHeader {
        kind: RecordKind::SegmentDurable,
        layer: crate::units::LayerId(id.0 .0),
        lba: id.1 .0,
        count: mark,
    };
    debug_assert!(mark == SEGMENT_WRITTEN || mark == SEGMENT_DURABLE);
    shared
        .journal
        .locked(|appender| appender.append(header, &[]))
        .map(|_| ())
}

/// Seal every open segment (idle, sync, checkpoint, GC).
pub(crate) fn seal_all(shared: &Shared) -> Result<(), IoFailure> {
    seal_open(shared)?;
    finish_sealing(shared, 0)
}

/// Hand every open segment to the sealer; wait only while too many are in flight.
pub(crate) fn seal_open(shared: &Shared) -> Result<(), IoFailure> {
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
                start_sealing(&shared.stripes, &mut st, b, since, hwm);
            }
        }
    }
    finish_sealing(shared, SEALING_SEGMENTS_MAX)
}
