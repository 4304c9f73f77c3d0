//! Write-through writes (at least `write_through_min_bytes`, 16 KiB in the test
//! configuration) are acknowledged once their segment's stripe is *written* (its chunks in
//! the store's page cache), before it is synced; FLUSH and FUA wait for the sync. Over one
//! local chunk store on a simulated disk whose syncs the test can hold back or fail:
//! the acknowledgement comes first, FLUSH and FUA wait; a kill between written and synced
//! loses nothing acknowledged (with the store reopened, as a killed `weft serve`, and with
//! the store alive, as a d.node that outlives its c.node); a power cut then loses only what
//! no FLUSH or FUA covered, and recovery never replays a stripe after a torn one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use weft_chunk::{
    ChunkError, ChunkInfo, ChunkKey, ChunkMeta, ChunkStore, Disk, Epoch, LocalChunkStore,
    ScrubReport, SimDisk, StoreStat,
};
use weft_engine::stripe::SingleStore;
use weft_engine::write_log::SimWriteLog;
use weft_engine::{Backends, Engine, EngineConfig, BLOCK_SIZE_BYTES};
use weft_meta::{EmbeddedMetaStore, MetaStore};

const VOLUME_BLOCKS: u64 = 64;
/// One write-through write: 8 blocks, 32 KiB.
const WRITE_BLOCKS: u64 = 8;
/// Long enough for a call that does not wait to have returned.
const SETTLE: Duration = Duration::from_millis(300);
/// Long enough for a call that waits for nothing held back to return.
const PATIENCE: Duration = Duration::from_secs(10);

/// What the store does with a sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    Open,
    /// Syncs wait until the gate changes.
    Held,
    /// Syncs fail without syncing anything (a process stopped before its sync).
    Failing,
}

/// A local chunk store whose syncs can be held back or failed.
#[derive(Debug)]
struct GatedStore {
    inner: Arc<LocalChunkStore>,
    gate: Mutex<Gate>,
    changed: Condvar,
    syncs: AtomicU64,
}

impl GatedStore {
    fn new(inner: Arc<LocalChunkStore>) -> GatedStore {
        GatedStore {
            inner,
            gate: Mutex::new(Gate::Open),
            changed: Condvar::new(),
            syncs: AtomicU64::new(0),
        }
    }

    fn set(&self, gate: Gate) {
        *self.gate.lock() = gate;
        self.changed.notify_all();
    }
}

