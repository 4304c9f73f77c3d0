//! Per-export I/O statistics: what the front ends did to each volume and snapshot, by protocol
//! (NBD, iSCSI) and operation (read, write, flush, discard).
//!
//! - [`MeteredBackend`] wraps the backend each listener serves: every I/O is timed and counted
//!   in its export's [`ExportCounters`] (a few relaxed atomic adds, no lock).
//! - The sampler (a thread, [`IoStats::start_sampler`]) reads the counters every 100 ms and
//!   keeps each busy export's [`Sample`]s: 100 ms for the last minute, 1 s for 15 minutes,
//!   10 s for the hour. Idle exports cost one load per counter per tick and keep no history.
//! - `/metrics` reads the cumulative counters ([`crate::metrics`]); the API serves the series
//!   and streams new samples ([`crate::api`]'s `stats` module).

mod counters;
pub mod histogram;
mod metered;
mod series;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

pub use counters::{clock_us, BusyTime, ExportCounters, Op, OpTotals, Protocol};
pub use metered::MeteredBackend;
pub use series::{OpRate, Sample, Step, HEAT_BOUNDS_US, HEAT_BUCKETS};

use histogram::Buckets;
use series::{History, Interval, OpInterval};

/// The sampler's period.
pub const TICK: Duration = Duration::from_millis(100);
/// A history idle for this many ticks (the longest series) is dropped.
const IDLE_TICKS_BEFORE_DROP: u64 = 36_000;
/// Ticks between checks for deleted exports.
const PRUNE_EVERY_TICKS: u64 = 100;

/// The registry of export counters and their sampled history.
#[derive(Debug)]
pub struct IoStats {
    counters: RwLock<HashMap<Arc<str>, Arc<ExportCounters>>>,
    sampled: Mutex<Sampled>,
    /// Counts sampler ticks; the live streams wait on it.
    ticks: tokio::sync::watch::Sender<u64>,
    stop: AtomicBool,
}

/// What the sampler keeps between ticks.
#[derive(Debug, Default)]
struct Sampled {
    tick: u64,
    exports: HashMap<Arc<str>, ExportSampling>,
}

#[derive(Debug)]
struct ExportSampling {
    counters: Arc<ExportCounters>,
    /// Cumulative totals at the last tick, per protocol and operation (read, write, flush).
    last: [[OpTotals; 3]; 2],
    /// Present once the export did I/O; dropped after an hour of idleness.
    history: Option<Box<History>>,
    last_active_tick: u64,
    /// The export's busy time at the last tick (see [`BusyTime`]).
    last_busy_us: u64,
}

impl ExportSampling {
    fn new(counters: Arc<ExportCounters>) -> ExportSampling {
        let last = Protocol::ALL
            .map(|p| [Op::Read, Op::Write, Op::Flush].map(|op| counters.op(p, op).load()));
        let last_busy_us = counters.busy.busy_us(clock_us());
        ExportSampling {
            counters,
            last,
            history: None,
            last_active_tick: 0,
            last_busy_us,
        }
    }

    /// The interval since the last tick; reads the histograms only of operations that moved.
    fn interval(&mut self, seconds: f64) -> Interval {
        let busy_us = self.counters.busy.busy_us(clock_us());
        let mut interval = Interval {
            seconds,
            busy_us: busy_us.saturating_sub(self.last_busy_us),
            ..Interval::default()
        };
        self.last_busy_us = self.last_busy_us.max(busy_us);
        for (p, protocol) in Protocol::ALL.into_iter().enumerate() {
            for (o, op) in [Op::Read, Op::Write, Op::Flush].into_iter().enumerate() {
                let counters = self.counters.op(protocol, op);
                let ops = counters.ops.load(Ordering::Acquire);
                let last = &mut self.last[p][o];
                if ops == last.ops {
                    continue;
                }
                let now = counters.load();
                let part = OpInterval {
                    ops: now.ops - last.ops,
                    bytes: now.bytes - last.bytes,
                    latency_sum_us: now.latency_sum_us - last.latency_sum_us,
                    max_us: counters.latency_max_us.swap(0, Ordering::Relaxed),
                    latency: Some(now.latency.since(&last.latency)),
                };
                interval.ops[o].add(&part);
                *last = now;
            }
        }
        interval
    }
}

