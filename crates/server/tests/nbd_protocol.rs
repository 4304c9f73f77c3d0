//! The NBD listener driven byte-by-byte from a raw client: error replies, negotiation retries,
//! malformed input, pipelining, export removal and shutdown.

#[path = "nbd_support/harness.rs"]
mod harness;
#[path = "nbd_support/memory_backend.rs"]
mod memory_backend;
#[path = "nbd_support/raw_client.rs"]
mod raw_client;

use harness::TestServer;
use raw_client::{RawClient, Reply};
use weft_nbd::negotiation::encode_info_request;
use weft_nbd::wire::{
    CMD_BLOCK_STATUS, CMD_DISC, CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA, CMD_FLUSH, CMD_READ, CMD_TRIM,
    CMD_WRITE, CMD_WRITE_ZEROES, FLAG_CAN_MULTI_CONN, FLAG_READ_ONLY, INFO_BLOCK_SIZE,
    OPT_EXPORT_NAME, OPT_GO, OPT_LIST, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, REPLY_TYPE_ERROR,
    REPLY_TYPE_OFFSET_DATA, REP_ACK, REP_ERR_UNKNOWN, REP_INFO, REP_SERVER, STATE_HOLE, STATE_ZERO,
};

const EINVAL: u32 = 22;
const EPERM: u32 = 1;
const ENOTSUP: u32 = 95;
const ESHUTDOWN: u32 = 108;

#[test]
fn misaligned_and_out_of_range_requests_get_einval_and_connection_survives() {
    let server = TestServer::start_default();
    let (mut c, size, flags) = RawClient::open(server.addr, "small", false);
    assert_eq!(size, 1 << 20);
    assert!(flags & FLAG_CAN_MULTI_CONN != 0);
    let cases: [(u16, u64, u32); 6] = [
        (CMD_READ, 1, 4096),
        (CMD_READ, 0, 512),
        (CMD_READ, 1 << 20, 4096),
        (CMD_READ, u64::MAX - 4095, 4096),
        (CMD_TRIM, 4096, 100),
        (CMD_WRITE_ZEROES, (1 << 20) - 4096, 8192),
    ];
    for (i, (cmd, offset, len)) in cases.into_iter().enumerate() {
        c.request(cmd, 0, i as u64, offset, len, &[]);
        assert_eq!(
            c.reply(0),
            Reply::Simple {
                error: EINVAL,
                handle: i as u64
            },
            "case {i}"
        );
    }
    // A misaligned write still has its payload consumed: the stream stays in sync.
    c.request(CMD_WRITE, 0, 50, 100, 4096, &[7u8; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EINVAL,
            handle: 50
        }
    );
    // Unknown command type: EINVAL, and go on. FAST_ZERO is not advertised: ENOTSUP.
    c.request(77, 0, 51, 0, 4096, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EINVAL,
            handle: 51
        }
    );
    c.request(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 52, 0, 4096, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: ENOTSUP,
            handle: 52
        }
    );
    // The connection still works.
    c.request(CMD_WRITE, CMD_FLAG_FUA, 60, 8192, 4096, &[0x5a; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 60
        }
    );
    assert_eq!(c.read_simple(61, 8192, 4096), Ok(vec![0x5a; 4096]));
}

#[test]
fn a_512e_export_advertises_512_and_serves_sectors() {
    let server = TestServer::start(memory_backend::MemoryBackend::new().with_export_blocks(
        "sectors",
        1 << 20,
        false,
        512,
    ));
    let mut c = RawClient::connect(server.addr);
    let replies = c.option(OPT_GO, &encode_info_request("sectors", &[INFO_BLOCK_SIZE]));
    let block = &replies
        .iter()
        .find(|(t, d)| *t == REP_INFO && d[0..2] == INFO_BLOCK_SIZE.to_be_bytes())
        .expect("block size info")
        .1;
    assert_eq!(&block[2..6], &512u32.to_be_bytes(), "minimum");
    assert_eq!(&block[6..10], &4096u32.to_be_bytes(), "preferred");
    // Odd sectors, across a block boundary, read back exactly; the rest of the blocks stays.
    c.request(CMD_WRITE, 0, 1, 4096, 4096, &[1u8; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 1
        }
    );
    c.request(CMD_WRITE, CMD_FLAG_FUA, 2, 7 * 512, 3 * 512, &[2u8; 1536]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 2
        }
    );
    let mut want = vec![0u8; 8192];
    want[4096..].fill(1);
    want[3584..5120].fill(2);
    assert_eq!(c.read_simple(3, 0, 8192), Ok(want.clone()));
    assert_eq!(
        c.read_simple(4, 9 * 512, 512),
        Ok(want[4608..5120].to_vec())
    );
    // A sector trimmed and one zeroed read as zeroes; their neighbours are untouched.
    c.request(CMD_TRIM, 0, 5, 4096 + 3 * 512, 512, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 5
        }
    );
    c.request(CMD_WRITE_ZEROES, 0, 6, 4096 + 5 * 512, 512, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 6
        }
    );
    want[4096 + 3 * 512..4096 + 4 * 512].fill(0);
    want[4096 + 5 * 512..4096 + 6 * 512].fill(0);
    assert_eq!(c.read_simple(7, 0, 8192), Ok(want));
    // Finer than a sector: EINVAL, and the connection goes on.
    for (i, (offset, len)) in [(256u64, 512u32), (512, 100), (1, 4096)]
        .into_iter()
        .enumerate()
    {
        let handle = 10 + i as u64;
        c.request(CMD_WRITE, 0, handle, offset, len, &vec![9u8; len as usize]);
        assert_eq!(
            c.reply(0),
            Reply::Simple {
                error: EINVAL,
                handle
            }
        );
    }
    assert_eq!(c.read_simple(20, 0, 512), Ok(vec![0u8; 512]));
}

