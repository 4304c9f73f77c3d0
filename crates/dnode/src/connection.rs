//! One client connection on the d.node: the handshake, then a reader loop that decodes
//! requests and hands them to the worker pool, and the [`Outbox`] that workers answer through
//! (in any order; answers finished while one is being written go out together in one write).
//! Small chunk reads skip the pool: the reader gathers them and performs each burst itself
//! through io_uring (`read_batch`), answering the burst in one write.
//!
//! Bad input never panics and never outlives its connection: a frame that does not decode gets
//! the proto's refusal (when its header can be trusted) and the connection is closed. Bounds:
//! requests and request bytes in flight per connection (the reader stops reading beyond them),
//! a handshake timeout, an idle timeout, and a write timeout (a client that stops reading is
//! dropped).

use std::io::BufReader;
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use weft_dnode_client::frame_io::{read_frame, FrameReadError};
use weft_dnode_client::outbox::Outbox;
use weft_proto::{
    answer_hello, refusal_for, ErrorCode, FrameHeader, HelloOutcome, ProtoError, Request, Response,
    FRAME_HEADER_LEN_BYTES,
};

use crate::handler::Handler;
use crate::pool::WorkerPool;
use crate::read_batch::ReadBatch;
use crate::stats::Counters;

/// A client has this long to send its `Hello` after connecting.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(5_000);
/// A connection with nothing in flight and no bytes for this long is closed: its client is
/// gone or forgot it (clients reconnect lazily, so closing costs them nothing).
const IDLE_TIMEOUT: Duration = Duration::from_millis(600_000);
/// A response write blocked this long means the client stopped reading: drop it.
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_millis(30_000);
/// Requests of one connection in flight (queued or executing). Enough to keep the disks busy
/// for one client; beyond it the reader stops reading and TCP pushes back.
const IN_FLIGHT_PER_CONNECTION_MAX: usize = 64;
/// Bytes of chunk data in flight per connection (put payloads held, read buffers to fill): one
/// client cannot make the d.node hold more than this plus one frame. Four max-size chunks.
const IN_FLIGHT_BYTES_PER_CONNECTION_MAX: u64 = 128 * 1024 * 1024;
/// Socket read buffer: small requests arrive a few per syscall; chunk payloads bypass it.
const READ_BUFFER_BYTES: usize = 64 * 1024;
/// Weight of a request without chunk data, in the in-flight byte count.
const SMALL_REQUEST_BYTES: u64 = 4096;

const _: () = assert!(IN_FLIGHT_BYTES_PER_CONNECTION_MAX >= weft_proto::CHUNK_MAX_BYTES as u64);

/// What every connection serves with.
#[derive(Debug)]
pub(crate) struct ServeContext {
    pub cluster_id: String,
    /// Connections served at once (see `server`).
    pub connections_max: usize,
    pub handler: Arc<Handler>,
    pub pool: Arc<WorkerPool>,
    pub counters: Arc<Counters>,
}

/// A served connection, shared by its reader thread and the workers answering its requests.
#[derive(Debug)]
pub(crate) struct ServerConn {
    pub id: u64,
    pub peer: SocketAddr,
    outbox: Outbox<TcpStream>,
    /// For shutting the socket down from any thread.
    control: TcpStream,
    closed: AtomicBool,
    in_flight: Mutex<InFlight>,
    /// Signalled when a request finishes or the connection closes.
    progress: Condvar,
}

#[derive(Debug, Default)]
struct InFlight {
    requests: usize,
    bytes: u64,
}

impl ServerConn {
    /// Returns the connection and the stream its reader reads from.
    pub(crate) fn new(
        id: u64,
        peer: SocketAddr,
        stream: TcpStream,
    ) -> std::io::Result<(Arc<ServerConn>, TcpStream)> {
        stream.set_nodelay(true)?;
        stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
        let reader = stream.try_clone()?;
        let control = stream.try_clone()?;
        let conn = Arc::new(ServerConn {
            id,
            peer,
            outbox: Outbox::new(stream),
            control,
            closed: AtomicBool::new(false),
            in_flight: Mutex::new(InFlight::default()),
            progress: Condvar::new(),
        });
        Ok((conn, reader))
    }

