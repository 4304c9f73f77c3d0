//! A shard's ownership lease: one c.node at a time serves the shard's volumes from its
//! engine (the owner). It holds the shard's owner key ([`owner_key`]: `weft/cnode-owner` for
//! shard 0, `weft/shards/<n>/owner` for the others) in etcd under a lease it keeps alive; a standby partner takes the
//! key once the lease has expired. The owner acknowledges writes only while its lease is
//! surely alive: until the start of its last successful keep-alive plus the TTL minus a
//! margin ([`LeaseTerm`]). etcd counts the TTL from when it received that keep-alive, which
//! is later, so the owner stops acknowledging before a standby can take over. Proof of the
//! previous owner's death is the lease's expiry in etcd, never a lost connection.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use weft_meta::{LeaseId, MetaError, MetaStore};

use weft_engine::ShardId;

use super::clock::Clock;

/// Where shard 0's ownership record lives (where the cluster's did before shards).
pub const OWNER_KEY: &str = "weft/cnode-owner";

/// Where a shard's ownership record lives: shard 0's at [`OWNER_KEY`], shard n's at
/// `weft/shards/<n>/owner` (beside its catalog, `weft_engine::metastore::state_key`).
pub fn owner_key(shard: ShardId) -> String {
    if shard == ShardId::default() {
        OWNER_KEY.to_string()
    } else {
        format!(
            "{}{shard}/owner",
            weft_engine::metastore::SHARD_STATES_PREFIX
        )
    }
}

/// Who owns the cluster, as `weft/cnode-owner` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OwnerRecord {
    /// The c.node's id (kept in its data dir).
    pub id: String,
    /// Where hosts and operators reach it.
    #[serde(default)]
    pub api: String,
    #[serde(default)]
    pub nbd: String,
    #[serde(default)]
    pub iscsi: String,
    /// The partner holding its write-buffer mirror (empty: none).
    #[serde(default)]
    pub partner: String,
    /// Its forward listener: other c.nodes send their clients' requests there (empty: none).
    #[serde(default)]
    pub forward: String,
    pub since_unix_s: u64,
}

/// When a lease held by this process surely is alive, from the keep-alives it sent.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTerm {
    ttl: Duration,
    valid_until: Duration,
}

impl LeaseTerm {
    /// A lease granted (or kept alive) by a request started at `started`.
    pub fn new(ttl: Duration, started: Duration) -> LeaseTerm {
        let mut t = LeaseTerm {
            ttl,
            valid_until: Duration::ZERO,
        };
        t.renewed(started);
        t
    }

    /// A keep-alive started at `started` succeeded.
    pub fn renewed(&mut self, started: Duration) {
        // A tenth of the TTL and 200 ms for the two clocks' rates and the request's trip.
        let margin = self.ttl / 10 + Duration::from_millis(200);
        self.valid_until = self
            .valid_until
            .max(started + self.ttl.saturating_sub(margin));
    }

    pub fn alive_at(&self, now: Duration) -> bool {
        now < self.valid_until
    }

    pub fn valid_until(&self) -> Duration {
        self.valid_until
    }

    /// How often to keep the lease alive.
    pub fn renew_every(&self) -> Duration {
        (self.ttl / 4).max(Duration::from_millis(100))
    }
}

/// This c.node's ownership of the cluster, kept alive by a thread until dropped.
#[derive(Debug)]
pub struct Ownership {
    kv: Arc<dyn MetaStore>,
    lease: LeaseId,
    ttl: Duration,
    clock: Arc<dyn Clock>,
    term: Mutex<LeaseTerm>,
    /// etcd said the lease expired: this process may never acknowledge again.
    lost: AtomicBool,
    stop: AtomicBool,
}

