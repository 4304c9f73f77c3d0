//! Block map of one layer: LBA → mapping, in lazily allocated pages (thin).
//!
//! A layer stores only what was written to it. `Absent` means "look in the layer below" (or,
//! at the bottom, a hole that reads as zeroes); `Zero` means the block was written with zeroes
//! or zeroed, and stops the lookup. Memory is 8 bytes per entry of an allocated page; a page
//! is freed when its last entry becomes absent. Pages are shared copy-on-write, so cloning a
//! map (a checkpoint's snapshot) costs a pointer per page, and a page is copied only when it
//! is written while a clone still holds it. No I/O here.

use std::collections::HashMap;
use std::sync::Arc;

use crate::units::{BlockId, Lba};

/// Entries per page: 512 × 8 bytes = one 4 KiB page covering 2 MiB of the volume.
pub const PAGE_ENTRIES: usize = 512;
const PAGE_ENTRIES_U64: u64 = 512;

const ENCODED_ABSENT: u64 = 0;
const ENCODED_ZERO: u64 = 1;
/// Block ids are stored shifted by this, past the two sentinels.
const ENCODED_BLOCK_BASE: u64 = 2;

/// What a layer says about one LBA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    Absent,
    Zero,
    Block(BlockId),
}

impl Mapping {
    fn encode(self) -> u64 {
        match self {
            Mapping::Absent => ENCODED_ABSENT,
            Mapping::Zero => ENCODED_ZERO,
            Mapping::Block(b) => b.0 + ENCODED_BLOCK_BASE,
        }
    }

    /// Decode a raw entry of [`BlockMap::raw_page`].
    pub fn decode(raw: u64) -> Mapping {
        match raw {
            ENCODED_ABSENT => Mapping::Absent,
            ENCODED_ZERO => Mapping::Zero,
            other => Mapping::Block(BlockId(other - ENCODED_BLOCK_BASE)),
        }
    }
}

#[derive(Debug, Clone)]
struct Page {
    entries: Arc<[u64; PAGE_ENTRIES]>,
    present: u32,
}

/// The map of one layer.
#[derive(Debug, Clone, Default)]
pub struct BlockMap {
    pages: HashMap<u64, Page>,
    present_entries: u64,
    zero_entries: u64,
}

impl BlockMap {
    pub fn new() -> BlockMap {
        BlockMap::default()
    }

    pub fn get(&self, lba: Lba) -> Mapping {
        let (page_no, slot) = split(lba);
        match self.pages.get(&page_no) {
            Some(page) => Mapping::decode(page.entries[slot]),
            None => Mapping::Absent,
        }
    }

    /// Set one entry; returns what it replaced (so the caller can release a block reference).
    pub fn set(&mut self, lba: Lba, mapping: Mapping) -> Mapping {
        let (page_no, slot) = split(lba);
        let raw = mapping.encode();
        if raw == ENCODED_ABSENT {
            let Some(page) = self.pages.get_mut(&page_no) else {
                return Mapping::Absent;
            };
            let old = std::mem::replace(&mut Arc::make_mut(&mut page.entries)[slot], raw);
            if old == ENCODED_ZERO {
                self.zero_entries -= 1;
            }
            if old != ENCODED_ABSENT {
                page.present -= 1;
                self.present_entries -= 1;
                if page.present == 0 {
                    self.pages.remove(&page_no);
                }
            }
            return Mapping::decode(old);
        }
        let page = self.pages.entry(page_no).or_insert_with(|| Page {
            entries: Arc::new([ENCODED_ABSENT; PAGE_ENTRIES]),
            present: 0,
        });
        let old = std::mem::replace(&mut Arc::make_mut(&mut page.entries)[slot], raw);
        if old == ENCODED_ABSENT {
            page.present += 1;
            self.present_entries += 1;
        }
        self.zero_entries =
            self.zero_entries + u64::from(raw == ENCODED_ZERO) - u64::from(old == ENCODED_ZERO);
        Mapping::decode(old)
    }

    /// LBAs in `[start, end)` that are not absent, in no particular order; visits only
    /// allocated pages, so clearing a huge empty range is cheap.
    pub fn present_in(&self, start: Lba, end: Lba) -> Vec<(Lba, Mapping)> {
        let mut out = Vec::new();
        if start >= end {
            return out;
        }
        let first_page = start.0 / PAGE_ENTRIES_U64;
        let last_page = (end.0 - 1) / PAGE_ENTRIES_U64;
        let mut visit = |page_no: u64, page: &Page| {
            for (slot, &raw) in page.entries.iter().enumerate() {
                let lba = page_no * PAGE_ENTRIES_U64 + slot as u64;
                if raw != ENCODED_ABSENT && lba >= start.0 && lba < end.0 {
                    out.push((Lba(lba), Mapping::decode(raw)));
                }
            }
        };
        if last_page - first_page < self.pages.len() as u64 {
            for page_no in first_page..=last_page {
                if let Some(page) = self.pages.get(&page_no) {
                    visit(page_no, page);
                }
            }
        } else {
            for (&page_no, page) in &self.pages {
                if page_no >= first_page && page_no <= last_page {
                    visit(page_no, page);
                }
            }
        }
        out
    }

