//! The link from one [`crate::RemoteChunkStore`] to its d.node: which connection requests go
//! on, connecting lazily, backing off after failures, bounding requests in flight and in time.
//!
//! States: `Idle` (no connection: the next call connects), `Up` (calls pipeline on it),
//! `Backoff` (connecting failed, or the d.node held a request past its deadline: calls fail at
//! once with `Unavailable` until the retry time, then one caller tries again). A dead d.node
//! therefore costs a caller one connect timeout at most, then nothing but a fast
//! `Unavailable`. A request whose connection broke is sent once more on a new connection
//! (every request is idempotent under the wire contract), never after a timeout.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use rand::Rng as _;
use weft_chunk::ChunkError;
use weft_proto::{EncodedFrame, ProtoError, Response};

use crate::connection::{Connection, Dial};
use crate::options::ClientOptions;

/// Sends of one request: the first, and one more on a fresh connection if the first one's
/// connection broke.
const SEND_ATTEMPTS_MAX: u32 = 2;
/// Extra wait for the connect lock beyond a connect timeout (the holder is connecting).
const CONNECT_LOCK_SLACK: Duration = Duration::from_millis(500);
/// Backoff pauses are spread by ±this percentage so c.nodes do not reconnect in lockstep.
const BACKOFF_JITTER_PERCENT: u64 = 20;

/// The link to one d.node.
#[derive(Debug)]
pub(crate) struct Link {
    /// `node@addr`, for errors.
    name: String,
    node_id: String,
    addr: SocketAddr,
    cluster_id: String,
    options: ClientOptions,
    state: Mutex<LinkState>,
    /// Held while connecting, so concurrent callers make one attempt, not many.
    connect_lock: Mutex<()>,
    next_request_id: AtomicU64,
    slots: Slots,
}

/// See the module doc.
#[derive(Debug)]
enum LinkState {
    Idle,
    Up(Arc<Connection>),
    Backoff {
        retry_at: Instant,
        /// Consecutive failures: the pause doubles with each.
        failures: u32,
        why: String,
    },
}

/// Counting semaphore bounding requests in flight.
#[derive(Debug)]
struct Slots {
    used: Mutex<usize>,
    freed: Condvar,
    max: usize,
}

struct SlotGuard<'a>(&'a Slots);

impl Link {
    pub(crate) fn new(
        name: String,
        node_id: String,
        addr: SocketAddr,
        cluster_id: String,
        options: ClientOptions,
    ) -> Link {
        let max = options.in_flight_max.max(1);
        Link {
            name,
            node_id,
            addr,
            cluster_id,
            options,
            state: Mutex::new(LinkState::Idle),
            connect_lock: Mutex::new(()),
            next_request_id: AtomicU64::new(1),
            slots: Slots {
                used: Mutex::new(0),
                freed: Condvar::new(),
                max,
            },
        }
    }

    pub(crate) fn options(&self) -> &ClientOptions {
        &self.options
    }

    /// Whether a connection is open now (no I/O).
    pub(crate) fn is_connected(&self) -> bool {
        matches!(&*self.state.lock(), LinkState::Up(c) if !c.is_closed())
    }

