//! Space accounting of volumes, snapshots and families: what an image maps, what it shares
//! with the rest of its family, and what deleting it would free. Computed on demand from the
//! maps and the block table (a pass over the image's pages), never stored. No I/O here.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::block_map::{Mapping, PAGE_ENTRIES};
use crate::family::Family;
use crate::units::{BlockId, LayerId, BLOCK_SIZE_U64};

/// Space of one volume or snapshot. Logical figures count 4 KiB blocks as the host sees them;
/// `unique_stored_bytes` counts bytes on disk after zero elimination, dedup and compression.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct SpaceUsage {
    /// Blocks that read as written data or written zeroes, through the whole chain.
    pub mapped_bytes: u64,
    /// Of those, blocks written in the image's own layer (a clone's or volume's changes since
    /// its base; all of a snapshot's own layer).
    pub own_bytes: u64,
    /// Of the mapped blocks, those that read as zeroes (no space used).
    pub zero_bytes: u64,
    /// Mapped blocks whose stored block another layer of the family also references (the
    /// base a clone reads through, dedup hits with other members).
    pub shared_bytes: u64,
    /// Stored bytes that deleting this image would free now.
    pub unique_stored_bytes: u64,
}

/// Data reduction of one family: its layers' own entries (each block of each layer counted
/// once, not once per clone that reads it) against the bytes stored for them.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FamilyReduction {
    /// 4096 × entries of all layers (written data or zeroes).
    pub logical_bytes: u64,
    /// 4096 × entries that are zeroes: eliminated, nothing stored.
    pub zero_bytes: u64,
    /// 4096 × (references to stored blocks − stored blocks): saved by dedup.
    pub dedup_saved_bytes: u64,
    /// 4096 × stored blocks − stored bytes: saved by compression.
    pub compression_saved_bytes: u64,
    /// Bytes of live stored blocks, after compression.
    pub stored_bytes: u64,
    pub stored_blocks: u64,
    /// logical / stored; absent when nothing is stored.
    pub ratio: Option<f64>,
}

/// What deleting an image does to its own layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeleteEffect {
    /// The layer is dropped: every reference it holds is released.
    Drop,
    /// The layer is merged into `into`: only references `into` shadows are released.
    MergeInto(LayerId),
    /// The layer stays (clones use it): nothing is freed.
    Keep,
}

/// Raw bytes of the chunk stores that host writes never fill: two segments being sealed
/// plus what GC moves when pressed (it writes blocks' new segments before it deletes the old
/// ones, so a store full to the last byte could never free any). Writes are refused (ENOSPC)
/// when they would reach into it. Must stay the reserve `Engine::admit` keeps; the capacity
/// report (`weft status`) subtracts it from the free space.
pub fn write_reserve_bytes(config: &crate::EngineConfig) -> u64 {
    2 * config.segment_size_bytes as u64 + crate::gc::GC_PRESSED_MOVE_BYTES_MAX
}

/// Space of the image that reads through `chain` (its own layer first), in one go. The
/// engine runs the same steps in slices of pages with its lock released in between (see
/// `catalog::report`), so that reporting never stalls I/O for long.
pub fn image_usage(family: &Family, chain: &[LayerId], on_delete: DeleteEffect) -> SpaceUsage {
    let Some(&own) = chain.first() else {
        return SpaceUsage::default();
    };
    let pages = pages_of(family, chain);
    let own_pages = pages_of(family, &[own]);
    let mut own_refs = HashMap::new();
    count_own_refs(family, own, &own_pages, &mut own_refs);
    let mut usage = SpaceUsage::default();
    add_usage(
        family,
        chain,
        &pages,
        &own_refs,
        &Buffered::default(),
        &mut usage,
    );
    let mut released = HashMap::new();
    count_released(family, own, on_delete, &own_pages, &mut released);
    let released: Vec<(BlockId, u32)> = released.into_iter().collect();
    usage.unique_stored_bytes = freed_bytes(family, &released);
    usage
}

/// The allocated page numbers of any layer of `chain`, sorted.
pub fn pages_of(family: &Family, chain: &[LayerId]) -> Vec<u64> {
    let mut pages: HashSet<u64> = HashSet::new();
    for map in chain.iter().filter_map(|l| family.layers.get(l)) {
        pages.extend(map.page_numbers());
    }
    let mut pages: Vec<u64> = pages.into_iter().collect();
    pages.sort_unstable();
    pages
}

