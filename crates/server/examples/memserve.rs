//! An NBD server over memory exports, for trying real clients against the listener.
//!
//!     cargo run --release -p weft-server --example memserve -- 127.0.0.1:10809
//!     nbdinfo --list nbd://127.0.0.1:10809
//!
//! Exports: `disk` (1 GiB, the default), `scratch` (64 MiB) and `golden` (16 MiB, read-only,
//! filled with a pattern). Ctrl-C shuts down gracefully.

#[path = "../tests/nbd_support/memory_backend.rs"]
mod memory_backend;

use std::sync::Arc;

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use weft_server::backend::ExportHandle;

use memory_backend::MemoryBackend;

fn main() -> anyhow::Result<()> {
    let addr = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:10809".to_string());
    let runtime = tokio::runtime::Runtime::new().context("start tokio runtime")?;
    runtime.block_on(async move {
        let backend = MemoryBackend::new()
            .with_export("disk", 1 << 30, false)
            .with_export("scratch", 64 << 20, false)
            .with_export("golden", 16 << 20, true);
        let golden = backend.export("golden");
        let pattern: Vec<u8> = (0..(16u32 << 20)).map(|i| (i % 251) as u8).collect();
        // The export is read-only to clients; fill it through a writable twin of the backend.
        fill_read_only(&golden, &pattern);
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .with_context(|| format!("bind {addr}"))?;
        println!("memserve listening on {}", listener.local_addr()?);
        let shutdown = CancellationToken::new();
        let stopper = shutdown.clone();
        tokio::spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stopper.cancel();
        });
        weft_server::nbd_listener::run(listener, Arc::new(backend), Default::default(), shutdown)
            .await
            .context("nbd listener")
    })
}

fn fill_read_only(export: &memory_backend::MemoryExport, pattern: &[u8]) {
    export.fill_unchecked(pattern);
    assert_eq!(export.info().size_bytes, pattern.len() as u64);
}
