//! Compute-layer high availability, per shard: an active c.node (the shard's owner) and a
//! standby partner. The owner acknowledges a journaled write only once the partner holds its
//! journal record ([`mirror`]: the partner writes it to its own journal, so it is in two
//! machines' memory and survives a kill -9 of both processes); a write-through write once its
//! stripe is written on the d.nodes; FLUSH waits until both journals synced. The owner holds
//! its shard's ownership lease in etcd ([`ownership`]) and stops acknowledging (and serving
//! reads) before it can have expired. Every c.node serves every shard's volumes, forwarding
//! to their owners ([`forward`]). The standby ([`partner`]) keeps the mirror and takes the lease
//! when it expires, then starts as the owner on the mirrored journal: the new epoch fences
//! the old owner on every d.node, recovery replays the mirror, and nothing acknowledged is
//! lost when the owner's machine disappears. Time goes through [`clock`], so the lease logic
//! is tested with simulated time.

use std::sync::Arc;
use std::time::Duration;

pub mod clock;
pub mod forward;
pub mod handover;
pub mod mirror;
mod mirror_deferred;
mod mirror_link;
pub mod ownership;
pub mod partner;
pub mod port_groups;
pub mod registry;
pub mod shard_handover;
pub mod shard_mirrors;
pub mod shard_moves;
pub mod takeover;
mod wire;

#[cfg(test)]
mod mirror_thrash_tests;
#[cfg(test)]
mod model_tests;

/// What this c.node reports about the compute layer: who it is, its partner, and how the
/// writes it acknowledges are protected.
#[derive(Debug)]
pub struct ComputeInfo {
    /// This c.node's id: it owns its shard.
    pub id: String,
    /// The shard it owns.
    pub shard: weft_engine::ShardId,
    pub partner: Option<String>,
    pub lease_ttl: Duration,
    pub mirror: Arc<mirror::MirrorStatus>,
    /// This c.node's record in `weft/cnodes/` (kept alive while the process runs).
    pub registration: Arc<registry::Registration>,
    /// `weft cnode drain` asked this owner to hand the cluster over: it stops as on SIGTERM
    /// (destaged, checkpointed, lease released), so its standby takes over at once.
    pub drain: tokio::sync::Notify,
}

impl ComputeInfo {
    /// `mirrored`, `degraded` (a partner is configured but does not hold the mirror now) or
    /// `single` (no partner).
    pub fn write_buffer(&self) -> &'static str {
        match (
            &self.partner,
            self.mirror
                .mirrored
                .load(std::sync::atomic::Ordering::Acquire),
        ) {
            (None, _) => "single",
            (Some(_), true) => "mirrored",
            (Some(_), false) => "degraded",
        }
    }
}
