//! The mapping between weft-chunk's types and weft-proto's messages, shared by the client
//! ([`crate::RemoteChunkStore`]) and the d.node (weft-dnode), so both sides agree in one place:
//! keys and chunk infos, [`ChunkError`] <-> [`ErrorCode`], and the zero-copy `PutChunk` frame.
//!
//! No I/O here. What the wire cannot carry is decided here too: the proto has no `Exists` or
//! `OutOfRange` code (a put replaces, a bad range is `BadRequest`), and an error response names
//! no key, so the client rebuilds the typed error from the request it sent ([`RequestContext`]).

use weft_chunk::{ChunkError, ChunkInfo, ChunkKey, ChunkMeta, Epoch};
use weft_proto::{ErrorCode, FrameHeader, MessageKind, ProtoError, Request};

/// A chunk key on the wire.
pub fn key_to_wire(key: &ChunkKey) -> weft_proto::ChunkKey {
    weft_proto::ChunkKey {
        family: key.family,
        segment: key.segment,
        index: key.index,
    }
}

/// A chunk key from the wire.
pub fn key_from_wire(key: &weft_proto::ChunkKey) -> ChunkKey {
    ChunkKey::new(key.family, key.segment, key.index)
}

/// A stored chunk's listing entry on the wire.
pub fn info_to_wire(info: &ChunkInfo) -> weft_proto::ChunkInfo {
    let m = &info.meta;
    weft_proto::ChunkInfo {
        key: key_to_wire(&m.key),
        len_bytes: info.len_bytes,
        epoch: m.epoch,
        codec_id: m.codec_id,
        data_chunks: m.data_chunks,
        parity_chunks: m.parity_chunks,
        stripe_len_bytes: m.stripe_len_bytes,
    }
}

/// A listing entry from the wire.
pub fn info_from_wire(info: &weft_proto::ChunkInfo) -> ChunkInfo {
    ChunkInfo {
        meta: ChunkMeta {
            key: key_from_wire(&info.key),
            epoch: info.epoch,
            codec_id: info.codec_id,
            data_chunks: info.data_chunks,
            parity_chunks: info.parity_chunks,
            stripe_len_bytes: info.stripe_len_bytes,
        },
        len_bytes: info.len_bytes,
    }
}

/// The `PutChunk` request for `meta` and `data` (`durable`: on disk when answered, else written
/// until a `SyncChunks`).
pub fn put_request(meta: &ChunkMeta, data: Vec<u8>, durable: bool) -> Request {
    Request::PutChunk {
        key: key_to_wire(&meta.key),
        durable,
        epoch: meta.epoch,
        codec_id: meta.codec_id,
        data_chunks: meta.data_chunks,
        parity_chunks: meta.parity_chunks,
        stripe_len_bytes: meta.stripe_len_bytes,
        data,
    }
}

/// The `PutChunk` frame for `meta` with `data` borrowed, as (header, fields): write header,
/// then `data`, then fields. Same bytes as `put_request(meta, data.to_vec()).encode(..)`, without
/// copying up to 32 MiB into a `Request` first. Relies on the documented bulk layout
/// (`bulk ‖ postcard(fields) ‖ u32 fields length`, docs/design/protocol.md): the fields part does
/// not depend on the bulk, so it is taken from the same request with empty data.
pub fn put_frame(
    meta: &ChunkMeta,
    data: &[u8],
    durable: bool,
    request_id: u64,
) -> Result<([u8; weft_proto::FRAME_HEADER_LEN_BYTES], Vec<u8>), ProtoError> {
    if data.len() > weft_proto::CHUNK_MAX_BYTES {
        return Err(ProtoError::LimitExceeded {
            kind: MessageKind::PutChunk,
            field: "data",
            len: data.len() as u64,
            max: weft_proto::CHUNK_MAX_BYTES as u64,
            request_id,
        });
    }
    let empty = put_request(meta, Vec::new(), durable);
    let fields = empty.encode_vectored(request_id)?.meta;
    let header = FrameHeader::for_payload(MessageKind::PutChunk, request_id, &[data, &fields])?;
    Ok((header.encode(), fields))
}

/// The code a d.node answers a failed chunk operation with; the message carries the detail.
/// `Exists` cannot happen on the wire (a put replaces) and `OutOfRange` is a bad request.
pub fn error_code_for(err: &ChunkError) -> ErrorCode {
    match err {
        ChunkError::Missing { .. } => ErrorCode::Missing,
        ChunkError::NoSpace { .. } => ErrorCode::NoSpace,
        ChunkError::Fenced { current, .. } => ErrorCode::Fenced {
            current_epoch: *current,
        },
        ChunkError::Unavailable { .. } => ErrorCode::Unavailable,
        ChunkError::Corrupt { .. } => ErrorCode::Corrupt,
        ChunkError::Exists { .. } | ChunkError::OutOfRange { .. } => ErrorCode::BadRequest,
        _ => ErrorCode::Io,
    }
}

/// What the client asked, to rebuild a typed [`ChunkError`] from an error code (the wire names
/// no key, epoch or offset).
#[derive(Debug, Clone, Copy, Default)]
pub struct RequestContext {
    pub key: Option<ChunkKey>,
    pub family: Option<u64>,
    pub epoch: Epoch,
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

impl RequestContext {
    pub fn for_key(key: &ChunkKey) -> RequestContext {
        RequestContext {
            key: Some(*key),
            family: Some(key.family),
            ..RequestContext::default()
        }
    }

    pub fn for_family(family: u64) -> RequestContext {
        RequestContext {
            family: Some(family),
            ..RequestContext::default()
        }
    }

