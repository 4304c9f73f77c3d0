//! The c.node <-> d.node wire protocol, sans-IO.
//!
//! This crate owns the bytes between a compute node (c.node, the client) and a storage node
//! (d.node, the server): the frame layout and its streaming decoders ([`frame`]), the message
//! kinds ([`kind`]), the request and response messages and their payload encodings
//! ([`message`]), the protocol version, its fingerprint and the handshake ([`handshake`]), and
//! the limits both sides enforce ([`wire`]). It never touches a socket, a disk, a clock or a
//! thread: decoders take byte slices and return frames, "need more bytes" or an error;
//! encoders append to caller-owned buffers. The tokio glue lives in the daemons.
//!
//! Invariants kept here: nothing a peer sends can make these functions panic, or allocate more
//! than [`PAYLOAD_MAX_BYTES`] per frame (checked before allocating); every frame is CRC32C
//! protected (header and payload separately); nothing that breaks a limit is ever encoded.
//! The protocol is described in `docs/design/protocol.md`.

pub mod error;
pub mod frame;
pub mod fuzzing;
pub mod handshake;
pub mod kind;
pub mod message;
pub mod samples;
pub mod wire;

pub use error::ProtoError;
pub use frame::{decode_frame, encode_frame, Frame, FrameDecoder, FrameHeader};
pub use handshake::{
    answer_hello, check_hello_ok, hello, protocol_fingerprint, refusal_for, HandshakeError,
    HelloOutcome, PROTOCOL_VERSION,
};
pub use kind::{Direction, MessageKind, MESSAGE_KINDS};
pub use message::{ChunkInfo, ChunkKey, DiskStat, EncodedFrame, ErrorCode, Request, Response};
pub use wire::{
    CHUNK_MAX_BYTES, DISKS_MAX, ERROR_MESSAGE_MAX_BYTES, FAMILIES_MAX, FRAME_HEADER_LEN_BYTES,
    FRAME_MAGIC, LIST_LIMIT_MAX, NAME_MAX_BYTES, PATH_MAX_BYTES, PAYLOAD_MAX_BYTES,
    SCRUB_CORRUPT_MAX, SYNC_KEYS_MAX,
};
