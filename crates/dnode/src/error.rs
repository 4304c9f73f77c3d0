//! [`DnodeError`]: why a d.node could not start. Failures while serving are not errors of the
//! daemon: they go back to the client as protocol errors, or are logged and retried.

use std::net::SocketAddr;
use std::path::PathBuf;

use weft_chunk::ChunkError;

/// Why [`crate::Dnode::start`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DnodeError {
    /// A config field is out of its range.
    #[error("invalid d.node config: {field}: {reason}")]
    Config { field: &'static str, reason: String },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    /// A data dir cannot be created or opened.
    #[error("data dir {}: {source}", path.display())]
    DataDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The chunk store on a data dir does not open.
    #[error("chunk store in {}: {source}", path.display())]
    Store {
        path: PathBuf,
        #[source]
        source: ChunkError,
    },
    /// The node id file cannot be read, written, or holds no valid id.
    #[error("node id file {}: {detail}", path.display())]
    NodeId { path: PathBuf, detail: String },
    #[error("cannot start thread {name}: {source}")]
    Thread {
        name: &'static str,
        #[source]
        source: std::io::Error,
    },
}
