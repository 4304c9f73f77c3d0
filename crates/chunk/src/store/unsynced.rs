//! Chunks written without a sync ([`crate::ChunkStore::put_unsynced`]) until one makes them
//! durable ([`crate::ChunkStore::sync`]): a c.node acknowledges a write once its stripe is
//! written, and syncs stripes in groups behind it (FLUSH waits for that).
//!
//! Such a chunk lives under its *unsynced* name, `<segment hex>.<index>.chunk.unsynced`, until
//! the sync: `fdatasync` of the file, then a rename to its name, then one `fsync` per
//! directory for the whole group. So a file under the chunk's name is always durable and
//! complete, and the unsynced name tells the store which files a power cut may have torn:
//! at open it reads each of them in full and checks every page against the header; a
//! complete one is made durable as a sync would have (after a kill, the page cache still held
//! it: nothing was lost), a torn one is removed (a power cut came before its sync, so nothing
//! that needed it durable was acknowledged). No torn chunk is ever served or listed.
//!
//! `.chunk.new` is where [`crate::ChunkStore::put_replacing`] writes and syncs a chunk before
//! renaming it over the one it replaces: a leftover is garbage. Stores of older versions do
//! not list either name.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::error::ChunkError;
use crate::format::ChunkHeader;
use crate::key::ChunkKey;

use super::{chunk_path, family_dir, parse_chunk_name, Held, LocalChunkStore};

const UNSYNCED_SUFFIX: &str = ".unsynced";
const REPLACEMENT_SUFFIX: &str = ".new";

/// The file of an unsynced chunk.
pub(super) fn path(key: &ChunkKey) -> String {
    format!("{}{UNSYNCED_SUFFIX}", chunk_path(key))
}

/// Where a replacing put writes before it renames.
pub(super) fn replacement_path(key: &ChunkKey) -> String {
    format!("{}{REPLACEMENT_SUFFIX}", chunk_path(key))
}

/// A file of a family directory that is not a chunk under its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leftover {
    /// A chunk written without a sync when the store last stopped.
    Unsynced(ChunkKey),
    /// A replacement that was never renamed into place.
    Replacement(ChunkKey),
}

/// What `name` in the directory of `family` is, if it is one of these.
pub(super) fn parse_name(family: u64, name: &str) -> Option<Leftover> {
    if let Some(stem) = name.strip_suffix(UNSYNCED_SUFFIX) {
        return parse_chunk_name(family, stem).map(Leftover::Unsynced);
    }
    let stem = name.strip_suffix(REPLACEMENT_SUFFIX)?;
    parse_chunk_name(family, stem).map(Leftover::Replacement)
}

impl LocalChunkStore {
    /// At open: make complete unsynced chunks durable and add them to `index`, remove torn
    /// ones and replacement leftovers. Returns the bytes of the chunks kept.
    pub(super) fn settle_unsynced(
        &self,
        found: Vec<Leftover>,
        index: &mut BTreeMap<ChunkKey, Held>,
    ) -> Result<u64, ChunkError> {
        let mut used = 0;
        let mut dirs = BTreeSet::new();
        for leftover in found {
            let key = match leftover {
                Leftover::Replacement(key) => {
                    let garbage = replacement_path(&key);
                    self.disk
                        .remove(&garbage)
                        .map_err(|e| self.err(&garbage, e))?;
                    continue;
                }
                Leftover::Unsynced(key) => key,
            };
            let from = path(&key);
            if index.contains_key(&key) {
                // A durable copy is under the chunk's name (a sync or a replacement renamed
                // it there and stopped before the old name went).
                self.disk.remove(&from).map_err(|e| self.err(&from, e))?;
                continue;
            }
            match self.verify_whole(&key, &from) {
                Ok(header) => {
                    let to = chunk_path(&key);
                    let io = |e| self.err(&from, e);
                    self.disk.sync_file(&from).map_err(io)?;
                    self.disk.rename(&from, &to).map_err(io)?;
                    let len_bytes = self.disk.len(&to).map_err(|e| self.err(&to, e))?;
                    used += len_bytes;
                    dirs.insert(family_dir(key.family));
                    tracing::info!(chunk = %key, "an unsynced chunk is complete: made durable");
                    index.insert(
                        key,
                        Held {
                            header: Arc::new(header),
                            len_bytes,
                            synced: true,
                        },
                    );
                }
                Err(e) => {
                    tracing::warn!(chunk = %key, error = %e, "an unsynced chunk is torn (power lost before its sync); removed");
                    self.disk.remove(&from).map_err(|e| self.err(&from, e))?;
                }
            }
        }
        for dir in dirs {
            self.disk.sync_dir(&dir).map_err(|e| self.err(&dir, e))?;
        }
        Ok(used)
    }

