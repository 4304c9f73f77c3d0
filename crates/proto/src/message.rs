//! Messages: the [`Request`]s a c.node sends, the [`Response`]s a d.node answers with, and their
//! payload encodings. Sans-IO: a message encodes into bytes (or borrowed slices for a vectored
//! write) and decodes from a [`Frame`]; nothing here touches a socket or a disk.
//!
//! Payloads are postcard (serde) encodings of the variant's fields, in declaration order, with
//! no enum tag (the frame's kind says which variant it is). The two messages that carry chunk
//! bytes, `PutChunk` and `Data`, use a bulk layout instead:
//!
//! ```text
//! bulk bytes ‖ postcard(fixed fields) ‖ fixed-part length: u32 little-endian
//! ```
//!
//! Why bulk first and the fixed part last: a received payload is one `Vec<u8>`, and the bulk is
//! its prefix, so [`Request::decode`] hands it out with `Vec::truncate`, no copy and no memmove
//! of up to [`CHUNK_MAX_BYTES`]. With the fixed part first (or a postcard `Vec<u8>` field) the
//! bytes would be copied or shifted once more per chunk. On the sending side
//! [`Request::encode_vectored`] returns the bulk as a borrowed slice next to the header and
//! fixed part, so a writer that supports vectored writes never copies it either.
//!
//! Every limit in [`crate::wire`] is checked on encode (so we never send what a peer refuses) and
//! on decode. Decoding never allocates more than the payload it was given.

use serde::{Deserialize, Serialize};

use self::codec::{u32_len, Cx};
use crate::error::ProtoError;
use crate::frame::Frame;
use crate::kind::{Direction, MessageKind};
use crate::wire::{
    CHUNK_MAX_BYTES, DISKS_MAX, ERROR_MESSAGE_MAX_BYTES, FAMILIES_MAX, FRAME_HEADER_LEN_BYTES,
    LIST_LIMIT_MAX, NAME_MAX_BYTES, PATH_MAX_BYTES, SCRUB_CORRUPT_MAX, SYNC_KEYS_MAX,
};

/// Names one stored chunk: chunk `index` (0-based, data chunks first, then parity) of the stripe
/// holding segment `segment` of family `family`. Ordered by family, segment, index: the order
/// `ListChunks` pages in.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
pub struct ChunkKey {
    pub family: u64,
    pub segment: u64,
    pub index: u8,
}

/// What a d.node knows about a stored chunk (one `ChunkList` entry): its length and the stripe
/// geometry it was written with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ChunkInfo {
    pub key: ChunkKey,
    pub len_bytes: u64,
    /// The epoch of the put that wrote it.
    pub epoch: u64,
    pub codec_id: u8,
    pub data_chunks: u8,
    pub parity_chunks: u8,
    pub stripe_len_bytes: u64,
}

/// One disk of a d.node (one `NodeStat` entry).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DiskStat {
    /// At most [`PATH_MAX_BYTES`].
    pub path: String,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub chunks: u64,
}

/// Why a d.node refused a request; the `code` of [`Response::Error`]. Variant order is the wire
/// encoding (postcard variant index): append only, and bump the protocol version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// No chunk under that key (ReadChunk).
    Missing,
    /// The d.node's disks are full (PutChunk).
    NoSpace,
    /// The request's epoch is older than the family's fence; `current_epoch` is the fence.
    Fenced { current_epoch: u64 },
    /// The d.node cannot serve now (starting, shutting down, disk offline); retry elsewhere/later.
    Unavailable,
    /// The chunk's stored checksum does not match its bytes (ReadChunk); repair from parity.
    Corrupt,
    /// The request is well-formed but makes no sense (range past the chunk end, first request
    /// not Hello, ...).
    BadRequest,
    /// A disk I/O error.
    Io,
    /// Handshake: the client speaks another protocol version. The d.node closes after sending.
    VersionMismatch,
    /// Handshake: the client belongs to another cluster. The d.node closes after sending.
    WrongCluster,
}

