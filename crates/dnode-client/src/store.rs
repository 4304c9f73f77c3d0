//! [`RemoteChunkStore`]: a [`ChunkStore`] on a d.node over the network, blocking, for the
//! engine's own threads. This module turns [`ChunkStore`] calls into requests and answers back
//! into typed [`ChunkError`]s; the connection, its timeouts and its backoff are the link's
//! (`link.rs`).
//!
//! Differences from [`weft_chunk::LocalChunkStore`] that come from the wire contract
//! (docs/design/protocol.md): `put` replaces a chunk already stored under the key (so it never
//! returns `Exists`, and a retry after a lost answer succeeds), `delete` of an absent chunk is
//! `Ok`, and `fence` to an epoch older than the family's fence is `Fenced`. Every request is
//! idempotent under these rules, which lets the link resend one whose connection broke.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use weft_chunk::{
    ChunkError, ChunkInfo, ChunkKey, ChunkMeta, ChunkStore, Epoch, ScrubReport, StoreStat,
};
use weft_proto::{
    DiskStat, EncodedFrame, ErrorCode, ProtoError, Request, Response, CHUNK_MAX_BYTES,
    LIST_LIMIT_MAX, SYNC_KEYS_MAX,
};

use crate::link::Link;
use crate::options::ClientOptions;
use crate::wire::{self, RequestContext};

/// A d.node's chunk store, reached over TCP. Cheap to share (`Arc`); one connection per store.
#[derive(Debug)]
pub struct RemoteChunkStore {
    node_id: String,
    addr: SocketAddr,
    link: Link,
}

impl RemoteChunkStore {
    /// A store on d.node `node_id` (checked at the handshake; empty accepts whichever node
    /// answers) at `addr`, in cluster `cluster_id`. Nothing is connected until the first call.
    pub fn new(
        node_id: String,
        addr: SocketAddr,
        cluster_id: String,
        options: ClientOptions,
    ) -> RemoteChunkStore {
        let name = if node_id.is_empty() {
            addr.to_string()
        } else {
            format!("{node_id}@{addr}")
        };
        RemoteChunkStore {
            link: Link::new(name, node_id.clone(), addr, cluster_id, options),
            node_id,
            addr,
        }
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether a connection is open now (no I/O).
    pub fn is_connected(&self) -> bool {
        self.link.is_connected()
    }

    /// One round trip to the d.node; returns its duration.
    pub fn ping(&self) -> Result<Duration, ChunkError> {
        let start = Instant::now();
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&Request::Ping, id)
        })?;
        self.answer(response, &RequestContext::default(), |r| {
            matches!(r, Response::Pong).then_some(())
        })?;
        Ok(start.elapsed())
    }

    /// The d.node's own id and its disks, as `Stat` reports them.
    pub fn node_stat(&self) -> Result<(String, Vec<DiskStat>), ChunkError> {
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&Request::Stat, id)
        })?;
        self.answer(response, &RequestContext::default(), |r| match r {
            Response::NodeStat { node_id, disks } => Some((node_id, disks)),
            _ => None,
        })
    }

    /// The answer's payload via `pick`, or the typed error it carries.
    fn answer<T>(
        &self,
        response: Response,
        cx: &RequestContext,
        pick: impl FnOnce(Response) -> Option<T>,
    ) -> Result<T, ChunkError> {
        if let Response::Error { code, message } = response {
            return Err(wire::chunk_error_for(code, message, &self.name(), cx));
        }
        let kind = response.kind();
        pick(response).ok_or_else(|| ChunkError::Io {
            what: format!("d.node {}", self.name()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("unexpected answer {kind}"),
            ),
        })
    }

    /// Read one piece (at most [`CHUNK_MAX_BYTES`]) into `out`; `cx` describes the whole read.
    fn read_piece(
        &self,
        key: &ChunkKey,
        offset_bytes: u64,
        out: &mut [u8],
        cx: &RequestContext,
    ) -> Result<(), ChunkError> {
        let request = Request::ReadChunk {
            key: wire::key_to_wire(key),
            offset_bytes,
            len_bytes: u32::try_from(out.len()).expect("pieces are at most CHUNK_MAX_BYTES"),
        };
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&request, id)
        })?;
        if let Response::Error {
            code: ErrorCode::BadRequest,
            ..
        } = &response
        {
            return Err(self.out_of_range(cx));
        }
        let bytes = self.answer(response, cx, |r| match r {
            Response::Data { bytes } => Some(bytes),
            _ => None,
        })?;
        if bytes.len() != out.len() {
            return Err(ChunkError::Io {
                what: format!("d.node {}", self.name()),
                source: std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("answered {} bytes for a read of {}", bytes.len(), out.len()),
                ),
            });
        }
        out.copy_from_slice(&bytes);
        Ok(())
    }

    /// A read the d.node called a bad request: `OutOfRange` with the chunk's length if the
    /// chunk exists (the wire has no such code).
    fn out_of_range(&self, cx: &RequestContext) -> ChunkError {
        let key = cx.key.unwrap_or(ChunkKey::new(0, 0, 0));
        match self.info(&key) {
            Ok(info) => ChunkError::OutOfRange {
                key,
                offset_bytes: cx.offset_bytes,
                length_bytes: cx.length_bytes,
                len_bytes: info.len_bytes,
            },
            Err(e) => e,
        }
    }
}

