//! `FaultyMetaStore`: wraps any [`MetaStore`] and makes calls fail like a flaky network would,
//! for model tests. Failures are drawn from a seeded RNG, so a failing run can be replayed.
//!
//! Two kinds of injected [`MetaError::Unavailable`]:
//! - lost requests (`set_failure_rate`): the call fails without reaching the store;
//! - lost replies (`set_lost_reply_rate`): the call is applied, then fails, as when a
//!   connection breaks after the server committed (callers must cope with "maybe applied").
//!
//! `set_partitioned(true)` makes every call fail until healed. Watches opened through the
//! wrapper stall while partitioned (events are held, not dropped) and catch up on healing,
//! like an etcd watch that reconnects from its last revision.

use std::collections::VecDeque;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng as _, SeedableRng as _};

use crate::{LeaseId, MetaError, MetaStore, Revision, Versioned, Watch};

/// The endpoint name in injected errors.
const FAULT_ENDPOINT: &str = "fault-injector";
/// How often a forwarding watch thread checks for a drop or a heal.
const FORWARD_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// A [`MetaStore`] wrapper that injects failures.
#[derive(Debug, Clone)]
pub struct FaultyMetaStore {
    inner: Arc<dyn MetaStore>,
    faults: Arc<Mutex<Faults>>,
}

#[derive(Debug)]
struct Faults {
    rng: StdRng,
    failure_rate: f64,
    lost_reply_rate: f64,
    partitioned: bool,
    injected: u64,
}

/// Where a call stands with respect to injected faults.
#[derive(PartialEq, Eq)]
enum Fate {
    Pass,
    FailBefore,
    FailAfter,
}

impl FaultyMetaStore {
    /// Wrap `inner`; no faults until a rate is set. `seed` makes the fault sequence repeatable.
    pub fn new(inner: Arc<dyn MetaStore>, seed: u64) -> FaultyMetaStore {
        FaultyMetaStore {
            inner,
            faults: Arc::new(Mutex::new(Faults {
                rng: StdRng::seed_from_u64(seed),
                failure_rate: 0.0,
                lost_reply_rate: 0.0,
                partitioned: false,
                injected: 0,
            })),
        }
    }

    /// The fraction (0..=1) of calls that fail before reaching the store.
    pub fn set_failure_rate(&self, fraction: f64) {
        self.faults.lock().failure_rate = fraction.clamp(0.0, 1.0);
    }

    /// The fraction (0..=1) of mutating calls that are applied but then fail.
    pub fn set_lost_reply_rate(&self, fraction: f64) {
        self.faults.lock().lost_reply_rate = fraction.clamp(0.0, 1.0);
    }

    /// Partitioned: every call fails, and watches stall, until set back to false.
    pub fn set_partitioned(&self, partitioned: bool) {
        self.faults.lock().partitioned = partitioned;
    }

    pub fn is_partitioned(&self) -> bool {
        self.faults.lock().partitioned
    }

    /// How many failures were injected so far.
    pub fn injected_failures(&self) -> u64 {
        self.faults.lock().injected
    }

    /// The wrapped store, to check its state behind the faults.
    pub fn inner(&self) -> &Arc<dyn MetaStore> {
        &self.inner
    }

    fn fate(&self, mutating: bool) -> Fate {
        let mut guard = self.faults.lock();
        let f = &mut *guard;
        let lose_request =
            f.partitioned || (f.failure_rate > 0.0 && f.rng.random_bool(f.failure_rate));
        let fate = if lose_request {
            Fate::FailBefore
        } else if mutating && f.lost_reply_rate > 0.0 && f.rng.random_bool(f.lost_reply_rate) {
            Fate::FailAfter
        } else {
            Fate::Pass
        };
        if fate != Fate::Pass {
            f.injected += 1;
        }
        fate
    }

    /// Run `call` under the fault model.
    fn run<T>(
        &self,
        operation: &str,
        mutating: bool,
        call: impl FnOnce(&dyn MetaStore) -> Result<T, MetaError>,
    ) -> Result<T, MetaError> {
        let fate = self.fate(mutating);
        let injected = |when: &str| MetaError::Unavailable {
            endpoint: FAULT_ENDPOINT.into(),
            detail: format!("injected fault: {operation} {when}"),
        };
        if fate == Fate::FailBefore {
            return Err(injected("lost before reaching the store"));
        }
        let result = call(self.inner.as_ref());
        if fate == Fate::FailAfter {
            return Err(injected("applied, reply lost"));
        }
        result
    }
}

impl MetaStore for FaultyMetaStore {
    fn get(&self, key: &str) -> Result<Option<Versioned>, MetaError> {
        self.run("get", false, |s| s.get(key))
    }

    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, MetaError> {
        self.run("list", false, |s| s.list(prefix))
    }

    fn list_with_revision(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, Versioned)>, Revision), MetaError> {
        self.run("list", false, |s| s.list_with_revision(prefix))
    }

    fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError> {
        self.run("compare_and_put", true, |s| {
            s.compare_and_put(key, expected, value, lease)
        })
    }

    fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<(), MetaError> {
        self.run("compare_and_delete", true, |s| {
            s.compare_and_delete(key, expected)
        })
    }

    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Revision, MetaError> {
        self.run("put", true, |s| s.put(key, value, lease))
    }

    fn delete(&self, key: &str) -> Result<(), MetaError> {
        self.run("delete", true, |s| s.delete(key))
    }

    fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        self.run("grant_lease", true, |s| s.grant_lease(ttl))
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<bool, MetaError> {
        self.run("keep_alive", true, |s| s.keep_alive(lease))
    }

    fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        self.run("revoke_lease", true, |s| s.revoke_lease(lease))
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch, MetaError> {
        let inner = self.run("watch", false, |s| s.watch(prefix, after))?;
        let (watch, tx, control) = Watch::channel();
        let faults = self.faults.clone();
        std::thread::Builder::new()
            .name("weft-meta-faulty-watch".into())
            .spawn(move || {
                let mut held = VecDeque::new();
                let mut inner_done = false;
                loop {
                    if control.is_stopped() {
                        return;
                    }
                    if inner_done {
                        std::thread::sleep(FORWARD_POLL_INTERVAL);
                    } else {
                        match inner.events.recv_timeout(FORWARD_POLL_INTERVAL) {
                            Ok(ev) => held.push_back(ev),
                            Err(RecvTimeoutError::Timeout) => {}
                            Err(RecvTimeoutError::Disconnected) => inner_done = true,
                        }
                    }
                    if faults.lock().partitioned {
                        continue;
                    }
                    while let Some(ev) = held.pop_front() {
                        if tx.send(ev).is_err() {
                            return;
                        }
                    }
                    if inner_done {
                        if let Some(e) = inner.error() {
                            control.fail(e);
                        }
                        return;
                    }
                }
            })
            .map_err(|e| MetaError::io("<watch thread>", e))?;
        Ok(watch)
    }
}
