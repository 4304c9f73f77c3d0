//! Codec 1: replication. Chunk 0 is the data and every other chunk is an identical copy, so
//! "parity" is a copy and recovery copies any present chunk.

use crate::codec::ErasureCodec;
use crate::error::EcError;

/// Codec 1 (`xN`).
#[derive(Debug)]
pub(crate) struct ReplicationCodec;

impl ErasureCodec for ReplicationCodec {
    fn encode_parity(
        &self,
        data_chunks: &[&[u8]],
        parity_count: usize,
    ) -> Result<Vec<Vec<u8>>, EcError> {
        let [data] = data_chunks else {
            panic!("replication has one data chunk, got {}", data_chunks.len());
        };
        Ok((0..parity_count).map(|_| data.to_vec()).collect())
    }

    fn recover_data(
        &self,
        data_count: usize,
        chunks: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, Vec<u8>)>, EcError> {
        assert_eq!(data_count, 1, "replication has one data chunk");
        if chunks.first().is_some_and(Option::is_some) {
            return Ok(Vec::new());
        }
        let copy = chunks
            .iter()
            .flatten()
            .next()
            .expect("checked by the caller: one is present");
        Ok(vec![(0, copy.clone())])
    }
}
