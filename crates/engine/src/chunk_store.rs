//! Chunk storage of a d.node: immutable, checksummed chunks in files under one data dir.
//!
//! [`ChunkStore`] is the seam cluster mode will put the network behind; [`LocalChunkStore`]
//! is the d.node of single-process mode. A chunk is written once (durable when `put`
//! returns), read by byte ranges, and deleted whole. The store knows nothing of volumes.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::IoFailure;
use crate::units::SegmentId;

/// Open chunk files kept for reads; beyond this, half the cache is dropped.
const OPEN_CHUNK_FILES_MAX: usize = 2048;
/// O_DIRECT needs buffers, offsets and lengths aligned to the logical block size.
const DIRECT_IO_ALIGN_BYTES: usize = 4096;

/// One chunk: the `index`-th of the k+m chunks of a segment's stripe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkId {
    pub segment: SegmentId,
    pub index: u8,
}

/// Storage of immutable chunks.
pub trait ChunkStore: Send + Sync + std::fmt::Debug {
    /// Store a chunk; durable when this returns. Fails with ENOSPC when over capacity.
    fn put(&self, id: ChunkId, bytes: &[u8]) -> Result<(), IoFailure>;
    /// Read `buf.len()` bytes at `offset_bytes`. A missing chunk is an `io::ErrorKind::NotFound`
    /// disk error (GC may have moved the block meanwhile; the caller looks it up again).
    fn read(&self, id: ChunkId, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoFailure>;
    fn delete(&self, id: ChunkId) -> Result<(), IoFailure>;
    fn list(&self) -> Result<Vec<ChunkId>, IoFailure>;
    fn used_bytes(&self) -> u64;
    /// The most this store may hold, if limited.
    fn capacity_bytes(&self) -> Option<u64>;
}

/// Chunks as files `<dir>/<segment hex>.<index>.chunk`.
#[derive(Debug)]
pub struct LocalChunkStore {
    dir: PathBuf,
    dir_handle: File,
    direct_io: bool,
    capacity_bytes: Option<u64>,
    used_bytes: AtomicU64,
    open_files: Mutex<HashMap<ChunkId, Arc<File>>>,
}

impl LocalChunkStore {
    /// Open (creating) the store in `dir`. With `direct_io`, reads bypass the page cache
    /// (the host's cache is the right place for hot data), falling back when the file system
    /// refuses O_DIRECT.
    pub fn open(
        dir: &Path,
        direct_io: bool,
        capacity_bytes: Option<u64>,
    ) -> Result<Self, IoFailure> {
        std::fs::create_dir_all(dir).map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
        let dir_handle =
            File::open(dir).map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
        let store = LocalChunkStore {
            dir: dir.to_path_buf(),
            dir_handle,
            direct_io,
            capacity_bytes,
            used_bytes: AtomicU64::new(0),
            open_files: Mutex::new(HashMap::new()),
        };
        let mut used = 0;
        for id in store.list()? {
            let path = store.path(id);
            used += std::fs::metadata(&path)
                .map_err(|e| store.err(&path, e))?
                .len();
        }
        store.used_bytes.store(used, Ordering::Relaxed);
        Ok(store)
    }

    fn path(&self, id: ChunkId) -> PathBuf {
        self.dir
            .join(format!("{:016x}.{}.chunk", id.segment.0, id.index))
    }

    fn err(&self, path: &Path, e: std::io::Error) -> IoFailure {
        IoFailure::disk(path.display().to_string(), e)
    }

    fn file(&self, id: ChunkId) -> Result<Arc<File>, IoFailure> {
        if let Some(f) = self.open_files.lock().get(&id) {
            return Ok(f.clone());
        }
        let path = self.path(id);
        let mut opts = OpenOptions::new();
        opts.read(true);
        if self.direct_io {
            opts.custom_flags(libc::O_DIRECT);
        }
        let file = match opts.open(&path) {
            Ok(f) => f,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                File::open(&path).map_err(|e| self.err(&path, e))?
            }
            Err(e) => return Err(self.err(&path, e)),
        };
        let file = Arc::new(file);
        let mut cache = self.open_files.lock();
        if cache.len() >= OPEN_CHUNK_FILES_MAX {
            let victims: Vec<ChunkId> = cache
                .keys()
                .take(OPEN_CHUNK_FILES_MAX / 2)
                .copied()
                .collect();
            for v in victims {
                cache.remove(&v);
            }
        }
        cache.insert(id, file.clone());
        Ok(file)
    }
}

