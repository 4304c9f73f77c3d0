//! [`MultiDiskStore`]: the d.node's chunk store over several disks (data dirs), one
//! [`LocalChunkStore`] each, seen as one [`ChunkStore`].
//!
//! Invariant: a chunk lives on exactly one disk. A put goes to the disk a hash of the key
//! picks, or the next ones in order when that disk is full or failing; reads, infos and deletes
//! find the chunk through each disk's in-memory index (no I/O). Puts of one key are serialised
//! (striped locks) so two racing puts cannot land on two disks. Fences go to every disk (each
//! disk checks the epoch of what it stores); listings merge; stats sum; a scrub covers all.
//!
//! The semantics are [`LocalChunkStore`]'s (`Exists`, `Missing` on delete, fencing to an older
//! epoch is a no-op); the protocol's differences live in the request handler (`handler.rs`).

use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::Mutex;
use weft_chunk::{
    fs_space, ChunkError, ChunkInfo, ChunkKey, ChunkMeta, ChunkStore, Epoch, FileDisk, FsSpace,
    LocalChunkStore, ScrubReport, StoreStat,
};

use crate::error::DnodeError;

/// Lock stripes serialising puts by key: enough that unrelated puts rarely share one.
const PUT_LOCK_STRIPES: usize = 64;

/// Chunk stores on several disks, as one.
#[derive(Debug)]
pub struct MultiDiskStore {
    disks: Vec<DiskSlot>,
    put_locks: Vec<Mutex<()>>,
}

#[derive(Debug)]
struct DiskSlot {
    /// The data dir, for stats and messages.
    path: String,
    store: LocalChunkStore,
    /// The data dir on a real file system (`None`: a simulated disk), asked for its size
    /// and free space on every report.
    dir: Option<PathBuf>,
}

/// One disk's numbers, for `Stat` and the registration record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskUsage {
    pub path: String,
    /// The configured capacity, else the file system's size; 0 if neither is known.
    pub capacity_bytes: u64,
    pub stat: StoreStat,
    /// The file system under the data dir now (`None`: a simulated disk, or statvfs failed).
    pub fs: Option<FsSpace>,
}

impl MultiDiskStore {
    /// Open (creating if needed) a [`LocalChunkStore`] on each data dir, each holding at most
    /// `capacity_bytes` if set.
    pub fn open(
        dirs: &[PathBuf],
        capacity_bytes: Option<u64>,
        direct_io: bool,
    ) -> Result<MultiDiskStore, DnodeError> {
        let mut stores = Vec::with_capacity(dirs.len());
        for dir in dirs {
            let disk = FileDisk::open(dir, direct_io).map_err(|e| DnodeError::DataDir {
                path: dir.clone(),
                source: e,
            })?;
            // A d.node's corrupt chunks are rebuilt by c.nodes from their stripes: scrub takes
            // them out of service so they show up as missing.
            let store = LocalChunkStore::open(Arc::new(disk), capacity_bytes)
                .map_err(|e| DnodeError::Store {
                    path: dir.clone(),
                    source: e,
                })?
                .quarantine_corrupt(true);
            let stat = store.stat().map_err(|e| DnodeError::Store {
                path: dir.clone(),
                source: e,
            })?;
            if stat.bad_chunks > 0 {
                tracing::warn!(path = %dir.display(), bad_chunks = stat.bad_chunks, "chunks with bad headers are not served");
            }
            tracing::info!(path = %dir.display(), chunks = stat.chunks, used_bytes = stat.used_bytes, "opened data dir");
            stores.push((dir.display().to_string(), store));
        }
        let mut multi = MultiDiskStore::from_stores(stores);
        for (slot, dir) in multi.disks.iter_mut().zip(dirs) {
            slot.dir = Some(dir.clone());
        }
        Ok(multi)
    }