impl RemoteChunkStore {
    /// A `PutChunk`; `durable`: on disk when answered, else written until a `SyncChunks`.
    fn put_as(&self, meta: &ChunkMeta, data: &[u8], durable: bool) -> Result<(), ChunkError> {
        if data.len() > CHUNK_MAX_BYTES {
            return Err(ChunkError::OutOfRange {
                key: meta.key,
                offset_bytes: 0,
                length_bytes: data.len() as u64,
                len_bytes: CHUNK_MAX_BYTES as u64,
            });
        }
        let cx = RequestContext::for_key(&meta.key).with_epoch(meta.epoch);
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            let (header, fields) = wire::put_frame(meta, data, durable, id)?;
            Ok(EncodedFrame {
                header,
                bulk: data,
                meta: fields,
            })
        })?;
        self.answer(response, &cx, |r| matches!(r, Response::Ok).then_some(()))
    }
}

impl ChunkStore for RemoteChunkStore {
    /// `node@addr` (or the address alone when the node id is not known).
    fn name(&self) -> String {
        if self.node_id.is_empty() {
            self.addr.to_string()
        } else {
            format!("{}@{}", self.node_id, self.addr)
        }
    }

    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError> {
        self.put_as(meta, data, true)
    }

    /// Written into the d.node's page cache, durable at a later [`ChunkStore::sync`].
    fn put_unsynced(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        _known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_as(meta, data, false)
    }

    /// One `SyncChunks` per [`SYNC_KEYS_MAX`] keys. A key the d.node does not hold (a power
    /// cut lost what an unsynced put wrote) fails the sync, and the caller puts it again.
    fn sync(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        for group in keys.chunks(SYNC_KEYS_MAX) {
            let cx = RequestContext::for_key(&group[0]);
            let request = Request::SyncChunks {
                keys: group.iter().map(wire::key_to_wire).collect(),
            };
            let response = self.link.call(self.link.options().request_timeout, &|id| {
                encode(&request, id)
            })?;
            self.answer(response, &cx, |r| matches!(r, Response::Ok).then_some(()))?;
        }
        Ok(())
    }

    /// A durable put: the d.node replaces whatever it holds under the key (a complete chunk
    /// under the name at every instant is the d.node store's business).
    fn put_replacing(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        _known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_as(meta, data, true)
    }

    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError> {
        let cx = RequestContext::for_key(key).with_range(offset_bytes, buf.len() as u64);
        if buf.is_empty() {
            // Still asked, so a read past the end fails as it does locally.
            return self.read_piece(key, offset_bytes, buf, &cx);
        }
        let mut done = 0u64;
        for piece in buf.chunks_mut(CHUNK_MAX_BYTES) {
            // Errors describe the whole read (`cx`), not the piece.
            self.read_piece(key, offset_bytes + done, piece, &cx)?;
            done += piece.len() as u64;
        }
        Ok(())
    }

