//! The listener: accepts connections (at most [`CONNECTIONS_MAX`] at once), gives each a reader
//! thread ([`crate::connection`]), keeps the table of live ones, and on shutdown closes them all
//! and waits for their threads.
//!
//! The listening socket is non-blocking and polled, so the acceptor notices the stop signal
//! within [`ACCEPT_POLL_INTERVAL`] with no wake-up trick; the stop signal also cuts the pause.

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::Mutex;
use weft_dnode_client::frame_io::write_all_parts;
use weft_proto::{ErrorCode, Response};

use crate::connection::{ServeContext, ServerConn};
use crate::error::DnodeError;
use crate::stats::Counters;
use crate::stop::Stop;

/// Most connections served at once (one thread each), and the default limit. c.nodes hold one
/// connection per d.node, so this is far above a cluster's c.node count; it bounds threads and
/// sockets, not clients.
pub const CONNECTIONS_MAX: usize = 512;
/// How long an idle acceptor sleeps between polls of the listening socket.
const ACCEPT_POLL_INTERVAL: Duration = Duration::from_millis(20);
/// Pause after an accept error (out of file descriptors...), so it does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(200);
/// Bound on telling a refused client why (it may not read).
const REFUSAL_WRITE_TIMEOUT: Duration = Duration::from_millis(1_000);

/// The running listener and its connections.
#[derive(Debug)]
pub(crate) struct Server {
    acceptor: Option<JoinHandle<()>>,
    conns: Arc<Mutex<HashMap<u64, Served>>>,
}

#[derive(Debug)]
struct Served {
    conn: Arc<ServerConn>,
    thread: JoinHandle<()>,
}

impl Server {
    /// Start accepting on `listener` until `stop`.
    pub(crate) fn start(
        listener: TcpListener,
        cx: Arc<ServeContext>,
        stop: Arc<Stop>,
    ) -> Result<Server, DnodeError> {
        let addr = listener.local_addr().map_err(|e| DnodeError::Bind {
            addr: "0.0.0.0:0".parse().expect("a socket address"),
            source: e,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|e| DnodeError::Bind { addr, source: e })?;
        let conns = Arc::new(Mutex::new(HashMap::new()));
        let table = conns.clone();
        let acceptor = std::thread::Builder::new()
            .name("weft-dnode-accept".into())
            .spawn(move || accept_loop(&listener, &cx, &table, &stop))
            .map_err(|e| DnodeError::Thread {
                name: "acceptor",
                source: e,
            })?;
        Ok(Server {
            acceptor: Some(acceptor),
            conns,
        })
    }

    /// After the stop signal: wait for the acceptor (the listening socket closes), then close
    /// every connection and wait for its thread.
    pub(crate) fn shutdown(&mut self) {
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        let served: Vec<Served> = self.conns.lock().drain().map(|(_, s)| s).collect();
        for s in &served {
            s.conn.close();
        }
        for s in served {
            let _ = s.thread.join();
        }
    }
}

fn accept_loop(
    listener: &TcpListener,
    cx: &Arc<ServeContext>,
    conns: &Mutex<HashMap<u64, Served>>,
    stop: &Stop,
) {
    let mut next_id = 1u64;
    while !stop.is_stopped() {
        match listener.accept() {
            Ok((stream, peer)) => {
                Counters::add(&cx.counters.connections_accepted, 1);
                let id = next_id;
                next_id += 1;
                if let Err(e) = admit(stream, peer, id, cx, conns) {
                    tracing::warn!(peer = %peer, error = %e, "cannot serve connection");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                reap(conns);
                if stop.wait(ACCEPT_POLL_INTERVAL) {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                if stop.wait(ACCEPT_ERROR_PAUSE) {
                    break;
                }
            }
        }
    }
    tracing::debug!("acceptor stops");
}

/// Serve a new connection on its own thread, or refuse it when at the limit.
fn admit(
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    cx: &Arc<ServeContext>,
    conns: &Mutex<HashMap<u64, Served>>,
) -> std::io::Result<()> {
    // Accepted sockets do not inherit O_NONBLOCK on Linux; make sure on every platform.
    stream.set_nonblocking(false)?;
    reap(conns); // count only live connections against the limit
    let mut table = conns.lock();
    if table.len() >= cx.connections_max {
        drop(table);
        Counters::add(&cx.counters.connections_refused, 1);
        tracing::warn!(peer = %peer, limit = cx.connections_max, "connection refused: too many connections");
        refuse_busy(stream, cx.connections_max);
        return Ok(());
    }
    let (conn, reader) = ServerConn::new(id, peer, stream)?;
    let for_thread = conn.clone();
    let cx = cx.clone();
    Counters::add(&cx.counters.connections_open, 1);
    let counters = cx.counters.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("weft-dnode-c{id}"))
        .spawn(move || {
            for_thread.serve(reader, &cx);
            cx.counters
                .connections_open
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
        });
    match spawned {
        Ok(thread) => {
            table.insert(id, Served { conn, thread });
            Ok(())
        }
        Err(e) => {
            counters
                .connections_open
                .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            conn.close();
            Err(e)
        }
    }
}

/// Tell a client over the limit why, as the answer to its `Hello` (request id 0, which is what
/// our client uses; others see an unsolicited error and a close), then close.
fn refuse_busy(mut stream: TcpStream, limit: usize) {
    let _ = stream.set_write_timeout(Some(REFUSAL_WRITE_TIMEOUT));
    let mut frame = Vec::new();
    let refusal = Response::error(
        ErrorCode::Unavailable,
        format!("d.node serves {limit} connections already"),
    );
    if refusal.encode(0, &mut frame).is_ok() {
        let _ = write_all_parts(&mut stream, &[&frame]);
    }
}

/// Join the threads of connections that ended.
fn reap(conns: &Mutex<HashMap<u64, Served>>) {
    let finished: Vec<Served> = {
        let mut table = conns.lock();
        let ids: Vec<u64> = table
            .iter()
            .filter(|(_, s)| s.thread.is_finished())
            .map(|(id, _)| *id)
            .collect();
        ids.iter().filter_map(|id| table.remove(id)).collect()
    };
    for s in finished {
        let _ = s.thread.join();
    }
}
