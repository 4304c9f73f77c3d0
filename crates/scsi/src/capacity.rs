//! READ CAPACITY(10) and READ CAPACITY(16) (SBC-3 5.15, 5.16): the last LBA, the block size,
//! the physical block exponent, and the provisioning bits (LBPME, LBPRZ) that tell Linux to
//! use UNMAP and trust unmapped blocks to read as zeroes.

use crate::medium::Geometry;
use crate::sense::Response;

/// READ CAPACITY(10) parameter data length.
pub(crate) const READ_CAPACITY_10_LEN_BYTES: usize = 8;
/// READ CAPACITY(16) parameter data length.
const READ_CAPACITY_16_LEN_BYTES: usize = 32;
/// READ CAPACITY(10) RETURNED LOGICAL BLOCK ADDRESS when the last LBA does not fit 32 bits:
/// the initiator must use READ CAPACITY(16).
const LBA_TOO_LARGE_FOR_10: u32 = 0xffff_ffff;
/// READ CAPACITY(16) byte 14: LBPME (thin provisioning enabled) and LBPRZ (unmapped reads
/// return zeroes).
const LBPME: u8 = 0x80;
const LBPRZ: u8 = 0x40;

/// The last LBA; zero for an empty LU (which cannot report a last block).
fn last_lba(geometry: &Geometry) -> u64 {
    geometry.block_count.saturating_sub(1)
}

pub(crate) fn read_capacity_10(geometry: &Geometry) -> Response {
    let lba = u32::try_from(last_lba(geometry)).unwrap_or(LBA_TOO_LARGE_FOR_10);
    let mut data = Vec::with_capacity(READ_CAPACITY_10_LEN_BYTES);
    data.extend(lba.to_be_bytes());
    data.extend(geometry.block_size_bytes.to_be_bytes());
    Response::good(data)
}

pub(crate) fn read_capacity_16(geometry: &Geometry, allocation_len: u32) -> Response {
    let mut data = vec![0u8; READ_CAPACITY_16_LEN_BYTES];
    data[0..8].copy_from_slice(&last_lba(geometry).to_be_bytes());
    data[8..12].copy_from_slice(&geometry.block_size_bytes.to_be_bytes());
    // Byte 12: no protection. Byte 13: LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT (bits 3..0).
    data[13] = geometry.blocks_per_physical_exponent() & 0x0f;
    // Byte 14: LBPME, LBPRZ; LOWEST ALIGNED LOGICAL BLOCK ADDRESS 0 (LBA 0 is aligned).
    data[14] = LBPME | LBPRZ;
    Response::good_cut(data, allocation_len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(block_count: u64) -> Geometry {
        Geometry {
            block_size_bytes: 512,
            block_count,
            physical_block_size_bytes: 4096,
            read_only: false,
        }
    }

    #[test]
    fn read_capacity_10_reports_last_lba_and_saturates() {
        let d = read_capacity_10(&geometry(2048)).data_in;
        assert_eq!(d, [0, 0, 0x07, 0xff, 0, 0, 2, 0]);
        let d = read_capacity_10(&geometry(1 << 32)).data_in;
        assert_eq!(
            &d[0..4],
            &[0xff; 4],
            "last LBA FFFFFFFFh does not fit either"
        );
        let d = read_capacity_10(&geometry(u64::from(u32::MAX))).data_in;
        assert_eq!(&d[0..4], &[0xff, 0xff, 0xff, 0xfe]);
    }

    #[test]
    fn read_capacity_16_reports_exponent_and_provisioning() {
        let d = read_capacity_16(&geometry(1 << 40), 32).data_in;
        assert_eq!(d.len(), 32);
        assert_eq!(&d[0..8], &((1u64 << 40) - 1).to_be_bytes());
        assert_eq!(&d[8..12], &512u32.to_be_bytes());
        assert_eq!(d[13], 3);
        assert_eq!(d[14], 0xc0);
        assert_eq!(read_capacity_16(&geometry(8), 12).data_in.len(), 12);
    }
}
