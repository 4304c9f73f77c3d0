//! `EmbeddedMetaStore`: the single-process metadata store (no etcd). An in-memory ordered map
//! with an etcd-like global revision counter; every mutation is persisted (see `file`) before it
//! returns, and rolled back in memory if persisting fails.
//!
//! Leases live in memory only, with deadlines: keys of an expired lease are deleted at the next
//! call (and by a background reaper every `LEASE_REAP_INTERVAL`, so watchers see expiries of an
//! idle store). A restart revokes every lease: a fresh process has none, and `open` deletes the
//! keys that were attached to one.
//!
//! Watches are channels fed on every mutation. The last `WATCH_HISTORY_EVENTS_MAX` events are kept
//! so a watch can start from a past revision; older history, and all history before an `open`,
//! is compacted.

mod file;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng as _;

pub use file::META_FILE_NAME;

use crate::{
    check_key, check_ttl, LeaseId, MetaError, MetaStore, Revision, Versioned, Watch, WatchControl,
    WatchEvent,
};

/// How many past events an embedded store keeps for watches starting from an old revision.
pub const WATCH_HISTORY_EVENTS_MAX: usize = 10_000;
/// How often the background reaper deletes the keys of expired leases.
const LEASE_REAP_INTERVAL: Duration = Duration::from_millis(100);
/// Lease ids are drawn from [1, LEASE_ID_MAX) at startup and then counted up.
const LEASE_ID_MAX: i64 = 1 << 48;

/// The single-process metadata store. Cloning shares the same store.
#[derive(Debug, Clone)]
pub struct EmbeddedMetaStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// Where `meta.json` lives; None for an in-memory store.
    dir: Option<PathBuf>,
    state: Mutex<State>,
}

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    value: Vec<u8>,
    create_revision: Revision,
    mod_revision: Revision,
    lease: Option<LeaseId>,
}

#[derive(Debug)]
struct LeaseState {
    ttl: Duration,
    deadline: Instant,
}

#[derive(Debug)]
struct Watcher {
    prefix: String,
    tx: Sender<WatchEvent>,
    control: WatchControl,
}

#[derive(Debug)]
struct State {
    revision: Revision,
    kvs: BTreeMap<String, Entry>,
    leases: HashMap<LeaseId, LeaseState>,
    next_lease: i64,
    watchers: Vec<Watcher>,
    /// Recent events, oldest first; every event after `compact_revision` is here.
    history: VecDeque<WatchEvent>,
    compact_revision: Revision,
}

enum Op {
    Put {
        key: String,
        value: Vec<u8>,
        lease: Option<LeaseId>,
    },
    Delete {
        key: String,
    },
}

impl EmbeddedMetaStore {
    /// Open (or create) the store persisted in `dir/meta.json`. Keys that were attached to a
    /// lease are deleted: leases do not survive a restart. One store per directory: two stores
    /// (or processes) on the same directory would overwrite each other's file.
    pub fn open(dir: &Path) -> Result<EmbeddedMetaStore, MetaError> {
        std::fs::create_dir_all(dir).map_err(|e| MetaError::io(dir, e))?;
        let mut state = State::new(1);
        if let Some(loaded) = file::load(dir)? {
            state.revision = loaded.revision;
            state.compact_revision = loaded.revision;
            let mut dropped = 0usize;
            for (key, (entry, leased)) in loaded.kvs {
                if leased {
                    dropped += 1;
                } else {
                    state.kvs.insert(key, entry);
                }
            }
            if dropped > 0 {
                // Deleting them is a mutation like any other: it gets a revision.
                state.revision += 1;
                state.compact_revision = state.revision;
                file::save(dir, state.revision, &state.kvs)?;
                tracing::info!(keys = dropped, "deleted keys of leases lost in the restart");
            }
        }
        Ok(Self::start(Some(dir.to_path_buf()), state))
    }

    /// A store that keeps nothing on disk (tests, throwaway clusters).
    pub fn in_memory() -> EmbeddedMetaStore {
        Self::start(None, State::new(1))
    }

    /// The directory holding `meta.json`, if persisted.
    pub fn dir(&self) -> Option<&Path> {
        self.inner.dir.as_deref()
    }

    /// The store's current revision.
    pub fn revision(&self) -> Revision {
        self.inner.state.lock().revision
    }

