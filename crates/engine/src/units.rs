//! Ids, address spaces and the block size: the shared vocabulary of the engine. No I/O.

use serde::{Deserialize, Serialize};

/// The unit of mapping, dedup and compression.
pub const BLOCK_SIZE_BYTES: usize = 4096;
/// The same, as the u64 used in byte arithmetic on offsets.
pub const BLOCK_SIZE_U64: u64 = 4096;

/// A size in binary units as messages print it, as the CLI does: `512 B`, `4 KiB`, `1.5 GiB`,
/// `4 PiB` (whole numbers without decimals). Never raw byte counts in a message a person reads.
pub fn binary_size(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut unit = 0;
    let mut whole = bytes;
    while whole >= 1024 && unit < UNITS.len() - 1 {
        whole /= 1024;
        unit += 1;
    }
    let exact = unit == 0 || bytes.is_multiple_of(1u64 << (10 * unit));
    if exact {
        return format!("{whole} {}", UNITS[unit]);
    }
    #[allow(clippy::cast_precision_loss)] // a size for people: three digits are plenty
    let value = bytes as f64 / (1u64 << (10 * unit)) as f64;
    format!("{value:.1} {}", UNITS[unit])
}

/// The sector size a volume presents to hosts (NBD minimum block size, SCSI logical block
/// length): 512 ("512e": 512-byte sectors emulated over 4 KiB blocks by read-modify-write in
/// the front-end seam) or 4096 ("4Kn"). Metadata only: the engine maps, dedups and compresses
/// 4 KiB blocks whatever it is, and a volume's size stays a multiple of 4 KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct LogicalBlockSize(u32);

impl LogicalBlockSize {
    /// 512-byte sectors: what most initiators and file systems expect. New volumes get it.
    pub const B512: LogicalBlockSize = LogicalBlockSize(512);
    /// 4096-byte sectors: the engine's block. Volumes created before the property existed
    /// have it (their records carry no value), so their geometry never changes under a host.
    pub const B4096: LogicalBlockSize = LogicalBlockSize(4096);

    /// `None` unless `bytes` is 512 or 4096.
    pub fn new(bytes: u32) -> Option<LogicalBlockSize> {
        [Self::B512, Self::B4096].into_iter().find(|s| s.0 == bytes)
    }

    pub fn bytes(self) -> u32 {
        self.0
    }

    /// The value records written before the property existed are read with.
    pub(crate) fn legacy() -> LogicalBlockSize {
        Self::B4096
    }
}

impl Default for LogicalBlockSize {
    /// What a new volume gets when its creator does not say.
    fn default() -> Self {
        Self::B512
    }
}

impl TryFrom<u32> for LogicalBlockSize {
    type Error = String;

    fn try_from(bytes: u32) -> Result<Self, Self::Error> {
        LogicalBlockSize::new(bytes)
            .ok_or_else(|| format!("logical block size {bytes}: expected 512 or 4096"))
    }
}

impl From<LogicalBlockSize> for u32 {
    fn from(s: LogicalBlockSize) -> u32 {
        s.0
    }
}

/// In the API it is a plain number, 512 or 4096.
impl utoipa::PartialSchema for LogicalBlockSize {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
            .enum_values(Some([512, 4096]))
            .description(Some(
                "The sector size hosts see, in bytes: 512 (512e) or 4096 (4Kn).",
            ))
            .into()
    }
}

impl utoipa::ToSchema for LogicalBlockSize {}

impl std::fmt::Display for LogicalBlockSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

const _: () = assert!(BLOCK_SIZE_BYTES.is_multiple_of(512));

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

/// A shard: a set of families with one catalog document in the metadata store, one journal
/// and, in a cluster, one owner c.node at a time (its lease and epoch). Every family, with its
/// snapshots and clones, lives in exactly one shard for life. Family, volume and layer ids are
/// allocated from the shard's own range ([`ShardId::first_id`] up), so they are unique in the
/// cluster, and an id says which shard it belongs to ([`ShardId::of_id`]): a shard's recovery
/// never takes another shard's families for deleted ones. Shard 0's range starts at 1, so data
/// written before shards existed is shard 0's.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
pub struct ShardId(pub u16);

impl ShardId {
    /// Bits of an id below the shard number: 2^40 ids of each kind per shard.
    const RANGE_BITS: u32 = 40;

    /// The lowest id the shard allocates (of families, volumes and layers alike).
    pub fn first_id(self) -> u64 {
        (u64::from(self.0) << Self::RANGE_BITS).max(1)
    }

    /// The shard whose range holds `id`.
    pub fn of_id(id: u64) -> ShardId {
        // Ids are allocated below 2^56 (a u16 shard above 40 bits), so the shift fits.
        #[allow(clippy::cast_possible_truncation)]
        ShardId((id >> Self::RANGE_BITS) as u16)
    }

    /// Whether `id` (of a family, volume or layer) was allocated by this shard.
    pub fn holds(self, id: u64) -> bool {
        id >= self.first_id() && Self::of_id(id) == self
    }
}

impl std::fmt::Display for ShardId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_print_in_binary_units() {
        assert_eq!(binary_size(512), "512 B");
        assert_eq!(binary_size(4096), "4 KiB");
        assert_eq!(binary_size(3 << 29), "1.5 GiB");
        assert_eq!(binary_size(1 << 52), "4 PiB");
        assert_eq!(binary_size(10 << 30), "10 GiB");
        assert_eq!(binary_size(u64::MAX), "16.0 EiB");
    }
}