#[test]
fn writes_to_read_only_export_get_eperm() {
    let server = TestServer::start_default();
    let (mut c, _, flags) = RawClient::open(server.addr, "ro", false);
    assert!(flags & FLAG_READ_ONLY != 0);
    c.request(CMD_WRITE, 0, 1, 0, 4096, &[1u8; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EPERM,
            handle: 1
        }
    );
    c.request(CMD_TRIM, 0, 2, 0, 4096, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EPERM,
            handle: 2
        }
    );
    c.request(CMD_WRITE_ZEROES, 0, 3, 0, 4096, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EPERM,
            handle: 3
        }
    );
    assert_eq!(c.read_simple(4, 0, 4096), Ok(vec![0u8; 4096]));
    c.request(CMD_FLUSH, 0, 5, 0, 0, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 5
        }
    );
}

#[test]
fn unknown_export_in_go_can_be_retried_and_empty_name_is_default() {
    let server = TestServer::start_default();
    let mut c = RawClient::connect(server.addr);
    let replies = c.option(OPT_LIST, &[]);
    assert_eq!(replies.iter().filter(|r| r.0 == REP_SERVER).count(), 3);
    let replies = c.option(OPT_GO, &encode_info_request("nope", &[]));
    assert_eq!(replies, vec![(REP_ERR_UNKNOWN, b"no such export".to_vec())]);
    let replies = c.option(OPT_GO, &encode_info_request("", &[]));
    assert_eq!(replies.last().expect("ack").0, REP_ACK);
    let size = u64::from_be_bytes(replies[0].1[2..10].try_into().expect("8"));
    assert_eq!(size, 64 << 20, "the default export is the first one, disk");
    assert_eq!(c.read_simple(1, 0, 4096), Ok(vec![0u8; 4096]));
}

#[test]
fn unknown_export_in_export_name_closes_the_connection() {
    let server = TestServer::start_default();
    let mut c = RawClient::connect(server.addr);
    let mut bytes = Vec::new();
    weft_nbd::negotiation::encode_option(OPT_EXPORT_NAME, b"nope", &mut bytes);
    c.send(&bytes);
    assert!(c.closed_by_server());
}

#[test]
fn export_name_enters_transmission_with_no_zeroes() {
    let server = TestServer::start_default();
    let mut c = RawClient::connect(server.addr);
    let mut bytes = Vec::new();
    weft_nbd::negotiation::encode_option(OPT_EXPORT_NAME, b"small", &mut bytes);
    c.send(&bytes);
    let reply = c.read_exact_vec(10);
    assert_eq!(
        u64::from_be_bytes(reply[0..8].try_into().expect("8")),
        1 << 20
    );
    c.request(CMD_WRITE, 0, 1, 0, 4096, &[3u8; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 1
        }
    );
    assert_eq!(c.read_simple(2, 0, 4096), Ok(vec![3u8; 4096]));
}

#[test]
fn malformed_requests_disconnect_while_another_client_keeps_working() {
    let server = TestServer::start_default();
    let (mut good, _, _) = RawClient::open(server.addr, "disk", false);
    good.request(CMD_WRITE, 0, 1, 0, 4096, &[9u8; 4096]);
    assert_eq!(
        good.reply(0),
        Reply::Simple {
            error: 0,
            handle: 1
        }
    );

    // Bad magic.
    let (mut bad, _, _) = RawClient::open(server.addr, "disk", false);
    bad.send(&[
        0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
        0, 0,
    ]);
    assert!(bad.closed_by_server());

    // A write longer than the 32 MiB payload limit.
    let (mut bad, _, _) = RawClient::open(server.addr, "disk", false);
    bad.request(CMD_WRITE, 0, 1, 0, (32 << 20) + 4096, &[]);
    assert!(bad.closed_by_server());

    // Garbage during negotiation.
    let mut bad = RawClient::connect(server.addr);
    bad.send(&[0xff; 64]);
    assert!(bad.closed_by_server());

    assert_eq!(good.read_simple(2, 0, 4096), Ok(vec![9u8; 4096]));
}

