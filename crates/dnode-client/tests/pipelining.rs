//! Many callers pipelining reads on one connection to a fake d.node on loopback: requests sent
//! together (combined into few writes by the outbox) are all parsed and answered, answers in
//! any order reach the caller that asked, and a connection that drops in the middle of an
//! answer makes its callers retry on a new connection or fail. Never a wrong buffer: every
//! answer's bytes are a pattern of the key and offset asked, checked by the caller.

use std::io::{BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use weft_chunk::{ChunkError, ChunkKey, ChunkStore};
use weft_dnode_client::frame_io::{read_frame, write_all_parts};
use weft_dnode_client::{ClientOptions, RemoteChunkStore};
use weft_proto::{answer_hello, HelloOutcome, Request, Response};

const CLUSTER: &str = "c1";
const NODE: &str = "dn-fake";

/// What the fake does on one connection once `held` reads are waiting.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Answer them, last asked first.
    AnswerReversed,
    /// Write half of the first answer, then close the connection.
    CutMidAnswer,
}

/// The bytes a read of `key` at `offset` must return: a pattern no other read shares.
fn pattern(segment: u64, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (segment.wrapping_mul(131) ^ (offset + i).wrapping_mul(7)) as u8)
        .collect()
}

/// A fake d.node: connection `n` (from 0) behaves as `behaviour(n)`, holding reads until
/// `batch` are waiting (or the client stops sending for 50 ms).
struct Fake {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    connections: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Fake {
    fn start(batch: usize, behaviour: fn(u64) -> Behaviour) -> Fake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(AtomicU64::new(0));
        let (stopping, counted) = (stop.clone(), connections.clone());
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let n = counted.fetch_add(1, Ordering::Relaxed);
                        std::thread::spawn(move || serve(stream, batch, behaviour(n)));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Fake {
            addr,
            stop,
            connections,
            thread: Some(thread),
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, batch: usize, behaviour: Behaviour) {
    stream.set_nonblocking(false).expect("blocking");
    stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .expect("timeout");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let encode = |id: u64, r: &Response| {
        let mut out = Vec::new();
        r.encode(id, &mut out).expect("encode");
        out
    };
    let first = loop {
        match read_frame(&mut reader) {
            Ok(Some(f)) => break f,
            Err(weft_dnode_client::frame_io::FrameReadError::Idle) => continue,
            _ => return,
        }
    };
    let id = first.request_id;
    let Ok(hello) = Request::decode(first) else {
        return;
    };
    let HelloOutcome::Accept(ok) = answer_hello(&hello, NODE, CLUSTER) else {
        return;
    };
    if write_all_parts(&mut writer, &[&encode(id, &ok)]).is_err() {
        return;
    }
    let mut held: Vec<(u64, Response)> = Vec::new();
    loop {
        let idle = match read_frame(&mut reader) {
            Ok(Some(frame)) => {
                let id = frame.request_id;
                let Ok(Request::ReadChunk {
                    key,
                    offset_bytes,
                    len_bytes,
                }) = Request::decode(frame)
                else {
                    return;
                };
                let bytes = pattern(key.segment, offset_bytes, len_bytes as usize);
                held.push((id, Response::Data { bytes }));
                false
            }
            Err(weft_dnode_client::frame_io::FrameReadError::Idle) => true,
            _ => return,
        };
        if held.is_empty() || (held.len() < batch && !idle) {
            continue;
        }
        match behaviour {
            Behaviour::AnswerReversed => {
                let mut out = Vec::new();
                for (id, r) in held.drain(..).rev() {
                    out.extend(encode(id, &r));
                }
                if write_all_parts(&mut writer, &[&out]).is_err() {
                    return;
                }
            }
            Behaviour::CutMidAnswer => {
                let (id, r) = &held[0];
                let whole = encode(*id, r);
                let _ = writer.write_all(&whole[..whole.len() / 2]);
                let _ = writer.flush();
                let _ = writer.shutdown(std::net::Shutdown::Both);
                return;
            }
        }
    }
}

fn client(addr: SocketAddr) -> Arc<RemoteChunkStore> {
    let options = ClientOptions {
        connect_timeout: Duration::from_millis(2000),
        request_timeout: Duration::from_millis(5000),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(50),
        ..ClientOptions::default()
    };
    Arc::new(RemoteChunkStore::new(
        NODE.into(),
        addr,
        CLUSTER.into(),
        options,
    ))
}

/// `callers` threads each read `reads` windows; returns how many reads failed. Panics on a
/// read that succeeded with bytes that are not its own.
fn read_concurrently(store: &Arc<RemoteChunkStore>, callers: u64, reads: u64) -> u64 {
    let threads: Vec<_> = (0..callers)
        .map(|c| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut failed = 0;
                for r in 0..reads {
                    let segment = c * 1000 + r;
                    let offset = (r * 4096) % 65536;
                    let len = 4096 + (r as usize % 3) * 512;
                    let mut buf = vec![0u8; len];
                    match store.read(&ChunkKey::new(1, segment, 0), offset, &mut buf) {
                        Ok(()) => assert_eq!(
                            buf,
                            pattern(segment, offset, len),
                            "caller {c} read {r}: somebody else's bytes"
                        ),
                        Err(ChunkError::Unavailable { .. }) => failed += 1,
                        Err(e) => panic!("unexpected error {e}"),
                    }
                }
                failed
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("caller")).sum()
}

#[test]
fn many_callers_pipelined_on_one_connection_each_get_their_own_bytes() {
    let fake = Fake::start(16, |_| Behaviour::AnswerReversed);
    let store = client(fake.addr);
    assert_eq!(read_concurrently(&store, 16, 100), 0);
    assert_eq!(
        fake.connections.load(Ordering::Relaxed),
        1,
        "everything on one connection"
    );
}

#[test]
fn a_connection_cut_in_the_middle_of_an_answer_is_retried_on_a_new_one() {
    // The first connection breaks half-way through an answer while 8 reads wait on it; the
    // next ones answer.
    let fake = Fake::start(8, |n| {
        if n == 0 {
            Behaviour::CutMidAnswer
        } else {
            Behaviour::AnswerReversed
        }
    });
    let store = client(fake.addr);
    assert_eq!(read_concurrently(&store, 8, 20), 0, "retried, not failed");
    assert!(fake.connections.load(Ordering::Relaxed) >= 2);
}

#[test]
fn a_dnode_that_always_cuts_its_answers_gives_errors_never_bytes() {
    let fake = Fake::start(4, |_| Behaviour::CutMidAnswer);
    let store = client(fake.addr);
    let failed = read_concurrently(&store, 4, 5);
    assert_eq!(
        failed,
        4 * 5,
        "every read fails (no answer ever arrives whole)"
    );
}
