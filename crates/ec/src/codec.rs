//! The erasure codecs behind one small trait, one implementation per [`CodecId`]. Adding a
//! library (or a new parity format) means a new codec id and a new implementation here; the
//! stripe functions in `stripe` do the checking and call only the trait. No I/O.

mod none;
mod reed_solomon;
mod replication;

use crate::error::EcError;
use crate::redundancy::CodecId;

/// Computes parity and recovers lost data chunks for one parity format.
///
/// Callers (the `stripe` module) have already checked the inputs: `k` and `m` are valid for
/// the codec, every chunk has the same non-zero, aligned length, and at least `k` chunks are
/// present.
pub(crate) trait ErasureCodec {
    /// The `parity_count` parity chunks of `data_chunks` (the `k` data chunks, in order).
    fn encode_parity(
        &self,
        data_chunks: &[&[u8]],
        parity_count: usize,
    ) -> Result<Vec<Vec<u8>>, EcError>;

    /// The data chunks missing from `chunks` (`k` data chunks then the parity chunks; `None`
    /// when lost), as `(index, bytes)` in index order. Present chunks are left as they are.
    fn recover_data(
        &self,
        data_count: usize,
        chunks: &[Option<Vec<u8>>],
    ) -> Result<Vec<(usize, Vec<u8>)>, EcError>;
}

/// The implementation of a codec id.
pub(crate) fn codec_for(codec_id: CodecId) -> &'static dyn ErasureCodec {
    match codec_id {
        CodecId::None => &none::NoneCodec,
        CodecId::Replication => &replication::ReplicationCodec,
        CodecId::ReedSolomonLeopard => &reed_solomon::ReedSolomonSimdCodec,
    }
}
