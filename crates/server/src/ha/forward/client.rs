//! The forwarder's side of one forwarded export: a TCP connection to the owner's forward
//! listener that carries one open export and pipelines requests on it. Callers (the front
//! ends' blocking pool) send under a lock and wait for their own reply; a reader thread hands
//! each reply to its caller by id. When the connection fails every waiting caller learns it,
//! and [`super::routed`] decides where to send the request again.

use std::collections::HashMap;
use std::io::{BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::wire::{self, Answer, Op, RequestHead};
use crate::backend::{ExportInfo, ExportIoError};

/// How long connecting and the handshake may take before the owner counts as unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the owner may take to answer the handshake (it holds connections while its engine
/// recovers).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a forwarded request got no answer from the owner.
#[derive(Debug)]
pub enum Lost {
    /// The connection failed or was closed; the request may or may not have run.
    Connection(String),
    /// `give_up` said so while waiting (the owner changed, or this c.node owns now).
    GaveUp,
}

/// How the owner answered an open.
#[derive(Debug)]
pub enum OpenFailed {
    /// It refused (unknown export, wrong secret): `why`.
    Refused(String),
    /// It could not be reached or did not answer.
    Unreachable(String),
}

/// One open export on the owner.
pub struct ForwardConn {
    writer: Mutex<TcpStream>,
    waiting: Arc<Mutex<HashMap<u64, Waiter>>>,
    next_id: AtomicU64,
    dead: Arc<AtomicBool>,
    pub info: ExportInfo,
    /// The owner's c.node id, as it said in its welcome.
    pub owner: String,
}

struct Waiter {
    op: Op,
    tx: SyncSender<Result<Result<Answer, ExportIoError>, String>>,
}

impl std::fmt::Debug for ForwardConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwardConn")
            .field("owner", &self.owner)
            .field("export", &self.info.name)
            .finish_non_exhaustive()
    }
}