    /// Over stores already open (any [`weft_chunk::Disk`], e.g. simulated ones in tests), each
    /// named by its path.
    pub fn from_stores(stores: Vec<(String, LocalChunkStore)>) -> MultiDiskStore {
        assert!(!stores.is_empty(), "a d.node has at least one disk");
        MultiDiskStore {
            disks: stores
                .into_iter()
                .map(|(path, store)| DiskSlot {
                    path,
                    store,
                    dir: None,
                })
                .collect(),
            put_locks: (0..PUT_LOCK_STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }

    /// Each disk's numbers, in data dir order.
    pub fn disks(&self) -> Result<Vec<DiskUsage>, ChunkError> {
        self.disks
            .iter()
            .map(|d| {
                let stat = d.store.stat()?;
                let fs = d.dir.as_deref().and_then(fs_space);
                Ok(DiskUsage {
                    path: d.path.clone(),
                    capacity_bytes: stat
                        .capacity_bytes
                        .or(fs.as_ref().map(|f| f.size_bytes))
                        .unwrap_or(0),
                    stat,
                    fs,
                })
            })
            .collect()
    }

    /// `Err(Fenced)` if `family`'s fence on any disk is above `epoch`. The store has no call
    /// that reads a fence, so this asks each disk to delete a key no chunk has
    /// (index 255 of the last segment): a store checks the epoch before looking for the chunk.
    pub fn check_fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        let current = self
            .disks
            .iter()
            .map(|d| d.store.fence_epoch(family))
            .max()
            .unwrap_or(0);
        if epoch < current {
            return Err(ChunkError::Fenced {
                family,
                epoch,
                current,
            });
        }
        Ok(())
    }

    /// The disk a key's hash picks first.
    fn home(&self, key: &ChunkKey) -> usize {
        let h = mix(key.family ^ mix(key.segment ^ mix(u64::from(key.index))));
        (h % self.disks.len() as u64) as usize
    }

    /// The disk holding `key`, looking at its home disk first.
    fn locate(&self, key: &ChunkKey) -> Option<&DiskSlot> {
        self.locate_index(key).map(|i| &self.disks[i])
    }

    fn locate_index(&self, key: &ChunkKey) -> Option<usize> {
        let home = self.home(key);
        let n = self.disks.len();
        (0..n)
            .map(|step| (home + step) % n)
            .find(|&i| self.disks[i].store.info(key).is_ok())
    }

    /// Plan a read the caller performs itself (`ring_reads`): see
    /// [`weft_chunk::LocalChunkStore::plan_read`].
    pub(crate) fn plan_read(
        &self,
        key: &ChunkKey,
        offset_bytes: u64,
        len_bytes: usize,
    ) -> Result<Option<weft_chunk::ReadPlan>, ChunkError> {
        match self.locate(key) {
            Some(d) => d.store.plan_read(key, offset_bytes, len_bytes),
            None => Err(ChunkError::Missing { key: *key }),
        }
    }

    /// A put on the disk the key's hash picks, or the next ones when it is full or failing.
    fn put_on_a_disk(
        &self,
        meta: &ChunkMeta,
        put: impl Fn(&LocalChunkStore) -> Result<(), ChunkError>,
    ) -> Result<(), ChunkError> {
        let key = meta.key;
        let _serialised = self.put_lock(&key).lock();
        if self.locate(&key).is_some() {
            return Err(ChunkError::Exists { key });
        }
        let home = self.home(&key);
        let n = self.disks.len();
        let mut last = None;
        for step in 0..n {
            let disk = &self.disks[(home + step) % n];
            match put(&disk.store) {
                // Full or failing: the next disk may take it.
                Err(e @ (ChunkError::NoSpace { .. } | ChunkError::Io { .. })) => {
                    if matches!(e, ChunkError::Io { .. }) {
                        tracing::warn!(path = %disk.path, chunk = %key, error = %e, "put failed on disk; trying the next");
                    }
                    last = Some(e);
                }
                other => return other,
            }
        }
        Err(last.expect("at least one disk"))
    }

    fn put_lock(&self, key: &ChunkKey) -> &Mutex<()> {
        let h = mix(key.family ^ mix(key.segment ^ u64::from(key.index)));
        &self.put_locks[(h % PUT_LOCK_STRIPES as u64) as usize]
    }
}

impl ChunkStore for MultiDiskStore {
    fn name(&self) -> String {
        let paths: Vec<&str> = self.disks.iter().map(|d| d.path.as_str()).collect();
        paths.join(",")
    }

    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError> {
        self.put_on_a_disk(meta, |store| store.put(meta, data))
    }

    fn put_unsynced(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_on_a_disk(meta, |store| {
            store.put_unsynced(meta, data, known_page_crcs)
        })
    }

    /// Each disk syncs its own chunks of `keys` (one group per disk); keys not held are
    /// ignored, as on one disk.
    fn sync(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        let mut by_disk: Vec<Vec<ChunkKey>> = vec![Vec::new(); self.disks.len()];
        for key in keys {
            if let Some(i) = self.locate_index(key) {
                by_disk[i].push(*key);
            }
        }
        for (d, mine) in self.disks.iter().zip(by_disk) {
            if !mine.is_empty() {
                d.store.sync(&mine)?;
            }
        }
        Ok(())
    }

    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError> {
        match self.locate(key) {
            Some(d) => d.store.read(key, offset_bytes, buf),
            None => Err(ChunkError::Missing { key: *key }),
        }
    }

    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError> {
        match self.locate(key) {
            Some(d) => d.store.info(key),
            None => Err(ChunkError::Missing { key: *key }),
        }
    }

    /// An absent chunk is still checked against the fence (by its home disk), so a fenced
    /// writer gets `Fenced`, not `Missing`.
    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError> {
        match self.locate(key) {
            Some(d) => d.store.delete(key, epoch),
            None => self.disks[self.home(key)].store.delete(key, epoch),
        }
    }

    fn list(&self, family: u64) -> Result<Vec<ChunkInfo>, ChunkError> {
        let mut out = Vec::new();
        for d in &self.disks {
            out.extend(d.store.list(family)?);
        }
        out.sort_by_key(|c| c.meta.key);
        out.dedup_by_key(|c| c.meta.key);
        Ok(out)
    }