    /// Close the socket (the reader wakes and ends; pending answers are dropped).
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = self.control.shutdown(Shutdown::Both);
        let _guard = self.in_flight.lock();
        self.progress.notify_all();
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The reader loop: handshake, then requests until the client leaves, breaks the protocol,
    /// idles out, or the d.node shuts the socket down.
    pub(crate) fn serve(self: &Arc<Self>, reader: TcpStream, cx: &ServeContext) {
        let _ = reader.set_read_timeout(Some(HANDSHAKE_TIMEOUT));
        let mut reader = BufReader::with_capacity(READ_BUFFER_BYTES, reader);
        if !self.handshake(&mut reader, cx) {
            Counters::add(&cx.counters.connections_refused, 1);
            self.close();
            return;
        }
        let _ = reader.get_ref().set_read_timeout(Some(IDLE_TIMEOUT));
        let mut batch = ReadBatch::new();
        let why = loop {
            // Perform the gathered reads before waiting for the client, or once enough.
            if !batch.is_empty() && (batch.is_full() || !next_frame_buffered(&reader)) {
                let answers = batch.perform();
                Counters::add(&cx.counters.requests, answers.len() as u64);
                if !self.respond_all(&answers) {
                    break "socket error";
                }
            }
            let frame = match read_frame(&mut reader) {
                Ok(Some(frame)) => frame,
                Ok(None) => {
                    // The client is done sending; let its last answers go out first.
                    self.wait_drained(Instant::now() + WRITE_TIMEOUT);
                    break "client closed";
                }
                Err(FrameReadError::Idle) if self.in_flight.lock().requests > 0 => continue,
                Err(FrameReadError::Idle) => break "idle",
                Err(FrameReadError::Proto(e)) => {
                    self.refuse(&e, cx);
                    break "bad frame";
                }
                Err(_) => break "socket error",
            };
            let request_id = frame.request_id;
            let request = match Request::decode(frame) {
                Ok(r) => r,
                Err(e) => {
                    self.refuse(&e, cx);
                    break "bad request";
                }
            };
            let Some(request) = batch.take(request_id, request, &cx.handler.store) else {
                continue;
            };
            let weight = weight_of(&request);
            if !self.admit(weight) {
                break "closed";
            }
            Counters::add(&cx.counters.requests, 1);
            let conn = self.clone();
            let handler = cx.handler.clone();
            let job = Box::new(move || {
                if !conn.is_closed() {
                    tracing::debug!(conn = conn.id, request_id, kind = %request.kind(), "request");
                    let response = handler.execute(request);
                    conn.respond(request_id, &response);
                }
                conn.release(weight);
            });
            if cx.pool.submit(job).is_err() {
                self.release(weight);
                break "shutting down";
            }
        };
        tracing::debug!(conn = self.id, peer = %self.peer, reason = why, "connection ends");
        self.close();
    }

    /// Read and answer the `Hello`; false if the connection is refused or broken.
    fn handshake(&self, reader: &mut BufReader<TcpStream>, cx: &ServeContext) -> bool {
        let frame = match read_frame(reader) {
            Ok(Some(frame)) => frame,
            Ok(None) | Err(FrameReadError::Idle) => return false,
            Err(FrameReadError::Proto(e)) => {
                self.refuse(&e, cx);
                return false;
            }
            Err(_) => return false,
        };
        let request_id = frame.request_id;
        let first = match Request::decode(frame) {
            Ok(r) => r,
            Err(e) => {
                self.refuse(&e, cx);
                return false;
            }
        };
        match answer_hello(&first, &cx.handler.node_id, &cx.cluster_id) {
            HelloOutcome::Accept(ok) => {
                if let Request::Hello { client_name, .. } = &first {
                    tracing::info!(conn = self.id, peer = %self.peer, client = %client_name, "client connected");
                }
                self.respond(request_id, &ok)
            }
            HelloOutcome::Refuse(refusal) => {
                if let Response::Error { code, message } = &refusal {
                    tracing::info!(conn = self.id, peer = %self.peer, ?code, reason = %message, "client refused");
                }
                self.respond(request_id, &refusal);
                false
            }
        }
    }

    /// The client's bytes broke the protocol: answer what the proto allows, then it is closed.
    fn refuse(&self, e: &ProtoError, cx: &ServeContext) {
        Counters::add(&cx.counters.connections_bad_input, 1);
        tracing::info!(conn = self.id, peer = %self.peer, error = %e, "closing connection: bad input");
        if let Some((request_id, response)) = refusal_for(e) {
            self.respond(request_id, &response);
        }
    }

