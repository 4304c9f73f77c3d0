//! NBD listener: accepts TCP connections and serves exports of an [`ExportBackend`] over NBD.
//!
//! This is glue only. The protocol (handshake, option haggling, request framing and
//! validation, reply encoding) is the sans-IO `weft-nbd` crate; this module moves bytes between
//! sockets and that crate, and runs backend calls on a fixed pool of worker threads, never on the
//! runtime's worker threads.
//!
//! Shape: one task per connection. After the handshake a connection splits into a reader
//! (this task: parses requests and dispatches each to the worker pool) and a writer task
//! (sends replies in completion order, batching them into few syscalls). In-flight requests and
//! payload bytes per connection are bounded by semaphores, which is the backpressure: the
//! reader stops reading the socket when a bound is reached.
//!
//! Access and TLS: a client sees the exports the host model gives it ([`crate::access`]: by
//! address, or by the names of its verified TLS client certificate); a client that sends
//! STARTTLS switches to TLS before choosing an export ([`tls`]), and a listener that requires
//! TLS refuses every other option until it does.
//!
//! Shutdown: cancelling the token stops accepting; every connection stops reading new
//! requests, lets in-flight ones complete and their replies go out, then closes. `run` returns
//! once every connection has finished.

mod connection;
mod execute;
pub mod tls;

pub use tls::{NbdTls, NbdTlsFiles};

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::backend::ExportBackend;
use crate::workers;

/// Threads running backend calls for all connections of a listener. Backend calls may block
/// on disk; 16 keeps a QD32 client's requests overlapping on a small machine without the
/// thread churn of tokio's blocking pool.
const WORKER_THREADS: usize = 16;

/// How a listener serves its clients.
#[derive(Debug, Default)]
pub struct NbdOptions {
    /// Off loopback, exports mapped to no host are served to anyone too.
    pub open_network: bool,
    /// NBD over TLS (STARTTLS), when configured.
    pub tls: Option<NbdTls>,
    /// Where each connection registers the export it opened (its session).
    pub sessions: Arc<crate::sessions::Sessions>,
}

/// Serve NBD on an already-bound listener until `shutdown` is cancelled, then wait for every
/// connection to drain.
pub async fn run(
    listener: TcpListener,
    backend: Arc<dyn ExportBackend>,
    options: NbdOptions,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let local = listener.local_addr()?;
    info!(%local, open_network = options.open_network, tls = ?options.tls, "nbd listener started");
    let options = Arc::new(options);
    let workers = Arc::new(workers::WorkerPool::new("nbd", WORKER_THREADS)?);
    crate::accept::serve_connections(listener, "nbd", &shutdown, |stream, _peer| {
        connection::serve(
            stream,
            Arc::clone(&backend),
            Arc::clone(&workers),
            Arc::clone(&options),
            shutdown.clone(),
        )
    })
    .await;
    // Every connection has drained, so the pool is idle: joining its threads does not block.
    drop(workers);
    info!("nbd listener stopped");
    Ok(())
}