/// c.node -> d.node. Each is sent with a request id the response echoes; a client may pipeline
/// many on one connection, and responses may come back in any order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Must be the first frame on a connection. See [`crate::handshake`].
    Hello {
        protocol_version: u16,
        /// At most [`NAME_MAX_BYTES`].
        cluster_id: String,
        /// Free text for logs; at most [`NAME_MAX_BYTES`].
        client_name: String,
    },
    /// Store a chunk, replacing any chunk under `key`. -> `Ok`. `durable`: on disk when
    /// answered; else *written* (in the d.node's page cache: surviving a kill of any process,
    /// not a power cut) until a `SyncChunks` naming it.
    PutChunk {
        key: ChunkKey,
        durable: bool,
        /// Refused with `Fenced` if older than the family's fence.
        epoch: u64,
        codec_id: u8,
        data_chunks: u8,
        parity_chunks: u8,
        stripe_len_bytes: u64,
        /// At most [`CHUNK_MAX_BYTES`].
        data: Vec<u8>,
    },
    /// Read `len_bytes` (at most [`CHUNK_MAX_BYTES`]) from `offset_bytes` of a chunk. -> `Data`.
    ReadChunk {
        key: ChunkKey,
        offset_bytes: u64,
        len_bytes: u32,
    },
    /// Remove a chunk (Ok also if it is absent). -> `Ok`.
    DeleteChunk { key: ChunkKey, epoch: u64 },
    /// Up to `limit` (at most [`LIST_LIMIT_MAX`]) chunks of `family` in key order, strictly
    /// after `start_after` (from the start if `None`). -> `ChunkList`.
    ListChunks {
        family: u64,
        start_after: Option<ChunkKey>,
        limit: u32,
    },
    /// Every family the d.node holds chunks of. -> `Families`.
    ListFamilies,
    /// Raise the family's fence to `epoch`: later puts and deletes with an older epoch are
    /// refused. Refused with `Fenced` if the fence is already above `epoch`. -> `Ok`.
    Fence { family: u64, epoch: u64 },
    /// -> `NodeStat`.
    Stat,
    /// Verify stored checksums of one family's chunks, or all if `None`. -> `ScrubReport`.
    Scrub { family: Option<u64> },
    /// -> `Pong`.
    Ping,
    /// Make the chunks of `keys` (at most [`SYNC_KEYS_MAX`]) that non-durable `PutChunk`s
    /// wrote durable: one group commit for many. -> `Ok` once every one is durable; `Missing`
    /// if the d.node does not hold one (a power cut lost it: the client puts it again).
    SyncChunks { keys: Vec<ChunkKey> },
}

/// d.node -> c.node, sent with the request id of the request it answers. Any request may be
/// answered with `Error`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Response {
    /// Answers `Hello`: the d.node accepted the connection.
    HelloOk {
        protocol_version: u16,
        /// At most [`NAME_MAX_BYTES`].
        node_id: String,
        /// At most [`NAME_MAX_BYTES`].
        cluster_id: String,
    },
    /// Answers `PutChunk` (the chunk is durable), `DeleteChunk`, `Fence`.
    Ok,
    /// Answers `ReadChunk`: exactly the requested bytes (at most [`CHUNK_MAX_BYTES`]).
    Data { bytes: Vec<u8> },
    /// Answers `ListChunks`. `more`: chunks after the last entry exist.
    ChunkList { chunks: Vec<ChunkInfo>, more: bool },
    /// Answers `ListFamilies`, ascending, at most [`FAMILIES_MAX`].
    Families { families: Vec<u64> },
    /// Answers `Stat`. At most [`DISKS_MAX`] disks.
    NodeStat {
        node_id: String,
        disks: Vec<DiskStat>,
    },
    /// Answers `Scrub`: chunks read, and the keys of those that failed their checksum (at most
    /// [`SCRUB_CORRUPT_MAX`]; more are left out).
    ScrubReport {
        checked: u64,
        corrupt: Vec<ChunkKey>,
    },
    /// Answers `Ping`.
    Pong,
    /// Refuses any request. `message` is for humans, at most [`ERROR_MESSAGE_MAX_BYTES`].
    Error { code: ErrorCode, message: String },
}

/// An encoded frame as three slices to write in order: `header`, `bulk`, `meta`. `bulk` borrows
/// the message's chunk bytes (empty for messages without bulk), so nothing large is copied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EncodedFrame<'a> {
    pub header: [u8; FRAME_HEADER_LEN_BYTES],
    pub bulk: &'a [u8],
    /// The rest of the payload: the postcard fields (and the bulk trailer, if there is bulk).
    pub meta: Vec<u8>,
}

impl EncodedFrame<'_> {
    /// Total bytes on the wire.
    pub fn len_bytes(&self) -> usize {
        self.header.len() + self.bulk.len() + self.meta.len()
    }

    /// Appends the three parts to `out`, giving the same bytes as `encode`.
    pub fn write_to(&self, out: &mut Vec<u8>) {
        out.reserve(self.len_bytes());
        out.extend_from_slice(&self.header);
        out.extend_from_slice(self.bulk);
        out.extend_from_slice(&self.meta);
    }
}