    pub fn with_epoch(mut self, epoch: Epoch) -> RequestContext {
        self.epoch = epoch;
        self
    }

    pub fn with_range(mut self, offset_bytes: u64, length_bytes: u64) -> RequestContext {
        self.offset_bytes = offset_bytes;
        self.length_bytes = length_bytes;
        self
    }
}

/// The [`ChunkError`] for an `Error { code, message }` answer from d.node `node` to the request
/// described by `cx`. `BadRequest` comes back as an `Io` error of kind `InvalidInput` (the
/// caller turns a read's into `OutOfRange` when it knows the chunk's length).
pub fn chunk_error_for(
    code: ErrorCode,
    message: String,
    node: &str,
    cx: &RequestContext,
) -> ChunkError {
    let key = cx
        .key
        .unwrap_or(ChunkKey::new(cx.family.unwrap_or(0), 0, 0));
    let io = |kind: std::io::ErrorKind, message: String| ChunkError::Io {
        what: format!("d.node {node}"),
        source: std::io::Error::new(kind, message),
    };
    match code {
        ErrorCode::Missing => ChunkError::Missing { key },
        ErrorCode::NoSpace => ChunkError::NoSpace {
            key,
            store: format!("d.node {node}: {message}"),
        },
        ErrorCode::Fenced { current_epoch } => ChunkError::Fenced {
            family: cx.family.unwrap_or(key.family),
            epoch: cx.epoch,
            current: current_epoch,
        },
        ErrorCode::Corrupt => ChunkError::Corrupt {
            key,
            offset_bytes: cx.offset_bytes,
            detail: format!("d.node {node}: {message}"),
        },
        ErrorCode::Unavailable | ErrorCode::VersionMismatch | ErrorCode::WrongCluster => {
            ChunkError::Unavailable {
                node: node.to_owned(),
                detail: format!("{code:?}: {message}"),
            }
        }
        ErrorCode::BadRequest => io(std::io::ErrorKind::InvalidInput, message),
        ErrorCode::Io => io(std::io::ErrorKind::Other, message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The borrowed-data put frame is byte for byte the proto's own encoding, whatever the
        /// fields and length (varint widths change the fields part).
        #[test]
        fn put_frames_match_the_proto_encoding(
            family: u64, segment: u64, index: u8, epoch: u64, codec_id: u8,
            data_chunks: u8, parity_chunks: u8, stripe_len_bytes: u64, request_id: u64,
            durable: bool,
            data in proptest::collection::vec(any::<u8>(), 0..20_000),
        ) {
            let meta = ChunkMeta {
                key: ChunkKey::new(family, segment, index),
                epoch, codec_id, data_chunks, parity_chunks, stripe_len_bytes,
            };
            let mut expected = Vec::new();
            put_request(&meta, data.clone(), durable).encode(request_id, &mut expected).expect("encode");
            let (header, fields) = put_frame(&meta, &data, durable, request_id).expect("frame");
            prop_assert_eq!([&header[..], &data, &fields].concat(), expected);
        }
    }

    fn meta() -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(0xfeed, 42, 3),
            epoch: 7,
            codec_id: 2,
            data_chunks: 4,
            parity_chunks: 2,
            stripe_len_bytes: 123_456,
        }
    }

    #[test]
    fn put_frame_is_the_same_bytes_as_the_encoded_request() {
        for len in [0usize, 1, 4096, 100_000] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let mut expected = Vec::new();
            put_request(&meta(), data.clone(), true)
                .encode(99, &mut expected)
                .expect("encode");
            let (header, fields) = put_frame(&meta(), &data, true, 99).expect("frame");
            let got: Vec<u8> = [&header[..], &data, &fields].concat();
            assert_eq!(got, expected, "len {len}");
        }
    }

    #[test]
    fn oversize_puts_are_refused_before_encoding() {
        let data = vec![0u8; weft_proto::CHUNK_MAX_BYTES + 1];
        assert!(matches!(
            put_frame(&meta(), &data, true, 1),
            Err(ProtoError::LimitExceeded { .. })
        ));
    }

    #[test]
    fn infos_and_keys_round_trip() {
        let info = ChunkInfo {
            meta: meta(),
            len_bytes: 4096,
        };
        assert_eq!(info_from_wire(&info_to_wire(&info)), info);
    }

    #[test]
    fn typed_errors_survive_the_wire() {
        let key = ChunkKey::new(5, 6, 1);
        let cx = RequestContext::for_key(&key)
            .with_epoch(3)
            .with_range(8192, 10);
        let through = |e: ChunkError| {
            let code = error_code_for(&e);
            chunk_error_for(code, e.to_string(), "dn-1", &cx)
        };
        assert!(
            matches!(through(ChunkError::Missing { key }), ChunkError::Missing { key: k } if k == key)
        );
        assert!(through(ChunkError::NoSpace {
            key,
            store: "d0".into()
        })
        .is_no_space());
        assert!(matches!(
            through(ChunkError::Fenced {
                family: 5,
                epoch: 3,
                current: 9
            }),
            ChunkError::Fenced {
                family: 5,
                epoch: 3,
                current: 9
            }
        ));
        assert!(matches!(
            through(ChunkError::Corrupt {
                key,
                offset_bytes: 8192,
                detail: "x".into()
            }),
            ChunkError::Corrupt {
                offset_bytes: 8192,
                ..
            }
        ));
        assert!(matches!(
            through(ChunkError::io("disk", std::io::Error::other("eio"))),
            ChunkError::Io { .. }
        ));
    }
}
