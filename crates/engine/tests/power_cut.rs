//! The engine across power cuts, on the fault-injecting implementations of its seams: chunks
//! on a simulated disk that loses or tears writes not yet synced, a write log that keeps only
//! a prefix of the records appended after its last sync, and an in-memory metadata store
//! (commits are durable when they return). Random writes, trims, flushes (FUA and FLUSH),
//! syncs, GC and checkpoints, then the process stops dead and the power goes; after restart
//! every block must read as the value it had at its last flush or as a value acknowledged
//! after it, never anything else, and every flushed write must be there. Corrupt and
//! misdirected chunk reads are injected too: they fail the read, never return wrong bytes.

use std::collections::HashMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_chunk::disk::ReadFault;
use weft_chunk::{LocalChunkStore, SimDisk};
use weft_engine::stripe::SingleStore;
use weft_engine::write_log::SimWriteLog;
use weft_engine::{Backends, Engine, EngineConfig, BLOCK_SIZE_BYTES};
use weft_meta::{EmbeddedMetaStore, MetaStore};

const VOLUME_BLOCKS: u64 = 128;
const PATTERNS: u64 = 24;

fn pattern(p: u64) -> Vec<u8> {
    if p == 0 {
        return vec![0; BLOCK_SIZE_BYTES];
    }
    let mut rng = StdRng::seed_from_u64(p);
    (0..BLOCK_SIZE_BYTES).map(|_| rng.random()).collect()
}

/// Per block: the value at its last flush, and values acknowledged since, in order.
#[derive(Default, Clone)]
struct BlockHistory {
    flushed: u64,
    since: Vec<u64>,
}

struct World {
    disk: SimDisk,
    log: SimWriteLog,
    meta: Arc<dyn MetaStore>,
    dir: tempfile::TempDir,
}

impl World {
    fn open(&self) -> Engine {
        let store = LocalChunkStore::open(Arc::new(self.disk.clone()), None).expect("store opens");
        let backends = Backends {
            placement: Arc::new(SingleStore(Arc::new(store))),
            metastore: self.meta.clone(),
            write_log: Some(Arc::new(self.log.clone())),
            epoch: 0,
            shard: weft_engine::ShardId::default(),
        };
        Engine::open_with(EngineConfig::for_tests(self.dir.path()), backends).expect("engine opens")
    }
}

fn flush_all(history: &mut HashMap<u64, BlockHistory>) {
    for h in history.values_mut() {
        if let Some(&last) = h.since.last() {
            h.flushed = last;
        }
        h.since.clear();
    }
}

fn check(
    engine: &Engine,
    history: &HashMap<u64, BlockHistory>,
    context: &str,
) -> HashMap<u64, u64> {
    let id = engine.open_volume("v").unwrap().id;
    let mut buf = vec![0u8; VOLUME_BLOCKS as usize * BLOCK_SIZE_BYTES];
    engine.read(id, 0, &mut buf).unwrap();
    let mut now = HashMap::new();
    for lba in 0..VOLUME_BLOCKS {
        let got = &buf[lba as usize * BLOCK_SIZE_BYTES..][..BLOCK_SIZE_BYTES];
        let h = history.get(&lba).cloned().unwrap_or_default();
        let allowed: Vec<u64> = std::iter::once(h.flushed)
            .chain(h.since.iter().copied())
            .collect();
        let found = allowed.iter().find(|&&p| pattern(p) == got);
        match found {
            Some(&p) => {
                now.insert(lba, p);
            }
            None => {
                let any = (0..PATTERNS).find(|&p| pattern(p) == got);
                panic!("{context}: block {lba} reads pattern {any:?}; allowed {allowed:?} (flushed {})", h.flushed);
            }
        }
    }
    now
}

