//! Cheap pseudo-random numbers for offsets and write payloads.
//!
//! Write data must be non-zero and must not repeat, so that a compressing or deduplicating target
//! cannot report better numbers than real data would get. We use wyrand: its state is a 64-bit
//! counter, so a stream never revisits a state within 2^64 words, and each 8-byte word costs one
//! 128-bit multiply (several GB/s per core, cheaper than copying from a pool). Every word has its
//! low bit forced to 1, so no word (and no sector) is ever zero.

/// wyrand's state increment.
const WY_INC: u64 = 0xa076_1d64_78bd_642f;
/// wyrand's output mixer constant.
const WY_MIX: u64 = 0xe703_7ed1_a0b4_28db;

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
