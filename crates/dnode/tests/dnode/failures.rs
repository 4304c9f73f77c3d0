//! Failures: a d.node that goes away and comes back on the same address, clients that send
//! garbage or belong elsewhere. Callers never stall, bad connections never hurt good ones.

use std::io::{BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use weft_chunk::{ChunkError, ChunkKey, ChunkStore};
use weft_dnode::Dnode;
use weft_dnode_client::frame_io::read_frame;
use weft_dnode_client::RemoteChunkStore;
use weft_proto::{hello, ErrorCode, FrameHeader, MessageKind, Request, Response};

use crate::support::{
    bounded, client, client_options, config, embedded_meta, eventually, meta, pattern, start, Dirs,
    CLUSTER,
};

/// What a failing call may cost once the d.node is gone (connect timeout is 1 s in tests).
const FAIL_FAST_MAX: Duration = Duration::from_millis(3_000);

#[test]
fn a_dead_dnode_fails_calls_fast_and_a_restarted_one_is_used_again() {
    bounded(Duration::from_secs(60), || {
        let dirs = Dirs::new(1);
        let dnode = start(&dirs);
        let addr = dnode.local_addr();
        let store = client(&dnode);
        let key = ChunkKey::new(4, 1, 0);
        store
            .put(&meta(4, 1, 0, 0, 5000), &pattern(1, 5000))
            .expect("put");
        dnode.shutdown();

        let mut buf = vec![0u8; 5000];
        for attempt in 0..5 {
            let started = Instant::now();
            match store.read(&key, 0, &mut buf) {
                Err(ChunkError::Unavailable { .. }) => {}
                other => panic!("attempt {attempt}: {other:?}"),
            }
            let took = started.elapsed();
            assert!(took < FAIL_FAST_MAX, "attempt {attempt} took {took:?}");
        }
        assert!(!store.is_connected());

        // Same data dirs (so the same node id) and the same port.
        let dnode = Dnode::start(config(&dirs, addr), embedded_meta()).expect("restart");
        assert_eq!(dnode.local_addr(), addr);
        let took = eventually(Duration::from_secs(10), "client reconnects", || {
            store.ping().is_ok()
        });
        assert!(
            took < Duration::from_secs(2),
            "backoff is capped at 400 ms: {took:?}"
        );
        store.read(&key, 0, &mut buf).expect("read after restart");
        assert_eq!(buf, pattern(1, 5000));
        dnode.shutdown();
    });
}

#[test]
fn garbage_closes_only_its_own_connection() {
    bounded(Duration::from_secs(60), || {
        let dirs = Dirs::new(1);
        let dnode = start(&dirs);
        let addr = dnode.local_addr();
        let good = client(&dnode);
        good.put(&meta(5, 1, 0, 0, 100), &[3u8; 100]).expect("put");

        let mut hello_frame = Vec::new();
        hello(CLUSTER, "raw")
            .encode(0, &mut hello_frame)
            .expect("encode");
        let mut wrong_direction = Vec::new();
        Response::Pong
            .encode(9, &mut wrong_direction)
            .expect("encode");
        let random: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let garbage: Vec<(&str, Vec<u8>)> = vec![
            (
                "http",
                b"GET / HTTP/1.1\r\nHost: dnode.example\r\n\r\n".to_vec(),
            ),
            ("random", random.clone()),
            ("hello then random", [hello_frame.clone(), random].concat()),
            (
                "a response as a request",
                [hello_frame.clone(), wrong_direction].concat(),
            ),
        ];
        for (what, bytes) in &garbage {
            let mut raw = TcpStream::connect(addr).expect("connect");
            raw.set_read_timeout(Some(Duration::from_secs(5)))
                .expect("timeout");
            raw.write_all(bytes).expect("write");
            let mut sink = Vec::new();
            // Closed by the d.node: EOF or a reset, never our read timeout.
            if let Err(e) = raw.read_to_end(&mut sink) {
                assert!(
                    !matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ),
                    "{what}: connection left open"
                );
            }
            good.ping().unwrap_or_else(|e| panic!("after {what}: {e}"));
        }
        assert!(dnode.stats().connections_bad_input >= garbage.len() as u64);

        // An oversize frame behind a good hello: refused by request id, before any payload.
        let mut raw = TcpStream::connect(addr).expect("connect");
        raw.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        raw.write_all(&hello_frame).expect("hello");
        let mut reader = BufReader::new(raw.try_clone().expect("clone"));
        let ok = read_frame(&mut reader).expect("read").expect("frame");
        assert!(matches!(Response::decode(ok), Ok(Response::HelloOk { .. })));
        let oversize = FrameHeader {
            kind: MessageKind::PutChunk,
            request_id: 42,
            payload_len_bytes: u32::MAX,
            payload_crc32c: 0,
        };
        raw.write_all(&oversize.encode()).expect("header");
        let refusal = read_frame(&mut reader).expect("read").expect("frame");
        assert_eq!(refusal.request_id, 42);
        assert!(matches!(
            Response::decode(refusal),
            Ok(Response::Error {
                code: ErrorCode::BadRequest,
                ..
            })
        ));
        assert!(read_frame(&mut reader).expect("eof").is_none());

        let mut buf = [0u8; 100];
        good.read(&ChunkKey::new(5, 1, 0), 0, &mut buf)
            .expect("good client unaffected");
        assert_eq!(buf, [3u8; 100]);
        dnode.shutdown();
    });
}