impl Request {
    pub fn kind(&self) -> MessageKind {
        match self {
            Request::Hello { .. } => MessageKind::Hello,
            Request::PutChunk { .. } => MessageKind::PutChunk,
            Request::ReadChunk { .. } => MessageKind::ReadChunk,
            Request::DeleteChunk { .. } => MessageKind::DeleteChunk,
            Request::ListChunks { .. } => MessageKind::ListChunks,
            Request::ListFamilies => MessageKind::ListFamilies,
            Request::Fence { .. } => MessageKind::Fence,
            Request::Stat => MessageKind::Stat,
            Request::Scrub { .. } => MessageKind::Scrub,
            Request::Ping => MessageKind::Ping,
            Request::SyncChunks { .. } => MessageKind::SyncChunks,
        }
    }

    /// Appends the frame to `out`. Fails, leaving `out` untouched, if a field is over its limit.
    pub fn encode(&self, request_id: u64, out: &mut Vec<u8>) -> Result<(), ProtoError> {
        self.encode_vectored(request_id)?.write_to(out);
        Ok(())
    }

    /// The frame as header, borrowed bulk data and the rest, for a vectored write.
    pub fn encode_vectored(&self, request_id: u64) -> Result<EncodedFrame<'_>, ProtoError> {
        let cx = Cx::new(self.kind(), request_id);
        self.check_limits(&cx)?;
        let mut meta = Vec::new();
        let bulk: &[u8] = match self {
            Request::Hello {
                protocol_version,
                cluster_id,
                client_name,
            } => cx.put(&(protocol_version, cluster_id, client_name), &mut meta, &[])?,
            Request::PutChunk {
                key,
                durable,
                epoch,
                codec_id,
                data_chunks,
                parity_chunks,
                stripe_len_bytes,
                data,
            } => cx.put_bulk(
                &(
                    key,
                    durable,
                    epoch,
                    codec_id,
                    data_chunks,
                    parity_chunks,
                    stripe_len_bytes,
                ),
                &mut meta,
                data,
            )?,
            Request::ReadChunk {
                key,
                offset_bytes,
                len_bytes,
            } => cx.put(&(key, offset_bytes, len_bytes), &mut meta, &[])?,
            Request::DeleteChunk { key, epoch } => cx.put(&(key, epoch), &mut meta, &[])?,
            Request::ListChunks {
                family,
                start_after,
                limit,
            } => cx.put(&(family, start_after, limit), &mut meta, &[])?,
            Request::ListFamilies | Request::Stat | Request::Ping => &[],
            Request::Fence { family, epoch } => cx.put(&(family, epoch), &mut meta, &[])?,
            Request::Scrub { family } => cx.put(family, &mut meta, &[])?,
            Request::SyncChunks { keys } => cx.put(keys, &mut meta, &[])?,
        };
        cx.finish(bulk, meta)
    }

    /// Decodes a request frame. Takes the frame by value: `PutChunk` keeps its payload buffer as
    /// `data` without copying. Fails on a response kind, a malformed payload or a broken limit.
    pub fn decode(frame: Frame) -> Result<Self, ProtoError> {
        let Frame {
            kind,
            request_id,
            mut payload,
        } = frame;
        let cx = Cx::new(kind, request_id);
        let request = match kind {
            MessageKind::Hello => {
                let (protocol_version, cluster_id, client_name) = cx.take(&payload)?;
                Request::Hello {
                    protocol_version,
                    cluster_id,
                    client_name,
                }
            }
            MessageKind::PutChunk => {
                let (bulk_len, meta) = cx.split_bulk(&payload)?;
                let (key, durable, epoch, codec_id, data_chunks, parity_chunks, stripe_len_bytes) =
                    cx.take(meta)?;
                payload.truncate(bulk_len);
                Request::PutChunk {
                    key,
                    durable,
                    epoch,
                    codec_id,
                    data_chunks,
                    parity_chunks,
                    stripe_len_bytes,
                    data: payload,
                }
            }
            MessageKind::ReadChunk => {
                let (key, offset_bytes, len_bytes) = cx.take(&payload)?;
                Request::ReadChunk {
                    key,
                    offset_bytes,
                    len_bytes,
                }
            }
            MessageKind::DeleteChunk => {
                let (key, epoch) = cx.take(&payload)?;
                Request::DeleteChunk { key, epoch }
            }
            MessageKind::ListChunks => {
                let (family, start_after, limit) = cx.take(&payload)?;
                Request::ListChunks {
                    family,
                    start_after,
                    limit,
                }
            }
            MessageKind::ListFamilies => cx.take::<()>(&payload).map(|()| Request::ListFamilies)?,
            MessageKind::Fence => {
                let (family, epoch) = cx.take(&payload)?;
                Request::Fence { family, epoch }
            }
            MessageKind::Stat => cx.take::<()>(&payload).map(|()| Request::Stat)?,
            MessageKind::Scrub => Request::Scrub {
                family: cx.take(&payload)?,
            },
            MessageKind::Ping => cx.take::<()>(&payload).map(|()| Request::Ping)?,
            MessageKind::SyncChunks => Request::SyncChunks {
                keys: cx.take(&payload)?,
            },
            MessageKind::HelloOk
            | MessageKind::Ok
            | MessageKind::Data
            | MessageKind::ChunkList
            | MessageKind::Families
            | MessageKind::NodeStat
            | MessageKind::ScrubReport
            | MessageKind::Pong
            | MessageKind::Error => return Err(cx.wrong_direction(Direction::Request)),
        };
        request.check_limits(&cx)?;
        Ok(request)
    }

    fn check_limits(&self, cx: &Cx) -> Result<(), ProtoError> {
        match self {
            Request::Hello {
                cluster_id,
                client_name,
                ..
            } => {
                cx.at_most("cluster_id", cluster_id.len(), NAME_MAX_BYTES)?;
                cx.at_most("client_name", client_name.len(), NAME_MAX_BYTES)
            }
            Request::PutChunk { data, .. } => cx.at_most("data", data.len(), CHUNK_MAX_BYTES),
            Request::ReadChunk { len_bytes, .. } => {
                cx.at_most("len_bytes", u32_len(*len_bytes), CHUNK_MAX_BYTES)
            }
            Request::ListChunks { limit, .. } => {
                cx.at_most("limit", u32_len(*limit), u32_len(LIST_LIMIT_MAX))
            }
            Request::SyncChunks { keys } => cx.at_most("keys", keys.len(), SYNC_KEYS_MAX),
            Request::DeleteChunk { .. }
            | Request::ListFamilies
            | Request::Fence { .. }
            | Request::Stat
            | Request::Scrub { .. }
            | Request::Ping => Ok(()),
        }
    }
}