impl ChunkStore for LocalChunkStore {
    fn put(&self, id: ChunkId, bytes: &[u8]) -> Result<(), IoFailure> {
        let len = bytes.len() as u64;
        if let Some(cap) = self.capacity_bytes {
            if self.used_bytes.load(Ordering::Relaxed) + len > cap {
                return Err(IoFailure::disk(
                    format!("chunk store {} (capacity {cap} bytes)", self.dir.display()),
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                ));
            }
        }
        let path = self.path(id);
        let result = (|| {
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)?;
            file.write_all_at(bytes, 0)?;
            file.sync_data()?;
            // The data is durable; keep it out of the page cache (reads use O_DIRECT).
            #[allow(unsafe_code)]
            // SAFETY: the fd is valid for the lifetime of `file`; fadvise reads no memory.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&file),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
            self.dir_handle.sync_all()
        })();
        if let Err(e) = result {
            let _ = std::fs::remove_file(&path);
            return Err(self.err(&path, e));
        }
        self.used_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    }

    fn read(&self, id: ChunkId, offset_bytes: u64, buf: &mut [u8]) -> Result<(), IoFailure> {
        let file = self.file(id)?;
        let path = || self.path(id);
        if !self.direct_io {
            return file
                .read_exact_at(buf, offset_bytes)
                .map_err(|e| self.err(&path(), e));
        }
        let align = DIRECT_IO_ALIGN_BYTES as u64;
        let start = offset_bytes / align * align;
        let end = (offset_bytes + buf.len() as u64).div_ceil(align) * align;
        let span = usize::try_from(end - start).expect("read spans fit in memory");
        let mut scratch = vec![0u8; span + DIRECT_IO_ALIGN_BYTES];
        let shift = scratch.as_ptr().align_offset(DIRECT_IO_ALIGN_BYTES);
        let aligned = &mut scratch[shift..shift + span];
        let mut done = 0;
        while done < span {
            match file.read_at(&mut aligned[done..], start + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(self.err(&path(), e)),
            }
        }
        let skip = usize::try_from(offset_bytes - start).expect("below alignment");
        if done < skip + buf.len() {
            return Err(self.err(&path(), ErrorKind::UnexpectedEof.into()));
        }
        buf.copy_from_slice(&aligned[skip..skip + buf.len()]);
        Ok(())
    }

    fn delete(&self, id: ChunkId) -> Result<(), IoFailure> {
        self.open_files.lock().remove(&id);
        let path = self.path(id);
        let len = std::fs::metadata(&path)
            .map_err(|e| self.err(&path, e))?
            .len();
        std::fs::remove_file(&path).map_err(|e| self.err(&path, e))?;
        self.used_bytes.fetch_sub(len, Ordering::Relaxed);
        Ok(())
    }

    fn list(&self) -> Result<Vec<ChunkId>, IoFailure> {
        let mut ids = Vec::new();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| self.err(&self.dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| self.err(&self.dir, e))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            let Some(stem) = name.strip_suffix(".chunk") else {
                continue;
            };
            let Some((seg, index)) = stem.split_once('.') else {
                continue;
            };
            if let (Ok(seg), Ok(index)) = (u64::from_str_radix(seg, 16), index.parse::<u8>()) {
                ids.push(ChunkId {
                    segment: SegmentId(seg),
                    index,
                });
            }
        }
        ids.sort();
        Ok(ids)
    }

    fn used_bytes(&self) -> u64 {
        self.used_bytes.load(Ordering::Relaxed)
    }

    fn capacity_bytes(&self) -> Option<u64> {
        self.capacity_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_round_trip_list_delete_and_respect_capacity() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let sub = dir.path().join(format!("d{direct}"));
            let store = LocalChunkStore::open(&sub, direct, Some(3 * 8192)).unwrap();
            let id = ChunkId {
                segment: SegmentId(0xabc),
                index: 0,
            };
            let bytes: Vec<u8> = (0..8192u32).map(|i| (i % 251) as u8).collect();
            store.put(id, &bytes).unwrap();
            let mut buf = vec![0u8; 100];
            store.read(id, 4000, &mut buf).unwrap();
            assert_eq!(&buf[..], &bytes[4000..4100]);
            assert_eq!(store.list().unwrap(), vec![id]);
            assert_eq!(store.used_bytes(), 8192);
            let id2 = ChunkId {
                segment: SegmentId(2),
                index: 0,
            };
            store.put(id2, &bytes).unwrap();
            let err = store
                .put(
                    ChunkId {
                        segment: SegmentId(3),
                        index: 0,
                    },
                    &[0u8; 16384],
                )
                .unwrap_err();
            assert!(err.is_no_space());
            store.delete(id).unwrap();
            assert!(store.read(id, 0, &mut buf).is_err());
            let reopened = LocalChunkStore::open(&sub, direct, None).unwrap();
            assert_eq!(reopened.used_bytes(), 8192);
        }
    }
}
