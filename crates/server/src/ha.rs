//! Compute-layer high availability, first step: an active c.node (the owner) and a standby
//! partner. The owner acknowledges a write only once the partner holds its journal record
//! ([`mirror`]: the partner writes it to its own journal, so it is in two machines' memory and
//! survives a kill -9 of both processes); FLUSH waits until both journals synced it. The
//! owner holds the cluster's ownership lease in etcd ([`ownership`]) and stops acknowledging
//! before it can have expired. The standby ([`partner`]) keeps the mirror and takes the lease
//! when it expires, then starts as the owner on the mirrored journal: the new epoch fences
//! the old owner on every d.node, recovery replays the mirror, and nothing acknowledged is
//! lost when the owner's machine disappears. Time goes through [`clock`], so the lease logic
//! is tested with simulated time.

pub mod clock;
pub mod handover;
pub mod mirror;
pub mod ownership;
pub mod partner;
pub mod takeover;
mod wire;
