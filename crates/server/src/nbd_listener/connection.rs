//! One NBD connection: the handshake, then pipelined transmission.
//!
//! Transmission runs two halves. The reader (the connection task) frames requests with
//! `weft-nbd`, validates them, takes in-flight permits, reads write payloads straight into a
//! shared buffer (one copy, from the socket), and hands each command to the worker pool. The
//! job executes it and sends the completion to the writer task, which encodes replies
//! and writes them through a `BufWriter`, flushing once per batch. A write or FLUSH job does
//! not wait for the partner c.node's answer: it hands the request on and returns to the pool,
//! and whoever reads the answer sends the completion ([`super::execute::execute_then`]). The reader stops on
//! NBD_CMD_DISC, EOF, a framing error, an export that is gone, or shutdown; in every case the
//! in-flight requests finish and their replies are sent before the socket closes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use weft_nbd::wire::{OPTION_HEADER_LEN_BYTES, OPTION_PAYLOAD_MAX_BYTES, PAYLOAD_MAX_BYTES};
use weft_nbd::{
    encode_reply, parse_request_header, Agreement, Command, ExportSummary, Negotiation, Parse,
    ReplyHead, Session, Step, TlsMode,
};

use super::execute::{execute, execute_then, qos_cost, Disposition, Outcome};
use super::tls::NbdStream;
use super::NbdOptions;
use crate::access::NbdClient;
use crate::api::types::SessionProtocol;
use crate::backend::{ExportBackend, ExportHandle};
use crate::qos::serve_received;
use crate::sessions::SessionOrigin;
use crate::workers::WorkerPool;

/// Requests in flight on one connection (dispatched, reply not yet written). fio runs QD32
/// and qemu up to 16 per connection; 128 leaves headroom without letting one client flood the
/// blocking pool.
const INFLIGHT_REQUESTS_MAX: usize = 128;
/// Payload bytes (write data received plus read data to send) in flight on one connection.
const INFLIGHT_PAYLOAD_BYTES_MAX: u32 = 64 * 1024 * 1024;
/// A client has this long to finish the handshake; idle half-open handshakes do not pin a
/// connection slot for ever.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);
/// How often an idle connection checks whether its export was deleted, refreshed or rolled
/// back (a busy one notices at its next request).
const GONE_POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Most a handshake buffer holds: one whole option of the maximum size.
const HANDSHAKE_BUFFER_MAX_BYTES: usize =
    OPTION_HEADER_LEN_BYTES + OPTION_PAYLOAD_MAX_BYTES as usize;
/// Read buffer growth step: many pipelined headers (or a small write) per read syscall.
const READ_BUFFER_BYTES: usize = 256 * 1024;
/// Reply buffer: small replies coalesce into one write; larger data bypasses it.
const WRITE_BUFFER_BYTES: usize = 256 * 1024;
/// Replies written between flushes when many are ready at once.
const REPLY_BATCH_MAX: usize = 64;

const _: () = assert!(INFLIGHT_PAYLOAD_BYTES_MAX >= PAYLOAD_MAX_BYTES);

/// One finished request on its way to the writer. Dropping it releases its in-flight permits,
/// which happens only once its reply has been written.
#[derive(Debug)]
struct Completion {
    handle: u64,
    offset_bytes: u64,
    outcome: Outcome,
    _permits: Permits,
}

#[derive(Debug)]
struct Permits {
    _request: OwnedSemaphorePermit,
    _bytes: Option<OwnedSemaphorePermit>,
}

/// Why a connection ended early; logged, never propagated.
#[derive(Debug, thiserror::Error)]
enum ConnError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("negotiation: {0}")]
    Negotiation(#[from] weft_nbd::NegotiationError),
    #[error("handshake timed out")]
    HandshakeTimeout,
    #[error("bytes in clear after STARTTLS")]
    ClearTextAfterStartTls,
    #[error("handshake buffer over its limit")]
    HandshakeTooLarge,
    #[error("export {name:?} could not be opened after negotiation")]
    OpenFailed { name: String },
}

