//! The chunk store contract ([`ChunkStore`]) and the d.node's local implementation
//! ([`LocalChunkStore`]) over one [`Disk`].
//!
//! A chunk is written once (durable when `put` returns), read by byte ranges (every page
//! checked against the header's page table: a read never returns bytes that fail their
//! checksum), and deleted whole. Writes and deletes carry the writer's epoch; a family's
//! epoch only rises ([`ChunkStore::fence`]), and older writers are refused. The store knows
//! nothing of volumes.
//!
//! Layout on the disk: `<family hex>/<segment hex>.<index>.chunk` (`.chunk.corrupt` once a
//! scrub found it corrupt: kept for inspection, never served; `.chunk.unsynced` while a chunk
//! put without a sync waits for one, see `unsynced`), and `fences.json` (the epoch of each
//! fenced family), replaced atomically; `recycle/` holds deleted chunk files that later puts
//! write over (see `recycle`).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::disk::Disk;
use crate::error::ChunkError;
use crate::format::{self, ChunkHeader, CHUNK_DATA_MAX_BYTES, FIXED_HEADER_BYTES};
use crate::key::{ChunkInfo, ChunkKey, ChunkMeta, Epoch};
use crate::recycle::RecycledFiles;

mod unsynced;

const FENCES_FILE: &str = "fences.json";
const CHUNK_SUFFIX: &str = ".chunk";

/// Space and contents of a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreStat {
    /// The most the store may hold, if limited.
    pub capacity_bytes: Option<u64>,
    /// Bytes of chunk files (headers included).
    pub used_bytes: u64,
    pub chunks: u64,
    /// Chunk files whose header failed its checks at open (torn or rotten): not served.
    pub bad_chunks: u64,
}

/// What a scrub found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubReport {
    pub checked: u64,
    pub corrupt: Vec<ChunkKey>,
}

/// Storage of immutable chunks: what a d.node serves, locally or over the network.
pub trait ChunkStore: Send + Sync + std::fmt::Debug {
    /// Who this is, for messages (a d.node id, a path).
    fn name(&self) -> String;
    /// Store a chunk; durable when this returns.
    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError>;
    /// [`ChunkStore::put`] of data some of whose pages' plain CRC32C the caller already
    /// computed (`known_page_crcs[i]`: page i of `data`, a full page; see
    /// [`crate::format::encode_header_known`]). A store that builds the chunk's page table
    /// here derives those entries instead of reading the pages again; one that builds it
    /// elsewhere (a remote d.node) ignores them. The chunk written is the same either way.
    fn put_known(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        let _ = known_page_crcs;
        self.put(meta, data)
    }
    /// [`ChunkStore::put_known`] that returns once the chunk is *written*: readable, and
    /// surviving a kill of any process (it is in the OS's page cache, or on the device), but
    /// not yet durable against power loss: [`ChunkStore::sync`] makes it so. A power cut before
    /// that may lose it, never leave it torn (a store that cannot tell is not allowed to keep
    /// it: see `LocalChunkStore`). A store without such a write puts durably (the default).
    fn put_unsynced(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_known(meta, data, known_page_crcs)
    }
    /// Make the chunks of `keys` that [`ChunkStore::put_unsynced`] wrote durable (group
    /// commit: one call for many). Keys of chunks already durable, or not held, are ignored.
    /// After a failure nothing is known of them: the caller rewrites them with
    /// [`ChunkStore::put_replacing`] (a second sync could report success for pages the
    /// failed one dropped).
    fn sync(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        let _ = keys;
        Ok(())
    }
    /// Put a chunk durably in place of the one of the same key, if any, with a complete
    /// chunk under its name at every instant (a kill in between leaves the old one or the
    /// new one). The default deletes first: only for stores whose puts are all durable, which
    /// never need it.
    fn put_replacing(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        match self.delete(&meta.key, meta.epoch) {
            Ok(()) | Err(ChunkError::Missing { .. }) => {}
            Err(e) => return Err(e),
        }
        self.put_known(meta, data, known_page_crcs)
    }
    /// Read `buf.len()` bytes of the chunk's data at `offset_bytes`, verified.
    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError>;
    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError>;
    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError>;
    /// Every chunk of a family, in key order.
    fn list(&self, family: u64) -> Result<Vec<ChunkInfo>, ChunkError>;
    fn families(&self) -> Result<Vec<u64>, ChunkError>;
    /// Raise a family's epoch: later writes and deletes with an older one are refused.
    fn fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError>;
    fn stat(&self) -> Result<StoreStat, ChunkError>;
    /// Read every chunk (of one family, or all) in full and check it.
    fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError>;
    /// Its d.node registered again: a store that waits before reconnecting after failures
    /// tries at the next call instead. Local stores have nothing to do.
    fn reconnect_now(&self) {}
}

