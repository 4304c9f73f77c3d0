//! One volume's throttle on the c.node that owns it: its token buckets (built from the
//! resolved settings), the latency controller's cap, the counters of throttled I/O, and the
//! completion latencies the controller reads.
//!
//! Every I/O of the volume, from every connection, protocol and forwarding c.node, takes
//! from these buckets: one short mutex per volume (no lock shared between volumes), skipped
//! entirely while the volume has no limit and no cap (one atomic load).
//!
//! A front end that can wait without holding a thread (NBD: its connection task) calls
//! [`VolumeQos::prepay`] and sleeps asynchronously before dispatching the I/O; the handle
//! underneath ([`super::QosExport`]) then finds the I/O paid for and runs it at once. Other
//! callers (iSCSI, forwarded requests) pay in [`super::QosExport`] and wait on their thread.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use weft_engine::qos_settings::{io_units, QosSettings};

use super::bucket::TokenBucket;
use crate::ha::clock::Clock;
use crate::io_stats::histogram::AtomicHistogram;

/// The direction of an I/O, for read-only and write-only limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

impl Direction {
    fn index(self) -> usize {
        match self {
            Direction::Read => 0,
            Direction::Write => 1,
        }
    }
}

/// The default burst: a tenth of a second at the rate.
const DEFAULT_BURST_SECONDS: f64 = 0.1;

/// The buckets a volume's settings ask for.
#[derive(Debug, Default)]
struct Buckets {
    iops: Option<TokenBucket>,
    read_iops: Option<TokenBucket>,
    write_iops: Option<TokenBucket>,
    bytes: Option<TokenBucket>,
    read_bytes: Option<TokenBucket>,
    write_bytes: Option<TokenBucket>,
    /// The latency controller's cap on reads and writes together, in I/O units per second.
    cap: Option<TokenBucket>,
}

impl Buckets {
    fn any(&self) -> bool {
        self.iops.is_some()
            || self.read_iops.is_some()
            || self.write_iops.is_some()
            || self.bytes.is_some()
            || self.read_bytes.is_some()
            || self.write_bytes.is_some()
            || self.cap.is_some()
    }

    fn take(&mut self, dir: Direction, units: f64, bytes: f64, now: Duration) -> Duration {
        let (dir_iops, dir_bytes) = match dir {
            Direction::Read => (&mut self.read_iops, &mut self.read_bytes),
            Direction::Write => (&mut self.write_iops, &mut self.write_bytes),
        };
        let mut wait = Duration::ZERO;
        for (bucket, cost) in [
            (&mut self.iops, units),
            (dir_iops, units),
            (&mut self.bytes, bytes),
            (dir_bytes, bytes),
            (&mut self.cap, units),
        ] {
            if let Some(b) = bucket {
                wait = wait.max(b.take(cost, now));
            }
        }
        wait
    }
}

/// Rebuild `slot` for `rate` (or remove it), keeping its balance when it stays.
fn configure(slot: &mut Option<TokenBucket>, rate: Option<u64>, burst: Option<u64>, now: Duration) {
    match rate {
        None => *slot = None,
        Some(rate) => {
            let rate = rate as f64;
            let depth = burst.map_or(rate * DEFAULT_BURST_SECONDS, |b| b as f64);
            match slot {
                Some(b) => b.reconfigure(rate, depth, now),
                None => *slot = Some(TokenBucket::new(rate, depth, now)),
            }
        }
    }
}

/// What the registry and the API show of one volume.
#[derive(Debug, Clone, PartialEq)]
pub struct QosState {
    pub name: String,
    /// The settings in force (class resolved).
    pub settings: QosSettings,
    /// The latency controller's cap now, in 4 KiB units per second.
    pub cap_units_per_s: Option<f64>,
    pub throttled_ios: u64,
    pub throttled_wait_seconds: f64,
    /// The p99 latency of the last window with enough I/O to tell (what the latency
    /// target is held to), in microseconds.
    pub latency_p99_us: Option<f64>,
}