/// Returns how many blocks lost writes that were acknowledged but not flushed (the power cut
/// must be able to do that, or this test checks nothing).
fn run_seed(seed: u64) -> usize {
    let mut lost_unflushed = 0;
    let mut rng = StdRng::seed_from_u64(seed);
    let world = World {
        disk: SimDisk::new(),
        log: SimWriteLog::new(),
        meta: Arc::new(EmbeddedMetaStore::in_memory()),
        dir: tempfile::tempdir().unwrap(),
    };
    let mut engine = world.open();
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    let mut history: HashMap<u64, BlockHistory> = HashMap::new();
    for round in 0..4 {
        for _ in 0..rng.random_range(20..120) {
            let id = engine.open_volume("v").unwrap().id;
            let lba = rng.random_range(0..VOLUME_BLOCKS);
            let count = rng.random_range(1..=(VOLUME_BLOCKS - lba).min(6));
            let offset = lba * BLOCK_SIZE_BYTES as u64;
            match rng.random_range(0..100) {
                0..=69 => {
                    let fua = rng.random_bool(0.1);
                    let pats: Vec<u64> =
                        (0..count).map(|_| rng.random_range(1..PATTERNS)).collect();
                    let data: Vec<u8> = pats.iter().flat_map(|&p| pattern(p)).collect();
                    engine.write(id, offset, &data, fua).unwrap();
                    for (i, p) in pats.into_iter().enumerate() {
                        let h = history.entry(lba + i as u64).or_default();
                        if fua {
                            // FUA makes this write durable, not every earlier one (a
                            // write-through acknowledged from a stripe not yet synced is
                            // a FLUSH's to wait for).
                            h.flushed = p;
                            h.since.clear();
                        } else {
                            h.since.push(p);
                        }
                    }
                }
                70..=79 => {
                    engine
                        .trim(id, offset, count * BLOCK_SIZE_BYTES as u64, false)
                        .unwrap();
                    for i in 0..count {
                        history.entry(lba + i).or_default().since.push(0);
                    }
                }
                80..=89 => {
                    engine.flush().unwrap();
                    flush_all(&mut history);
                }
                90..=94 => engine.sync().unwrap(),
                95..=97 => {
                    engine.gc_now().unwrap();
                }
                _ => engine.checkpoint_now().unwrap(),
            }
        }
        // Stop dead, then lose power.
        engine.crash();
        drop(engine);
        world.disk.power_cut(seed * 100 + round);
        world.log.power_cut(seed * 100 + round);
        engine = world.open();
        let now = check(&engine, &history, &format!("seed {seed} round {round}"));
        let rolled_back = now
            .iter()
            .filter(|(lba, p)| {
                history
                    .get(lba)
                    .and_then(|h| h.since.last())
                    .is_some_and(|l| l != *p)
            })
            .count();
        lost_unflushed += rolled_back;
        // What survived is the new flushed state (the log after the cut is durable).
        history = now
            .into_iter()
            .map(|(lba, p)| {
                (
                    lba,
                    BlockHistory {
                        flushed: p,
                        since: Vec::new(),
                    },
                )
            })
            .collect();
    }
    // Corrupt and misdirected chunk reads: an error, never other bytes.
    engine.sync().unwrap();
    let chunk = world
        .disk
        .paths()
        .into_iter()
        .find(|p| p.ends_with(".chunk") && !p.contains("/4"))
        .expect("a log segment chunk");
    world.disk.inject(ReadFault::Misdirect {
        path: chunk.clone(),
        page_offset: 8192,
        from_offset: 12288,
    });
    world.disk.inject(ReadFault::Corrupt {
        path: chunk,
        offset: 16384 + 7,
    });
    let id = engine.open_volume("v").unwrap().id;
    let mut errors = 0;
    for lba in 0..VOLUME_BLOCKS {
        let mut buf = vec![0u8; BLOCK_SIZE_BYTES];
        match engine.read(id, lba * BLOCK_SIZE_BYTES as u64, &mut buf) {
            Ok(()) => {
                let h = &history[&lba];
                assert_eq!(
                    buf,
                    pattern(h.flushed),
                    "seed {seed}: block {lba} after injected faults"
                );
            }
            Err(_) => errors += 1,
        }
    }
    world.disk.clear_faults();
    assert!(
        errors > 0 || history.values().all(|h| h.flushed == 0),
        "seed {seed}: the injected faults were never hit"
    );
    lost_unflushed
}

#[test]
fn flushed_writes_survive_power_cuts_and_bad_reads_are_errors() {
    let lost: usize = (1..=12).map(run_seed).sum();
    assert!(
        lost > 0,
        "no power cut ever lost an unflushed write: the fault model is not exercised"
    );
}

/// A write the writer thread issued.
#[derive(Debug, Clone, Copy)]
struct Issued {
    lba: u64,
    blocks: u64,
    /// The pattern of its first block (the next ones follow).
    first: u64,
    acked: bool,
    /// FUA, or a FLUSH returned after it was acknowledged.
    durable: bool,
}

/// Issue write-through writes (16-32 KiB, over the test configuration's 16 KiB threshold)
/// from a thread, some with FUA, with a FLUSH after every few, while the engine is stopped
/// dead at a random moment: between a write's journal reference and its stripe, during
/// destage, a forced seal, a stripe written but not yet synced. Returns, in order, every
/// write issued.
fn write_through_until_cut(world: &World, seed: u64) -> (Engine, Vec<Issued>) {
    let engine = Arc::new(world.open());
    engine
        .create_volume("v", VOLUME_BLOCKS * BLOCK_SIZE_BYTES as u64)
        .unwrap();
    let id = engine.open_volume("v").unwrap().id;
    let issued = Arc::new(parking_lot::Mutex::new(Vec::<Issued>::new()));
    let writer = {
        let (engine, issued) = (engine.clone(), issued.clone());
        std::thread::spawn(move || {
            let mut rng = StdRng::seed_from_u64(seed);
            for n in 1u64.. {
                let blocks = rng.random_range(4..=8u64);
                let lba = rng.random_range(0..=VOLUME_BLOCKS - blocks);
                let first = n * 1000;
                let fua = rng.random_bool(0.2);
                let data: Vec<u8> = (0..blocks).flat_map(|i| pattern(first + i)).collect();
                issued.lock().push(Issued {
                    lba,
                    blocks,
                    first,
                    acked: false,
                    durable: false,
                });
                let offset = lba * BLOCK_SIZE_BYTES as u64;
                if engine.write(id, offset, &data, fua).is_err() {
                    return;
                }
                let acked = issued.lock().len();
                {
                    let mut issued = issued.lock();
                    let last = issued.last_mut().expect("pushed above");
                    last.acked = true;
                    last.durable = fua;
                }
                if n.is_multiple_of(5) {
                    if engine.flush().is_err() {
                        return;
                    }
                    for w in issued.lock()[..acked].iter_mut() {
                        w.durable = true;
                    }
                }
            }
        })
    };
    let mut rng = StdRng::seed_from_u64(seed + 1000);
    std::thread::sleep(std::time::Duration::from_millis(rng.random_range(5..60)));
    engine.crash();
    writer.join().unwrap();
    let issued = issued.lock().clone();
    let engine = Arc::try_unwrap(engine).expect("the writer is gone");
    (engine, issued)
}

