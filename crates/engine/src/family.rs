//! One family's state: block maps of its layers, its block table and dedup index, and its open
//! segment. Every change to a map or a refcount goes through here, live (destage) and in
//! replay alike, so recovery rebuilds exactly the state the live system had. No I/O here.

use std::collections::HashMap;

use crate::block_map::{BlockMap, Mapping, PAGE_ENTRIES};

const PAGE_ENTRIES_U64: u64 = PAGE_ENTRIES as u64;
use crate::block_table::{BlockLocation, BlockTable};
use crate::layers::{LayerGraph, LayerOp};
use crate::reduce::Reduced;
use crate::segment::{SegmentBuilder, StoredBlock, SummaryEntry};
use crate::units::{BlockId, FamilyId, LayerId, Lba, SegmentId};

/// Counts of one layer, for space accounting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerCounts {
    /// Entries that are not absent (blocks and zeroes).
    pub mapped_blocks: u64,
    /// Entries that read as zero.
    pub zero_blocks: u64,
}

/// A family: the unit of dedup, segments and recovery.
#[derive(Debug)]
pub struct Family {
    pub id: FamilyId,
    pub layers: HashMap<LayerId, BlockMap>,
    /// Which layer sits on which. Not checkpointed: rebuilt from the cluster state at start.
    pub graph: LayerGraph,
    pub table: BlockTable,
    /// The segment being filled, if any.
    pub open: Option<SegmentBuilder>,
    /// Seq of the first journal record reflected in the open segment.
    pub open_since_seq: Option<u64>,
    /// Every journal record of this family with seq <= this is reflected in sealed segments
    /// (or the checkpoint); recovery replays the journal after it.
    pub journal_hwm: u64,
    /// A sealed segment's buffer for the next open segment (see
    /// [`SegmentBuilder::with_buffer`]); destage hands one over just before it is needed.
    pub spare_buffer: Option<weft_chunk::AlignedBuf>,
}

impl Family {
    pub fn new(id: FamilyId) -> Family {
        Family {
            id,
            layers: HashMap::new(),
            graph: LayerGraph::new(),
            table: BlockTable::new(),
            open: None,
            open_since_seq: None,
            journal_hwm: 0,
            spare_buffer: None,
        }
    }

    /// Where the stored bytes of a block are.
    pub fn location(&self, block: BlockId) -> Option<BlockLocation> {
        self.table.get(block).map(|e| e.location)
    }

    /// Destage one reduced block of a write (journal record `seq`) into `layer`; `raw` is the
    /// block as written.
    #[allow(clippy::too_many_arguments)] // the block, its place, and the segment allocator
    pub fn apply_block(
        &mut self,
        layer: LayerId,
        lba: u64,
        reduced: &Reduced,
        raw: &[u8],
        seq: u64,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        segment_capacity_bytes: usize,
    ) {
        self.open_since_seq.get_or_insert(seq);
        let new_mapping = match reduced {
            Reduced::Zero => {
                self.record(
                    SummaryEntry::MapZero {
                        layer,
                        lba,
                        count: 1,
                    },
                    new_segment,
                    segment_capacity_bytes,
                );
                Mapping::Zero
            }
            Reduced::Data {
                fingerprint,
                compressed,
                crc32c,
            } => {
                if let Some(existing) = self.table.find_duplicate(*fingerprint) {
                    self.table.add_ref(existing);
                    self.record(
                        SummaryEntry::MapExisting {
                            layer,
                            lba,
                            block: existing,
                        },
                        new_segment,
                        segment_capacity_bytes,
                    );
                    Mapping::Block(existing)
                } else {
                    let id = self.table.next_id();
                    let open = self.open_segment(new_segment, segment_capacity_bytes);
                    let stored = compressed.as_deref().unwrap_or(raw);
                    let placed = open.append(id, stored, compressed.is_some(), *crc32c);
                    let segment = open.id;
                    open.record(SummaryEntry::MapNew {
                        layer,
                        lba,
                        stored: placed,
                        fingerprint: *fingerprint,
                    });
                    self.table
                        .insert(id, location(segment, placed), *fingerprint);
                    Mapping::Block(id)
                }
            }
        };
        let old = self
            .layers
            .entry(layer)
            .or_default()
            .set(Lba(lba), new_mapping);
        self.release_mapping(old);
    }

