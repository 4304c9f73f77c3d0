//! Chunk I/O the c.node sends to each d.node: a [`ChunkStore`] wrapper that counts puts, reads
//! and deletes and their bytes, for `/metrics` and `weft dnode info`. It survives reconnects
//! of the store underneath (the counts are kept by the placement per d.node).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_chunk::{
    ChunkError, ChunkInfo, ChunkKey, ChunkMeta, ChunkStore, Epoch, ScrubReport, StoreStat,
};

/// Counts of chunk requests to one d.node since this c.node started.
#[derive(Debug, Default)]
pub struct ChunkIoCounters {
    puts: AtomicU64,
    put_bytes: AtomicU64,
    reads: AtomicU64,
    read_bytes: AtomicU64,
    deletes: AtomicU64,
    errors: AtomicU64,
}

/// A copy of [`ChunkIoCounters`].
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ChunkIoTotals {
    pub puts: u64,
    pub put_bytes: u64,
    pub reads: u64,
    pub read_bytes: u64,
    pub deletes: u64,
    pub errors: u64,
}

impl ChunkIoCounters {
    pub fn totals(&self) -> ChunkIoTotals {
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ChunkIoTotals {
            puts: load(&self.puts),
            put_bytes: load(&self.put_bytes),
            reads: load(&self.reads),
            read_bytes: load(&self.read_bytes),
            deletes: load(&self.deletes),
            errors: load(&self.errors),
        }
    }

    fn count<T>(
        &self,
        ops: &AtomicU64,
        bytes: Option<(&AtomicU64, u64)>,
        result: Result<T, ChunkError>,
    ) -> Result<T, ChunkError> {
        ops.fetch_add(1, Ordering::Relaxed);
        match &result {
            Ok(_) => {
                if let Some((counter, n)) = bytes {
                    counter.fetch_add(n, Ordering::Relaxed);
                }
            }
            Err(_) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        result
    }
}

/// A chunk store whose puts, reads and deletes are counted.
#[derive(Debug)]
pub struct CountingChunkStore {
    inner: Arc<dyn ChunkStore>,
    counters: Arc<ChunkIoCounters>,
}

impl CountingChunkStore {
    pub fn new(inner: Arc<dyn ChunkStore>, counters: Arc<ChunkIoCounters>) -> CountingChunkStore {
        CountingChunkStore { inner, counters }
    }
}

impl ChunkStore for CountingChunkStore {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError> {
        let c = &self.counters;
        let len = data.len() as u64;
        c.count(
            &c.puts,
            Some((&c.put_bytes, len)),
            self.inner.put(meta, data),
        )
    }

    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError> {
        let c = &self.counters;
        let len = buf.len() as u64;
        let result = self.inner.read(key, offset_bytes, buf);
        c.count(&c.reads, Some((&c.read_bytes, len)), result)
    }

    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError> {
        self.inner.info(key)
    }

    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError> {
        let c = &self.counters;
        c.count(&c.deletes, None, self.inner.delete(key, epoch))
    }

    fn list(&self, family: u64) -> Result<Vec<ChunkInfo>, ChunkError> {
        self.inner.list(family)
    }

    fn families(&self) -> Result<Vec<u64>, ChunkError> {
        self.inner.families()
    }

    fn fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        self.inner.fence(family, epoch)
    }

    fn stat(&self) -> Result<StoreStat, ChunkError> {
        self.inner.stat()
    }

    fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError> {
        self.inner.scrub(family)
    }

    fn reconnect_now(&self) {
        self.inner.reconnect_now();
    }
}
