//! The error of stripe operations: geometry, locate, encode and reconstruct. Errors of choosing
//! or parsing a redundancy scheme are [`RedundancyError`](crate::RedundancyError).

use crate::redundancy::RedundancyError;

/// Why a stripe operation was refused. Fields carry the offending lengths and indexes.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum EcError {
    /// The redundancy scheme is invalid (for example a hand-built `Erasure { k: 0, .. }`).
    #[error(transparent)]
    Redundancy(#[from] RedundancyError),

    /// A stripe must hold at least one byte of data.
    #[error("a stripe must hold at least one byte of data")]
    EmptyStripe,

    /// The stripe's data is longer than [`STRIPE_DATA_MAX_BYTES`](crate::STRIPE_DATA_MAX_BYTES).
    #[error("stripe data of {data_len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    StripeTooLarge {
        /// Requested data length.
        data_len_bytes: u64,
        /// The limit.
        max_bytes: u64,
    },

    /// A chunk length is zero, not aligned, or longer than any stripe of this redundancy needs.
    #[error(
        "chunk length {chunk_len_bytes} bytes is not a non-zero multiple of {align_bytes} \
         bytes of at most {max_bytes} bytes"
    )]
    ChunkLen {
        /// Requested chunk length.
        chunk_len_bytes: u64,
        /// Required alignment.
        align_bytes: u64,
        /// Longest chunk this redundancy can have.
        max_bytes: u64,
    },

    /// A byte range is not inside the stripe's data.
    #[error(
        "range of {len_bytes} bytes at offset {offset_bytes} is outside the stripe's \
         {capacity_bytes} data bytes"
    )]
    OutOfRange {
        /// Start of the range.
        offset_bytes: u64,
        /// Length of the range.
        len_bytes: u64,
        /// Data bytes the stripe holds (`k` times the chunk length).
        capacity_bytes: u64,
    },

    /// Data given to [`encode`](crate::encode) is longer than the geometry holds.
    #[error("{data_len_bytes} bytes of data do not fit the stripe's {capacity_bytes} data bytes")]
    DataTooLong {
        /// Length of the data.
        data_len_bytes: u64,
        /// Data bytes the stripe holds.
        capacity_bytes: u64,
    },

    /// The chunk slice does not have one slot per chunk of the stripe.
    #[error("expected {expected} chunk slots (data then parity), got {got}")]
    ChunkCount {
        /// Slots given.
        got: usize,
        /// `total_chunks()` of the redundancy.
        expected: usize,
    },

    /// A present chunk does not have the geometry's chunk length.
    #[error("chunk {index} is {len_bytes} bytes, expected {expected_bytes} bytes")]
    ChunkLength {
        /// Index of the chunk (data chunks first, then parity).
        index: usize,
        /// Its length.
        len_bytes: u64,
        /// The geometry's chunk length.
        expected_bytes: u64,
    },

    /// Fewer than `k` chunks are present: the stripe cannot be reconstructed.
    #[error("{present} chunks present, {needed} needed to reconstruct the stripe")]
    NotEnoughChunks {
        /// Chunks present.
        present: usize,
        /// Chunks needed (`k`).
        needed: usize,
    },

    /// The index asked of [`reconstruct_data`](crate::reconstruct_data) is not a data chunk.
    #[error("chunk {index} is not a data chunk: the stripe has {data_chunks} data chunks")]
    NotDataChunk {
        /// Requested index.
        index: u8,
        /// `k`.
        data_chunks: u8,
    },

    /// The Reed-Solomon library refused its input. Inputs are checked before it is called, so
    /// this means a bug here or there.
    #[error("reed-solomon-simd failed")]
    ReedSolomon {
        /// The library's error.
        #[source]
        source: reed_solomon_simd::Error,
    },
}

impl From<reed_solomon_simd::Error> for EcError {
    fn from(source: reed_solomon_simd::Error) -> Self {
        Self::ReedSolomon { source }
    }
}
