//! One open, handshaken connection to a d.node: an [`Outbox`] that combines the frames of
//! concurrent callers into few socket writes, a reader thread that hands each response to the
//! caller waiting on its request id, and the table of those waiters. Many callers pipeline
//! requests on it; responses come back in any order.
//!
//! A waiter is a slot (a lock and a condition variable) the reader fills and signals: one
//! wake-up per answer, no channel and no spinning (on a 2-core machine a spinning waiter
//! steals the core the reader needs).
//!
//! Invariant: once the connection is closed (socket error, bad frame, timeout, drop), every
//! waiter has been told so and no new waiter is registered, so no caller waits on a dead
//! connection. Reconnecting is the store's business ([`crate::store`]), not this module's.

use std::collections::HashMap;
use std::io::BufReader;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use weft_proto::{check_hello_ok, hello, Response};

use crate::frame_io::{read_frame, write_all_parts, FrameReadError};
use crate::outbox::Outbox;

/// Socket read buffer: large enough that small responses (Ok, Pong, ChunkList pages) come in a
/// few syscalls; chunk payloads bypass it and land in their own buffers.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// The request id of `Hello`; requests use ids from 1.
const HELLO_REQUEST_ID: u64 = 0;

/// What a waiting caller gets: the response, or why the connection broke.
pub(crate) type Reply = Result<Response, String>;

/// An open connection to one d.node.
#[derive(Debug)]
pub(crate) struct Connection {
    /// The d.node, for logs: `node@addr`.
    peer: String,
    outbox: Outbox<TcpStream>,
    /// A handle to shut the socket down from any thread (wakes the reader).
    control: TcpStream,
    waiters: Mutex<Waiters>,
    reader: Mutex<Option<JoinHandle<()>>>,
}

/// Where the reader puts one request's answer; the caller waits on it.
#[derive(Debug, Default)]
pub(crate) struct ReplySlot {
    reply: Mutex<Option<Reply>>,
    filled: Condvar,
}

impl ReplySlot {
    /// The answer, or `None` if `deadline` passed first.
    pub(crate) fn wait_until(&self, deadline: Instant) -> Option<Reply> {
        let mut reply = self.reply.lock();
        loop {
            if let Some(r) = reply.take() {
                return Some(r);
            }
            if self.filled.wait_until(&mut reply, deadline).timed_out() {
                return reply.take();
            }
        }
    }

    /// Fill the slot (the first answer sticks) and wake its caller.
    fn fill(&self, r: Reply) {
        let mut reply = self.reply.lock();
        if reply.is_none() {
            *reply = Some(r);
            self.filled.notify_one();
        }
    }
}

#[derive(Debug, Default)]
struct Waiters {
    by_id: HashMap<u64, Arc<ReplySlot>>,
    /// Why the connection closed; set once, then nothing registers.
    closed: Option<String>,
}

/// How to open a connection.
#[derive(Debug, Clone)]
pub(crate) struct Dial<'a> {
    pub addr: SocketAddr,
    pub cluster_id: &'a str,
    pub client_name: &'a str,
    /// The node id the d.node must answer with; empty accepts any.
    pub expected_node: &'a str,
    pub connect_timeout: Duration,
    /// Also the socket write timeout: a write stuck longer breaks the connection.
    pub request_timeout: Duration,
}

