//! weft's cluster metadata store: the small, strongly consistent state a cluster of c.nodes and
//! d.nodes shares (members, placement groups, volumes, leases, epochs).
//!
//! [`MetaStore`] is a synchronous key-value API modelled on etcd v3: every mutation gets a
//! cluster-wide [`Revision`]; writes can be conditional on a key's mod revision
//! (compare-and-swap); keys can be attached to a [`LeaseId`] that must be kept alive; and a
//! [`Watch`] streams changes under a prefix from a revision on. Implementations:
//! - [`EtcdMetaStore`]: etcd v3 through its JSON gateway (`etcd://host:port,...`).
//! - [`EmbeddedMetaStore`]: one process, no etcd; persisted to a JSON file.
//! - [`FaultyMetaStore`]: wraps another store and injects failures, for model tests.
//!
//! [`get_json`], [`cas_json`], [`update_json`] and [`list_json`] store serde types as JSON.
//! [`testing::EtcdServer`] runs a throwaway etcd for tests.

mod embedded;
mod error;
mod etcd;
mod faulty;
mod json;
pub mod testing;
mod watch;

use std::sync::Arc;
use std::time::Duration;

pub use embedded::{EmbeddedMetaStore, META_FILE_NAME, WATCH_HISTORY_EVENTS_MAX};
pub use error::MetaError;
pub use etcd::{parse_cluster_url, EtcdMetaStore, CLUSTER_URL_SCHEME, DEFAULT_ETCD_PORT};
pub use faulty::FaultyMetaStore;
pub use json::{cas_json, get_json, list_json, update_json, UPDATE_ATTEMPTS_MAX};
pub use watch::{Watch, WatchControl};

/// A store-wide modification counter (etcd's revision). A key's `mod_revision` is the revision of
/// its last write. In compare operations, 0 means "the key is absent".
pub type Revision = u64;

/// How long a request to etcd may take before [`connect_etcd`] reports a timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_millis(5_000);

/// A lease: keys attached to it are deleted when it expires or is revoked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LeaseId(pub i64);

impl std::fmt::Display for LeaseId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:x}", self.0)
    }
}

/// A value and the revision that wrote it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Versioned {
    pub value: Vec<u8>,
    pub mod_revision: Revision,
}

/// One change seen by a [`Watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    Put {
        key: String,
        value: Vec<u8>,
        revision: Revision,
    },
    Delete {
        key: String,
        revision: Revision,
    },
}

impl WatchEvent {
    pub fn key(&self) -> &str {
        match self {
            WatchEvent::Put { key, .. } | WatchEvent::Delete { key, .. } => key,
        }
    }

    /// The revision of the mutation (several events can share one, e.g. a lease expiry).
    pub fn revision(&self) -> Revision {
        match self {
            WatchEvent::Put { revision, .. } | WatchEvent::Delete { revision, .. } => *revision,
        }
    }
}

/// A key-value metadata store with revisions, compare-and-swap, leases and watches.
///
/// All calls block; network implementations bound every wait with a timeout. Keys are non-empty
/// UTF-8 strings; a prefix of "" means every key.
pub trait MetaStore: Send + Sync + std::fmt::Debug {
    fn get(&self, key: &str) -> Result<Option<Versioned>, MetaError>;

    /// Keys starting with `prefix`, sorted by key.
    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, MetaError> {
        Ok(self.list_with_revision(prefix)?.0)
    }

    /// Like [`MetaStore::list`], plus the store revision the listing was taken at: watch from
    /// it to see every later change without a gap.
    fn list_with_revision(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, Versioned)>, Revision), MetaError>;

    /// Put only if the key's mod_revision is `expected` (0: only if absent). Returns the new
    /// revision; [`MetaError::Conflict`] if the compare failed.
    fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError>;

    /// Delete only if the key's mod_revision is `expected` (0: only if absent, a no-op).
    fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<(), MetaError>;

    /// Unconditional put; returns the new revision. Without a lease the key is detached from
    /// any lease it had.
    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Revision, MetaError>;

    /// Unconditional delete; deleting an absent key is not an error.
    fn delete(&self, key: &str) -> Result<(), MetaError>;

    /// A new lease living `ttl` (rounded up to whole seconds by etcd, which also enforces a
    /// minimum, 2 s with default settings) unless kept alive.
    fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, MetaError>;

    /// Refresh a lease to its full TTL; Ok(false) if it has expired (its keys are gone).
    fn keep_alive(&self, lease: LeaseId) -> Result<bool, MetaError>;

    /// Revoke a lease, deleting its keys. Revoking an unknown or expired lease is not an error.
    fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError>;

    /// Events for keys under `prefix` with revision > `after`, delivered in revision order on
    /// [`Watch::events`] until the Watch is dropped. If the history after `after` is gone the
    /// call fails with [`MetaError::Compacted`]; a watch that breaks later closes its channel
    /// and reports why in [`Watch::error`].
    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch, MetaError>;
}

/// A shared store is a store: lets `Arc<dyn MetaStore>` go wherever a `MetaStore` is taken.
impl<S: MetaStore + ?Sized> MetaStore for Arc<S> {
    fn get(&self, key: &str) -> Result<Option<Versioned>, MetaError> {
        (**self).get(key)
    }
    fn list(&self, prefix: &str) -> Result<Vec<(String, Versioned)>, MetaError> {
        (**self).list(prefix)
    }
    fn list_with_revision(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, Versioned)>, Revision), MetaError> {
        (**self).list_with_revision(prefix)
    }
    fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError> {
        (**self).compare_and_put(key, expected, value, lease)
    }
    fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<(), MetaError> {
        (**self).compare_and_delete(key, expected)
    }
    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Revision, MetaError> {
        (**self).put(key, value, lease)
    }
    fn delete(&self, key: &str) -> Result<(), MetaError> {
        (**self).delete(key)
    }
    fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        (**self).grant_lease(ttl)
    }
    fn keep_alive(&self, lease: LeaseId) -> Result<bool, MetaError> {
        (**self).keep_alive(lease)
    }
    fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        (**self).revoke_lease(lease)
    }
    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch, MetaError> {
        (**self).watch(prefix, after)
    }
}

/// Connect to the etcd cluster named by `url` (`etcd://host:port[,host:port...]`) with
/// [`DEFAULT_REQUEST_TIMEOUT`]; fails with [`MetaError::Unavailable`] if no endpoint answers.
pub fn connect_etcd(url: &str) -> Result<Arc<dyn MetaStore>, MetaError> {
    let endpoints = parse_cluster_url(url)?;
    Ok(Arc::new(EtcdMetaStore::connect(
        &endpoints,
        DEFAULT_REQUEST_TIMEOUT,
    )?))
}

/// Check a key: non-empty (etcd rejects empty keys).
pub(crate) fn check_key(key: &str) -> Result<(), MetaError> {
    if key.is_empty() {
        return Err(MetaError::InvalidArgument {
            what: "key".into(),
            reason: "keys must not be empty".into(),
        });
    }
    Ok(())
}

/// Check a lease TTL: at least 1 ms (etcd rounds up to whole seconds).
pub(crate) fn check_ttl(ttl: Duration) -> Result<(), MetaError> {
    if ttl.is_zero() {
        return Err(MetaError::InvalidArgument {
            what: "lease TTL".into(),
            reason: "must be positive".into(),
        });
    }
    Ok(())
}
