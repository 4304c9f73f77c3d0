//! Message round trips (samples and proptest), the zero-copy bulk layout, limits and refusals.

use proptest::prelude::*;

use super::*;
use crate::frame::{decode_frame, encode_frame};
use crate::samples;

fn to_frame(bytes: &[u8]) -> Frame {
    let (frame, used) = decode_frame(bytes).expect("valid").expect("complete");
    assert_eq!(used, bytes.len());
    frame
}

fn request_round_trip(request: &Request, request_id: u64) -> Request {
    let mut out = Vec::new();
    request.encode(request_id, &mut out).expect("encode");
    let mut joined = Vec::new();
    request
        .encode_vectored(request_id)
        .expect("encode")
        .write_to(&mut joined);
    assert_eq!(joined, out);
    let frame = to_frame(&out);
    assert_eq!((frame.kind, frame.request_id), (request.kind(), request_id));
    Request::decode(frame).expect("decode")
}

fn response_round_trip(response: &Response, request_id: u64) -> Response {
    let mut out = Vec::new();
    response.encode(request_id, &mut out).expect("encode");
    let frame = to_frame(&out);
    assert_eq!(
        (frame.kind, frame.request_id),
        (response.kind(), request_id)
    );
    Response::decode(frame).expect("decode")
}

#[test]
fn every_sample_message_round_trips() {
    for (id, request) in (0u64..).zip(samples::requests()) {
        assert_eq!(request_round_trip(&request, id), request);
    }
    for (id, response) in (0u64..).zip(samples::responses()) {
        assert_eq!(response_round_trip(&response, u64::MAX - id), response);
    }
}

#[test]
fn bulk_data_is_handed_out_without_copying() {
    let request = Request::PutChunk {
        key: ChunkKey::default(),
        durable: false,
        epoch: 1,
        codec_id: 0,
        data_chunks: 1,
        parity_chunks: 0,
        stripe_len_bytes: 4096,
        data: vec![3; 4096],
    };
    let vectored = request.encode_vectored(1).expect("encode");
    let Request::PutChunk { data, .. } = &request else {
        unreachable!()
    };
    assert_eq!(
        vectored.bulk.as_ptr(),
        data.as_ptr(),
        "encode borrows the data"
    );

    let mut out = Vec::new();
    request.encode(1, &mut out).expect("encode");
    let frame = to_frame(&out);
    let buffer = frame.payload.as_ptr();
    let Request::PutChunk { data, .. } = Request::decode(frame).expect("decode") else {
        panic!("not a put");
    };
    assert_eq!(data.as_ptr(), buffer, "decode keeps the payload buffer");
    assert_eq!(data, vec![3; 4096]);

    let mut out = Vec::new();
    Response::Data {
        bytes: vec![5; 100],
    }
    .encode(2, &mut out)
    .expect("encode");
    let frame = to_frame(&out);
    let buffer = frame.payload.as_ptr();
    let Response::Data { bytes } = Response::decode(frame).expect("decode") else {
        panic!("not data");
    };
    assert_eq!(bytes.as_ptr(), buffer);
    assert_eq!(bytes, vec![5; 100]);
}

#[test]
fn over_limit_messages_are_not_encoded_and_out_is_untouched() {
    let cases = [
        Request::ReadChunk {
            key: ChunkKey::default(),
            offset_bytes: 0,
            len_bytes: u32::try_from(CHUNK_MAX_BYTES + 1).expect("fits"),
        },
        Request::ListChunks {
            family: 1,
            start_after: None,
            limit: LIST_LIMIT_MAX + 1,
        },
        Request::Hello {
            protocol_version: 1,
            cluster_id: "c".repeat(NAME_MAX_BYTES + 1),
            client_name: String::new(),
        },
    ];
    for request in cases {
        let mut out = vec![0xee];
        let err = request.encode(1, &mut out).expect_err("over a limit");
        assert!(matches!(err, ProtoError::LimitExceeded { .. }), "{err}");
        assert_eq!(out, vec![0xee]);
    }
    let big = Response::Families {
        families: vec![0; FAMILIES_MAX + 1],
    };
    assert!(matches!(
        big.encode(1, &mut Vec::new()),
        Err(ProtoError::LimitExceeded {
            field: "families",
            ..
        })
    ));
}

#[test]
fn oversize_put_is_refused_on_encode() {
    let put = Request::PutChunk {
        key: ChunkKey::default(),
        durable: true,
        epoch: 1,
        codec_id: 0,
        data_chunks: 1,
        parity_chunks: 0,
        stripe_len_bytes: 0,
        data: vec![0; CHUNK_MAX_BYTES + 1],
    };
    assert!(matches!(
        put.encode_vectored(1),
        Err(ProtoError::LimitExceeded { field: "data", .. })
    ));
}

