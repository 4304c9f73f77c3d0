//! Block table and dedup index of one family: block id → {location, fingerprint, refcount},
//! and fingerprint → block id.
//!
//! Maps never hold physical addresses, so GC relocates a block by changing one entry here.
//! A block whose refcount reaches zero is freed at once: its fingerprint leaves the dedup
//! index, its bytes become garbage in its segment, and its id may be reused. The table also
//! keeps the live bytes of every segment, which is what GC chooses victims by. Entries live
//! in copy-on-write chunks, so a checkpoint snapshots the table ([`BlockTable::snapshot`]) for
//! a pointer per chunk and encodes it without holding the engine's lock; the dedup index is
//! not checkpointed but rebuilt from the entries on load. No I/O here.
//!
//! Memory per stored (unique) block is at most 48 bytes: a 40-byte entry (a [`BlockEntry`]
//! with its fingerprint held as two `u64` halves, so it is not padded to the 16-byte
//! alignment of a `u128`) plus 5.7 to 7.2 bytes of dedup index, which stores block ids
//! only and reads the fingerprints from the entries (see `dedup_index`). Dedup stays exact:
//! a hit compares the full 128-bit fingerprint in the entry. [`BlockTable::memory_bytes`]
//! reports the total.

use std::collections::{HashMap, HashSet};
use std::mem::size_of;
use std::sync::Arc;

use crate::units::{BlockId, Fingerprint, SegmentId};

mod dedup_index;

use dedup_index::DedupIndex;

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

/// A [`BlockEntry`] as the table holds it: flat, with the fingerprint as two `u64` halves,
/// so it packs into 40 bytes with 8-byte alignment (a `BlockEntry` is 48).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct StoredEntry {
    segment: u64,
    /// Low and high halves of the fingerprint.
    fingerprint: [u64; 2],
    offset_bytes: u32,
    crc32c: u32,
    refcount: u32,
    stored_len_bytes: u16,
    compressed: bool,
}

const FREE_SLOT: StoredEntry = StoredEntry {
    segment: u64::MAX,
    fingerprint: [0; 2],
    offset_bytes: 0,
    crc32c: 0,
    refcount: 0,
    stored_len_bytes: 0,
    compressed: false,
};

impl StoredEntry {
    fn new(location: BlockLocation, fingerprint: Fingerprint, refcount: u32) -> StoredEntry {
        let mut entry = StoredEntry {
            fingerprint: [fingerprint as u64, (fingerprint >> 64) as u64],
            refcount,
            ..FREE_SLOT
        };
        entry.set_location(location);
        entry
    }

    fn is_live(&self) -> bool {
        self.refcount > 0
    }

    fn fingerprint(&self) -> Fingerprint {
        u128::from(self.fingerprint[0]) | (u128::from(self.fingerprint[1]) << 64)
    }

    fn location(&self) -> BlockLocation {
        BlockLocation {
            segment: SegmentId(self.segment),
            offset_bytes: self.offset_bytes,
            stored_len_bytes: self.stored_len_bytes,
            compressed: self.compressed,
            crc32c: self.crc32c,
        }
    }

    fn set_location(&mut self, location: BlockLocation) {
        self.segment = location.segment.0;
        self.offset_bytes = location.offset_bytes;
        self.stored_len_bytes = location.stored_len_bytes;
        self.compressed = location.compressed;
        self.crc32c = location.crc32c;
    }

    fn to_entry(self) -> BlockEntry {
        BlockEntry {
            location: self.location(),
            fingerprint: self.fingerprint(),
            refcount: self.refcount,
        }
    }
}

/// Entries per copy-on-write chunk (40 KiB).
const ENTRY_CHUNK: usize = 1024;

type Chunk = [StoredEntry; ENTRY_CHUNK];

/// Block entries by id, in shared chunks: cloning costs a pointer per chunk, and a chunk is
/// copied when written while a clone still holds it.
#[derive(Debug, Clone, Default)]
struct Entries {
    chunks: Vec<Arc<Chunk>>,
    len: usize,
}

impl Entries {
    fn len(&self) -> usize {
        self.len
    }

    fn get(&self, index: usize) -> Option<&StoredEntry> {
        (index < self.len).then(|| &self.chunks[index / ENTRY_CHUNK][index % ENTRY_CHUNK])
    }

    fn get_mut(&mut self, index: usize) -> Option<&mut StoredEntry> {
        if index >= self.len {
            return None;
        }
        Some(&mut Arc::make_mut(&mut self.chunks[index / ENTRY_CHUNK])[index % ENTRY_CHUNK])
    }