    fn start(dir: Option<PathBuf>, state: State) -> EmbeddedMetaStore {
        let inner = Arc::new(Inner {
            dir,
            state: Mutex::new(state),
        });
        let weak = Arc::downgrade(&inner);
        let spawned = std::thread::Builder::new()
            .name("weft-meta-reaper".into())
            .spawn(move || reap_leases(weak));
        if let Err(error) = spawned {
            // Expiry still happens lazily at every call.
            tracing::warn!(%error, "cannot start the lease reaper thread");
        }
        EmbeddedMetaStore { inner }
    }

    /// Lock the state after deleting the keys of expired leases.
    fn locked(&self) -> Result<parking_lot::MutexGuard<'_, State>, MetaError> {
        let mut st = self.inner.state.lock();
        self.inner.expire_leases(&mut st)?;
        Ok(st)
    }
}

/// The reaper thread: runs until the store is dropped.
fn reap_leases(store: Weak<Inner>) {
    loop {
        std::thread::sleep(LEASE_REAP_INTERVAL);
        let Some(inner) = store.upgrade() else { return };
        let mut st = inner.state.lock();
        if let Err(error) = inner.expire_leases(&mut st) {
            tracing::warn!(%error, "cannot delete the keys of expired leases");
        }
    }
}

impl State {
    fn new(revision: Revision) -> State {
        State {
            revision,
            kvs: BTreeMap::new(),
            leases: HashMap::new(),
            next_lease: rand::rng().random_range(1..LEASE_ID_MAX),
            watchers: Vec::new(),
            history: VecDeque::new(),
            compact_revision: 0,
        }
    }

    fn keys_of(&self, lease: LeaseId) -> Vec<Op> {
        self.kvs
            .iter()
            .filter(|(_, e)| e.lease == Some(lease))
            .map(|(k, _)| Op::Delete { key: k.clone() })
            .collect()
    }

    fn check_lease(&self, lease: Option<LeaseId>) -> Result<(), MetaError> {
        match lease {
            Some(lease) if !self.leases.contains_key(&lease) => {
                Err(MetaError::LeaseExpired { lease })
            }
            _ => Ok(()),
        }
    }

    fn mod_revision(&self, key: &str) -> Option<Revision> {
        self.kvs.get(key).map(|e| e.mod_revision)
    }

    /// Deliver an event to the history and the live watchers (dropping stopped ones).
    fn publish(&mut self, event: WatchEvent) {
        self.watchers.retain(|w| {
            if w.control.is_stopped() {
                return false;
            }
            !event.key().starts_with(&w.prefix) || w.tx.send(event.clone()).is_ok()
        });
        if self.history.len() == WATCH_HISTORY_EVENTS_MAX {
            if let Some(old) = self.history.pop_front() {
                self.compact_revision = old.revision();
            }
        }
        self.history.push_back(event);
    }
}

impl Inner {
    /// Apply `ops` as one revision, persist, then publish. Returns None if nothing changed
    /// (only deletes of absent keys): no revision is used then, as in etcd.
    fn apply(&self, st: &mut State, ops: Vec<Op>) -> Result<Option<Revision>, MetaError> {
        let rev = st.revision + 1;
        let mut undo: Vec<(String, Option<Entry>)> = Vec::with_capacity(ops.len());
        let mut events = Vec::with_capacity(ops.len());
        for op in ops {
            match op {
                Op::Put { key, value, lease } => {
                    let create_revision = st.kvs.get(&key).map_or(rev, |e| e.create_revision);
                    let entry = Entry {
                        value: value.clone(),
                        create_revision,
                        mod_revision: rev,
                        lease,
                    };
                    undo.push((key.clone(), st.kvs.insert(key.clone(), entry)));
                    events.push(WatchEvent::Put {
                        key,
                        value,
                        revision: rev,
                    });
                }
                Op::Delete { key } => {
                    if let Some(old) = st.kvs.remove(&key) {
                        undo.push((key.clone(), Some(old)));
                        events.push(WatchEvent::Delete { key, revision: rev });
                    }
                }
            }
        }
        if events.is_empty() {
            return Ok(None);
        }
        if let Some(dir) = &self.dir {
            if let Err(e) = file::save(dir, rev, &st.kvs) {
                for (key, old) in undo.into_iter().rev() {
                    match old {
                        Some(entry) => st.kvs.insert(key, entry),
                        None => st.kvs.remove(&key),
                    };
                }
                return Err(e);
            }
        }
        st.revision = rev;
        for event in events {
            st.publish(event);
        }
        Ok(Some(rev))
    }