/// Serve one connection to completion. Errors are logged here.
pub(super) async fn serve(
    stream: TcpStream,
    backend: Arc<dyn ExportBackend>,
    workers: Arc<WorkerPool>,
    options: Arc<NbdOptions>,
    shutdown: CancellationToken,
) {
    if let Err(error) = stream.set_nodelay(true) {
        debug!(%error, "set_nodelay failed");
    }
    let (Ok(local), Ok(peer)) = (stream.local_addr(), stream.peer_addr()) else {
        return;
    };
    let client = NbdClient {
        peer: peer.ip(),
        tls_names: Vec::new(),
        open: crate::access::connection_is_open(local, options.open_network),
    };
    info!(%peer, "nbd client connected");
    let handshake = handshake(NbdStream::Plain(stream), &backend, client, peer, &options);
    let negotiated = tokio::select! {
        _ = shutdown.cancelled() => return,
        r = tokio::time::timeout(HANDSHAKE_TIMEOUT, handshake) => {
            r.unwrap_or(Err(ConnError::HandshakeTimeout))
        }
    };
    let (stream, agreement, export, leftover) = match negotiated {
        Ok(Some(done)) => done,
        Ok(None) => {
            info!("nbd client left during negotiation");
            return;
        }
        Err(error) => {
            info!(%error, "nbd negotiation failed, disconnecting");
            return;
        }
    };
    info!(
        export = %agreement.export.name,
        structured = agreement.structured_replies,
        base_allocation = agreement.base_allocation,
        tls = matches!(stream, NbdStream::Tls(_)),
        block_size_min = agreement.export.block_size_min(),
        "nbd transmission started"
    );
    let transmitted = match stream {
        NbdStream::Plain(tcp) => {
            let (rd, wr) = tcp.into_split();
            transmit(rd, wr, &agreement, export, leftover, &workers, &shutdown).await
        }
        NbdStream::Tls(tls) => {
            let (rd, wr) = tokio::io::split(*tls);
            transmit(rd, wr, &agreement, export, leftover, &workers, &shutdown).await
        }
    };
    match transmitted {
        Ok(()) => info!("nbd client disconnected"),
        Err(error) => info!(%error, "nbd connection closed"),
    }
}

/// The exports `client` may use: only these are listed, and only these can be opened.
async fn visible_exports(
    backend: &Arc<dyn ExportBackend>,
    client: NbdClient,
) -> std::io::Result<Vec<ExportSummary>> {
    let lister = Arc::clone(backend);
    let exports = blocking(move || {
        let table = lister.access();
        let mut exports = lister.list_exports();
        exports.retain(|e| table.nbd_may_use(&client, &e.name));
        exports
    })
    .await?;
    Ok(exports
        .into_iter()
        .map(|e| ExportSummary {
            name: e.name,
            description: e.description,
            size_bytes: e.size_bytes,
            read_only: e.read_only,
            block_size_min_bytes: e.logical_block_size_bytes,
        })
        .collect())
}

/// A finished negotiation: the stream (TLS or not), the agreement, the opened export and any
/// bytes the client already sent past the end of negotiation.
type Negotiated = (NbdStream, Agreement, Arc<dyn ExportHandle>, BytesMut);