impl Connection {
    /// Connect, send `Hello`, check the answer (within `connect_timeout` in all) and start the
    /// reader thread. Returns the connection and the d.node's node id. `Err` is a description.
    pub(crate) fn open(dial: &Dial<'_>) -> Result<(Arc<Connection>, String), String> {
        let deadline = Instant::now() + dial.connect_timeout;
        let stream = TcpStream::connect_timeout(&dial.addr, dial.connect_timeout)
            .map_err(|e| format!("connect to {}: {e}", dial.addr))?;
        let remaining = || {
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1))
        };
        let setup = |e: std::io::Error| format!("socket setup for {}: {e}", dial.addr);
        stream.set_nodelay(true).map_err(setup)?;
        stream.set_write_timeout(Some(remaining())).map_err(setup)?;
        stream.set_read_timeout(Some(remaining())).map_err(setup)?;
        let mut hello_frame = Vec::new();
        hello(dial.cluster_id, dial.client_name)
            .encode(HELLO_REQUEST_ID, &mut hello_frame)
            .map_err(|e| format!("cannot encode hello: {e}"))?;
        let mut writer = stream.try_clone().map_err(setup)?;
        write_all_parts(&mut writer, &[&hello_frame])
            .map_err(|e| format!("send hello to {}: {e}", dial.addr))?;
        let mut reader =
            BufReader::with_capacity(READ_BUFFER_BYTES, stream.try_clone().map_err(setup)?);
        let frame = match read_frame(&mut reader) {
            Ok(Some(frame)) => frame,
            Ok(None) => return Err(format!("{} closed the connection at hello", dial.addr)),
            Err(FrameReadError::Idle) => {
                return Err(format!("{} did not answer hello in time", dial.addr))
            }
            Err(e) => return Err(format!("hello answer from {}: {e}", dial.addr)),
        };
        let response =
            Response::decode(frame).map_err(|e| format!("hello answer from {}: {e}", dial.addr))?;
        let node_id = check_hello_ok(&response, dial.cluster_id)
            .map_err(|e| format!("handshake with {}: {e}", dial.addr))?;
        if !dial.expected_node.is_empty() && node_id != dial.expected_node {
            let _ = stream.shutdown(Shutdown::Both);
            return Err(format!(
                "{} is d.node {node_id}, not {}",
                dial.addr, dial.expected_node
            ));
        }
        stream.set_read_timeout(None).map_err(setup)?;
        stream
            .set_write_timeout(Some(dial.request_timeout))
            .map_err(setup)?;
        let conn = Arc::new(Connection {
            peer: format!("{node_id}@{}", dial.addr),
            outbox: Outbox::new(writer),
            control: stream,
            waiters: Mutex::new(Waiters::default()),
            reader: Mutex::new(None),
        });
        let for_reader = conn.clone();
        let handle = std::thread::Builder::new()
            .name("weft-dnode-client-rx".into())
            .spawn(move || for_reader.read_loop(reader))
            .map_err(|e| format!("cannot start the reader thread: {e}"))?;
        *conn.reader.lock() = Some(handle);
        Ok((conn, node_id))
    }

    /// Register a caller waiting for the response to `request_id`.
    pub(crate) fn register(&self, request_id: u64) -> Result<Arc<ReplySlot>, String> {
        let slot = Arc::new(ReplySlot::default());
        let mut w = self.waiters.lock();
        if let Some(why) = &w.closed {
            return Err(why.clone());
        }
        w.by_id.insert(request_id, slot.clone());
        Ok(slot)
    }

    /// Stop waiting for `request_id` (a late response is dropped).
    pub(crate) fn forget(&self, request_id: u64) {
        self.waiters.lock().by_id.remove(&request_id);
    }

    /// Send one frame's parts: written now, or combined into the write another caller is
    /// doing (see [`Outbox`]). A failed write closes the connection (a partial frame may be on
    /// the wire, and frames queued behind it are lost): their waiters are told by the close.
    /// A stuck write ends by the socket's write timeout.
    pub(crate) fn send(&self, parts: &[&[u8]]) -> Result<(), String> {
        if let Some(why) = &self.waiters.lock().closed {
            return Err(why.clone());
        }
        self.outbox.send(parts).map(|_| ()).map_err(|e| {
            let why = format!("send to {}: {e}", self.peer);
            self.close(&why);
            why
        })
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.waiters.lock().closed.is_some()
    }

    /// Close the connection: shut the socket down (the reader thread ends) and fail every
    /// waiting caller with `why`. Idempotent: the first reason sticks.
    pub(crate) fn close(&self, why: &str) {
        let waiters = {
            let mut w = self.waiters.lock();
            if w.closed.is_some() {
                return;
            }
            w.closed = Some(why.to_owned());
            std::mem::take(&mut w.by_id)
        };
        tracing::debug!(peer = %self.peer, reason = why, waiters = waiters.len(), "d.node connection closed");
        let _ = self.control.shutdown(Shutdown::Both);
        for (_, slot) in waiters {
            slot.fill(Err(why.to_owned()));
        }
    }

    /// Close and wait for the reader thread (bounded: the socket is shut down).
    pub(crate) fn close_and_join(&self, why: &str) {
        self.close(why);
        let handle = self.reader.lock().take();
        if let Some(handle) = handle {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }

    /// The reader thread: hand each response to its waiter until the connection ends.
    fn read_loop(&self, mut reader: BufReader<TcpStream>) {
        let why = loop {
            let frame = match read_frame(&mut reader) {
                Ok(Some(frame)) => frame,
                Ok(None) => break format!("{} closed the connection", self.peer),
                // No read timeout is set after the handshake; treat one as a broken socket.
                Err(e) => break format!("receive from {}: {e}", self.peer),
            };
            let request_id = frame.request_id;
            let response = match Response::decode(frame) {
                Ok(r) => r,
                Err(e) => break format!("bad response from {}: {e}", self.peer),
            };
            let waiter = self.waiters.lock().by_id.remove(&request_id);
            match waiter {
                Some(slot) => slot.fill(Ok(response)),
                None => {
                    tracing::debug!(peer = %self.peer, request_id, kind = %response.kind(), "response nobody waits for (timed out)");
                }
            }
        };
        self.close(&why);
    }
}
