//! The engine's state lock, timed: every hold of `Shared::state` is measured from the moment
//! it is taken to its release (a wait on a condition variable ends one hold and starts
//! another) and counted per call site (`#[track_caller]`: the file and line that took it),
//! with its total, its longest and a histogram. Two clock reads and a few relaxed atomic
//! adds per hold, always on, so the figures are there on a production c.node too
//! ([`crate::Engine::lock_holds`], `examples/ingest.rs` prints them).
//!
//! What they are for: the lock serialises every core's work on the engine's maps, so its
//! hold times bound how far ingest scales with cores (issue 19; `docs/ARCHITECTURE.md`,
//! "Scaling to many cores").

use std::ops::{Deref, DerefMut};
use std::panic::Location;
use std::ptr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard, WaitTimeoutResult};

/// Call sites tracked; later ones are counted in `untracked`.
const SITES_MAX: usize = 128;
/// Upper bounds of the histogram's buckets, in ns (the last bucket is everything above).
pub const BUCKET_BOUNDS_NS: [u64; 7] =
    [1_000, 4_000, 16_000, 64_000, 256_000, 1_000_000, 4_000_000];
const BUCKETS: usize = BUCKET_BOUNDS_NS.len() + 1;

struct Slot {
    site: OnceLock<&'static Location<'static>>,
    count: AtomicU64,
    total_ns: AtomicU64,
    max_ns: AtomicU64,
    buckets: [AtomicU64; BUCKETS],
}

impl Slot {
    fn new() -> Slot {
        Slot {
            site: OnceLock::new(),
            count: AtomicU64::new(0),
            total_ns: AtomicU64::new(0),
            max_ns: AtomicU64::new(0),
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

/// The holds of one lock, per call site.
pub struct HoldStats {
    slots: Box<[Slot]>,
    untracked: AtomicU64,
}

/// One call site's holds, as [`TimedMutex::holds`] reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteHolds {
    /// `file:line` of the call that took the lock.
    pub site: String,
    pub count: u64,
    pub total: Duration,
    pub max: Duration,
    /// Holds per bucket of [`BUCKET_BOUNDS_NS`] (and one above the last bound).
    pub buckets: [u64; BUCKETS],
}

impl SiteHolds {
    /// The bucket bound at or under which `fraction` of the holds ended (the last bucket
    /// answers the longest hold).
    pub fn quantile(&self, fraction: f64) -> Duration {
        let want = (self.count as f64 * fraction).ceil() as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want.max(1) {
                return BUCKET_BOUNDS_NS
                    .get(i)
                    .map_or(self.max, |&ns| Duration::from_nanos(ns).min(self.max));
            }
        }
        self.max
    }
}

impl HoldStats {
    fn new() -> HoldStats {
        HoldStats {
            slots: (0..SITES_MAX).map(|_| Slot::new()).collect(),
            untracked: AtomicU64::new(0),
        }
    }