impl Ownership {
    /// Take `weft/cnode-owner` for `record`. A record with this c.node's own id is a previous
    /// run of this c.node (its data dir's lock proves that process is gone) and is replaced at
    /// once; another c.node's record is waited for until its lease expires, for at most
    /// `wait` (`None`: for ever, a standby), and taken only when `may_take` says so (a
    /// standby: once it holds a complete mirror of that owner).
    pub fn acquire(
        kv: Arc<dyn MetaStore>,
        shard: ShardId,
        record: &OwnerRecord,
        ttl: Duration,
        clock: Arc<dyn Clock>,
        wait: Option<Duration>,
        may_take: &dyn Fn() -> Result<(), String>,
    ) -> anyhow::Result<Arc<Ownership>> {
        let value = serde_json::to_vec(record)?;
        let key = owner_key(shard);
        let deadline = wait.map(|w| clock.now() + w);
        let mut told = false;
        let mut refused: Option<String> = None;
        loop {
            let current = kv.get(&key).context("reading the c.node owner")?;
            let holder = current
                .as_ref()
                .and_then(|v| serde_json::from_slice::<OwnerRecord>(&v.value).ok());
            let expected = match (&current, &holder) {
                (None, _) => Some(0),
                (Some(v), Some(r)) if r.id == record.id => Some(v.mod_revision),
                (Some(v), None) => Some(v.mod_revision),
                (Some(_), Some(r)) => {
                    if !told {
                        tracing::warn!(owner = %r.id, api = %r.api, "another c.node owns the cluster; waiting for its lease to expire");
                        told = true;
                    }
                    None
                }
            };
            let allowed = match expected {
                Some(_) => match may_take() {
                    Ok(()) => true,
                    Err(why) => {
                        refused = Some(why);
                        false
                    }
                },
                None => false,
            };
            if let (Some(expected), true) = (expected, allowed) {
                let started = clock.now();
                let lease = kv
                    .grant_lease(ttl)
                    .context("granting the ownership lease")?;
                match kv.compare_and_put(&key, expected, &value, Some(lease)) {
                    Ok(_) => {
                        let owner = Arc::new(Ownership {
                            kv,
                            lease,
                            ttl,
                            term: Mutex::new(LeaseTerm::new(ttl, started)),
                            clock,
                            lost: AtomicBool::new(false),
                            stop: AtomicBool::new(false),
                        });
                        let keeper = owner.clone();
                        std::thread::Builder::new()
                            .name("weft-ownership".into())
                            .spawn(move || keeper.keep_alive())?;
                        return Ok(owner);
                    }
                    Err(MetaError::Conflict { .. }) => {
                        let _ = kv.revoke_lease(lease);
                    }
                    Err(e) => {
                        let _ = kv.revoke_lease(lease);
                        return Err(e).context("taking the c.node ownership");
                    }
                }
            }
            if deadline.is_some_and(|d| clock.now() >= d) {
                if let Some(why) = refused.filter(|_| expected.is_some()) {
                    bail!("{why}");
                }
                let who = holder.map_or_else(
                    || "another c.node".to_string(),
                    |r| format!("c.node {} (API {})", r.id, r.api),
                );
                bail!("{who} owns this cluster and its lease is alive; stop it first, or give this c.node --mirror-listen to be its standby partner");
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The shard's owner now, if any.
    pub fn owner(kv: &dyn MetaStore, shard: ShardId) -> anyhow::Result<Option<OwnerRecord>> {
        Ok(kv
            .get(&owner_key(shard))?
            .and_then(|v| serde_json::from_slice(&v.value).ok()))
    }

    /// Whether this process may acknowledge a write (or answer a read) now. While its term
    /// has run out but etcd has not said the lease expired (etcd unreachable, restarting),
    /// the caller waits, up to [`Ownership::stall_limit`]: a keep-alive that succeeds proves
    /// the lease, and with it the ownership, never lapsed in etcd (the owner key lives on
    /// the lease, and nobody takes it while it exists), so the I/O goes on with nothing
    /// lost; one that finds it expired fails it.
    pub fn may_acknowledge(&self) -> Result<(), String> {
        let mut stalled_since = None;
        loop {
            if self.lost.load(Ordering::Acquire) {
                return Err("this c.node lost its ownership lease".into());
            }
            let now = self.clock.now();
            let term = *self.term.lock();
            if term.alive_at(now) {
                return Ok(());
            }
            let since = *stalled_since.get_or_insert(now);
            if now.saturating_sub(since) >= self.stall_limit() {
                return Err(format!(
                    "this c.node could not renew its ownership lease for {:.1} s (etcd unreachable?)",
                    (now - term.valid_until()).as_secs_f64()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How long I/O waits for the lease to be renewed: two TTLs and 5 s, enough for an etcd
    /// restart; then it fails (a client's own time-outs are usually longer).
    pub fn stall_limit(&self) -> Duration {
        self.ttl * 2 + Duration::from_secs(5)
    }

    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Give the lease up (a clean stop): the standby may take over at once.
    pub fn release(&self) {
        self.stop.store(true, Ordering::Release);
        if let Err(e) = self.kv.revoke_lease(self.lease) {
            tracing::warn!(error = %e, "could not revoke the ownership lease; it expires by itself");
        }
    }

    fn keep_alive(&self) {
        while !self.stop.load(Ordering::Acquire) {
            let every = self.term.lock().renew_every();
            std::thread::sleep(every);
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let started = self.clock.now();
            match self.kv.keep_alive(self.lease) {
                Ok(true) => self.term.lock().renewed(started),
                Ok(false) => {
                    self.lost.store(true, Ordering::Release);
                    tracing::error!("the ownership lease expired: another c.node may own the cluster now; this one stops acknowledging writes");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not renew the ownership lease; writes stop being acknowledged if this lasts");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::clock::SimClock;

    const TTL: Duration = Duration::from_secs(5);

    #[test]
    fn a_term_ends_before_etcd_can_expire_the_lease() {
        let clock = SimClock::default();
        clock.advance(Duration::from_secs(100));
        let mut term = LeaseTerm::new(TTL, clock.now());
        assert!(term.alive_at(clock.now()));
        // etcd expires the lease TTL after it received the request, which is after it was
        // sent: the term must end strictly before sent + TTL.
        clock.advance(TTL - Duration::from_millis(1));
        assert!(!term.alive_at(clock.now()));
        // A keep-alive that started earlier but finished late does not move the end back.
        term.renewed(Duration::from_secs(99));
        assert!(!term.alive_at(clock.now()));
        // One that started now extends it.
        term.renewed(clock.now());
        assert!(term.alive_at(clock.now()));
        assert!(term.renew_every() * 3 < TTL - TTL / 10 - Duration::from_millis(200));
    }

    #[test]
    fn failed_keep_alives_let_the_term_run_out() {
        let clock = SimClock::default();
        let mut term = LeaseTerm::new(TTL, clock.now());
        // Renewals every quarter TTL keep it alive for as long as they succeed.
        for _ in 0..40 {
            clock.advance(term.renew_every());
            assert!(term.alive_at(clock.now()));
            term.renewed(clock.now());
        }
        // Then etcd is unreachable: no renewal succeeds; the term ends within the TTL.
        let cut = clock.now();
        while term.alive_at(clock.now()) {
            clock.advance(Duration::from_millis(50));
        }
        assert!(clock.now() - cut < TTL);
    }
}
