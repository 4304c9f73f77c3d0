//! The limits this target reports in the Block Limits VPD page (0xB0) and enforces on every
//! command, named once. Byte limits are converted to blocks of the LU's block size.
//!
//! Why these values: the transport gathers a whole data-out buffer and builds a whole data-in
//! buffer per command, so the transfer limit bounds the memory one command holds. Unmap and
//! write-zeroes are metadata operations for a thin volume, so their limits are larger.

use crate::medium::Geometry;

/// Largest READ/WRITE/VERIFY/WRITE AND VERIFY transfer: 4 MiB, the memory one command may pin.
pub const MAX_TRANSFER_BYTES: u32 = 4 << 20;
/// Transfer size initiators should prefer (Linux uses it as `io_opt`): 1 MiB.
pub const OPTIMAL_TRANSFER_BYTES: u32 = 1 << 20;
/// Largest range one UNMAP block descriptor may name: 1 GiB.
pub const MAX_UNMAP_BYTES: u64 = 1 << 30;
/// Most block descriptors one UNMAP parameter list may carry (a 4104-byte list).
pub const MAX_UNMAP_DESCRIPTORS: u32 = 256;
/// Largest WRITE SAME range: 1 GiB. A non-zero pattern is written in
/// [`WRITE_SAME_CHUNK_BYTES`] pieces, so this bounds the time, not the memory.
pub const MAX_WRITE_SAME_BYTES: u64 = 1 << 30;
/// Buffer a non-zero WRITE SAME pattern is replicated into for each write: 1 MiB.
pub const WRITE_SAME_CHUNK_BYTES: u32 = 1 << 20;
/// Largest COMPARE AND WRITE, in blocks. One block is what VMware ATS uses and what Linux LIO
/// reports; it keeps the window in which the exclusive lock is held small.
pub const MAX_COMPARE_AND_WRITE_BLOCKS: u8 = 1;
/// Range GET LBA STATUS asks the LU about in one call: 1 GiB.
pub const LBA_STATUS_QUERY_MAX_BYTES: u64 = 1 << 30;
/// Most descriptors GET LBA STATUS returns: bounds the data-in to 8 + 16 * 1024 bytes.
pub const LBA_STATUS_DESCRIPTORS_MAX: usize = 1024;

const _: () = assert!(OPTIMAL_TRANSFER_BYTES <= MAX_TRANSFER_BYTES);
const _: () = assert!(WRITE_SAME_CHUNK_BYTES <= MAX_TRANSFER_BYTES);
// The parameter list length of UNMAP is a 16-bit field.
const _: () = assert!(8 + 16 * MAX_UNMAP_DESCRIPTORS <= 0xffff);

/// [`MAX_TRANSFER_BYTES`] in blocks of this geometry.
pub fn max_transfer_blocks(geometry: &Geometry) -> u32 {
    MAX_TRANSFER_BYTES / geometry.block_size_bytes.max(1)
}

/// [`OPTIMAL_TRANSFER_BYTES`] in blocks of this geometry.
pub fn optimal_transfer_blocks(geometry: &Geometry) -> u32 {
    OPTIMAL_TRANSFER_BYTES / geometry.block_size_bytes.max(1)
}

/// Most blocks one UNMAP descriptor may name whatever the block size: 1 Mi (512 MiB of
/// 512-byte blocks). libiscsi's conformance suite calls an explicit MAXIMUM UNMAP LBA COUNT
/// above 2^20 insane, and a bigger descriptor would not unmap faster.
pub const MAX_UNMAP_BLOCKS: u32 = 1 << 20;

/// [`MAX_UNMAP_BYTES`] in blocks of this geometry, at most [`MAX_UNMAP_BLOCKS`].
pub fn max_unmap_blocks(geometry: &Geometry) -> u32 {
    bytes_to_blocks_u32(MAX_UNMAP_BYTES, geometry).min(MAX_UNMAP_BLOCKS)
}

/// Most blocks one WRITE SAME may name whatever the block size: initiators (libiscsi's
/// tests among them) take a larger MAXIMUM WRITE SAME LENGTH as a promise that a WRITE of
/// that many blocks works too, and 65536 blocks is more than any transfer we take.
pub const MAX_WRITE_SAME_BLOCKS: u32 = 65535;

/// [`MAX_WRITE_SAME_BYTES`] in blocks of this geometry, at most [`MAX_WRITE_SAME_BLOCKS`].
pub fn max_write_same_blocks(geometry: &Geometry) -> u32 {
    bytes_to_blocks_u32(MAX_WRITE_SAME_BYTES, geometry).min(MAX_WRITE_SAME_BLOCKS)
}

fn bytes_to_blocks_u32(bytes: u64, geometry: &Geometry) -> u32 {
    let blocks = bytes / u64::from(geometry.block_size_bytes.max(1));
    u32::try_from(blocks).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_scale_with_block_size() {
        let mut g = Geometry {
            block_size_bytes: 512,
            block_count: 1,
            physical_block_size_bytes: 4096,
            read_only: false,
        };
        assert_eq!(max_transfer_blocks(&g), 8192);
        assert_eq!(
            max_unmap_blocks(&g),
            MAX_UNMAP_BLOCKS,
            "512 MiB of 512-byte blocks"
        );
        g.block_size_bytes = 4096;
        assert_eq!(max_transfer_blocks(&g), 1024);
        assert_eq!(optimal_transfer_blocks(&g), 256);
        assert_eq!(max_unmap_blocks(&g), 256 * 1024, "1 GiB of 4 KiB blocks");
        assert_eq!(max_write_same_blocks(&g), MAX_WRITE_SAME_BLOCKS);
    }
}