/// A volume's throttle. A consistency group's shared buckets are one too (named after the
/// group, with no group of its own and never capped): each member's throttle points at it.
#[derive(Debug)]
pub struct VolumeQos {
    name: String,
    clock: Arc<dyn Clock>,
    /// Whether any bucket of its own exists.
    own_limited: AtomicBool,
    /// Whether any bucket of its own or of its group's exists: the fast path reads only this.
    limited: AtomicBool,
    buckets: Mutex<Buckets>,
    /// The throttle of the group it is a member of: every I/O pays both.
    group: Mutex<Option<Arc<VolumeQos>>>,
    settings: Mutex<QosSettings>,
    /// Units and bytes paid by a front end ahead of the call ([`VolumeQos::prepay`]), per
    /// direction, not yet used by one.
    prepaid_units: [AtomicU64; 2],
    prepaid_bytes: [AtomicU64; 2],
    throttled_ios: AtomicU64,
    throttled_wait_ns: AtomicU64,
    /// I/O units completed: the controller's measure of the volume's rate.
    completed_units: AtomicU64,
    /// Completion latencies as the client sees them, from the front end's receipt of the
    /// request to its reply, less the volume's own throttle wait (`super::received`).
    latency: AtomicHistogram,
    /// [`QosState::latency_p99_us`] as f64 bits; `u64::MAX`: none yet.
    last_p99_us: AtomicU64,
}