/// Count, over `pages` of the own layer, its references to blocks whose refcount is above
/// one (a block with one reference is the layer's alone when the layer maps it).
pub fn count_own_refs(
    family: &Family,
    own: LayerId,
    pages: &[u64],
    refs: &mut HashMap<BlockId, u32>,
) {
    let Some(map) = family.layers.get(&own) else {
        return;
    };
    for raw in pages.iter().filter_map(|&p| map.raw_page(p)) {
        for &entry in raw.iter() {
            if let Mapping::Block(b) = Mapping::decode(entry) {
                if family.table.get(b).is_some_and(|e| e.refcount > 1) {
                    *refs.entry(b).or_default() += 1;
                }
            }
        }
    }
}

/// Acknowledged writes not yet destaged, of the layers of a chain: LBA → depth of the
/// topmost chain layer that has one buffered.
#[derive(Debug, Default)]
pub struct Buffered {
    lbas: HashMap<u64, usize>,
    pages: HashSet<u64>,
}

impl Buffered {
    /// From each chain layer's buffered LBAs, top layer first.
    pub fn new(per_layer: impl IntoIterator<Item = impl IntoIterator<Item = u64>>) -> Buffered {
        let mut b = Buffered::default();
        for (depth, lbas) in per_layer.into_iter().enumerate() {
            for lba in lbas {
                b.lbas.entry(lba).or_insert(depth);
                b.pages.insert(lba / PAGE_ENTRIES as u64);
            }
        }
        b
    }

    pub fn pages(&self) -> impl Iterator<Item = u64> + '_ {
        self.pages.iter().copied()
    }
}

/// Add what the image maps in `pages` to `usage` (all but `unique_stored_bytes`). Buffered
/// writes count as mapped (data, not shared) where no layer above them maps the block.
pub fn add_usage(
    family: &Family,
    chain: &[LayerId],
    pages: &[u64],
    own_refs: &HashMap<BlockId, u32>,
    buffered: &Buffered,
    usage: &mut SpaceUsage,
) {
    let maps: Vec<_> = chain.iter().map(|l| family.layers.get(l)).collect();
    for &page_no in pages {
        let raw: Vec<Option<&[u64; PAGE_ENTRIES]>> = maps
            .iter()
            .map(|m| m.and_then(|m| m.raw_page(page_no)))
            .collect();
        let page_buffered = buffered.pages.contains(&page_no);
        for slot in 0..PAGE_ENTRIES {
            let mapped = raw.iter().enumerate().find_map(|(depth, page)| {
                let m = Mapping::decode((*page)?[slot]);
                (m != Mapping::Absent).then_some((depth, m))
            });
            let lba = page_no * PAGE_ENTRIES as u64 + slot as u64;
            let in_buffer = if page_buffered {
                buffered.lbas.get(&lba).copied()
            } else {
                None
            };
            let (depth, mapping) = match (in_buffer, mapped) {
                (Some(b), Some((d, _))) if b <= d => (b, None),
                (Some(b), None) => (b, None),
                (_, Some((d, m))) => (d, Some(m)),
                (None, None) => continue,
            };
            usage.mapped_bytes += BLOCK_SIZE_U64;
            if depth == 0 {
                usage.own_bytes += BLOCK_SIZE_U64;
            }
            let Some(mapping) = mapping else {
                continue;
            };
            match mapping {
                Mapping::Zero => usage.zero_bytes += BLOCK_SIZE_U64,
                Mapping::Block(b) => {
                    let shared = depth > 0
                        || family.table.get(b).is_some_and(|e| {
                            e.refcount > 1 && own_refs.get(&b).copied().unwrap_or(0) < e.refcount
                        });
                    if shared {
                        usage.shared_bytes += BLOCK_SIZE_U64;
                    }
                }
                Mapping::Absent => {}
            }
        }
    }
}

/// Count, over `pages` of `layer`, the references deleting it would release (`effect`).
pub fn count_released(
    family: &Family,
    layer: LayerId,
    effect: DeleteEffect,
    pages: &[u64],
    released: &mut HashMap<BlockId, u32>,
) {
    let Some(map) = family.layers.get(&layer) else {
        return;
    };
    let child = match effect {
        DeleteEffect::Keep => return,
        DeleteEffect::Drop => None,
        DeleteEffect::MergeInto(into) => Some(family.layers.get(&into)),
    };
    for &page_no in pages {
        let Some(raw) = map.raw_page(page_no) else {
            continue;
        };
        for (slot, &entry) in raw.iter().enumerate() {
            let Mapping::Block(b) = Mapping::decode(entry) else {
                continue;
            };
            let lba = page_no * PAGE_ENTRIES as u64 + slot as u64;
            let shadowed = match child {
                None => true,
                Some(None) => false,
                Some(Some(c)) => c.get(crate::units::Lba(lba)) != Mapping::Absent,
            };
            if shadowed {
                *released.entry(b).or_default() += 1;
            }
        }
    }
}