    fn record(&self, site: &'static Location<'static>, held: Duration) {
        let ns = u64::try_from(held.as_nanos()).unwrap_or(u64::MAX);
        let start = (ptr::from_ref(site) as usize >> 4) % SITES_MAX;
        for probe in 0..SITES_MAX {
            let slot = &self.slots[(start + probe) % SITES_MAX];
            // A free slot is taken once; a racing site that lost it probes on.
            let current = *slot.site.get_or_init(|| site);
            if ptr::eq(current, site) {
                slot.count.fetch_add(1, Ordering::Relaxed);
                slot.total_ns.fetch_add(ns, Ordering::Relaxed);
                slot.max_ns.fetch_max(ns, Ordering::Relaxed);
                let bucket = BUCKET_BOUNDS_NS
                    .iter()
                    .position(|&bound| ns <= bound)
                    .unwrap_or(BUCKETS - 1);
                slot.buckets[bucket].fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        self.untracked.fetch_add(1, Ordering::Relaxed);
    }

    fn report(&self) -> Vec<SiteHolds> {
        let mut out: Vec<SiteHolds> = self
            .slots
            .iter()
            .filter_map(|s| {
                let site = s.site.get()?;
                Some(SiteHolds {
                    site: format!("{}:{}", site.file(), site.line()),
                    count: s.count.load(Ordering::Relaxed),
                    total: Duration::from_nanos(s.total_ns.load(Ordering::Relaxed)),
                    max: Duration::from_nanos(s.max_ns.load(Ordering::Relaxed)),
                    buckets: std::array::from_fn(|i| s.buckets[i].load(Ordering::Relaxed)),
                })
            })
            .collect();
        out.sort_by_key(|h| std::cmp::Reverse(h.total));
        out
    }
}

/// A mutex whose holds are timed per call site (see the module doc).
pub struct TimedMutex<T> {
    inner: Mutex<T>,
    stats: HoldStats,
}

impl<T> TimedMutex<T> {
    pub fn new(value: T) -> TimedMutex<T> {
        TimedMutex {
            inner: Mutex::new(value),
            stats: HoldStats::new(),
        }
    }

    #[track_caller]
    pub fn lock(&self) -> TimedGuard<'_, T> {
        let site = Location::caller();
        let guard = self.inner.lock();
        TimedGuard {
            guard,
            since: Instant::now(),
            site,
            stats: &self.stats,
        }
    }

    /// The holds so far, per call site, the longest total first.
    pub fn holds(&self) -> Vec<SiteHolds> {
        self.stats.report()
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for TimedMutex<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedMutex").finish_non_exhaustive()
    }
}

/// A hold of a [`TimedMutex`]; the hold ends when it is dropped.
pub struct TimedGuard<'a, T> {
    guard: MutexGuard<'a, T>,
    since: Instant,
    site: &'static Location<'static>,
    stats: &'a HoldStats,
}

impl<T> TimedGuard<'_, T> {
    fn end_hold(&self) {
        self.stats.record(self.site, self.since.elapsed());
    }

    /// `condvar.wait_for` on this hold: the wait is not counted as holding the lock.
    pub fn wait_for(&mut self, condvar: &Condvar, timeout: Duration) -> WaitTimeoutResult {
        self.end_hold();
        let r = condvar.wait_for(&mut self.guard, timeout);
        self.since = Instant::now();
        r
    }
}

impl<T> Drop for TimedGuard<'_, T> {
    fn drop(&mut self) {
        self.end_hold();
    }
}

impl<T> Deref for TimedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> DerefMut for TimedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_are_counted_per_call_site_without_the_waits() {
        let m = TimedMutex::new(0u32);
        for _ in 0..3 {
            let mut g = m.lock();
            *g += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        let cv = Condvar::new();
        {
            let mut g = m.lock();
            // 50 ms of waiting, no more than a few µs of holding.
            let _ = g.wait_for(&cv, Duration::from_millis(50));
        }
        let holds = m.holds();
        assert_eq!(holds.len(), 2, "{holds:?}");
        let sleeper = &holds[0];
        assert!(sleeper.site.contains("lock_timing.rs:"), "{sleeper:?}");
        assert_eq!(sleeper.count, 3);
        assert!(sleeper.total >= Duration::from_millis(6), "{sleeper:?}");
        assert!(sleeper.max >= Duration::from_millis(2));
        // 2 ms each: above the 1 ms bound, whatever a busy machine adds.
        assert_eq!(sleeper.buckets[5..].iter().sum::<u64>(), 3, "{sleeper:?}");
        assert!(
            sleeper.quantile(0.5) >= Duration::from_millis(2),
            "{sleeper:?}"
        );
        let waiter = &holds[1];
        assert_eq!(waiter.count, 2, "before and after the wait: {waiter:?}");
        assert!(
            waiter.total < Duration::from_millis(20),
            "the wait is not a hold: {waiter:?}"
        );
        assert_eq!(*m.lock(), 3);
    }
}
