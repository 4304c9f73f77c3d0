//! The seal part's state: segments being written as stripes (still readable from memory),
//! sealed segments (durable stripes the block tables point into), how far each family's
//! durable checkpoint reaches, and whether stripe writes currently fail. Per-family segment
//! ids are handed out by [`SegmentIds`]. Fields are private: a segment moves from sealing to
//! sealed in one step, and a failure is cleared only by a success or freed space.
//!
//! A sealing segment is first *to write*, then *written* (its chunks are in the d.nodes' page
//! cache: it survives a kill of any process, not a power cut), then durable (synced: it leaves
//! for the sealed set). Each family's segments are written and made durable in id order, so
//! its written ones and its durable ones are each a prefix: [`Segments::written_hwm`] says
//! which journal records are in written stripes, the family's `journal_hwm` which are in
//! durable ones. A write-through write may be acknowledged from a written stripe; the newest
//! such per family ([`Segments::acked_unsynced`]) is what a FLUSH waits for.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use weft_chunk::AlignedBuf;
use weft_ec::Redundancy;

use crate::checkpoint::SealedSegment;
use crate::error::IoFailure;
use crate::stripe::{StripeToSync, WrittenStripe};
use crate::units::{FamilyId, SegmentId};

/// A segment and family, the key of sealing and sealed segments (segment ids are per family).
pub(crate) type SegmentKey = (FamilyId, SegmentId);

/// A segment whose stripe is being written (or failed to be): still readable from memory.
#[derive(Debug)]
pub(crate) struct SealingSegment {
    pub bytes: Arc<AlignedBuf>,
    /// The plain CRC32C of the pages of `bytes` its blocks' checksums give (see
    /// `SegmentBuilder`): the stripe write derives their chunk checksums from these.
    pub known_page_crcs: Arc<Vec<Option<u32>>>,
    pub redundancy: Redundancy,
    pub family: FamilyId,
    /// The seq of the first journal record it reflects: the journal keeps it until durable.
    pub since_seq: Option<u64>,
    pub journal_hwm: u64,
    pub data_bytes: u64,
    /// Its chunks are written, not yet durable (see the module doc).
    pub written: Option<WrittenStripe>,
    /// A sync of its chunks failed: write them again, each replacing the old one.
    pub rewrite: bool,
}

/// What the sealer needs of a sealing segment to write its stripe.
#[derive(Debug, Clone)]
pub(crate) struct ToWrite {
    pub bytes: Arc<AlignedBuf>,
    pub known_page_crcs: Arc<Vec<Option<u32>>>,
    pub redundancy: Redundancy,
    pub rewrite: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Segments {
    /// The sealer writes each family's segments in id order.
    sealing: BTreeMap<SegmentKey, SealingSegment>,
    sealed: BTreeMap<SegmentKey, SealedSegment>,
    /// Per family: segments with id below this are reflected in its durable checkpoint (GC
    /// may delete them).
    checkpoint_below: HashMap<FamilyId, u64>,
    bytes_since_checkpoint: u64,
    /// A stripe write failed for lack of space: writers get ENOSPC until one succeeds.
    out_of_space: bool,
    /// The last stripe write failed with this; cleared by the next success.
    failure: Option<String>,
    /// Buffers of segments whose stripes are durable, for new open segments.
    spare_buffers: Vec<AlignedBuf>,
    /// Per family: every journal record up to this is reflected in written stripes.
    written_hwm: HashMap<FamilyId, u64>,
    /// Per family: the newest write-through record acknowledged from a stripe that was
    /// written, not durable, at the time.
    acked_unsynced: HashMap<FamilyId, u64>,
    /// Per family: the journal high-water mark of its newest segment handed to the sealer
    /// (at recovery: of its last segment replayed). The next one records it as its previous
    /// high-water mark, which recovery checks (see `segment`).
    sealed_hwm: HashMap<FamilyId, u64>,
}

/// Buffers of written segments kept for new open segments: enough for destage to open the
/// next segment while the sealer writes the previous one; more would only hold memory.
const SPARE_BUFFERS_MAX: usize = 2;

impl Segments {
    // ---- sealing ---------------------------------------------------------------------------

    pub fn start_sealing(&mut self, key: SegmentKey, segment: SealingSegment) {
        self.sealing.insert(key, segment);
    }

    pub fn sealing(&self, key: SegmentKey) -> Option<&SealingSegment> {
        self.sealing.get(&key)
    }

    pub fn sealing_count(&self) -> usize {
        self.sealing.len()
    }

