//! Per-export I/O counters, split by protocol and operation: what the front ends record on
//! every I/O and what `/metrics` and the sampler read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

use super::histogram::{AtomicHistogram, Buckets};

/// The front end an I/O came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protocol {
    Nbd,
    Iscsi,
}

impl Protocol {
    pub const ALL: [Protocol; 2] = [Protocol::Nbd, Protocol::Iscsi];

    pub fn name(self) -> &'static str {
        match self {
            Protocol::Nbd => "nbd",
            Protocol::Iscsi => "iscsi",
        }
    }
}

/// What an I/O did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Read,
    Write,
    Flush,
    /// Trim, unmap and write-zeroes: ranges made to read as zeroes without data on the wire.
    Discard,
}

impl Op {
    pub const ALL: [Op; 4] = [Op::Read, Op::Write, Op::Flush, Op::Discard];

    pub fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
            Op::Flush => "flush",
            Op::Discard => "discard",
        }
    }
}

/// One operation's counters on one export and protocol.
#[derive(Debug, Default)]
pub struct OpCounters {
    pub ops: AtomicU64,
    /// Bytes moved (reads, writes) or covered (discards); 0 for flushes.
    pub bytes: AtomicU64,
    pub errors: AtomicU64,
    /// Sum of latencies, for the Prometheus histogram's `_sum`.
    pub latency_sum_us: AtomicU64,
    /// The longest latency since the sampler last took it (it resets it to 0).
    pub latency_max_us: AtomicU64,
    pub latency: AtomicHistogram,
}

impl OpCounters {
    pub fn record(&self, bytes: u64, latency_us: u64, ok: bool) {
        self.latency.record(latency_us);
        self.latency_sum_us.fetch_add(latency_us, Ordering::Relaxed);
        self.latency_max_us.fetch_max(latency_us, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        if !ok {
            self.errors.fetch_add(1, Ordering::Relaxed);
        }
        // Last: a reader that sees the count moved finds the rest recorded.
        self.ops.fetch_add(1, Ordering::Release);
    }

    /// A consistent-enough copy: the count first, so the buckets hold at least that many.
    pub fn load(&self) -> OpTotals {
        let ops = self.ops.load(Ordering::Acquire);
        OpTotals {
            ops,
            bytes: self.bytes.load(Ordering::Relaxed),
            errors: self.errors.load(Ordering::Relaxed),
            latency_sum_us: self.latency_sum_us.load(Ordering::Relaxed),
            latency: self.latency.load(),
        }
    }
}

/// A copy of [`OpCounters`] (cumulative since the export was first opened).
#[derive(Debug, Clone, Default)]
pub struct OpTotals {
    pub ops: u64,
    pub bytes: u64,
    pub errors: u64,
    pub latency_sum_us: u64,
    pub latency: Buckets,
}

/// Every operation of one protocol on one export.
#[derive(Debug, Default)]
pub struct ProtocolCounters {
    ops: [OpCounters; 4],
}

impl ProtocolCounters {
    pub fn op(&self, op: Op) -> &OpCounters {
        &self.ops[op as usize]
    }
}

/// Every protocol's counters of one export (a volume or a snapshot, by name).
#[derive(Debug, Default)]
pub struct ExportCounters {
    protocols: [ProtocolCounters; 2],
    /// The time it had a request in flight, whatever the protocol and operation.
    pub busy: BusyTime,
}

/// The time an export had at least one request in flight (iostat's `%util`): the union of its
/// requests' intervals. The clock starts when the requests in flight go from 0 to 1 and the
/// time is added when they go back to 0: two atomic adds per request and no lock. A request
/// that starts in the instant the last other one ends may lose that instant (the two race on
/// `since_us`); the figure is for people, and the sampler clamps it to 100 %.
#[derive(Debug, Default)]
pub struct BusyTime {
    in_flight: AtomicU64,
    /// [`clock_us`] when `in_flight` last went from 0 to 1.
    since_us: AtomicU64,
    /// Busy time of the intervals that ended, in µs.
    total_us: AtomicU64,
}

impl BusyTime {
    pub fn start(&self, now_us: u64) {
        if self.in_flight.fetch_add(1, Ordering::AcqRel) == 0 {
            self.since_us.store(now_us, Ordering::Release);
        }
    }

    pub fn end(&self, now_us: u64) {
        if self.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            let since = self.since_us.load(Ordering::Acquire);
            self.total_us
                .fetch_add(now_us.saturating_sub(since), Ordering::Relaxed);
        }
    }

    /// The busy time up to `now_us`, the interval under way included.
    pub fn busy_us(&self, now_us: u64) -> u64 {
        let total = self.total_us.load(Ordering::Acquire);
        if self.in_flight.load(Ordering::Acquire) > 0 {
            total + now_us.saturating_sub(self.since_us.load(Ordering::Acquire))
        } else {
            total
        }
    }
}

/// Microseconds on a monotonic clock that starts with the first call: the time base of
/// [`BusyTime`] and of the front ends' request timing.
pub fn clock_us() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_micros()).unwrap_or(u64::MAX)
}

impl ExportCounters {
    pub fn protocol(&self, protocol: Protocol) -> &ProtocolCounters {
        &self.protocols[protocol as usize]
    }

    pub fn op(&self, protocol: Protocol, op: Op) -> &OpCounters {
        self.protocol(protocol).op(op)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_time_is_the_union_of_overlapping_requests() {
        let b = BusyTime::default();
        // [100, 300) and [200, 500) overlap: busy from 100 to 500. Then [600, 650).
        b.start(100);
        b.start(200);
        b.end(300);
        assert_eq!(b.busy_us(400), 300, "under way");
        b.end(500);
        assert_eq!(b.busy_us(550), 400);
        b.start(600);
        b.end(650);
        assert_eq!(b.busy_us(1000), 450);
        assert!(clock_us() <= clock_us());
    }
}