    /// The raw entries of one allocated page (decode with [`Mapping::decode`]).
    pub fn raw_page(&self, page_no: u64) -> Option<&[u64; PAGE_ENTRIES]> {
        self.pages.get(&page_no).map(|p| &*p.entries)
    }

    /// Numbers of the allocated pages, in no particular order.
    pub fn page_numbers(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.keys().copied()
    }

    /// Every entry that is not absent, as (lba, mapping), in no particular order.
    pub fn entries(&self) -> impl Iterator<Item = (u64, Mapping)> + '_ {
        self.pages.iter().flat_map(|(&page_no, page)| {
            page.entries
                .iter()
                .enumerate()
                .filter(|(_, &raw)| raw != ENCODED_ABSENT)
                .map(move |(slot, &raw)| {
                    (
                        page_no * PAGE_ENTRIES_U64 + slot as u64,
                        Mapping::decode(raw),
                    )
                })
        })
    }

    /// Number of entries that are not absent.
    pub fn present_entries(&self) -> u64 {
        self.present_entries
    }

    /// Number of entries that read as zero (kept as a count: stats never scan the map).
    pub fn zero_entries(&self) -> u64 {
        self.zero_entries
    }

    pub fn allocated_pages(&self) -> usize {
        self.pages.len()
    }

    /// Every allocated page as (page number, raw entries), for checkpoints; sorted by page.
    pub fn raw_pages(&self) -> Vec<(u64, &[u64; PAGE_ENTRIES])> {
        let mut pages: Vec<_> = self
            .pages
            .iter()
            .map(|(&no, p)| (no, &*p.entries))
            .collect();
        pages.sort_unstable_by_key(|(no, _)| *no);
        pages
    }

    /// Rebuild from checkpointed raw pages.
    pub fn from_raw_pages(pages: Vec<(u64, Box<[u64; PAGE_ENTRIES]>)>) -> BlockMap {
        let mut map = BlockMap::new();
        for (page_no, entries) in pages {
            let present = entries.iter().filter(|&&e| e != ENCODED_ABSENT).count() as u32;
            if present > 0 {
                map.present_entries += u64::from(present);
                map.zero_entries += entries.iter().filter(|&&e| e == ENCODED_ZERO).count() as u64;
                map.pages.insert(
                    page_no,
                    Page {
                        entries: Arc::from(entries),
                        present,
                    },
                );
            }
        }
        map
    }
}

fn split(lba: Lba) -> (u64, usize) {
    (
        lba.0 / PAGE_ENTRIES_U64,
        (lba.0 % PAGE_ENTRIES_U64) as usize,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn unwritten_is_absent_and_pages_are_freed() {
        let mut map = BlockMap::new();
        assert_eq!(map.get(Lba(7)), Mapping::Absent);
        assert_eq!(map.set(Lba(7), Mapping::Block(BlockId(0))), Mapping::Absent);
        assert_eq!(map.set(Lba(7), Mapping::Zero), Mapping::Block(BlockId(0)));
        assert_eq!(map.allocated_pages(), 1);
        assert_eq!(map.set(Lba(7), Mapping::Absent), Mapping::Zero);
        assert_eq!(map.allocated_pages(), 0);
        assert_eq!(map.present_entries(), 0);
    }

    proptest! {
        #[test]
        fn map_matches_model(ops in proptest::collection::vec((0u64..5000, 0u8..4, 0u64..100), 1..400)) {
            let mut map = BlockMap::new();
            let mut model: BTreeMap<u64, Mapping> = BTreeMap::new();
            for (lba, kind, id) in ops {
                let m = match kind { 0 => Mapping::Absent, 1 => Mapping::Zero, _ => Mapping::Block(BlockId(id)) };
                let old = map.set(Lba(lba), m);
                let model_old = if m == Mapping::Absent { model.remove(&lba) } else { model.insert(lba, m) };
                prop_assert_eq!(old, model_old.unwrap_or(Mapping::Absent));
            }
            prop_assert_eq!(map.present_entries(), model.len() as u64);
            let zeroes = model.values().filter(|&&m| m == Mapping::Zero).count() as u64;
            prop_assert_eq!(map.zero_entries(), zeroes);
            let mut present = map.present_in(Lba(100), Lba(4000));
            present.sort_by_key(|(l, _)| *l);
            let expected: Vec<_> = model.range(100..4000).map(|(&l, &m)| (Lba(l), m)).collect();
            prop_assert_eq!(present, expected);
            let rebuilt = BlockMap::from_raw_pages(map.raw_pages().into_iter().map(|(n, e)| (n, Box::new(*e))).collect());
            for lba in 0..5000 { prop_assert_eq!(rebuilt.get(Lba(lba)), map.get(Lba(lba))); }
            prop_assert_eq!(rebuilt.zero_entries(), zeroes);
        }
    }
}