impl ChunkStore for GatedStore {
    fn name(&self) -> String {
        "gated".into()
    }
    fn put(&self, meta: &ChunkMeta, data: &[u8]) -> Result<(), ChunkError> {
        self.inner.put(meta, data)
    }
    fn put_known(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.inner.put_known(meta, data, known)
    }
    fn put_unsynced(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.inner.put_unsynced(meta, data, known)
    }
    fn sync(&self, keys: &[ChunkKey]) -> Result<(), ChunkError> {
        let mut gate = self.gate.lock();
        while *gate == Gate::Held {
            self.changed.wait(&mut gate);
        }
        if *gate == Gate::Failing {
            return Err(ChunkError::Unavailable {
                node: "gated".into(),
                detail: "syncs fail".into(),
            });
        }
        drop(gate);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync(keys)
    }
    fn put_replacing(
        &self,
        meta: &ChunkMeta,
        data: &[u8],
        known: &[Option<u32>],
    ) -> Result<(), ChunkError> {
        self.inner.put_replacing(meta, data, known)
    }
    fn read(&self, key: &ChunkKey, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ChunkError> {
        self.inner.read(key, offset_bytes, buf)
    }
    fn info(&self, key: &ChunkKey) -> Result<ChunkInfo, ChunkError> {
        self.inner.info(key)
    }
    fn delete(&self, key: &ChunkKey, epoch: Epoch) -> Result<(), ChunkError> {
        self.inner.delete(key, epoch)
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
}

/// The disk, journal and metadata that outlive an engine (and, unless reopened, the store).
struct World {
    disk: SimDisk,
    log: SimWriteLog,
    meta: Arc<dyn MetaStore>,
    dir: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            disk: SimDisk::new(),
            log: SimWriteLog::new(),
            meta: Arc::new(EmbeddedMetaStore::in_memory()),
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// A store opened on the disk now (a process start: unsynced chunks are settled).
    fn store(&self) -> Arc<GatedStore> {
        let store = LocalChunkStore::open(Arc::new(self.disk.clone()), None).expect("store opens");
        Arc::new(GatedStore::new(Arc::new(store)))
    }

    fn engine(&self, store: &Arc<GatedStore>) -> Engine {
        let backends = Backends {
            placement: Arc::new(SingleStore(store.clone())),
            metastore: self.meta.clone(),
            write_log: Some(Arc::new(self.log.clone())),
            epoch: 0,
            shard: weft_engine::ShardId::default(),
        };
        Engine::open_with(EngineConfig::for_tests(self.dir.path()), backends).expect("engine opens")
    }

    fn unsynced_files(&self) -> Vec<String> {
        let mut files: Vec<String> = self
            .disk
            .paths()
            .into_iter()
            .filter(|p| p.ends_with(".unsynced"))
            .collect();
        files.sort();
        files
    }
}

fn pattern(p: u64) -> Vec<u8> {
    (0..WRITE_BLOCKS as usize * BLOCK_SIZE_BYTES)
        .map(|i| (i as u64 * 31 + p * 7 + i as u64 / 4096) as u8)
        .collect()
}

fn write_at(engine: &Engine, lba: u64, p: u64, fua: bool) {
    let id = engine.open_volume("v").unwrap().id;
    engine
        .write(id, lba * BLOCK_SIZE_BYTES as u64, &pattern(p), fua)
        .unwrap();
}

/// The `WRITE_BLOCKS` blocks from `lba`.
fn read_at(engine: &Engine, lba: u64) -> Vec<u8> {
    let id = engine.open_volume("v").unwrap().id;
    let mut buf = vec![0u8; WRITE_BLOCKS as usize * BLOCK_SIZE_BYTES];
    engine
        .read(id, lba * BLOCK_SIZE_BYTES as u64, &mut buf)
        .unwrap();
    buf
}

fn zeroes() -> Vec<u8> {
    vec![0u8; WRITE_BLOCKS as usize * BLOCK_SIZE_BYTES]
}

/// Run `f` on a thread; its result, or `None` if it has not returned within `within`.
fn within<T: Send + 'static>(
    within: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> (mpsc::Receiver<T>, Option<T>) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    let got = rx.recv_timeout(within).ok();
    (rx, got)
}

/// Stop the engine dead while its syncs are held: the held sync fails (the process would
/// never have finished it) so the syncer can stop.
fn kill_while_held(engine: Engine, store: &GatedStore) {
    let engine = Arc::new(engine);
    let dying = engine.clone();
    let killer = std::thread::spawn(move || dying.crash());
    std::thread::sleep(Duration::from_millis(100));
    store.set(Gate::Failing);
    killer.join().unwrap();
    drop(engine);
}

#[test]
fn a_write_through_write_is_acknowledged_before_its_stripe_is_synced_and_flush_and_fua_wait() {
    let world = World::new();
    let store = world.store();
    let engine = Arc::new(world.engine(&store));
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    store.set(Gate::Held);

    // Acknowledged while its stripe's sync is held back: the stripe is written, not synced.
    let e = engine.clone();
    let (_, done) = within(PATIENCE, move || write_at(&e, 0, 1, false));
    assert!(done.is_some(), "the write waited for the sync");
    assert!(
        !world.unsynced_files().is_empty(),
        "its chunk is not synced"
    );
    assert_eq!(read_at(&engine, 0), pattern(1));

    // FLUSH waits for the sync.
    let e = engine.clone();
    let (flushed, done) = within(SETTLE, move || e.flush());
    assert!(
        done.is_none(),
        "FLUSH returned before the stripe was synced"
    );
    // A small FUA write is journaled: it waits for its own record, not for the stripe.
    let e = engine.clone();
    let (_, done) = within(PATIENCE, move || {
        let id = e.open_volume("v").unwrap().id;
        e.write(id, 32 * BLOCK_SIZE_BYTES as u64, &[9u8; 4096], true)
    });
    assert!(
        matches!(done, Some(Ok(()))),
        "a journaled FUA write waited: {done:?}"
    );
    store.set(Gate::Open);
    flushed.recv_timeout(PATIENCE).unwrap().unwrap();
    assert!(world.unsynced_files().is_empty());

    // FUA on a write-through write waits for its stripe's sync.
    store.set(Gate::Held);
    let e = engine.clone();
    let (written, done) = within(SETTLE, move || write_at(&e, 16, 2, true));
    assert!(
        done.is_none(),
        "a FUA write-through returned before its stripe was synced"
    );
    let syncs = store.syncs.load(Ordering::Relaxed);
    store.set(Gate::Open);
    written.recv_timeout(PATIENCE).unwrap();
    assert!(store.syncs.load(Ordering::Relaxed) > syncs);
    assert_eq!(read_at(&engine, 16), pattern(2));
}

#[test]
fn a_kill_between_written_and_synced_loses_no_acknowledged_write() {
    // The whole process killed (`weft serve`): its store reopens on the page cache.
    let world = World::new();
    let store = world.store();
    let engine = world.engine(&store);
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    store.set(Gate::Held);
    write_at(&engine, 0, 1, false);
    write_at(&engine, 16, 1, false); // the same bytes: dedup references into the first
    kill_while_held(engine, &store);
    drop(store);
    let store = world.store();
    let engine = world.engine(&store);
    assert_eq!(read_at(&engine, 0), pattern(1));
    assert_eq!(read_at(&engine, 16), pattern(1));
    drop(engine);

    // Only the c.node killed, its store (a d.node) alive with the chunks unsynced: recovery
    // syncs what it replays, so a FLUSH after the restart covers the writes acknowledged
    // before it, and the power cut that follows loses neither.
    let world = World::new();
    let store = world.store();
    let engine = world.engine(&store);
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    store.set(Gate::Held);
    write_at(&engine, 0, 1, false);
    write_at(&engine, 16, 2, false);
    kill_while_held(engine, &store);
    assert!(!world.unsynced_files().is_empty());
    store.set(Gate::Open);
    let engine = world.engine(&store);
    engine.flush().unwrap();
    assert!(
        world.unsynced_files().is_empty(),
        "recovery synced the stripes it replayed"
    );
    engine.crash();
    drop(engine);
    world.disk.power_cut(1);
    world.log.power_cut(1);
    let engine = world.engine(&world.store());
    assert_eq!(read_at(&engine, 0), pattern(1));
    assert_eq!(read_at(&engine, 16), pattern(2));
}

/// Write pattern 1 at block 0 and FLUSH; then, syncs held, the same bytes again at blocks
/// 16 (stripe S) and 32 (stripe S+1: only dedup references into S's blocks), acknowledged;
/// then kill. Returns the world for the caller's cut.
fn flushed_then_two_unsynced() -> World {
    let world = World::new();
    let store = world.store();
    let engine = world.engine(&store);
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    write_at(&engine, 0, 3, false);
    engine.flush().unwrap();
    store.set(Gate::Held);
    write_at(&engine, 16, 1, false);
    write_at(&engine, 32, 1, false);
    assert_eq!(world.unsynced_files().len(), 2, "one stripe per write");
    kill_while_held(engine, &store);
    world
}

#[test]
fn a_stripe_after_a_torn_one_is_never_replayed() {
    // A power cut tore S and left S+1 whole (the OS wrote its pages back on its own, as it
    // may): S+1 alone would point at blocks S never recorded.
    let world = flushed_then_two_unsynced();
    let files = world.unsynced_files();
    world
        .disk
        .write_over(&files[0], &[&[0xee; 4096][..]])
        .unwrap();
    let engine = world.engine(&world.store());
    assert_eq!(read_at(&engine, 0), pattern(3), "flushed");
    assert_eq!(read_at(&engine, 16), zeroes(), "its stripe was torn");
    assert_eq!(
        read_at(&engine, 32),
        zeroes(),
        "its stripe came after a torn one"
    );
    // And the engine goes on consistently: new writes, GC, checkpoint, restart.
    write_at(&engine, 32, 4, false);
    engine.flush().unwrap();
    engine.sync().unwrap();
    engine.gc_now().unwrap();
    engine.checkpoint_now().unwrap();
    drop(engine);
    let engine = world.engine(&world.store());
    assert_eq!(read_at(&engine, 0), pattern(3));
    assert_eq!(read_at(&engine, 16), zeroes());
    assert_eq!(read_at(&engine, 32), pattern(4));
}

#[test]
fn a_power_cut_between_written_and_synced_loses_only_unflushed_writes() {
    let mut lost = 0;
    for seed in 0..24 {
        let world = flushed_then_two_unsynced();
        world.disk.power_cut(seed);
        world.log.power_cut(seed);
        let engine = world.engine(&world.store());
        assert_eq!(read_at(&engine, 0), pattern(3), "seed {seed}: flushed");
        for lba in [16, 32] {
            let got = read_at(&engine, lba);
            assert!(
                got == pattern(1) || got == zeroes(),
                "seed {seed}: block {lba} reads neither its write nor zeroes"
            );
            lost += usize::from(got == zeroes());
        }
    }
    assert!(
        lost > 0,
        "no power cut lost an unsynced stripe: the acknowledgement did not come before the sync"
    );
}
