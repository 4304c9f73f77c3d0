//! A TCP proxy in the test process between the c.node and one d.node, to inject network faults
//! on that one path: extra latency, a partition (bytes held, neither delivered nor refused,
//! until it heals, as TCP retransmits would) and connection resets.
//!
//! Why not `tc netem`: the kernels we run on (CI's and the developers' VMs) have no `netem`
//! or `prio` qdisc, and a qdisc on `lo` is global state that a killed test would leave behind.
//! The d.node advertises the proxy's address (`--advertise`), so the c.node reaches it only
//! through the proxy; the d.node's own traffic (etcd) is untouched. Threads end when the proxy
//! is dropped.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Bytes read at once.
const BUF_BYTES: usize = 64 << 10;
/// Buffers queued per direction before the reader blocks (TCP backpressure): 16 MiB.
const QUEUE_BUFS_MAX: usize = 256;
/// How often blocked threads look at the mode and the stop flag.
const POLL: Duration = Duration::from_millis(20);

/// What the proxy does to the bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMode {
    Pass,
    /// Each piece is delivered this long after it arrived.
    Delay(Duration),
    /// Nothing is delivered until the mode changes (then all of it, in order).
    Partition,
}

struct State {
    mode: Mutex<NetMode>,
    stop: AtomicBool,
    /// Every open socket (both sides), to reset them all.
    socks: Mutex<Vec<TcpStream>>,
}

pub struct Proxy {
    pub listen: SocketAddr,
    pub target: SocketAddr,
    state: Arc<State>,
    acceptor: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listens on 127.0.0.1:`port` and forwards to `target`.
    pub fn start(port: u16, target: SocketAddr) -> Proxy {
        let listener = TcpListener::bind(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("proxy bind 127.0.0.1:{port}: {e}"));
        listener
            .set_nonblocking(true)
            .expect("nonblocking listener");
        let listen = listener.local_addr().expect("proxy address");
        let state = Arc::new(State {
            mode: Mutex::new(NetMode::Pass),
            stop: AtomicBool::new(false),
            socks: Mutex::new(Vec::new()),
        });
        let st = state.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(listener, target, st))
            .expect("spawn proxy");
        Proxy {
            listen,
            target,
            state,
            acceptor: Some(acceptor),
        }
    }

    pub fn set_mode(&self, mode: NetMode) {
        *self.state.mode.lock().unwrap() = mode;
    }

    /// Resets every connection through the proxy (both sides see them closed).
    pub fn reset_all(&self) -> usize {
        let socks: Vec<TcpStream> = std::mem::take(&mut *self.state.socks.lock().unwrap());
        for s in &socks {
            let _ = s.shutdown(Shutdown::Both);
        }
        socks.len() / 2
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        self.set_mode(NetMode::Pass);
        self.reset_all();
        if let Some(h) = self.acceptor.take() {
            let _ = h.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: SocketAddr, st: Arc<State>) {
    while !st.stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(5)) else {
                    // The d.node is down: refuse, as it would.
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                {
                    let mut socks = st.socks.lock().unwrap();
                    socks.push(client.try_clone().expect("clone socket"));
                    socks.push(server.try_clone().expect("clone socket"));
                }
                pipe(&client, &server, st.clone());
                pipe(&server, &client, st.clone());
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => std::thread::sleep(POLL),
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

/// One direction: a reader thread stamps each piece with its arrival time, a writer thread
/// delivers it when the mode lets it.
fn pipe(from: &TcpStream, to: &TcpStream, st: Arc<State>) {
    let mut from = from.try_clone().expect("clone socket");
    let to = to.try_clone().expect("clone socket");
    let (tx, rx) = sync_channel::<(Instant, Vec<u8>)>(QUEUE_BUFS_MAX);
    let _ = from.set_read_timeout(Some(POLL * 10));
    let st2 = st.clone();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; BUF_BYTES];
        while !st2.stop.load(Ordering::SeqCst) {
            match from.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    if tx.send((Instant::now(), buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => break,
            }
        }
        // Dropping tx ends the writer once it has delivered what is queued.
    });
    std::thread::spawn(move || deliver(rx, to, st));
}

fn deliver(rx: Receiver<(Instant, Vec<u8>)>, mut to: TcpStream, st: Arc<State>) {
    loop {
        let (at, piece) = match rx.recv_timeout(POLL * 10) {
            Ok(p) => p,
            Err(RecvTimeoutError::Timeout) => {
                if st.stop.load(Ordering::SeqCst) {
                    break;
                }
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        loop {
            if st.stop.load(Ordering::SeqCst) {
                let _ = to.shutdown(Shutdown::Both);
                return;
            }
            let mode = *st.mode.lock().unwrap();
            match mode {
                NetMode::Pass => break,
                NetMode::Delay(d) => {
                    let due = at + d;
                    let now = Instant::now();
                    if now >= due {
                        break;
                    }
                    std::thread::sleep((due - now).min(POLL));
                }
                NetMode::Partition => std::thread::sleep(POLL),
            }
        }
        if to.write_all(&piece).is_err() {
            break;
        }
    }
    // The other side sees the end of this direction.
    let _ = to.shutdown(Shutdown::Write);
}
