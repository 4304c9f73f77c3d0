//! [`Stop`]: the one shutdown signal of a d.node, fanned out to its background threads. A
//! thread waits on it instead of sleeping, so shutdown never waits out an interval.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

#[derive(Debug, Default)]
pub(crate) struct Stop {
    stopped: Mutex<bool>,
    changed: Condvar,
}

impl Stop {
    pub(crate) fn stop(&self) {
        *self.stopped.lock() = true;
        self.changed.notify_all();
    }

    pub(crate) fn is_stopped(&self) -> bool {
        *self.stopped.lock()
    }

    /// Wait up to `timeout`; true if stopped.
    pub(crate) fn wait(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut stopped = self.stopped.lock();
        while !*stopped {
            if self.changed.wait_until(&mut stopped, deadline).timed_out() {
                break;
            }
        }
        *stopped
    }
}
