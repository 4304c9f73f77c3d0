//! Cheap pseudo-random numbers for offsets, and the write payloads ([`DataGen`]).
//!
//! By default write data is non-zero and never repeats, so that a compressing or deduplicating
//! target cannot report better numbers than real data would get. We use wyrand: its state is a
//! 64-bit counter, so a stream never revisits a state within 2^64 words, and each 8-byte word
//! costs one 128-bit multiply (several GB/s per core, cheaper than copying from a pool). Every
//! word has its low bit forced to 1, so no word (and no sector) is ever zero.
//!
//! A [`DataPattern`] makes data like a database's instead: per 4 KiB block (the unit weft
//! deduplicates and compresses), `compressible_pct` of the bytes are a repeated filler that
//! lz4 squeezes away, and `dedupable_pct` of the blocks are copies of one of
//! [`DEDUP_POOL_BLOCKS`] blocks shared by every queue of the run. Still no block is ever zero,
//! and a block that is not a copy is unique even when fully compressible.

use serde::{Deserialize, Serialize};

/// wyrand's state increment.
const WY_INC: u64 = 0xa076_1d64_78bd_642f;
/// wyrand's output mixer constant.
const WY_MIX: u64 = 0xe703_7ed1_a0b4_28db;

/// Blocks are patterned in units of this size: weft's block, which it deduplicates and
/// compresses one at a time (as most arrays and ZFS/btrfs at their usual record sizes do).
pub(crate) const PATTERN_BLOCK_BYTES: usize = 4096;
/// Distinct blocks that duplicates are drawn from. 1024 blocks (4 MiB) is enough that copies are
/// not all one block, and few enough that a deduplicating target's index sees every one of them
/// again within the first few thousand writes.
pub(crate) const DEDUP_POOL_BLOCKS: u64 = 1024;
/// Random bytes a block keeps even when 100% compressible, so that unique blocks stay unique.
const UNIQUE_BYTES_MIN: usize = 16;
/// The compressible part of a block: an 8-byte non-zero word repeated (never zero, so a target's
/// zero detection does not count it as a hole; lz4 and zstd shrink it to a few bytes).
const FILLER_WORD: u64 = 0x5746_4554_4245_4e43; // "CNEBTEFW" in little-endian bytes

/// What written data looks like: the share of each block that compresses and the share of
/// blocks that duplicate another. Both 0 (the default): unique, incompressible data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DataPattern {
    /// Percentage of each 4 KiB block that is a repeated filler (compresses away).
    pub(crate) compressible_pct: u8,
    /// Percentage of written 4 KiB blocks that are copies of a block written before.
    pub(crate) dedupable_pct: u8,
}

/// The write data of one queue: a [`DataPattern`] over a private random stream, plus the seed of
/// the run's shared pool of duplicate blocks.
#[derive(Debug, Clone)]
pub(crate) struct DataGen {
    rng: Rng,
    pattern: DataPattern,
    pool_seed: u64,
}

impl DataGen {
    /// `seed` differs per queue; `pool_seed` is the same for the whole run, so that duplicates
    /// written by different queues and points are copies of the same blocks.
    pub(crate) fn new(seed: u64, pattern: DataPattern, pool_seed: u64) -> Self {
        assert!(pattern.compressible_pct <= 100 && pattern.dedupable_pct <= 100);
        DataGen {
            rng: Rng::new(seed),
            pattern,
            pool_seed,
        }
    }

    /// Fills `buf` (one I/O's payload) block by block.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        if self.pattern == DataPattern::default() {
            self.rng.fill(buf);
            return;
        }
        for block in buf.chunks_mut(PATTERN_BLOCK_BYTES) {
            if self.rng.percent(self.pattern.dedupable_pct) {
                let which = self.rng.below(DEDUP_POOL_BLOCKS);
                let mut pool = pool_rng(self.pool_seed, which);
                fill_block(&mut pool, self.pattern.compressible_pct, block);
            } else {
                fill_block(&mut self.rng, self.pattern.compressible_pct, block);
            }
        }
    }
}

/// The stream that generates pool block `which`.
fn pool_rng(pool_seed: u64, which: u64) -> Rng {
    Rng::new(pool_seed ^ which.wrapping_mul(0x9e37_79b9_7f4a_7c15))
}

/// One block: random bytes first, then the filler for `compressible_pct` of the block.
fn fill_block(rng: &mut Rng, compressible_pct: u8, block: &mut [u8]) {
    let random_bytes = block.len() * usize::from(100 - compressible_pct) / 100;
    let random_bytes = random_bytes
        .max(UNIQUE_BYTES_MIN)
        .next_multiple_of(8)
        .min(block.len());
    let (random, filler) = block.split_at_mut(random_bytes);
    rng.fill(random);
    let word = FILLER_WORD.to_le_bytes();
    for (i, b) in filler.iter_mut().enumerate() {
        *b = word[i % 8];
    }
}