#[test]
fn clients_of_another_cluster_or_expecting_another_node_are_refused() {
    bounded(Duration::from_secs(30), || {
        let dirs = Dirs::new(1);
        let dnode = start(&dirs);
        let other_cluster = RemoteChunkStore::new(
            dnode.node_id().to_owned(),
            dnode.local_addr(),
            "another-cluster".into(),
            client_options(),
        );
        match other_cluster.ping() {
            Err(ChunkError::Unavailable { detail, .. }) => {
                assert!(detail.contains("WrongCluster"), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        let other_node = RemoteChunkStore::new(
            "dn-someone-else".into(),
            dnode.local_addr(),
            CLUSTER.into(),
            client_options(),
        );
        match other_node.ping() {
            Err(ChunkError::Unavailable { detail, .. }) => {
                assert!(detail.contains(dnode.node_id()), "{detail}")
            }
            other => panic!("{other:?}"),
        }
        // A request before the hello is refused too.
        let mut raw = TcpStream::connect(dnode.local_addr()).expect("connect");
        raw.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut ping = Vec::new();
        Request::Ping.encode(3, &mut ping).expect("encode");
        raw.write_all(&ping).expect("write");
        let mut reader = BufReader::new(raw);
        let refusal = read_frame(&mut reader).expect("read").expect("frame");
        assert!(matches!(
            Response::decode(refusal),
            Ok(Response::Error {
                code: ErrorCode::BadRequest,
                ..
            })
        ));
        assert!(read_frame(&mut reader).expect("eof").is_none());
        assert!(dnode.stats().connections_refused >= 2);
        dnode.shutdown();
    });
}

#[test]
fn connections_over_the_limit_are_refused_until_one_leaves() {
    bounded(Duration::from_secs(30), || {
        let dirs = Dirs::new(1);
        let mut c = config(&dirs, crate::support::loopback());
        c.connections_max = 2;
        let dnode = Dnode::start(c, embedded_meta()).expect("start");
        let first = client(&dnode);
        let second = client(&dnode);
        first.ping().expect("first");
        second.ping().expect("second");
        let third = client(&dnode);
        match third.ping() {
            Err(ChunkError::Unavailable { detail, .. }) => {
                assert!(detail.contains("connections already"), "{detail}")
            }
            other => panic!("over the limit: {other:?}"),
        }
        drop(first);
        eventually(Duration::from_secs(10), "room again", || {
            third.ping().is_ok()
        });
        second.ping().expect("the others are unaffected");
        assert!(dnode.stats().connections_refused >= 1);
        dnode.shutdown();
    });
}