#[test]
fn structured_reads_errors_and_block_status() {
    let server = TestServer::start_default();
    let (mut c, _, _) = RawClient::open(server.addr, "disk", true);
    c.request(CMD_WRITE, 0, 1, 128 * 1024, 4096, &[0xcd; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 1
        }
    );

    c.request(CMD_READ, 0, 2, 128 * 1024, 4096, &[]);
    let Reply::Chunk {
        flags,
        reply_type,
        handle,
        payload,
    } = c.reply(0)
    else {
        panic!("chunk")
    };
    assert_eq!(
        (flags, reply_type, handle),
        (REPLY_FLAG_DONE, REPLY_TYPE_OFFSET_DATA, 2)
    );
    assert_eq!(&payload[0..8], &(128u64 * 1024).to_be_bytes());
    assert_eq!(&payload[8..], &[0xcd; 4096][..]);

    c.request(CMD_READ, 0, 3, 3, 4096, &[]);
    let Reply::Chunk {
        reply_type,
        payload,
        ..
    } = c.reply(0)
    else {
        panic!("chunk")
    };
    assert_eq!(reply_type, REPLY_TYPE_ERROR);
    assert_eq!(&payload[0..4], &EINVAL.to_be_bytes());

    // 64 KiB chunks in the memory backend: [0,128K) hole, [128K,192K) data, then hole.
    c.request(CMD_BLOCK_STATUS, 0, 4, 0, 256 * 1024, &[]);
    let Reply::Chunk {
        reply_type,
        payload,
        flags,
        ..
    } = c.reply(0)
    else {
        panic!("chunk")
    };
    assert_eq!(
        (reply_type, flags),
        (REPLY_TYPE_BLOCK_STATUS, REPLY_FLAG_DONE)
    );
    let words: Vec<u32> = payload
        .chunks(4)
        .map(|w| u32::from_be_bytes(w.try_into().expect("4")))
        .collect();
    assert_eq!(
        words,
        vec![
            1,
            128 * 1024,
            STATE_HOLE | STATE_ZERO,
            64 * 1024,
            0,
            64 * 1024,
            STATE_HOLE | STATE_ZERO
        ]
    );
}

#[test]
fn block_status_without_negotiated_context_is_einval() {
    let server = TestServer::start_default();
    let (mut c, _, _) = RawClient::open(server.addr, "disk", false);
    c.request(CMD_BLOCK_STATUS, 0, 1, 0, 4096, &[]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: EINVAL,
            handle: 1
        }
    );
}

#[test]
fn pipelined_requests_are_all_answered_then_disc_closes() {
    let server = TestServer::start_default();
    let (mut c, _, _) = RawClient::open(server.addr, "disk", false);
    let count = 400u64; // more than the in-flight bound
    let writer = {
        let mut stream = c.stream.try_clone().expect("clone");
        std::thread::spawn(move || {
            use std::io::Write;
            for i in 0..count {
                let mut bytes = weft_nbd::RequestHeader {
                    flags: 0,
                    command: CMD_WRITE,
                    handle: i,
                    offset_bytes: i * 4096,
                    length_bytes: 4096,
                }
                .encode()
                .to_vec();
                bytes.extend_from_slice(&[(i % 251) as u8; 4096]);
                stream.write_all(&bytes).expect("send");
            }
            let disc = weft_nbd::RequestHeader {
                flags: 0,
                command: CMD_DISC,
                handle: 0,
                offset_bytes: 0,
                length_bytes: 0,
            };
            stream.write_all(&disc.encode()).expect("disc");
        })
    };
    let mut seen = vec![false; count as usize];
    for _ in 0..count {
        let reply = c.reply(0);
        let Reply::Simple { error: 0, handle } = reply else {
            panic!("{reply:?}")
        };
        assert!(!seen[handle as usize], "one reply per handle");
        seen[handle as usize] = true;
    }
    writer.join().expect("writer");
    assert!(c.closed_by_server(), "DISC closes after draining");
    let (mut check, _, _) = RawClient::open(server.addr, "disk", false);
    for i in [0u64, 200, 399] {
        assert_eq!(
            check.read_simple(i, i * 4096, 4096),
            Ok(vec![(i % 251) as u8; 4096])
        );
    }
}