#[test]
fn over_limit_fields_from_a_peer_are_refused_on_decode() {
    let over = u32::try_from(CHUNK_MAX_BYTES + 1).expect("fits");
    let payload = postcard::to_stdvec(&(ChunkKey::default(), 0u64, over)).expect("encode");
    let mut bytes = Vec::new();
    encode_frame(MessageKind::ReadChunk, 4, &payload, &mut bytes).expect("encode");
    assert_eq!(
        Request::decode(to_frame(&bytes)),
        Err(ProtoError::LimitExceeded {
            kind: MessageKind::ReadChunk,
            field: "len_bytes",
            len: u64::from(over),
            max: CHUNK_MAX_BYTES as u64,
            request_id: 4,
        })
    );
}

#[test]
fn requests_and_responses_do_not_decode_as_each_other() {
    let mut bytes = Vec::new();
    Request::Ping.encode(1, &mut bytes).expect("encode");
    assert!(matches!(
        Response::decode(to_frame(&bytes)),
        Err(ProtoError::WrongDirection {
            kind: MessageKind::Ping,
            expected: Direction::Response,
            ..
        })
    ));
    bytes.clear();
    Response::Pong.encode(1, &mut bytes).expect("encode");
    assert!(matches!(
        Request::decode(to_frame(&bytes)),
        Err(ProtoError::WrongDirection { .. })
    ));
}

#[test]
fn malformed_payloads_are_refused() {
    let frame = |kind, payload: &[u8]| Frame {
        kind,
        request_id: 8,
        payload: payload.to_vec(),
    };
    // Extra bytes after the fields.
    assert!(matches!(
        Request::decode(frame(MessageKind::Ping, &[0])),
        Err(ProtoError::TrailingBytes { extra_bytes: 1, .. })
    ));
    // Too short for the fields.
    assert!(matches!(
        Request::decode(frame(MessageKind::Fence, &[1])),
        Err(ProtoError::Malformed { .. })
    ));
    // Bulk payloads shorter than the trailer, or whose trailer points before the start.
    assert!(matches!(
        Request::decode(frame(MessageKind::PutChunk, &[1, 2])),
        Err(ProtoError::BadBulkTrailer { .. })
    ));
    assert!(matches!(
        Response::decode(frame(MessageKind::Data, &[9, 9, 1, 0, 0, 0])),
        Err(ProtoError::TrailingBytes { .. })
    ));
    assert!(matches!(
        Response::decode(frame(MessageKind::Data, &[9, 5, 0, 0, 0])),
        Err(ProtoError::BadBulkTrailer {
            meta_len_bytes: 5,
            ..
        })
    ));
    // A bad enum tag in an error code, invalid utf-8 in a string.
    assert!(matches!(
        Response::decode(frame(MessageKind::Error, &[200, 0])),
        Err(ProtoError::Malformed { .. })
    ));
    assert!(matches!(
        Response::decode(frame(MessageKind::NodeStat, &[1, 0xff, 0])),
        Err(ProtoError::Malformed { .. })
    ));
}

#[test]
fn error_message_is_cut_at_a_char_boundary() {
    let long = "é".repeat(ERROR_MESSAGE_MAX_BYTES);
    let Response::Error { message, .. } = Response::error(ErrorCode::Io, long) else {
        unreachable!()
    };
    assert!(message.len() <= ERROR_MESSAGE_MAX_BYTES);
    assert!(message.len() >= ERROR_MESSAGE_MAX_BYTES - 1);
    assert!(message.chars().all(|c| c == 'é'));
}

fn any_key() -> impl Strategy<Value = ChunkKey> {
    (any::<u64>(), any::<u64>(), any::<u8>()).prop_map(|(family, segment, index)| ChunkKey {
        family,
        segment,
        index,
    })
}

fn any_name() -> impl Strategy<Value = String> {
    "\\PC{0,40}"
}

fn any_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..2048)
}

