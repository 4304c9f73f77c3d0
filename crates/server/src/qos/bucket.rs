//! A token bucket that schedules rather than refuses: an I/O takes its cost at once, the
//! balance may go negative (a debt), and the I/O waits until the debt would be repaid at the
//! bucket's rate. Requests queued behind it take from the debt in turn, so a queue of them
//! leaves at exactly the rate, in arrival order, and nobody spins or retries.
//!
//! The depth is the burst: an idle bucket fills up to it, and that many units pass without
//! waiting. Time is passed in (a [`crate::ha::clock::Clock`] reading), so tests drive it.

use std::time::Duration;

/// One rate limit: `rate` units per second, up to `depth` units saved.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    rate_per_s: f64,
    depth: f64,
    /// Units available now; negative: owed by I/Os already admitted.
    tokens: f64,
    /// When `tokens` was last brought up to date.
    last: Duration,
}

impl TokenBucket {
    /// A full bucket (a new limit starts with its burst available).
    pub fn new(rate_per_s: f64, depth: f64, now: Duration) -> TokenBucket {
        let depth = depth.max(1.0);
        TokenBucket {
            rate_per_s: rate_per_s.max(f64::MIN_POSITIVE),
            depth,
            tokens: depth,
            last: now,
        }
    }

    pub fn rate_per_s(&self) -> f64 {
        self.rate_per_s
    }

    /// Change the rate and depth, keeping what was earned at the old rate until `now` and any
    /// debt (it is repaid at the new rate).
    pub fn reconfigure(&mut self, rate_per_s: f64, depth: f64, now: Duration) {
        self.refill(now);
        self.rate_per_s = rate_per_s.max(f64::MIN_POSITIVE);
        self.depth = depth.max(1.0);
        self.tokens = self.tokens.min(self.depth);
    }

    fn refill(&mut self, now: Duration) {
        // A clock read on another thread may be a little behind `last`: no time passed.
        let elapsed = now.saturating_sub(self.last).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate_per_s).min(self.depth);
        self.last = self.last.max(now);
    }

    /// Take `cost` units at `now`; returns how long the I/O must wait before it runs (zero
    /// when the bucket held enough).
    pub fn take(&mut self, cost: f64, now: Duration) -> Duration {
        self.refill(now);
        self.tokens -= cost;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate_per_s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_full_bucket_passes_its_burst_then_paces_at_the_rate() {
        let mut b = TokenBucket::new(1000.0, 10.0, Duration::ZERO);
        for _ in 0..10 {
            assert_eq!(b.take(1.0, Duration::ZERO), Duration::ZERO);
        }
        // The 11th owes one unit: 1 ms at 1000/s; the 12th two.
        assert_eq!(b.take(1.0, Duration::ZERO), MS);
        assert_eq!(b.take(1.0, Duration::ZERO), 2 * MS);
        // Time repays the debt: 3 ms earn 3 units, 2 of them owed.
        assert_eq!(b.take(1.0, 3 * MS), Duration::ZERO);
        assert_eq!(b.take(1.0, 3 * MS), MS);
    }

    #[test]
    fn a_queue_leaves_at_the_rate_whatever_its_depth() {
        // 32 requests always in flight, each re-issued when its wait ends: over 10 simulated
        // seconds the bucket admits rate x time plus its depth, no more.
        let mut b = TokenBucket::new(5000.0, 500.0, Duration::ZERO);
        let mut due: Vec<Duration> = vec![Duration::ZERO; 32];
        let end = Duration::from_secs(10);
        let mut admitted = 0u64;
        loop {
            let (i, &at) = due.iter().enumerate().min_by_key(|(_, d)| **d).unwrap();
            if at >= end {
                break;
            }
            let wait = b.take(1.0, at);
            admitted += 1;
            due[i] = at + wait + Duration::from_micros(50);
        }
        let expected = 5000.0 * 10.0 + 500.0;
        assert!(
            (admitted as f64 - expected).abs() / expected < 0.01,
            "{admitted} vs {expected}"
        );
    }

    #[test]
    fn an_idle_bucket_saves_no_more_than_its_depth() {
        let mut b = TokenBucket::new(100.0, 50.0, Duration::ZERO);
        assert_eq!(b.take(50.0, Duration::from_secs(3600)), Duration::ZERO);
        assert_eq!(b.take(1.0, Duration::from_secs(3600)), 10 * MS);
    }

    #[test]
    fn a_large_io_waits_for_its_cost() {
        let mut b = TokenBucket::new(1_000_000.0, 100_000.0, Duration::ZERO);
        // 1 MB at 1 MB/s with 100 kB saved: waits 0.9 s.
        let wait = b.take(1_000_000.0, Duration::ZERO);
        assert_eq!(wait, Duration::from_millis(900));
    }

    #[test]
    fn a_new_rate_repays_the_debt_at_that_rate() {
        let mut b = TokenBucket::new(1000.0, 1.0, Duration::ZERO);
        b.take(11.0, Duration::ZERO); // 10 owed
        b.reconfigure(10_000.0, 1.0, Duration::ZERO);
        assert_eq!(b.take(0.0, Duration::ZERO), MS);
        // A clock read behind the last one is no time passing, not a panic.
        assert_eq!(b.take(0.0, Duration::ZERO), MS);
    }
}
