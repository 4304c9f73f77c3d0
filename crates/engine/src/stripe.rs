//! The c.node's stripe store: a segment's bytes become one stripe of k data + m parity chunks
//! on the chunk stores its placement names, and come back as byte ranges, reconstructed from
//! any k chunks when some are missing, corrupt or on a d.node that is down.
//!
//! - `put` encodes and writes every chunk in parallel; the stripe is durable once
//!   min(k+1, k+m) of them are (or more, if the pool says so), so one more loss right after the write
//!   cannot lose it. Chunks that failed are left for repair. `write` can also leave the chunks
//!   *written* (readable, surviving a kill of any process, not yet a power cut) and `sync`
//!   make written stripes durable later, a group at a time (see [`StripeWrite`]).
//! - `read` maps a byte range of the stripe's data to the data chunk(s) holding it (one
//!   d.node for a small read). When a chunk cannot serve it, the same page-aligned window is
//!   read from k other chunks and the missing one rebuilt position-wise (Reed-Solomon and
//!   copies are linear per byte position), so a degraded 4 KiB read costs k small reads, not
//!   whole chunks.
//! - `delete`, `list` (per family, from every store) and the write epoch per family.
//!
//! Knows nothing of volumes or segments' contents; see [`crate::seal`] and [`crate::read`]
//! for its callers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use weft_chunk::{ChunkError, ChunkKey, ChunkMeta, ChunkStore, Epoch};
use weft_ec::{Redundancy, StripeGeometry};

/// Degraded reads rebuild windows aligned to this (the chunk page and EC alignment).
const WINDOW_ALIGN_BYTES: u64 = 4096;

/// Where a family's stripes go.
pub trait Placement: Send + Sync + std::fmt::Debug {
    /// The redundancy new stripes of `family` get.
    fn redundancy(&self, family: u64) -> Redundancy;
    /// The stores of the stripe of (`family`, `segment`) with `redundancy`, in chunk order (k
    /// data chunks, then m parity chunks); `None` where no store is assigned.
    fn stores(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
    ) -> Vec<Option<Arc<dyn ChunkStore>>>;
    /// Every store, for listings and space.
    fn all_stores(&self) -> Vec<Arc<dyn ChunkStore>>;

    /// Every store that may hold a chunk: the ones in use and those that are down or out but
    /// may still hold the only copy of something. A listing that is to prove a chunk absent
    /// needs an answer from each (see [`StripeStore::list`]).
    fn listing_stores(&self) -> Vec<Arc<dyn ChunkStore>> {
        self.all_stores()
    }

    /// How many of a stripe's chunks must be durable before it is: at least the redundancy's
    /// minimum, min(k+1, k+m); a pool may ask for more.
    fn min_durable_chunks(&self, _family: u64, redundancy: Redundancy) -> u8 {
        redundancy.min_durable_chunks()
    }

    /// Rises whenever a store comes or goes (down, up, out) or stripes move: the repairer
    /// scans again, and the cluster is not healthy until a scan started after it finished.
    fn generation(&self) -> u64 {
        0
    }

    /// Put `family`'s stripes in `pool` from now on (a new family, or one recovered at start).
    /// Fails when the placement has no such pool.
    fn bind_family(&self, _family: u64, pool: &str) -> Result<(), String> {
        Err(format!(
            "this datastore has no pools (asked for {pool:?}); pools are a cluster feature"
        ))
    }

    /// Space over every store: (capacity if every store is limited, used). Called on every
    /// write's admission, so it must be cheap (a network placement answers from its view).
    fn space(&self) -> (Option<u64>, u64) {
        let mut capacity = Some(0u64);
        let mut used = 0;
        for store in self.all_stores() {
            let stat = store.stat().unwrap_or_default();
            used += stat.used_bytes;
            capacity = match (capacity, stat.capacity_bytes) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
        }
        (capacity, used)
    }
}

/// Everything on one chunk store, unprotected: single-process mode's one local d.node.
#[derive(Debug)]
pub struct SingleStore(pub Arc<dyn ChunkStore>);

impl Placement for SingleStore {
    fn redundancy(&self, _family: u64) -> Redundancy {
        Redundancy::None
    }

