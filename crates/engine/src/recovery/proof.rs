//! What recovery may do with a stripe it finds after a family's checkpoint, and on which
//! proof. Absence is not proof: a chunk missing from a listing may sit on a d.node that is
//! only down, and a read that failed may succeed when it is back.
//!
//! | what recovery sees | proof | verdict |
//! | --- | --- | --- |
//! | the summary reads and checks out | | replay |
//! | fewer than k chunks even counting one on every store that did not answer (a d.node holds at most one chunk of a stripe) | fewer than k exist: it was never durable, so the journal kept its records | discard (delete) |
//! | it reads but its header or summary fails its checks | the bytes are what was written: a stripe never completed | discard |
//! | unreadable; the journal holds every record after the family's high-water mark and no marker for it | had it been written, its written marker (appended once its chunks were, before a write-through was acknowledged from it) would be there, and its durable marker had it been synced | ignore: keep its chunks, replay the journal instead |
//! | unreadable otherwise | none | wait for the d.nodes, then look again |
//!
//! Segments after one ignored, or after one discarded as torn that was never marked durable,
//! are ignored too, unless marked durable (then recovery waits: the journal and the stripes
//! disagree). The sealer writes a family's stripes in id order and the syncer makes them
//! durable in id order, so none after a stripe that was never written was written, and none
//! after one never synced was synced. A power cut can still leave a later one whole (the OS
//! wrote its pages back on its own) after an earlier one torn: it reflects records the torn
//! one also needed, so it is not replayed; its journaled records are still in the journal
//! (released only up to durable stripes), and its write-through writes were never covered by
//! a FLUSH or FUA, which wait for the sync.

use std::collections::HashSet;

use crate::recovery_status::BlockedStripe;
use crate::stripe::{FamilyListing, StripeListing};
use crate::units::FamilyId;
use crate::write_log::{JournalRecord, RecordKind, SEGMENT_WRITTEN};

/// What the journal shows about segments' durability.
#[derive(Debug, Default)]
pub(super) struct JournalEvidence {
    /// The seq of the oldest record the journal still holds; every later one is there too
    /// (files are released oldest first, and replay is contiguous). `None`: it holds none,
    /// so it proves nothing (a fresh data dir, or everything released).
    first_seq: Option<u64>,
    /// (family, segment) of every durable marker it holds.
    durable: HashSet<(u64, u64)>,
    /// (family, segment) of every marker it holds, written or durable.
    marked: HashSet<(u64, u64)>,
}

impl JournalEvidence {
    pub(super) fn new(records: &[JournalRecord]) -> JournalEvidence {
        let markers = records
            .iter()
            .filter(|r| r.header.kind == RecordKind::SegmentDurable);
        JournalEvidence {
            first_seq: records.iter().map(|r| r.seq).min(),
            // Any other count is a marker of a later build: taken for durable, the stronger.
            durable: markers
                .clone()
                .filter(|r| r.header.count != SEGMENT_WRITTEN)
                .map(|r| (r.header.layer.0, r.header.lba))
                .collect(),
            marked: markers.map(|r| (r.header.layer.0, r.header.lba)).collect(),
        }
    }

    /// The journal says this stripe became durable.
    pub(super) fn marked_durable(&self, family: FamilyId, segment: u64) -> bool {
        self.durable.contains(&(family.0, segment))
    }

    /// The journal says this stripe was written (or became durable): write-through writes
    /// may have been acknowledged from it.
    pub(super) fn marked_written(&self, family: FamilyId, segment: u64) -> bool {
        self.marked.contains(&(family.0, segment))
    }

    /// Proof that no segment of `family` from `from` on was written: the journal holds every
    /// record after `hwm` and no marker for one.
    pub(super) fn no_written_segment_from(&self, family: FamilyId, from: u64, hwm: u64) -> bool {
        self.first_seq.is_some_and(|first| first <= hwm + 1)
            && !self
                .marked
                .iter()
                .any(|&(f, segment)| f == family.0 && segment >= from)
    }

    /// Proof that the stripe was never written: the journal still holds every record after
    /// `hwm` (what the family's checkpoint and replayed segments reflect), and the stripe's
    /// markers, which would come after them, are not among them.
    pub(super) fn never_written(&self, family: FamilyId, segment: u64, hwm: u64) -> bool {
        self.first_seq.is_some_and(|first| first <= hwm + 1)
            && !self.marked_written(family, segment)
    }
}