impl ForwardConn {
    /// Connect to the owner's forward listener at `addr` and open `open.export`.
    pub fn open(
        addr: &str,
        hello: &wire::Hello,
        open: &wire::Open,
    ) -> Result<ForwardConn, OpenFailed> {
        let unreachable = |e: std::io::Error| OpenFailed::Unreachable(format!("{addr}: {e}"));
        let sock: std::net::SocketAddr = addr
            .parse()
            .map_err(|e| OpenFailed::Unreachable(format!("{addr}: {e}")))?;
        let stream = TcpStream::connect_timeout(&sock, CONNECT_TIMEOUT).map_err(unreachable)?;
        stream.set_nodelay(true).map_err(unreachable)?;
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(unreachable)?;
        let mut w = stream.try_clone().map_err(unreachable)?;
        w.write_all(&wire::frame(wire::HELLO, &json(hello)))
            .map_err(unreachable)?;
        let mut r = BufReader::new(stream.try_clone().map_err(unreachable)?);
        let (kind, body) = crate::ha::wire::read_frame(&mut r).map_err(unreachable)?;
        match kind {
            wire::WELCOME => {}
            wire::REFUSED => {
                return Err(OpenFailed::Refused(
                    String::from_utf8_lossy(&body).into_owned(),
                ))
            }
            k => {
                return Err(OpenFailed::Unreachable(format!(
                    "{addr}: frame {k} before WELCOME"
                )))
            }
        }
        let owner = String::from_utf8_lossy(&body).into_owned();
        w.write_all(&wire::frame(wire::OPEN, &json(open)))
            .map_err(unreachable)?;
        let (kind, body) = crate::ha::wire::read_frame(&mut r).map_err(unreachable)?;
        let info: ExportInfo = match kind {
            wire::OPENED => serde_json::from_slice::<wire::Opened>(&body)
                .map_err(|e| OpenFailed::Unreachable(format!("{addr}: {e}")))?
                .into(),
            wire::REFUSED => {
                return Err(OpenFailed::Refused(
                    String::from_utf8_lossy(&body).into_owned(),
                ))
            }
            k => {
                return Err(OpenFailed::Unreachable(format!(
                    "{addr}: frame {k} before OPENED"
                )))
            }
        };
        // Requests wait as long as the owner takes; the caller's give_up bounds them.
        stream.set_read_timeout(None).map_err(unreachable)?;
        let waiting: Arc<Mutex<HashMap<u64, Waiter>>> = Arc::default();
        let dead = Arc::new(AtomicBool::new(false));
        {
            let (waiting, dead) = (Arc::clone(&waiting), Arc::clone(&dead));
            std::thread::Builder::new()
                .name("weft-forward-rx".into())
                .spawn(move || read_replies(r, &waiting, &dead))
                .map_err(unreachable)?;
        }
        Ok(ForwardConn {
            writer: Mutex::new(stream),
            waiting,
            next_id: AtomicU64::new(1),
            dead,
            info,
            owner,
        })
    }

    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// Send one request and wait for its answer. `give_up` is asked every 200 ms while
    /// waiting; when it says so the request is abandoned (its answer, if any, is dropped).
    pub fn call(
        &self,
        op: Op,
        flags: u8,
        offset_bytes: u64,
        length_bytes: u64,
        data: &[u8],
        give_up: &dyn Fn() -> bool,
    ) -> Result<Result<Answer, ExportIoError>, Lost> {
        if self.is_dead() {
            return Err(Lost::Connection("connection closed".into()));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        self.waiting.lock().insert(id, Waiter { op, tx });
        let frame = wire::request_frame(
            RequestHead {
                id,
                op,
                flags,
                offset_bytes,
                length_bytes,
            },
            data,
        );
        if let Err(e) = self.writer.lock().write_all(&frame) {
            self.waiting.lock().remove(&id);
            self.kill();
            return Err(Lost::Connection(e.to_string()));
        }
        loop {
            match rx.recv_timeout(Duration::from_millis(200)) {
                Ok(Ok(answer)) => return Ok(answer),
                Ok(Err(why)) => return Err(Lost::Connection(why)),
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(Lost::Connection("connection closed".into()))
                }
                Err(RecvTimeoutError::Timeout) if give_up() => {
                    self.waiting.lock().remove(&id);
                    return Err(Lost::GaveUp);
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
        }
    }

    /// Close the connection: every waiting request learns it; the owner drops the open.
    pub fn kill(&self) {
        self.dead.store(true, Ordering::Release);
        let _ = self.writer.lock().shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for ForwardConn {
    fn drop(&mut self) {
        self.kill();
    }
}

fn read_replies(
    mut r: BufReader<TcpStream>,
    waiting: &Mutex<HashMap<u64, Waiter>>,
    dead: &AtomicBool,
) {
    let why = loop {
        let (kind, body) = match crate::ha::wire::read_frame(&mut r) {
            Ok(f) => f,
            Err(e) => break e.to_string(),
        };
        if kind != wire::REPLY {
            break format!("unexpected frame {kind} from the owner");
        }
        let Some(id) = body
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
        else {
            break "short reply from the owner".to_string();
        };
        // A reply to a request given up on: nobody waits for it.
        let Some(w) = waiting.lock().remove(&id) else {
            continue;
        };
        match wire::parse_reply(body, |_| Some(w.op)) {
            Ok((_, answer)) => {
                let _ = w.tx.send(Ok(answer));
            }
            Err(e) => {
                let _ = w.tx.send(Err(e.to_string()));
                break e.to_string();
            }
        }
    };
    dead.store(true, Ordering::Release);
    let _ = r.get_ref().shutdown(std::net::Shutdown::Both);
    for (_, w) in waiting.lock().drain() {
        let _ = w.tx.send(Err(why.clone()));
    }
}

/// A handshake frame's JSON body.
fn json(v: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(v).expect("handshake frames serialise")
}
