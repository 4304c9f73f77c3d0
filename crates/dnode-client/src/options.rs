//! [`ClientOptions`]: the timeouts, backoff and in-flight bound of one [`crate::RemoteChunkStore`],
//! with their defaults. Plain data, no I/O.

use std::time::Duration;

/// Default bound on opening a connection, handshake included: a d.node on the local network
/// answers in well under a millisecond, so 2 s only fires for a dead or unreachable host.
pub const CONNECT_TIMEOUT_DEFAULT: Duration = Duration::from_millis(2_000);
/// Default bound on one request, from the call to the response: a 32 MiB chunk at 100 MB/s
/// plus an fsync takes well under a second; past 10 s the d.node is sick, not slow.
pub const REQUEST_TIMEOUT_DEFAULT: Duration = Duration::from_millis(10_000);
/// Default bound on a `Scrub` request, which reads every chunk of the d.node (or of one family):
/// 10 min covers ~100 GB per disk at disk speed. Scrubs of more should go per family.
pub const SCRUB_TIMEOUT_DEFAULT: Duration = Duration::from_millis(600_000);
/// Default first pause after a failed connect; doubles per failure up to the maximum.
pub const BACKOFF_INITIAL_DEFAULT: Duration = Duration::from_millis(100);
/// Default longest pause between connect attempts: how long a restarted d.node may go unnoticed.
pub const BACKOFF_MAX_DEFAULT: Duration = Duration::from_millis(5_000);
/// Default most requests in flight on one connection: enough to keep a d.node's disks and
/// worker pool busy (its per-connection bound is 64), small enough that a stalled d.node holds
/// few callers.
pub const IN_FLIGHT_MAX: usize = 128;

/// How a [`crate::RemoteChunkStore`] talks to its d.node.
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// Bound on connect plus handshake. Default [`CONNECT_TIMEOUT_DEFAULT`].
    pub connect_timeout: Duration,
    /// Bound on each request, waiting for an in-flight slot included; the caller then gets
    /// `ChunkError::Unavailable` and the connection is dropped. Default [`REQUEST_TIMEOUT_DEFAULT`].
    pub request_timeout: Duration,
    /// Bound on a `Scrub` request instead of `request_timeout`. Default [`SCRUB_TIMEOUT_DEFAULT`].
    pub scrub_timeout: Duration,
    /// First pause after a failed connect. Default [`BACKOFF_INITIAL_DEFAULT`].
    pub backoff_initial: Duration,
    /// Longest pause between connect attempts. Default [`BACKOFF_MAX_DEFAULT`].
    pub backoff_max: Duration,
    /// Most requests in flight on the connection; further callers wait (within their timeout).
    /// Default [`IN_FLIGHT_MAX`].
    pub in_flight_max: usize,
    /// Who we are, in the d.node's logs (the `Hello`'s client name, at most 255 bytes).
    pub client_name: String,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            connect_timeout: CONNECT_TIMEOUT_DEFAULT,
            request_timeout: REQUEST_TIMEOUT_DEFAULT,
            scrub_timeout: SCRUB_TIMEOUT_DEFAULT,
            backoff_initial: BACKOFF_INITIAL_DEFAULT,
            backoff_max: BACKOFF_MAX_DEFAULT,
            in_flight_max: IN_FLIGHT_MAX,
            client_name: "weft-cnode".to_owned(),
        }
    }
}
