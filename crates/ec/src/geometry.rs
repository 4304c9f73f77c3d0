//! Stripe geometry: the chunk length of a stripe, and which chunk byte ranges hold a byte range
//! of the stripe's data. Data is contiguous: data chunk `i` holds stripe bytes `[i*L, (i+1)*L)`,
//! zero-padded at the end, so a small read touches one data chunk (one d.node). Pure
//! arithmetic: no I/O, no allocation beyond the returned ranges.

use crate::error::EcError;
use crate::redundancy::Redundancy;

/// Every chunk length is a multiple of this: chunks are read and written with O_DIRECT, which
/// needs offsets and lengths aligned to the device's logical block (4 KiB covers every device
/// we expect).
pub const CHUNK_ALIGN_BYTES: u64 = 4096;

/// Longest stripe data (a sealed segment is 8 MiB): bounds what one [`encode`](crate::encode)
/// allocates, and keeps every chunk length well inside `usize` on 32-bit targets too.
pub const STRIPE_DATA_MAX_BYTES: u64 = 256 << 20;

// reed-solomon-simd 3.x requires a shard size that is non-zero and even (2.x required a
// multiple of 64); every chunk length is a non-zero multiple of CHUNK_ALIGN_BYTES, so both hold.
const _: () = assert!(CHUNK_ALIGN_BYTES.is_multiple_of(64));
const _: () = assert!(STRIPE_DATA_MAX_BYTES.is_multiple_of(CHUNK_ALIGN_BYTES));
const _: () = assert!(STRIPE_DATA_MAX_BYTES <= u32::MAX as u64);

/// The shape of one stripe: its redundancy and the length of each of its chunks. Every value
/// has a valid redundancy and a chunk length that is a non-zero multiple of
/// [`CHUNK_ALIGN_BYTES`] no longer than a stripe of [`STRIPE_DATA_MAX_BYTES`] needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StripeGeometry {
    redundancy: Redundancy,
    chunk_len_bytes: u64,
}

/// One chunk's part of a byte range of the stripe's data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ChunkRange {
    /// Index of the data chunk (0 for `none` and replication, where any copy may be read).
    pub index: u8,
    /// Offset inside that chunk.
    pub offset_bytes: u64,
    /// Length inside that chunk.
    pub len_bytes: u64,
}

impl StripeGeometry {
    /// The geometry for `data_len_bytes` of data: chunk length `ceil(data_len / k)` rounded up
    /// to [`CHUNK_ALIGN_BYTES`]. For replication every copy holds all the data.
    pub fn for_len(redundancy: Redundancy, data_len_bytes: u64) -> Result<Self, EcError> {
        let redundancy = redundancy.validate()?;
        if data_len_bytes == 0 {
            return Err(EcError::EmptyStripe);
        }
        if data_len_bytes > STRIPE_DATA_MAX_BYTES {
            return Err(EcError::StripeTooLarge {
                data_len_bytes,
                max_bytes: STRIPE_DATA_MAX_BYTES,
            });
        }
        let chunk_len_bytes = chunk_len_for(redundancy, data_len_bytes);
        Ok(Self {
            redundancy,
            chunk_len_bytes,
        })
    }

    /// The geometry of a stripe whose chunk length is known (read from a header or a d.node):
    /// checks that `for_len` could have produced it.
    pub fn new(redundancy: Redundancy, chunk_len_bytes: u64) -> Result<Self, EcError> {
        let redundancy = redundancy.validate()?;
        let max_bytes = chunk_len_for(redundancy, STRIPE_DATA_MAX_BYTES);
        if chunk_len_bytes == 0
            || !chunk_len_bytes.is_multiple_of(CHUNK_ALIGN_BYTES)
            || chunk_len_bytes > max_bytes
        {
            return Err(EcError::ChunkLen {
                chunk_len_bytes,
                align_bytes: CHUNK_ALIGN_BYTES,
                max_bytes,
            });
        }
        Ok(Self {
            redundancy,
            chunk_len_bytes,
        })
    }

    /// The stripe's redundancy (always valid).
    pub fn redundancy(&self) -> Redundancy {
        self.redundancy
    }

    /// Length of every chunk, data and parity.
    pub fn chunk_len_bytes(&self) -> u64 {
        self.chunk_len_bytes
    }

    /// Data bytes the stripe holds, padding included: `k` times the chunk length.
    pub fn data_capacity_bytes(&self) -> u64 {
        u64::from(self.redundancy.data_chunks()) * self.chunk_len_bytes
    }

    /// Bytes stored over all d.nodes: `k + m` times the chunk length.
    pub fn stored_bytes(&self) -> u64 {
        u64::from(self.redundancy.total_chunks()) * self.chunk_len_bytes
    }

