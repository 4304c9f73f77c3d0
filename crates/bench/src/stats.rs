//! Latency and throughput statistics. Each worker records into its own [`Recorder`]s (no sharing,
//! no locks); the runner merges them after a point and summarises into [`DirStats`].
//!
//! Percentiles come from an HDR histogram in nanoseconds (3 significant digits). The display
//! histogram uses power-of-two microsecond buckets like Oracle's wait-event histograms: bucket k
//! counts latencies below 2^k µs and at or above 2^(k-1) µs (bucket 0: below 1 µs).

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Power-of-two buckets kept: the last one (2^39 µs, about 6 days) catches everything slower.
pub(crate) const POW2_BUCKETS: usize = 40;
/// HDR histogram precision: 3 significant digits, 0.1% error on any percentile.
const HDR_SIGFIG: u8 = 3;
/// Latencies are capped at one hour: anything slower is a hang, and the cap keeps the
/// auto-resizing histogram small.
const LATENCY_NS_MAX: u64 = 3_600 * 1_000_000_000;

/// Latencies and bytes of one kind of I/O (one class and direction) seen by one worker.
#[derive(Debug, Clone)]
pub(crate) struct Recorder {
    hist: Histogram<u64>,
    sum_ns: u128,
    ios: u64,
    bytes: u64,
    min_ns: u64,
    max_ns: u64,
    pow2: [u64; POW2_BUCKETS],
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hist: Histogram::new(HDR_SIGFIG).expect("3 significant digits is valid"),
            sum_ns: 0,
            ios: 0,
            bytes: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            pow2: [0; POW2_BUCKETS],
        }
    }
}

/// Latency summary in microseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct LatencyUs {
    pub(crate) mean: f64,
    pub(crate) min: f64,
    pub(crate) p50: f64,
    pub(crate) p95: f64,
    pub(crate) p99: f64,
    pub(crate) p999: f64,
    pub(crate) max: f64,
}

/// Summary of one direction (or both) over one point.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct DirStats {
    pub(crate) ios: u64,
    pub(crate) bytes: u64,
    pub(crate) iops: f64,
    /// Megabytes (10^6 bytes) per second.
    pub(crate) mb_per_s: f64,
    pub(crate) latency_us: LatencyUs,
    /// Counts per power-of-two µs bucket; index k counts [2^(k-1), 2^k) µs. Trailing empty
    /// buckets are dropped.
    pub(crate) histogram_pow2_us: Vec<u64>,
}

impl Recorder {
    #[inline]
    pub(crate) fn record(&mut self, latency_ns: u64, bytes: u64) {
        let ns = latency_ns.clamp(1, LATENCY_NS_MAX);
        self.hist
            .record(ns)
            .expect("auto-resizing histogram takes any value up to the cap");
        self.sum_ns += u128::from(ns);
        self.ios += 1;
        self.bytes += bytes;
        self.min_ns = self.min_ns.min(ns);
        self.max_ns = self.max_ns.max(ns);
        self.pow2[pow2_bucket(ns)] += 1;
    }

    pub(crate) fn merge(&mut self, other: &Recorder) {
        if other.ios == 0 {
            return;
        }
        self.hist
            .add(&other.hist)
            .expect("auto-resizing histograms always merge");
        self.sum_ns += other.sum_ns;
        self.ios += other.ios;
        self.bytes += other.bytes;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
        for (a, b) in self.pow2.iter_mut().zip(other.pow2.iter()) {
            *a += b;
        }
    }

    pub(crate) fn ios(&self) -> u64 {
        self.ios
    }

    /// Summarises over a measured window of `seconds`.
    #[allow(clippy::cast_precision_loss)] // counts far below 2^52
    pub(crate) fn summarize(&self, seconds: f64) -> DirStats {
        if self.ios == 0 {
            return DirStats::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        // HDR reports a bucket's highest equivalent value, which may pass the exact max.
        let q = |quantile: f64| us(self.hist.value_at_quantile(quantile).min(self.max_ns));
        let last = self.pow2.iter().rposition(|&c| c > 0).map_or(0, |i| i + 1);
        DirStats {
            ios: self.ios,
            bytes: self.bytes,
            iops: self.ios as f64 / seconds,
            mb_per_s: self.bytes as f64 / seconds / 1e6,
            latency_us: LatencyUs {
                mean: self.sum_ns as f64 / self.ios as f64 / 1000.0,
                min: us(self.min_ns),
                p50: q(0.50),
                p95: q(0.95),
                p99: q(0.99),
                p999: q(0.999),
                max: us(self.max_ns),
            },
            histogram_pow2_us: self.pow2[..last].to_vec(),
        }
    }
}

/// I/Os of one sampling interval (one second of the measured window, or a tenth of a short one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct IntervalCounts {
    pub(crate) ios: u64,
    pub(crate) bytes: u64,
    pub(crate) latency_ns_sum: u64,
    pub(crate) latency_ns_max: u64,
}