    /// Drop leases past their deadline and delete their keys (one revision per lease).
    fn expire_leases(&self, st: &mut State) -> Result<(), MetaError> {
        if st.leases.is_empty() {
            return Ok(());
        }
        let now = Instant::now();
        let expired: Vec<LeaseId> = st
            .leases
            .iter()
            .filter(|(_, l)| l.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        for lease in expired {
            let ops = st.keys_of(lease);
            self.apply(st, ops)?;
            st.leases.remove(&lease);
            tracing::debug!(%lease, "lease expired");
        }
        Ok(())
    }
}

impl MetaStore for EmbeddedMetaStore {
    fn get(&self, key: &str) -> Result<Option<Versioned>, MetaError> {
        let st = self.locked()?;
        Ok(st.kvs.get(key).map(|e| Versioned {
            value: e.value.clone(),
            mod_revision: e.mod_revision,
        }))
    }

    fn list_with_revision(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, Versioned)>, Revision), MetaError> {
        let st = self.locked()?;
        let items = st
            .kvs
            .range::<str, _>((Bound::Included(prefix), Bound::Unbounded))
            .take_while(|(k, _)| k.starts_with(prefix))
            .map(|(k, e)| {
                let v = Versioned {
                    value: e.value.clone(),
                    mod_revision: e.mod_revision,
                };
                (k.clone(), v)
            })
            .collect();
        Ok((items, st.revision))
    }

    fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError> {
        check_key(key)?;
        let mut st = self.locked()?;
        let current = st.mod_revision(key);
        if current.unwrap_or(0) != expected {
            return Err(MetaError::Conflict {
                key: key.into(),
                current,
            });
        }
        st.check_lease(lease)?;
        let op = Op::Put {
            key: key.into(),
            value: value.to_vec(),
            lease,
        };
        Ok(self.inner.apply(&mut st, vec![op])?.unwrap_or(st.revision))
    }

    fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<(), MetaError> {
        check_key(key)?;
        let mut st = self.locked()?;
        let current = st.mod_revision(key);
        if current.unwrap_or(0) != expected {
            return Err(MetaError::Conflict {
                key: key.into(),
                current,
            });
        }
        self.inner
            .apply(&mut st, vec![Op::Delete { key: key.into() }])?;
        Ok(())
    }

    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Revision, MetaError> {
        check_key(key)?;
        let mut st = self.locked()?;
        st.check_lease(lease)?;
        let op = Op::Put {
            key: key.into(),
            value: value.to_vec(),
            lease,
        };
        Ok(self.inner.apply(&mut st, vec![op])?.unwrap_or(st.revision))
    }

    fn delete(&self, key: &str) -> Result<(), MetaError> {
        check_key(key)?;
        let mut st = self.locked()?;
        self.inner
            .apply(&mut st, vec![Op::Delete { key: key.into() }])?;
        Ok(())
    }

    fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        check_ttl(ttl)?;
        let mut st = self.locked()?;
        let id = LeaseId(st.next_lease);
        st.next_lease += 1;
        let deadline = Instant::now() + ttl;
        st.leases.insert(id, LeaseState { ttl, deadline });
        Ok(id)
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<bool, MetaError> {
        let mut st = self.locked()?;
        Ok(match st.leases.get_mut(&lease) {
            Some(l) => {
                l.deadline = Instant::now() + l.ttl;
                true
            }
            None => false,
        })
    }

    fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        let mut st = self.locked()?;
        if st.leases.contains_key(&lease) {
            let ops = st.keys_of(lease);
            self.inner.apply(&mut st, ops)?;
            st.leases.remove(&lease);
        }
        Ok(())
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch, MetaError> {
        let mut st = self.locked()?;
        if after < st.compact_revision {
            return Err(MetaError::Compacted {
                requested: after + 1,
                compact_revision: st.compact_revision,
            });
        }
        let (watch, tx, control) = Watch::channel();
        for event in &st.history {
            if event.revision() > after && event.key().starts_with(prefix) {
                // The receiver is in `watch`, alive: this cannot fail.
                let _ = tx.send(event.clone());
            }
        }
        st.watchers.push(Watcher {
            prefix: prefix.into(),
            tx,
            control,
        });
        Ok(watch)
    }
}
