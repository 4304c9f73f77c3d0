//! Per-export I/O counters, split by protocol and operation: what the front ends record on
//! every I/O and what `/metrics` and the sampler read.

use std::sync::atomic::{AtomicU64, Ordering};

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
}

impl ExportCounters {
    pub fn protocol(&self, protocol: Protocol) -> &ProtocolCounters {
        &self.protocols[protocol as usize]
    }

    pub fn op(&self, protocol: Protocol, op: Op) -> &OpCounters {
        self.protocol(protocol).op(op)
    }
}