    /// Send one response; false (and the connection closed) if it cannot be written.
    /// Its chunk bytes are not copied (a vectored write, or a copy into the outbox's batch
    /// when small).
    fn respond(&self, request_id: u64, response: &Response) -> bool {
        let fallback;
        let encoded = match response.encode_vectored(request_id) {
            Ok(e) => e,
            Err(e) => {
                // Our own answer breaks a protocol limit: a bug, but the client still gets one.
                tracing::error!(conn = self.id, error = %e, "response does not encode");
                fallback = Response::error(ErrorCode::Io, format!("response does not encode: {e}"));
                match fallback.encode_vectored(request_id) {
                    Ok(e) => e,
                    Err(_) => {
                        self.close();
                        return false;
                    }
                }
            }
        };
        self.send_parts(&[&encoded.header, encoded.bulk, &encoded.meta])
    }

    /// Send responses in one write; false (and the connection closed) if they cannot be.
    fn respond_all(&self, answers: &[(u64, Response)]) -> bool {
        let mut out = Vec::new();
        for (request_id, response) in answers {
            match response.encode_vectored(*request_id) {
                Ok(e) => e.write_to(&mut out),
                Err(e) => {
                    // Our own answer breaks a protocol limit: a bug, but the client still
                    // gets one.
                    tracing::error!(conn = self.id, error = %e, "response does not encode");
                    let fallback =
                        Response::error(ErrorCode::Io, format!("response does not encode: {e}"));
                    match fallback.encode_vectored(*request_id) {
                        Ok(e) => e.write_to(&mut out),
                        Err(_) => {
                            self.close();
                            return false;
                        }
                    }
                }
            }
        }
        self.send_parts(&[&out])
    }

    fn send_parts(&self, parts: &[&[u8]]) -> bool {
        // A write blocked past WRITE_TIMEOUT (the socket's) fails and closes the connection.
        match self.outbox.send(parts) {
            Ok(_) => true,
            Err(e) => {
                tracing::debug!(conn = self.id, error = %e, "cannot answer; closing");
                self.close();
                false
            }
        }
    }

    /// Wait for room for a request of `weight` bytes; false if the connection closed meanwhile.
    fn admit(&self, weight: u64) -> bool {
        let mut f = self.in_flight.lock();
        loop {
            if self.is_closed() {
                return false;
            }
            let fits = f.requests < IN_FLIGHT_PER_CONNECTION_MAX
                && (f.requests == 0 || f.bytes + weight <= IN_FLIGHT_BYTES_PER_CONNECTION_MAX);
            if fits {
                f.requests += 1;
                f.bytes += weight;
                return true;
            }
            // Woken by every finished request and by close(); the timeout only re-checks.
            self.progress.wait_for(&mut f, WRITE_TIMEOUT);
        }
    }

    fn release(&self, weight: u64) {
        let mut f = self.in_flight.lock();
        f.requests -= 1;
        f.bytes -= weight;
        self.progress.notify_all();
    }

    fn wait_drained(&self, deadline: Instant) {
        let mut f = self.in_flight.lock();
        while f.requests > 0 && !self.is_closed() {
            if self.progress.wait_until(&mut f, deadline).timed_out() {
                return;
            }
        }
    }
}

/// Whether the reader's buffer holds the whole next frame (reading it will not block). A
/// header that does not decode counts as whole: reading it reports the error.
fn next_frame_buffered(reader: &BufReader<TcpStream>) -> bool {
    let buf = reader.buffer();
    let Some(head) = buf.first_chunk::<FRAME_HEADER_LEN_BYTES>() else {
        return false;
    };
    match FrameHeader::decode(head) {
        Ok(h) => buf.len() >= FRAME_HEADER_LEN_BYTES + h.payload_len(),
        Err(_) => true,
    }
}

/// Bytes a request makes the d.node hold: its chunk data, or the buffer of a read.
fn weight_of(request: &Request) -> u64 {
    match request {
        Request::PutChunk { data, .. } => data.len() as u64,
        Request::ReadChunk { len_bytes, .. } => u64::from(*len_bytes),
        _ => SMALL_REQUEST_BYTES,
    }
}