    /// Send one request and wait for its answer, within `timeout` in all.
    pub(crate) fn call<'a>(
        &self,
        timeout: Duration,
        encode: &dyn Fn(u64) -> Result<EncodedFrame<'a>, ProtoError>,
    ) -> Result<Response, ChunkError> {
        let deadline = Instant::now() + timeout;
        let _slot = self.slots.acquire(deadline).ok_or_else(|| {
            self.unavailable(format!(
                "{} requests in flight and none finished within {} ms",
                self.slots.max,
                timeout.as_millis()
            ))
        })?;
        let mut last_failure = String::new();
        for _ in 0..SEND_ATTEMPTS_MAX {
            let conn = self.connection()?;
            let request_id = self.next_request_id.fetch_add(1, Ordering::Relaxed);
            let frame = encode(request_id).map_err(|e| ChunkError::Io {
                what: format!("request to d.node {}", self.name),
                source: std::io::Error::new(std::io::ErrorKind::InvalidInput, e),
            })?;
            let reply = match conn.register(request_id) {
                Ok(reply) => reply,
                Err(why) => {
                    self.forget_connection(&conn, None);
                    last_failure = why;
                    continue;
                }
            };
            if let Err(why) = conn.send(&[&frame.header, frame.bulk, &frame.meta]) {
                self.forget_connection(&conn, None);
                last_failure = why;
                continue;
            }
            match reply.wait_until(deadline) {
                Some(Ok(response)) => return Ok(response),
                Some(Err(why)) => {
                    self.forget_connection(&conn, None);
                    last_failure = why;
                }
                None => {
                    // The d.node holds the request past its deadline: it is sick. Drop the
                    // connection (its other callers fail now, not at their own deadlines) and
                    // back off so the next callers fail fast.
                    let why = format!("no answer within {} ms", timeout.as_millis());
                    conn.forget(request_id);
                    conn.close(&why);
                    self.forget_connection(&conn, Some(&why));
                    return Err(self.unavailable(why));
                }
            }
        }
        Err(self.unavailable(last_failure))
    }

    /// The open connection, connecting if there is none; fails fast while backing off.
    fn connection(&self) -> Result<Arc<Connection>, ChunkError> {
        if let Some(conn) = self.current()? {
            return Ok(conn);
        }
        let wait = self.options.connect_timeout + CONNECT_LOCK_SLACK;
        let Some(_connecting) = self.connect_lock.try_lock_for(wait) else {
            return Err(self.unavailable("another caller is still connecting".into()));
        };
        if let Some(conn) = self.current()? {
            return Ok(conn);
        }
        let dial = Dial {
            addr: self.addr,
            cluster_id: &self.cluster_id,
            client_name: &self.options.client_name,
            expected_node: &self.node_id,
            connect_timeout: self.options.connect_timeout,
            request_timeout: self.options.request_timeout,
        };
        match Connection::open(&dial) {
            Ok((conn, node_id)) => {
                tracing::info!(node = %node_id, addr = %self.addr, "connected to d.node");
                *self.state.lock() = LinkState::Up(conn.clone());
                Ok(conn)
            }
            Err(why) => {
                let mut link = self.state.lock();
                let failures = match &*link {
                    LinkState::Backoff { failures, .. } => failures.saturating_add(1),
                    _ => 1,
                };
                let pause = self.backoff(failures);
                tracing::debug!(node = %self.name, error = %why, failures, pause_ms = pause.as_millis() as u64, "d.node connect failed");
                *link = LinkState::Backoff {
                    retry_at: Instant::now() + pause,
                    failures,
                    why: why.clone(),
                };
                Err(self.unavailable(why))
            }
        }
    }

    /// Ends a backoff: the next call connects at once (the d.node registered again, so the
    /// reason for waiting is gone).
    pub(crate) fn reconnect_now(&self) {
        let mut link = self.state.lock();
        if matches!(&*link, LinkState::Backoff { .. }) {
            *link = LinkState::Idle;
        }
    }

    /// `Ok(Some)`: an open connection; `Ok(None)`: connect now; `Err`: backing off.
    fn current(&self) -> Result<Option<Arc<Connection>>, ChunkError> {
        let link = self.state.lock();
        match &*link {
            LinkState::Up(conn) if !conn.is_closed() => Ok(Some(conn.clone())),
            LinkState::Backoff { retry_at, why, .. } => {
                let now = Instant::now();
                if now < *retry_at {
                    let wait_ms = retry_at.duration_since(now).as_millis();
                    let detail = format!("{why} (next connect attempt in {wait_ms} ms)");
                    drop(link);
                    Err(self.unavailable(detail))
                } else {
                    Ok(None)
                }
            }
            LinkState::Up(_) | LinkState::Idle => Ok(None),
        }
    }

    /// `conn` broke: forget it so the next call reconnects, or backs off first if `backoff_why`.
    fn forget_connection(&self, conn: &Arc<Connection>, backoff_why: Option<&str>) {
        let mut link = self.state.lock();
        if matches!(&*link, LinkState::Up(c) if Arc::ptr_eq(c, conn)) {
            *link = match backoff_why {
                None => LinkState::Idle,
                Some(why) => LinkState::Backoff {
                    retry_at: Instant::now() + self.backoff(1),
                    failures: 1,
                    why: why.to_owned(),
                },
            };
        }
    }

    /// The pause after `failures` consecutive failures: doubling from the initial, capped, with
    /// jitter.
    fn backoff(&self, failures: u32) -> Duration {
        let initial = self.options.backoff_initial;
        let doubled = initial.saturating_mul(1u32 << failures.saturating_sub(1).min(20));
        let pause = doubled.min(self.options.backoff_max);
        let pause_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX);
        let spread = pause_ms / 100 * BACKOFF_JITTER_PERCENT;
        let jittered = pause_ms - spread + rand::rng().random_range(0..=2 * spread);
        Duration::from_millis(jittered)
    }

    fn unavailable(&self, detail: String) -> ChunkError {
        ChunkError::Unavailable {
            node: self.name.clone(),
            detail,
        }
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        let state = std::mem::replace(&mut *self.state.lock(), LinkState::Idle);
        if let LinkState::Up(conn) = state {
            conn.close_and_join("store dropped");
        }
    }
}

impl Slots {
    /// A slot, waiting at most until `deadline`.
    fn acquire(&self, deadline: Instant) -> Option<SlotGuard<'_>> {
        let mut used = self.used.lock();
        while *used >= self.max {
            if self.freed.wait_until(&mut used, deadline).timed_out() && *used >= self.max {
                return None;
            }
        }
        *used += 1;
        Some(SlotGuard(self))
    }
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        *self.0.used.lock() -= 1;
        self.0.freed.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_cap_with_bounded_jitter() {
        let options = ClientOptions {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_millis(1000),
            ..ClientOptions::default()
        };
        let link = Link::new(
            "dn-1@127.0.0.1:1".into(),
            "dn-1".into(),
            "127.0.0.1:1".parse().expect("addr"),
            "c".into(),
            options,
        );
        for (failures, nominal_ms) in [(1u32, 100u64), (2, 200), (3, 400), (5, 1000), (40, 1000)] {
            let ms = link.backoff(failures).as_millis() as u64;
            let spread = nominal_ms / 100 * BACKOFF_JITTER_PERCENT;
            assert!(
                (nominal_ms - spread..=nominal_ms + spread).contains(&ms),
                "{failures} failures: {ms} ms"
            );
        }
    }
}
