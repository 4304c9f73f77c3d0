//! The dedup index of a block table: fingerprint → block id, without storing a fingerprint.
//!
//! The block table already holds every block's fingerprint, so the index is an
//! open-addressing hash table of block ids alone: a lookup hashes the fingerprint, probes
//! slots linearly from its home slot and compares the fingerprint the table holds for each
//! candidate, so a hit is exact. Each slot is 5 bytes, a 32-bit block id and a 1-byte tag
//! (empty, tombstone, or 8 bits of the fingerprint's hash), kept in two arrays: a probe scans
//! tags, and reads an id and the table only when a tag matches (1 in 254 non-matching slots).
//! A removal leaves a tombstone, so it never reads the table.
//!
//! The index does not grow by itself: its owner asks [`DedupIndex::is_full`] before an insert
//! and rebuilds a larger index from the table (a full scan of the table in id order).
//! Capacities are not powers of two (a slot is chosen by multiply-shift), so a rebuild leaves
//! the index [`REBUILT_LOAD`] full and it fills to [`MAX_LOAD`]: 5.7 to 7.2 bytes per block.
//!
//! Block ids beyond `u32::MAX` (a family past 16 TiB of unique data) go to an ordinary map,
//! so dedup stays exact at any size, at the old cost per block for those blocks.

use std::collections::HashMap;

use crate::units::{BlockId, Fingerprint};

/// Tag of a slot that never held an id since the last rebuild: a probe stops here.
const EMPTY: u8 = 0;
/// Tag of a slot whose id was removed: a probe goes on past it, and an insert may reuse it.
const TOMBSTONE: u8 = 1;
/// Tags of slots holding an id are `FIRST_TAG..=255`.
const FIRST_TAG: u8 = 2;

/// Most slots in use (ids and tombstones) before the owner must rebuild: 7/8.
const MAX_LOAD: (usize, usize) = (7, 8);
/// Share of slots holding ids right after a rebuild: 7/10.
const REBUILT_LOAD: (usize, usize) = (7, 10);
/// Fewest slots of a non-empty index.
const MIN_SLOTS: usize = 64;

/// Fingerprint → block id, for blocks whose fingerprint the caller can look up by id.
#[derive(Debug, Clone, Default)]
pub struct DedupIndex {
    tags: Vec<u8>,
    ids: Vec<u32>,
    /// Slots holding an id.
    len: usize,
    tombstones: usize,
    /// Blocks whose id does not fit a slot.
    wide: HashMap<Fingerprint, BlockId>,
}

/// Where a fingerprint's probe starts (from `mix`) and the tag its slot carries.
#[derive(Debug, Clone, Copy)]
struct Hash {
    mix: u64,
    tag: u8,
}

impl Hash {
    fn of(fingerprint: Fingerprint) -> Hash {
        // A BLAKE3 prefix is uniform already; mixing both halves keeps structured
        // fingerprints (tests, hand-made ones) spread over the slots too.
        let mut x = (fingerprint as u64) ^ ((fingerprint >> 64) as u64).rotate_left(32);
        x ^= x >> 30;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 27;
        x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
        let tag_values = u64::from(u8::MAX - FIRST_TAG) + 1;
        Hash {
            mix: x,
            tag: FIRST_TAG + (x % tag_values) as u8,
        }
    }
}

impl DedupIndex {
    /// An empty index with room for `blocks` ids at [`REBUILT_LOAD`].
    pub fn with_room_for(blocks: usize) -> DedupIndex {
        let (num, den) = REBUILT_LOAD;
        let slots = (blocks * den).div_ceil(num).max(MIN_SLOTS);
        DedupIndex {
            tags: vec![EMPTY; slots],
            ids: vec![0; slots],
            ..DedupIndex::default()
        }
    }

    /// Whether one more insert would pass [`MAX_LOAD`]: the owner rebuilds first.
    pub fn is_full(&self) -> bool {
        let (num, den) = MAX_LOAD;
        (self.len + self.tombstones + 1) * den > self.tags.len() * num
    }