    /// The fingerprint of block `id`, which the dedup index holds, so it is in the table.
    fn fingerprint_of(&self, id: BlockId) -> Fingerprint {
        usize::try_from(id.0)
            .ok()
            .and_then(|index| self.get(index))
            .expect("indexed blocks are in the table")
            .fingerprint()
    }

    /// Grow to `len` entries; new ones are free slots.
    fn grow_to(&mut self, len: usize) {
        while self.chunks.len() * ENTRY_CHUNK < len {
            self.chunks.push(Arc::new([FREE_SLOT; ENTRY_CHUNK]));
        }
        self.len = self.len.max(len);
    }

    fn iter(&self) -> impl Iterator<Item = (usize, &StoredEntry)> {
        self.chunks
            .iter()
            .flat_map(|c| c.iter())
            .take(self.len)
            .enumerate()
    }

    /// Every live entry, in id order.
    fn live(&self) -> impl Iterator<Item = (BlockId, &StoredEntry)> {
        self.iter()
            .filter(|(_, e)| e.is_live())
            .map(|(i, e)| (BlockId(i as u64), e))
    }

    /// Heap bytes held: the chunks (with their reference counts) and the chunk list.
    fn memory_bytes(&self) -> usize {
        let chunk_bytes = size_of::<Chunk>() + 2 * size_of::<usize>();
        self.chunks.capacity() * size_of::<Arc<Chunk>>() + self.chunks.len() * chunk_bytes
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
    pub fn live_entries(&self) -> impl Iterator<Item = (BlockId, BlockEntry)> + '_ {
        self.entries.live().map(|(id, e)| (id, e.to_entry()))
    }
}

/// The block table and dedup index of one family.
#[derive(Debug, Clone, Default)]
pub struct BlockTable {
    entries: Entries,
    free_ids: Vec<u64>,
    dedup: DedupIndex,
    segments: HashMap<SegmentId, SegmentUsage>,
    live_blocks: u64,
    stored_bytes: u64,
}

impl BlockTable {
    pub fn new() -> BlockTable {
        BlockTable::default()
    }

    /// The block already stored with this fingerprint, if any.
    pub fn find_duplicate(&self, fingerprint: Fingerprint) -> Option<BlockId> {
        self.dedup
            .get(fingerprint, |id| self.entries.fingerprint_of(id))
    }

    /// An id for a new block: a freed one if there is one.
    pub fn next_id(&mut self) -> BlockId {
        match self.free_ids.pop() {
            Some(id) => BlockId(id),
            None => BlockId(self.entries.len() as u64),
        }
    }

    /// Record a new block with refcount 1 under `id` (from [`Self::next_id`], or from a
    /// segment summary during replay). If another live block has the same fingerprint, that
    /// one stays the dedup target.
    pub fn insert(&mut self, id: BlockId, location: BlockLocation, fingerprint: Fingerprint) {
        self.store(id, StoredEntry::new(location, fingerprint, 1));
        self.index(id, fingerprint);
    }

    pub fn get(&self, id: BlockId) -> Option<BlockEntry> {
        let entry = self.entries.get(usize::try_from(id.0).ok()?)?;
        entry.is_live().then(|| entry.to_entry())
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
        if entry.is_live() {
            return false;
        }
        let freed = std::mem::replace(entry, FREE_SLOT);
        self.dedup.remove(freed.fingerprint(), id);
        self.account(freed.location(), -1);
        self.free_ids.push(id.0);
        true
    }

    /// Move a live block (GC); the caller has copied its bytes.
    pub fn relocate(&mut self, id: BlockId, to: BlockLocation) {
        let old = self.live_mut(id).location();
        self.account(old, -1);
        self.live_mut(id).set_location(to);
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
            .live()
            .filter(|(_, e)| e.segment == segment.0)
            .map(|(id, e)| (id, e.to_entry()))
            .collect()
    }

