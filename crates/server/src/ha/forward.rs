//! Every c.node serves every volume: a c.node forwards its clients' requests for the volumes
//! of a shard it does not own to that shard's owner's forward listener ([`shards`] routes
//! by shard), and switches to its own engine when it takes its own shard over.
//!
//! ```text
//!  host --NBD/iSCSI--> c2 (standby)                      c1 (owner)
//!                      front ends (access rules from      forward listener (server.rs)
//!                        the cluster state: view.rs)        -> engine backend
//!                      RoutedBackend (routed.rs) --FORWARD (wire.rs, client.rs)-->
//!                        after takeover: c2's own engine
//! ```
//!
//! The forward listener admits only c.nodes of the cluster: a connection starts with the
//! cluster's forwarding secret, kept in etcd beside everything else a c.node trusts.

use weft_meta::{MetaError, MetaStore};

mod client;
pub mod local;
pub mod routed;
pub mod server;
pub mod serving;
pub mod shards;
pub mod view;
mod wire;

/// The forwarding secret's key in the metadata store.
pub const SECRET_KEY: &str = "weft/cluster/forward-secret";

/// The cluster's forwarding secret: made by the first c.node that asks, the same for all.
pub fn cluster_secret(kv: &dyn MetaStore) -> anyhow::Result<String> {
    for _ in 0..10 {
        if let Some(v) = kv.get(SECRET_KEY)? {
            return Ok(String::from_utf8_lossy(&v.value).into_owned());
        }
        let bytes: [u8; 32] = rand::random();
        let secret: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        match kv.compare_and_put(SECRET_KEY, 0, secret.as_bytes(), None) {
            Ok(_) => return Ok(secret),
            Err(MetaError::Conflict { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    anyhow::bail!("could not agree on the cluster's forwarding secret in 10 attempts")
}

#[cfg(test)]
mod tests;
