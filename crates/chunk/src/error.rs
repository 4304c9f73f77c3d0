//! Why a chunk operation failed. The variants are what callers handle differently: a missing
//! chunk is looked up again or reconstructed, a corrupt one is repaired from the stripe, a
//! fenced writer must stop, an unavailable node is skipped for its stripe's other chunks.

use crate::key::{ChunkKey, Epoch};

#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChunkError {
    #[error("chunk {key} does not exist")]
    Missing { key: ChunkKey },
    #[error("chunk {key} exists already")]
    Exists { key: ChunkKey },
    #[error("no space for chunk {key} on {store}")]
    NoSpace { key: ChunkKey, store: String },
    #[error("write to family {family:x} with epoch {epoch} refused: the family's epoch is {current} (another c.node owns it)")]
    Fenced {
        family: u64,
        epoch: Epoch,
        current: Epoch,
    },
    #[error("d.node {node} unavailable: {detail}")]
    Unavailable { node: String, detail: String },
    #[error("chunk {key} is corrupt at byte {offset_bytes}: {detail}")]
    Corrupt {
        key: ChunkKey,
        offset_bytes: u64,
        detail: String,
    },
    #[error("read of chunk {key} outside its {len_bytes} bytes (offset {offset_bytes}, length {length_bytes})")]
    OutOfRange {
        key: ChunkKey,
        offset_bytes: u64,
        length_bytes: u64,
        len_bytes: u64,
    },
    #[error("disk i/o on {what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl ChunkError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> ChunkError {
        if source.raw_os_error() == Some(libc::ENOSPC) {
            return ChunkError::NoSpace {
                key: ChunkKey::new(0, 0, 0),
                store: what.into(),
            };
        }
        ChunkError::Io {
            what: what.into(),
            source,
        }
    }

    pub fn is_missing(&self) -> bool {
        matches!(self, ChunkError::Missing { .. })
    }

    pub fn is_no_space(&self) -> bool {
        matches!(self, ChunkError::NoSpace { .. })
    }

    /// Errors after which the stripe's other chunks may still serve the read.
    pub fn is_recoverable_from_stripe(&self) -> bool {
        matches!(
            self,
            ChunkError::Missing { .. }
                | ChunkError::Corrupt { .. }
                | ChunkError::Unavailable { .. }
                | ChunkError::Io { .. }
                | ChunkError::OutOfRange { .. }
        )
    }
}