    /// Live blocks stored in any of `segments`, with their segment: one pass over the table
    /// for a whole GC run.
    pub fn live_blocks_in_any(&self, segments: &HashSet<SegmentId>) -> Vec<(BlockId, SegmentId)> {
        self.entries
            .live()
            .map(|(id, e)| (id, SegmentId(e.segment)))
            .filter(|(_, segment)| segments.contains(segment))
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

    /// Heap bytes of the table's metadata: entries, dedup index, free ids and segment usage.
    /// Chunks shared with a [`TableSnapshot`] are counted once, here.
    pub fn memory_bytes(&self) -> usize {
        let segment_bytes = size_of::<(SegmentId, SegmentUsage)>() + 1;
        self.entries.memory_bytes()
            + self.dedup.memory_bytes()
            + self.free_ids.capacity() * size_of::<u64>()
            + self.segments.capacity() * segment_bytes
    }

    /// Every live entry, for checkpoints.
    pub fn live_entries(&self) -> impl Iterator<Item = (BlockId, BlockEntry)> + '_ {
        self.entries.live().map(|(id, e)| (id, e.to_entry()))
    }

    /// Rebuild from checkpointed live entries; the dedup index is built once, at its size.
    pub fn from_entries(entries: Vec<(BlockId, BlockEntry)>) -> BlockTable {
        let mut table = BlockTable::new();
        for (id, entry) in entries {
            assert!(entry.refcount > 0, "checkpoint holds a free block {id}");
            let stored = StoredEntry::new(entry.location, entry.fingerprint, entry.refcount);
            table.store(id, stored);
        }
        table.rebuild_dedup();
        table.rebuild_free_ids();
        table
    }

    /// Recompute the free-id list from the holes in the table (after replay).
    pub fn rebuild_free_ids(&mut self) {
        let mut free: Vec<u64> = self
            .entries
            .iter()
            .filter(|(_, e)| !e.is_live())
            .map(|(i, _)| i as u64)
            .collect();
        free.reverse();
        self.free_ids = free;
    }

    /// Put a live entry into the free slot `id`, and count its bytes.
    fn store(&mut self, id: BlockId, entry: StoredEntry) {
        let index = usize::try_from(id.0).expect("block ids fit in memory");
        self.entries.grow_to(index + 1);
        let slot = self.entries.get_mut(index).expect("grown above");
        assert!(!slot.is_live(), "block {id} inserted while in use");
        *slot = entry;
        self.account(entry.location(), 1);
    }

    /// Add a stored block to the dedup index, rebuilding the index (which then holds the
    /// block) when it is full.
    fn index(&mut self, id: BlockId, fingerprint: Fingerprint) {
        if self.dedup.is_full() {
            self.rebuild_dedup();
            return;
        }
        let entries = &self.entries;
        self.dedup
            .insert(fingerprint, id, |id| entries.fingerprint_of(id));
    }

    /// A new dedup index of every live block, sized for them (one pass over the table, in id
    /// order; of blocks with equal fingerprints, the lowest id is indexed).
    fn rebuild_dedup(&mut self) {
        let live = usize::try_from(self.live_blocks).expect("live blocks fit in memory");
        let mut dedup = DedupIndex::with_room_for(live);
        let entries = &self.entries;
        for (id, entry) in entries.live() {
            dedup.insert(entry.fingerprint(), id, |id| entries.fingerprint_of(id));
        }
        self.dedup = dedup;
    }

