//! [`ReadBatch`]: a connection's chunk reads answered by its own reader thread, a burst at a
//! time, through io_uring ([`crate::ring_reads`]), instead of one worker thread per read.
//!
//! The reader takes every small `ReadChunk` it decodes into the batch; just before it would
//! block on the socket (no complete frame left in its buffer) or when the batch is full, it
//! performs the batch (one system call submits the reads and waits for them), verifies each
//! read's pages as a chunk read always does, and answers them all in one socket write.
//! Anything else, larger reads, and every read on a machine without io_uring go to the worker
//! pool as before, so a slow request never stalls the burst behind it for long.

use weft_chunk::ReadPlan;
use weft_dnode_client::wire;
use weft_proto::{Request, Response};

use crate::handler::error_response;
use crate::multi_disk::MultiDiskStore;
use crate::ring_reads::{RingReads, RING_ENTRIES};

/// Reads up to this size are batched; larger ones (repair, sequential streams) take a worker,
/// so the reader's socket is not left unread for a long transfer.
const BATCH_READ_MAX_BYTES: u32 = 256 * 1024;
/// Bytes of reads in one batch: the memory one connection's burst may hold.
const BATCH_BYTES_MAX: u64 = 8 * 1024 * 1024;

const _: () = assert!(BATCH_READ_MAX_BYTES as u64 <= BATCH_BYTES_MAX);

/// See the module doc.
#[derive(Debug)]
pub(crate) struct ReadBatch {
    /// `None`: no io_uring on this machine; nothing is batched.
    ring: Option<RingReads>,
    pending: Vec<(u64, ReadPlan)>,
    bytes: u64,
}

impl ReadBatch {
    pub(crate) fn new() -> ReadBatch {
        let ring = match RingReads::new() {
            Ok(ring) => Some(ring),
            Err(e) => {
                tracing::debug!(error = %e, "no io_uring: reads go through the worker pool");
                None
            }
        };
        ReadBatch {
            ring,
            pending: Vec::new(),
            bytes: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub(crate) fn is_full(&self) -> bool {
        self.pending.len() >= RING_ENTRIES as usize || self.bytes >= BATCH_BYTES_MAX
    }

    /// Take `request` into the batch (`None`), or give it back for the worker pool.
    pub(crate) fn take(
        &mut self,
        request_id: u64,
        request: Request,
        store: &MultiDiskStore,
    ) -> Option<Request> {
        let usable = self.ring.as_ref().is_some_and(RingReads::is_usable);
        let Request::ReadChunk {
            key,
            offset_bytes,
            len_bytes,
        } = &request
        else {
            return Some(request);
        };
        if !usable || *len_bytes > BATCH_READ_MAX_BYTES || self.is_full() {
            return Some(request);
        }
        // Errors (missing, out of range) and reads without a file: the worker's path gives
        // the same answer.
        match store.plan_read(
            &wire::key_from_wire(key),
            *offset_bytes,
            *len_bytes as usize,
        ) {
            Ok(Some(plan)) => {
                self.bytes += plan.span_bytes as u64;
                self.pending.push((request_id, plan));
                None
            }
            Ok(None) | Err(_) => Some(request),
        }
    }

    /// Perform the batch: the answers, by request id.
    pub(crate) fn perform(&mut self) -> Vec<(u64, Response)> {
        let pending = std::mem::take(&mut self.pending);
        self.bytes = 0;
        if pending.is_empty() {
            return Vec::new();
        }
        let ring = self.ring.as_mut().expect("only batched with a ring");
        let plans: Vec<&ReadPlan> = pending.iter().map(|(_, p)| p).collect();
        let outcomes = ring.read_all(&plans);
        pending
            .iter()
            .zip(outcomes)
            .map(|((id, plan), outcome)| {
                let answer = outcome
                    .map_err(|e| plan.io_error(e))
                    .and_then(|got| plan.finish(&got));
                let response = match answer {
                    Ok(bytes) => Response::Data { bytes },
                    Err(e) => error_response(&e),
                };
                (*id, response)
            })
            .collect()
    }
}
