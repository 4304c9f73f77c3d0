//! The clock seam: lease and failover decisions read time through [`Clock`], so tests drive
//! them with [`SimClock`] (time moves only when the test says) instead of sleeping.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Monotonic time, as a duration since the clock's own origin.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Duration;
}

/// The machine's monotonic clock.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock {
            origin: Instant::now(),
        })
    }
}

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Simulated time for tests: starts at zero, moves by [`SimClock::advance`].
#[derive(Debug, Default)]
pub struct SimClock {
    now: Mutex<Duration>,
}

impl SimClock {
    pub fn advance(&self, by: Duration) {
        *self.now.lock() += by;
    }
}

impl Clock for SimClock {
    fn now(&self) -> Duration {
        *self.now.lock()
    }
}
