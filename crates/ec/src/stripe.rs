//! Encoding a stripe's data into chunks and reconstructing lost chunks. These functions check
//! every input (chunk count, chunk lengths, enough chunks present) and then call the stripe's
//! codec; the codecs trust what they are given. No I/O: callers read and write the chunks.

use crate::codec::codec_for;
use crate::error::EcError;
use crate::geometry::StripeGeometry;

/// The chunks of a stripe holding `data`: `total_chunks()` chunks of `chunk_len_bytes` each,
/// data chunks first (contiguous data, zero-padded) then parity chunks (identical copies for
/// replication). `data` may be shorter than the geometry holds, not longer.
pub fn encode(geometry: &StripeGeometry, data: &[u8]) -> Result<Vec<Vec<u8>>, EcError> {
    let capacity_bytes = geometry.data_capacity_bytes();
    let data_len_bytes = u64::try_from(data.len()).unwrap_or(u64::MAX);
    if data_len_bytes > capacity_bytes {
        return Err(EcError::DataTooLong {
            data_len_bytes,
            capacity_bytes,
        });
    }
    let redundancy = geometry.redundancy();
    let chunk_len = geometry.chunk_len();
    let mut chunks = Vec::with_capacity(usize::from(redundancy.total_chunks()));
    let mut rest = data;
    for _ in 0..redundancy.data_chunks() {
        let (head, tail) = rest.split_at(rest.len().min(chunk_len));
        let mut chunk = Vec::with_capacity(chunk_len);
        chunk.extend_from_slice(head);
        chunk.resize(chunk_len, 0);
        chunks.push(chunk);
        rest = tail;
    }
    let data_chunks: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let parity = codec_for(redundancy.codec_id())
        .encode_parity(&data_chunks, usize::from(redundancy.parity_chunks()))?;
    assert_eq!(parity.len(), usize::from(redundancy.parity_chunks()));
    chunks.extend(parity);
    Ok(chunks)
}

/// Fills in every missing chunk (`None`), data and parity, from the present ones. `chunks` has
/// one slot per chunk, data chunks first; any `k` present chunks are enough.
pub fn reconstruct(
    geometry: &StripeGeometry,
    chunks: &mut [Option<Vec<u8>>],
) -> Result<(), EcError> {
    check_chunks(geometry, chunks)?;
    let redundancy = geometry.redundancy();
    let codec = codec_for(redundancy.codec_id());
    let data_count = usize::from(redundancy.data_chunks());
    for (index, chunk) in codec.recover_data(data_count, chunks)? {
        assert!(
            chunks[index].is_none(),
            "a codec recovered chunk {index}, which was present"
        );
        chunks[index] = Some(chunk);
    }
    if chunks[data_count..].iter().all(Option::is_some) {
        return Ok(());
    }
    let parity = {
        let data_chunks: Vec<&[u8]> = chunks[..data_count]
            .iter()
            .map(|chunk| {
                chunk
                    .as_deref()
                    .expect("every data chunk is present after recovery")
            })
            .collect();
        codec.encode_parity(&data_chunks, usize::from(redundancy.parity_chunks()))?
    };
    for (slot, chunk) in chunks[data_count..].iter_mut().zip(parity) {
        if slot.is_none() {
            *slot = Some(chunk);
        }
    }
    Ok(())
}

/// Data chunk `index` of the stripe: a copy of it when present, else recovered from the
/// present chunks (any `k` are enough). `chunks` is as for [`reconstruct`] and is not changed.
pub fn reconstruct_data(
    geometry: &StripeGeometry,
    chunks: &[Option<Vec<u8>>],
    index: u8,
) -> Result<Vec<u8>, EcError> {
    let redundancy = geometry.redundancy();
    if index >= redundancy.data_chunks() {
        return Err(EcError::NotDataChunk {
            index,
            data_chunks: redundancy.data_chunks(),
        });
    }
    check_chunks(geometry, chunks)?;
    let index = usize::from(index);
    if let Some(chunk) = &chunks[index] {
        return Ok(chunk.clone());
    }
    let recovered = codec_for(redundancy.codec_id())
        .recover_data(usize::from(redundancy.data_chunks()), chunks)?;
    let (_, chunk) = recovered
        .into_iter()
        .find(|&(recovered_index, _)| recovered_index == index)
        .expect("a codec recovers every missing data chunk");
    Ok(chunk)
}

