//! [`ProtoError`]: why bytes from a peer are not a valid frame or message, or why a message we
//! were asked to send breaks a protocol limit. Plain data, no I/O.
//!
//! Every decode error means the connection cannot be trusted any further: the caller closes it
//! (a d.node may first send the reply [`crate::handshake::refusal_for`] suggests). Errors found
//! after the header CRC checked out carry the frame's `request_id`.

use crate::kind::{Direction, MessageKind};

/// A frame or message that breaks the protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProtoError {
    /// The first 4 bytes are not `WFTP`: not our protocol, or the stream lost sync.
    #[error("frame magic {magic:#010x} is not WFTP")]
    BadMagic { magic: u32 },
    /// The header CRC32C does not match the header bytes.
    #[error("frame header carries crc32c {carried:#010x}, its bytes give {computed:#010x}")]
    HeaderCrcMismatch { carried: u32, computed: u32 },
    /// The frame is of another protocol version.
    #[error("request {request_id}: frame is protocol version {version}, we speak {supported}")]
    VersionMismatch {
        version: u16,
        supported: u16,
        request_id: u64,
    },
    /// The kind number is not one of this version's messages.
    #[error("request {request_id}: unknown message kind {kind:#06x}")]
    UnknownKind { kind: u16, request_id: u64 },
    /// The payload length is over [`crate::PAYLOAD_MAX_BYTES`]; refused before allocating.
    #[error(
        "request {request_id}: payload of {len_bytes} bytes is over the {max_bytes} byte limit"
    )]
    PayloadTooLong {
        len_bytes: u64,
        max_bytes: u64,
        request_id: u64,
    },
    /// The payload CRC32C does not match the payload bytes.
    #[error("request {request_id}: header carries payload crc32c {carried:#010x}, payload gives {computed:#010x}")]
    PayloadCrcMismatch {
        carried: u32,
        computed: u32,
        request_id: u64,
    },
    /// A payload buffer handed to [`crate::FrameHeader::into_frame`] is not the announced length.
    #[error("request {request_id}: payload is {actual_bytes} bytes, header says {expected_bytes}")]
    PayloadLenMismatch {
        expected_bytes: u64,
        actual_bytes: u64,
        request_id: u64,
    },
    /// A request kind was decoded as a response, or the other way round.
    #[error("request {request_id}: {kind} is not a {expected:?}")]
    WrongDirection {
        kind: MessageKind,
        expected: Direction,
        request_id: u64,
    },
    /// The payload is not a valid postcard encoding of the kind's fields.
    #[error("request {request_id}: {kind} payload does not decode")]
    Malformed {
        kind: MessageKind,
        request_id: u64,
        #[source]
        source: postcard::Error,
    },
    /// The payload decodes but has bytes left over.
    #[error(
        "request {request_id}: {kind} payload has {extra_bytes} bytes that are not part of it"
    )]
    TrailingBytes {
        kind: MessageKind,
        request_id: u64,
        extra_bytes: u64,
    },
    /// A bulk payload (`PutChunk`, `Data`) is shorter than its trailer, or the trailer's
    /// fixed-part length is longer than what precedes it.
    #[error("request {request_id}: {kind} bulk trailer says {meta_len_bytes} bytes of fields in a {payload_len_bytes} byte payload")]
    BadBulkTrailer {
        kind: MessageKind,
        meta_len_bytes: u32,
        payload_len_bytes: u64,
        request_id: u64,
    },
    /// A field is longer than its protocol limit (bytes for data and strings, entries for lists).
    #[error("request {request_id}: {kind} field {field} is {len}, over the limit of {max}")]
    LimitExceeded {
        kind: MessageKind,
        field: &'static str,
        len: u64,
        max: u64,
        request_id: u64,
    },
}

impl ProtoError {
    /// The request id of the frame the error is about, when its header was intact (CRC checked).
    pub fn request_id(&self) -> Option<u64> {
        match self {
            ProtoError::BadMagic { .. } | ProtoError::HeaderCrcMismatch { .. } => None,
            ProtoError::VersionMismatch { request_id, .. }
            | ProtoError::UnknownKind { request_id, .. }
            | ProtoError::PayloadTooLong { request_id, .. }
            | ProtoError::PayloadCrcMismatch { request_id, .. }
            | ProtoError::PayloadLenMismatch { request_id, .. }
            | ProtoError::WrongDirection { request_id, .. }
            | ProtoError::Malformed { request_id, .. }
            | ProtoError::TrailingBytes { request_id, .. }
            | ProtoError::BadBulkTrailer { request_id, .. }
            | ProtoError::LimitExceeded { request_id, .. } => Some(*request_id),
        }
    }
}
