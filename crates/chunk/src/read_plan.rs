//! Reads a caller performs itself: [`LocalChunkStore::plan_read`] checks the range and says
//! which bytes of which open file to read (aligned for O_DIRECT), the caller reads them (the
//! d.node batches many through io_uring), and [`ReadPlan::finish`] verifies the pages and
//! hands back the window asked for, exactly as [`crate::ChunkStore::read`] would have.
//! No I/O here.

use std::fs::File;
use std::sync::Arc;

use crate::error::ChunkError;
use crate::format::ChunkHeader;
use crate::key::ChunkKey;
use crate::store::{chunk_path, LocalChunkStore};

/// O_DIRECT alignment of file offsets, lengths and buffers.
pub const READ_ALIGN_BYTES: u64 = 4096;

/// One planned read: see the module doc.
#[derive(Debug)]
pub struct ReadPlan {
    pub key: ChunkKey,
    pub file: Arc<File>,
    /// Whether `file` is O_DIRECT (then the buffer must be aligned to [`READ_ALIGN_BYTES`]).
    pub direct: bool,
    /// Read `span_bytes` from `file_offset_bytes` of the file.
    pub file_offset_bytes: u64,
    pub span_bytes: usize,
    header: Arc<ChunkHeader>,
    /// The checked pages: their first byte in the chunk's data, and their end.
    pages_start_bytes: u64,
    pages_end_bytes: u64,
    /// The window asked for, in the chunk's data.
    offset_bytes: u64,
    len_bytes: usize,
    /// The disk's name, for errors.
    disk: String,
}

impl LocalChunkStore {
    /// Plan a read of `len_bytes` at `offset_bytes` of chunk `key`. `Ok(None)`: this store's
    /// disk has no file to read directly (use [`crate::ChunkStore::read`]). Errors are those
    /// `read` gives before touching the disk (missing, out of range).
    pub fn plan_read(
        &self,
        key: &ChunkKey,
        offset_bytes: u64,
        len_bytes: usize,
    ) -> Result<Option<ReadPlan>, ChunkError> {
        let (h, _) = self.header(key)?;
        let len = len_bytes as u64;
        if len == 0 {
            return Ok(None);
        }
        crate::store::check_range(key, &h, offset_bytes, len)?;
        let opened = self.on_file(key, |path| match self.disk().file_for_read(path) {
            None => Ok(None),
            Some(opened) => opened.map(Some),
        });
        let (file, direct) = match opened {
            Ok(None) => return Ok(None),
            Ok(Some(f)) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ChunkError::Missing { key: *key })
            }
            Err(e) => {
                let path = chunk_path(key);
                return Err(ChunkError::io(format!("{}/{path}", self.name_of_disk()), e));
            }
        };
        let (start, end) = h.covering_pages(offset_bytes, len);
        let from = h.data_offset_bytes + start;
        let to = h.data_offset_bytes + end;
        let (file_offset_bytes, file_end) = if direct {
            (
                from / READ_ALIGN_BYTES * READ_ALIGN_BYTES,
                to.div_ceil(READ_ALIGN_BYTES) * READ_ALIGN_BYTES,
            )
        } else {
            (from, to)
        };
        Ok(Some(ReadPlan {
            key: *key,
            file,
            direct,
            file_offset_bytes,
            span_bytes: usize::try_from(file_end - file_offset_bytes).expect("bounded chunk"),
            pages_start_bytes: start,
            pages_end_bytes: end,
            offset_bytes,
            len_bytes,
            disk: self.name_of_disk(),
            header: h,
        }))
    }
}

impl ReadPlan {
    /// `got` holds the first bytes read of the planned span (fewer than `span_bytes` at the
    /// end of a short file): verify the pages and return the window asked for.
    pub fn finish(&self, got: &[u8]) -> Result<Vec<u8>, ChunkError> {
        let skip = usize::try_from(
            self.header.data_offset_bytes + self.pages_start_bytes - self.file_offset_bytes,
        )
        .expect("inside the span");
        let pages_len =
            usize::try_from(self.pages_end_bytes - self.pages_start_bytes).expect("bounded");
        if got.len() < skip + pages_len {
            return Err(ChunkError::Corrupt {
                key: self.key,
                offset_bytes: self.pages_start_bytes,
                detail: "chunk file shorter than its header says".into(),
            });
        }
        let pages = &got[skip..skip + pages_len];
        self.header.verify_pages(self.pages_start_bytes, pages)?;
        let at = usize::try_from(self.offset_bytes - self.pages_start_bytes).expect("in pages");
        Ok(pages[at..at + self.len_bytes].to_vec())
    }

    /// An I/O error of the caller's read, as `read` would report it.
    pub fn io_error(&self, e: std::io::Error) -> ChunkError {
        ChunkError::io(format!("{}/{}", self.disk, chunk_path(&self.key)), e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::FileDisk;
    use crate::key::ChunkMeta;
    use crate::store::ChunkStore;
    use std::os::unix::fs::FileExt;

    fn meta(segment: u64, len: u64) -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(1, segment, 0),
            epoch: 0,
            codec_id: 0,
            data_chunks: 1,
            parity_chunks: 0,
            stripe_len_bytes: len,
        }
    }

    /// Read a plan the simple way (pread from an aligned buffer).
    fn perform(plan: &ReadPlan) -> Vec<u8> {
        let mut buf = vec![0u8; plan.span_bytes + READ_ALIGN_BYTES as usize];
        let shift = buf.as_ptr().align_offset(READ_ALIGN_BYTES as usize);
        let aligned = &mut buf[shift..shift + plan.span_bytes];
        let mut done = 0;
        while done < aligned.len() {
            match plan
                .file
                .read_at(&mut aligned[done..], plan.file_offset_bytes + done as u64)
            {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) => panic!("{e}"),
            }
        }
        aligned[..done].to_vec()
    }

    #[test]
    fn planned_reads_return_what_read_returns_and_catch_rot() {
        let dir = tempfile::tempdir().expect("tempdir");
        for direct in [false, true] {
            let disk = Arc::new(
                FileDisk::open(dir.path().join(format!("{direct}")), direct).expect("disk"),
            );
            let store = LocalChunkStore::open(disk, None).expect("open");
            let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7 % 251) as u8).collect();
            store.put(&meta(1, data.len() as u64), &data).expect("put");
            let key = ChunkKey::new(1, 1, 0);
            for (offset, len) in [(0u64, 4096usize), (100, 5000), (36_000, 4000), (8192, 1)] {
                let plan = store
                    .plan_read(&key, offset, len)
                    .expect("plan")
                    .expect("a file");
                let mut want = vec![0u8; len];
                store.read(&key, offset, &mut want).expect("read");
                assert_eq!(plan.finish(&perform(&plan)).expect("finish"), want);
                // A flipped byte in the pages read is caught, as `read` catches it.
                let mut rotten = perform(&plan);
                let last = rotten.len() - 1;
                rotten[last / 2] ^= 1;
                assert!(matches!(
                    plan.finish(&rotten),
                    Err(ChunkError::Corrupt { .. })
                ));
                // A short read is corruption too, never zeroes.
                assert!(matches!(
                    plan.finish(&rotten[..10]),
                    Err(ChunkError::Corrupt { .. })
                ));
            }
            assert!(matches!(
                store.plan_read(&key, 39_000, 2000),
                Err(ChunkError::OutOfRange { .. })
            ));
            assert!(matches!(
                store.plan_read(&ChunkKey::new(1, 9, 0), 0, 10),
                Err(ChunkError::Missing { .. })
            ));
        }
    }
}