    fn families(&self) -> Result<Vec<u64>, ChunkError> {
        let mut out = Vec::new();
        for d in &self.disks {
            out.extend(d.store.families()?);
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Every disk is fenced even if one fails; the first failure is returned.
    fn fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        let mut first = None;
        for d in &self.disks {
            if let Err(e) = d.store.fence(family, epoch) {
                tracing::warn!(path = %d.path, family, epoch, error = %e, "fence failed on disk");
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn stat(&self) -> Result<StoreStat, ChunkError> {
        let mut total = StoreStat {
            capacity_bytes: Some(0),
            ..StoreStat::default()
        };
        for d in &self.disks {
            let s = d.store.stat()?;
            total.capacity_bytes = total
                .capacity_bytes
                .zip(s.capacity_bytes)
                .map(|(a, b)| a + b);
            total.used_bytes += s.used_bytes;
            total.chunks += s.chunks;
            total.bad_chunks += s.bad_chunks;
        }
        Ok(total)
    }

    /// Every disk in turn; a disk that fails is reported after the others are scrubbed.
    fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError> {
        let mut report = ScrubReport::default();
        let mut first_error = None;
        for d in &self.disks {
            match d.store.scrub(family) {
                Ok(r) => {
                    report.checked += r.checked;
                    report.corrupt.extend(r.corrupt);
                }
                Err(e) => {
                    tracing::warn!(path = %d.path, error = %e, "scrub failed on disk");
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(report),
        }
    }
}

/// A 64-bit mixer (splitmix64's finaliser): stable across runs and builds, unlike std's hasher.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_chunk::SimDisk;

    fn meta(family: u64, segment: u64, index: u8, epoch: Epoch) -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(family, segment, index),
            epoch,
            codec_id: 0,
            data_chunks: 1,
            parity_chunks: 0,
            stripe_len_bytes: 5000,
        }
    }

    fn multi(disks: usize, capacity_bytes: Option<u64>) -> MultiDiskStore {
        MultiDiskStore::from_stores(
            (0..disks)
                .map(|i| {
                    let store = LocalChunkStore::open(Arc::new(SimDisk::new()), capacity_bytes)
                        .expect("open");
                    (format!("sim{i}"), store)
                })
                .collect(),
        )
    }

    #[test]
    fn chunks_spread_over_disks_and_are_found_on_the_one_holding_them() {
        let m = multi(3, None);
        let data = vec![9u8; 5000];
        for s in 0..30 {
            m.put(&meta(1, s, 0, 0), &data).expect("put");
        }
        let per_disk: Vec<u64> = m
            .disks()
            .expect("disks")
            .iter()
            .map(|d| d.stat.chunks)
            .collect();
        assert!(per_disk.iter().all(|&c| c > 0), "spread: {per_disk:?}");
        assert_eq!(per_disk.iter().sum::<u64>(), 30);
        let mut buf = vec![0u8; 100];
        m.read(&ChunkKey::new(1, 17, 0), 4000, &mut buf)
            .expect("read");
        assert_eq!(buf, vec![9u8; 100]);
        assert!(matches!(
            m.put(&meta(1, 17, 0, 0), &data),
            Err(ChunkError::Exists { .. })
        ));
        assert_eq!(m.list(1).expect("list").len(), 30);
        assert_eq!(m.families().expect("families"), vec![1]);
        assert_eq!(m.stat().expect("stat").chunks, 30);
        m.delete(&ChunkKey::new(1, 17, 0), 0).expect("delete");
        assert!(m.info(&ChunkKey::new(1, 17, 0)).unwrap_err().is_missing());
    }

    #[test]
    fn a_full_disk_is_skipped_until_all_are_full() {
        // Room for one 5000-byte chunk (plus its 4 KiB header) per disk.
        let m = multi(2, Some(10_000));
        let data = vec![1u8; 5000];
        m.put(&meta(1, 1, 0, 0), &data).expect("first");
        m.put(&meta(1, 2, 0, 0), &data)
            .expect("second lands on the other disk");
        let err = m.put(&meta(1, 3, 0, 0), &data).unwrap_err();
        assert!(err.is_no_space(), "{err}");
        assert_eq!(m.stat().expect("stat").capacity_bytes, Some(20_000));
    }

    #[test]
    fn fences_reach_every_disk_and_the_probe_sees_them() {
        let m = multi(3, None);
        m.fence(7, 5).expect("fence");
        assert!(matches!(
            m.put(&meta(7, 1, 0, 4), &[0u8; 10]),
            Err(ChunkError::Fenced { current: 5, .. })
        ));
        assert!(matches!(
            m.delete(&ChunkKey::new(7, 99, 0), 4),
            Err(ChunkError::Fenced { .. })
        ));
        assert!(matches!(
            m.check_fence(7, 4),
            Err(ChunkError::Fenced { current: 5, .. })
        ));
        m.check_fence(7, 5).expect("the current epoch passes");
        m.check_fence(8, 0).expect("an unfenced family passes");
    }
}
