//! Latency histograms cheap enough for every I/O: log-linear buckets of microseconds (exact
//! below 8 µs, then 8 buckets per power of two, so every bucket is at most 12.5% wide), each an
//! atomic counter. Recording is one `fetch_add`; readers take a [`Buckets`] copy and subtract
//! an earlier copy to get one interval's distribution.

use std::sync::atomic::{AtomicU64, Ordering};

/// Sub-buckets per power of two.
const SUB_BITS: u32 = 3;
const SUB: usize = 1 << SUB_BITS;
/// Values up to 2^34 µs (about 4.8 hours); longer ones land in the last bucket.
const MAX_POWER: u32 = 33;
/// Number of buckets: 8 exact ones for 0..8 µs, then 8 per power of two from 2^3 to 2^33.
pub const BUCKETS: usize = SUB + (MAX_POWER - SUB_BITS + 1) as usize * SUB;

/// The bucket of a latency in microseconds.
pub fn bucket_of(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let power = (63 - us.leading_zeros()).min(MAX_POWER);
    if power == MAX_POWER && us >> MAX_POWER > 1 {
        return BUCKETS - 1;
    }
    let sub = ((us >> (power - SUB_BITS)) as usize) & (SUB - 1);
    SUB + (power - SUB_BITS) as usize * SUB + sub
}

/// The lowest value of a bucket, in microseconds.
pub fn bucket_low_us(bucket: usize) -> u64 {
    if bucket < SUB {
        return bucket as u64;
    }
    let power = (bucket - SUB) / SUB + SUB_BITS as usize;
    let sub = ((bucket - SUB) % SUB) as u64;
    (SUB as u64 + sub) << (power - SUB_BITS as usize)
}

/// One past the highest value of a bucket, in microseconds.
pub fn bucket_high_us(bucket: usize) -> u64 {
    if bucket + 1 < BUCKETS {
        bucket_low_us(bucket + 1)
    } else {
        bucket_low_us(bucket) * 2
    }
}

/// Counts per bucket, shared by the recording threads.
#[derive(Debug)]
pub struct AtomicHistogram {
    counts: Box<[AtomicU64]>,
}

impl Default for AtomicHistogram {
    fn default() -> Self {
        AtomicHistogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl AtomicHistogram {
    pub fn record(&self, us: u64) {
        self.counts[bucket_of(us)].fetch_add(1, Ordering::Relaxed);
    }

    /// A copy of the counts so far.
    pub fn load(&self) -> Buckets {
        Buckets(
            self.counts
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect(),
        )
    }
}

/// Counts per bucket: cumulative since start, or one interval's (a difference of two).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Buckets(pub Vec<u64>);

impl Default for Buckets {
    fn default() -> Self {
        Buckets(vec![0; BUCKETS])
    }
}

impl Buckets {
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// `self - earlier`, bucket by bucket (counters only grow).
    pub fn since(&self, earlier: &Buckets) -> Buckets {
        Buckets(
            self.0
                .iter()
                .zip(&earlier.0)
                .map(|(now, then)| now.saturating_sub(*then))
                .collect(),
        )
    }

    pub fn add(&mut self, other: &Buckets) {
        for (a, b) in self.0.iter_mut().zip(&other.0) {
            *a += b;
        }
    }

    /// The value below which a fraction `q` (0..=1) of the counts fall, in microseconds: the
    /// middle of the bucket that holds it (0 when empty).
    pub fn quantile_us(&self, q: f64) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (bucket, count) in self.0.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, high) = (bucket_low_us(bucket), bucket_high_us(bucket));
                return (low + high) as f64 / 2.0;
            }
        }
        unreachable!("rank is at most the total")
    }

    /// Sum of the counts of every bucket that ends at or below `limit_us`.
    pub fn count_at_or_below(&self, limit_us: u64) -> u64 {
        self.0
            .iter()
            .enumerate()
            .take_while(|(b, _)| bucket_high_us(*b) <= limit_us)
            .map(|(_, c)| c)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut last = 0;
        for us in (0..100_000u64).chain([1 << 33, (1 << 34) - 1, 1 << 34, u64::MAX]) {
            let b = bucket_of(us);
            assert!(b >= last, "{us} went back to bucket {b}");
            assert!(b < BUCKETS);
            if b < BUCKETS - 1 {
                assert!(
                    bucket_low_us(b) <= us && us < bucket_high_us(b),
                    "{us} in {b}"
                );
            }
            last = b;
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn buckets_are_at_most_an_eighth_wide() {
        for b in SUB..BUCKETS - 1 {
            let (low, high) = (bucket_low_us(b), bucket_high_us(b));
            assert!((high - low) * 8 <= low, "bucket {b}: {low}..{high}");
        }
    }

    #[test]
    fn powers_of_two_are_bucket_edges() {
        for power in SUB_BITS..=MAX_POWER {
            assert_eq!(bucket_low_us(bucket_of(1 << power)), 1 << power);
        }
    }

    #[test]
    fn quantiles_of_an_interval() {
        let h = AtomicHistogram::default();
        let before = h.load();
        for _ in 0..90 {
            h.record(100);
        }
        for _ in 0..10 {
            h.record(5000);
        }
        let interval = h.load().since(&before);
        assert_eq!(interval.total(), 100);
        let p50 = interval.quantile_us(0.5);
        assert!((96.0..=104.0).contains(&p50), "{p50}");
        let p99 = interval.quantile_us(0.99);
        assert!((4600.0..=5400.0).contains(&p99), "{p99}");
        assert_eq!(Buckets::default().quantile_us(0.99), 0.0);
        assert_eq!(interval.count_at_or_below(1024), 90);
    }
}
