//! The c.node's view of the cluster: d.nodes registered in the metadata store (etcd), pools
//! with their redundancy, placement-group maps, and the [`ClusterPlacement`] the engine's
//! stripe store uses to find the chunk stores of a stripe. Also the monitor that marks
//! d.nodes down (registration gone) and out (down longer than the grace period) and moves
//! their placement-group positions to other d.nodes.

pub mod chunk_io;
pub mod pgmap;
pub mod placement;
pub mod pool_tiers;
pub mod raw_space;
pub mod records;
mod unregistered;

pub use placement::{
    ClusterOptions, ClusterPlacement, CreatePoolError, NodeState, NodeStatus, PoolStatus,
};
pub use records::{DnodeAdmin, DnodeRecord, PgMap, PoolRecord};
