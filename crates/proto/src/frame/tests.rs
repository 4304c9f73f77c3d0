//! Frame encoding and both decoders: layout, incremental input, corruption, limits, pipelining.

use proptest::prelude::*;

use super::*;
use crate::fuzzing::raw_header;
use crate::kind::MESSAGE_KINDS;

fn frame_bytes(kind: MessageKind, request_id: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_frame(kind, request_id, payload, &mut out).expect("encode");
    out
}

#[test]
fn header_layout_is_little_endian_as_documented() {
    let bytes = frame_bytes(MessageKind::ReadChunk, 0x0102_0304_0506_0708, b"xyz");
    assert_eq!(&bytes[0..4], b"WFTP");
    assert_eq!(bytes[4..6], PROTOCOL_VERSION.to_le_bytes());
    assert_eq!(bytes[6..8], [0x03, 0x00]);
    assert_eq!(bytes[8..16], [8, 7, 6, 5, 4, 3, 2, 1]);
    assert_eq!(bytes[16..20], [3, 0, 0, 0]);
    assert_eq!(bytes[20..24], crc32c::crc32c(b"xyz").to_le_bytes());
    assert_eq!(bytes[24..28], crc32c::crc32c(&bytes[..24]).to_le_bytes());
    assert_eq!(&bytes[28..], b"xyz");
    assert_eq!(bytes.len(), FRAME_HEADER_LEN_BYTES + 3);
}

#[test]
fn frame_round_trips_through_both_decoders() {
    let bytes = frame_bytes(MessageKind::Data, 77, b"payload");
    let expected = Frame {
        kind: MessageKind::Data,
        request_id: 77,
        payload: b"payload".to_vec(),
    };
    assert_eq!(
        decode_frame(&bytes),
        Ok(Some((expected.clone(), bytes.len())))
    );
    let mut decoder = FrameDecoder::new();
    assert_eq!(decoder.decode(&bytes), Ok((bytes.len(), Some(expected))));
    assert!(decoder.is_idle());
}

#[test]
fn fed_byte_by_byte_is_incomplete_until_the_last_byte() {
    let bytes = frame_bytes(MessageKind::PutChunk, 5, &[9u8; 100]);
    for end in 0..bytes.len() {
        assert_eq!(
            decode_frame(&bytes[..end]),
            Ok(None),
            "prefix of {end} bytes"
        );
    }
    assert!(decode_frame(&bytes).expect("valid").is_some());

    let mut decoder = FrameDecoder::new();
    let (last, head) = bytes.split_last().expect("non-empty");
    for (i, b) in head.iter().enumerate() {
        assert_eq!(decoder.decode(&[*b]), Ok((1, None)), "byte {i}");
        assert_eq!(decoder.buffered_bytes(), i + 1);
        assert!(!decoder.is_idle());
    }
    let (used, frame) = decoder.decode(&[*last]).expect("valid");
    assert_eq!(used, 1);
    assert_eq!(frame.expect("complete").payload, vec![9u8; 100]);
    assert!(decoder.is_idle());
}

#[test]
fn corrupted_payload_is_a_payload_crc_error() {
    let mut bytes = frame_bytes(MessageKind::PutChunk, 5, &[1u8; 64]);
    bytes[FRAME_HEADER_LEN_BYTES + 7] ^= 0x10;
    assert!(matches!(
        decode_frame(&bytes),
        Err(ProtoError::PayloadCrcMismatch { request_id: 5, .. })
    ));
    let mut decoder = FrameDecoder::new();
    let err = decoder.decode(&bytes).expect_err("corrupt");
    assert!(matches!(err, ProtoError::PayloadCrcMismatch { .. }));
    assert_eq!(
        decoder.decode(&bytes).err(),
        Some(err),
        "the decoder stays failed"
    );
}

#[test]
fn any_corrupted_header_byte_is_refused() {
    let bytes = frame_bytes(MessageKind::Ping, 5, &[]);
    for i in 0..FRAME_HEADER_LEN_BYTES {
        let mut bad = bytes.clone();
        bad[i] ^= 0x01;
        let err = decode_frame(&bad).expect_err("corrupt header");
        if i < 4 {
            assert!(
                matches!(err, ProtoError::BadMagic { .. }),
                "byte {i}: {err}"
            );
        } else {
            assert!(
                matches!(err, ProtoError::HeaderCrcMismatch { .. }),
                "byte {i}: {err}"
            );
        }
        assert!(FrameDecoder::new().decode(&bad).is_err());
    }
}

#[test]
fn oversize_length_is_refused_from_the_header_alone() {
    for len in [
        u32::try_from(PAYLOAD_MAX_BYTES + 1).expect("fits"),
        u32::MAX,
    ] {
        let header = raw_header(MessageKind::PutChunk.code(), 3, len, 0);
        let expected = ProtoError::PayloadTooLong {
            len_bytes: u64::from(len),
            max_bytes: PAYLOAD_MAX_BYTES as u64,
            request_id: 3,
        };
        assert_eq!(decode_frame(&header), Err(expected.clone()));
        let mut decoder = FrameDecoder::new();
        assert_eq!(decoder.decode(&header), Err(expected));
        assert_eq!(decoder.buffered_bytes(), 0, "no payload buffer was made");
    }
    // Exactly the limit is fine (the decoder would now wait for the payload).
    let at_limit = u32::try_from(PAYLOAD_MAX_BYTES).expect("fits");
    let header = raw_header(MessageKind::PutChunk.code(), 3, at_limit, 0);
    assert_eq!(decode_frame(&header), Ok(None));
}

