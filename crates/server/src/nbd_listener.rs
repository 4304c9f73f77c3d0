//! NBD listener: accepts connections and drives the sans-IO codec in `weft-nbd` (placeholder
//! until the listener lands).

use std::sync::Arc;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::backend::ExportBackend;

/// Serve NBD on an already-bound listener until `shutdown` is cancelled.
pub async fn run(
    listener: TcpListener,
    backend: Arc<dyn ExportBackend>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let _ = (listener, backend, shutdown);
    Ok(())
}