    fn stores(&self, _f: u64, _s: u64, redundancy: Redundancy) -> Vec<Option<Arc<dyn ChunkStore>>> {
        vec![Some(self.0.clone()); usize::from(redundancy.total_chunks())]
    }

    fn all_stores(&self) -> Vec<Arc<dyn ChunkStore>> {
        vec![self.0.clone()]
    }
}

/// A stripe as the stores list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeListing {
    pub segment: u64,
    pub stripe_len_bytes: u64,
    pub redundancy: Redundancy,
    /// Chunks found (distinct indexes).
    pub chunks: u8,
}

/// A family's stripes as the stores that answered list them, and the stores that did not:
/// a stripe missing chunks is proven to have no more than it shows only when `unanswered`
/// is empty.
#[derive(Debug, Clone, Default)]
pub struct FamilyListing {
    pub stripes: BTreeMap<u64, StripeListing>,
    /// Names of the stores that could not be asked (down, unreachable, hung).
    pub unanswered: Vec<String>,
}

impl FamilyListing {
    /// Every store that may hold a chunk answered.
    pub fn complete(&self) -> bool {
        self.unanswered.is_empty()
    }
}

impl StripeListing {
    /// Enough chunks survive to read the stripe.
    pub fn readable(&self) -> bool {
        self.chunks >= self.redundancy.data_chunks()
    }
}

/// Why a stripe operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StripeError {
    #[error("stripe {family:x}/{segment:x}: only {durable} of {needed} chunks durable: {detail}")]
    NotDurable {
        family: u64,
        segment: u64,
        durable: u8,
        needed: u8,
        no_space: bool,
        detail: String,
    },
    #[error("stripe {family:x}/{segment:x} unreadable: {detail}")]
    Unreadable {
        family: u64,
        segment: u64,
        /// Every chunk is gone (a deleted stripe), not only some.
        missing: bool,
        detail: String,
    },
    #[error("stripe {family:x}/{segment:x}: {detail}")]
    Invalid {
        family: u64,
        segment: u64,
        detail: String,
    },
    #[error(transparent)]
    Chunk(#[from] ChunkError),
}

impl StripeError {
    pub fn is_no_space(&self) -> bool {
        match self {
            StripeError::NotDurable { no_space, .. } => *no_space,
            StripeError::Chunk(c) => c.is_no_space(),
            _ => false,
        }
    }

    /// The stripe no longer exists (GC deleted it): the caller looks its blocks up again.
    pub fn is_missing(&self) -> bool {
        matches!(self, StripeError::Unreadable { missing: true, .. })
    }
}

/// How a stripe write leaves its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StripeWrite {
    /// Durable when the write returns.
    Durable,
    /// Written ([`ChunkStore::put_unsynced`]): readable and surviving a kill of any process,
    /// not a power cut, until [`StripeStore::sync`].
    Unsynced,
    /// Durable, in place of the chunks of an earlier write of the same stripe whose sync
    /// failed ([`ChunkStore::put_replacing`]).
    Replacing,
}

/// A stripe `write` left as its `StripeWrite` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenStripe {
    /// The chunks written (at least as many as a durable stripe needs).
    pub chunks: Vec<u8>,
    /// Chunks not written, left for the repairer (see [`StripeStore::note_missed_at_write`]).
    pub missed: u64,
}

/// A written stripe to make durable ([`StripeStore::sync`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripeToSync {
    pub family: u64,
    pub segment: u64,
    pub redundancy: Redundancy,
    /// Its chunks to sync: those written (or every index, when that is not known).
    pub chunks: Vec<u8>,
}

/// Once a stripe is durable, chunk writes still running get this long, at least, to finish
/// before the stripe is acknowledged without them (they go on in the background; the repairer
/// rewrites any that fail): a slow or hung d.node must not hold up every stripe.
const STRAGGLER_GRACE_MIN: Duration = Duration::from_millis(50);