#[test]
fn unknown_kind_and_foreign_version_are_refused_with_the_request_id() {
    let header = raw_header(0x7777, 11, 0, crc32c::crc32c(&[]));
    assert_eq!(
        decode_frame(&header),
        Err(ProtoError::UnknownKind {
            kind: 0x7777,
            request_id: 11
        })
    );
    let mut foreign = frame_bytes(MessageKind::Ping, 12, &[]);
    foreign[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
    let crc = crc32c::crc32c(&foreign[..24]);
    foreign[24..28].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        decode_frame(&foreign),
        Err(ProtoError::VersionMismatch {
            version: PROTOCOL_VERSION + 1,
            supported: PROTOCOL_VERSION,
            request_id: 12
        })
    );
}

#[test]
fn pipelined_frames_in_one_buffer_decode_in_order() {
    let mut buf = Vec::new();
    let sent: Vec<(MessageKind, u64, Vec<u8>)> = vec![
        (MessageKind::Ping, 1, vec![]),
        (MessageKind::PutChunk, 2, vec![7; 300]),
        (MessageKind::ReadChunk, 3, vec![1, 2, 3]),
    ];
    for (kind, id, payload) in &sent {
        encode_frame(*kind, *id, payload, &mut buf).expect("encode");
    }
    buf.extend_from_slice(&frame_bytes(MessageKind::Stat, 4, &[])[..10]);

    let mut rest = &buf[..];
    for (kind, id, payload) in &sent {
        let (frame, used) = decode_frame(rest).expect("valid").expect("complete");
        assert_eq!(
            (frame.kind, frame.request_id, &frame.payload),
            (*kind, *id, payload)
        );
        rest = &rest[used..];
    }
    assert_eq!(decode_frame(rest), Ok(None), "a partial fourth frame waits");

    let mut decoder = FrameDecoder::new();
    let mut rest = &buf[..];
    for (_, id, _) in &sent {
        let (used, frame) = decoder.decode(rest).expect("valid");
        assert_eq!(frame.expect("complete").request_id, *id);
        rest = &rest[used..];
    }
    assert_eq!(decoder.decode(rest), Ok((10, None)));
}

#[test]
fn header_then_payload_read_separately() {
    let bytes = frame_bytes(MessageKind::Data, 9, b"abcdef");
    let head = bytes
        .first_chunk::<FRAME_HEADER_LEN_BYTES>()
        .expect("header");
    let header = FrameHeader::decode(head).expect("valid");
    assert_eq!(header.payload_len(), 6);
    let frame = header
        .into_frame(bytes[FRAME_HEADER_LEN_BYTES..].to_vec())
        .expect("valid");
    assert_eq!(frame.payload, b"abcdef");
    assert!(matches!(
        header.into_frame(b"abc".to_vec()),
        Err(ProtoError::PayloadLenMismatch { .. })
    ));
    assert!(matches!(
        header.into_frame(b"abcdeF".to_vec()),
        Err(ProtoError::PayloadCrcMismatch { .. })
    ));
}

#[test]
fn payload_in_parts_has_the_crc_of_the_whole() {
    let whole = FrameHeader::for_payload(MessageKind::Data, 1, &[b"hello world"]).expect("ok");
    let parts =
        FrameHeader::for_payload(MessageKind::Data, 1, &[b"hello", b"", b" world"]).expect("ok");
    assert_eq!(whole, parts);
}

fn any_kind() -> impl Strategy<Value = MessageKind> {
    prop::sample::select(MESSAGE_KINDS.to_vec())
        .prop_map(|(code, _)| MessageKind::from_code(code).expect("table kind"))
}

proptest! {
    #[test]
    fn any_frames_split_anywhere_decode_the_same(
        frames in prop::collection::vec(
            (any_kind(), any::<u64>(), prop::collection::vec(any::<u8>(), 0..600)),
            1..6,
        ),
        piece_len in 1usize..200,
    ) {
        let mut buf = Vec::new();
        for (kind, id, payload) in &frames {
            encode_frame(*kind, *id, payload, &mut buf).expect("encode");
        }
        let mut decoder = FrameDecoder::new();
        let mut got = Vec::new();
        for piece in buf.chunks(piece_len) {
            let mut rest = piece;
            while let (used, Some(frame)) = decoder.decode(rest).expect("valid") {
                got.push((frame.kind, frame.request_id, frame.payload));
                rest = &rest[used..];
            }
        }
        prop_assert!(decoder.is_idle());
        prop_assert_eq!(got, frames);
    }
}