    /// The header of the chunk file at `path`, once every page of it checks out.
    fn verify_whole(&self, key: &ChunkKey, path: &str) -> Result<ChunkHeader, ChunkError> {
        let header = self.load_header(key, path)?;
        let mut data = vec![0u8; usize::try_from(header.data_len_bytes).expect("bounded chunk")];
        self.disk
            .read_at(path, header.data_offset_bytes, &mut data)
            .map_err(|e| self.err(path, e))?;
        header.verify_pages(0, &data)?;
        Ok(header)
    }

    /// [`crate::ChunkStore::sync`]: each unsynced chunk of `keys` is synced and renamed to its
    /// name; then each directory is synced once.
    pub(super) fn sync_unsynced(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        // One group at a time: a chunk another sync has renamed but whose directory it has not
        // synced yet is not durable, and must not pass for it here.
        let _group = self.sync_lock.lock();
        let unsynced = |key: &ChunkKey| self.index.lock().get(key).is_some_and(|held| !held.synced);
        let mut dirs = BTreeSet::new();
        for key in keys {
            if !unsynced(key) {
                continue;
            }
            let from = path(key);
            // Off the write lock: puts of other chunks go on meanwhile.
            self.disk.sync_file(&from).map_err(|e| self.err(&from, e))?;
            let _w = self.write_lock.lock();
            if !unsynced(key) {
                continue; // deleted or replaced meanwhile
            }
            self.disk
                .rename(&from, &chunk_path(key))
                .map_err(|e| self.err(&from, e))?;
            if let Some(held) = self.index.lock().get_mut(key) {
                held.synced = true;
            }
            dirs.insert(family_dir(key.family));
        }
        for dir in dirs {
            self.disk.sync_dir(&dir).map_err(|e| self.err(&dir, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{Disk, SimDisk};
    use crate::key::ChunkMeta;
    use crate::ChunkStore;

    fn meta(segment: u64) -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(1, segment, 0),
            epoch: 0,
            codec_id: 0,
            data_chunks: 1,
            parity_chunks: 0,
            stripe_len_bytes: 5 * 4096,
        }
    }

    fn data(segment: u64) -> Vec<u8> {
        (0..5 * 4096u64).map(|i| (i * 7 + segment) as u8).collect()
    }

    fn open(disk: &SimDisk) -> LocalChunkStore {
        LocalChunkStore::open(Arc::new(disk.clone()), None).expect("store opens")
    }

    /// The chunk reads back whole, or is not there at all: never torn, never listed torn.
    fn whole_or_gone(store: &LocalChunkStore, segment: u64) -> bool {
        let mut buf = vec![0u8; 5 * 4096];
        match store.read(&ChunkKey::new(1, segment, 0), 0, &mut buf) {
            Ok(()) => {
                assert_eq!(buf, data(segment), "segment {segment}");
                true
            }
            Err(e) => {
                assert!(e.is_missing(), "segment {segment}: {e}");
                assert!(store
                    .list(1)
                    .unwrap()
                    .iter()
                    .all(|c| c.meta.key.segment != segment));
                false
            }
        }
    }

    #[test]
    fn an_unsynced_chunk_is_served_at_once_and_a_power_cut_loses_it_whole_or_not_at_all() {
        let mut lost = 0;
        for seed in 0..40 {
            let disk = SimDisk::new();
            let store = open(&disk);
            store.put(&meta(1), &data(1)).unwrap();
            // Over a recycled file (a deleted chunk's) and into a fresh one.
            store.put(&meta(2), &data(2)).unwrap();
            store.delete(&ChunkKey::new(1, 2, 0), 0).unwrap();
            store.put_unsynced(&meta(3), &data(3), &[]).unwrap();
            store.put_unsynced(&meta(4), &data(4), &[]).unwrap();
            assert!(whole_or_gone(&store, 3) && whole_or_gone(&store, 4));
            assert_eq!(store.list(1).unwrap().len(), 3);
            drop(store);
            disk.power_cut(seed);
            let store = open(&disk);
            assert!(whole_or_gone(&store, 1));
            lost += usize::from(!whole_or_gone(&store, 3)) + usize::from(!whole_or_gone(&store, 4));
            assert_eq!(store.stat().unwrap().bad_chunks, 0, "seed {seed}");
            assert!(disk.paths().iter().all(|p| !p.ends_with(UNSYNCED_SUFFIX)));
            // What a power cut found complete is durable now.
            disk.power_cut(seed + 1000);
            let reopened = open(&disk);
            for segment in 3..=4 {
                assert_eq!(
                    whole_or_gone(&store, segment),
                    whole_or_gone(&reopened, segment),
                    "seed {seed}"
                );
            }
        }
        assert!(lost > 0, "the power cuts never lost an unsynced chunk");
    }

    #[test]
    fn a_synced_chunk_survives_a_power_cut_and_a_kill_keeps_an_unsynced_one() {
        for seed in 0..20 {
            let disk = SimDisk::new();
            let store = open(&disk);
            store.put_unsynced(&meta(1), &data(1), &[]).unwrap();
            store.put_unsynced(&meta(2), &data(2), &[]).unwrap();
            store
                .sync(&[ChunkKey::new(1, 1, 0), ChunkKey::new(1, 9, 0)])
                .unwrap();
            // A kill: the store goes, the disk (the page cache) stays.
            drop(store);
            let store = open(&disk);
            assert!(whole_or_gone(&store, 1) && whole_or_gone(&store, 2));
            // Reopening made the complete unsynced chunk durable.
            disk.power_cut(seed);
            let store = open(&disk);
            assert!(
                whole_or_gone(&store, 1) && whole_or_gone(&store, 2),
                "seed {seed}"
            );
        }
    }

    #[test]
    fn a_replacing_put_keeps_a_whole_chunk_under_the_name_at_every_point() {
        let disk = SimDisk::new();
        let store = open(&disk);
        store.put_unsynced(&meta(1), &data(1), &[]).unwrap();
        store.put_replacing(&meta(1), &data(1), &[]).unwrap();
        assert!(whole_or_gone(&store, 1));
        assert_eq!(store.stat().unwrap().chunks, 1);
        let used = store.stat().unwrap().used_bytes;
        // Durable: nothing left to sync, and a power cut keeps it.
        store.sync(&[ChunkKey::new(1, 1, 0)]).unwrap();
        disk.power_cut(7);
        let store = open(&disk);
        assert!(whole_or_gone(&store, 1));
        assert_eq!(store.stat().unwrap().used_bytes, used);
        // A kill between the rename and the removal of the old name: the durable copy wins.
        let disk = SimDisk::new();
        let store = open(&disk);
        store.put(&meta(1), &data(1)).unwrap();
        disk.write_new(&path(&ChunkKey::new(1, 1, 0)), &[b"stale"])
            .unwrap();
        disk.write_new(&replacement_path(&ChunkKey::new(1, 1, 0)), &[b"half"])
            .unwrap();
        drop(store);
        let store = open(&disk);
        assert!(whole_or_gone(&store, 1));
        assert_eq!(disk.paths(), vec![chunk_path(&ChunkKey::new(1, 1, 0))]);
    }

    #[test]
    fn an_unsynced_chunk_can_be_deleted_and_a_sync_then_skips_it() {
        let disk = SimDisk::new();
        let store = open(&disk);
        store.put_unsynced(&meta(1), &data(1), &[]).unwrap();
        store.delete(&ChunkKey::new(1, 1, 0), 0).unwrap();
        store.sync(&[ChunkKey::new(1, 1, 0)]).unwrap();
        assert!(!whole_or_gone(&store, 1));
        assert_eq!(store.stat().unwrap().used_bytes, 0);
        // Its file went to recycle/; the next put writes over it.
        store.put_unsynced(&meta(2), &data(2), &[]).unwrap();
        store.sync(&[ChunkKey::new(1, 2, 0)]).unwrap();
        disk.power_cut(3);
        assert!(whole_or_gone(&open(&disk), 2));
    }
}