/// Write every chunk of a stripe to its store, in parallel; return when they are all done,
/// or when `needed` succeeded and the rest had a fair chance (twice the time the first
/// `needed` took, at least [`STRAGGLER_GRACE_MIN`]). Chunks still running are reported as
/// `Unavailable` (in flight) and left to finish on their own.
/// Put one chunk. A chunk already there is a retry after a failure that wrote it after all,
/// or a leftover of a stripe that was never acknowledged: it is kept only if it is this one.
/// `known`: plain CRC32C of pages of `data` the caller already has (see
/// [`ChunkStore::put_known`]).
fn put_chunk(
    store: &dyn ChunkStore,
    m: &ChunkMeta,
    data: &[u8],
    known: &[Option<u32>],
    epoch: Epoch,
    how: StripeWrite,
) -> Result<(), ChunkError> {
    let put = |store: &dyn ChunkStore| match how {
        StripeWrite::Durable => store.put_known(m, data, known),
        StripeWrite::Unsynced => store.put_unsynced(m, data, known),
        StripeWrite::Replacing => store.put_replacing(m, data, known),
    };
    match put(store) {
        Err(ChunkError::Exists { key }) => match store.info(&key) {
            Ok(info) if info.meta == *m => Ok(()),
            _ => {
                store.delete(&key, epoch)?;
                put(store)
            }
        },
        other => other,
    }
}

fn unassigned(index: usize) -> ChunkError {
    ChunkError::Unavailable {
        node: format!("chunk {index}"),
        detail: "no d.node assigned".into(),
    }
}

/// The stripe of a pool without parity and one data chunk is that chunk.
fn put_single_chunk(
    stores: &[Option<Arc<dyn ChunkStore>>],
    m: &ChunkMeta,
    data: &[u8],
    known: &[Option<u32>],
    epoch: Epoch,
    how: StripeWrite,
) -> Result<(), ChunkError> {
    match stores.first().cloned().flatten() {
        Some(store) => put_chunk(&*store, m, data, known, epoch, how),
        None => Err(unassigned(0)),
    }
}

fn put_chunks(
    stores: &[Option<Arc<dyn ChunkStore>>],
    chunks: Vec<Vec<u8>>,
    meta: impl Fn(u8) -> ChunkMeta,
    epoch: Epoch,
    needed: usize,
    how: StripeWrite,
) -> Vec<Result<(), ChunkError>> {
    let put_one = move |store: &dyn ChunkStore, m: &ChunkMeta, data: &[u8]| {
        put_chunk(store, m, data, &[], epoch, how)
    };
    let total = chunks.len();
    if total == 1 {
        return vec![put_single_chunk(
            stores,
            &meta(0),
            &chunks[0],
            &[],
            epoch,
            how,
        )];
    }
    let mut results: Vec<Option<Result<(), ChunkError>>> = (0..total).map(|_| None).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    for (index, data) in chunks.into_iter().enumerate() {
        let Some(store) = stores.get(index).cloned().flatten() else {
            results[index] = Some(Err(unassigned(index)));
            continue;
        };
        let m = meta(u8::try_from(index).expect("at most 24 chunks"));
        let tx = tx.clone();
        let spawned = std::thread::Builder::new()
            .name("weft-chunk-put".into())
            .spawn(move || {
                let _ = tx.send((index, put_one(&*store, &m, &data)));
            });
        if let Err(e) = spawned {
            results[index] = Some(Err(ChunkError::io("chunk put thread", e)));
        }
    }
    drop(tx);
    let started = Instant::now();
    let mut deadline: Option<Instant> = None;
    loop {
        let pending = results.iter().filter(|r| r.is_none()).count();
        if pending == 0 {
            break;
        }
        let ok = results.iter().filter(|r| matches!(r, Some(Ok(())))).count();
        if ok >= needed && deadline.is_none() {
            deadline = Some(Instant::now() + (2 * started.elapsed()).max(STRAGGLER_GRACE_MIN));
        }
        let got = match deadline {
            Some(d) => match rx.recv_timeout(d.saturating_duration_since(Instant::now())) {
                Ok(r) => r,
                Err(_) => break,
            },
            None => match rx.recv() {
                Ok(r) => r,
                Err(_) => break,
            },
        };
        results[got.0] = Some(got.1);
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|| {
                Err(ChunkError::Unavailable {
                    node: format!("chunk {i}"),
                    detail: "still being written when the stripe was acknowledged".into(),
                })
            })
        })
        .collect()
}

