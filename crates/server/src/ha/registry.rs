//! The c.nodes of a cluster as etcd knows them: each c.node process registers
//! `weft/cnodes/<id>` under a lease of its own (its addresses, its partner, its role) and keeps
//! it alive; a c.node that dies drops out one lease time later. `weft cnode list` and the
//! API read these records beside the ownership record ([`super::ownership`]), which alone
//! decides who owns the cluster: a registration is information, never authority.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use weft_meta::{LeaseId, MetaStore};

/// Where c.nodes register.
pub const CNODES_PREFIX: &str = "weft/cnodes/";

/// What a c.node is doing now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum CnodeRole {
    /// It owns its shard: it serves that shard's volumes from its engine (and, as every
    /// c.node does, the other shards' through their owners).
    Owner,
    /// Another c.node owns its shard; this one keeps that owner's write-buffer mirror and
    /// takes over when the owner's lease expires.
    Standby,
    /// Another c.node owns its shard and this one has no mirror listener: it waits for the
    /// owner's lease to expire.
    Waiting,
}

/// One c.node's registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CnodeRecord {
    pub id: String,
    /// The shard it serves (`weft cnode --shard`); 0 in records from before shards.
    #[serde(default)]
    #[schema(value_type = u16)]
    pub shard: weft_engine::ShardId,
    /// The shards it owns besides its own (`weft cnode --shard N,M`, or adopted from a
    /// drained c.node), each served from an engine of its own in this process.
    #[serde(default)]
    #[schema(value_type = Vec<u16>)]
    pub shards: Vec<weft_engine::ShardId>,
    pub role: CnodeRole,
    /// Its management API, NBD and iSCSI addresses (as it listens).
    pub api: String,
    pub nbd: String,
    pub iscsi: String,
    /// Its forward listener (`--forward-listen`), where the owner serves other c.nodes.
    #[serde(default)]
    pub forward: Option<String>,
    /// Its ALUA target port group (unique in the cluster) and the relative target port ids
    /// of its iSCSI portals.
    #[serde(default)]
    pub port_group: Option<u16>,
    #[serde(default)]
    pub relative_ports: Vec<u16>,
    /// Where it listens for an owner's mirror (`--mirror-listen`).
    pub mirror_listen: Option<String>,
    /// The mirror address of the partner it mirrors its write buffer to (`--partner`).
    pub partner: Option<String>,
    /// Where it keeps the write-buffer mirrors of shards other c.nodes own besides their
    /// own (`super::shard_mirrors`): such a shard's owner mirrors to one c.node listed here.
    #[serde(default)]
    pub shard_mirror: Option<String>,
    pub pid: u32,
    pub version: String,
    /// When this process started (Unix seconds).
    pub started_unix_s: u64,
}

/// This process's registration, kept alive by a thread until [`Registration::stop`].
#[derive(Debug)]
pub struct Registration {
    kv: Arc<dyn MetaStore>,
    ttl: Duration,
    record: Mutex<CnodeRecord>,
    lease: Mutex<Option<LeaseId>>,
    stop: AtomicBool,
}

impl Registration {
    /// Registers `record` and keeps it alive. etcd being unreachable is not an error here: the
    /// keeper registers again once it answers.
    pub fn start(kv: Arc<dyn MetaStore>, record: CnodeRecord, ttl: Duration) -> Arc<Registration> {
        let r = Arc::new(Registration {
            kv,
            ttl,
            record: Mutex::new(record),
            lease: Mutex::new(None),
            stop: AtomicBool::new(false),
        });
        if let Err(e) = r.put() {
            tracing::warn!(error = %e, "could not register this c.node yet; retrying");
        }
        let keeper = Arc::clone(&r);
        let _ = std::thread::Builder::new()
            .name("weft-cnode-registration".into())
            .spawn(move || keeper.keep());
        r
    }

    /// Its role changed (a standby took over).
    pub fn set_role(&self, role: CnodeRole) {
        self.record.lock().role = role;
        if let Err(e) = self.put() {
            tracing::warn!(error = %e, "could not update this c.node's registration; retrying");
        }
    }

    /// This process now owns `shard` besides its own (or no longer, `owned: false`).
    pub fn set_extra_shard(&self, shard: weft_engine::ShardId, owned: bool) {
        {
            let mut record = self.record.lock();
            record.shards.retain(|s| *s != shard);
            if owned {
                record.shards.push(shard);
                record.shards.sort_unstable();
            }
        }
        if let Err(e) = self.put() {
            tracing::warn!(error = %e, "could not update this c.node's registration; retrying");
        }
    }

