//! The accept loop every front end shares: one task per connection, at most
//! [`CONNECTIONS_MAX`] at once (past that the kernel backlog holds new clients), a back-off
//! when accept() fails (EMFILE and friends), and on shutdown no new connections while the
//! running ones drain.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};

/// Connections served at once per listener. Each may pin buffers of its own, so this also
/// bounds memory.
pub(crate) const CONNECTIONS_MAX: usize = 1024;
/// How long to wait before accepting again after accept() fails, so a descriptor shortage
/// does not become a busy loop.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Accept on `listener` until `shutdown` is cancelled, running `serve` for each connection
/// in a span named after `protocol`; returns once every connection has finished.
pub(crate) async fn serve_connections<F, Fut>(
    listener: TcpListener,
    protocol: &'static str,
    shutdown: &CancellationToken,
    mut serve: F,
) where
    F: FnMut(TcpStream, SocketAddr) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut connections = JoinSet::new();
    let mut next_conn_id: u64 = 0;
    loop {
        while connections.try_join_next().is_some() {}
        if connections.len() >= CONNECTIONS_MAX {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = connections.join_next() => continue,
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    next_conn_id += 1;
                    let span = tracing::info_span!("conn", protocol, conn_id = next_conn_id, %peer);
                    connections.spawn(serve(stream, peer).instrument(span));
                }
                Err(error) => {
                    warn!(protocol, %error, "accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    info!(
        protocol,
        connections = connections.len(),
        "listener stopping, draining connections"
    );
    while connections.join_next().await.is_some() {}
}
