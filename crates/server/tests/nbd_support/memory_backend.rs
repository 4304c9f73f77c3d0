//! An in-memory [`ExportBackend`] for NBD tests and the `memserve` example.
//!
//! Each export is a sparse array of 64 KiB chunks behind their own mutexes, so concurrent
//! requests to different chunks do not contend. Unallocated chunks read as zeroes and report
//! as holes. Not a model of the engine: no journal, flush is a no-op. With
//! [`MemoryExport::acknowledge_later`], writes and flushes handed on with `write_then` /
//! `flush_then` are acknowledged a little later on another thread, as a mirrored c.node's are
//! once its partner answers.

#![allow(dead_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use weft_server::backend::{
    ExportBackend, ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone, OpenError,
    EXPORT_BLOCK_SIZE_BYTES,
};
use weft_server::sub_block::{BlockLocks, SubBlockExport};

/// How much later [`MemoryExport::acknowledge_later`] acknowledges: about a round trip to
/// a partner on a busy machine.
const ACK_LATER_DELAY: std::time::Duration = std::time::Duration::from_millis(2);

/// Allocation unit of the memory export.
const CHUNK_BYTES: u64 = 64 * 1024;

/// A set of memory exports; the first is the default. Exports with 512-byte logical blocks
/// are served through the sub-block layer, as the engine's are.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    exports: Vec<Arc<MemoryExport>>,
    locks: Arc<BlockLocks>,
}

#[derive(Debug)]
pub struct MemoryExport {
    info: ExportInfo,
    chunks: Vec<Mutex<Option<Box<[u8]>>>>,
    gone: AtomicBool,
    pub flushes: AtomicU64,
    /// `Some(result)`: writes and flushes handed on are acknowledged later, with `result`.
    later: Mutex<Option<Result<(), ExportIoError>>>,
    /// Writes and flushes acknowledged later so far (counted before the reply may leave).
    pub acked_later: Arc<AtomicU64>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a 4Kn export; `size_bytes` is rounded up to whole blocks.
    pub fn with_export(self, name: &str, size_bytes: u64, read_only: bool) -> Self {
        self.with_export_blocks(name, size_bytes, read_only, EXPORT_BLOCK_SIZE_BYTES)
    }

    /// Add an export with `logical_block_size_bytes` (512 or 4096).
    pub fn with_export_blocks(
        mut self,
        name: &str,
        size_bytes: u64,
        read_only: bool,
        logical_block_size_bytes: u32,
    ) -> Self {
        let block = u64::from(EXPORT_BLOCK_SIZE_BYTES);
        let size_bytes = size_bytes.div_ceil(block) * block;
        let chunk_count = usize::try_from(size_bytes.div_ceil(CHUNK_BYTES)).expect("fits");
        self.exports.push(Arc::new(MemoryExport {
            info: ExportInfo {
                name: name.to_string(),
                description: format!("memory export {name}"),
                size_bytes,
                read_only,
                logical_block_size_bytes,
            },
            chunks: (0..chunk_count).map(|_| Mutex::new(None)).collect(),
            gone: AtomicBool::new(false),
            flushes: AtomicU64::new(0),
            later: Mutex::new(None),
            acked_later: Arc::new(AtomicU64::new(0)),
        }));
        self
    }

    pub fn export(&self, name: &str) -> Arc<MemoryExport> {
        Arc::clone(
            self.exports
                .iter()
                .find(|e| e.info.name == name)
                .expect("export exists"),
        )
    }
}

impl ExportBackend for MemoryBackend {
    fn list_exports(&self) -> Vec<ExportInfo> {
        self.exports
            .iter()
            .filter(|e| !e.is_gone())
            .map(|e| e.info.clone())
            .collect()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError> {
        let (index, export) = self
            .exports
            .iter()
            .enumerate()
            .find(|(_, e)| e.info.name == name && !e.is_gone())
            .ok_or_else(|| OpenError::UnknownExport {
                name: name.to_string(),
            })?;
        if export.info.logical_block_size_bytes == EXPORT_BLOCK_SIZE_BYTES {
            return Ok(Arc::clone(export) as Arc<dyn ExportHandle>);
        }
        Ok(Arc::new(SubBlockExport::new(
            Arc::clone(export),
            Arc::clone(&self.locks),
            index as u64,
        )))
    }
}

impl MemoryExport {
    /// Fill the export from offset 0, ignoring read-only (test setup of snapshots).
    pub fn fill_unchecked(&self, data: &[u8]) {
        assert!(data.len() as u64 <= self.info.size_bytes);
        self.for_each_piece(0, data.len() as u64, |index, within, range| {
            let mut chunk = self.chunks[index].lock();
            let target =
                chunk.get_or_insert_with(|| vec![0u8; CHUNK_BYTES as usize].into_boxed_slice());
            target[within..within + range.len()].copy_from_slice(&data[range]);
        });
    }

    /// From now on, acknowledge writes and flushes after `ACK_LATER_DELAY`, with `result` when
    /// they succeeded here: those handed on (`write_then`, `flush_then`) on another thread,
    /// the others (`write`, `flush`) on the calling one.
    pub fn acknowledge_later(&self, result: Result<(), ExportIoError>) {
        *self.later.lock() = Some(result);
    }

    fn store(&self, offset_bytes: u64, data: &[u8]) -> Result<(), ExportIoError> {
        self.check(offset_bytes, data.len() as u64, true)?;
        self.for_each_piece(offset_bytes, data.len() as u64, |index, within, range| {
            let mut chunk = self.chunks[index].lock();
            let target =
                chunk.get_or_insert_with(|| vec![0u8; CHUNK_BYTES as usize].into_boxed_slice());
            target[within..within + range.len()].copy_from_slice(&data[range]);
        });
        Ok(())
    }

