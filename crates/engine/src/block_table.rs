//! Block table and dedup index of one family: block id → {location, fingerprint, refcount},
//! and fingerprint → block id.
//!
//! Maps never hold physical addresses, so GC relocates a block by changing one entry here.
//! A block whose refcount reaches zero is freed at once: its fingerprint leaves the dedup
//! index, its bytes become garbage in its segment, and its id may be reused. The table also
//! keeps the live bytes of every segment, which is what GC chooses victims by. Entries live
//! in copy-on-write chunks, so a checkpoint snapshots the table ([`BlockTable::snapshot`]) for
//! a pointer per chunk and encodes it without holding the engine's lock. No I/O here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::units::{BlockId, Fingerprint, SegmentId};

/// Where a stored block's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLocation {
    pub segment: SegmentId,
    /// Offset of the stored bytes inside the segment.
    pub offset_bytes: u32,
    /// Stored length: compressed length, or 4096 when stored raw.
    pub stored_len_bytes: u16,
    pub compressed: bool,
    /// CRC32C of the stored bytes, verified on every read.
    pub crc32c: u32,
}

/// One stored block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockEntry {
    pub location: BlockLocation,
    pub fingerprint: Fingerprint,
    /// References from block maps; 0 means the slot is free.
    pub refcount: u32,
}

/// Live contents of one segment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentUsage {
    pub live_blocks: u64,
    pub live_bytes: u64,
}

/// Entries per copy-on-write chunk (48 KiB).
const ENTRY_CHUNK: usize = 1024;

/// Block entries by id, in shared chunks: cloning costs a pointer per chunk, and a chunk is
/// copied when written while a clone still holds it.
#[derive(Debug, Clone, Default)]
struct Entries {
    chunks: Vec<Arc<[BlockEntry; ENTRY_CHUNK]>>,
    len: usize,
}

impl Entries {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize) -> Option<&BlockEntry> {
        (index < self.len).then(|| &self.chunks[index / ENTRY_CHUNK][index % ENTRY_CHUNK])
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut BlockEntry> {
        if index >= self.len {
            return None;
        }
        Some(&mut Arc::make_mut(&mut self.chunks[index / ENTRY_CHUNK])[index % ENTRY_CHUNK])
    }

    /// Grow to `len` entries; new ones are free slots.
    fn grow_to(&mut self, len: usize) {
        while self.chunks.len() * ENTRY_CHUNK < len {
            self.chunks.push(Arc::new([FREE_SLOT; ENTRY_CHUNK]));
        }
        self.len = self.len.max(len);
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &BlockEntry)> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .take(self.len)
            .enumerate()
    }
}

/// A point-in-time copy of a table's entries (cheap: shared chunks), for checkpoints.
#[derive(Debug, Clone)]
pub struct TableSnapshot {
    entries: Entries,
    live_blocks: u64,
}

impl TableSnapshot {
    pub fn live_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Every live entry.
    pub fn live_entries(&self) -> impl Iterator<Item = (BlockId, &BlockEntry)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.refcount > 0)
            .map(|(i, e)| (BlockId(i as u64), e))
    }
}

/// The block table and dedup index of one family.
#[derive(Debug, Clone, Default)]
pub struct BlockTable {
    entries: Entries,
    free_ids: Vec<u64>,
    dedup: HashMap<Fingerprint, BlockId>,
    segments: HashMap<SegmentId, SegmentUsage>,
    live_blocks: u64,
    stored_bytes: u64,
}

const FREE_SLOT: BlockEntry = BlockEntry {
    location: BlockLocation {
        segment: SegmentId(u64::MAX),
        offset_bytes: 0,
        stored_len_bytes: 0,
        compressed: false,
        crc32c: 0,
    },
    fingerprint: 0,
    refcount: 0,
};

impl BlockTable {
    pub fn new() -> BlockTable {
        BlockTable::default()
    }

    /// The block already stored with this fingerprint, if any.
    pub fn find_duplicate(&self, fingerprint: Fingerprint) -> Option<BlockId> {
        self.dedup.get(&fingerprint).copied()
    }

    /// An id for a new block: a freed one if there is one.
    pub fn next_id(&mut self) -> BlockId {
        match self.free_ids.pop() {
            Some(id) => BlockId(id),
            None => BlockId(self.entries.len() as u64),
        }
    }

    /// Record a new block with refcount 1 under `id` (from [`Self::next_id`], or from a
    /// segment summary during replay).
    pub fn insert(&mut self, id: BlockId, location: BlockLocation, fingerprint: Fingerprint) {
        let index = usize::try_from(id.0).expect("block ids fit in memory");
        self.entries.grow_to(index + 1);
        let slot = self.entries.get_mut(index).expect("grown above");
        assert_eq!(slot.refcount, 0, "block {id} inserted while in use");
        *slot = BlockEntry {
            location,
            fingerprint,
            refcount: 1,
        };
        self.dedup.insert(fingerprint, id);
        self.account(location, 1);
    }

    pub fn get(&self, id: BlockId) -> Option<&BlockEntry> {
        let entry = self.entries.get(usize::try_from(id.0).ok()?)?;
        (entry.refcount > 0).then_some(entry)
    }

    /// Add a reference (a dedup hit, or a snapshot/clone sharing the block).
    pub fn add_ref(&mut self, id: BlockId) {
        let entry = self.live_mut(id);
        entry.refcount = entry.refcount.checked_add(1).expect("refcount overflow");
    }

