//! Fuzz entry point and its seed corpus, shared by `fuzz/` (cargo-fuzz, nightly), the unit tests,
//! and the stable-toolchain corpus replay in `tests/corpus_replay.rs`. No I/O except the unit
//! test that writes the seed files.
//!
//! [`fuzz_frames`] drives both frame decoders over arbitrary bytes and asserts what must hold for
//! any input: no panic; consumed counts inside the input; the slice decoder and the incremental
//! [`FrameDecoder`] (fed in pieces) agree frame for frame and on how the stream ends; a frame is
//! never both a valid request and a valid response; every message that decodes re-encodes
//! (plainly and vectored, to the same bytes) and decodes back to an equal value.

use crate::frame::{decode_frame, encode_frame, Frame, FrameDecoder};
use crate::kind::MessageKind;
use crate::message::{ChunkKey, Request, Response};
use crate::wire::{CHUNK_MAX_BYTES, FRAME_HEADER_LEN_BYTES, FRAME_MAGIC, PAYLOAD_MAX_BYTES};
use crate::{samples, ProtoError, PROTOCOL_VERSION};

/// Target name; also the directory name under `fuzz/corpus/`.
pub const FRAME_TARGET: &str = "proto_frame";

/// How a byte stream ended after its last whole frame.
#[derive(Debug, PartialEq, Eq)]
enum End {
    /// A valid prefix of a frame (possibly empty) was left over.
    Incomplete {
        leftover_bytes: usize,
    },
    Invalid(ProtoError),
}

/// First byte picks the piece size (1..=64 bytes) the incremental decoder is fed in; the rest is
/// the byte stream a peer sends.
pub fn fuzz_frames(data: &[u8]) {
    let Some((&split, stream)) = data.split_first() else {
        return;
    };
    let piece_len = usize::from(split % 64) + 1;
    let (frames, end) = decode_slice(stream);
    let (pieced_frames, pieced_end) = decode_in_pieces(stream, piece_len);
    assert_eq!(frames, pieced_frames, "both decoders yield the same frames");
    assert_eq!(end, pieced_end, "both decoders end the stream the same way");
    for frame in frames {
        check_messages(frame);
    }
}

fn decode_slice(stream: &[u8]) -> (Vec<Frame>, End) {
    let mut frames = Vec::new();
    let mut rest = stream;
    loop {
        match decode_frame(rest) {
            Ok(Some((frame, consumed))) => {
                assert!(consumed <= rest.len(), "consumed inside the input");
                assert_eq!(consumed, FRAME_HEADER_LEN_BYTES + frame.payload.len());
                rest = &rest[consumed..];
                frames.push(frame);
            }
            Ok(None) => {
                return (
                    frames,
                    End::Incomplete {
                        leftover_bytes: rest.len(),
                    },
                )
            }
            Err(e) => return (frames, End::Invalid(e)),
        }
    }
}

fn decode_in_pieces(stream: &[u8], piece_len: usize) -> (Vec<Frame>, End) {
    let mut decoder = FrameDecoder::new();
    let mut frames = Vec::new();
    for piece in stream.chunks(piece_len) {
        let mut rest = piece;
        loop {
            match decoder.decode(rest) {
                Ok((consumed, Some(frame))) => {
                    assert!(consumed <= rest.len(), "consumed inside the input");
                    assert!(decoder.is_idle());
                    rest = &rest[consumed..];
                    frames.push(frame);
                }
                Ok((consumed, None)) => {
                    assert_eq!(consumed, rest.len(), "incomplete takes everything");
                    break;
                }
                Err(e) => {
                    assert_eq!(decoder.decode(&[]).err(), Some(e.clone()), "errors stick");
                    return (frames, End::Invalid(e));
                }
            }
        }
    }
    let leftover_bytes = decoder.buffered_bytes();
    (frames, End::Incomplete { leftover_bytes })
}

fn check_messages(frame: Frame) {
    let request = Request::decode(frame.clone());
    let response = Response::decode(frame.clone());
    assert!(
        request.is_err() || response.is_err(),
        "a frame is a request or a response, never both"
    );
    if let Ok(request) = request {
        assert_eq!(request.kind(), frame.kind);
        let bytes = reencode(frame.request_id, |id, out| request.encode(id, out));
        let vectored = request
            .encode_vectored(frame.request_id)
            .expect("a decoded request is within limits");
        assert_eq!(vectored.len_bytes(), bytes.len());
        let mut joined = Vec::new();
        vectored.write_to(&mut joined);
        assert_eq!(joined, bytes, "vectored and plain encodings agree");
        let again = redecode(&bytes, frame.request_id);
        assert_eq!(Request::decode(again).ok(), Some(request));
    }
    if let Ok(response) = response {
        assert_eq!(response.kind(), frame.kind);
        let bytes = reencode(frame.request_id, |id, out| response.encode(id, out));
        let again = redecode(&bytes, frame.request_id);
        assert_eq!(Response::decode(again).ok(), Some(response));
    }
}