    fn flush_here(&self) -> Result<(), ExportIoError> {
        if self.is_gone() {
            return Err(ExportIoError::Gone);
        }
        self.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// The outcome `here`, after waiting for the later acknowledgement when configured (the
    /// blocking calls).
    fn finish_now(&self, here: Result<(), ExportIoError>) -> Result<(), ExportIoError> {
        let Some(later) = self.later.lock().clone() else {
            return here;
        };
        std::thread::sleep(ACK_LATER_DELAY);
        self.acked_later.fetch_add(1, Ordering::SeqCst);
        here.and(later)
    }

    /// Hand `done` the outcome `here` on another thread, later, as configured.
    fn finish_later(&self, here: Result<(), ExportIoError>, done: IoDone) {
        let Some(later) = self.later.lock().clone() else {
            return done(here);
        };
        let acked = Arc::clone(&self.acked_later);
        std::thread::spawn(move || {
            std::thread::sleep(ACK_LATER_DELAY);
            acked.fetch_add(1, Ordering::SeqCst);
            done(here.and(later));
        });
    }

    /// Simulate the export being deleted under connected clients.
    pub fn mark_gone(&self) {
        self.gone.store(true, Ordering::SeqCst);
    }

    fn check(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        write: bool,
    ) -> Result<(), ExportIoError> {
        if self.is_gone() {
            return Err(ExportIoError::Gone);
        }
        let mask = u64::from(EXPORT_BLOCK_SIZE_BYTES) - 1;
        if (offset_bytes | length_bytes) & mask != 0 {
            return Err(ExportIoError::Invalid {
                reason: "misaligned",
            });
        }
        match offset_bytes.checked_add(length_bytes) {
            Some(end) if end <= self.info.size_bytes => {}
            _ => {
                return Err(ExportIoError::Invalid {
                    reason: "out of range",
                })
            }
        }
        if write && self.info.read_only {
            return Err(ExportIoError::ReadOnly);
        }
        Ok(())
    }

    /// Calls `f(chunk_index, offset_in_chunk, range_in_request)` for each chunk piece.
    fn for_each_piece(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        mut f: impl FnMut(usize, usize, std::ops::Range<usize>),
    ) {
        let mut pos = offset_bytes;
        let end = offset_bytes + length_bytes;
        while pos < end {
            let index = usize::try_from(pos / CHUNK_BYTES).expect("fits");
            let within = pos % CHUNK_BYTES;
            let take = (CHUNK_BYTES - within).min(end - pos);
            let start = usize::try_from(pos - offset_bytes).expect("fits");
            let len = usize::try_from(take).expect("fits");
            f(
                index,
                usize::try_from(within).expect("fits"),
                start..start + len,
            );
            pos += take;
        }
    }

    fn zero_range(&self, offset_bytes: u64, length_bytes: u64, may_trim: bool) {
        self.for_each_piece(offset_bytes, length_bytes, |index, within, range| {
            let mut chunk = self.chunks[index].lock();
            if may_trim && range.len() as u64 == CHUNK_BYTES {
                *chunk = None;
            } else if let Some(data) = chunk.as_mut() {
                data[within..within + range.len()].fill(0);
            } else if !may_trim {
                let mut data = vec![0u8; CHUNK_BYTES as usize].into_boxed_slice();
                data[within..within + range.len()].fill(0);
                *chunk = Some(data);
            }
        });
    }
}

impl ExportHandle for MemoryExport {
    fn info(&self) -> ExportInfo {
        self.info.clone()
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        self.check(offset_bytes, buf.len() as u64, false)?;
        self.for_each_piece(offset_bytes, buf.len() as u64, |index, within, range| {
            let chunk = self.chunks[index].lock();
            match chunk.as_ref() {
                Some(data) => {
                    buf[range.clone()].copy_from_slice(&data[within..within + range.len()])
                }
                None => buf[range].fill(0),
            }
        });
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], _fua: bool) -> Result<(), ExportIoError> {
        let here = self.store(offset_bytes, data);
        self.finish_now(here)
    }

    fn write_then(&self, offset_bytes: u64, data: Bytes, _fua: bool, done: IoDone) {
        let here = self.store(offset_bytes, &data);
        self.finish_later(here, done);
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        let here = self.flush_here();
        self.finish_now(here)
    }

    fn flush_then(&self, done: IoDone) {
        let here = self.flush_here();
        self.finish_later(here, done);
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, _fua: bool) -> Result<(), ExportIoError> {
        self.check(offset_bytes, length_bytes, true)?;
        self.zero_range(offset_bytes, length_bytes, true);
        Ok(())
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        _fua: bool,
    ) -> Result<(), ExportIoError> {
        self.check(offset_bytes, length_bytes, true)?;
        self.zero_range(offset_bytes, length_bytes, may_trim);
        Ok(())
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        self.check(offset_bytes, length_bytes, false)?;
        let mut out = Vec::new();
        self.for_each_piece(offset_bytes, length_bytes, |index, _, range| {
            let hole = self.chunks[index].lock().is_none();
            out.push(ExtentStatus {
                length_bytes: range.len() as u64,
                hole,
                zero: hole,
            });
        });
        Ok(out)
    }

    fn is_gone(&self) -> bool {
        self.gone.load(Ordering::SeqCst)
    }

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        weft_server::backend::read_compare_write(self, offset_bytes, compare, new, fua)
    }
}