/// Writes and flushes whose acknowledgement comes later, on another thread (as a mirrored
/// c.node's, once its partner answers): pipelined, each gets one reply, never before its
/// acknowledgement, and a failed acknowledgement is an error reply.
#[test]
fn writes_acknowledged_later_are_answered_once_acknowledged() {
    let server = TestServer::start_default();
    let export = server.backend.export("disk");
    export.acknowledge_later(Ok(()));
    let (mut c, _, _) = RawClient::open(server.addr, "disk", false);
    let count = 300u64; // more than the in-flight bound
    let writer = {
        let mut stream = c.stream.try_clone().expect("clone");
        std::thread::spawn(move || {
            use std::io::Write;
            for i in 0..count {
                // Every tenth request a FLUSH.
                let flush = i % 10 == 9;
                let mut bytes = weft_nbd::RequestHeader {
                    flags: 0,
                    command: if flush { CMD_FLUSH } else { CMD_WRITE },
                    handle: i,
                    offset_bytes: if flush { 0 } else { i * 4096 },
                    length_bytes: if flush { 0 } else { 4096 },
                }
                .encode()
                .to_vec();
                if !flush {
                    bytes.extend_from_slice(&[(i % 251) as u8; 4096]);
                }
                stream.write_all(&bytes).expect("send");
            }
        })
    };
    let mut seen = vec![false; count as usize];
    for answered in 1..=count {
        let reply = c.reply(0);
        let Reply::Simple { error: 0, handle } = reply else {
            panic!("{reply:?}")
        };
        assert!(!seen[handle as usize], "one reply per handle");
        seen[handle as usize] = true;
        assert!(
            export.acked_later.load(std::sync::atomic::Ordering::SeqCst) >= answered,
            "a reply left before its acknowledgement"
        );
    }
    writer.join().expect("writer");
    for i in [0u64, 150, 298] {
        assert_eq!(
            c.read_simple(1000 + i, i * 4096, 4096),
            Ok(vec![(i % 251) as u8; 4096])
        );
    }
    // An acknowledgement that fails (the lease lost, say) is an error reply; the connection
    // stays usable.
    export.acknowledge_later(Err(weft_server::backend::ExportIoError::Io {
        detail: "lost".into(),
    }));
    c.request(CMD_WRITE, 0, 7, 0, 4096, &[1u8; 4096]);
    c.request(CMD_WRITE, 0, 8, 4096, 4096, &[2u8; 4096]);
    c.request(CMD_FLUSH, 0, 9, 0, 0, &[]);
    let mut failed: Vec<u64> = (0..3)
        .map(|_| match c.reply(0) {
            Reply::Simple { error: 5, handle } => handle,
            other => panic!("expected EIO, got {other:?}"),
        })
        .collect();
    failed.sort_unstable();
    assert_eq!(failed, vec![7, 8, 9]);
    assert_eq!(
        c.read_simple(10, 0, 4096),
        Ok(vec![1u8; 4096]),
        "still served"
    );
}

#[test]
fn export_gone_disconnects_clients_cleanly() {
    let server = TestServer::start_default();
    let (mut c, _, _) = RawClient::open(server.addr, "small", false);
    assert_eq!(c.read_simple(1, 0, 4096), Ok(vec![0u8; 4096]));
    server.backend.export("small").mark_gone();
    // The next request either is refused before dispatch (disconnect) or fails with ESHUTDOWN
    // and then disconnects.
    c.request(CMD_READ, 0, 2, 0, 4096, &[]);
    let mut byte = [0u8; 16];
    use std::io::Read;
    match c.stream.read(&mut byte) {
        Ok(0) => {}
        Ok(_) => {
            assert_eq!(
                u32::from_be_bytes(byte[4..8].try_into().expect("4")),
                ESHUTDOWN
            );
            assert!(c.closed_by_server());
        }
        Err(e) => panic!("read: {e}"),
    }
    // Other exports keep working.
    let (mut other, _, _) = RawClient::open(server.addr, "disk", false);
    assert_eq!(other.read_simple(1, 0, 4096), Ok(vec![0u8; 4096]));
}

#[test]
fn shutdown_drains_connections_and_run_returns() {
    let server = TestServer::start_default();
    let (mut c, _, _) = RawClient::open(server.addr, "disk", false);
    c.request(CMD_WRITE, 0, 1, 0, 4096, &[1u8; 4096]);
    assert_eq!(
        c.reply(0),
        Reply::Simple {
            error: 0,
            handle: 1
        }
    );
    let idle = RawClient::connect(server.addr);
    let addr = server.addr;
    server.stop().expect("run returns Ok");
    assert!(c.closed_by_server());
    drop(idle);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "no longer accepting"
    );
}
