//! What the sampler keeps per export: samples at three steps (100 ms for the last minute, 1 s
//! for the last 15 minutes, 10 s for the last hour), each an [`Sample`] of rates and latency
//! percentiles computed from one interval's counts.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use super::histogram::{bucket_high_us, Buckets};

/// Upper bounds of the heat map's latency buckets, in µs (powers of two, which are edges of
/// the fine histogram); the last bucket has no bound.
pub const HEAT_BOUNDS_US: [u64; 17] = [
    16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144, 524288,
    1048576,
];
pub const HEAT_BUCKETS: usize = HEAT_BOUNDS_US.len() + 1;

/// The steps a series is kept at, and how many samples each keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// 100 ms, the last 60 s.
    Tenth,
    /// 1 s, the last 15 min.
    Second,
    /// 10 s, the last hour.
    TenSeconds,
}

impl Step {
    pub const ALL: [Step; 3] = [Step::Tenth, Step::Second, Step::TenSeconds];

    pub fn millis(self) -> u64 {
        match self {
            Step::Tenth => 100,
            Step::Second => 1000,
            Step::TenSeconds => 10_000,
        }
    }

    /// Sampler ticks (100 ms) per sample.
    pub fn ticks(self) -> u64 {
        self.millis() / 100
    }

    pub fn keep(self) -> usize {
        match self {
            Step::Tenth => 600,
            Step::Second => 900,
            Step::TenSeconds => 360,
        }
    }

    /// `100ms`, `1s`, `10s`.
    pub fn parse(text: &str) -> Option<Step> {
        match text {
            "100ms" | "0.1s" => Some(Step::Tenth),
            "1s" | "1000ms" => Some(Step::Second),
            "10s" => Some(Step::TenSeconds),
            _ => None,
        }
    }
}

/// One operation over one interval.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct OpRate {
    pub iops: f32,
    pub bytes_per_s: f32,
    /// Latency percentiles and maximum in µs (0 when there was no I/O).
    pub p50_us: f32,
    pub p99_us: f32,
    pub max_us: f32,
    /// Average requests in flight in weft over the interval (Little's law: the time the
    /// interval's requests spent in weft, over the interval's length).
    #[serde(default)]
    pub queue_depth: f32,
}

/// One export over one interval: the three operations and the read+write latency spread.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct Sample {
    /// Unix time in ms at the end of the interval.
    pub t_ms: u64,
    pub read: OpRate,
    pub write: OpRate,
    pub flush: OpRate,
    /// Reads and writes per latency bucket ([`HEAT_BOUNDS_US`]).
    pub heat: [u32; HEAT_BUCKETS],
    /// Percent of the interval with at least one request in flight (iostat's `%util`; with
    /// many requests in parallel 100 % is not saturation).
    #[serde(default)]
    pub util_pct: f32,
}

impl Sample {
    /// An interval without I/O.
    pub fn idle(t_ms: u64) -> Sample {
        Sample {
            t_ms,
            read: OpRate::default(),
            write: OpRate::default(),
            flush: OpRate::default(),
            heat: [0; HEAT_BUCKETS],
            util_pct: 0.0,
        }
    }
}

/// The counts of one operation over an interval (summed over protocols and ticks).
#[derive(Debug, Clone, Default)]
pub(super) struct OpInterval {
    pub ops: u64,
    pub bytes: u64,
    /// The requests' latencies added up.
    pub latency_sum_us: u64,
    pub max_us: u64,
    /// Filled only when `ops > 0`.
    pub latency: Option<Buckets>,
}

impl OpInterval {
    pub fn add(&mut self, other: &OpInterval) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.latency_sum_us += other.latency_sum_us;
        self.max_us = self.max_us.max(other.max_us);
        if let Some(b) = &other.latency {
            match &mut self.latency {
                Some(mine) => mine.add(b),
                None => self.latency = Some(b.clone()),
            }
        }
    }

    fn rate(&self, seconds: f64) -> OpRate {
        let Some(latency) = self.latency.as_ref().filter(|_| self.ops > 0) else {
            return OpRate::default();
        };
        OpRate {
            iops: (self.ops as f64 / seconds) as f32,
            bytes_per_s: (self.bytes as f64 / seconds) as f32,
            p50_us: latency.quantile_us(0.50) as f32,
            p99_us: latency.quantile_us(0.99).min(self.max_us.max(1) as f64) as f32,
            max_us: self.max_us as f32,
            queue_depth: (self.latency_sum_us as f64 / (seconds * 1e6)) as f32,
        }
    }
}

/// Read, write and flush over one interval.
#[derive(Debug, Clone, Default)]
pub(super) struct Interval {
    pub ops: [OpInterval; 3],
    pub seconds: f64,
    /// Time with a request in flight, in µs.
    pub busy_us: u64,
}

impl Interval {
    pub fn is_idle(&self) -> bool {
        self.ops.iter().all(|o| o.ops == 0) && self.busy_us == 0
    }

    pub fn add(&mut self, other: &Interval) {
        for (mine, theirs) in self.ops.iter_mut().zip(&other.ops) {
            mine.add(theirs);
        }
        self.seconds += other.seconds;
        self.busy_us += other.busy_us;
    }