/// Run option haggling (and the TLS handshake if the client asks for it). `Ok(None)` when
/// the client aborted or left. The opened export is registered as the client's session.
async fn handshake(
    mut stream: NbdStream,
    backend: &Arc<dyn ExportBackend>,
    mut client: NbdClient,
    peer: SocketAddr,
    options: &NbdOptions,
) -> Result<Option<Negotiated>, ConnError> {
    let mut exports = visible_exports(backend, client.clone()).await?;
    let tls_mode = options.tls.as_ref().map_or(TlsMode::Off, |t| t.mode);
    let mut negotiation = Negotiation::with_tls(tls_mode);
    let mut out = Vec::new();
    negotiation.greeting(&mut out);
    stream.write_all(&out).await?;
    let mut buf = BytesMut::with_capacity(4096);
    loop {
        loop {
            out.clear();
            match negotiation.advance(&buf, &exports, &mut out)? {
                Step::Incomplete => break,
                Step::Continue { consumed } => {
                    buf.advance(consumed);
                    if let Some(export) = negotiation.take_refused_export() {
                        // A host asking for what it may not see is misconfigured (or probing).
                        warn!(
                            export,
                            tls_names = ?client.tls_names,
                            "nbd export refused: unknown, or not visible to this client"
                        );
                    }
                    stream.write_all(&out).await?;
                }
                Step::Abort { consumed } => {
                    buf.advance(consumed);
                    // The client may already have closed; the ACK is a courtesy.
                    let _ = stream.write_all(&out).await;
                    return Ok(None);
                }
                Step::Go {
                    consumed,
                    agreement,
                } => {
                    buf.advance(consumed);
                    let opener = Arc::clone(backend);
                    let name = agreement.export.name.clone();
                    let who = client.clone();
                    let opened = blocking(move || {
                        let host = opener.access().nbd_host(&who, &name).map(str::to_string);
                        opener.open(&name).map(|export| (export, host))
                    })
                    .await?;
                    let Ok((export, host)) = opened else {
                        // Gone between the list and the open: hang up before the final reply.
                        return Err(ConnError::OpenFailed {
                            name: agreement.export.name,
                        });
                    };
                    let export = options.sessions.track(
                        export,
                        SessionOrigin {
                            protocol: SessionProtocol::Nbd,
                            client: peer.to_string(),
                            address: peer,
                            host,
                        },
                    );
                    stream.write_all(&out).await?;
                    return Ok(Some((stream, agreement, export, buf)));
                }
                Step::StartTls { consumed } => {
                    buf.advance(consumed);
                    stream.write_all(&out).await?;
                    if !buf.is_empty() {
                        return Err(ConnError::ClearTextAfterStartTls);
                    }
                    let (NbdStream::Plain(tcp), Some(tls)) = (stream, &options.tls) else {
                        return Err(ConnError::ClearTextAfterStartTls);
                    };
                    let secured = tls.accept(tcp).await?;
                    client.tls_names = super::tls::client_names(&secured);
                    info!(names = ?client.tls_names, "nbd client switched to TLS");
                    stream = NbdStream::Tls(Box::new(secured));
                    negotiation.tls_started();
                    exports = visible_exports(backend, client.clone()).await?;
                }
            }
        }
        if buf.len() >= HANDSHAKE_BUFFER_MAX_BYTES {
            return Err(ConnError::HandshakeTooLarge);
        }
        buf.reserve(4096);
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(None);
        }
    }
}

