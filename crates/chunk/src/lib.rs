//! The chunk contract: what a d.node stores and how a c.node asks for it.
//!
//! - [`key`]: chunk keys and metadata (family, segment, index in the stripe, epoch, codec).
//! - [`format`]: the on-disk chunk layout: a header naming the chunk and a CRC32C per 4 KiB
//!   page, seeded by the page's key and position, so torn, corrupt and misdirected pages are
//!   all detected on read. No I/O.
//! - [`error`]: typed failures (missing, no space, fenced, unavailable, corrupt, I/O) that a
//!   network store carries over the wire unchanged.
//! - [`store`]: the [`ChunkStore`] trait (the d.node interface) and [`LocalChunkStore`], the
//!   d.node's store of chunk files on one disk.
//! - `recycle`: deleted chunk files kept for later puts to write over (no inode allocation
//!   per stripe under log-structured churn).
//! - [`fs_space`]: the file system under a data dir (size, free space, an id shared by every
//!   path on it), for capacity reports that count a shared file system once.
//! - [`aligned`]: [`AlignedBuf`], a page-aligned byte buffer O_DIRECT writes as it is.
//! - [`disk`]: the seam under the local store: [`FileDisk`] (real files) and [`SimDisk`] (in
//!   memory, with power cuts that lose or tear unsynced writes, and corrupt or misdirected
//!   reads) for crash and fault tests.

pub mod aligned;
pub mod disk;
pub mod error;
pub mod format;
pub mod fs_space;
pub mod key;
pub mod read_plan;
mod recycle;
pub mod store;

pub use aligned::AlignedBuf;
pub use disk::{Disk, FileDisk, SimDisk};
pub use error::ChunkError;
pub use fs_space::{fs_space, FsSpace};
pub use key::{ChunkInfo, ChunkKey, ChunkMeta, Epoch};
pub use read_plan::{ReadPlan, READ_ALIGN_BYTES};
pub use store::{ChunkStore, LocalChunkStore, ScrubReport, StoreStat};
