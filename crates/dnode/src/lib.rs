//! The d.node daemon as a library: stores chunks on its data dirs and serves them to c.nodes
//! over the weft-proto TCP protocol. The `weft dnode` subcommand starts one with
//! [`Dnode::start`]; tests start them in-process.
//!
//! - [`daemon`]: [`Dnode`], start and orderly shutdown of the parts below.
//! - [`config`]: [`DnodeConfig`] and its defaults.
//! - [`multi_disk`]: [`MultiDiskStore`], one chunk store per data dir seen as one.
//! - [`node_id`]: the persistent node id in the first data dir.
//! - [`record`]: [`DnodeRecord`], the registration record c.nodes read from the metadata store.
//! - `server`, `connection`, `pool`, `handler`: the listener, one reader thread per connection,
//!   the bounded worker pool executing requests, and the wire semantics of each request.
//! - `read_batch`, `ring_reads`: small chunk reads answered by the connection's reader, a
//!   burst at a time through io_uring.
//! - `registration`, `scrubber`: the lease keeper and the background scrub.
//! - [`stats`]: [`DnodeStats`] counters.

pub mod config;
mod connection;
pub mod daemon;
pub mod error;
mod handler;
pub mod multi_disk;
pub mod node_id;
mod pool;
mod read_batch;
pub mod record;
mod registration;
mod ring_reads;
mod scrubber;
mod server;
pub mod stats;
mod stop;

pub use config::{DnodeConfig, LEASE_TTL_DEFAULT, STAT_INTERVAL_DEFAULT, WORKERS_DEFAULT};
pub use daemon::Dnode;
pub use error::DnodeError;
pub use multi_disk::{DiskUsage, MultiDiskStore};
pub use record::{dnode_key, DiskRecord, DnodeRecord, DNODES_PREFIX};
pub use server::CONNECTIONS_MAX;
pub use stats::DnodeStats;
