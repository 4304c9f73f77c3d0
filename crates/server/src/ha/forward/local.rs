//! This c.node's own export backend for a shard, set once it owns the shard and its engine is
//! open: forwarded exports switch to it, and the forward listener serves from it. The slot of a
//! shard the process owns besides its own is also *cleared* when it gives that shard up
//! (`crate::shard_host`): exports switch back to forwarding, and the generation tells every
//! handle that its cached local handle is stale.
//!
//! Giving up needs to know when no request runs on the old engine any more: a request that
//! may use the slot's backend [`LocalSlot::enter`]s first (before it reads the slot), so once
//! the slot is cleared and [`LocalSlot::in_flight`] is zero, no request can reach the old
//! backend again.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::backend::ExportBackend;

/// This c.node's own backend of a shard, while it owns the shard and its engine is open.
#[derive(Default)]
pub struct LocalSlot {
    backend: RwLock<Option<Arc<dyn ExportBackend>>>,
    /// Bumped at every set and clear.
    generation: AtomicU64,
    /// Requests between [`LocalSlot::enter`] and the drop of its guard.
    in_flight: AtomicUsize,
    ready: tokio::sync::Notify,
}

impl std::fmt::Debug for LocalSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSlot")
            .field("serving", &self.backend.read().is_some())
            .field("generation", &self.generation())
            .finish()
    }
}

/// A request that may run on the slot's backend (see the module doc).
pub struct Entered<'a>(&'a LocalSlot);

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

impl LocalSlot {
    pub fn new() -> Arc<LocalSlot> {
        Arc::default()
    }

    /// This c.node serves from `backend` from now on.
    pub fn set(&self, backend: Arc<dyn ExportBackend>) {
        *self.backend.write() = Some(backend);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.ready.notify_waiters();
    }

    /// This c.node no longer serves the shard: requests go to its owner again.
    pub fn clear(&self) {
        *self.backend.write() = None;
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    pub fn get(&self) -> Option<Arc<dyn ExportBackend>> {
        self.backend.read().clone()
    }

    pub fn is_set(&self) -> bool {
        self.backend.read().is_some()
    }

    /// Changes at every set and clear: a handle opened from the backend of another
    /// generation is stale.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Count a request that may run on the backend until the guard drops.
    pub fn enter(&self) -> Entered<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        Entered(self)
    }

    /// Requests entered and not finished.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Wait until this c.node serves.
    pub async fn wait(&self) -> Arc<dyn ExportBackend> {
        loop {
            let notified = self.ready.notified();
            if let Some(b) = self.get() {
                return b;
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
}