/// A wyrand stream. Not cryptographic; fast and well distributed.
#[derive(Debug, Clone)]
pub(crate) struct Rng {
    state: u64,
}

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // Spread small seeds (0, 1, 2 per worker) apart with one round of splitmix64.
        let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        Rng {
            state: z ^ (z >> 31),
        }
    }

    #[inline]
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(WY_INC);
        let t = u128::from(self.state) * u128::from(self.state ^ WY_MIX);
        #[allow(clippy::cast_possible_truncation)] // folding 128 bits into 64 on purpose
        let folded = ((t >> 64) as u64) ^ (t as u64);
        folded
    }

    /// Uniform in `0..n` (Lemire's multiply-shift; bias below 2^-32 for our ranges).
    #[inline]
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        #[allow(clippy::cast_possible_truncation)] // the high half of a 64x64 product fits
        let r = ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64;
        r
    }

    /// Percent check: true with probability `pct`/100.
    #[inline]
    pub(crate) fn percent(&mut self, pct: u8) -> bool {
        self.below(100) < u64::from(pct)
    }

    /// Fills `buf` with non-zero, non-repeating data.
    pub(crate) fn fill(&mut self, buf: &mut [u8]) {
        let mut chunks = buf.chunks_exact_mut(8);
        for c in &mut chunks {
            c.copy_from_slice(&(self.next_u64() | 1).to_le_bytes());
        }
        let rest = chunks.into_remainder();
        if !rest.is_empty() {
            let w = (self.next_u64() | 1).to_le_bytes();
            rest.copy_from_slice(&w[..rest.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn blocks_of(pattern: DataPattern, count: usize) -> Vec<Vec<u8>> {
        let mut data = DataGen::new(3, pattern, 99);
        let mut buf = vec![0u8; PATTERN_BLOCK_BYTES * count];
        data.fill(&mut buf);
        buf.chunks(PATTERN_BLOCK_BYTES)
            .map(<[u8]>::to_vec)
            .collect()
    }

    #[test]
    fn compressible_share_of_each_block_is_filler() {
        for pct in [0u8, 25, 50, 90, 100] {
            let pattern = DataPattern {
                compressible_pct: pct,
                dedupable_pct: 0,
            };
            let blocks = blocks_of(pattern, 64);
            let unique: HashSet<&Vec<u8>> = blocks.iter().collect();
            assert_eq!(unique.len(), 64, "{pct}%: blocks repeat");
            for b in &blocks {
                assert!(b.iter().any(|&x| x != 0));
                let filler = b
                    .chunks(8)
                    .rev()
                    .take_while(|w| *w == FILLER_WORD.to_le_bytes())
                    .count()
                    * 8;
                let want = PATTERN_BLOCK_BYTES * usize::from(pct) / 100;
                assert!(
                    filler.abs_diff(want) <= UNIQUE_BYTES_MIN + 8,
                    "{pct}%: {filler} filler bytes, want about {want}"
                );
            }
        }
    }

    #[test]
    fn dedupable_share_of_blocks_repeats_across_queues() {
        let pattern = DataPattern {
            compressible_pct: 0,
            dedupable_pct: 40,
        };
        let pool: HashSet<Vec<u8>> = (0..DEDUP_POOL_BLOCKS)
            .map(|which| {
                let mut b = vec![0u8; PATTERN_BLOCK_BYTES];
                fill_block(&mut pool_rng(99, which), 0, &mut b);
                b
            })
            .collect();
        let count = 4000;
        let blocks = blocks_of(pattern, count);
        let copies = blocks.iter().filter(|b| pool.contains(*b)).count();
        #[allow(clippy::cast_precision_loss)]
        let share = copies as f64 / count as f64;
        assert!(
            (0.36..=0.44).contains(&share),
            "{share} of blocks are copies"
        );
        let unique: HashSet<&Vec<u8>> = blocks.iter().filter(|b| !pool.contains(*b)).collect();
        assert_eq!(unique.len(), count - copies, "non-copies are unique");
        // Another queue (another seed) draws copies of the same pool blocks.
        let mut other = DataGen::new(4, pattern, 99);
        let mut buf = vec![0u8; PATTERN_BLOCK_BYTES * 200];
        other.fill(&mut buf);
        let shared = buf
            .chunks(PATTERN_BLOCK_BYTES)
            .filter(|b| pool.contains(*b))
            .count();
        assert!(shared > 50, "only {shared} of 200 blocks are pool copies");
    }

    #[test]
    fn default_pattern_is_the_plain_random_stream() {
        let mut a = DataGen::new(5, DataPattern::default(), 1);
        let mut b = Rng::new(5);
        let (mut x, mut y) = (vec![0u8; 8192], vec![0u8; 8192]);
        a.fill(&mut x);
        b.fill(&mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn written_blocks_are_nonzero_and_distinct() {
        let mut rng = Rng::new(7);
        let mut seen = HashSet::new();
        let mut block = vec![0u8; 4096];
        for _ in 0..2000 {
            rng.fill(&mut block);
            assert!(block.chunks(8).all(|w| w.iter().any(|&b| b != 0)));
            assert!(seen.insert(block[..16].to_vec()), "a block repeated");
        }
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = Rng::new(1);
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(rng.below(n) < n);
            }
        }
    }
}