    /// Set a range of a layer to zero or absent, returning the block references that were
    /// dropped from the map. The caller releases them later with [`Self::release_blocks`]
    /// (live: when the trim is destaged) or at once (replay).
    pub fn set_range(
        &mut self,
        layer: LayerId,
        lba: u64,
        count: u64,
        mapping: Mapping,
    ) -> Vec<BlockId> {
        assert!(
            matches!(mapping, Mapping::Zero | Mapping::Absent),
            "ranges are set to zero or absent"
        );
        let map = self.layers.entry(layer).or_default();
        let end = lba.saturating_add(count);
        let mut dropped = Vec::new();
        if mapping == Mapping::Absent {
            for (l, _) in map.present_in(Lba(lba), Lba(end)) {
                if let Mapping::Block(b) = map.set(l, Mapping::Absent) {
                    dropped.push(b);
                }
            }
        } else {
            for l in lba..end {
                if let Mapping::Block(b) = map.set(Lba(l), Mapping::Zero) {
                    dropped.push(b);
                }
            }
        }
        dropped
    }

    /// Release block references dropped from a map.
    pub fn release_blocks(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            self.table.release(b);
        }
    }

    /// Log a destaged trim or zeroing in the open segment and release what it dropped.
    pub fn destage_range(
        &mut self,
        entry: SummaryEntry,
        released: &[BlockId],
        seq: u64,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        segment_capacity_bytes: usize,
    ) {
        self.open_since_seq.get_or_insert(seq);
        self.record(entry, new_segment, segment_capacity_bytes);
        self.release_blocks(released);
    }

    /// Log a layer operation taken from the buffer (journal record `seq`) and apply it.
    pub fn destage_layer_op(
        &mut self,
        op: LayerOp,
        seq: u64,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        segment_capacity_bytes: usize,
    ) {
        self.open_since_seq.get_or_insert(seq);
        self.record(SummaryEntry::Layer(op), new_segment, segment_capacity_bytes);
        self.apply_layer_op(op);
    }

    /// Apply a layer operation to maps, refcounts and the graph (live and in replay alike).
    /// Applying it again is a no-op: the removed layer is gone and ids are never reused.
    pub fn apply_layer_op(&mut self, op: LayerOp) {
        match op {
            LayerOp::Drop { layer } => {
                if let Some(map) = self.layers.remove(&layer) {
                    for (_, m) in map.entries() {
                        self.release_mapping(m);
                    }
                }
            }
            LayerOp::Merge { from, into } => {
                if let Some(below) = self.layers.remove(&from) {
                    let above = self.layers.remove(&into).unwrap_or_default();
                    let (merged, shadowed) = overlay(below, above);
                    for m in shadowed {
                        self.release_mapping(m);
                    }
                    self.layers.insert(into, merged);
                }
            }
        }
        self.graph.apply(op);
    }

    /// Release and remove `layer`'s entries in `[lba, lba + count)` (a slice of a drop).
    pub fn drop_part(&mut self, layer: LayerId, lba: u64, count: u64) {
        if self.layers.contains_key(&layer) {
            let dropped = self.set_range(layer, lba, count, Mapping::Absent);
            self.release_blocks(&dropped);
        }
    }

    /// Drop the next slice of a big layer, from `from_lba` on, over at most `span` LBAs (the
    /// slice starts at the first allocated page at or after `from_lba`); logs it. Returns the
    /// LBA the next slice starts from, or `None` when the layer is gone (the drop is logged
    /// complete).
    pub fn destage_drop_slice(
        &mut self,
        layer: LayerId,
        from_lba: u64,
        span: u64,
        seq: u64,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        segment_capacity_bytes: usize,
    ) -> Option<u64> {
        let first_page = self.layers.get(&layer).and_then(|m| {
            m.page_numbers()
                .filter(|&p| (p + 1) * PAGE_ENTRIES_U64 > from_lba)
                .min()
        });
        self.open_since_seq.get_or_insert(seq);
        let Some(page) = first_page else {
            self.destage_layer_op(
                LayerOp::Drop { layer },
                seq,
                new_segment,
                segment_capacity_bytes,
            );
            return None;
        };
        let lba = from_lba.max(page * PAGE_ENTRIES_U64);
        let count = span.max(1);
        self.record(
            SummaryEntry::DropPart { layer, lba, count },
            new_segment,
            segment_capacity_bytes,
        );
        self.drop_part(layer, lba, count);
        Some(lba + count)
    }

    /// GC: move a live block's stored bytes (checked against `crc32c`, its checksum) into
    /// the open segment.
    #[allow(clippy::too_many_arguments)] // the block, its bytes, and the segment allocator
    pub fn relocate(
        &mut self,
        block: BlockId,
        stored: &[u8],
        compressed: bool,
        crc32c: u32,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        segment_capacity_bytes: usize,
    ) {
        let open = self.open_segment(new_segment, segment_capacity_bytes);
        let placed = open.append(block, stored, compressed, crc32c);
        let segment = open.id;
        open.record(SummaryEntry::Relocate { stored: placed });
        self.table.relocate(block, location(segment, placed));
    }

    /// Apply a sealed segment's summary during recovery.
    pub fn replay(&mut self, segment: SegmentId, entries: &[SummaryEntry]) {
        for entry in entries {
            match *entry {
                SummaryEntry::MapNew {
                    layer,
                    lba,
                    stored,
                    fingerprint,
                } => {
                    self.table
                        .insert(stored.block, location(segment, stored), fingerprint);
                    let old = self
                        .layers
                        .entry(layer)
                        .or_default()
                        .set(Lba(lba), Mapping::Block(stored.block));
                    self.release_mapping(old);
                }
                SummaryEntry::MapExisting { layer, lba, block } => {
                    self.table.add_ref(block);
                    let old = self
                        .layers
                        .entry(layer)
                        .or_default()
                        .set(Lba(lba), Mapping::Block(block));
                    self.release_mapping(old);
                }
                SummaryEntry::MapZero { layer, lba, count } => {
                    let dropped = self.set_range(layer, lba, count, Mapping::Zero);
                    self.release_blocks(&dropped);
                }
                SummaryEntry::Unmap { layer, lba, count } => {
                    let dropped = self.set_range(layer, lba, count, Mapping::Absent);
                    self.release_blocks(&dropped);
                }
                SummaryEntry::Relocate { stored } => {
                    self.table.relocate(stored.block, location(segment, stored));
                }
                SummaryEntry::Layer(op) => self.apply_layer_op(op),
                SummaryEntry::DropPart { layer, lba, count } => {
                    self.drop_part(layer, lba, count);
                }
            }
        }
    }

    /// The open segment, if it should be sealed now, with the seq of its first journal record.
    pub fn take_open_if_full(
        &mut self,
        segment_capacity_bytes: usize,
    ) -> Option<(SegmentBuilder, Option<u64>)> {
        if self
            .open
            .as_ref()
            .is_some_and(|o| o.data_bytes() >= segment_capacity_bytes)
        {
            self.take_open()
        } else {
            None
        }
    }

    /// The open segment, whatever its fill (idle seal, checkpoint).
    pub fn take_open(&mut self) -> Option<(SegmentBuilder, Option<u64>)> {
        let since = self.open_since_seq.take();
        self.open
            .take()
            .filter(|o| !o.is_empty())
            .map(|o| (o, since))
    }

    pub fn counts(&self, layer: LayerId) -> LayerCounts {
        let Some(map) = self.layers.get(&layer) else {
            return LayerCounts::default();
        };
        LayerCounts {
            mapped_blocks: map.present_entries(),
            zero_blocks: map.zero_entries(),
        }
    }

    fn release_mapping(&mut self, old: Mapping) {
        if let Mapping::Block(b) = old {
            self.table.release(b);
        }
    }

    fn record(
        &mut self,
        entry: SummaryEntry,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        cap: usize,
    ) {
        self.open_segment(new_segment, cap).record(entry);
    }

    fn open_segment(
        &mut self,
        new_segment: &mut dyn FnMut(FamilyId) -> SegmentId,
        cap: usize,
    ) -> &mut SegmentBuilder {
        let family = self.id;
        let spare = &mut self.spare_buffer;
        self.open.get_or_insert_with(|| {
            SegmentBuilder::with_buffer(new_segment(family), family, cap, spare.take())
        })
    }
}

