//! Ids, address spaces and the block size: the shared vocabulary of the engine. No I/O.

use serde::{Deserialize, Serialize};

/// The unit of mapping, dedup and compression.
pub const BLOCK_SIZE_BYTES: usize = 4096;
/// The same, as the u64 used in byte arithmetic on offsets.
pub const BLOCK_SIZE_U64: u64 = 4096;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub struct $name(pub u64);

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}", self.0)
            }
        }
    };
}

id_type!(
    /// A volume (thin block device); never reused after delete.
    VolumeId
);
id_type!(
    /// A family: a volume with its snapshots and clones; the unit of dedup and recovery.
    FamilyId
);
id_type!(
    /// A family-wide handle of one stored (deduplicated) block.
    BlockId
);
id_type!(
    /// A log segment; ids grow monotonically across the whole engine, so replay order is id
    /// order.
    SegmentId
);
id_type!(
    /// A layer of a family's block map (a volume's writable top, or a frozen snapshot).
    LayerId
);

/// A logical block address inside a volume, in 4 KiB blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Lba(pub u64);

impl Lba {
    /// The block that holds byte `offset_bytes`; callers check alignment first.
    pub fn from_byte_offset(offset_bytes: u64) -> Lba {
        Lba(offset_bytes / BLOCK_SIZE_U64)
    }

    pub fn byte_offset(self) -> u64 {
        self.0 * BLOCK_SIZE_U64
    }
}

/// A 128-bit dedup fingerprint: the first 16 bytes of the block's BLAKE3 hash. Collisions are
/// not a practical concern at 2^-49 for 2^40 unique blocks, so dedup does not compare bytes.
pub type Fingerprint = u128;