/// The transmission phase: reader loop here, writer in its own task.
async fn transmit<R, W>(
    mut rd: R,
    wr: W,
    agreement: &Agreement,
    export: Arc<dyn ExportHandle>,
    mut buf: BytesMut,
    workers: &WorkerPool,
    shutdown: &CancellationToken,
) -> Result<(), ConnError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let session = Session::new(agreement);
    let (tx, rx) = mpsc::channel::<Completion>(INFLIGHT_REQUESTS_MAX);
    // Cancelled when the connection must end: export gone, or the writer failed.
    let stop = CancellationToken::new();
    let watcher = tokio::spawn(disconnect_when_gone(Arc::clone(&export), stop.clone()));
    let writer = tokio::spawn(write_replies(
        wr,
        rx,
        session.structured_replies,
        stop.clone(),
    ));
    let requests = Arc::new(Semaphore::new(INFLIGHT_REQUESTS_MAX));
    let bytes = Arc::new(Semaphore::new(INFLIGHT_PAYLOAD_BYTES_MAX as usize));
    // The volume's throttle: a throttled request waits here, on this task, before it takes
    // a worker thread (the handle below then finds it paid for).
    let qos = export.qos();

    let read_result: Result<(), ConnError> = async {
        loop {
            if export.is_gone() {
                info!("export is gone, disconnecting");
                return Ok(());
            }
            let header = match parse_request_header(&buf) {
                Parse::Complete(header, consumed) => {
                    buf.advance(consumed);
                    header
                }
                Parse::Incomplete => {
                    if !read_more(&mut rd, &mut buf, READ_BUFFER_BYTES, &stop, shutdown).await? {
                        return Ok(());
                    }
                    continue;
                }
                Parse::Invalid(error) => {
                    warn!(%error, "malformed nbd request, disconnecting");
                    return Ok(());
                }
            };
            // The request's latency, as the QoS latency target sees it, starts here.
            let mut received = Instant::now();
            let classified = session.classify(&header);
            if classified == Ok(Command::Disconnect) {
                debug!("nbd disconnect requested");
                return Ok(());
            }
            let payload_len = header.payload_len_bytes();
            let read_len = match classified {
                Ok(Command::Read { length_bytes, .. }) => length_bytes,
                _ => 0,
            };
            // Both are bounded by PAYLOAD_MAX_BYTES (parser and classify), so the sum fits.
            let permits = acquire(&requests, &bytes, payload_len + read_len).await;
            let payload = {
                let len = payload_len as usize;
                while buf.len() < len {
                    let missing = len - buf.len();
                    if !read_more(&mut rd, &mut buf, missing, &stop, shutdown).await? {
                        return Ok(());
                    }
                }
                buf.split_to(len).freeze()
            };
            let command = match classified {
                Ok(command) => command,
                Err(errno) => {
                    debug!(?header, ?errno, "nbd request rejected");
                    let completion = Completion {
                        handle: header.handle,
                        offset_bytes: header.offset_bytes,
                        outcome: Outcome::Failed(errno),
                        _permits: permits,
                    };
                    if tx.send(completion).await.is_err() {
                        return Ok(());
                    }
                    continue;
                }
            };
            if let (Some(qos), Some((dir, cost_bytes))) = (&qos, qos_cost(&command)) {
                let wait = qos.prepay(dir, cost_bytes);
                if !wait.is_zero() {
                    let before = Instant::now();
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return Ok(()),
                        () = shutdown.cancelled() => return Ok(()),
                    }
                    // The volume's own limit is not latency it missed.
                    received += before.elapsed();
                }
            }
            if runs_inline(&command, &requests, &buf) {
                // The only request in flight and a small one: a hand-off to a worker and back
                // would cost two thread wake-ups, more than the call itself (QD1 latency).
                let (outcome, disposition) =
                    serve_received(received, || execute(export.as_ref(), command, payload));
                if disposition == Disposition::Disconnect {
                    stop.cancel();
                }
                let completion = Completion {
                    handle: header.handle,
                    offset_bytes: header.offset_bytes,
                    outcome,
                    _permits: permits,
                };
                if tx.send(completion).await.is_err() {
                    return Ok(());
                }
                continue;
            }
            let job = Job {
                export: Arc::clone(&export),
                command,
                handle: header.handle,
                offset_bytes: header.offset_bytes,
                payload,
                permits,
                tx: tx.clone(),
                stop: stop.clone(),
                received,
            };
            workers.submit(Box::new(move || job.run()));
        }
    }
    .await;

    watcher.abort();
    // Drain: in-flight jobs hold clones of `tx`; the writer ends once they have all sent.
    drop(tx);
    let write_result = writer
        .await
        .expect("writer task does not panic (panic = abort)");
    read_result?;
    write_result.map_err(ConnError::from)
}

/// Requests up to this size run on the connection's task when nothing else is in flight.
const INLINE_REQUEST_BYTES_MAX: u32 = 64 * 1024;

/// Whether to run `command` on the connection's own task: it is the connection's only
/// request in flight, the client has sent nothing after it yet, and it is small (a large
/// write may wait for a stripe; it must not hold an I/O thread meanwhile).
fn runs_inline(command: &Command, requests: &Semaphore, buf: &BytesMut) -> bool {
    let alone = requests.available_permits() == INFLIGHT_REQUESTS_MAX - 1 && buf.is_empty();
    let small = match command {
        Command::Read { length_bytes, .. } => *length_bytes <= INLINE_REQUEST_BYTES_MAX,
        Command::Write { length_bytes, .. } => *length_bytes <= INLINE_REQUEST_BYTES_MAX,
        Command::Flush => true,
        _ => false,
    };
    alone && small
}

/// One command on its way to a worker thread; its completion goes straight to the writer.
struct Job {
    export: Arc<dyn ExportHandle>,
    command: Command,
    handle: u64,
    offset_bytes: u64,
    payload: Bytes,
    permits: Permits,
    tx: mpsc::Sender<Completion>,
    stop: CancellationToken,
    /// When the reader took the request (moved on by its throttle wait).
    received: Instant,
}

impl Job {
    /// Execute the command; a write's or FLUSH's completion may be sent later, by the thread
    /// that learns it is acknowledged (see [`execute_then`]).
    fn run(self) {
        let Job {
            export,
            command,
            handle,
            offset_bytes,
            payload,
            permits,
            tx,
            stop,
            received,
        } = self;
        serve_received(received, || {
            execute_then(
                export.as_ref(),
                command,
                payload,
                move |outcome, disposition| {
                    if disposition == Disposition::Disconnect {
                        stop.cancel();
                    }
                    // Never full: the channel holds INFLIGHT_REQUESTS_MAX and each sender holds a
                    // request permit (`try_send`, not `blocking_send`: this may run on a thread of
                    // the runtime, one whose inline request read the partner's answer). Fails only
                    // when the writer is gone, and then nobody wants the reply.
                    let _ = tx.try_send(Completion {
                        handle,
                        offset_bytes,
                        outcome,
                        _permits: permits,
                    });
                },
            );
        });
    }
}