/// Per-interval counts of one worker over a point's measured window: the time series. An I/O
/// falls in the interval in which it completed.
#[derive(Debug, Clone)]
pub(crate) struct SeriesRecorder {
    interval_ns: u64,
    intervals: Vec<IntervalCounts>,
}

impl SeriesRecorder {
    /// `count` intervals of `interval_ns` each; allocated once, before the clock starts.
    pub(crate) fn new(interval_ns: u64, count: usize) -> Self {
        assert!(interval_ns > 0 && count > 0);
        SeriesRecorder {
            interval_ns,
            intervals: vec![IntervalCounts::default(); count],
        }
    }

    /// Records an I/O that completed `since_window_ns` after the window opened.
    #[inline]
    pub(crate) fn record(&mut self, since_window_ns: u64, latency_ns: u64, bytes: u64) {
        let last = self.intervals.len() - 1;
        let i = usize::try_from(since_window_ns / self.interval_ns).map_or(last, |i| i.min(last));
        let c = &mut self.intervals[i];
        c.ios += 1;
        c.bytes += bytes;
        c.latency_ns_sum = c.latency_ns_sum.saturating_add(latency_ns);
        c.latency_ns_max = c.latency_ns_max.max(latency_ns);
    }

    pub(crate) fn merge(&mut self, other: &SeriesRecorder) {
        assert_eq!(self.intervals.len(), other.intervals.len());
        for (a, b) in self.intervals.iter_mut().zip(&other.intervals) {
            a.ios += b.ios;
            a.bytes += b.bytes;
            a.latency_ns_sum = a.latency_ns_sum.saturating_add(b.latency_ns_sum);
            a.latency_ns_max = a.latency_ns_max.max(b.latency_ns_max);
        }
    }

    pub(crate) fn intervals(&self) -> &[IntervalCounts] {
        &self.intervals
    }
}

/// Power-of-two µs bucket of a latency: the number of bits of its whole microseconds.
#[inline]
pub(crate) fn pow2_bucket(latency_ns: u64) -> usize {
    let us = latency_ns / 1000;
    let bits = (u64::BITS - us.leading_zeros()) as usize;
    bits.min(POW2_BUCKETS - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pow2_buckets_follow_oracle_boundaries() {
        assert_eq!(pow2_bucket(500), 0); // < 1 µs
        assert_eq!(pow2_bucket(1_000), 1); // [1, 2) µs
        assert_eq!(pow2_bucket(1_999), 1);
        assert_eq!(pow2_bucket(2_000), 2); // [2, 4) µs
        assert_eq!(pow2_bucket(1_000_000), 10); // 1 ms is in [512, 1024) µs
        assert_eq!(pow2_bucket(u64::MAX), POW2_BUCKETS - 1);
    }

    #[test]
    fn summary_reports_rates_and_percentiles() {
        let mut r = Recorder::default();
        for i in 1..=1000u64 {
            r.record(i * 1000, 8192); // 1..1000 µs
        }
        let s = r.summarize(2.0);
        assert_eq!(s.ios, 1000);
        assert!((s.iops - 500.0).abs() < 1e-9);
        assert!((s.mb_per_s - 1000.0 * 8192.0 / 2.0 / 1e6).abs() < 1e-9);
        assert!((s.latency_us.mean - 500.5).abs() < 1e-9);
        assert!((s.latency_us.p50 - 500.0).abs() < 1.0);
        assert!((s.latency_us.p99 - 990.0).abs() < 1.0);
        assert_eq!(s.latency_us.max, 1000.0);
        assert_eq!(s.histogram_pow2_us.iter().sum::<u64>(), 1000);
        assert_eq!(s.histogram_pow2_us.len(), 11);
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        a.record(10_000, 1);
        b.record(30_000, 1);
        a.merge(&b);
        let s = a.summarize(1.0);
        assert_eq!(s.ios, 2);
        assert_eq!(s.latency_us.mean, 20.0);
        assert_eq!(s.latency_us.min, 10.0);
        assert_eq!(s.latency_us.max, 30.0);
    }

    #[test]
    fn series_counts_land_in_their_interval_and_merge() {
        let mut a = SeriesRecorder::new(1_000, 3);
        let mut b = SeriesRecorder::new(1_000, 3);
        a.record(10, 50, 8);
        a.record(1_500, 70, 8);
        b.record(1_999, 90, 8);
        b.record(99_999, 30, 8); // after the last interval: counted in it
        a.merge(&b);
        let i = a.intervals();
        assert_eq!(i[0].ios, 1);
        assert_eq!(
            (i[1].ios, i[1].latency_ns_sum, i[1].latency_ns_max),
            (2, 160, 90)
        );
        assert_eq!((i[2].ios, i[2].bytes), (1, 8));
    }

    #[test]
    fn empty_recorder_summarises_to_zeroes() {
        assert_eq!(Recorder::default().summarize(1.0), DirStats::default());
    }
}