fn any_request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (any::<u16>(), any_name(), any_name()).prop_map(|(v, c, n)| Request::Hello {
            protocol_version: v,
            cluster_id: c,
            client_name: n,
        }),
        (
            any_key(),
            any::<u64>(),
            any::<[u8; 3]>(),
            any::<u64>(),
            any_bytes()
        )
            .prop_map(
                |(key, epoch, [codec_id, data_chunks, parity_chunks], stripe_len_bytes, data)| {
                    Request::PutChunk {
                        key,
                        durable: epoch % 2 == 0,
                        epoch,
                        codec_id,
                        data_chunks,
                        parity_chunks,
                        stripe_len_bytes,
                        data,
                    }
                }
            ),
        (
            any_key(),
            any::<u64>(),
            0..=u32::try_from(CHUNK_MAX_BYTES).expect("fits")
        )
            .prop_map(|(key, offset_bytes, len_bytes)| Request::ReadChunk {
                key,
                offset_bytes,
                len_bytes,
            }),
        (any_key(), any::<u64>()).prop_map(|(key, epoch)| Request::DeleteChunk { key, epoch }),
        (
            any::<u64>(),
            prop::option::of(any_key()),
            0..=LIST_LIMIT_MAX
        )
            .prop_map(|(family, start_after, limit)| Request::ListChunks {
                family,
                start_after,
                limit,
            }),
        Just(Request::ListFamilies),
        (any::<u64>(), any::<u64>()).prop_map(|(family, epoch)| Request::Fence { family, epoch }),
        Just(Request::Stat),
        prop::option::of(any::<u64>()).prop_map(|family| Request::Scrub { family }),
        Just(Request::Ping),
        prop::collection::vec(any_key(), 0..8).prop_map(|keys| Request::SyncChunks { keys }),
    ]
}

fn any_error_code() -> impl Strategy<Value = ErrorCode> {
    prop_oneof![
        prop::sample::select(samples::error_codes()),
        any::<u64>().prop_map(|current_epoch| ErrorCode::Fenced { current_epoch }),
    ]
}

fn any_response() -> impl Strategy<Value = Response> {
    let info = (any_key(), any::<[u64; 3]>(), any::<[u8; 3]>()).prop_map(
        |(key, [len_bytes, epoch, stripe_len_bytes], [codec_id, data_chunks, parity_chunks])| {
            ChunkInfo {
                key,
                len_bytes,
                epoch,
                codec_id,
                data_chunks,
                parity_chunks,
                stripe_len_bytes,
            }
        },
    );
    let disk =
        (any_name(), any::<[u64; 3]>()).prop_map(|(path, [capacity, used, chunks])| DiskStat {
            path,
            capacity_bytes: capacity,
            used_bytes: used,
            chunks,
        });
    prop_oneof![
        (any::<u16>(), any_name(), any_name()).prop_map(|(v, n, c)| Response::HelloOk {
            protocol_version: v,
            node_id: n,
            cluster_id: c,
        }),
        Just(Response::Ok),
        any_bytes().prop_map(|bytes| Response::Data { bytes }),
        (prop::collection::vec(info, 0..50), any::<bool>())
            .prop_map(|(chunks, more)| Response::ChunkList { chunks, more }),
        prop::collection::vec(any::<u64>(), 0..100)
            .prop_map(|families| Response::Families { families }),
        (any_name(), prop::collection::vec(disk, 0..8))
            .prop_map(|(node_id, disks)| Response::NodeStat { node_id, disks }),
        (any::<u64>(), prop::collection::vec(any_key(), 0..50))
            .prop_map(|(checked, corrupt)| Response::ScrubReport { checked, corrupt }),
        Just(Response::Pong),
        (any_error_code(), "\\PC{0,200}")
            .prop_map(|(code, message)| Response::Error { code, message }),
    ]
}

proptest! {
    #[test]
    fn any_request_round_trips(request in any_request(), id in any::<u64>()) {
        prop_assert_eq!(request_round_trip(&request, id), request);
    }

    #[test]
    fn any_response_round_trips(response in any_response(), id in any::<u64>()) {
        prop_assert_eq!(response_round_trip(&response, id), response);
    }

    #[test]
    fn pipelined_messages_decode_in_order(
        requests in prop::collection::vec(any_request(), 1..8),
        piece_len in 1usize..512,
    ) {
        let mut buf = Vec::new();
        for (id, request) in (100u64..).zip(&requests) {
            request.encode(id, &mut buf).expect("encode");
        }
        let mut decoder = crate::FrameDecoder::new();
        let mut got = Vec::new();
        for piece in buf.chunks(piece_len) {
            let mut rest = piece;
            while let (used, Some(frame)) = decoder.decode(rest).expect("valid") {
                got.push((frame.request_id, Request::decode(frame).expect("decode")));
                rest = &rest[used..];
            }
        }
        let expected: Vec<(u64, Request)> = (100u64..).zip(requests).collect();
        prop_assert_eq!(got, expected);
    }
}