    fn live_mut(&mut self, id: BlockId) -> &mut StoredEntry {
        let entry = usize::try_from(id.0)
            .ok()
            .and_then(|i| self.entries.get_mut(i));
        match entry {
            Some(e) if e.is_live() => e,
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

    /// Deterministic well-spread 128-bit values (splitmix64), standing in for BLAKE3 prefixes.
    struct Fingerprints(u64);

    impl Fingerprints {
        fn next_u64(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn next(&mut self) -> Fingerprint {
            u128::from(self.next_u64()) << 64 | u128::from(self.next_u64())
        }
    }

    #[test]
    fn an_entry_is_40_bytes_in_memory() {
        assert_eq!(size_of::<StoredEntry>(), 40);
        assert_eq!(size_of::<Chunk>(), 40 * ENTRY_CHUNK);
    }

    #[test]
    fn entries_read_back_as_stored() {
        let mut t = BlockTable::new();
        let location = BlockLocation {
            segment: SegmentId(u64::MAX - 1),
            offset_bytes: u32::MAX,
            stored_len_bytes: 4096,
            compressed: false,
            crc32c: 0xdead_beef,
        };
        let fingerprint = u128::MAX - 12345;
        let a = t.next_id();
        t.insert(a, location, fingerprint);
        t.add_ref(a);
        let expected = BlockEntry {
            location,
            fingerprint,
            refcount: 2,
        };
        assert_eq!(t.get(a), Some(expected));
        assert_eq!(t.live_entries().collect::<Vec<_>>(), vec![(a, expected)]);
        assert_eq!(
            t.snapshot().live_entries().collect::<Vec<_>>(),
            vec![(a, expected)]
        );
        assert_eq!(t.live_blocks_in(location.segment), vec![(a, expected)]);
        assert_eq!(t.find_duplicate(fingerprint), Some(a));
        assert_eq!(
            t.find_duplicate(fingerprint ^ (1 << 100)),
            None,
            "all 128 bits count"
        );
    }

    /// Metadata bytes per unique block, from the capacities the table holds, while 1 M blocks
    /// (4 GiB of unique data) are stored one by one.
    #[test]
    fn memory_per_unique_block_is_at_most_48_bytes() {
        const BLOCKS: u64 = 1 << 20;
        let mut t = BlockTable::new();
        let mut fingerprints = Fingerprints(1);
        let mut worst = 0.0f64;
        for n in 1..=BLOCKS {
            let id = t.next_id();
            t.insert(id, loc(n / 1024, 0), fingerprints.next());
            if n >= 100_000 && n.is_multiple_of(1000) {
                worst = worst.max(t.memory_bytes() as f64 / n as f64);
            }
        }
        let index_bytes = t.dedup.memory_bytes() as f64 / BLOCKS as f64;
        let total = t.memory_bytes() as f64 / BLOCKS as f64;
        eprintln!(
            "per unique block: entry {} B, dedup index {index_bytes:.2} B, total {total:.2} B \
             (worst from 100 k to 1 M blocks: {worst:.2} B)",
            size_of::<StoredEntry>()
        );
        assert!(worst <= 48.0, "{worst:.2} bytes per block");
        let mut fingerprints = Fingerprints(1);
        for n in 0..BLOCKS {
            assert_eq!(t.find_duplicate(fingerprints.next()), Some(BlockId(n)));
        }
    }

    /// Random writes, overwrites and frees, checked against a model that holds every live
    /// block's fingerprint: a duplicate is found exactly when the model has one.
    #[test]
    fn dedup_is_exact_through_growth_and_frees() {
        let mut t = BlockTable::new();
        let mut model: HashMap<Fingerprint, (BlockId, u32)> = HashMap::new();
        let mut rng = Fingerprints(7);
        // A small pool of contents, so writes hit duplicates and frees are frequent.
        let pool: Vec<Fingerprint> = (0..5000).map(|_| rng.next()).collect();
        for step in 0..200_000u64 {
            let fingerprint = pool[(rng.next_u64() % pool.len() as u64) as usize];
            let found = t.find_duplicate(fingerprint);
            assert_eq!(
                found,
                model.get(&fingerprint).map(|&(id, _)| id),
                "step {step}"
            );
            if rng.next_u64().is_multiple_of(3) {
                // Drop a reference of the block under this fingerprint, if any.
                if let Some((id, refs)) = model.get_mut(&fingerprint) {
                    *refs -= 1;
                    assert_eq!(t.release(*id), *refs == 0);
                    if *refs == 0 {
                        model.remove(&fingerprint);
                    }
                }
            } else if let Some(id) = found {
                t.add_ref(id);
                model.get_mut(&fingerprint).expect("found above").1 += 1;
            } else {
                let id = t.next_id();
                t.insert(id, loc(step / 100, 0), fingerprint);
                model.insert(fingerprint, (id, 1));
            }
        }
        assert_eq!(t.live_blocks(), model.len() as u64);
        for (fingerprint, (id, refs)) in &model {
            assert_eq!(t.find_duplicate(*fingerprint), Some(*id));
            assert_eq!(t.get(*id).map(|e| e.refcount), Some(*refs));
        }
    }

    #[test]
    fn from_entries_rebuilds_the_dedup_index() {
        let mut t = BlockTable::new();
        let mut fingerprints = Fingerprints(3);
        for n in 0..5000 {
            let id = t.next_id();
            t.insert(id, loc(n / 100, 0), fingerprints.next());
        }
        for n in (0..5000).step_by(3) {
            assert!(t.release(BlockId(n)));
        }
        let loaded = BlockTable::from_entries(t.live_entries().collect());
        assert_eq!(loaded.live_blocks(), t.live_blocks());
        let mut fingerprints = Fingerprints(3);
        for n in 0..5000u64 {
            let expected = (!n.is_multiple_of(3)).then_some(BlockId(n));
            assert_eq!(loaded.find_duplicate(fingerprints.next()), expected);
        }
        assert!(loaded.dedup.memory_bytes() <= t.dedup.memory_bytes());
    }
}
