//! The client against a scripted fake d.node on loopback that speaks the real protocol: answers
//! out of order, paged listings, typed errors, and d.nodes that go silent (the caller pays one
//! timeout, then fails fast).

use std::io::BufReader;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use weft_chunk::{ChunkError, ChunkKey, ChunkMeta, ChunkStore};
use weft_dnode_client::frame_io::{read_frame, write_all_parts};
use weft_dnode_client::{ClientOptions, RemoteChunkStore};
use weft_proto::{answer_hello, ChunkInfo, ErrorCode, HelloOutcome, Request, Response};

const CLUSTER: &str = "c1";
const NODE: &str = "dn-fake";
/// A failing call once the link is known bad: no network wait at all.
const FAIL_FAST_MAX: Duration = Duration::from_millis(100);

/// What the fake does with each request of a connection: the (request id, response) pairs to
/// send now (none: hold or ignore it).
type Script = Box<dyn FnMut(u64, Request) -> Vec<(u64, Response)> + Send>;

/// A fake d.node: accepts connections, answers `Hello`, then follows a fresh script per
/// connection. Stops (and closes its listener) on drop.
struct FakeDnode {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeDnode {
    fn start(script: impl Fn() -> Script + Send + 'static) -> FakeDnode {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let thread = std::thread::spawn(move || {
            while !stopping.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let s = script();
                        std::thread::spawn(move || serve(stream, s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FakeDnode {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakeDnode {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(stream: TcpStream, mut script: Script) {
    stream.set_nonblocking(false).expect("blocking");
    let mut writer = stream.try_clone().expect("clone");
    let mut reader = BufReader::new(stream);
    let mut send = |id: u64, r: &Response| {
        let mut out = Vec::new();
        r.encode(id, &mut out).expect("encode");
        write_all_parts(&mut writer, &[&out]).is_ok()
    };
    let Ok(Some(first)) = read_frame(&mut reader) else {
        return;
    };
    let id = first.request_id;
    let Ok(hello) = Request::decode(first) else {
        return;
    };
    match answer_hello(&hello, NODE, CLUSTER) {
        HelloOutcome::Accept(ok) => {
            send(id, &ok);
        }
        HelloOutcome::Refuse(no) => {
            send(id, &no);
            return;
        }
    }
    while let Ok(Some(frame)) = read_frame(&mut reader) {
        let id = frame.request_id;
        let Ok(request) = Request::decode(frame) else {
            return;
        };
        for (id, response) in script(id, request) {
            if !send(id, &response) {
                return;
            }
        }
    }
}

fn options() -> ClientOptions {
    ClientOptions {
        connect_timeout: Duration::from_millis(300),
        request_timeout: Duration::from_millis(300),
        backoff_initial: Duration::from_millis(500),
        backoff_max: Duration::from_millis(500),
        ..ClientOptions::default()
    }
}

fn client(addr: SocketAddr) -> RemoteChunkStore {
    RemoteChunkStore::new(NODE.into(), addr, CLUSTER.into(), options())
}

fn info(segment: u64) -> ChunkInfo {
    ChunkInfo {
        key: weft_proto::ChunkKey {
            family: 1,
            segment,
            index: 0,
        },
        len_bytes: 1000,
        epoch: 0,
        codec_id: 0,
        data_chunks: 1,
        parity_chunks: 0,
        stripe_len_bytes: 1000,
    }
}

#[test]
fn answers_in_any_order_reach_the_caller_that_asked() {
    const CALLERS: u64 = 8;
    // Hold reads until all callers asked, then answer them last to first.
    let fake = FakeDnode::start(|| {
        let mut held = Vec::new();
        Box::new(move |id, request| {
            if let Request::ReadChunk { key, len_bytes, .. } = request {
                let bytes = vec![key.segment as u8; len_bytes as usize];
                held.push((id, Response::Data { bytes }));
            }
            if held.len() as u64 == CALLERS {
                held.drain(..).rev().collect()
            } else {
                Vec::new()
            }
        })
    });
    let store = Arc::new(client(fake.addr));
    let callers: Vec<_> = (0..CALLERS)
        .map(|segment| {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 1000 + segment as usize];
                store
                    .read(&ChunkKey::new(1, segment, 0), 0, &mut buf)
                    .expect("read");
                assert!(buf.iter().all(|&b| b == segment as u8));
            })
        })
        .collect();
    for c in callers {
        c.join().expect("caller");
    }
}

#[test]
fn listings_follow_every_page() {
    let fake = FakeDnode::start(|| {
        Box::new(|id, request| match request {
            Request::ListChunks { start_after, .. } => {
                let from = start_after.map_or(0, |k| k.segment + 1);
                let chunks: Vec<ChunkInfo> = (from..10).take(3).map(info).collect();
                vec![(
                    id,
                    Response::ChunkList {
                        more: from + 3 < 10,
                        chunks,
                    },
                )]
            }
            _ => vec![(id, Response::error(ErrorCode::BadRequest, "unexpected"))],
        })
    });
    let store = client(fake.addr);
    let segments: Vec<u64> = store
        .list(1)
        .expect("list")
        .iter()
        .map(|c| c.meta.key.segment)
        .collect();
    assert_eq!(segments, (0..10).collect::<Vec<_>>());
    assert_eq!(
        store.info(&ChunkKey::new(1, 4, 0)).expect("info").len_bytes,
        1000
    );
}

#[test]
fn error_codes_come_back_as_typed_chunk_errors() {
    let fake = FakeDnode::start(|| {
        Box::new(|id, request| {
            let response = match request {
                Request::PutChunk { .. } => Response::error(ErrorCode::NoSpace, "full"),
                Request::Fence { .. } => {
                    Response::error(ErrorCode::Fenced { current_epoch: 9 }, "fenced")
                }
                Request::ReadChunk { key, .. } if key.segment == 1 => {
                    Response::error(ErrorCode::Corrupt, "page checksum mismatch")
                }
                Request::ReadChunk { .. } => Response::error(ErrorCode::BadRequest, "past the end"),
                Request::ListChunks { .. } => Response::ChunkList {
                    chunks: vec![info(2)],
                    more: false,
                },
                _ => Response::error(ErrorCode::Io, "eio"),
            };
            vec![(id, response)]
        })
    });
    let store = client(fake.addr);
    let meta = ChunkMeta {
        key: ChunkKey::new(1, 1, 0),
        epoch: 3,
        codec_id: 0,
        data_chunks: 1,
        parity_chunks: 0,
        stripe_len_bytes: 10,
    };
    assert!(store.put(&meta, &[0u8; 10]).unwrap_err().is_no_space());
    assert!(matches!(
        store.fence(1, 3),
        Err(ChunkError::Fenced {
            family: 1,
            epoch: 3,
            current: 9
        })
    ));
    let mut buf = [0u8; 10];
    assert!(matches!(
        store.read(&ChunkKey::new(1, 1, 0), 4096, &mut buf),
        Err(ChunkError::Corrupt { .. })
    ));
    assert!(matches!(
        store.read(&ChunkKey::new(1, 2, 0), 995, &mut buf),
        Err(ChunkError::OutOfRange {
            offset_bytes: 995,
            length_bytes: 10,
            len_bytes: 1000,
            ..
        })
    ));
    assert!(matches!(store.families(), Err(ChunkError::Io { .. })));
}

#[test]
fn a_silent_dnode_costs_one_timeout_then_calls_fail_fast() {
    // Handshakes, then never answers anything.
    let fake = FakeDnode::start(|| Box::new(|_, _| Vec::new()));
    let store = client(fake.addr);
    let started = Instant::now();
    assert!(matches!(store.ping(), Err(ChunkError::Unavailable { .. })));
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "{took:?}"
    );
    for _ in 0..3 {
        let started = Instant::now();
        assert!(matches!(store.ping(), Err(ChunkError::Unavailable { .. })));
        assert!(started.elapsed() < FAIL_FAST_MAX, "{:?}", started.elapsed());
    }
}

#[test]
fn a_dnode_that_never_answers_hello_costs_one_connect_timeout() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    // Accepts (the kernel does, via the backlog) and never says a word.
    let store = client(addr);
    let started = Instant::now();
    assert!(matches!(store.ping(), Err(ChunkError::Unavailable { .. })));
    let took = started.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    let started = Instant::now();
    assert!(matches!(store.ping(), Err(ChunkError::Unavailable { .. })));
    assert!(started.elapsed() < FAIL_FAST_MAX);
    drop(listener);
}

#[test]
fn nobody_listening_fails_fast() {
    let addr = {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr")
    };
    let store = client(addr);
    for _ in 0..3 {
        let started = Instant::now();
        assert!(matches!(store.ping(), Err(ChunkError::Unavailable { .. })));
        assert!(started.elapsed() < Duration::from_millis(500));
    }
    assert!(!store.is_connected());
}
