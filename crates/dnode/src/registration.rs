//! Registration: the d.node's [`DnodeRecord`] under `weft/dnodes/<node id>`, attached to a
//! lease the d.node keeps alive. If the d.node dies, the lease expires and the record goes;
//! c.nodes watching the prefix see it leave.
//!
//! One thread: it refreshes the lease every TTL/3 (two refreshes can fail before the lease
//! expires), rewrites the record with fresh disk numbers every `stat_interval`, and when the
//! lease is gone (expired during a partition, or etcd lost it in a restart) grants a new one
//! and registers again. Metadata failures are logged and retried on the next tick; they never
//! stop the d.node from serving chunks. On shutdown the lease is revoked (the record goes at
//! once); an abandoned registration (a simulated crash) just stops refreshing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_meta::{LeaseId, MetaError, MetaStore};

use crate::error::DnodeError;
use crate::record::{dnode_key, DnodeRecord};
use crate::stop::Stop;

/// Lease refreshes per TTL: the lease survives two failed refreshes in a row.
const KEEP_ALIVES_PER_TTL: u32 = 3;

/// Builds the current record (fresh disk numbers).
pub(crate) type RecordFn = Box<dyn Fn() -> DnodeRecord + Send + 'static>;

/// The running registration thread.
#[derive(Debug)]
pub(crate) struct Registration {
    thread: Option<JoinHandle<()>>,
    revoke_on_exit: Arc<AtomicBool>,
    stop: Arc<Stop>,
}

struct Registrar {
    meta: Arc<dyn MetaStore>,
    key: String,
    record: RecordFn,
    ttl: Duration,
    lease: Option<LeaseId>,
}

impl Registration {
    /// Register now (a failure is logged, and retried by the thread), then keep it up until
    /// `stop`.
    pub(crate) fn start(
        meta: Arc<dyn MetaStore>,
        node_id: &str,
        record: RecordFn,
        ttl: Duration,
        stat_interval: Duration,
        stop: Arc<Stop>,
    ) -> Result<Registration, DnodeError> {
        let mut registrar = Registrar {
            meta,
            key: dnode_key(node_id),
            record,
            ttl,
            lease: None,
        };
        registrar.register();
        let revoke_on_exit = Arc::new(AtomicBool::new(true));
        let revoke = revoke_on_exit.clone();
        let thread_stop = stop.clone();
        let thread = std::thread::Builder::new()
            .name("weft-dnode-lease".into())
            .spawn(move || {
                registrar.run(stat_interval, &thread_stop);
                if revoke.load(Ordering::Acquire) {
                    registrar.revoke();
                }
            })
            .map_err(|e| DnodeError::Thread {
                name: "registration",
                source: e,
            })?;
        Ok(Registration {
            thread: Some(thread),
            revoke_on_exit,
            stop,
        })
    }

    /// Stop the thread and wait for it; it revokes the lease unless `revoke` is false (a
    /// simulated crash leaves the record to expire).
    pub(crate) fn finish(&mut self, revoke: bool) {
        self.revoke_on_exit.store(revoke, Ordering::Release);
        self.stop.stop();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Registrar {
    fn run(&mut self, stat_interval: Duration, stop: &Stop) {
        let tick = self.ttl / KEEP_ALIVES_PER_TTL;
        let mut next_stat = Instant::now() + stat_interval;
        while !stop.wait(tick) {
            match self.lease {
                None => self.register(),
                Some(lease) => match self.meta.keep_alive(lease) {
                    Ok(true) => {}
                    Ok(false) | Err(MetaError::LeaseExpired { .. }) => {
                        tracing::warn!(key = %self.key, %lease, "registration lease expired; registering again");
                        self.lease = None;
                        self.register();
                    }
                    Err(e) => {
                        tracing::warn!(key = %self.key, %lease, error = %e, "lease keep-alive failed");
                    }
                },
            }
            if Instant::now() >= next_stat {
                next_stat = Instant::now() + stat_interval;
                if let Some(lease) = self.lease {
                    self.publish(lease);
                }
            }
        }
    }

    /// Grant a lease and write the record under it; on failure leave `lease` empty.
    fn register(&mut self) {
        let lease = match self.meta.grant_lease(self.ttl) {
            Ok(lease) => lease,
            Err(e) => {
                tracing::warn!(key = %self.key, error = %e, "cannot grant registration lease");
                return;
            }
        };
        if self.publish(lease) {
            tracing::info!(key = %self.key, %lease, ttl_ms = self.ttl.as_millis() as u64, "registered");
            self.lease = Some(lease);
        } else {
            let _ = self.meta.revoke_lease(lease);
        }
    }

    /// Write the current record under `lease`; false on failure (a lost lease is forgotten).
    fn publish(&mut self, lease: LeaseId) -> bool {
        let record = (self.record)();
        let value = match serde_json::to_vec(&record) {
            Ok(v) => v,
            Err(e) => {
                tracing::error!(key = %self.key, error = %e, "cannot encode registration record");
                return false;
            }
        };
        match self.meta.put(&self.key, &value, Some(lease)) {
            Ok(_) => true,
            Err(e) => {
                if matches!(e, MetaError::LeaseExpired { .. }) {
                    self.lease = None;
                }
                tracing::warn!(key = %self.key, error = %e, "cannot write registration record");
                false
            }
        }
    }

    fn revoke(&mut self) {
        if let Some(lease) = self.lease.take() {
            match self.meta.revoke_lease(lease) {
                Ok(()) => tracing::info!(key = %self.key, %lease, "deregistered"),
                Err(e) => {
                    tracing::warn!(key = %self.key, %lease, error = %e, "cannot revoke registration lease; the record expires with it");
                }
            }
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.finish(true);
        }
    }
}