    /// Bytes held in memory by segments being written.
    pub fn sealing_bytes(&self) -> u64 {
        self.sealing.values().map(|s| s.bytes.len() as u64).sum()
    }

    /// The first journal record each sealing segment still needs.
    pub fn sealing_since_seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.sealing.values().filter_map(|s| s.since_seq)
    }

    /// The next segment to write: the lowest key not written, so each family's go in id
    /// order.
    pub fn next_to_write(&self) -> Option<(SegmentKey, ToWrite)> {
        self.sealing
            .iter()
            .find(|(_, s)| s.written.is_none())
            .map(|(&key, s)| {
                (
                    key,
                    ToWrite {
                        bytes: s.bytes.clone(),
                        known_page_crcs: s.known_page_crcs.clone(),
                        redundancy: s.redundancy,
                        rewrite: s.rewrite,
                    },
                )
            })
    }

    /// Its chunks are written: the records it reflects may be acknowledged (write-through),
    /// and stripe writes work again.
    pub fn mark_written(&mut self, key: SegmentKey, written: WrittenStripe) {
        self.out_of_space = false;
        self.failure = None;
        let s = self
            .sealing
            .get_mut(&key)
            .expect("only the sealer writes sealing segments");
        s.written = Some(written);
        s.rewrite = false;
        let hwm = self.written_hwm.entry(key.0).or_insert(0);
        *hwm = (*hwm).max(s.journal_hwm);
    }

    /// Every journal record of `fid` up to this is in a written (or durable) stripe.
    pub fn written_hwm(&self, fid: FamilyId) -> u64 {
        self.written_hwm.get(&fid).copied().unwrap_or(0)
    }

    /// The written segments to make durable: of each family, those before its first one not
    /// written, in key order (a family's segments become durable in id order).
    pub fn to_sync(&self) -> Vec<(SegmentKey, StripeToSync)> {
        let mut out = Vec::new();
        let mut stopped: Option<FamilyId> = None;
        for (&key, s) in &self.sealing {
            if stopped == Some(key.0) {
                continue;
            }
            match &s.written {
                Some(w) => out.push((
                    key,
                    StripeToSync {
                        family: key.0 .0,
                        segment: key.1 .0,
                        redundancy: s.redundancy,
                        chunks: w.chunks.clone(),
                    },
                )),
                None => stopped = Some(key.0),
            }
        }
        out
    }

    /// Its sync failed: it is written again, replacing its chunks (it stays readable from
    /// memory, and its old chunks stay until replaced).
    pub fn sync_failed(&mut self, key: SegmentKey, e: &IoFailure) {
        if let Some(s) = self.sealing.get_mut(&key) {
            s.written = None;
            s.rewrite = true;
        }
        self.write_failed(e);
    }

    /// The journal high-water mark of the newest segment of `fid` handed to the sealer.
    pub fn sealed_hwm(&self, fid: FamilyId) -> Option<u64> {
        self.sealed_hwm.get(&fid).copied()
    }

    pub fn set_sealed_hwm(&mut self, fid: FamilyId, hwm: u64) {
        self.sealed_hwm.insert(fid, hwm);
    }

    /// A write-through record `seq` of `fid` was acknowledged before its stripe was durable.
    pub fn note_acked_unsynced(&mut self, fid: FamilyId, seq: u64) {
        let acked = self.acked_unsynced.entry(fid).or_insert(0);
        *acked = (*acked).max(seq);
    }

