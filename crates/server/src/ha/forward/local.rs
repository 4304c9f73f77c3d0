//! This c.node's own export backend, set once it owns the cluster and its engine is open:
//! forwarded exports switch to it, and the forward listener serves from it.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crate::backend::ExportBackend;

/// This c.node's own backend, once it owns the cluster and its engine is open.
#[derive(Default)]
pub struct LocalSlot {
    backend: OnceLock<Arc<dyn ExportBackend>>,
    ready: tokio::sync::Notify,
}

impl std::fmt::Debug for LocalSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalSlot")
            .field("serving", &self.backend.get().is_some())
            .finish()
    }
}

impl LocalSlot {
    pub fn new() -> Arc<LocalSlot> {
        Arc::default()
    }

    /// This c.node serves from `backend` from now on.
    pub fn set(&self, backend: Arc<dyn ExportBackend>) {
        let _ = self.backend.set(backend);
        self.ready.notify_waiters();
    }

    pub fn get(&self) -> Option<&Arc<dyn ExportBackend>> {
        self.backend.get()
    }

    /// Wait until this c.node serves.
    pub async fn wait(&self) -> Arc<dyn ExportBackend> {
        loop {
            let notified = self.ready.notified();
            if let Some(b) = self.get() {
                return Arc::clone(b);
            }
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
    }
}