    /// Drop a reference; returns true when the block was freed.
    pub fn release(&mut self, id: BlockId) -> bool {
        let entry = self.live_mut(id);
        entry.refcount -= 1;
        if entry.refcount > 0 {
            return false;
        }
        let freed = std::mem::replace(entry, FREE_SLOT);
        if self.dedup.get(&freed.fingerprint) == Some(&id) {
            self.dedup.remove(&freed.fingerprint);
        }
        self.account(freed.location, -1);
        self.free_ids.push(id.0);
        true
    }

    /// Move a live block (GC); the caller has copied its bytes.
    pub fn relocate(&mut self, id: BlockId, to: BlockLocation) {
        let old = self.live_mut(id).location;
        self.account(old, -1);
        self.live_mut(id).location = to;
        self.account(to, 1);
    }

    /// A point-in-time copy of the entries, for a checkpoint.
    pub fn snapshot(&self) -> TableSnapshot {
        TableSnapshot {
            entries: self.entries.clone(),
            live_blocks: self.live_blocks,
        }
    }

    /// Live blocks of one segment, for GC.
    pub fn live_blocks_in(&self, segment: SegmentId) -> Vec<(BlockId, BlockEntry)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.refcount > 0 && e.location.segment == segment)
            .map(|(i, e)| (BlockId(i as u64), *e))
            .collect()
    }

    /// Live blocks stored in any of `segments`, with their segment: one pass over the table
    /// for a whole GC run.
    pub fn live_blocks_in_any(
        &self,
        segments: &std::collections::HashSet<SegmentId>,
    ) -> Vec<(BlockId, SegmentId)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.refcount > 0 && segments.contains(&e.location.segment))
            .map(|(i, e)| (BlockId(i as u64), e.location.segment))
            .collect()
    }

    pub fn segment_usage(&self, segment: SegmentId) -> SegmentUsage {
        self.segments.get(&segment).copied().unwrap_or_default()
    }

    pub fn live_blocks(&self) -> u64 {
        self.live_blocks
    }

    /// Stored (compressed) bytes of all live blocks.
    pub fn stored_bytes(&self) -> u64 {
        self.stored_bytes
    }

    /// Every live entry, for checkpoints.
    pub fn live_entries(&self) -> impl Iterator<Item = (BlockId, &BlockEntry)> {
        self.entries
            .iter()
            .filter(|(_, e)| e.refcount > 0)
            .map(|(i, e)| (BlockId(i as u64), e))
    }

    /// Rebuild from checkpointed live entries.
    pub fn from_entries(entries: Vec<(BlockId, BlockEntry)>) -> BlockTable {
        let mut table = BlockTable::new();
        for (id, entry) in entries {
            assert!(entry.refcount > 0, "checkpoint holds a free block {id}");
            table.insert(id, entry.location, entry.fingerprint);
            table.live_mut(id).refcount = entry.refcount;
        }
        table.rebuild_free_ids();
        table
    }

    /// Recompute the free-id list from the holes in the table (after replay).
    pub fn rebuild_free_ids(&mut self) {
        let mut free: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| e.refcount == 0)
            .map(|(i, _)| i as u64)
            .collect();
        free.reverse();
        self.free_ids = free;
    }

    fn live_mut(&mut self, id: BlockId) -> &mut BlockEntry {
        let entry = usize::try_from(id.0)
            .ok()
            .and_then(|i| self.entries.get_mut(i));
        match entry {
            Some(e) if e.refcount > 0 => e,
            _ => panic!("block {id} is not live"),
        }
    }

    fn account(&mut self, location: BlockLocation, delta: i64) {
        let bytes = u64::from(location.stored_len_bytes);
        let usage = self.segments.entry(location.segment).or_default();
        if delta > 0 {
            usage.live_blocks += 1;
            usage.live_bytes += bytes;
            self.live_blocks += 1;
            self.stored_bytes += bytes;
        } else {
            usage.live_blocks -= 1;
            usage.live_bytes -= bytes;
            self.live_blocks -= 1;
            self.stored_bytes -= bytes;
            if usage.live_blocks == 0 {
                self.segments.remove(&location.segment);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(segment: u64, offset: u32) -> BlockLocation {
        BlockLocation {
            segment: SegmentId(segment),
            offset_bytes: offset,
            stored_len_bytes: 100,
            compressed: true,
            crc32c: 7,
        }
    }

    #[test]
    fn refcounts_free_blocks_and_dedup_entries() {
        let mut t = BlockTable::new();
        let a = t.next_id();
        t.insert(a, loc(1, 0), 42);
        assert_eq!(t.find_duplicate(42), Some(a));
        t.add_ref(a);
        assert!(!t.release(a));
        assert_eq!(t.segment_usage(SegmentId(1)).live_bytes, 100);
        assert!(t.release(a));
        assert_eq!(t.find_duplicate(42), None);
        assert_eq!(t.segment_usage(SegmentId(1)), SegmentUsage::default());
        assert_eq!(t.next_id(), a, "freed ids are reused");
    }

    #[test]
    fn relocation_moves_live_bytes() {
        let mut t = BlockTable::new();
        let a = t.next_id();
        t.insert(a, loc(1, 0), 1);
        t.relocate(a, loc(2, 4096));
        assert_eq!(t.segment_usage(SegmentId(1)).live_blocks, 0);
        assert_eq!(t.segment_usage(SegmentId(2)).live_blocks, 1);
        assert_eq!(t.live_blocks_in(SegmentId(2)).len(), 1);
    }

    #[test]
    #[should_panic(expected = "not live")]
    fn releasing_a_free_block_is_a_bug() {
        let mut t = BlockTable::new();
        t.release(BlockId(3));
    }
}
