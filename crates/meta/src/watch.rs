//! `Watch` (the consumer's end of a change stream) and `WatchControl` (the producer's end):
//! dropping the Watch tells the producer to stop; a producer that has to give up records why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{MetaError, WatchEvent};

/// A stream of [`WatchEvent`]s from [`crate::MetaStore::watch`]. Dropping it stops the producer
/// (a watcher thread exits within its poll interval).
///
/// When the channel disconnects while the Watch is alive, the producer gave up: see
/// [`Watch::error`] (e.g. [`MetaError::Compacted`] after a long disconnection). Restart from a
/// fresh listing then.
#[derive(Debug)]
pub struct Watch {
    pub events: Receiver<WatchEvent>,
    shared: Arc<Shared>,
}

/// The producer's handle on a [`Watch`]: it sends events on the paired `Sender` and checks
/// [`WatchControl::is_stopped`] between waits.
#[derive(Debug, Clone)]
pub struct WatchControl {
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    stopped: AtomicBool,
    error: Mutex<Option<MetaError>>,
}

impl Watch {
    /// A new watch: the caller keeps the `Sender` and the [`WatchControl`] and feeds events.
    pub fn channel() -> (Watch, Sender<WatchEvent>, WatchControl) {
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = Arc::new(Shared::default());
        let control = WatchControl {
            shared: shared.clone(),
        };
        (Watch { events: rx, shared }, tx, control)
    }

    /// Why the producer gave up, if it did (taken: a second call returns None).
    pub fn error(&self) -> Option<MetaError> {
        self.shared.error.lock().take()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
    }
}

impl WatchControl {
    /// True once the Watch was dropped: the producer should stop.
    pub fn is_stopped(&self) -> bool {
        self.shared.stopped.load(Ordering::Acquire)
    }

    /// Record why the producer gives up; it then drops its Sender, closing the channel.
    pub fn fail(&self, error: MetaError) {
        tracing::warn!(%error, "metadata watch stopped");
        *self.shared.error.lock() = Some(error);
    }
}