    /// Per family, the newest write-through record acknowledged before its stripe was
    /// durable (some may be durable by now: compare with the family's `journal_hwm`).
    pub fn acked_unsynced(&self) -> impl Iterator<Item = (FamilyId, u64)> + '_ {
        self.acked_unsynced.iter().map(|(&f, &seq)| (f, seq))
    }

    /// Keep a written segment's buffer for a new open segment (dropped when enough are kept).
    pub fn put_spare_buffer(&mut self, buffer: AlignedBuf) {
        if self.spare_buffers.len() < SPARE_BUFFERS_MAX {
            self.spare_buffers.push(buffer);
        }
    }

    pub fn take_spare_buffer(&mut self) -> Option<AlignedBuf> {
        self.spare_buffers.pop()
    }

    /// Its stripe is durable: it leaves the sealing set, and stripe writes work again.
    pub fn durable(&mut self, key: SegmentKey) -> SealingSegment {
        self.out_of_space = false;
        self.failure = None;
        self.sealing
            .remove(&key)
            .expect("only the sealer removes sealing segments")
    }

    /// A stripe write failed: writers are told until one succeeds.
    pub fn write_failed(&mut self, e: &IoFailure) {
        self.out_of_space |= e.is_no_space();
        self.failure = Some(e.to_string());
    }

    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    pub fn out_of_space(&self) -> bool {
        self.out_of_space
    }

    /// GC or a deletion freed space: writers may try again.
    pub fn space_freed(&mut self) {
        self.out_of_space = false;
    }

    // ---- sealed ----------------------------------------------------------------------------

    /// A durable stripe the block tables may point into (after a write, or at recovery).
    pub fn sealed_now(&mut self, key: SegmentKey, segment: SealedSegment) {
        self.bytes_since_checkpoint += segment.stored_bytes;
        self.sealed.insert(key, segment);
    }

    /// A durable stripe found at recovery (counted in no checkpoint interval).
    pub fn recovered(&mut self, key: SegmentKey, segment: SealedSegment) {
        self.sealed.insert(key, segment);
    }

    pub fn sealed(&self, key: SegmentKey) -> Option<&SealedSegment> {
        self.sealed.get(&key)
    }

    pub fn is_sealed(&self, key: SegmentKey) -> bool {
        self.sealed.contains_key(&key)
    }

    pub fn sealed_iter(&self) -> impl Iterator<Item = (SegmentKey, &SealedSegment)> + '_ {
        self.sealed.iter().map(|(&k, v)| (k, v))
    }

    pub fn sealed_count(&self) -> usize {
        self.sealed.len()
    }

    /// One family's sealed segments, for its checkpoint.
    pub fn sealed_of(&self, fid: FamilyId) -> BTreeMap<SegmentId, SealedSegment> {
        self.sealed
            .range((fid, SegmentId(0))..=(fid, SegmentId(u64::MAX)))
            .map(|(&(_, s), &v)| (s, v))
            .collect()
    }

    /// GC deleted its stripe.
    pub fn reclaimed(&mut self, key: SegmentKey) {
        self.sealed.remove(&key);
    }

    /// A deleted family's segments leave; returns them, for the caller to delete.
    pub fn forget_family(&mut self, fid: FamilyId) -> Vec<(SegmentId, Redundancy)> {
        let doomed: Vec<(SegmentId, Redundancy)> = self
            .sealed_of(fid)
            .into_iter()
            .map(|(id, s)| (id, s.redundancy))
            .collect();
        for (id, _) in &doomed {
            self.sealed.remove(&(fid, *id));
        }
        self.checkpoint_below.remove(&fid);
        self.written_hwm.remove(&fid);
        self.acked_unsynced.remove(&fid);
        self.sealed_hwm.remove(&fid);
        doomed
    }

    // ---- checkpoints -----------------------------------------------------------------------

    /// Segments of `fid` below this are reflected in its durable checkpoint.
    pub fn checkpoint_below(&self, fid: FamilyId) -> u64 {
        self.checkpoint_below.get(&fid).copied().unwrap_or(0)
    }

    /// A durable checkpoint of `fid` reflects segments below `below`.
    pub fn checkpoint_covers(&mut self, fid: FamilyId, below: u64) {
        let b = self.checkpoint_below.entry(fid).or_insert(0);
        *b = (*b).max(below);
    }

    pub fn bytes_since_checkpoint(&self) -> u64 {
        self.bytes_since_checkpoint
    }

    /// A checkpoint is being taken of every sealed segment.
    pub fn checkpoint_started(&mut self) {
        self.bytes_since_checkpoint = 0;
    }
}

/// The next segment id of each family. Ids start at 1 and stay below the checkpoint stripes'
/// range; an id once handed out (or seen on a d.node) is never handed out again.
#[derive(Debug, Default)]
pub(crate) struct SegmentIds(HashMap<FamilyId, u64>);

impl SegmentIds {
    /// The id the next segment of `fid` gets (`None`: the family has none yet).
    pub fn peek(&self, fid: FamilyId) -> Option<u64> {
        self.0.get(&fid).copied()
    }

    pub fn set(&mut self, fid: FamilyId, next: u64) {
        self.0.insert(fid, next);
    }

    pub fn forget(&mut self, fid: FamilyId) {
        self.0.remove(&fid);
    }

    /// Hands out ids; the state's ids are taken out for the duration (the caller puts them
    /// back), so families can be changed meanwhile.
    pub fn allocator(&mut self) -> impl FnMut(FamilyId) -> SegmentId + '_ {
        move |family| {
            let n = self.0.entry(family).or_insert(1);
            let id = SegmentId(*n);
            *n += 1;
            assert!(
                id.0 < crate::checkpoint::CHECKPOINT_SEGMENT_BASE,
                "segment ids exhausted"
            );
            id
        }
    }
}
