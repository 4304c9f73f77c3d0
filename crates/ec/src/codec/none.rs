//! Codec 0: one chunk, no parity. Nothing to compute, and nothing to recover: the stripe
//! functions refuse a stripe whose one chunk is missing before they get here.

use crate::codec::ErasureCodec;
use crate::error::EcError;

/// Codec 0 (`none`).
#[derive(Debug)]
pub(crate) struct NoneCodec;

impl ErasureCodec for NoneCodec {
    fn encode_parity(
        &self,
        _data_chunks: &[&[u8]],
        parity_count: usize,
    ) -> Result<Vec<Vec<u8>>, EcError> {
        assert_eq!(parity_count, 0, "codec 0 has no parity");
        Ok(Vec::new())
    }

    fn recover_data(
        &self,
        data_count: usize,
        chunks: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, Vec<u8>)>, EcError> {
        assert_eq!(
            (data_count, chunks.len()),
            (1, 1),
            "codec 0 has exactly one chunk"
        );
        assert!(
            chunks[0].is_some(),
            "checked by the caller: k chunks are present"
        );
        Ok(Vec::new())
    }
}
