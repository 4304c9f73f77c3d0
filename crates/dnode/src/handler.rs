//! Executing one decoded request against the d.node's store: the d.node's side of the wire
//! contract (docs/design/protocol.md). No sockets here: a request in, a response out.
//!
//! Where the protocol differs from [`weft_chunk::ChunkStore`]'s local semantics, this module
//! adapts: a put replaces a chunk already stored under its key (an identical one is kept as
//! is, so a retried put costs a read, not a rewrite); deleting an absent chunk is `Ok`; a fence
//! to an epoch older than the family's fence is `Fenced`; a sync of a chunk not held is
//! `Missing` (locally it is ignored). Every failure maps to an `Error`
//! response in one place ([`error_response`]).

use std::sync::Arc;

use weft_chunk::{ChunkError, ChunkMeta, ChunkStore};
use weft_dnode_client::wire;
use weft_proto::{
    DiskStat, ErrorCode, Request, Response, FAMILIES_MAX, LIST_LIMIT_MAX, PATH_MAX_BYTES,
    SCRUB_CORRUPT_MAX,
};

use crate::multi_disk::MultiDiskStore;
use crate::scrubber::Scrubber;

/// Tries of a replacing put: put, find it exists, delete, put again. More than one round only
/// when another put of the same key races with this one.
const PUT_REPLACE_ATTEMPTS_MAX: u32 = 3;

/// What requests execute against.
#[derive(Debug)]
pub(crate) struct Handler {
    pub node_id: String,
    pub store: Arc<MultiDiskStore>,
    pub scrubber: Arc<Scrubber>,
}

impl Handler {
    /// The response to one request (never `HelloOk`: the handshake is the connection's).
    pub(crate) fn execute(&self, request: Request) -> Response {
        let store = &*self.store;
        let result = match request {
            Request::Hello { .. } => {
                return Response::error(ErrorCode::BadRequest, "hello after the handshake")
            }
            Request::PutChunk {
                key,
                durable,
                epoch,
                codec_id,
                data_chunks,
                parity_chunks,
                stripe_len_bytes,
                data,
            } => {
                let meta = ChunkMeta {
                    key: wire::key_from_wire(&key),
                    epoch,
                    codec_id,
                    data_chunks,
                    parity_chunks,
                    stripe_len_bytes,
                };
                put_replacing(store, &meta, &data, durable).map(|()| Response::Ok)
            }
            Request::SyncChunks { keys } => sync_held(store, &keys).map(|()| Response::Ok),
            Request::ReadChunk {
                key,
                offset_bytes,
                len_bytes,
            } => {
                // At most CHUNK_MAX_BYTES: checked by the decoder.
                let mut bytes = vec![0u8; len_bytes as usize];
                store
                    .read(&wire::key_from_wire(&key), offset_bytes, &mut bytes)
                    .map(|()| Response::Data { bytes })
            }
            Request::DeleteChunk { key, epoch } => {
                match store.delete(&wire::key_from_wire(&key), epoch) {
                    Ok(()) | Err(ChunkError::Missing { .. }) => Ok(Response::Ok),
                    Err(e) => Err(e),
                }
            }
            Request::ListChunks {
                family,
                start_after,
                limit,
            } => list_page(store, family, start_after, limit),
            Request::ListFamilies => store.families().and_then(|families| {
                if families.len() > FAMILIES_MAX {
                    return Err(too_many("families", families.len(), FAMILIES_MAX));
                }
                Ok(Response::Families { families })
            }),
            Request::Fence { family, epoch } => store
                .check_fence(family, epoch)
                .and_then(|()| store.fence(family, epoch))
                .map(|()| Response::Ok),
            Request::Stat => self.node_stat(),
            Request::Scrub { family } => {
                self.scrubber
                    .scrub(family)
                    .map(|report| Response::ScrubReport {
                        checked: report.checked,
                        corrupt: report
                            .corrupt
                            .iter()
                            .take(SCRUB_CORRUPT_MAX)
                            .map(wire::key_to_wire)
                            .collect(),
                    })
            }
            Request::Ping => Ok(Response::Pong),
        };
        result.unwrap_or_else(|e| error_response(&e))
    }

    fn node_stat(&self) -> Result<Response, ChunkError> {
        let disks = self.store.disks()?;
        Ok(Response::NodeStat {
            node_id: self.node_id.clone(),
            disks: disks
                .into_iter()
                .map(|d| DiskStat {
                    path: truncate(d.path, PATH_MAX_BYTES),
                    capacity_bytes: d.capacity_bytes,
                    used_bytes: d.stat.used_bytes,
                    chunks: d.stat.chunks,
                })
                .collect(),
        })
    }
}