/// One slot per chunk, every present chunk of the geometry's length, at least `k` present.
fn check_chunks(geometry: &StripeGeometry, chunks: &[Option<Vec<u8>>]) -> Result<(), EcError> {
    let redundancy = geometry.redundancy();
    let expected = usize::from(redundancy.total_chunks());
    if chunks.len() != expected {
        return Err(EcError::ChunkCount {
            got: chunks.len(),
            expected,
        });
    }
    let expected_bytes = geometry.chunk_len_bytes();
    for (index, chunk) in chunks.iter().enumerate() {
        if let Some(chunk) = chunk {
            let len_bytes = u64::try_from(chunk.len()).unwrap_or(u64::MAX);
            if len_bytes != expected_bytes {
                return Err(EcError::ChunkLength {
                    index,
                    len_bytes,
                    expected_bytes,
                });
            }
        }
    }
    let present = chunks.iter().filter(|chunk| chunk.is_some()).count();
    let needed = usize::from(redundancy.data_chunks());
    if present < needed {
        return Err(EcError::NotEnoughChunks { present, needed });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::geometry::CHUNK_ALIGN_BYTES;
    use crate::redundancy::Redundancy;

    /// Deterministic, non-repeating test bytes.
    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect()
    }

    fn geometry(text: &str, data_len_bytes: u64) -> StripeGeometry {
        let redundancy = Redundancy::parse(text).expect("valid");
        StripeGeometry::for_len(redundancy, data_len_bytes).expect("valid")
    }

    /// FNV-1a over the chunks: pins parity bytes without a hash dependency.
    fn fnv1a(chunks: &[Vec<u8>]) -> u64 {
        let mut hash = 0xcbf2_9ce4_8422_2325_u64;
        for byte in chunks.iter().flatten() {
            hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        hash
    }

    fn as_slots(chunks: &[Vec<u8>]) -> Vec<Option<Vec<u8>>> {
        chunks.iter().cloned().map(Some).collect()
    }

    #[test]
    fn encode_lays_data_out_contiguously_and_zero_pads() {
        let data = pattern(10_000, 1);
        let g = geometry("2+1", 10_000);
        assert_eq!(g.chunk_len_bytes(), 2 * CHUNK_ALIGN_BYTES);
        let chunks = encode(&g, &data).expect("fits");
        assert_eq!(chunks.len(), 3);
        assert_eq!(&chunks[0][..], &data[..8192]);
        assert_eq!(&chunks[1][..10_000 - 8192], &data[8192..]);
        assert!(chunks[1][10_000 - 8192..].iter().all(|&b| b == 0));
        assert!(chunks.iter().all(|chunk| chunk.len() == 8192));
    }

    #[test]
    fn encode_refuses_data_longer_than_the_geometry() {
        let g = geometry("4+2", 4096);
        let data = vec![7; 4 * 4096 + 1];
        assert_eq!(
            encode(&g, &data),
            Err(EcError::DataTooLong {
                data_len_bytes: 4 * 4096 + 1,
                capacity_bytes: 4 * 4096
            })
        );
        assert_eq!(encode(&g, &data[..4 * 4096]).expect("fits").len(), 6);
        assert_eq!(encode(&g, &[]).expect("fits").len(), 6);
    }

    #[test]
    fn replication_copies_and_none_is_one_chunk() {
        let data = pattern(5000, 2);
        let chunks = encode(&geometry("x3", 5000), &data).expect("fits");
        assert_eq!(chunks.len(), 3);
        assert_eq!(&chunks[0][..5000], &data[..]);
        assert!(chunks.iter().all(|chunk| chunk == &chunks[0]));

        let chunks = encode(&geometry("none", 5000), &data).expect("fits");
        assert_eq!(chunks.len(), 1);
        assert_eq!(&chunks[0][..5000], &data[..]);
    }

    #[test]
    fn reed_solomon_parity_bytes_are_pinned() {
        // Codec 2's parity is part of the on-disk format: if this changes (a new
        // reed-solomon-simd version), old stripes could no longer be reconstructed. Do not
        // update the value; add a codec id instead.
        let data = pattern(3 * 4096 + 123, 3);
        let chunks = encode(&geometry("3+2", 3 * 4096 + 123), &data).expect("fits");
        assert_eq!(fnv1a(&chunks[3..]), PINNED_PARITY_FNV1A_3_PLUS_2);
    }
    const PINNED_PARITY_FNV1A_3_PLUS_2: u64 = 0x4993_97ad_00b7_3ec2;

    #[test]
    fn reconstruct_refuses_too_few_chunks() {
        let g = geometry("4+2", 16_384);
        let mut slots = as_slots(&encode(&g, &pattern(16_384, 4)).expect("fits"));
        for slot in &mut slots[..3] {
            *slot = None;
        }
        assert_eq!(
            reconstruct(&g, &mut slots),
            Err(EcError::NotEnoughChunks {
                present: 3,
                needed: 4
            })
        );
        assert_eq!(
            reconstruct_data(&g, &slots, 0),
            Err(EcError::NotEnoughChunks {
                present: 3,
                needed: 4
            })
        );
        let mut none: Vec<Option<Vec<u8>>> = vec![None];
        assert_eq!(
            reconstruct(&geometry("none", 1), &mut none),
            Err(EcError::NotEnoughChunks {
                present: 0,
                needed: 1
            })
        );
    }

    #[test]
    fn reconstruct_refuses_wrong_lengths_and_counts() {
        let g = geometry("2+1", 8192);
        let mut slots = as_slots(&encode(&g, &pattern(8192, 5)).expect("fits"));
        slots[0] = None;
        if let Some(chunk) = &mut slots[2] {
            chunk.pop();
        }
        assert_eq!(
            reconstruct(&g, &mut slots),
            Err(EcError::ChunkLength {
                index: 2,
                len_bytes: 4095,
                expected_bytes: 4096
            })
        );
        let mut short = vec![None, None];
        assert_eq!(
            reconstruct(&g, &mut short),
            Err(EcError::ChunkCount {
                got: 2,
                expected: 3
            })
        );
        assert_eq!(
            reconstruct_data(&g, &slots, 2),
            Err(EcError::NotDataChunk {
                index: 2,
                data_chunks: 2
            })
        );
    }

    #[test]
    fn reconstruct_data_returns_one_lost_data_chunk_without_changing_the_slots() {
        let g = geometry("21+3", 8 << 20);
        let chunks = encode(&g, &pattern(8 << 20, 6)).expect("fits");
        let mut slots = as_slots(&chunks);
        for index in [0, 5, 20] {
            slots[index] = None;
        }
        let before = slots.clone();
        assert_eq!(reconstruct_data(&g, &slots, 5).expect("enough"), chunks[5]);
        assert_eq!(reconstruct_data(&g, &slots, 6).expect("enough"), chunks[6]);
        assert_eq!(slots, before);
    }

    fn redundancy() -> impl Strategy<Value = Redundancy> {
        prop_oneof![
            // k in 1..=8, m in 0..=3; k+0 is only valid as `none` (k = 1).
            (1..=8u8, 0..=3u8).prop_filter_map("k+0 with k > 1 is refused", |(k, m)| match m {
                0 => Redundancy::from_parts(0, k, 0).ok(),
                _ => Some(Redundancy::erasure(k, m).expect("k and m in range")),
            }),
            (2..=4u8).prop_map(|copies| Redundancy::replicated(copies).expect("in range")),
        ]
    }

    /// A redundancy, data, and the indexes of exactly `k` surviving chunks.
    fn stripe_and_survivors() -> impl Strategy<Value = (Redundancy, Vec<u8>, Vec<usize>)> {
        (redundancy(), 1..200_000usize, any::<u64>()).prop_flat_map(|(redundancy, len, seed)| {
            let all: Vec<usize> = (0..usize::from(redundancy.total_chunks())).collect();
            let k = usize::from(redundancy.data_chunks());
            let survivors = Just(all)
                .prop_shuffle()
                .prop_map(move |order| order[..k].to_vec());
            (Just(redundancy), Just(pattern(len, seed)), survivors)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        #[test]
        fn any_k_chunks_reconstruct_the_stripe(
            (redundancy, data, survivors) in stripe_and_survivors()
        ) {
            let data_len_bytes = u64::try_from(data.len()).expect("small");
            let g = StripeGeometry::for_len(redundancy, data_len_bytes).expect("valid");
            let chunks = encode(&g, &data).expect("fits");
            prop_assert_eq!(chunks.len(), usize::from(redundancy.total_chunks()));
            let contiguous: Vec<u8> = chunks[..usize::from(redundancy.data_chunks())].concat();
            prop_assert_eq!(&contiguous[..data.len()], &data[..]);
            prop_assert!(contiguous[data.len()..].iter().all(|&b| b == 0));

            let mut slots: Vec<Option<Vec<u8>>> = vec![None; chunks.len()];
            for &index in &survivors {
                slots[index] = Some(chunks[index].clone());
            }
            let lost_data = (0..redundancy.data_chunks()).find(|&i| slots[usize::from(i)].is_none());
            if let Some(index) = lost_data {
                let chunk = reconstruct_data(&g, &slots, index).expect("k present");
                prop_assert_eq!(&chunk, &chunks[usize::from(index)]);
            }
            reconstruct(&g, &mut slots).expect("k present");
            let restored: Vec<Vec<u8>> = slots.into_iter().map(|s| s.expect("filled")).collect();
            prop_assert_eq!(restored, chunks);
        }

        #[test]
        fn an_aligned_window_of_every_chunk_is_a_stripe_of_its_own(
            (redundancy, data, survivors) in stripe_and_survivors(),
            window_pages in (any::<u32>(), any::<u32>()),
        ) {
            // Degraded reads rebuild only the pages they need: the same aligned window of k
            // chunks, reconstructed as a stripe whose chunk length is the window's.
            let data_len_bytes = u64::try_from(data.len()).expect("small");
            let g = StripeGeometry::for_len(redundancy, data_len_bytes).expect("valid");
            let chunks = encode(&g, &data).expect("fits");
            let pages = g.chunk_len_bytes() / CHUNK_ALIGN_BYTES;
            let first_page = u64::from(window_pages.0) % pages;
            let len_pages = 1 + u64::from(window_pages.1) % (pages - first_page);
            let page = usize::try_from(CHUNK_ALIGN_BYTES).expect("small");
            let start = usize::try_from(first_page).expect("small") * page;
            let end = start + usize::try_from(len_pages).expect("small") * page;
            let window = StripeGeometry::new(redundancy, len_pages * CHUNK_ALIGN_BYTES)
                .expect("aligned");

            let mut slots: Vec<Option<Vec<u8>>> = vec![None; chunks.len()];
            for &index in &survivors {
                slots[index] = Some(chunks[index][start..end].to_vec());
            }
            for index in 0..redundancy.data_chunks() {
                let rebuilt = reconstruct_data(&window, &slots, index).expect("k present");
                prop_assert_eq!(&rebuilt[..], &chunks[usize::from(index)][start..end]);
            }
            reconstruct(&window, &mut slots).expect("k present");
            for (slot, chunk) in slots.iter().zip(&chunks) {
                prop_assert_eq!(slot.as_deref(), Some(&chunk[start..end]));
            }
        }
    }
}