    /// Splits `len_bytes` of the stripe's data starting at `offset_bytes` into per-data-chunk
    /// ranges, in order. The range must lie inside [`Self::data_capacity_bytes`]; an empty
    /// range gives no chunk ranges.
    pub fn locate(&self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<ChunkRange>, EcError> {
        let capacity_bytes = self.data_capacity_bytes();
        let end_bytes = offset_bytes
            .checked_add(len_bytes)
            .filter(|&end| end <= capacity_bytes)
            .ok_or(EcError::OutOfRange {
                offset_bytes,
                len_bytes,
                capacity_bytes,
            })?;
        let mut ranges = Vec::new();
        let mut position_bytes = offset_bytes;
        while position_bytes < end_bytes {
            let index = position_bytes / self.chunk_len_bytes;
            let offset_in_chunk_bytes = position_bytes % self.chunk_len_bytes;
            let len_in_chunk_bytes =
                (self.chunk_len_bytes - offset_in_chunk_bytes).min(end_bytes - position_bytes);
            ranges.push(ChunkRange {
                index: u8::try_from(index).expect("index < k, and k fits in u8"),
                offset_bytes: offset_in_chunk_bytes,
                len_bytes: len_in_chunk_bytes,
            });
            position_bytes += len_in_chunk_bytes;
        }
        Ok(ranges)
    }

    /// [`Self::chunk_len_bytes`] as an in-memory length.
    pub(crate) fn chunk_len(&self) -> usize {
        usize::try_from(self.chunk_len_bytes).expect("chunk length <= STRIPE_DATA_MAX_BYTES")
    }
}

/// `ceil(data_len / k)` rounded up to the chunk alignment.
fn chunk_len_for(redundancy: Redundancy, data_len_bytes: u64) -> u64 {
    data_len_bytes
        .div_ceil(u64::from(redundancy.data_chunks()))
        .next_multiple_of(CHUNK_ALIGN_BYTES)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const MIB_BYTES: u64 = 1 << 20;

    fn ec(k: u8, m: u8) -> Redundancy {
        Redundancy::erasure(k, m).expect("valid")
    }

    #[test]
    fn chunk_len_is_the_aligned_share_of_one_data_chunk() {
        let g = StripeGeometry::for_len(ec(4, 2), 8 * MIB_BYTES).expect("valid");
        assert_eq!(g.chunk_len_bytes(), 2 * MIB_BYTES);
        assert_eq!(g.data_capacity_bytes(), 8 * MIB_BYTES);
        assert_eq!(g.stored_bytes(), 12 * MIB_BYTES);

        // 8 MiB / 21 = 399,457.5 -> 399,458 -> 98 pages of 4 KiB.
        let g = StripeGeometry::for_len(ec(21, 3), 8 * MIB_BYTES).expect("valid");
        assert_eq!(g.chunk_len_bytes(), 98 * CHUNK_ALIGN_BYTES);

        let g = StripeGeometry::for_len(ec(4, 2), 1).expect("valid");
        assert_eq!(g.chunk_len_bytes(), CHUNK_ALIGN_BYTES);

        let g = StripeGeometry::for_len(Redundancy::replicated(3).expect("valid"), 5000)
            .expect("valid");
        assert_eq!(g.chunk_len_bytes(), 2 * CHUNK_ALIGN_BYTES);
        assert_eq!(g.stored_bytes(), 6 * CHUNK_ALIGN_BYTES);

        let g = StripeGeometry::for_len(Redundancy::None, STRIPE_DATA_MAX_BYTES).expect("valid");
        assert_eq!(g.chunk_len_bytes(), STRIPE_DATA_MAX_BYTES);
    }

    #[test]
    fn for_len_refuses_empty_oversized_and_invalid_stripes() {
        assert_eq!(
            StripeGeometry::for_len(Redundancy::None, 0),
            Err(EcError::EmptyStripe)
        );
        assert!(matches!(
            StripeGeometry::for_len(ec(4, 2), STRIPE_DATA_MAX_BYTES + 1),
            Err(EcError::StripeTooLarge { .. })
        ));
        assert!(matches!(
            StripeGeometry::for_len(Redundancy::Erasure { k: 0, m: 2 }, 4096),
            Err(EcError::Redundancy(_))
        ));
        assert!(matches!(
            StripeGeometry::for_len(Redundancy::Replicated { copies: 1 }, 4096),
            Err(EcError::Redundancy(_))
        ));
    }

    #[test]
    fn new_accepts_exactly_what_for_len_can_produce() {
        let g = StripeGeometry::for_len(ec(4, 2), 3 * MIB_BYTES + 7).expect("valid");
        assert_eq!(
            StripeGeometry::new(g.redundancy(), g.chunk_len_bytes()),
            Ok(g)
        );
        for bad in [
            0,
            1,
            4095,
            4097,
            STRIPE_DATA_MAX_BYTES / 4 + CHUNK_ALIGN_BYTES,
        ] {
            assert!(
                matches!(
                    StripeGeometry::new(ec(4, 2), bad),
                    Err(EcError::ChunkLen { .. })
                ),
                "{bad}"
            );
        }
        assert!(StripeGeometry::new(ec(4, 2), STRIPE_DATA_MAX_BYTES / 4).is_ok());
    }

    #[test]
    fn small_read_touches_one_data_chunk() {
        let g = StripeGeometry::for_len(ec(4, 2), 8 * MIB_BYTES).expect("valid");
        let ranges = g.locate(5 * MIB_BYTES + 4096, 8192).expect("in range");
        assert_eq!(
            ranges,
            vec![ChunkRange {
                index: 2,
                offset_bytes: MIB_BYTES + 4096,
                len_bytes: 8192
            }]
        );
    }

    #[test]
    fn read_across_a_chunk_boundary_is_split() {
        let g = StripeGeometry::for_len(ec(2, 1), 8192).expect("valid");
        assert_eq!(
            g.locate(4000, 200).expect("in range"),
            vec![
                ChunkRange {
                    index: 0,
                    offset_bytes: 4000,
                    len_bytes: 96
                },
                ChunkRange {
                    index: 1,
                    offset_bytes: 0,
                    len_bytes: 104
                },
            ]
        );
    }

    #[test]
    fn replicated_and_none_locate_in_chunk_zero() {
        for redundancy in [Redundancy::None, Redundancy::replicated(4).expect("valid")] {
            let g = StripeGeometry::for_len(redundancy, 3 * MIB_BYTES).expect("valid");
            assert_eq!(
                g.locate(MIB_BYTES, MIB_BYTES).expect("in range"),
                vec![ChunkRange {
                    index: 0,
                    offset_bytes: MIB_BYTES,
                    len_bytes: MIB_BYTES
                }]
            );
        }
    }

    #[test]
    fn locate_refuses_ranges_outside_the_data() {
        let g = StripeGeometry::for_len(ec(2, 1), 8192).expect("valid");
        assert_eq!(g.locate(8192, 0), Ok(vec![]));
        assert_eq!(g.locate(0, 8192).expect("in range").len(), 2);
        for (offset_bytes, len_bytes) in [(8192, 1), (8193, 0), (0, 8193), (u64::MAX, 2)] {
            assert_eq!(
                g.locate(offset_bytes, len_bytes),
                Err(EcError::OutOfRange {
                    offset_bytes,
                    len_bytes,
                    capacity_bytes: 8192
                })
            );
        }
    }

    fn geometry_and_range() -> impl Strategy<Value = (StripeGeometry, u64, u64)> {
        let redundancy = prop_oneof![
            Just(Redundancy::None),
            (2..=4u8).prop_map(|copies| Redundancy::Replicated { copies }),
            (1..=21u8, 1..=3u8).prop_map(|(k, m)| Redundancy::Erasure { k, m }),
        ];
        (redundancy, 1..=4 * MIB_BYTES)
            .prop_map(|(r, len)| StripeGeometry::for_len(r, len).expect("valid"))
            .prop_flat_map(|g| {
                let capacity = g.data_capacity_bytes();
                (Just(g), 0..=capacity)
            })
            .prop_flat_map(|(g, offset)| {
                let room = g.data_capacity_bytes() - offset;
                (Just(g), Just(offset), 0..=room)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn locate_covers_exactly_the_requested_range((g, offset, len) in geometry_and_range()) {
            let ranges = g.locate(offset, len).expect("in range");
            let mut position = offset;
            for range in &ranges {
                prop_assert!(range.index < g.redundancy().data_chunks());
                prop_assert!(range.len_bytes > 0);
                prop_assert!(range.offset_bytes + range.len_bytes <= g.chunk_len_bytes());
                prop_assert_eq!(
                    u64::from(range.index) * g.chunk_len_bytes() + range.offset_bytes,
                    position
                );
                position += range.len_bytes;
            }
            prop_assert_eq!(position, offset + len);
            // Consecutive ranges move to the next chunk, starting at its beginning.
            for pair in ranges.windows(2) {
                prop_assert_eq!(pair[1].index, pair[0].index + 1);
                prop_assert_eq!(pair[1].offset_bytes, 0);
            }
        }
    }
}
