//! One fixed example of every message and every [`ErrorCode`]: the input of the protocol
//! fingerprint (so a change to any message's encoding changes it), the fuzz seed corpus, and
//! tests. Pure values, no I/O.
//!
//! Never derive these from anything that changes on its own (time, randomness, other crates):
//! the fingerprint must only move when the protocol does.

use crate::message::{ChunkInfo, ChunkKey, DiskStat, ErrorCode, Request, Response};

/// Every error code, in wire order. The exhaustive match in the test below makes adding a code
/// without listing it here a compile error.
pub fn error_codes() -> Vec<ErrorCode> {
    vec![
        ErrorCode::Missing,
        ErrorCode::NoSpace,
        ErrorCode::Fenced { current_epoch: 42 },
        ErrorCode::Unavailable,
        ErrorCode::Corrupt,
        ErrorCode::BadRequest,
        ErrorCode::Io,
        ErrorCode::VersionMismatch,
        ErrorCode::WrongCluster,
    ]
}

fn key(segment: u64, index: u8) -> ChunkKey {
    ChunkKey {
        family: 7,
        segment,
        index,
    }
}

/// One of every request kind, with every optional field both ways where it has one.
pub fn requests() -> Vec<Request> {
    vec![
        Request::Hello {
            protocol_version: crate::PROTOCOL_VERSION,
            cluster_id: "cluster-a".into(),
            client_name: "cnode-1".into(),
        },
        Request::PutChunk {
            key: key(300, 2),
            durable: true,
            epoch: 5,
            codec_id: 1,
            data_chunks: 4,
            parity_chunks: 2,
            stripe_len_bytes: 8 << 20,
            data: (0..=255u8).cycle().take(1000).collect(),
        },
        Request::ReadChunk {
            key: key(300, 2),
            offset_bytes: 4096,
            len_bytes: 512,
        },
        Request::DeleteChunk {
            key: key(u64::MAX, 255),
            epoch: u64::MAX,
        },
        Request::ListChunks {
            family: 7,
            start_after: None,
            limit: 100,
        },
        Request::ListChunks {
            family: 7,
            start_after: Some(key(300, 1)),
            limit: crate::LIST_LIMIT_MAX,
        },
        Request::ListFamilies,
        Request::Fence {
            family: 7,
            epoch: 6,
        },
        Request::Stat,
        Request::Scrub { family: None },
        Request::Scrub { family: Some(7) },
        Request::Ping,
        Request::SyncChunks {
            keys: vec![key(300, 0), key(300, 5)],
        },
    ]
}

/// One of every response kind, and an `Error` of every code.
pub fn responses() -> Vec<Response> {
    let info = |segment, index| ChunkInfo {
        key: key(segment, index),
        len_bytes: 2 << 20,
        epoch: 5,
        codec_id: 1,
        data_chunks: 4,
        parity_chunks: 2,
        stripe_len_bytes: 8 << 20,
    };
    let mut all = vec![
        Response::HelloOk {
            protocol_version: crate::PROTOCOL_VERSION,
            node_id: "dnode-3".into(),
            cluster_id: "cluster-a".into(),
        },
        Response::Ok,
        Response::Data {
            bytes: vec![0xa5; 512],
        },
        Response::Data { bytes: Vec::new() },
        Response::ChunkList {
            chunks: vec![info(300, 0), info(300, 1)],
            more: true,
        },
        Response::ChunkList {
            chunks: Vec::new(),
            more: false,
        },
        Response::Families {
            families: vec![1, 7, 1 << 40],
        },
        Response::NodeStat {
            node_id: "dnode-3".into(),
            disks: vec![DiskStat {
                path: "/var/lib/weft/d0".into(),
                capacity_bytes: 1 << 40,
                used_bytes: 1 << 30,
                chunks: 123,
            }],
        },
        Response::ScrubReport {
            checked: 1000,
            corrupt: vec![key(12, 3)],
        },
        Response::Pong,
    ];
    all.extend(
        error_codes()
            .into_iter()
            .map(|code| Response::error(code, format!("sample {code:?}"))),
    );
    all
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::kind::{MessageKind, MESSAGE_KINDS};

    #[test]
    fn samples_cover_every_kind_and_error_code() {
        let sampled: BTreeSet<u16> = requests()
            .iter()
            .map(|r| r.kind().code())
            .chain(responses().iter().map(|r| r.kind().code()))
            .collect();
        let table: BTreeSet<u16> = MESSAGE_KINDS.iter().map(|(code, _)| *code).collect();
        assert_eq!(sampled, table, "add a sample for every message kind");

        // Exhaustive: a new ErrorCode variant fails to compile here until it gets a number.
        let wire_index = |code: &ErrorCode| match code {
            ErrorCode::Missing => 0,
            ErrorCode::NoSpace => 1,
            ErrorCode::Fenced { .. } => 2,
            ErrorCode::Unavailable => 3,
            ErrorCode::Corrupt => 4,
            ErrorCode::BadRequest => 5,
            ErrorCode::Io => 6,
            ErrorCode::VersionMismatch => 7,
            ErrorCode::WrongCluster => 8,
        };
        let codes = error_codes();
        let indexes: Vec<usize> = codes.iter().map(wire_index).collect();
        assert_eq!(indexes, (0..codes.len()).collect::<Vec<_>>());
        for code in &codes {
            // postcard writes the variant index first: the wire order is the declaration order.
            let bytes = postcard::to_stdvec(code).expect("encode");
            assert_eq!(usize::from(bytes[0]), wire_index(code));
        }
        assert!(MessageKind::from_code(0).is_none());
    }
}