fn reencode(
    request_id: u64,
    encode: impl FnOnce(u64, &mut Vec<u8>) -> Result<(), ProtoError>,
) -> Vec<u8> {
    let mut out = Vec::new();
    encode(request_id, &mut out).expect("a decoded message is within limits");
    out
}

fn redecode(bytes: &[u8], request_id: u64) -> Frame {
    match decode_frame(bytes) {
        Ok(Some((frame, consumed))) => {
            assert_eq!(consumed, bytes.len());
            assert_eq!(frame.request_id, request_id);
            frame
        }
        other => panic!("re-encoded message does not decode: {other:?}"),
    }
}

/// Seed inputs, as (file name, bytes).
pub fn seed_corpus(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    match target {
        FRAME_TARGET => frame_seeds(),
        _ => Vec::new(),
    }
}

/// A header with a valid header CRC and whatever kind, length and payload CRC we like.
pub(crate) fn raw_header(
    kind: u16,
    request_id: u64,
    payload_len: u32,
    payload_crc: u32,
) -> Vec<u8> {
    let mut b = Vec::with_capacity(FRAME_HEADER_LEN_BYTES);
    b.extend_from_slice(&FRAME_MAGIC.to_le_bytes());
    b.extend_from_slice(&PROTOCOL_VERSION.to_le_bytes());
    b.extend_from_slice(&kind.to_le_bytes());
    b.extend_from_slice(&request_id.to_le_bytes());
    b.extend_from_slice(&payload_len.to_le_bytes());
    b.extend_from_slice(&payload_crc.to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn encoded_requests(first_id: u64) -> Vec<Vec<u8>> {
    (first_id..)
        .zip(samples::requests())
        .map(|(id, r)| reencode(id, |id, out| r.encode(id, out)))
        .collect()
}

fn frame_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let with_split = |split: u8, parts: Vec<Vec<u8>>| {
        let mut v = vec![split];
        v.extend(parts.into_iter().flatten());
        v
    };
    let requests = encoded_requests(1);
    // Responses in reverse request-id order: the d.node answers out of order.
    let responses: Vec<Vec<u8>> = (0u64..)
        .zip(samples::responses())
        .map(|(i, r)| reencode(1000 - i, |id, out| r.encode(id, out)))
        .collect();
    let put = requests
        .iter()
        .find(|f| f.get(6..8) == Some(&MessageKind::PutChunk.code().to_le_bytes()[..]))
        .cloned()
        .unwrap_or_default();

    let mut bad_payload_crc = put.clone();
    if let Some(b) = bad_payload_crc.get_mut(FRAME_HEADER_LEN_BYTES + 10) {
        *b ^= 0x40;
    }
    let mut bad_header_crc = requests[0].clone();
    bad_header_crc[9] ^= 1;
    let oversize_len = u32::try_from(PAYLOAD_MAX_BYTES + 1).unwrap_or(u32::MAX);
    let truncated_put = put[..put.len() / 2].to_vec();

    // A PutChunk whose trailer claims more fixed bytes than the payload has.
    let mut bad_trailer_payload = vec![1, 2, 3];
    bad_trailer_payload.extend_from_slice(&u32::MAX.to_le_bytes());
    let mut bad_trailer = Vec::new();
    encode_frame(
        MessageKind::PutChunk,
        5,
        &bad_trailer_payload,
        &mut bad_trailer,
    )
    .expect("small payload");

    // A ReadChunk over the read limit, with good CRCs.
    let key = ChunkKey::default();
    let over = u32::try_from(CHUNK_MAX_BYTES + 1).unwrap_or(u32::MAX);
    let read_payload = postcard::to_stdvec(&(key, 0u64, over)).expect("encode");
    let mut over_limit_read = Vec::new();
    encode_frame(
        MessageKind::ReadChunk,
        6,
        &read_payload,
        &mut over_limit_read,
    )
    .expect("small payload");

    vec![
        ("seed-requests-pipelined", with_split(63, requests.clone())),
        ("seed-responses-out-of-order", with_split(17, responses)),
        (
            "seed-byte-by-byte",
            with_split(0, vec![requests[0].clone(), requests[1].clone()]),
        ),
        (
            "seed-bad-payload-crc",
            with_split(31, vec![requests[0].clone(), bad_payload_crc]),
        ),
        ("seed-bad-header-crc", with_split(5, vec![bad_header_crc])),
        (
            "seed-oversize-length",
            with_split(63, vec![raw_header(0x0002, 3, oversize_len, 0)]),
        ),
        (
            "seed-unknown-kind",
            with_split(7, vec![raw_header(0x7777, 4, 0, 0)]),
        ),
        ("seed-truncated-put", with_split(11, vec![truncated_put])),
        ("seed-bad-bulk-trailer", with_split(63, vec![bad_trailer])),
        (
            "seed-over-limit-read",
            with_split(63, vec![over_limit_read]),
        ),
        (
            "seed-bad-magic",
            with_split(63, vec![b"GET / HTTP/1.1\r\n\r\n____________".to_vec()]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use proptest::prelude::*;

    use super::*;

    /// Writes the seed corpus into `fuzz/corpus/<target>/` (only files whose bytes changed), so
    /// the committed corpus always matches the code that defines it.
    #[test]
    fn writes_seed_corpus() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        let dir = root.join(FRAME_TARGET);
        std::fs::create_dir_all(&dir).expect("create corpus dir");
        for (name, bytes) in seed_corpus(FRAME_TARGET) {
            let path = dir.join(name);
            if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
                std::fs::write(&path, &bytes).expect("write seed");
            }
        }
    }

    #[test]
    fn seeds_run_clean_and_end_as_intended() {
        for (name, bytes) in seed_corpus(FRAME_TARGET) {
            fuzz_frames(&bytes);
            let (frames, end) = decode_slice(&bytes[1..]);
            let invalid = matches!(end, End::Invalid(_));
            match name {
                "seed-requests-pipelined" | "seed-responses-out-of-order" | "seed-byte-by-byte" => {
                    assert!(!frames.is_empty());
                    assert_eq!(end, End::Incomplete { leftover_bytes: 0 }, "{name}");
                }
                "seed-truncated-put" => assert!(!invalid, "{name}"),
                "seed-bad-bulk-trailer" | "seed-over-limit-read" => {
                    assert_eq!(frames.len(), 1, "{name}");
                    let frame = frames.into_iter().next().expect("one frame");
                    assert!(Request::decode(frame).is_err(), "{name}");
                }
                _ => assert!(invalid, "{name} ends invalid"),
            }
        }
    }

    /// Recomputes both CRCs of every whole frame at the front of `stream`, so mutations reach
    /// the message decoders instead of stopping at a CRC check.
    fn reseal(stream: &mut [u8]) {
        let mut at = 0;
        while let Some(head) = stream.get(at..at + FRAME_HEADER_LEN_BYTES) {
            let len = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
            let start = at + FRAME_HEADER_LEN_BYTES;
            let Some(end) = usize::try_from(len).ok().map(|len| start + len) else {
                return;
            };
            let Some(payload) = stream.get(start..end) else {
                return;
            };
            let crc = crc32c::crc32c(payload);
            stream[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
            let crc = crc32c::crc32c(&stream[at..at + 24]);
            stream[at + 24..at + 28].copy_from_slice(&crc.to_le_bytes());
            at = end;
        }
    }

    proptest! {
        /// A stable-toolchain stand-in for the fuzzer: seeds with bytes flipped, cut or
        /// appended, and plain random bytes, must all run clean.
        #[test]
        fn mutated_seeds_run_clean(
            seed in 0usize..16,
            flips in prop::collection::vec((any::<prop::sample::Index>(), 1u8..), 0..4),
            cut in any::<prop::sample::Index>(),
            tail in prop::collection::vec(any::<u8>(), 0..64),
            reseal_crcs in any::<bool>(),
        ) {
            let seeds = seed_corpus(FRAME_TARGET);
            let mut bytes = seeds[seed % seeds.len()].1.clone();
            for (at, xor) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= xor;
            }
            bytes.truncate(cut.index(bytes.len() + 1));
            bytes.extend(tail);
            if let (true, Some(stream)) = (reseal_crcs, bytes.get_mut(1..)) {
                reseal(stream);
            }
            fuzz_frames(&bytes);
        }

        #[test]
        fn random_bytes_run_clean(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
            fuzz_frames(&bytes);
        }
    }
}