impl Default for IoStats {
    fn default() -> Self {
        IoStats {
            counters: RwLock::default(),
            sampled: Mutex::default(),
            ticks: tokio::sync::watch::channel(0).0,
            stop: AtomicBool::new(false),
        }
    }
}

impl IoStats {
    pub fn new() -> Arc<IoStats> {
        Arc::new(IoStats::default())
    }

    /// The counters of an export, created at its first open.
    pub fn export(&self, name: &str) -> Arc<ExportCounters> {
        if let Some(c) = self.counters.read().get(name) {
            return Arc::clone(c);
        }
        Arc::clone(self.counters.write().entry(Arc::from(name)).or_default())
    }

    /// Every export opened so far (and not deleted since), sorted by name.
    pub fn exports(&self) -> Vec<(Arc<str>, Arc<ExportCounters>)> {
        let mut all: Vec<_> = self
            .counters
            .read()
            .iter()
            .map(|(n, c)| (Arc::clone(n), Arc::clone(c)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    /// Forgets exports that no longer exist (a new export of the same name starts at zero;
    /// handles still open on the old one count into counters nobody reads).
    pub fn retain(&self, existing: &HashSet<String>) {
        self.counters
            .write()
            .retain(|name, _| existing.contains(name.as_ref()));
        self.sampled
            .lock()
            .exports
            .retain(|name, _| existing.contains(name.as_ref()));
    }

    /// One sampler step: `seconds` since the last one, ending at unix time `t_ms`.
    pub fn tick(&self, seconds: f64, t_ms: u64) {
        let counters = self.exports();
        let mut sampled = self.sampled.lock();
        sampled.tick += 1;
        let tick = sampled.tick;
        for (name, c) in counters {
            let export = sampled
                .exports
                .entry(name)
                .or_insert_with(|| ExportSampling::new(c));
            let interval = export.interval(seconds);
            if !interval.is_idle() {
                export.last_active_tick = tick;
                export.history.get_or_insert_with(Box::default);
            }
            let drop_history = match export.history.as_mut() {
                Some(h) => {
                    h.push(tick, t_ms, &interval);
                    tick - export.last_active_tick > IDLE_TICKS_BEFORE_DROP && h.is_idle()
                }
                None => false,
            };
            if drop_history {
                export.history = None;
            }
        }
        drop(sampled);
        self.ticks.send_replace(tick);
    }

    /// The samples of an export at a step, oldest first, newer than `since_ms`; empty when
    /// it did no I/O in the last hour.
    pub fn series(&self, name: &str, step: Step, since_ms: u64) -> Vec<Sample> {
        let sampled = self.sampled.lock();
        let Some(h) = sampled.exports.get(name).and_then(|e| e.history.as_ref()) else {
            return Vec::new();
        };
        h.samples(step)
            .iter()
            .filter(|s| s.t_ms > since_ms)
            .cloned()
            .collect()
    }

    /// Whether the export keeps samples (it did I/O in the last hour).
    pub fn has_history(&self, name: &str) -> bool {
        self.sampled
            .lock()
            .exports
            .get(name)
            .is_some_and(|e| e.history.is_some())
    }

    /// The last `count` samples at `step` of every export with a history.
    pub fn latest(&self, step: Step, count: usize) -> HashMap<String, Vec<Sample>> {
        let sampled = self.sampled.lock();
        sampled
            .exports
            .iter()
            .filter_map(|(name, e)| {
                let ring = e.history.as_ref()?.samples(step);
                let skip = ring.len().saturating_sub(count);
                Some((name.to_string(), ring.iter().skip(skip).cloned().collect()))
            })
            .collect()
    }

    /// Wakes at every sampler tick (the value is the tick count).
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ticks.subscribe()
    }

    /// Runs the sampler on its own thread until [`IoStats::stop`]. `existing` lists the
    /// exports that exist now (checked every 10 s to forget deleted ones).
    pub fn start_sampler(
        self: &Arc<Self>,
        existing: impl Fn() -> HashSet<String> + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let stats = Arc::clone(self);
        std::thread::Builder::new()
            .name("weft-stats".into())
            .spawn(move || {
                let mut last = Instant::now();
                let mut next = last + TICK;
                let mut ticks = 0u64;
                while !stats.stop.load(Ordering::Acquire) {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    // Late (a stalled machine): skip missed ticks rather than burst.
                    next = (next + TICK).max(Instant::now() + TICK / 2);
                    let now = Instant::now();
                    let seconds = now.duration_since(last).as_secs_f64();
                    last = now;
                    stats.tick(seconds, unix_ms());
                    ticks += 1;
                    if ticks.is_multiple_of(PRUNE_EVERY_TICKS) {
                        stats.retain(&existing());
                    }
                }
            })
    }

    /// Stops the sampler thread (it ends within one tick).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}

pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// Latency buckets of an operation as `prometheus-client` takes them: the count under each
/// power of two in seconds from 16 µs to about 17 s, and +Inf (not cumulative: the encoder
/// adds them up). Bounds 2x apart (16, 32, 64, 128 µs...): 4x apart was too coarse for an
/// NVMe p99, and every bound is an edge of the fine histogram, so the counts stay exact.
pub fn prometheus_buckets(latency: &Buckets) -> Vec<(f64, u64)> {
    let mut below = 0;
    let mut out: Vec<(f64, u64)> = (4..=24)
        .map(|power| {
            let bound_us = 1u64 << power;
            let cumulative = latency.count_at_or_below(bound_us);
            let count = cumulative - below;
            below = cumulative;
            (bound_us as f64 / 1e6, count)
        })
        .collect();
    out.push((f64::INFINITY, latency.total() - below));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampler_sees_what_was_recorded() {
        let stats = IoStats::new();
        let vol = stats.export("vol");
        stats.tick(0.1, 100);
        for _ in 0..50 {
            vol.op(Protocol::Nbd, Op::Write).record(4096, 30, true);
        }
        for _ in 0..50 {
            vol.op(Protocol::Iscsi, Op::Write).record(4096, 60, true);
        }
        stats.tick(0.1, 200);
        let series = stats.series("vol", Step::Tenth, 0);
        assert_eq!(
            series.len(),
            1,
            "idle ticks before the first I/O keep nothing"
        );
        assert_eq!(series[0].write.iops, 1000.0);
        assert_eq!(series[0].write.max_us, 60.0);
        assert_eq!(series[0].heat.iter().sum::<u32>(), 100);
        stats.tick(0.1, 300);
        let series = stats.series("vol", Step::Tenth, 200);
        assert_eq!(series.len(), 1);
        assert_eq!(series[0].write.iops, 0.0);
        assert_eq!(series[0].write.max_us, 0.0);
        stats.retain(&HashSet::new());
        assert!(stats.exports().is_empty());
        assert!(stats.series("vol", Step::Tenth, 0).is_empty());
    }

    #[test]
    fn prometheus_buckets_count_each_range_once() {
        let h = histogram::AtomicHistogram::default();
        h.record(10);
        h.record(100);
        h.record(100_000_000);
        let b = prometheus_buckets(&h.load());
        assert_eq!(b[0], (16e-6, 1));
        assert_eq!(b[3], (128e-6, 1), "100 µs is in (64, 128]");
        assert!(b.windows(2).all(|w| w[0].0 < w[1].0));
        // At most 2x apart, up to +Inf.
        assert!(b[..b.len() - 1]
            .windows(2)
            .all(|w| w[1].0 <= 2.0 * w[0].0 * (1.0 + 1e-9)));
        assert_eq!(b.len(), 22);
        assert_eq!(b.iter().map(|(_, c)| c).sum::<u64>(), 3);
        assert_eq!(*b.last().unwrap(), (f64::INFINITY, 1));
    }
}
