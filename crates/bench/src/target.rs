//! What the load generator drives: a [`Target`] (an NBD export, a file, a block device; iSCSI
//! later) hands out [`IoQueue`]s, each owned by one worker thread and carrying up to a fixed
//! number of outstanding I/Os. The runner owns timing and statistics; a queue only moves bytes.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

mod file;
mod nbd;

pub(crate) use file::FileTarget;
pub(crate) use nbd::NbdTarget;

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// One I/O handed to a queue. `tag` is the worker's slot number, below the queue's depth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IoRequest {
    pub(crate) tag: u32,
    pub(crate) op: Op,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u32,
}

/// Facts about a target, recorded in the results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TargetInfo {
    /// As given on the command line.
    pub(crate) uri: String,
    /// "nbd", "file" or "block".
    pub(crate) kind: String,
    pub(crate) size_bytes: u64,
    /// Smallest I/O size and alignment the target accepts.
    pub(crate) block_size_min_bytes: u32,
    /// Preferred I/O size reported by the target.
    pub(crate) block_size_preferred_bytes: u32,
    /// Largest single I/O the target accepts.
    pub(crate) block_size_max_bytes: u32,
    /// Whether the target refuses writes.
    pub(crate) read_only: bool,
    /// Files and devices: whether O_DIRECT (no page cache) is in use.
    pub(crate) direct_io: Option<bool>,
}

/// A storage target the benchmark can open queues on. Shared by reference across workers.
pub(crate) trait Target: Send + Sync {
    fn info(&self) -> &TargetInfo;

    /// How many outstanding I/Os one queue can carry. Synchronous backends say 1, and the runner
    /// opens one queue (and thread) per outstanding I/O.
    fn queue_depth_max(&self) -> u32;

    /// Opens a queue for up to `depth` outstanding I/Os of at most `io_bytes_max` each. `seed`
    /// seeds the write data so that every queue writes different bytes.
    fn open_queue(
        &self,
        depth: u32,
        io_bytes_max: u32,
        seed: u64,
    ) -> Result<Box<dyn IoQueue>, TargetError>;
}

/// A worker's private channel to the target.
pub(crate) trait IoQueue: Send {
    /// Queues one I/O. It may not reach the target before the next [`IoQueue::wait`]. The caller
    /// never has more than `depth` tags outstanding and never reuses an outstanding tag.
    fn submit(&mut self, req: IoRequest);

    /// Sends queued I/Os and blocks until at least one I/O completes; pushes completed tags to
    /// `done`. An I/O that the target fails is an error: the run stops.
    fn wait(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError>;
}

/// Errors from opening or driving a target.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    #[error("target '{uri}' is not a valid NBD URI ({reason}); use nbd://HOST[:PORT]/EXPORT")]
    BadUri { uri: String, reason: &'static str },
    #[error("target '{path}' cannot be opened")]
    Open {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("target '{path}' is neither a regular file nor a block device")]
    NotAFileOrDevice { path: String },
    #[error("cannot connect to NBD server {addr}")]
    Connect {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("NBD server {addr} violated the protocol: {reason}")]
    Protocol { addr: String, reason: String },
    #[error("NBD server {addr} refused export '{export}': {reason}")]
    ExportRefused {
        addr: String,
        export: String,
        reason: String,
    },
    #[error("connection to NBD server {addr} failed")]
    Connection {
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} failed with NBD error {errno}")]
    Remote {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u32,
        errno: u32,
    },
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} failed")]
    Io {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u32,
        #[source]
        source: io::Error,
    },
}

/// Opens `uri`: `nbd://...` is NBD, anything else a path to a file or block device.
pub(crate) fn open_target(uri: &str, want_write: bool) -> Result<Box<dyn Target>, TargetError> {
    if uri.starts_with("nbd://") {
        Ok(Box::new(NbdTarget::open(uri)?))
    } else if uri.contains("://") {
        Err(TargetError::BadUri {
            uri: uri.to_string(),
            reason: "unsupported scheme",
        })
    } else {
        Ok(Box::new(FileTarget::open(Path::new(uri), want_write)?))
    }
}
