//! Chunk keys and metadata. A chunk is the `index`-th of the k+m chunks of the stripe of one
//! segment of one family. Segment ids are per family, so two families never collide and a
//! family's chunks can be listed (recovery) and fenced (failover) on their own.

use serde::{Deserialize, Serialize};

/// A family's ownership generation: every chunk write carries the writer's epoch, and a
/// d.node refuses writes older than the newest epoch it was told of (fencing).
pub type Epoch = u64;

/// Names one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ChunkKey {
    pub family: u64,
    pub segment: u64,
    pub index: u8,
}

/// What a chunk's header says about it besides its data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkMeta {
    pub key: ChunkKey,
    pub epoch: Epoch,
    /// Erasure codec of the stripe (0 none, 1 replication, 2 Reed-Solomon; see weft-ec).
    pub codec_id: u8,
    pub data_chunks: u8,
    pub parity_chunks: u8,
    /// Bytes of the stripe's data before it was cut into chunks.
    pub stripe_len_bytes: u64,
}

/// A stored chunk as a listing shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkInfo {
    pub meta: ChunkMeta,
    /// Bytes of chunk data (not counting the header).
    pub len_bytes: u64,
}

impl ChunkKey {
    pub fn new(family: u64, segment: u64, index: u8) -> ChunkKey {
        ChunkKey {
            family,
            segment,
            index,
        }
    }
}

impl std::fmt::Display for ChunkKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}/{:x}.{}", self.family, self.segment, self.index)
    }
}
