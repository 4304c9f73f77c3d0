//! The c.node's client for d.nodes.
//!
//! - [`store`]: [`RemoteChunkStore`], a blocking [`weft_chunk::ChunkStore`] on one d.node over
//!   one pipelined TCP connection speaking weft-proto: handshake, request ids, timeouts, lazy
//!   reconnects with backoff, typed errors.
//! - `link` and `connection`: the state of the link to the d.node (connect, backoff, in-flight
//!   bound) and one open connection with its reader thread.
//! - [`options`]: [`ClientOptions`] (timeouts, backoff, in-flight bound) and their defaults.
//! - [`wire`]: the mapping between weft-chunk types and weft-proto messages, shared with the
//!   d.node so both sides agree in one place.
//! - [`frame_io`]: reading and writing frames on blocking std sockets, also shared with the
//!   d.node.
//! - [`outbox`]: many threads' frames on one socket combined into few writes (both sides).
//!
//! Threads: each open connection has one reader thread; callers block on their own threads
//! (the engine's), and send on them too (the first sender writes what the others queued
//! meanwhile). Nothing here is async.

mod connection;
pub mod frame_io;
mod link;
pub mod options;
pub mod outbox;
pub mod store;
pub mod wire;

pub use options::{
    ClientOptions, BACKOFF_INITIAL_DEFAULT, BACKOFF_MAX_DEFAULT, CONNECT_TIMEOUT_DEFAULT,
    IN_FLIGHT_MAX, REQUEST_TIMEOUT_DEFAULT, SCRUB_TIMEOUT_DEFAULT,
};
pub use store::RemoteChunkStore;