/// What block `lba` may read after the cut: from the last write covering it that had to
/// survive (acknowledged after a kill; durable after a power cut) onward, or its first
/// contents if none had to.
fn allowed_after(issued: &[Issued], lba: u64, power_cut: bool) -> Vec<u64> {
    let covering: Vec<(u64, bool)> = issued
        .iter()
        .filter(|w| (w.lba..w.lba + w.blocks).contains(&lba))
        .map(|w| {
            let kept = if power_cut { w.durable } else { w.acked };
            (w.first + (lba - w.lba), kept)
        })
        .collect();
    let last_kept = covering.iter().rposition(|w| w.1);
    let mut allowed: Vec<u64> = match last_kept {
        Some(i) => covering[i..].iter().map(|w| w.0).collect(),
        None => std::iter::once(0)
            .chain(covering.iter().map(|w| w.0))
            .collect(),
    };
    allowed.dedup();
    allowed
}

/// A write-through write is acknowledged once its stripe is written (its chunks in the page
/// cache): a kill of the process at any point loses none acknowledged.
#[test]
fn acknowledged_write_through_survives_a_kill_at_any_point() {
    let mut cut_in_flight = 0;
    for seed in 1..=10u64 {
        let world = World {
            disk: SimDisk::new(),
            log: SimWriteLog::new(),
            meta: Arc::new(EmbeddedMetaStore::in_memory()),
            dir: tempfile::tempdir().unwrap(),
        };
        let (engine, issued) = write_through_until_cut(&world, seed);
        drop(engine);
        // A kill: the disk keeps what was written, synced or not.
        let engine = world.open();
        cut_in_flight += usize::from(issued.last().is_some_and(|w| !w.acked));
        let id = engine.open_volume("v").unwrap().id;
        let mut buf = vec![0u8; VOLUME_BLOCKS as usize * BLOCK_SIZE_BYTES];
        engine.read(id, 0, &mut buf).unwrap();
        for lba in 0..VOLUME_BLOCKS {
            let allowed = allowed_after(&issued, lba, false);
            let got = &buf[lba as usize * BLOCK_SIZE_BYTES..][..BLOCK_SIZE_BYTES];
            assert!(
                allowed.iter().any(|&p| pattern(p) == got),
                "seed {seed}: block {lba} reads none of {allowed:?} ({} writes issued)",
                issued.len()
            );
        }
    }
    assert!(
        cut_in_flight > 0,
        "no cut ever caught a write in flight: the test does not exercise write-through"
    );
}

/// The same with the power going after the kill: what FUA or a FLUSH made durable survives;
/// what was only acknowledged may be lost, and nothing else is ever read.
#[test]
fn flushed_write_through_survives_a_power_cut_at_any_point() {
    let mut rolled_back = 0;
    for seed in 1..=10u64 {
        let world = World {
            disk: SimDisk::new(),
            log: SimWriteLog::new(),
            meta: Arc::new(EmbeddedMetaStore::in_memory()),
            dir: tempfile::tempdir().unwrap(),
        };
        let (engine, issued) = write_through_until_cut(&world, seed);
        drop(engine);
        world.disk.power_cut(seed);
        world.log.power_cut(seed);
        let engine = world.open();
        let id = engine.open_volume("v").unwrap().id;
        let mut buf = vec![0u8; VOLUME_BLOCKS as usize * BLOCK_SIZE_BYTES];
        engine.read(id, 0, &mut buf).unwrap();
        for lba in 0..VOLUME_BLOCKS {
            let allowed = allowed_after(&issued, lba, true);
            let got = &buf[lba as usize * BLOCK_SIZE_BYTES..][..BLOCK_SIZE_BYTES];
            assert!(
                allowed.iter().any(|&p| pattern(p) == got),
                "seed {seed}: block {lba} reads none of {allowed:?} ({} writes issued)",
                issued.len()
            );
            let acked = allowed_after(&issued, lba, false);
            rolled_back += usize::from(!acked.iter().any(|&p| pattern(p) == got));
        }
    }
    // Not asserted above zero: the syncer usually syncs a stripe before the cut comes
    // (`tests/write_through.rs` holds a sync back to lose one on purpose).
    eprintln!("{rolled_back} blocks lost an acknowledged, unflushed write-through");
}