/// Counters of the stripe store.
#[derive(Debug, Default)]
pub struct StripeCounters {
    /// Reads that had to reconstruct from other chunks.
    pub degraded_reads: AtomicU64,
    /// Chunk reads that failed their checksums.
    pub corrupt_chunks: AtomicU64,
    /// Chunks that could not be written (the stripe was durable without them).
    pub chunks_missed_at_write: AtomicU64,
}

/// The stripe store of a c.node.
#[derive(Debug)]
pub struct StripeStore {
    placement: Arc<dyn Placement>,
    epochs: Mutex<HashMap<u64, Epoch>>,
    /// The epoch of families without their own: this c.node's.
    default_epoch: AtomicU64,
    /// Chunks a read found corrupt, for the repairer: (family, segment, index).
    suspects: Mutex<std::collections::BTreeSet<(u64, u64, u8)>>,
    pub counters: StripeCounters,
}

impl StripeStore {
    pub fn new(placement: Arc<dyn Placement>) -> StripeStore {
        StripeStore {
            placement,
            epochs: Mutex::new(HashMap::new()),
            default_epoch: AtomicU64::new(0),
            suspects: Mutex::new(std::collections::BTreeSet::new()),
            counters: StripeCounters::default(),
        }
    }

    pub fn placement(&self) -> &Arc<dyn Placement> {
        &self.placement
    }

    /// The epoch this c.node writes `family`'s chunks with.
    pub fn set_epoch(&self, family: u64, epoch: Epoch) {
        self.epochs.lock().insert(family, epoch);
    }

    /// The epoch for families without their own (a c.node's ownership generation).
    pub fn set_default_epoch(&self, epoch: Epoch) {
        self.default_epoch.store(epoch, Ordering::Release);
    }

    fn epoch(&self, family: u64) -> Epoch {
        self.epochs
            .lock()
            .get(&family)
            .copied()
            .unwrap_or_else(|| self.default_epoch.load(Ordering::Acquire))
    }

    /// Take the chunks reads found corrupt since the last call.
    pub fn take_suspects(&self) -> Vec<(u64, u64, u8)> {
        std::mem::take(&mut *self.suspects.lock())
            .into_iter()
            .collect()
    }

    fn suspect(&self, key: &ChunkKey) {
        self.counters.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
        self.suspects
            .lock()
            .insert((key.family, key.segment, key.index));
    }

