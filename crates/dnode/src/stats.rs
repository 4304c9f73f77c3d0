//! [`DnodeStats`]: counters of a running d.node (connections, requests, scrubs), kept in
//! atomics by the threads that do the work and read as one snapshot by [`crate::Dnode::stats`].

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a d.node's counters since it started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DnodeStats {
    /// Connections being served now.
    pub connections_open: u64,
    /// Connections accepted (including the refused ones).
    pub connections_accepted: u64,
    /// Connections refused: over the connection limit, or a failed handshake.
    pub connections_refused: u64,
    /// Connections closed because their bytes broke the protocol.
    pub connections_bad_input: u64,
    /// Requests executed (after the handshake).
    pub requests: u64,
    /// Completed scrubs: background passes and `Scrub` requests.
    pub scrubs: u64,
    /// Chunks read by those scrubs.
    pub chunks_scrubbed: u64,
    /// Corrupt chunks those scrubs found (a chunk counts once per scrub that finds it).
    pub corrupt_found: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub connections_open: AtomicU64,
    pub connections_accepted: AtomicU64,
    pub connections_refused: AtomicU64,
    pub connections_bad_input: AtomicU64,
    pub requests: AtomicU64,
    pub scrubs: AtomicU64,
    pub chunks_scrubbed: AtomicU64,
    pub corrupt_found: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> DnodeStats {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        DnodeStats {
            connections_open: get(&self.connections_open),
            connections_accepted: get(&self.connections_accepted),
            connections_refused: get(&self.connections_refused),
            connections_bad_input: get(&self.connections_bad_input),
            requests: get(&self.requests),
            scrubs: get(&self.scrubs),
            chunks_scrubbed: get(&self.chunks_scrubbed),
            corrupt_found: get(&self.corrupt_found),
        }
    }
}