    pub fn sample(&self, t_ms: u64) -> Sample {
        let seconds = self.seconds.max(1e-3);
        let mut heat = [0u32; HEAT_BUCKETS];
        for op in &self.ops[..2] {
            let Some(latency) = &op.latency else { continue };
            for (bucket, count) in latency.0.iter().enumerate().filter(|(_, c)| **c > 0) {
                let high = bucket_high_us(bucket);
                let cell = HEAT_BOUNDS_US
                    .iter()
                    .position(|bound| high <= *bound)
                    .unwrap_or(HEAT_BUCKETS - 1);
                heat[cell] = heat[cell].saturating_add(u32::try_from(*count).unwrap_or(u32::MAX));
            }
        }
        Sample {
            t_ms,
            read: self.ops[0].rate(seconds),
            write: self.ops[1].rate(seconds),
            flush: self.ops[2].rate(seconds),
            heat,
            util_pct: ((self.busy_us as f64 / (seconds * 1e6)) * 100.0).min(100.0) as f32,
        }
    }
}

/// The samples of one export at every step, and the intervals being summed for the coarser
/// steps.
#[derive(Debug)]
pub(super) struct History {
    rings: [VecDeque<Sample>; 3],
    pending: [Interval; 3],
}

impl Default for History {
    fn default() -> Self {
        History {
            rings: Step::ALL.map(|s| VecDeque::with_capacity(s.keep().min(64))),
            pending: Default::default(),
        }
    }
}

impl History {
    /// Adds one tick's interval; `tick` counts ticks since the sampler started.
    pub fn push(&mut self, tick: u64, t_ms: u64, interval: &Interval) {
        for (i, step) in Step::ALL.into_iter().enumerate() {
            self.pending[i].add(interval);
            if tick.is_multiple_of(step.ticks()) {
                let sample = self.pending[i].sample(t_ms);
                self.pending[i] = Interval::default();
                let ring = &mut self.rings[i];
                if ring.len() == step.keep() {
                    ring.pop_front();
                }
                ring.push_back(sample);
            }
        }
    }

    pub fn samples(&self, step: Step) -> &VecDeque<Sample> {
        &self.rings[step as usize]
    }

    /// Every kept sample is idle: the history can go.
    pub fn is_idle(&self) -> bool {
        let quiet = |s: &Sample| {
            s.read.iops == 0.0 && s.write.iops == 0.0 && s.flush.iops == 0.0 && s.util_pct == 0.0
        };
        self.rings.iter().all(|r| r.iter().all(quiet)) && self.pending.iter().all(Interval::is_idle)
    }
}

#[cfg(test)]
mod tests {
    use super::super::histogram::AtomicHistogram;
    use super::*;

    fn interval(reads: u64, latency_us: u64) -> Interval {
        let h = AtomicHistogram::default();
        for _ in 0..reads {
            h.record(latency_us);
        }
        let mut i = Interval {
            seconds: 0.1,
            ..Interval::default()
        };
        i.ops[0] = OpInterval {
            ops: reads,
            bytes: reads * 4096,
            latency_sum_us: reads * latency_us,
            max_us: latency_us,
            latency: Some(h.load()),
        };
        i
    }

    #[test]
    fn a_tick_becomes_rates_and_a_heat_column() {
        let s = interval(100, 50).sample(7);
        assert_eq!(s.t_ms, 7);
        assert_eq!(s.read.iops, 1000.0);
        assert_eq!(s.read.bytes_per_s, 4096.0 * 1000.0);
        assert!((48.0..=52.0).contains(&s.read.p50_us), "{:?}", s.read);
        assert_eq!(s.read.max_us, 50.0);
        // 100 reads of 50 µs in 0.1 s: 0.05 in flight on average.
        assert!((s.read.queue_depth - 0.05).abs() < 1e-6, "{:?}", s.read);
        assert_eq!(s.write, OpRate::default());
        // 50 µs is in the (32, 64] cell.
        assert_eq!(s.heat[2], 100);
        assert_eq!(s.heat.iter().sum::<u32>(), 100);
        // Busy 25 ms of the 100: 25 % utilised; never more than 100 %.
        let mut busy = interval(100, 50);
        busy.busy_us = 25_000;
        assert!((busy.sample(7).util_pct - 25.0).abs() < 1e-3);
        busy.busy_us = 250_000;
        assert_eq!(busy.sample(7).util_pct, 100.0);
    }

    #[test]
    fn coarser_steps_sum_their_ticks() {
        let mut h = History::default();
        for tick in 1..=20 {
            h.push(tick, tick * 100, &interval(10, 100));
        }
        assert_eq!(h.samples(Step::Tenth).len(), 20);
        let seconds = h.samples(Step::Second);
        assert_eq!(seconds.len(), 2);
        assert!(
            (seconds[1].read.iops - 100.0).abs() < 0.01,
            "{:?}",
            seconds[1]
        );
        assert_eq!(seconds[1].t_ms, 2000);
        assert!(h.samples(Step::TenSeconds).is_empty());
        assert!(!h.is_idle());
    }
}