/// The `Error` response for a failed operation: the one place chunk errors meet the wire.
pub(crate) fn error_response(e: &ChunkError) -> Response {
    match e {
        ChunkError::Corrupt { .. } | ChunkError::Io { .. } => {
            tracing::warn!(error = %e, "request failed");
        }
        _ => tracing::debug!(error = %e, "request refused"),
    }
    Response::error(wire::error_code_for(e), e.to_string())
}

/// Store a chunk, replacing a different one under the same key (see the module doc).
fn put_replacing(
    store: &dyn ChunkStore,
    meta: &ChunkMeta,
    data: &[u8],
    durable: bool,
) -> Result<(), ChunkError> {
    for _ in 0..PUT_REPLACE_ATTEMPTS_MAX {
        let put = if durable {
            store.put(meta, data)
        } else {
            store.put_unsynced(meta, data, &[])
        };
        match put {
            Err(ChunkError::Exists { key }) => {
                if holds_exactly(store, meta, data)? {
                    return Ok(());
                }
                match store.delete(&key, meta.epoch) {
                    Ok(()) | Err(ChunkError::Missing { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
            other => return other,
        }
    }
    Err(ChunkError::Unavailable {
        node: store.name(),
        detail: format!("chunk {} is being replaced concurrently", meta.key),
    })
}

/// `SyncChunks`: every key must be held (a chunk an unsynced put wrote and a power cut lost
/// is `Missing`, so the client puts it again instead of taking it for durable), then one group
/// sync makes them durable; keys already durable cost nothing.
fn sync_held(store: &dyn ChunkStore, keys: &[weft_proto::ChunkKey]) -> Result<(), ChunkError> {
    let keys: Vec<weft_chunk::ChunkKey> = keys.iter().map(wire::key_from_wire).collect();
    for key in &keys {
        store.info(key)?;
    }
    store.sync(&keys)
}

/// Whether the stored chunk under `meta.key` is this one, bytes and all.
fn holds_exactly(
    store: &dyn ChunkStore,
    meta: &ChunkMeta,
    data: &[u8],
) -> Result<bool, ChunkError> {
    match store.info(&meta.key) {
        Ok(info) if info.meta == *meta && info.len_bytes == data.len() as u64 => {
            let mut stored = vec![0u8; data.len()];
            match store.read(&meta.key, 0, &mut stored) {
                Ok(()) => Ok(stored == data),
                Err(ChunkError::Missing { .. } | ChunkError::Corrupt { .. }) => Ok(false),
                Err(e) => Err(e),
            }
        }
        Ok(_) | Err(ChunkError::Missing { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// One page of a family's chunks, strictly after `start_after`.
fn list_page(
    store: &dyn ChunkStore,
    family: u64,
    start_after: Option<weft_proto::ChunkKey>,
    limit: u32,
) -> Result<Response, ChunkError> {
    let all = store.list(family)?;
    let start = match start_after {
        Some(k) => {
            let after = wire::key_from_wire(&k);
            all.partition_point(|c| c.meta.key <= after)
        }
        None => 0,
    };
    // At most LIST_LIMIT_MAX: checked by the decoder; min() keeps it so if that changes.
    let limit = limit.min(LIST_LIMIT_MAX) as usize;
    let rest = &all[start..];
    let chunks: Vec<weft_proto::ChunkInfo> =
        rest.iter().take(limit).map(wire::info_to_wire).collect();
    Ok(Response::ChunkList {
        more: rest.len() > chunks.len(),
        chunks,
    })
}

fn too_many(what: &str, len: usize, max: usize) -> ChunkError {
    ChunkError::Io {
        what: format!("listing {what}"),
        source: std::io::Error::other(format!("{len} entries, over the protocol's {max}")),
    }
}

/// `s` cut to at most `max` bytes at a char boundary.
fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Counters;
    use weft_chunk::{ChunkKey, LocalChunkStore, SimDisk};

    fn handler() -> Handler {
        let store = Arc::new(MultiDiskStore::from_stores(vec![(
            "sim0".into(),
            LocalChunkStore::open(Arc::new(SimDisk::new()), None).expect("open"),
        )]));
        Handler {
            node_id: "dn-test".into(),
            scrubber: Arc::new(Scrubber::new(store.clone(), Arc::new(Counters::default()))),
            store,
        }
    }

    fn put(family: u64, segment: u64, epoch: u64, byte: u8) -> Request {
        wire::put_request(
            &ChunkMeta {
                key: ChunkKey::new(family, segment, 0),
                epoch,
                codec_id: 0,
                data_chunks: 1,
                parity_chunks: 0,
                stripe_len_bytes: 100,
            },
            vec![byte; 100],
            true,
        )
    }

    fn code(r: Response) -> ErrorCode {
        match r {
            Response::Error { code, .. } => code,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn puts_replace_deletes_of_absent_chunks_succeed_and_old_fences_are_refused() {
        let h = handler();
        assert_eq!(h.execute(put(1, 1, 0, 7)), Response::Ok);
        assert_eq!(h.execute(put(1, 1, 0, 7)), Response::Ok, "a retry");
        assert_eq!(h.execute(put(1, 1, 0, 8)), Response::Ok, "a replacement");
        let read = Request::ReadChunk {
            key: weft_proto::ChunkKey {
                family: 1,
                segment: 1,
                index: 0,
            },
            offset_bytes: 0,
            len_bytes: 100,
        };
        assert_eq!(
            h.execute(read),
            Response::Data {
                bytes: vec![8u8; 100]
            }
        );
        let delete = |segment| Request::DeleteChunk {
            key: weft_proto::ChunkKey {
                family: 1,
                segment,
                index: 0,
            },
            epoch: 0,
        };
        assert_eq!(h.execute(delete(1)), Response::Ok);
        assert_eq!(h.execute(delete(1)), Response::Ok, "already gone");
        assert_eq!(
            h.execute(Request::Fence {
                family: 1,
                epoch: 5
            }),
            Response::Ok
        );
        assert_eq!(
            h.execute(Request::Fence {
                family: 1,
                epoch: 5
            }),
            Response::Ok
        );
        assert_eq!(
            code(h.execute(Request::Fence {
                family: 1,
                epoch: 4
            })),
            ErrorCode::Fenced { current_epoch: 5 }
        );
        assert_eq!(
            code(h.execute(put(1, 2, 4, 0))),
            ErrorCode::Fenced { current_epoch: 5 }
        );
        assert_eq!(
            code(h.execute(delete(1))),
            ErrorCode::Fenced { current_epoch: 5 }
        );
    }

    #[test]
    fn listings_page_strictly_after_the_start_key() {
        let h = handler();
        for s in 0..10 {
            assert_eq!(h.execute(put(3, s, 0, 1)), Response::Ok);
        }
        let page = |start_after, limit| match h.execute(Request::ListChunks {
            family: 3,
            start_after,
            limit,
        }) {
            Response::ChunkList { chunks, more } => (
                chunks.iter().map(|c| c.key.segment).collect::<Vec<_>>(),
                more,
            ),
            other => panic!("{other:?}"),
        };
        assert_eq!(page(None, 4), (vec![0, 1, 2, 3], true));
        let after = Some(weft_proto::ChunkKey {
            family: 3,
            segment: 7,
            index: 0,
        });
        assert_eq!(page(after, 4), (vec![8, 9], false));
        let bad_range = Request::ReadChunk {
            key: weft_proto::ChunkKey {
                family: 3,
                segment: 0,
                index: 0,
            },
            offset_bytes: 90,
            len_bytes: 20,
        };
        assert_eq!(code(h.execute(bad_range)), ErrorCode::BadRequest);
    }

    #[test]
    fn unsynced_puts_are_readable_and_a_sync_of_a_chunk_not_held_is_missing() {
        let h = handler();
        let unsynced = |segment, byte| match put(2, segment, 0, byte) {
            Request::PutChunk {
                key,
                epoch,
                codec_id,
                data_chunks,
                parity_chunks,
                stripe_len_bytes,
                data,
                ..
            } => Request::PutChunk {
                key,
                durable: false,
                epoch,
                codec_id,
                data_chunks,
                parity_chunks,
                stripe_len_bytes,
                data,
            },
            other => other,
        };
        let key = |segment| weft_proto::ChunkKey {
            family: 2,
            segment,
            index: 0,
        };
        assert_eq!(h.execute(unsynced(1, 5)), Response::Ok);
        assert_eq!(h.execute(unsynced(1, 5)), Response::Ok, "a retry");
        assert_eq!(h.execute(unsynced(2, 6)), Response::Ok);
        let read = Request::ReadChunk {
            key: key(1),
            offset_bytes: 0,
            len_bytes: 100,
        };
        assert_eq!(
            h.execute(read),
            Response::Data {
                bytes: vec![5u8; 100]
            },
            "written, not yet synced: readable"
        );
        let sync = |segments: &[u64]| Request::SyncChunks {
            keys: segments.iter().map(|s| key(*s)).collect(),
        };
        assert_eq!(h.execute(sync(&[1, 2])), Response::Ok);
        assert_eq!(h.execute(sync(&[1, 2])), Response::Ok, "already durable");
        assert_eq!(code(h.execute(sync(&[1, 3]))), ErrorCode::Missing);
    }
}