    /// By listing one entry from the key on (the wire has no single-chunk lookup).
    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError> {
        let cx = RequestContext::for_key(key);
        let request = Request::ListChunks {
            family: key.family,
            start_after: key_before(key).map(|k| wire::key_to_wire(&k)),
            limit: 1,
        };
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&request, id)
        })?;
        let chunks = self.answer(response, &cx, |r| match r {
            Response::ChunkList { chunks, .. } => Some(chunks),
            _ => None,
        })?;
        chunks
            .first()
            .map(wire::info_from_wire)
            .filter(|info| info.meta.key == *key)
            .ok_or(ChunkError::Missing { key: *key })
    }

    /// `Ok` also when the chunk is absent (the wire contract).
    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError> {
        let cx = RequestContext::for_key(key).with_epoch(epoch);
        let request = Request::DeleteChunk {
            key: wire::key_to_wire(key),
            epoch,
        };
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&request, id)
        })?;
        self.answer(response, &cx, |r| matches!(r, Response::Ok).then_some(()))
    }

    fn list(&self, family: u64) -> Result<Vec<ChunkInfo>, ChunkError> {
        let cx = RequestContext::for_family(family);
        let mut out: Vec<ChunkInfo> = Vec::new();
        loop {
            let start_after = out.last().map(|c| wire::key_to_wire(&c.meta.key));
            let request = Request::ListChunks {
                family,
                start_after,
                limit: LIST_LIMIT_MAX,
            };
            let response = self.link.call(self.link.options().request_timeout, &|id| {
                encode(&request, id)
            })?;
            let (chunks, more) = self.answer(response, &cx, |r| match r {
                Response::ChunkList { chunks, more } => Some((chunks, more)),
                _ => None,
            })?;
            let before = out.len();
            for c in &chunks {
                let info = wire::info_from_wire(c);
                // Pages must go forward within the family, or we would loop forever.
                let forward = out.last().is_none_or(|l| l.meta.key < info.meta.key);
                if !forward || info.meta.key.family != family {
                    return Err(ChunkError::Io {
                        what: format!("d.node {}", self.name()),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidData,
                            format!("listing of family {family:x} out of order"),
                        ),
                    });
                }
                out.push(info);
            }
            if !more || out.len() == before {
                return Ok(out);
            }
        }
    }

    fn families(&self) -> Result<Vec<u64>, ChunkError> {
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&Request::ListFamilies, id)
        })?;
        self.answer(response, &RequestContext::default(), |r| match r {
            Response::Families { families } => Some(families),
            _ => None,
        })
    }

    /// `Fenced` when the family's fence is already above `epoch` (the wire contract).
    fn fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        let cx = RequestContext::for_family(family).with_epoch(epoch);
        let request = Request::Fence { family, epoch };
        let response = self.link.call(self.link.options().request_timeout, &|id| {
            encode(&request, id)
        })?;
        self.answer(response, &cx, |r| matches!(r, Response::Ok).then_some(()))
    }

    /// Summed over the d.node's disks; a disk of capacity 0 means "not known", and makes the
    /// total `None`. `bad_chunks` is not carried by the wire (0).
    fn stat(&self) -> Result<StoreStat, ChunkError> {
        let (_, disks) = self.node_stat()?;
        let capacity_bytes = disks
            .iter()
            .map(|d| (d.capacity_bytes > 0).then_some(d.capacity_bytes))
            .sum::<Option<u64>>();
        Ok(StoreStat {
            capacity_bytes,
            used_bytes: disks.iter().map(|d| d.used_bytes).sum(),
            chunks: disks.iter().map(|d| d.chunks).sum(),
            bad_chunks: 0,
        })
    }

    /// Bounded by the scrub timeout, not the request timeout.
    fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError> {
        let cx = family.map(RequestContext::for_family).unwrap_or_default();
        let request = Request::Scrub { family };
        let response = self.link.call(self.link.options().scrub_timeout, &|id| {
            encode(&request, id)
        })?;
        self.answer(response, &cx, |r| match r {
            Response::ScrubReport { checked, corrupt } => Some(ScrubReport {
                checked,
                corrupt: corrupt.iter().map(wire::key_from_wire).collect(),
            }),
            _ => None,
        })
    }

    fn reconnect_now(&self) {
        self.link.reconnect_now();
    }
}

fn encode(request: &Request, request_id: u64) -> Result<EncodedFrame<'_>, ProtoError> {
    request.encode_vectored(request_id)
}

/// The key just before `key` in key order within its family (`None` for the first).
fn key_before(key: &ChunkKey) -> Option<ChunkKey> {
    if key.index > 0 {
        Some(ChunkKey::new(key.family, key.segment, key.index - 1))
    } else if key.segment > 0 {
        Some(ChunkKey::new(key.family, key.segment - 1, u8::MAX))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_before_steps_back_over_segments() {
        assert_eq!(
            key_before(&ChunkKey::new(1, 5, 2)),
            Some(ChunkKey::new(1, 5, 1))
        );
        assert_eq!(
            key_before(&ChunkKey::new(1, 5, 0)),
            Some(ChunkKey::new(1, 4, u8::MAX))
        );
        assert_eq!(key_before(&ChunkKey::new(1, 0, 0)), None);
    }
}
