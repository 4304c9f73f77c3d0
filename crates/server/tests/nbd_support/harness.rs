//! Starts the NBD listener in-process on 127.0.0.1:0 over a [`MemoryBackend`], on its own
//! runtime thread, so test bodies can run blocking clients (external tools or std sockets).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::thread::JoinHandle;

use tokio_util::sync::CancellationToken;

use super::memory_backend::MemoryBackend;

#[derive(Debug)]
pub struct TestServer {
    pub addr: SocketAddr,
    pub backend: Arc<MemoryBackend>,
    shutdown: CancellationToken,
    thread: Option<JoinHandle<std::io::Result<()>>>,
}

impl TestServer {
    pub fn start(backend: MemoryBackend) -> Self {
        let backend = Arc::new(backend);
        let shutdown = CancellationToken::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let thread = {
            let backend = Arc::clone(&backend);
            let shutdown = shutdown.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                    tx.send(listener.local_addr()?).expect("test is waiting");
                    weft_server::nbd_listener::run(listener, backend, Default::default(), shutdown)
                        .await
                })
            })
        };
        let addr = rx.recv().expect("listener bound");
        TestServer {
            addr,
            backend,
            shutdown,
            thread: Some(thread),
        }
    }

    /// Three exports: `disk` (64 MiB, default), `small` (1 MiB) and `ro` (1 MiB, read-only).
    pub fn start_default() -> Self {
        Self::start(
            MemoryBackend::new()
                .with_export("disk", 64 << 20, false)
                .with_export("small", 1 << 20, false)
                .with_export("ro", 1 << 20, true),
        )
    }

    pub fn uri(&self, export: &str) -> String {
        format!("nbd://{}/{}", self.addr, export)
    }

    /// Cancel and wait for `run` to return (every connection drained).
    pub fn stop(mut self) -> std::io::Result<()> {
        self.shutdown.cancel();
        self.thread
            .take()
            .expect("running")
            .join()
            .expect("server thread")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.shutdown.cancel();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// True if `tool` can be run; otherwise prints why the calling test is skipped.
pub fn have_tool(tool: &str) -> bool {
    let ok = Command::new(tool).arg("--version").output().is_ok();
    if !ok {
        eprintln!("SKIPPED: `{tool}` is not installed (apt-get install fio libnbd-bin qemu-utils)");
    }
    ok
}

/// Run a command, panicking with its output if it fails.
pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\nstdout:\n{stdout}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
