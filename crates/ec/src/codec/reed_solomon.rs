//! Codec 2: Reed-Solomon over GF(2^16) (Leopard-RS) computed by `reed-solomon-simd` 3.x.
//! Systematic: the data chunks are the data, the library computes the parity ("recovery")
//! shards and restores lost data ("original") shards from any `k` present chunks.

use reed_solomon_simd::{ReedSolomonDecoder, ReedSolomonEncoder};

use crate::codec::ErasureCodec;
use crate::error::EcError;

/// Codec 2 (`k+m`).
#[derive(Debug)]
pub(crate) struct ReedSolomonSimdCodec;

impl ErasureCodec for ReedSolomonSimdCodec {
    fn encode_parity(
        &self,
        data_chunks: &[&[u8]],
        parity_count: usize,
    ) -> Result<Vec<Vec<u8>>, EcError> {
        let shard_bytes = data_chunks.first().map_or(0, |chunk| chunk.len());
        let mut encoder = ReedSolomonEncoder::new(data_chunks.len(), parity_count, shard_bytes)?;
        for chunk in data_chunks {
            encoder.add_original_shard(chunk)?;
        }
        let result = encoder.encode()?;
        Ok(result.recovery_iter().map(<[u8]>::to_vec).collect())
    }

    fn recover_data(
        &self,
        data_count: usize,
        chunks: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, Vec<u8>)>, EcError> {
        let missing: Vec<usize> = (0..data_count).filter(|&i| chunks[i].is_none()).collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        let shard_bytes = chunks.iter().flatten().next().map_or(0, Vec::len);
        let parity_count = chunks.len() - data_count;
        let mut decoder = ReedSolomonDecoder::new(data_count, parity_count, shard_bytes)?;
        for (index, chunk) in chunks[..data_count].iter().enumerate() {
            if let Some(chunk) = chunk {
                decoder.add_original_shard(index, chunk)?;
            }
        }
        // One parity chunk per lost data chunk is enough: more would only be copied in.
        let parity_present = chunks[data_count..].iter().enumerate();
        let parity_present = parity_present.filter_map(|(i, chunk)| Some((i, chunk.as_ref()?)));
        for (index, chunk) in parity_present.take(missing.len()) {
            decoder.add_recovery_shard(index, chunk)?;
        }
        let result = decoder.decode()?;
        Ok(missing
            .into_iter()
            .map(|index| {
                let restored = result
                    .restored_original(index)
                    .expect("the decoder restores every original shard it was not given");
                (index, restored.to_vec())
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use reed_solomon_simd::engine::NoSimd;
    use reed_solomon_simd::rate::{DefaultRateEncoder, RateEncoder};

    use super::*;

    #[test]
    fn parity_does_not_depend_on_the_cpu_simd_engine() {
        // Stripes written on an AVX2 machine must be reconstructed on one without it: the
        // portable engine must compute the same parity as the one chosen at run time.
        for (k, m) in [(1, 1), (2, 1), (4, 2), (8, 2), (21, 3)] {
            let shard_bytes = 4096;
            let data: Vec<Vec<u8>> = (0..k)
                .map(|i| {
                    (0..shard_bytes)
                        .map(|j| (i * 31 + j * 7 + j / 251) as u8)
                        .collect()
                })
                .collect();
            let refs: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
            let parity = ReedSolomonSimdCodec.encode_parity(&refs, m).expect("valid");

            let mut portable =
                DefaultRateEncoder::new(k, m, shard_bytes, NoSimd::new(), None).expect("valid");
            for shard in &refs {
                portable.add_original_shard(shard).expect("valid");
            }
            let result = portable.encode().expect("valid");
            let expected: Vec<Vec<u8>> = result.recovery_iter().map(<[u8]>::to_vec).collect();
            assert_eq!(parity, expected, "{k}+{m}");
        }
    }

    #[test]
    fn parity_matches_the_library_and_its_errors_are_kept() {
        let a = vec![1u8; 4096];
        let short = vec![2u8; 2048];
        let mismatched: Vec<&[u8]> = vec![&a, &short];
        assert!(matches!(
            ReedSolomonSimdCodec.encode_parity(&mismatched, 1),
            Err(EcError::ReedSolomon { .. })
        ));
        let b = vec![2u8; 4096];
        let refs: Vec<&[u8]> = vec![&a, &b];
        let parity = ReedSolomonSimdCodec.encode_parity(&refs, 1).expect("valid");
        let expected = reed_solomon_simd::encode(2, 1, &refs).expect("valid");
        assert_eq!(parity, expected);
    }
}