/// A chunk the store holds: its verified header, its file's length, and whether the file is
/// durable (`false`: written by `put_unsynced`, under its unsynced name until a sync).
#[derive(Debug, Clone)]
struct Held {
    header: Arc<ChunkHeader>,
    len_bytes: u64,
    synced: bool,
}

/// A store of chunk files on one disk.
#[derive(Debug)]
pub struct LocalChunkStore {
    disk: Arc<dyn Disk>,
    capacity_bytes: Option<u64>,
    used_bytes: AtomicU64,
    bad_chunks: AtomicU64,
    /// Every chunk's verified header, file length and durability, read at open.
    index: Mutex<BTreeMap<ChunkKey, Held>>,
    fences: Mutex<HashMap<u64, Epoch>>,
    /// Serialises puts and deletes of one store (the capacity check and the index).
    write_lock: Mutex<()>,
    /// Serialises syncs of unsynced chunks (see `unsynced`).
    sync_lock: Mutex<()>,
    /// Scrub takes corrupt chunks out of service (a d.node of a cluster, where the chunk is
    /// rebuilt from its stripe); off, they stay (their good pages still serve reads).
    quarantine_corrupt: bool,
    recycled: RecycledFiles,
}

pub(crate) fn chunk_path(key: &ChunkKey) -> String {
    format!(
        "{:016x}/{:016x}.{}{CHUNK_SUFFIX}",
        key.family, key.segment, key.index
    )
}

fn family_dir(family: u64) -> String {
    format!("{family:016x}")
}

fn parse_chunk_name(family: u64, name: &str) -> Option<ChunkKey> {
    let stem = name.strip_suffix(CHUNK_SUFFIX)?;
    let (segment, index) = stem.split_once('.')?;
    Some(ChunkKey {
        family,
        segment: u64::from_str_radix(segment, 16).ok()?,
        index: index.parse().ok()?,
    })
}