/// What to do with one stripe at or above the checkpoint.
#[derive(Debug)]
pub(super) enum Verdict {
    /// Proven never durable and unreadable: delete it.
    Discard(&'static str),
    /// Never durable, but not proven torn: keep its chunks, do not replay it (the journal
    /// holds its records), and do not reuse its id.
    Ignore(&'static str),
    /// Neither readable nor provably disposable: recovery waits.
    Wait(BlockedStripe),
}

/// The verdict on a stripe recovery could not replay. `read_failed`: it has enough chunks
/// listed but reading its summary failed (a d.node went away, or a chunk is damaged).
pub(super) fn unreadable(
    fid: FamilyId,
    segment: u64,
    s: &StripeListing,
    listing: &FamilyListing,
    journal: &JournalEvidence,
    hwm: u64,
    read_failed: bool,
) -> Verdict {
    let needed = s.redundancy.data_chunks();
    // A d.node holds at most one chunk of a stripe (one position per placement group), so
    // the stores that did not answer hide at most one chunk each.
    let unanswered = u8::try_from(listing.unanswered.len()).unwrap_or(u8::MAX);
    if !read_failed && s.chunks.saturating_add(unanswered) < needed {
        if journal.marked_durable(fid, segment) {
            tracing::error!(
                family = fid.0,
                segment,
                chunks = s.chunks,
                needed,
                "a durable stripe lost more chunks than its parity covers: every d.node answered and they hold too few; its blocks are lost"
            );
        }
        return Verdict::Discard(
            "torn: fewer than k chunks, counting one on every d.node that did not answer",
        );
    }
    if journal.never_written(fid, segment, hwm) {
        return Verdict::Ignore(
            "unreadable, never written (no marker; the journal holds its records): replayed from the journal, its chunks kept",
        );
    }
    let why = if journal.marked_durable(fid, segment) {
        "durable (the journal says so) but unreadable: waiting for its d.nodes"
    } else if journal.marked_written(fid, segment) {
        "written (the journal says so; write-through writes were acknowledged from it) but unreadable: waiting for its d.nodes"
    } else {
        "unreadable, and the journal no longer proves it was never written: waiting for its d.nodes"
    };
    Verdict::Wait(BlockedStripe {
        family: fid.0,
        segment,
        chunks_found: s.chunks,
        chunks_needed: needed,
        why: why.into(),
    })
}

/// The verdict on a stripe after one that was ignored or torn: ignored too, unless the
/// journal says it was durable, which the syncer's order rules out (so recovery waits rather
/// than guess). A written marker is no objection: a power cut tears stripes written but not
/// synced in any order.
pub(super) fn after_ignored(
    fid: FamilyId,
    segment: u64,
    s: &StripeListing,
    journal: &JournalEvidence,
) -> Verdict {
    if journal.marked_durable(fid, segment) {
        return Verdict::Wait(BlockedStripe {
            family: fid.0,
            segment,
            chunks_found: s.chunks,
            chunks_needed: s.redundancy.data_chunks(),
            why: "durable after a segment that never was: the journal and the stripes disagree"
                .into(),
        });
    }
    Verdict::Ignore("after a segment that never became durable")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::units::LayerId;
    use crate::write_log::RecordHeader;
    use weft_ec::Redundancy;

    fn record(seq: u64, kind: RecordKind, layer: u64, lba: u64) -> JournalRecord {
        JournalRecord {
            seq,
            header: RecordHeader {
                kind,
                layer: LayerId(layer),
                lba,
                count: 0,
            },
            payload: Vec::new(),
        }
    }

    fn four_plus_two(chunks: u8) -> StripeListing {
        StripeListing {
            segment: 9,
            stripe_len_bytes: 1 << 20,
            redundancy: Redundancy::parse("4+2").expect("4+2"),
            chunks,
        }
    }

    fn listing(unanswered: &[&str]) -> FamilyListing {
        FamilyListing {
            stripes: Default::default(),
            unanswered: unanswered.iter().map(|s| s.to_string()).collect(),
        }
    }

    #[test]
    fn a_complete_listing_proves_a_stripe_torn() {
        let j = JournalEvidence::new(&[]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&[]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Discard(_)), "{v:?}");
    }

    #[test]
    fn chunks_found_plus_one_per_silent_d_node_below_k_prove_a_stripe_torn() {
        let j = JournalEvidence::new(&[record(500, RecordKind::Write, 3, 0)]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(2),
            &listing(&["d6"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Discard(_)), "{v:?}");
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d6"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
    }

    #[test]
    fn missing_d_nodes_and_a_released_journal_make_recovery_wait() {
        // The case: synced data, the journal released past it, three d.nodes down.
        let j = JournalEvidence::new(&[record(500, RecordKind::Write, 3, 0)]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d4", "d5", "d6"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
        // No journal at all (a fresh data dir) proves nothing either.
        let empty = JournalEvidence::new(&[]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d4"]),
            &empty,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
    }

    #[test]
    fn a_durability_marker_makes_recovery_wait_even_with_every_record_kept() {
        let j = JournalEvidence::new(&[
            record(101, RecordKind::Write, 3, 0),
            record(102, RecordKind::SegmentDurable, 1, 9),
        ]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d4"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
        // Another family's or segment's marker is no evidence about this one.
        let v = unreadable(
            FamilyId(2),
            9,
            &four_plus_two(3),
            &listing(&["d4"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Ignore(_)), "{v:?}");
    }

    #[test]
    fn a_kept_journal_without_a_marker_proves_never_durable() {
        let j = JournalEvidence::new(&[record(101, RecordKind::Write, 3, 0)]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d4"]),
            &j,
            100,
            false,
        );
        assert!(matches!(v, Verdict::Ignore(_)), "{v:?}");
        // A gap: the journal starts after the family's high-water mark + 1.
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(3),
            &listing(&["d4"]),
            &j,
            99,
            false,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
    }

    #[test]
    fn a_failed_read_is_not_proof_even_with_a_complete_listing() {
        let j = JournalEvidence::new(&[record(500, RecordKind::Write, 3, 0)]);
        let v = unreadable(
            FamilyId(1),
            9,
            &four_plus_two(4),
            &listing(&[]),
            &j,
            100,
            true,
        );
        assert!(matches!(v, Verdict::Wait(_)), "{v:?}");
    }
}