/// Read more bytes into `buf`, reserving at least `want`. `false` on EOF, stop or shutdown.
/// End the connection (cancel `stop`) once the export is gone, also while the client is idle:
/// a refreshed volume's clients must reconnect rather than see old and new data mixed.
async fn disconnect_when_gone(export: Arc<dyn ExportHandle>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(GONE_POLL_INTERVAL) => {}
        }
        if export.is_gone() {
            info!("export is gone (deleted, refreshed or rolled back), disconnecting");
            stop.cancel();
            return;
        }
    }
}

async fn read_more(
    rd: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    want: usize,
    stop: &CancellationToken,
    shutdown: &CancellationToken,
) -> std::io::Result<bool> {
    buf.reserve(want.max(4096));
    tokio::select! {
        biased;
        _ = stop.cancelled() => Ok(false),
        _ = shutdown.cancelled() => Ok(false),
        n = rd.read_buf(buf) => Ok(n? > 0),
    }
}

async fn acquire(requests: &Arc<Semaphore>, bytes: &Arc<Semaphore>, payload_bytes: u32) -> Permits {
    let request = Arc::clone(requests)
        .acquire_owned()
        .await
        .expect("semaphore never closed");
    let bytes = if payload_bytes == 0 {
        None
    } else {
        Some(
            Arc::clone(bytes)
                .acquire_many_owned(payload_bytes)
                .await
                .expect("semaphore never closed"),
        )
    };
    Permits {
        _request: request,
        _bytes: bytes,
    }
}

/// The writer task: encode completions in arrival order, flush once per batch.
async fn write_replies<W: AsyncWrite + Unpin>(
    wr: W,
    mut rx: mpsc::Receiver<Completion>,
    structured: bool,
    stop: CancellationToken,
) -> std::io::Result<()> {
    let mut w = BufWriter::with_capacity(WRITE_BUFFER_BYTES, wr);
    let mut scratch = Vec::with_capacity(64);
    let result: std::io::Result<()> = async {
        while let Some(first) = rx.recv().await {
            write_one(&mut w, &mut scratch, first, structured).await?;
            for _ in 1..REPLY_BATCH_MAX {
                match rx.try_recv() {
                    Ok(next) => write_one(&mut w, &mut scratch, next, structured).await?,
                    Err(_) => break,
                }
            }
            w.flush().await?;
        }
        w.shutdown().await
    }
    .await;
    if result.is_err() {
        // The client is unreachable: make the reader stop too.
        stop.cancel();
    }
    result
}

async fn write_one<W: AsyncWrite + Unpin>(
    w: &mut BufWriter<W>,
    scratch: &mut Vec<u8>,
    c: Completion,
    structured: bool,
) -> std::io::Result<()> {
    scratch.clear();
    match &c.outcome {
        Outcome::Done => encode_reply(c.handle, &ReplyHead::Done, structured, scratch),
        Outcome::Failed(errno) => {
            encode_reply(c.handle, &ReplyHead::Error(*errno), structured, scratch)
        }
        Outcome::Data(data) => {
            let length_bytes = u32::try_from(data.len()).expect("read length came from a u32");
            let head = ReplyHead::ReadData {
                offset_bytes: c.offset_bytes,
                length_bytes,
            };
            encode_reply(c.handle, &head, structured, scratch);
        }
        Outcome::Extents(extents) => {
            let head = ReplyHead::BlockStatus {
                context_id: weft_nbd::wire::BASE_ALLOCATION_CONTEXT_ID,
                extents,
            };
            encode_reply(c.handle, &head, structured, scratch);
        }
    }
    w.write_all(scratch).await?;
    if let Outcome::Data(data) = &c.outcome {
        w.write_all(data).await?;
    }
    Ok(())
}

/// Run a backend call on the blocking pool.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> std::io::Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| std::io::Error::other(format!("blocking task failed: {e}")))
}
