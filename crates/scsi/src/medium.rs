//! What a logical unit's storage is and how it fails, as the command set sees it: its
//! [`Geometry`] and the [`MediumError`]s it returns. A leaf: it depends on nothing else in
//! this crate, so the decoders, the limits and the sense mapping can all use it without
//! reaching up into [`crate::lun`].

/// Errors a logical unit's storage reports. [`crate::execute`] maps each to sense data in one
/// place (`sense::medium_error_sense`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MediumError {
    /// The storage failed: MEDIUM ERROR (reads and writes) or HARDWARE ERROR (the rest).
    #[error("storage i/o error: {0}")]
    Io(String),
    /// No space to allocate blocks for a write: DATA PROTECT, SPACE ALLOCATION FAILED WRITE
    /// PROTECT (27h/07h).
    #[error("no space left to allocate blocks")]
    NoSpace,
    /// The volume refuses writes: DATA PROTECT, WRITE PROTECTED (27h/00h).
    #[error("volume is read-only")]
    ReadOnly,
    /// The volume was deleted under the session: ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED
    /// (25h/00h), the answer a LUN that does not exist gets.
    #[error("volume is gone")]
    Gone,
}

/// Size and shape of a logical unit. `block_size_bytes` is a power of two of at least 512 and
/// `physical_block_size_bytes` a power-of-two multiple of it; [`crate::execute`] answers HARDWARE
/// ERROR rather than panic when a caller breaks that.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Logical block size: 512 or 4096.
    pub block_size_bytes: u32,
    /// Number of logical blocks.
    pub block_count: u64,
    /// Physical block size reported to initiators (alignment hint): 4096.
    pub physical_block_size_bytes: u32,
    /// Every write-class command fails with DATA PROTECT, WRITE PROTECTED.
    pub read_only: bool,
}

/// Smallest logical block size SBC allows us to report sensibly.
const BLOCK_SIZE_MIN_BYTES: u32 = 512;

impl Geometry {
    /// Whether the sizes are usable: block size a power of two of at least 512 bytes, physical
    /// block size a power-of-two multiple of it.
    pub fn is_valid(&self) -> bool {
        self.block_size_bytes >= BLOCK_SIZE_MIN_BYTES
            && self.block_size_bytes.is_power_of_two()
            && self.physical_block_size_bytes >= self.block_size_bytes
            && self.physical_block_size_bytes.is_power_of_two()
    }

    /// Logical blocks per physical block as a power of two (READ CAPACITY(16) LBPPBE).
    pub fn blocks_per_physical_exponent(&self) -> u8 {
        let ratio = self.physical_block_size_bytes / self.block_size_bytes.max(1);
        // A u32 has at most 31 trailing zeros, which fits a u8.
        u8::try_from(ratio.max(1).trailing_zeros()).unwrap_or(0)
    }

    /// Logical blocks per physical block.
    pub fn blocks_per_physical(&self) -> u32 {
        1u32 << self.blocks_per_physical_exponent()
    }

    /// Byte offset of `lba`, or `None` if it overflows.
    pub fn offset_bytes(&self, lba: u64) -> Option<u64> {
        lba.checked_mul(u64::from(self.block_size_bytes))
    }

    /// Byte length of `blocks` blocks, or `None` if it overflows.
    pub fn len_bytes(&self, blocks: u64) -> Option<u64> {
        blocks.checked_mul(u64::from(self.block_size_bytes))
    }

    /// Whether `blocks` blocks from `lba` lie inside the logical unit. An empty range at the
    /// very end (`lba == block_count`) is inside.
    pub fn contains(&self, lba: u64, blocks: u64) -> bool {
        lba.checked_add(blocks)
            .is_some_and(|end| end <= self.block_count)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(block_size_bytes: u32, physical_block_size_bytes: u32) -> Geometry {
        Geometry {
            block_size_bytes,
            block_count: 100,
            physical_block_size_bytes,
            read_only: false,
        }
    }

    #[test]
    fn geometry_validity_and_exponent() {
        assert!(geometry(512, 4096).is_valid());
        assert_eq!(geometry(512, 4096).blocks_per_physical_exponent(), 3);
        assert_eq!(geometry(4096, 4096).blocks_per_physical(), 1);
        assert!(!geometry(0, 4096).is_valid());
        assert!(!geometry(520, 4096).is_valid());
        assert!(!geometry(4096, 512).is_valid());
        // Broken geometry still answers without dividing by zero.
        assert_eq!(geometry(0, 0).blocks_per_physical(), 1);
    }

    #[test]
    fn range_checks_do_not_overflow() {
        let g = geometry(512, 4096);
        assert!(g.contains(0, 100));
        assert!(g.contains(100, 0));
        assert!(!g.contains(100, 1));
        assert!(!g.contains(u64::MAX, 2));
        assert_eq!(g.offset_bytes(u64::MAX), None);
    }
}