impl VolumeQos {
    pub fn new(name: &str, clock: Arc<dyn Clock>) -> VolumeQos {
        VolumeQos {
            name: name.to_string(),
            clock,
            own_limited: AtomicBool::new(false),
            limited: AtomicBool::new(false),
            buckets: Mutex::new(Buckets::default()),
            group: Mutex::new(None),
            settings: Mutex::new(QosSettings::default()),
            prepaid_units: [AtomicU64::new(0), AtomicU64::new(0)],
            prepaid_bytes: [AtomicU64::new(0), AtomicU64::new(0)],
            throttled_ios: AtomicU64::new(0),
            throttled_wait_ns: AtomicU64::new(0),
            completed_units: AtomicU64::new(0),
            latency: AtomicHistogram::default(),
            last_p99_us: AtomicU64::new(u64::MAX),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Apply resolved settings (the class already merged in). Buckets that stay keep their
    /// balance, so a live change neither grants a fresh burst nor forgives a debt.
    pub fn set(&self, settings: &QosSettings) {
        let now = self.clock.now();
        let mut b = self.buckets.lock();
        let s = settings;
        configure(&mut b.iops, s.iops_max, s.iops_burst, now);
        configure(&mut b.read_iops, s.read_iops_max, s.iops_burst, now);
        configure(&mut b.write_iops, s.write_iops_max, s.iops_burst, now);
        configure(&mut b.bytes, s.bytes_per_s_max, s.bytes_burst, now);
        configure(
            &mut b.read_bytes,
            s.read_bytes_per_s_max,
            s.bytes_burst,
            now,
        );
        configure(
            &mut b.write_bytes,
            s.write_bytes_per_s_max,
            s.bytes_burst,
            now,
        );
        self.own_limited.store(b.any(), Ordering::Release);
        drop(b);
        self.update_limited();
        *self.settings.lock() = settings.clone();
    }

    /// Make I/O pay `group`'s buckets as well (`None`: no group's).
    pub fn set_group(&self, group: Option<Arc<VolumeQos>>) {
        *self.group.lock() = group;
        self.update_limited();
    }

    /// The name of the group whose buckets it pays, if any.
    pub fn group(&self) -> Option<String> {
        self.group.lock().as_ref().map(|g| g.name.clone())
    }

    /// Bring the fast path's flag up to date with its own buckets and its group's (a group's
    /// settings change: the registry calls this through [`VolumeQos::set_group`]).
    fn update_limited(&self) {
        let group = self.group.lock().as_ref().is_some_and(|g| g.is_limited());
        let own = self.own_limited.load(Ordering::Acquire);
        self.limited.store(own || group, Ordering::Release);
    }

    /// Whether any limit or cap applies now (else I/O passes without a lock).
    pub fn is_limited(&self) -> bool {
        self.limited.load(Ordering::Acquire)
    }

    pub fn settings(&self) -> QosSettings {
        self.settings.lock().clone()
    }

    /// Set or lift the latency controller's cap (units per second, reads and writes together).
    pub fn set_cap(&self, cap_units_per_s: Option<f64>) {
        let now = self.clock.now();
        let mut b = self.buckets.lock();
        match (cap_units_per_s, &mut b.cap) {
            (None, cap) => *cap = None,
            (Some(rate), Some(bucket)) => {
                bucket.reconfigure(rate, rate * DEFAULT_BURST_SECONDS, now);
            }
            (Some(rate), cap @ None) => {
                *cap = Some(TokenBucket::new(rate, rate * DEFAULT_BURST_SECONDS, now));
            }
        }
        self.own_limited.store(b.any(), Ordering::Release);
        drop(b);
        self.update_limited();
    }

    pub fn cap(&self) -> Option<f64> {
        self.buckets
            .lock()
            .cap
            .as_ref()
            .map(TokenBucket::rate_per_s)
    }

    /// Take an I/O's cost from its own buckets and its group's; how long it must wait
    /// before it runs (the longer of the two).
    fn charge(&self, dir: Direction, units: u64, bytes: u64) -> Duration {
        if units == 0 && bytes == 0 {
            return Duration::ZERO;
        }
        let now = self.clock.now();
        let own = self
            .buckets
            .lock()
            .take(dir, units as f64, bytes as f64, now);
        let group = self.group.lock().clone();
        let shared = group.map_or(Duration::ZERO, |g| g.charge(dir, units, bytes));
        let wait = own.max(shared);
        if !wait.is_zero() {
            self.throttled_ios.fetch_add(1, Ordering::Relaxed);
            let ns = u64::try_from(wait.as_nanos()).unwrap_or(u64::MAX);
            self.throttled_wait_ns.fetch_add(ns, Ordering::Relaxed);
        }
        wait
    }

    /// Pay for an I/O of `bytes` bytes ahead of the call that runs it: the caller waits the
    /// returned time (asynchronously), then makes the call, which finds it paid.
    pub fn prepay(&self, dir: Direction, bytes: u64) -> Duration {
        if !self.limited.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        let units = io_units(bytes);
        let i = dir.index();
        self.prepaid_units[i].fetch_add(units, Ordering::Relaxed);
        self.prepaid_bytes[i].fetch_add(bytes, Ordering::Relaxed);
        self.charge(dir, units, bytes)
    }

    /// The cost of an I/O about to run, less what was prepaid; how long to wait first.
    pub fn admit(&self, dir: Direction, bytes: u64) -> Duration {
        let i = dir.index();
        let units = take_credit(&self.prepaid_units[i], io_units(bytes));
        let bytes = take_credit(&self.prepaid_bytes[i], bytes);
        if !self.limited.load(Ordering::Acquire) {
            return Duration::ZERO;
        }
        self.charge(dir, units, bytes)
    }

    /// An I/O completed `latency` after its front end received it (its own throttle wait
    /// excluded).
    pub fn completed(&self, bytes: u64, latency: Duration) {
        self.completed_units
            .fetch_add(io_units(bytes), Ordering::Relaxed);
        self.latency
            .record(u64::try_from(latency.as_micros()).unwrap_or(u64::MAX));
    }

    pub fn completed_units(&self) -> u64 {
        self.completed_units.load(Ordering::Relaxed)
    }

    pub fn latency(&self) -> &AtomicHistogram {
        &self.latency
    }

    /// The controller measured a window's p99 (the registry, each tick with enough I/O).
    pub fn measured_p99(&self, p99_us: f64) {
        self.last_p99_us.store(p99_us.to_bits(), Ordering::Relaxed);
    }

    fn last_p99(&self) -> Option<f64> {
        let bits = self.last_p99_us.load(Ordering::Relaxed);
        (bits != u64::MAX).then(|| f64::from_bits(bits))
    }

    pub fn state(&self) -> QosState {
        QosState {
            name: self.name.clone(),
            settings: self.settings(),
            cap_units_per_s: self.cap(),
            throttled_ios: self.throttled_ios.load(Ordering::Relaxed),
            throttled_wait_seconds: self.throttled_wait_ns.load(Ordering::Relaxed) as f64 / 1e9,
            latency_p99_us: self.last_p99(),
        }
    }
}

/// Take up to `want` from `credit`; returns what is left to pay.
fn take_credit(credit: &AtomicU64, want: u64) -> u64 {
    let taken = credit
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |c| {
            (c > 0).then(|| c.saturating_sub(want))
        })
        .map_or(0, |before| before.min(want));
    want - taken
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::clock::SimClock;

    fn limited(iops: u64) -> (Arc<SimClock>, VolumeQos) {
        let clock = Arc::new(SimClock::default());
        let q = VolumeQos::new("v", clock.clone());
        q.set(&QosSettings {
            iops_max: Some(iops),
            iops_burst: Some(1),
            ..QosSettings::default()
        });
        (clock, q)
    }

    #[test]
    fn ios_count_in_4k_units() {
        let (_, q) = limited(1000);
        assert_eq!(q.admit(Direction::Read, 4096), Duration::ZERO);
        // 64 KiB = 16 units at 1000/s: 16 ms owed.
        assert_eq!(q.admit(Direction::Write, 65536), Duration::from_millis(16));
        let s = q.state();
        assert_eq!(s.throttled_ios, 1);
        assert!((s.throttled_wait_seconds - 0.016).abs() < 1e-6);
    }

    #[test]
    fn a_prepaid_io_is_not_charged_twice() {
        let (clock, q) = limited(1000);
        assert_eq!(q.prepay(Direction::Write, 4096), Duration::ZERO);
        assert_eq!(q.prepay(Direction::Write, 4096), Duration::from_millis(1));
        clock.advance(Duration::from_millis(1));
        // The two calls find their cost paid.
        assert_eq!(q.admit(Direction::Write, 4096), Duration::ZERO);
        assert_eq!(q.admit(Direction::Write, 4096), Duration::ZERO);
        // A third, not prepaid, pays.
        assert_eq!(q.admit(Direction::Write, 4096), Duration::from_millis(1));
    }

    #[test]
    fn separate_read_and_write_limits() {
        let clock = Arc::new(SimClock::default());
        let q = VolumeQos::new("v", clock);
        q.set(&QosSettings {
            write_iops_max: Some(100),
            iops_burst: Some(1),
            ..QosSettings::default()
        });
        q.admit(Direction::Write, 4096);
        assert!(!q.admit(Direction::Write, 4096).is_zero());
        for _ in 0..1000 {
            assert!(q.admit(Direction::Read, 4096).is_zero(), "reads are free");
        }
    }

    #[test]
    fn members_share_their_groups_buckets() {
        let clock = Arc::new(SimClock::default());
        let group = Arc::new(VolumeQos::new("g", clock.clone()));
        group.set(&QosSettings {
            iops_max: Some(1000),
            iops_burst: Some(1),
            ..QosSettings::default()
        });
        let a = VolumeQos::new("a", clock.clone());
        let b = VolumeQos::new("b", clock.clone());
        assert!(!a.is_limited());
        a.set_group(Some(Arc::clone(&group)));
        b.set_group(Some(Arc::clone(&group)));
        assert!(a.is_limited(), "the group's limit makes the member limited");
        // One unit of burst between them: the second member's I/O owes 1 ms, the third 2 ms.
        assert_eq!(a.admit(Direction::Write, 4096), Duration::ZERO);
        assert_eq!(b.admit(Direction::Read, 4096), Duration::from_millis(1));
        assert_eq!(a.admit(Direction::Write, 4096), Duration::from_millis(2));
        assert_eq!(group.state().throttled_ios, 2);
        assert_eq!(a.state().throttled_ios, 1);
        // Its own limit binds too: the longer wait wins.
        b.set(&QosSettings {
            iops_max: Some(100),
            iops_burst: Some(1),
            ..QosSettings::default()
        });
        clock.advance(Duration::from_secs(1));
        assert_eq!(b.admit(Direction::Write, 4096), Duration::ZERO);
        assert_eq!(b.admit(Direction::Write, 4096), Duration::from_millis(10));
        // Out of the group: only its own.
        a.set_group(None);
        assert!(!a.is_limited());
    }

    #[test]
    fn no_settings_no_throttle_and_a_cap_throttles() {
        let clock = Arc::new(SimClock::default());
        let q = VolumeQos::new("v", clock);
        for _ in 0..1000 {
            assert!(q.admit(Direction::Write, 1 << 20).is_zero());
        }
        q.set_cap(Some(10.0));
        let waits: Vec<_> = (0..3).map(|_| q.admit(Direction::Read, 4096)).collect();
        assert!(!waits[2].is_zero(), "{waits:?}");
        q.set_cap(None);
        assert!(q.admit(Direction::Read, 4096).is_zero());
    }
}