/// Stored bytes of the blocks whose every reference is among `released`.
pub fn freed_bytes(family: &Family, released: &[(BlockId, u32)]) -> u64 {
    released
        .iter()
        .filter_map(|&(b, n)| {
            let e = family.table.get(b)?;
            (e.refcount <= n).then_some(u64::from(e.location.stored_len_bytes))
        })
        .sum()
}

/// Data reduction of a family.
pub fn family_reduction(family: &Family) -> FamilyReduction {
    let mut r = FamilyReduction::default();
    let mut block_refs = 0u64;
    for map in family.layers.values() {
        let zeroes = map.zero_entries();
        r.logical_bytes += map.present_entries() * BLOCK_SIZE_U64;
        r.zero_bytes += zeroes * BLOCK_SIZE_U64;
        block_refs += map.present_entries() - zeroes;
    }
    r.stored_blocks = family.table.live_blocks();
    r.stored_bytes = family.table.stored_bytes();
    r.dedup_saved_bytes = block_refs.saturating_sub(r.stored_blocks) * BLOCK_SIZE_U64;
    r.compression_saved_bytes = (r.stored_blocks * BLOCK_SIZE_U64).saturating_sub(r.stored_bytes);
    r.ratio = (r.stored_bytes > 0).then(|| r.logical_bytes as f64 / r.stored_bytes as f64);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reduce::Reduced;
    use crate::units::{FamilyId, SegmentId};

    fn write(f: &mut Family, layer: u64, lba: u64, fingerprint: u128) {
        let mut next = 100;
        let mut alloc = |_| {
            next += 1;
            SegmentId(next)
        };
        let raw = vec![fingerprint as u8; 4096];
        let reduced = Reduced::Data {
            fingerprint,
            compressed: None,
            crc32c: crc32c::crc32c(&raw),
        };
        f.apply_block(LayerId(layer), lba, &reduced, &raw, 1, &mut alloc, 1 << 20);
    }

    #[test]
    fn buffered_writes_count_as_mapped_unless_a_layer_above_maps_the_block() {
        let mut f = Family::new(FamilyId(1));
        write(&mut f, 1, 0, 10); // base
        write(&mut f, 2, 1, 11); // own layer
                                 // Buffered: lba 5 in the own layer, lba 1 in the base (the own layer shadows it),
                                 // lba 0 in the own layer (shadows the base's mapped block).
        let buffered = Buffered::new([vec![5u64, 0], vec![1u64]]);
        let chain = [LayerId(2), LayerId(1)];
        let mut pages = pages_of(&f, &chain);
        pages.extend(buffered.pages());
        pages.sort_unstable();
        pages.dedup();
        let mut usage = SpaceUsage::default();
        add_usage(&f, &chain, &pages, &HashMap::new(), &buffered, &mut usage);
        assert_eq!(usage.mapped_bytes, 3 * 4096, "lbas 0, 1, 5");
        assert_eq!(
            usage.own_bytes,
            3 * 4096,
            "all three resolve in the own layer"
        );
        assert_eq!(usage.shared_bytes, 0);
    }

    #[test]
    fn a_clone_costs_its_own_blocks_and_shares_its_base() {
        let mut f = Family::new(FamilyId(1));
        // Base layer 1 (a snapshot): 4 distinct blocks. Clone top 2 over it rewrites one lba
        // with new data and one with a block the base already has.
        for lba in 0..4 {
            write(&mut f, 1, lba, 10 + u128::from(lba));
        }
        write(&mut f, 2, 0, 99);
        write(&mut f, 2, 1, 13);
        f.graph.set_parent(LayerId(1), None);
        f.graph.set_parent(LayerId(2), Some(LayerId(1)));
        let clone = image_usage(&f, &[LayerId(2), LayerId(1)], DeleteEffect::Drop);
        assert_eq!(clone.mapped_bytes, 4 * 4096);
        assert_eq!(clone.own_bytes, 2 * 4096);
        // lba 1 (dedup with base lba 3), lbas 2 and 3 (read from the base) are shared.
        assert_eq!(clone.shared_bytes, 3 * 4096);
        assert_eq!(
            clone.unique_stored_bytes, 4096,
            "only block 99 is the clone's alone"
        );
        let base = image_usage(&f, &[LayerId(1)], DeleteEffect::MergeInto(LayerId(2)));
        // Merging into the clone releases the base's lbas 0 and 1; block 10 (lba 0) has no
        // other user, block 11 (lba 1) neither.
        assert_eq!(base.unique_stored_bytes, 2 * 4096);
        let r = family_reduction(&f);
        assert_eq!(r.logical_bytes, 6 * 4096);
        assert_eq!(r.stored_blocks, 5);
        assert_eq!(r.dedup_saved_bytes, 4096);
    }
}