impl Response {
    /// An `Error` response; `message` is cut (at a char boundary) to
    /// [`ERROR_MESSAGE_MAX_BYTES`] so it always encodes.
    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        let mut message = message.into();
        if message.len() > ERROR_MESSAGE_MAX_BYTES {
            let mut end = ERROR_MESSAGE_MAX_BYTES;
            while !message.is_char_boundary(end) {
                end -= 1;
            }
            message.truncate(end);
        }
        Response::Error { code, message }
    }

    pub fn kind(&self) -> MessageKind {
        match self {
            Response::HelloOk { .. } => MessageKind::HelloOk,
            Response::Ok => MessageKind::Ok,
            Response::Data { .. } => MessageKind::Data,
            Response::ChunkList { .. } => MessageKind::ChunkList,
            Response::Families { .. } => MessageKind::Families,
            Response::NodeStat { .. } => MessageKind::NodeStat,
            Response::ScrubReport { .. } => MessageKind::ScrubReport,
            Response::Pong => MessageKind::Pong,
            Response::Error { .. } => MessageKind::Error,
        }
    }

    /// Appends the frame to `out`. Fails, leaving `out` untouched, if a field is over its limit.
    pub fn encode(&self, request_id: u64, out: &mut Vec<u8>) -> Result<(), ProtoError> {
        self.encode_vectored(request_id)?.write_to(out);
        Ok(())
    }

    /// The frame as header, borrowed bulk data and the rest, for a vectored write.
    pub fn encode_vectored(&self, request_id: u64) -> Result<EncodedFrame<'_>, ProtoError> {
        let cx = Cx::new(self.kind(), request_id);
        self.check_limits(&cx)?;
        let mut meta = Vec::new();
        let bulk: &[u8] = match self {
            Response::HelloOk {
                protocol_version,
                node_id,
                cluster_id,
            } => cx.put(&(protocol_version, node_id, cluster_id), &mut meta, &[])?,
            Response::Ok | Response::Pong => &[],
            Response::Data { bytes } => cx.put_bulk(&(), &mut meta, bytes)?,
            Response::ChunkList { chunks, more } => cx.put(&(chunks, more), &mut meta, &[])?,
            Response::Families { families } => cx.put(families, &mut meta, &[])?,
            Response::NodeStat { node_id, disks } => cx.put(&(node_id, disks), &mut meta, &[])?,
            Response::ScrubReport { checked, corrupt } => {
                cx.put(&(checked, corrupt), &mut meta, &[])?
            }
            Response::Error { code, message } => cx.put(&(code, message), &mut meta, &[])?,
        };
        cx.finish(bulk, meta)
    }

    /// Decodes a response frame. Takes the frame by value: `Data` keeps its payload buffer as
    /// `bytes` without copying. Fails on a request kind, a malformed payload or a broken limit.
    pub fn decode(frame: Frame) -> Result<Self, ProtoError> {
        let Frame {
            kind,
            request_id,
            mut payload,
        } = frame;
        let cx = Cx::new(kind, request_id);
        let response = match kind {
            MessageKind::HelloOk => {
                let (protocol_version, node_id, cluster_id) = cx.take(&payload)?;
                Response::HelloOk {
                    protocol_version,
                    node_id,
                    cluster_id,
                }
            }
            MessageKind::Ok => cx.take::<()>(&payload).map(|()| Response::Ok)?,
            MessageKind::Data => {
                let (bulk_len, meta) = cx.split_bulk(&payload)?;
                cx.take::<()>(meta)?;
                payload.truncate(bulk_len);
                Response::Data { bytes: payload }
            }
            MessageKind::ChunkList => {
                let (chunks, more) = cx.take(&payload)?;
                Response::ChunkList { chunks, more }
            }
            MessageKind::Families => Response::Families {
                families: cx.take(&payload)?,
            },
            MessageKind::NodeStat => {
                let (node_id, disks) = cx.take(&payload)?;
                Response::NodeStat { node_id, disks }
            }
            MessageKind::ScrubReport => {
                let (checked, corrupt) = cx.take(&payload)?;
                Response::ScrubReport { checked, corrupt }
            }
            MessageKind::Pong => cx.take::<()>(&payload).map(|()| Response::Pong)?,
            MessageKind::Error => {
                let (code, message) = cx.take(&payload)?;
                Response::Error { code, message }
            }
            MessageKind::Hello
            | MessageKind::PutChunk
            | MessageKind::ReadChunk
            | MessageKind::DeleteChunk
            | MessageKind::ListChunks
            | MessageKind::ListFamilies
            | MessageKind::Fence
            | MessageKind::Stat
            | MessageKind::Scrub
            | MessageKind::Ping
            | MessageKind::SyncChunks => return Err(cx.wrong_direction(Direction::Response)),
        };
        response.check_limits(&cx)?;
        Ok(response)
    }

    fn check_limits(&self, cx: &Cx) -> Result<(), ProtoError> {
        match self {
            Response::HelloOk {
                node_id,
                cluster_id,
                ..
            } => {
                cx.at_most("node_id", node_id.len(), NAME_MAX_BYTES)?;
                cx.at_most("cluster_id", cluster_id.len(), NAME_MAX_BYTES)
            }
            Response::Data { bytes } => cx.at_most("bytes", bytes.len(), CHUNK_MAX_BYTES),
            Response::ChunkList { chunks, .. } => {
                cx.at_most("chunks", chunks.len(), u32_len(LIST_LIMIT_MAX))
            }
            Response::Families { families } => cx.at_most("families", families.len(), FAMILIES_MAX),
            Response::NodeStat { node_id, disks } => {
                cx.at_most("node_id", node_id.len(), NAME_MAX_BYTES)?;
                cx.at_most("disks", disks.len(), DISKS_MAX)?;
                disks
                    .iter()
                    .try_for_each(|d| cx.at_most("disks.path", d.path.len(), PATH_MAX_BYTES))
            }
            Response::ScrubReport { corrupt, .. } => {
                cx.at_most("corrupt", corrupt.len(), SCRUB_CORRUPT_MAX)
            }
            Response::Error { message, .. } => {
                cx.at_most("message", message.len(), ERROR_MESSAGE_MAX_BYTES)
            }
            Response::Ok | Response::Pong => Ok(()),
        }
    }
}

mod codec;

#[cfg(test)]
mod tests;