impl LocalChunkStore {
    /// Open the store on `disk`, reading every chunk header (a chunk whose header fails its
    /// checks is counted bad and not served: it was torn by a crash or has rotted).
    pub fn open(
        disk: Arc<dyn Disk>,
        capacity_bytes: Option<u64>,
    ) -> Result<LocalChunkStore, ChunkError> {
        let mut store = LocalChunkStore {
            disk,
            capacity_bytes,
            used_bytes: AtomicU64::new(0),
            bad_chunks: AtomicU64::new(0),
            index: Mutex::new(BTreeMap::new()),
            fences: Mutex::new(HashMap::new()),
            write_lock: Mutex::new(()),
            sync_lock: Mutex::new(()),
            quarantine_corrupt: false,
            recycled: RecycledFiles::default(),
        };
        store.load_fences()?;
        let mut index = BTreeMap::new();
        let mut used = 0;
        let mut unsynced = Vec::new();
        for dir in store.disk.list_dir("").map_err(|e| store.err("", e))? {
            let Ok(family) = u64::from_str_radix(&dir, 16) else {
                continue;
            };
            for name in store.disk.list_dir(&dir).map_err(|e| store.err(&dir, e))? {
                let Some(key) = parse_chunk_name(family, &name) else {
                    unsynced.extend(unsynced::parse_name(family, &name));
                    continue;
                };
                let path = chunk_path(&key);
                let len = store.disk.len(&path).map_err(|e| store.err(&path, e))?;
                used += len;
                match store.load_header(&key, &path) {
                    Ok(h) => {
                        let header = Arc::new(h);
                        index.insert(
                            key,
                            Held {
                                header,
                                len_bytes: len,
                                synced: true,
                            },
                        );
                    }
                    Err(e) => {
                        tracing::warn!(chunk = %key, error = %e, "chunk header fails its checks; not served");
                        store.bad_chunks.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        // Chunks written without a sync when the store last stopped: complete ones are made
        // durable, torn ones go (see `unsynced`).
        used += store.settle_unsynced(unsynced, &mut index)?;
        store.used_bytes.store(used, Ordering::Relaxed);
        *store.index.lock() = index;
        store.recycled = RecycledFiles::load(&*store.disk, capacity_bytes)
            .map_err(|e| store.err("recycle", e))?;
        Ok(store)
    }

    fn err(&self, what: &str, e: std::io::Error) -> ChunkError {
        ChunkError::io(format!("{}/{what}", self.disk.name()), e)
    }

    fn load_fences(&self) -> Result<(), ChunkError> {
        let len = match self.disk.len(FENCES_FILE) {
            Ok(len) => len,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(self.err(FENCES_FILE, e)),
        };
        let mut bytes = vec![0u8; usize::try_from(len).unwrap_or(0)];
        self.disk
            .read_at(FENCES_FILE, 0, &mut bytes)
            .map_err(|e| self.err(FENCES_FILE, e))?;
        let fences: HashMap<u64, Epoch> =
            serde_json::from_slice(&bytes).map_err(|e| ChunkError::Corrupt {
                key: ChunkKey::new(0, 0, 0),
                offset_bytes: 0,
                detail: format!("{FENCES_FILE}: {e}"),
            })?;
        *self.fences.lock() = fences;
        Ok(())
    }

    fn store_fences(&self, fences: &HashMap<u64, Epoch>) -> Result<(), ChunkError> {
        let bytes = serde_json::to_vec(fences).expect("a map of integers serialises");
        let tmp = format!("{FENCES_FILE}.tmp");
        let _ = self.disk.remove(&tmp);
        let io = |e| self.err(FENCES_FILE, e);
        self.disk.write_new(&tmp, &[&bytes]).map_err(io)?;
        self.disk.sync_file(&tmp).map_err(io)?;
        self.disk.rename(&tmp, FENCES_FILE).map_err(io)?;
        self.disk.sync_dir("").map_err(io)
    }

    /// Read and check the header of chunk `key` from the file at `path`.
    fn load_header(&self, key: &ChunkKey, path: &str) -> Result<ChunkHeader, ChunkError> {
        let corrupt = |detail: String| ChunkError::Corrupt {
            key: *key,
            offset_bytes: 0,
            detail,
        };
        let mut fixed = vec![0u8; FIXED_HEADER_BYTES];
        self.disk
            .read_at(path, 0, &mut fixed)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => ChunkError::Missing { key: *key },
                std::io::ErrorKind::UnexpectedEof => corrupt("short file".into()),
                _ => self.err(path, e),
            })?;
        let len = format::header_len(&fixed).map_err(corrupt)?;
        let mut region = vec![0u8; usize::try_from(len).expect("bounded by the page limit")];
        self.disk
            .read_at(path, 0, &mut region)
            .map_err(|e| self.err(path, e))?;
        format::parse_header(&region, Some(key)).map_err(corrupt)
    }

    /// Let scrub quarantine corrupt chunks (see the field).
    pub fn quarantine_corrupt(mut self, yes: bool) -> LocalChunkStore {
        self.quarantine_corrupt = yes;
        self
    }

    /// The epoch a family is fenced at (0: never fenced).
    pub fn fence_epoch(&self, family: u64) -> Epoch {
        self.fences.lock().get(&family).copied().unwrap_or(0)
    }

    /// Take a corrupt chunk out of service: renamed to `.corrupt` (kept for inspection, not
    /// listed or served), so it reads as missing and c.nodes rebuild it from its stripe.
    fn quarantine(&self, key: &ChunkKey) {
        let _w = self.write_lock.lock();
        let path = self.path_of(key);
        if let Err(e) = self
            .disk
            .rename(&path, &format!("{}.corrupt", chunk_path(key)))
        {
            tracing::warn!(chunk = %key, error = %e, "could not quarantine a corrupt chunk");
            return;
        }
        if let Some(held) = self.index.lock().remove(key) {
            self.used_bytes.fetch_sub(held.len_bytes, Ordering::Relaxed);
        }
        self.bad_chunks.fetch_add(1, Ordering::Relaxed);
    }

    fn check_epoch(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        let current = self.fences.lock().get(&family).copied().unwrap_or(0);
        if epoch < current {
            return Err(ChunkError::Fenced {
                family,
                epoch,
                current,
            });
        }
        Ok(())
    }

    pub(crate) fn disk(&self) -> &dyn Disk {
        &*self.disk
    }

    pub(crate) fn name_of_disk(&self) -> String {
        self.disk.name()
    }

    pub(crate) fn header(&self, key: &ChunkKey) -> Result<(Arc<ChunkHeader>, u64), ChunkError> {
        self.index
            .lock()
            .get(key)
            .map(|held| (held.header.clone(), held.len_bytes))
            .ok_or(ChunkError::Missing { key: *key })
    }

    /// The file that holds chunk `key` now: its unsynced name until a sync renames it.
    pub(crate) fn path_of(&self, key: &ChunkKey) -> String {
        match self.index.lock().get(key) {
            Some(held) if !held.synced => unsynced::path(key),
            _ => chunk_path(key),
        }
    }

    /// `op` on the file of chunk `key`; once more under its durable name if the file went
    /// meanwhile (a sync renamed it: the only rename of a served chunk, and atomic).
    pub(crate) fn on_file<T>(
        &self,
        key: &ChunkKey,
        mut op: impl FnMut(&str) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let path = self.path_of(key);
        match op(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && path != chunk_path(key) => {
                op(&chunk_path(key))
            }
            other => other,
        }
    }

    /// The header of chunk `key` read again from its file, wherever it is now.
    fn load_current_header(&self, key: &ChunkKey) -> Result<ChunkHeader, ChunkError> {
        let path = self.path_of(key);
        match self.load_header(key, &path) {
            Err(ChunkError::Missing { .. }) if path != chunk_path(key) => {
                self.load_header(key, &chunk_path(key))
            }
            other => other,
        }
    }

    /// Read and verify pages `[start, end)` of a chunk's data.
    fn read_pages(&self, h: &ChunkHeader, start: u64, end: u64) -> Result<Vec<u8>, ChunkError> {
        let key = h.meta.key;
        let path = chunk_path(&key);
        let mut pages = vec![0u8; usize::try_from(end - start).expect("bounded chunk")];
        self.on_file(&key, |p| {
            self.disk
                .read_at(p, h.data_offset_bytes + start, &mut pages)
        })
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => ChunkError::Missing { key },
            std::io::ErrorKind::UnexpectedEof => ChunkError::Corrupt {
                key,
                offset_bytes: start,
                detail: "chunk file shorter than its header says".into(),
            },
            _ => self.err(&path, e),
        })?;
        h.verify_pages(start, &pages)?;
        Ok(pages)
    }
}