/// `above` laid over `below`: every LBA takes `above`'s entry if it has one, else `below`'s.
/// Returns the merged map and `below`'s entries that `above` shadows (their references are
/// released). Costs a pass over the smaller of the two maps: deleting an old snapshot under a
/// small newer layer is cheap however big the old one is.
fn overlay(below: BlockMap, above: BlockMap) -> (BlockMap, Vec<Mapping>) {
    let mut shadowed = Vec::new();
    if above.present_entries() <= below.present_entries() {
        let mut merged = below;
        for (lba, m) in above.entries() {
            let old = merged.set(Lba(lba), m);
            if old != Mapping::Absent {
                shadowed.push(old);
            }
        }
        (merged, shadowed)
    } else {
        let mut merged = above;
        for (lba, m) in below.entries() {
            if merged.get(Lba(lba)) == Mapping::Absent {
                merged.set(Lba(lba), m);
            } else {
                shadowed.push(m);
            }
        }
        (merged, shadowed)
    }
}

fn location(segment: SegmentId, s: StoredBlock) -> BlockLocation {
    BlockLocation {
        segment,
        offset_bytes: s.offset_bytes,
        stored_len_bytes: s.stored_len_bytes,
        compressed: s.compressed,
        crc32c: s.crc32c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn map_of(entries: &[(u64, u8)]) -> BlockMap {
        let mut m = BlockMap::new();
        for &(lba, v) in entries {
            let mapping = if v == 0 {
                Mapping::Zero
            } else {
                Mapping::Block(BlockId(u64::from(v)))
            };
            m.set(Lba(lba), mapping);
        }
        m
    }

    proptest! {
        /// Whichever map is smaller, the overlay is the naive merge: `above` wins, `below`
        /// fills the gaps, and exactly `below`'s shadowed entries are released.
        #[test]
        fn overlay_is_the_naive_merge(
            below in proptest::collection::vec((0u64..2000, 0u8..50), 0..300),
            above in proptest::collection::vec((0u64..2000, 0u8..50), 0..300),
        ) {
            let (b, a) = (map_of(&below), map_of(&above));
            let mut want: Vec<(u64, Mapping)> = Vec::new();
            let mut want_released: Vec<Mapping> = Vec::new();
            for lba in 0..2000 {
                match (a.get(Lba(lba)), b.get(Lba(lba))) {
                    (Mapping::Absent, Mapping::Absent) => {}
                    (Mapping::Absent, m) => want.push((lba, m)),
                    (m, Mapping::Absent) => want.push((lba, m)),
                    (m, shadowed) => {
                        want.push((lba, m));
                        want_released.push(shadowed);
                    }
                }
            }
            let (merged, mut released) = overlay(b, a);
            let mut got: Vec<(u64, Mapping)> = merged.entries().collect();
            got.sort_by_key(|e| e.0);
            prop_assert_eq!(got, want);
            let key = |m: &Mapping| match m {
                Mapping::Block(b) => b.0 + 2,
                Mapping::Zero => 1,
                Mapping::Absent => 0,
            };
            released.sort_by_key(key);
            want_released.sort_by_key(key);
            prop_assert_eq!(released, want_released);
        }
    }
}