    /// Fingerprints indexed.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len + self.wide.len()
    }

    /// Heap bytes held (the wide map estimated from its capacity).
    pub fn memory_bytes(&self) -> usize {
        let wide_slot = std::mem::size_of::<(Fingerprint, BlockId)>() + 1;
        self.tags.capacity()
            + self.ids.capacity() * std::mem::size_of::<u32>()
            + self.wide.capacity() * wide_slot
    }

    /// The block indexed under `fingerprint`; `fingerprint_of` reads an indexed block's
    /// fingerprint from the table.
    pub fn get(
        &self,
        fingerprint: Fingerprint,
        fingerprint_of: impl Fn(BlockId) -> Fingerprint,
    ) -> Option<BlockId> {
        let narrow = self
            .matching_slots(Hash::of(fingerprint))
            .map(|slot| BlockId(u64::from(self.ids[slot])))
            .find(|&id| fingerprint_of(id) == fingerprint);
        narrow.or_else(|| self.wide.get(&fingerprint).copied())
    }

    /// Index `id` under `fingerprint`, unless a block is indexed under it already (that one
    /// stays). Panics if [`Self::is_full`]: the owner rebuilds first.
    pub fn insert(
        &mut self,
        fingerprint: Fingerprint,
        id: BlockId,
        fingerprint_of: impl Fn(BlockId) -> Fingerprint,
    ) {
        if self.wide.contains_key(&fingerprint) {
            return;
        }
        match u32::try_from(id.0) {
            Ok(narrow) => self.insert_narrow(fingerprint, narrow, fingerprint_of),
            Err(_) => {
                if self.get(fingerprint, fingerprint_of).is_none() {
                    self.wide.insert(fingerprint, id);
                }
            }
        }
    }

    /// Remove `id` from under `fingerprint`; nothing if another block (or none) is indexed
    /// under it. Never reads the table.
    pub fn remove(&mut self, fingerprint: Fingerprint, id: BlockId) {
        let Ok(narrow) = u32::try_from(id.0) else {
            if self.wide.get(&fingerprint) == Some(&id) {
                self.wide.remove(&fingerprint);
            }
            return;
        };
        let found = self
            .matching_slots(Hash::of(fingerprint))
            .find(|&slot| self.ids[slot] == narrow);
        if let Some(slot) = found {
            self.tags[slot] = TOMBSTONE;
            self.len -= 1;
            self.tombstones += 1;
        }
    }

    fn insert_narrow(
        &mut self,
        fingerprint: Fingerprint,
        id: u32,
        fingerprint_of: impl Fn(BlockId) -> Fingerprint,
    ) {
        assert!(
            !self.is_full(),
            "dedup index full: rebuild before inserting"
        );
        let hash = Hash::of(fingerprint);
        let mut free = None;
        for slot in self.probe_sequence(hash) {
            match self.tags[slot] {
                EMPTY => {
                    free.get_or_insert(slot);
                    break;
                }
                TOMBSTONE => {
                    free.get_or_insert(slot);
                }
                tag if tag == hash.tag
                    && fingerprint_of(BlockId(u64::from(self.ids[slot]))) == fingerprint =>
                {
                    return;
                }
                _ => {}
            }
        }
        let slot = free.expect("below the load limit a probe reaches an empty slot");
        if self.tags[slot] == TOMBSTONE {
            self.tombstones -= 1;
        }
        self.tags[slot] = hash.tag;
        self.ids[slot] = id;
        self.len += 1;
    }

    /// Slots on `hash`'s probe path whose tag matches, up to the first empty slot.
    fn matching_slots(&self, hash: Hash) -> impl Iterator<Item = usize> + '_ {
        self.probe_sequence(hash)
            .take_while(|&slot| self.tags[slot] != EMPTY)
            .filter(move |&slot| self.tags[slot] == hash.tag)
    }

    /// Every slot once, from `hash`'s home slot on, wrapping around.
    fn probe_sequence(&self, hash: Hash) -> impl Iterator<Item = usize> {
        let slots = self.tags.len();
        // Multiply-shift maps the mix onto any number of slots without a division.
        let home = ((u128::from(hash.mix) * slots as u128) >> 64) as usize;
        (home..slots).chain(0..home)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in block table: id → fingerprint.
    #[derive(Default)]
    struct Table(HashMap<BlockId, Fingerprint>);

    impl Table {
        fn fingerprint_of(&self) -> impl Fn(BlockId) -> Fingerprint + '_ {
            |id| self.0[&id]
        }

        fn add(&mut self, index: &mut DedupIndex, id: u64, fingerprint: Fingerprint) {
            self.0.insert(BlockId(id), fingerprint);
            index.insert(fingerprint, BlockId(id), self.fingerprint_of());
        }

        fn find(&self, index: &DedupIndex, fingerprint: Fingerprint) -> Option<BlockId> {
            index.get(fingerprint, self.fingerprint_of())
        }
    }

    #[test]
    fn finds_exactly_what_was_inserted() {
        let mut table = Table::default();
        let mut index = DedupIndex::with_room_for(1000);
        for id in 0..1000 {
            table.add(&mut index, id, u128::from(id) * 7 + 1);
        }
        assert_eq!(index.len(), 1000);
        for id in 0..1000 {
            assert_eq!(
                table.find(&index, u128::from(id) * 7 + 1),
                Some(BlockId(id))
            );
            assert_eq!(table.find(&index, u128::from(id) * 7 + 2), None);
        }
    }

    #[test]
    fn a_fingerprint_keeps_its_first_block() {
        let mut table = Table::default();
        let mut index = DedupIndex::with_room_for(4);
        table.add(&mut index, 1, 99);
        table.add(&mut index, 2, 99);
        assert_eq!(table.find(&index, 99), Some(BlockId(1)));
        index.remove(99, BlockId(2));
        assert_eq!(
            table.find(&index, 99),
            Some(BlockId(1)),
            "not the indexed block"
        );
        index.remove(99, BlockId(1));
        assert_eq!(table.find(&index, 99), None);
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn removal_keeps_later_blocks_of_the_probe_path_reachable() {
        let mut table = Table::default();
        let mut index = DedupIndex::with_room_for(50);
        // Fingerprints equal in their mixed halves share a home slot and a tag.
        let colliding = |i: u64| (u128::from(i) << 64) | u128::from(i.rotate_left(32));
        for i in 1..=20 {
            table.add(&mut index, i, colliding(i));
        }
        assert_eq!(Hash::of(colliding(1)).mix, Hash::of(colliding(2)).mix);
        for i in (1..=20).step_by(2) {
            index.remove(colliding(i), BlockId(i));
        }
        for i in 1..=20u64 {
            let expected = i.is_multiple_of(2).then_some(BlockId(i));
            assert_eq!(table.find(&index, colliding(i)), expected, "block {i}");
        }
        // Tombstones are reused by inserts.
        table.add(&mut index, 21, colliding(21));
        assert_eq!(index.tombstones, 9);
    }

    #[test]
    fn fills_to_the_load_limit() {
        let mut table = Table::default();
        let mut index = DedupIndex::with_room_for(700);
        assert_eq!(index.tags.len(), 1000);
        let mut id = 0;
        while !index.is_full() {
            table.add(&mut index, id, u128::from(id) << 70 | 5);
            id += 1;
        }
        assert_eq!(index.len(), 875);
    }

    #[test]
    fn ids_beyond_u32_stay_exact() {
        let mut table = Table::default();
        let mut index = DedupIndex::with_room_for(4);
        let big = u64::from(u32::MAX) + 1;
        table.add(&mut index, big, 5);
        table.add(&mut index, 3, 5);
        table.add(&mut index, 4, 6);
        table.add(&mut index, big + 1, 6);
        assert_eq!(table.find(&index, 5), Some(BlockId(big)));
        assert_eq!(table.find(&index, 6), Some(BlockId(4)));
        assert_eq!(index.len(), 2);
        index.remove(5, BlockId(big));
        assert_eq!(table.find(&index, 5), None);
    }
}