impl ChunkStore for LocalChunkStore {
    fn name(&self) -> String {
        self.disk.name()
    }

    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError> {
        self.put_known(meta, data, &[])
    }

    fn put_known(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_as(meta, data, known_page_crcs, Put::Durable)
    }

    fn put_unsynced(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_as(meta, data, known_page_crcs, Put::Unsynced)
    }

    fn sync(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        self.sync_unsynced(keys)
    }

    fn put_replacing(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.put_as(meta, data, known_page_crcs, Put::Replacing)
    }

    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError> {
        let (h, _) = self.header(key)?;
        let len = buf.len() as u64;
        check_range(key, &h, offset_bytes, len)?;
        if len == 0 {
            return Ok(());
        }
        let (start, end) = h.covering_pages(offset_bytes, len);
        let pages = self.read_pages(&h, start, end)?;
        let skip = usize::try_from(offset_bytes - start).expect("inside the span");
        buf.copy_from_slice(&pages[skip..skip + buf.len()]);
        Ok(())
    }

    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError> {
        let (h, _) = self.header(key)?;
        Ok(ChunkInfo {
            meta: h.meta,
            len_bytes: h.data_len_bytes,
        })
    }

    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError> {
        let _w = self.write_lock.lock();
        self.check_epoch(key.family, epoch)?;
        let path = self.path_of(key);
        let len = self.index.lock().get(key).map_or(0, |held| held.len_bytes);
        match self.recycled.give(&*self.disk, &path, len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ChunkError::Missing { key: *key })
            }
            Err(e) => return Err(self.err(&path, e)),
        }
        if let Some(held) = self.index.lock().remove(key) {
            self.used_bytes.fetch_sub(held.len_bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    fn list(&self, family: u64) -> Result<Vec<ChunkInfo>, ChunkError> {
        let index = self.index.lock();
        let from = ChunkKey::new(family, 0, 0);
        Ok(index
            .range(from..)
            .take_while(|(k, _)| k.family == family)
            .map(|(_, held)| ChunkInfo {
                meta: held.header.meta,
                len_bytes: held.header.data_len_bytes,
            })
            .collect())
    }

    fn families(&self) -> Result<Vec<u64>, ChunkError> {
        let mut out: Vec<u64> = self.index.lock().keys().map(|k| k.family).collect();
        out.dedup();
        Ok(out)
    }

    fn fence(&self, family: u64, epoch: Epoch) -> Result<(), ChunkError> {
        let _w = self.write_lock.lock();
        let mut next = self.fences.lock().clone();
        let current = next.entry(family).or_insert(0);
        if epoch <= *current {
            return Ok(());
        }
        *current = epoch;
        self.store_fences(&next)?;
        *self.fences.lock() = next;
        Ok(())
    }

    fn stat(&self) -> Result<StoreStat, ChunkError> {
        Ok(StoreStat {
            capacity_bytes: self.capacity_bytes,
            used_bytes: self.used_bytes.load(Ordering::Relaxed),
            chunks: self.index.lock().len() as u64,
            bad_chunks: self.bad_chunks.load(Ordering::Relaxed),
        })
    }

    fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError> {
        let keys: Vec<ChunkKey> = self
            .index
            .lock()
            .keys()
            .filter(|k| family.is_none_or(|f| k.family == f))
            .copied()
            .collect();
        let mut report = ScrubReport::default();
        for key in keys {
            report.checked += 1;
            // The header again from the disk (not the copy read at open), then every page.
            let checked = self
                .load_current_header(&key)
                .and_then(|h| self.read_pages(&h, 0, h.data_len_bytes).map(|_| ()));
            match checked {
                Ok(()) => {}
                Err(ChunkError::Missing { .. }) => {} // deleted meanwhile
                Err(ChunkError::Corrupt { .. }) => {
                    tracing::warn!(chunk = %key, quarantine = self.quarantine_corrupt, "scrub: chunk fails its checksums");
                    if self.quarantine_corrupt {
                        self.quarantine(&key);
                    }
                    report.corrupt.push(key);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(report)
    }
}

/// How a put makes its chunk durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Put {
    /// Synced (file and directory) before the put returns.
    Durable,
    /// Written under the unsynced name; a later sync makes it durable (see `unsynced`).
    Unsynced,
    /// Durable, in place of a chunk of the same key: written and synced under a temporary
    /// name, then renamed over it.
    Replacing,
}

impl LocalChunkStore {
    fn put_as(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known_page_crcs: &[Option<u32>],
        how: Put,
    ) -> Result<(), ChunkError> {
        let key = meta.key;
        if data.len() as u64 > CHUNK_DATA_MAX_BYTES {
            return Err(ChunkError::OutOfRange {
                key,
                offset_bytes: 0,
                length_bytes: data.len() as u64,
                len_bytes: CHUNK_DATA_MAX_BYTES,
            });
        }
        let _w = self.write_lock.lock();
        self.check_epoch(key.family, meta.epoch)?;
        let replaced = self.index.lock().get(&key).cloned();
        if replaced.is_some() && how != Put::Replacing {
            return Err(ChunkError::Exists { key });
        }
        let replaced_len = replaced.as_ref().map_or(0, |held| held.len_bytes);
        let header = format::encode_header_known(meta, data, known_page_crcs);
        let file_len = (header.len() + data.len()) as u64;
        if let Some(cap) = self.capacity_bytes {
            if self.used_bytes.load(Ordering::Relaxed) + file_len > cap + replaced_len {
                return Err(ChunkError::NoSpace {
                    key,
                    store: format!("{} (capacity {cap} bytes)", self.disk.name()),
                });
            }
        }
        let path = match how {
            Put::Unsynced => unsynced::path(&key),
            Put::Durable | Put::Replacing => chunk_path(&key),
        };
        // Where the bytes are written first: a replacement must not touch the chunk it
        // replaces until it is complete and synced.
        let target = match how {
            Put::Replacing => unsynced::replacement_path(&key),
            Put::Durable | Put::Unsynced => path.clone(),
        };
        let sync = how != Put::Unsynced;
        let dir = family_dir(key.family);
        let result = (|| {
            // No chunk of the family yet: its directory may be new (listing it per put would
            // cost O(chunks) per stripe).
            let first = ChunkKey {
                family: key.family,
                segment: 0,
                index: 0,
            };
            let new_dir = self
                .index
                .lock()
                .range(first..)
                .next()
                .is_none_or(|(k, _)| k.family != key.family);
            self.disk.create_dir_all(&dir)?;
            if new_dir {
                self.disk.sync_dir("")?;
            }
            // A leftover of a put that failed half way (never acknowledged) is replaced.
            if replaced.is_none() {
                let _ = self.disk.remove(&chunk_path(&key));
                let _ = self.disk.remove(&unsynced::path(&key));
            }
            let _ = self.disk.remove(&target);
            match self.recycled.take() {
                // Written (and synced, unless unsynced) under its recycled name first: a crash
                // leaves garbage in recycle/ or the whole chunk under its name, never a stale
                // file there (an unsynced name may hold one after a power cut: see `unsynced`).
                Some(reused) => {
                    let written = self
                        .disk
                        .write_over(&reused, &[&header, data])
                        .and_then(|()| match sync {
                            true => self.disk.sync_file(&reused),
                            false => Ok(()),
                        })
                        .and_then(|()| self.disk.rename(&reused, &target));
                    if written.is_err() {
                        let _ = self.disk.remove(&reused);
                    }
                    written?;
                }
                None => {
                    if let Err(e) = self.disk.write_new(&target, &[&header, data]) {
                        if e.raw_os_error() != Some(libc::ENOSPC) {
                            return Err(e);
                        }
                        // Full: the recycled files' blocks are free space.
                        self.recycled.release_all(&*self.disk);
                        let _ = self.disk.remove(&target);
                        self.disk.write_new(&target, &[&header, data])?;
                    }
                    if sync {
                        self.disk.sync_file(&target)?;
                    }
                }
            }
            if how == Put::Replacing {
                self.disk.rename(&target, &path)?;
                if replaced.as_ref().is_some_and(|held| !held.synced) {
                    // The old file went unsynced: a complete chunk is under `path` now.
                    let _ = self.disk.remove(&unsynced::path(&key));
                }
            }
            if sync {
                self.disk.sync_dir(&dir)?;
            }
            Ok(())
        })();
        if let Err(e) = result {
            let _ = self.disk.remove(&target);
            return Err(match self.err(&target, e) {
                ChunkError::NoSpace { store, .. } => ChunkError::NoSpace { key, store },
                other => other,
            });
        }
        let parsed = format::parse_header(&header, Some(&key)).expect("we just encoded it");
        self.index.lock().insert(
            key,
            Held {
                header: Arc::new(parsed),
                len_bytes: file_len,
                synced: sync,
            },
        );
        self.used_bytes.fetch_add(file_len, Ordering::Relaxed);
        self.used_bytes.fetch_sub(replaced_len, Ordering::Relaxed);
        Ok(())
    }
}

/// `offset_bytes..+len` must lie inside the chunk's data.
pub(crate) fn check_range(
    key: &ChunkKey,
    h: &format::ChunkHeader,
    offset_bytes: u64,
    len: u64,
) -> Result<(), ChunkError> {
    if offset_bytes
        .checked_add(len)
        .is_none_or(|end| end > h.data_len_bytes)
    {
        return Err(ChunkError::OutOfRange {
            key: *key,
            offset_bytes,
            length_bytes: len,
            len_bytes: h.data_len_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::disk::{FileDisk, ReadFault, SimDisk};
    use crate::recycle::RECYCLE_DIR;

    fn meta(family: u64, segment: u64, epoch: Epoch) -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(family, segment, 0),
            epoch,
            codec_id: 0,
            data_chunks: 1,
            parity_chunks: 0,
            stripe_len_bytes: 10_000,
        }
    }

    fn data() -> Vec<u8> {
        (0..10_000u32).map(|i| (i % 251) as u8).collect()
    }

    #[test]
    fn deleted_files_are_reused_and_a_power_cut_never_leaves_a_bad_chunk() {
        for direct in [false, true] {
            let dir = tempfile::tempdir().unwrap();
            let disk = Arc::new(FileDisk::open(dir.path(), direct).unwrap());
            let store = LocalChunkStore::open(disk.clone(), None).unwrap();
            let bytes = vec![7u8; 3 * 4096];
            store.put(&meta(1, 1, 0), &bytes).unwrap();
            store.delete(&ChunkKey::new(1, 1, 0), 0).unwrap();
            assert_eq!(disk.list_dir(RECYCLE_DIR).unwrap().len(), 1);
            // A smaller chunk over the recycled file: cut to its own length.
            store.put(&meta(1, 2, 0), &data()).unwrap();
            assert!(disk.list_dir(RECYCLE_DIR).unwrap().is_empty());
            let reopened = LocalChunkStore::open(disk, None).unwrap();
            let mut back = vec![0u8; 10_000];
            reopened
                .read(&ChunkKey::new(1, 2, 0), 0, &mut back)
                .unwrap();
            assert_eq!(back, data());
            assert_eq!(reopened.stat().unwrap().bad_chunks, 0);
        }
        for seed in 0..40 {
            let disk = SimDisk::new();
            let store = LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
            store.put(&meta(1, 1, 0), &data()).unwrap();
            store.put(&meta(1, 2, 0), &data()).unwrap();
            store.delete(&ChunkKey::new(1, 1, 0), 0).unwrap();
            // Half of a put over the recycled file: written, not yet renamed into place.
            let reused = disk.list_dir(RECYCLE_DIR).unwrap()[0].clone();
            disk.write_over(&format!("{RECYCLE_DIR}/{reused}"), &[b"half a chunk"])
                .unwrap();
            disk.power_cut(seed);
            let store = LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
            assert_eq!(store.stat().unwrap().bad_chunks, 0, "seed {seed}");
            let mut back = vec![0u8; 10_000];
            store.read(&ChunkKey::new(1, 2, 0), 0, &mut back).unwrap();
            assert_eq!(back, data(), "seed {seed}");
            // Whatever the cut left in recycle/ is written over by the next put.
            store.put(&meta(1, 3, 0), &data()).unwrap();
            store.read(&ChunkKey::new(1, 3, 0), 0, &mut back).unwrap();
            assert_eq!(back, data(), "seed {seed}");
        }
    }

    #[test]
    fn chunks_round_trip_list_per_family_delete_and_respect_capacity() {
        let dir = tempfile::tempdir().unwrap();
        for direct in [false, true] {
            let root = dir.path().join(format!("d{direct}"));
            let disk = Arc::new(FileDisk::open(&root, direct).unwrap());
            let store = LocalChunkStore::open(disk, Some(3 * 16384)).unwrap();
            let bytes = data();
            store.put(&meta(1, 0xabc, 0), &bytes).unwrap();
            store.put(&meta(2, 0xabc, 0), &bytes).unwrap();
            let mut buf = vec![0u8; 100];
            store
                .read(&ChunkKey::new(1, 0xabc, 0), 4000, &mut buf)
                .unwrap();
            assert_eq!(&buf[..], &bytes[4000..4100]);
            assert_eq!(store.list(1).unwrap().len(), 1);
            assert_eq!(store.families().unwrap(), vec![1, 2]);
            let err = store.put(&meta(3, 1, 0), &vec![0u8; 40_000]).unwrap_err();
            assert!(err.is_no_space(), "{err}");
            assert!(matches!(
                store.put(&meta(1, 0xabc, 0), &bytes),
                Err(ChunkError::Exists { .. })
            ));
            store.delete(&ChunkKey::new(1, 0xabc, 0), 0).unwrap();
            assert!(store
                .read(&ChunkKey::new(1, 0xabc, 0), 0, &mut buf)
                .unwrap_err()
                .is_missing());
            drop(store);
            let disk = Arc::new(FileDisk::open(&root, direct).unwrap());
            let reopened = LocalChunkStore::open(disk, None).unwrap();
            assert_eq!(reopened.stat().unwrap().chunks, 1);
            assert_eq!(reopened.list(2).unwrap()[0].len_bytes, 10_000);
        }
    }

    #[test]
    fn fenced_writers_are_refused_and_fences_survive_reopen() {
        let disk = SimDisk::new();
        let store = LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
        store.fence(5, 3).unwrap();
        assert!(matches!(
            store.put(&meta(5, 1, 2), &data()),
            Err(ChunkError::Fenced { current: 3, .. })
        ));
        store.put(&meta(5, 1, 3), &data()).unwrap();
        store.put(&meta(6, 1, 0), &data()).unwrap();
        let store = LocalChunkStore::open(Arc::new(disk), None).unwrap();
        assert!(matches!(
            store.delete(&ChunkKey::new(5, 1, 0), 1),
            Err(ChunkError::Fenced { .. })
        ));
    }

    #[test]
    fn corrupt_and_misdirected_pages_are_never_served_and_scrub_finds_rot() {
        let disk = SimDisk::new();
        let store = LocalChunkStore::open(Arc::new(disk.clone()), None)
            .unwrap()
            .quarantine_corrupt(true);
        store.put(&meta(1, 1, 0), &data()).unwrap();
        store.put(&meta(1, 2, 0), &data()).unwrap();
        let key = ChunkKey::new(1, 1, 0);
        let path = chunk_path(&key);
        let (h, _) = store.header(&key).unwrap();
        let base = h.data_offset_bytes;
        let mut buf = vec![0u8; 4096];
        disk.inject(ReadFault::Misdirect {
            path: path.clone(),
            page_offset: base,
            from_offset: base + 4096,
        });
        assert!(matches!(
            store.read(&key, 0, &mut buf),
            Err(ChunkError::Corrupt { .. })
        ));
        disk.clear_faults();
        store.read(&key, 0, &mut buf).unwrap();
        disk.rot(&path, base + 5000).unwrap();
        assert!(matches!(
            store.read(&key, 4096, &mut buf),
            Err(ChunkError::Corrupt { .. })
        ));
        store.read(&key, 0, &mut buf).unwrap(); // other pages are fine
        let report = store.scrub(None).unwrap();
        assert_eq!(report.checked, 2);
        assert_eq!(report.corrupt, vec![key]);
        // Quarantined: missing now (rebuilt by c.nodes), counted, not listed.
        assert!(store.read(&key, 0, &mut buf).unwrap_err().is_missing());
        assert_eq!(store.stat().unwrap().bad_chunks, 1);
        assert_eq!(store.list(1).unwrap().len(), 1);
        assert!(disk.paths().iter().any(|p| p.ends_with(".chunk.corrupt")));
    }

    #[test]
    fn a_power_cut_never_leaves_a_served_chunk_that_fails_its_checks() {
        for seed in 0..30 {
            let disk = SimDisk::new();
            let store = LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
            store.put(&meta(1, 1, 0), &data()).unwrap();
            // A put cut short by the power cut: the file is written but not synced.
            disk.write_new(
                &chunk_path(&ChunkKey::new(1, 2, 0)),
                &[&format::encode_header(&meta(1, 2, 0), &data()), &data()],
            )
            .unwrap();
            disk.power_cut(seed);
            let store = LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
            let mut buf = vec![0u8; 10_000];
            store.read(&ChunkKey::new(1, 1, 0), 0, &mut buf).unwrap();
            assert_eq!(buf, data());
            match store.read(&ChunkKey::new(1, 2, 0), 0, &mut buf) {
                Ok(()) => assert_eq!(buf, data()),
                Err(e) => assert!(
                    matches!(e, ChunkError::Missing { .. } | ChunkError::Corrupt { .. }),
                    "{e}"
                ),
            }
        }
    }
}