    /// Name the address of this process's shard-mirror service in its registration.
    pub fn set_shard_mirror(&self, addr: String) {
        self.record.lock().shard_mirror = Some(addr);
        if let Err(e) = self.put() {
            tracing::warn!(error = %e, "could not update this c.node's registration; retrying");
        }
    }

    /// The shards this process owns besides its own.
    pub fn extra_shards(&self) -> Vec<weft_engine::ShardId> {
        self.record.lock().shards.clone()
    }

    /// The c.node's id.
    pub fn id(&self) -> String {
        self.record.lock().id.clone()
    }

    /// Drops the registration now (a clean stop); it would expire by itself.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(lease) = self.lease.lock().take() {
            let _ = self.kv.revoke_lease(lease);
        }
    }

    fn key(&self) -> String {
        format!("{CNODES_PREFIX}{}", self.record.lock().id)
    }

    /// Writes the record under the current lease, granting one first if there is none.
    fn put(&self) -> Result<(), weft_meta::MetaError> {
        let mut lease = self.lease.lock();
        let id = match *lease {
            Some(id) => id,
            None => {
                let id = self.kv.grant_lease(self.ttl)?;
                *lease = Some(id);
                id
            }
        };
        let value = serde_json::to_vec(&*self.record.lock()).expect("a record serializes");
        self.kv.put(&self.key(), &value, Some(id))?;
        Ok(())
    }

    fn keep(&self) {
        let every = (self.ttl / 3).max(Duration::from_millis(200));
        while !self.stop.load(Ordering::Acquire) {
            std::thread::sleep(every);
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let lease = *self.lease.lock();
            let alive = match lease {
                Some(id) => self.kv.keep_alive(id).unwrap_or(true),
                None => false,
            };
            if !alive {
                // Expired (etcd was away longer than the lease): register anew.
                *self.lease.lock() = None;
                if let Err(e) = self.put() {
                    tracing::debug!(error = %e, "c.node registration not renewed yet");
                }
            }
        }
    }
}

/// Every shard the registrations name (each c.node's own and the ones it owns besides), and
/// shard 0 always (the cluster of old), sorted.
pub fn shards_named(records: &[CnodeRecord]) -> Vec<weft_engine::ShardId> {
    let mut shards: Vec<weft_engine::ShardId> = records
        .iter()
        .flat_map(|r| std::iter::once(r.shard).chain(r.shards.iter().copied()))
        .chain(std::iter::once(weft_engine::ShardId::default()))
        .collect();
    shards.sort_unstable();
    shards.dedup();
    shards
}

/// Every registered c.node, by id.
pub fn list(kv: &dyn MetaStore) -> Result<Vec<CnodeRecord>, weft_meta::MetaError> {
    Ok(kv
        .list(CNODES_PREFIX)?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice(&v.value).ok())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, role: CnodeRole) -> CnodeRecord {
        CnodeRecord {
            id: id.into(),
            shard: weft_engine::ShardId::default(),
            shards: Vec::new(),
            role,
            api: "127.0.0.1:1".into(),
            nbd: "127.0.0.1:2".into(),
            iscsi: "127.0.0.1:3".into(),
            forward: None,
            port_group: None,
            relative_ports: Vec::new(),
            mirror_listen: None,
            partner: None,
            shard_mirror: None,
            pid: 1,
            version: "test".into(),
            started_unix_s: 0,
        }
    }

    #[test]
    fn a_registration_is_listed_follows_its_role_and_goes_when_stopped() {
        let kv: Arc<dyn MetaStore> = Arc::new(weft_meta::EmbeddedMetaStore::in_memory());
        let a = Registration::start(
            Arc::clone(&kv),
            record("a", CnodeRole::Standby),
            Duration::from_secs(5),
        );
        let b = Registration::start(
            Arc::clone(&kv),
            record("b", CnodeRole::Owner),
            Duration::from_secs(5),
        );
        let mut listed = list(&*kv).unwrap();
        listed.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(
            listed
                .iter()
                .map(|r| (r.id.as_str(), r.role))
                .collect::<Vec<_>>(),
            [("a", CnodeRole::Standby), ("b", CnodeRole::Owner)]
        );
        a.set_role(CnodeRole::Owner);
        b.stop();
        let listed = list(&*kv).unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|r| (r.id.as_str(), r.role))
                .collect::<Vec<_>>(),
            [("a", CnodeRole::Owner)]
        );
        a.stop();
    }
}