    /// Rebuild chunk `index` of a stripe from the others and write it to its store
    /// (replacing a corrupt copy). Returns the bytes written.
    pub fn rebuild_chunk(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
        stripe_len_bytes: u64,
        index: u8,
    ) -> Result<u64, StripeError> {
        let invalid = |detail: String| StripeError::Invalid {
            family,
            segment,
            detail,
        };
        let geometry = StripeGeometry::for_len(redundancy, stripe_len_bytes)
            .map_err(|e| invalid(e.to_string()))?;
        let stores = self.placement.stores(family, segment, redundancy);
        let Some(target) = stores.get(usize::from(index)).cloned().flatten() else {
            return Err(invalid(format!("no d.node for chunk {index}")));
        };
        let chunk_len = usize::try_from(geometry.chunk_len_bytes()).expect("bounded chunk");
        let total = usize::from(redundancy.total_chunks());
        let k = usize::from(redundancy.data_chunks());
        let mut chunks: Vec<Option<Vec<u8>>> = vec![None; total];
        let mut have = 0;
        let mut errors = Vec::new();
        for i in (0..total).filter(|&i| i != usize::from(index)) {
            if have == k {
                break;
            }
            let Some(store) = stores.get(i).cloned().flatten() else {
                continue;
            };
            let key = ChunkKey::new(family, segment, u8::try_from(i).expect("few chunks"));
            let mut buf = vec![0u8; chunk_len];
            match store.read(&key, 0, &mut buf) {
                Ok(()) => {
                    chunks[i] = Some(buf);
                    have += 1;
                }
                Err(e) => {
                    if matches!(e, ChunkError::Corrupt { .. }) {
                        self.suspect(&key);
                    }
                    errors.push(format!("chunk {i}: {e}"));
                }
            }
        }
        if have < k {
            return Err(StripeError::Unreadable {
                family,
                segment,
                missing: false,
                detail: errors.join("; "),
            });
        }
        weft_ec::reconstruct(&geometry, &mut chunks).map_err(|e| invalid(e.to_string()))?;
        let data = chunks[usize::from(index)].take().expect("reconstructed");
        let epoch = self.epoch(family);
        let meta = ChunkMeta {
            key: ChunkKey::new(family, segment, index),
            epoch,
            codec_id: redundancy.codec_id().to_u8(),
            data_chunks: redundancy.data_chunks(),
            parity_chunks: redundancy.parity_chunks(),
            stripe_len_bytes,
        };
        match target.delete(&meta.key, epoch) {
            Ok(()) | Err(ChunkError::Missing { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        target.put(&meta, &data)?;
        Ok(data.len() as u64)
    }

    /// Write `bytes` as the stripe of (`family`, `segment`) protected by `redundancy`; durable
    /// when this returns. Returns how many of its chunks are missing (left for the repairer):
    /// the caller passes that to [`StripeStore::note_missed_at_write`] once the stripe is
    /// where the repairer looks for stripes.
    pub fn put(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
        bytes: &[u8],
    ) -> Result<u64, StripeError> {
        self.put_known(family, segment, redundancy, bytes, &[])
    }

    /// [`StripeStore::put`] of bytes some of whose 4 KiB pages' plain CRC32C the caller knows
    /// (`known_page_crcs[i]`: page i of `bytes`). Where the stripe is one chunk of the bytes as
    /// they are, its store derives those pages' checksums from them instead of reading the
    /// pages again; chunks cut and encoded for erasure coding are checksummed as they are.
    pub fn put_known(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
        bytes: &[u8],
        known_page_crcs: &[Option<u32>],
    ) -> Result<u64, StripeError> {
        self.write(
            family,
            segment,
            redundancy,
            bytes,
            known_page_crcs,
            StripeWrite::Durable,
        )
        .map(|w| w.missed)
    }

    /// [`StripeStore::put_known`], leaving the chunks as `how` says; fails unless as many
    /// chunks as a durable stripe needs were written.
    pub fn write(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
        bytes: &[u8],
        known_page_crcs: &[Option<u32>],
        how: StripeWrite,
    ) -> Result<WrittenStripe, StripeError> {
        let invalid = |detail: String| StripeError::Invalid {
            family,
            segment,
            detail,
        };
        let geometry = StripeGeometry::for_len(redundancy, bytes.len() as u64)
            .map_err(|e| invalid(e.to_string()))?;
        let stores = self.placement.stores(family, segment, redundancy);
        let epoch = self.epoch(family);
        let meta = |index: u8| ChunkMeta {
            key: ChunkKey::new(family, segment, index),
            epoch,
            codec_id: redundancy.codec_id().to_u8(),
            data_chunks: redundancy.data_chunks(),
            parity_chunks: redundancy.parity_chunks(),
            stripe_len_bytes: bytes.len() as u64,
        };
        let needed = self.needed(family, redundancy);
        let results = if redundancy.total_chunks() == 1
            && geometry.chunk_len_bytes() == bytes.len() as u64
        {
            // No parity and no padding: write the segment's bytes as they are, uncopied.
            vec![put_single_chunk(
                &stores,
                &meta(0),
                bytes,
                known_page_crcs,
                epoch,
                how,
            )]
        } else {
            let chunks = weft_ec::encode(&geometry, bytes).map_err(|e| invalid(e.to_string()))?;
            put_chunks(&stores, chunks, meta, epoch, usize::from(needed), how)
        };
        let durable = results.iter().filter(|r| r.is_ok()).count() as u8;
        let failures: Vec<String> = results
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().err().map(|e| format!("chunk {i}: {e}")))
            .collect();
        if durable < needed {
            let no_space = results
                .iter()
                .any(|r| r.as_ref().is_err_and(ChunkError::is_no_space));
            return Err(StripeError::NotDurable {
                family,
                segment,
                durable,
                needed,
                no_space,
                detail: failures.join("; "),
            });
        }
        if !failures.is_empty() {
            tracing::warn!(family, segment, failures = %failures.join("; "), "stripe written with chunks missing; left for repair");
        }
        let chunks = results
            .iter()
            .enumerate()
            .filter(|(_, r)| r.is_ok())
            .map(|(i, _)| u8::try_from(i).expect("at most 24 chunks"))
            .collect();
        Ok(WrittenStripe {
            chunks,
            missed: failures.len() as u64,
        })
    }

    /// How many chunks of a stripe of `family` must be durable for the stripe to be.
    fn needed(&self, family: u64, redundancy: Redundancy) -> u8 {
        self.placement
            .min_durable_chunks(family, redundancy)
            .clamp(redundancy.min_durable_chunks(), redundancy.total_chunks())
    }

    /// At recovery: make the chunks of `stripes` that reachable stores hold durable (those it
    /// replays, which may be written and not synced). A store that cannot be reached keeps
    /// its chunks as they are: the stripe was readable from the others, and a chunk a power
    /// cut tears there is gone at its next start, for the repairer to rebuild.
    pub fn sync_reachable(&self, stripes: &[StripeToSync]) -> Result<(), StripeError> {
        let mut groups: Vec<(Arc<dyn ChunkStore>, Vec<ChunkKey>)> = Vec::new();
        for s in stripes {
            let stores = self.placement.stores(s.family, s.segment, s.redundancy);
            for &index in &s.chunks {
                let Some(store) = stores.get(usize::from(index)).cloned().flatten() else {
                    continue;
                };
                let key = ChunkKey::new(s.family, s.segment, index);
                match groups.iter_mut().find(|(g, _)| Arc::ptr_eq(g, &store)) {
                    Some((_, keys)) => keys.push(key),
                    None => groups.push((store, vec![key])),
                }
            }
        }
        for (store, keys) in groups {
            match store.sync(&keys) {
                Ok(()) => {}
                Err(e @ ChunkError::Unavailable { .. }) => {
                    tracing::warn!(store = store.name(), error = %e, "could not sync replayed stripes on an unreachable store");
                }
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Make written stripes durable: their chunks are synced with one call per store for the
    /// whole group (one directory sync each, not one per stripe). Per stripe, in order: `Ok`
    /// once as many of its chunks as a durable stripe needs are synced. A stripe that failed
    /// must be written again ([`StripeWrite::Replacing`]): after a failed sync nothing is
    /// known of its pages.
    pub fn sync(&self, stripes: &[StripeToSync]) -> Vec<Result<(), StripeError>> {
        let mut groups: Vec<(Arc<dyn ChunkStore>, Vec<ChunkKey>)> = Vec::new();
        // Per stripe: the group of each of its chunks.
        let mut owners: Vec<Vec<usize>> = Vec::with_capacity(stripes.len());
        for s in stripes {
            let stores = self.placement.stores(s.family, s.segment, s.redundancy);
            let mut mine = Vec::new();
            for &index in &s.chunks {
                let Some(store) = stores.get(usize::from(index)).cloned().flatten() else {
                    continue;
                };
                let key = ChunkKey::new(s.family, s.segment, index);
                let group = match groups.iter().position(|(g, _)| Arc::ptr_eq(g, &store)) {
                    Some(g) => g,
                    None => {
                        groups.push((store, Vec::new()));
                        groups.len() - 1
                    }
                };
                groups[group].1.push(key);
                mine.push(group);
            }
            owners.push(mine);
        }
        let synced: Vec<Result<(), String>> = groups
            .iter()
            .map(|(store, keys)| {
                store
                    .sync(keys)
                    .map_err(|e| format!("{}: {e}", store.name()))
            })
            .collect();
        stripes
            .iter()
            .zip(owners)
            .map(|(s, mine)| {
                let durable = mine.iter().filter(|&&g| synced[g].is_ok()).count();
                let durable = u8::try_from(durable).expect("at most 24 chunks");
                let needed = self.needed(s.family, s.redundancy);
                let detail: Vec<&str> = mine
                    .iter()
                    .filter_map(|&g| synced[g].as_ref().err().map(String::as_str))
                    .collect();
                // Without a failure every chunk asked for is durable, however many that is.
                if durable >= needed || detail.is_empty() {
                    return Ok(());
                }
                Err(StripeError::NotDurable {
                    family: s.family,
                    segment: s.segment,
                    durable,
                    needed,
                    no_space: false,
                    detail: format!("sync failed: {}", detail.join("; ")),
                })
            })
            .collect()
    }

    /// `missed` chunks of a stripe the repairer can now find (sealed, or a committed
    /// checkpoint's) were not written: counted only now, so a repair scan that started before
    /// this cannot pass for caught up (see `repair.rs`).
    pub fn note_missed_at_write(&self, missed: u64) {
        if missed > 0 {
            self.counters
                .chunks_missed_at_write
                .fetch_add(missed, Ordering::AcqRel);
        }
    }

    /// Read `buf.len()` bytes of the stripe's data at `offset_bytes`; `stripe_len_bytes` and
    /// `redundancy` are what it was written with.
    pub fn read(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
        stripe_len_bytes: u64,
        offset_bytes: u64,
        buf: &mut [u8],
    ) -> Result<(), StripeError> {
        let geometry = StripeGeometry::for_len(redundancy, stripe_len_bytes).map_err(|e| {
            StripeError::Invalid {
                family,
                segment,
                detail: e.to_string(),
            }
        })?;
        let ranges = geometry
            .locate(offset_bytes, buf.len() as u64)
            .map_err(|e| StripeError::Invalid {
                family,
                segment,
                detail: e.to_string(),
            })?;
        let stores = self.placement.stores(family, segment, redundancy);
        let mut at = 0usize;
        for r in ranges {
            let len = usize::try_from(r.len_bytes).expect("bounded by the buffer");
            let out = &mut buf[at..at + len];
            at += len;
            let direct = match stores.get(usize::from(r.index)).cloned().flatten() {
                Some(store) => store.read(
                    &ChunkKey::new(family, segment, r.index),
                    r.offset_bytes,
                    out,
                ),
                None => Err(ChunkError::Unavailable {
                    node: format!("chunk {}", r.index),
                    detail: "no d.node assigned".into(),
                }),
            };
            match direct {
                Ok(()) => {}
                Err(e) if e.is_recoverable_from_stripe() && redundancy.total_chunks() > 1 => {
                    if matches!(e, ChunkError::Corrupt { .. }) {
                        self.suspect(&ChunkKey::new(family, segment, r.index));
                    }
                    self.counters.degraded_reads.fetch_add(1, Ordering::Relaxed);
                    self.read_degraded(
                        family,
                        segment,
                        &geometry,
                        &stores,
                        r.index,
                        r.offset_bytes,
                        out,
                        &e,
                    )?;
                }
                Err(e) => {
                    if matches!(e, ChunkError::Corrupt { .. }) {
                        self.counters.corrupt_chunks.fetch_add(1, Ordering::Relaxed);
                    }
                    return Err(StripeError::Unreadable {
                        family,
                        segment,
                        missing: e.is_missing(),
                        detail: e.to_string(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Rebuild `out` (bytes of chunk `index` at `offset`) from the same window of the others.
    #[allow(clippy::too_many_arguments)]
    fn read_degraded(
        &self,
        family: u64,
        segment: u64,
        geometry: &StripeGeometry,
        stores: &[Option<Arc<dyn ChunkStore>>],
        index: u8,
        offset_bytes: u64,
        out: &mut [u8],
        first_error: &ChunkError,
    ) -> Result<(), StripeError> {
        let redundancy = geometry.redundancy();
        let start = offset_bytes / WINDOW_ALIGN_BYTES * WINDOW_ALIGN_BYTES;
        let end =
            (offset_bytes + out.len() as u64).div_ceil(WINDOW_ALIGN_BYTES) * WINDOW_ALIGN_BYTES;
        let end = end.min(geometry.chunk_len_bytes());
        let window = end - start;
        let total = usize::from(redundancy.total_chunks());
        let k = usize::from(redundancy.data_chunks());
        let mut chunks: Vec<Option<Vec<u8>>> = vec![None; total];
        let mut errors = vec![format!("chunk {index}: {first_error}")];
        let mut all_missing = first_error.is_missing();
        let mut have = 0;
        for i in (0..total).filter(|&i| i != usize::from(index)) {
            if have == k {
                break;
            }
            let Some(store) = stores.get(i).cloned().flatten() else {
                errors.push(format!("chunk {i}: no d.node"));
                all_missing = false;
                continue;
            };
            let mut w = vec![0u8; usize::try_from(window).expect("bounded window")];
            let key = ChunkKey::new(family, segment, u8::try_from(i).expect("few chunks"));
            match store.read(&key, start, &mut w) {
                Ok(()) => {
                    chunks[i] = Some(w);
                    have += 1;
                }
                Err(e) => {
                    if matches!(e, ChunkError::Corrupt { .. }) {
                        self.suspect(&key);
                    }
                    all_missing &= e.is_missing();
                    errors.push(format!("chunk {i}: {e}"));
                }
            }
        }
        let unreadable = |detail: String, missing: bool| StripeError::Unreadable {
            family,
            segment,
            missing,
            detail,
        };
        if have < k {
            return Err(unreadable(errors.join("; "), all_missing && have == 0));
        }
        let window_geometry = StripeGeometry::new(redundancy, window)
            .map_err(|e| unreadable(e.to_string(), false))?;
        let rebuilt = weft_ec::reconstruct_data(&window_geometry, &chunks, index)
            .map_err(|e| unreadable(e.to_string(), false))?;
        let skip = usize::try_from(offset_bytes - start).expect("inside the window");
        out.copy_from_slice(&rebuilt[skip..skip + out.len()]);
        Ok(())
    }

    /// Delete every chunk of a stripe (missing ones are fine).
    pub fn delete(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
    ) -> Result<(), StripeError> {
        let epoch = self.epoch(family);
        let mut last = None;
        for (i, store) in self
            .placement
            .stores(family, segment, redundancy)
            .into_iter()
            .enumerate()
        {
            let Some(store) = store else { continue };
            let key = ChunkKey::new(family, segment, u8::try_from(i).expect("few chunks"));
            match store.delete(&key, epoch) {
                Ok(()) | Err(ChunkError::Missing { .. }) => {}
                Err(e) => last = Some(e),
            }
        }
        match last {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }

    /// Every stripe of a family found on any store that may hold a chunk
    /// ([`Placement::listing_stores`]), by segment id, and the stores that did not answer.
    pub fn list(&self, family: u64) -> Result<FamilyListing, StripeError> {
        let mut out: BTreeMap<u64, (StripeListing, u32)> = BTreeMap::new();
        let mut unanswered = Vec::new();
        for store in self.placement.listing_stores() {
            let chunks = match store.list(family) {
                Ok(c) => c,
                Err(e @ ChunkError::Unavailable { .. }) => {
                    tracing::warn!(store = store.name(), error = %e, "store unavailable for listing");
                    unanswered.push(store.name().to_string());
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            for c in chunks {
                let Ok(redundancy) = Redundancy::from_parts(
                    c.meta.codec_id,
                    c.meta.data_chunks,
                    c.meta.parity_chunks,
                ) else {
                    continue;
                };
                let entry = out.entry(c.meta.key.segment).or_insert((
                    StripeListing {
                        segment: c.meta.key.segment,
                        stripe_len_bytes: c.meta.stripe_len_bytes,
                        redundancy,
                        chunks: 0,
                    },
                    0,
                ));
                let bit = 1u32 << c.meta.key.index.min(31);
                if entry.1 & bit == 0 {
                    entry.1 |= bit;
                    entry.0.chunks += 1;
                }
            }
        }
        unanswered.sort_unstable();
        unanswered.dedup();
        Ok(FamilyListing {
            stripes: out.into_iter().map(|(k, (l, _))| (k, l)).collect(),
            unanswered,
        })
    }

    /// Families with any chunk on any store that answered.
    pub fn families(&self) -> Result<Vec<u64>, StripeError> {
        let mut out = Vec::new();
        for store in self.placement.listing_stores() {
            match store.families() {
                Ok(f) => out.extend(f),
                Err(e @ ChunkError::Unavailable { .. }) => {
                    tracing::warn!(store = store.name(), error = %e, "store unavailable for listing");
                }
                Err(e) => return Err(e.into()),
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    /// Space over every store: (capacity if every store is limited, used).
    pub fn space(&self) -> (Option<u64>, u64) {
        self.placement.space()
    }
}
