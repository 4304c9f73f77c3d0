//! Several shards on one metadata store and one set of chunk stores, as several owner
//! c.nodes will share etcd and the d.nodes: each shard's engine keeps its own catalog
//! document, journal and id range, and none of them deletes, replays or claims what belongs
//! to another, whatever order they crash and recover in.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_engine::metastore::{state_key, CLUSTER_STATE_KEY};
use weft_engine::{Backends, Engine, EngineConfig, ShardId, BLOCK_SIZE_BYTES};
use weft_meta::{EmbeddedMetaStore, MetaStore};

const VOLUME_BYTES: u64 = 256 * BLOCK_SIZE_BYTES as u64;

/// What the shards share: the metadata store and one chunk store (the "d.nodes").
struct Shared {
    meta: Arc<dyn MetaStore>,
    disk: weft_chunk::SimDisk,
    root: tempfile::TempDir,
}

impl Shared {
    fn new() -> Shared {
        Shared {
            meta: Arc::new(EmbeddedMetaStore::in_memory()),
            disk: weft_chunk::SimDisk::new(),
            root: tempfile::tempdir().unwrap(),
        }
    }

    /// Shard `n`'s engine, with a data dir (journal) of its own.
    fn open(&self, n: u16) -> Engine {
        let store = weft_chunk::LocalChunkStore::open(Arc::new(self.disk.clone()), None).unwrap();
        let backends = Backends {
            placement: Arc::new(weft_engine::stripe::SingleStore(Arc::new(store))),
            metastore: Arc::clone(&self.meta),
            write_log: None,
            epoch: 0,
            shard: ShardId(n),
        };
        let dir = self.root.path().join(format!("shard-{n}"));
        Engine::open_with(EngineConfig::for_tests(dir), backends).expect("shard opens")
    }
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..len).map(|_| rng.random()).collect()
}

fn write(engine: &Engine, volume: &str, offset: u64, data: &[u8]) {
    let id = engine.open_volume(volume).unwrap().id;
    engine.write(id, offset, data, false).unwrap();
}

fn read(engine: &Engine, volume: &str, offset: u64, len: usize) -> Vec<u8> {
    let id = engine.open_volume(volume).unwrap().id;
    let mut buf = vec![0u8; len];
    engine.read(id, offset, &mut buf).unwrap();
    buf
}

#[test]
fn ids_come_from_the_shards_range_and_each_catalog_has_its_own_key() {
    let shared = Shared::new();
    let first = shared.open(0);
    let second = shared.open(3);
    let a = first.create_volume("a", VOLUME_BYTES).unwrap();
    let b = second.create_volume("b", VOLUME_BYTES).unwrap();
    assert_eq!(ShardId::of_id(a.id), ShardId(0));
    assert_eq!(ShardId::of_id(a.family.id), ShardId(0));
    assert!(a.id < 1 << 40, "shard 0 keeps the ids it had before shards");
    assert_eq!(ShardId::of_id(b.id), ShardId(3));
    assert_eq!(ShardId::of_id(b.family.id), ShardId(3));
    assert!(ShardId(3).holds(b.family.id) && !ShardId(0).holds(b.family.id));
    // Each engine lists only its own volumes.
    let names = |e: &Engine| {
        e.list_volumes()
            .into_iter()
            .map(|v| v.name)
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&first), ["a"]);
    assert_eq!(names(&second), ["b"]);
    assert!(shared.meta.get(CLUSTER_STATE_KEY).unwrap().is_some());
    let doc = shared.meta.get(&state_key(ShardId(3))).unwrap().unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&doc.value).unwrap();
    assert_eq!(doc["shard"], 3);
    assert_eq!(doc["volumes"][0]["name"], "b");
    first.shutdown();
    second.shutdown();
}

#[test]
fn a_document_under_another_shards_key_is_refused() {
    let shared = Shared::new();
    shared.open(2).shutdown();
    // Shard 2's catalog copied under shard 5's key: shard 5 must not adopt it.
    let doc = shared.meta.get(&state_key(ShardId(2))).unwrap().unwrap();
    shared
        .meta
        .compare_and_put(&state_key(ShardId(5)), 0, &doc.value, None)
        .unwrap();
    let store = weft_chunk::LocalChunkStore::open(Arc::new(shared.disk.clone()), None).unwrap();
    let backends = Backends {
        placement: Arc::new(weft_engine::stripe::SingleStore(Arc::new(store))),
        metastore: Arc::clone(&shared.meta),
        write_log: None,
        epoch: 0,
        shard: ShardId(5),
    };
    let Err(err) = Engine::open_with(
        EngineConfig::for_tests(shared.root.path().join("s5")),
        backends,
    ) else {
        panic!("shard 5 adopted shard 2's catalog");
    };
    assert!(err.to_string().contains("shard 2, not of shard 5"), "{err}");
}

/// The sequence that lost data before shards had ranges: a shard recovers while another
/// shard's families have stripes on the d.nodes its catalog does not name. It must leave them
/// alone; and every shard, crashed in turn, recovers every write it acknowledged.
#[test]
fn shards_crash_and_recover_in_any_order_without_touching_each_other() {
    for seed in 1..=4u64 {
        let shared = Shared::new();
        let mut rng = StdRng::seed_from_u64(seed);
        let shards = [0u16, 1, 7];
        let mut engines: Vec<Option<Engine>> =
            shards.iter().map(|&n| Some(shared.open(n))).collect();
        // Each shard: a volume, a snapshot of it, and a clone of the snapshot.
        for (i, e) in engines.iter().enumerate() {
            let e = e.as_ref().unwrap();
            e.create_volume(&format!("v{i}"), VOLUME_BYTES).unwrap();
        }
        // The model: what each volume of each shard must read.
        let mut model: Vec<Vec<(String, Vec<u8>)>> = (0..shards.len())
            .map(|i| vec![(format!("v{i}"), vec![0u8; VOLUME_BYTES as usize])])
            .collect();
        for step in 0..40u64 {
            let i = rng.random_range(0..shards.len());
            match rng.random_range(0..10) {
                // Crash a shard (kill -9) and open it again; meanwhile others may recover too.
                0 => {
                    engines[i].take().unwrap().crash();
                    if rng.random_bool(0.5) {
                        let j = (i + 1) % shards.len();
                        engines[j].take().unwrap().crash();
                        engines[j] = Some(shared.open(shards[j]));
                    }
                    engines[i] = Some(shared.open(shards[i]));
                }
                // A snapshot and a clone of it, once per shard.
                1 if model[i].len() == 1 => {
                    let e = engines[i].as_ref().unwrap();
                    let (volume, contents) = model[i][0].clone();
                    e.create_snapshot(&volume, "s").unwrap();
                    let clone = format!("c{i}");
                    e.create_clone(&format!("{volume}@s"), &clone).unwrap();
                    model[i].push((clone, contents));
                }
                _ => {
                    let e = engines[i].as_ref().unwrap();
                    let k = rng.random_range(0..model[i].len());
                    let blocks = rng.random_range(1..=16u64);
                    let lba = rng.random_range(0..256 - blocks);
                    let data = pattern(seed * 1000 + step, (blocks as usize) * BLOCK_SIZE_BYTES);
                    let (name, contents) = &mut model[i][k];
                    write(e, name, lba * BLOCK_SIZE_BYTES as u64, &data);
                    let at = (lba as usize) * BLOCK_SIZE_BYTES;
                    contents[at..at + data.len()].copy_from_slice(&data);
                    if rng.random_bool(0.3) {
                        e.sync().unwrap();
                    }
                }
            }
        }
        // Every shard crashed at the end and recovered one after another: each reads
        // exactly what it acknowledged.
        for e in &mut engines {
            e.take().unwrap().crash();
        }
        for (i, &n) in shards.iter().enumerate() {
            let e = shared.open(n);
            for (name, contents) in &model[i] {
                assert!(
                    read(&e, name, 0, contents.len()) == *contents,
                    "seed {seed}: shard {n} volume {name} differs after recovery"
                );
            }
            engines[i] = Some(e);
        }
        for e in engines.into_iter().flatten() {
            e.shutdown();
        }
    }
}

#[test]
fn a_volume_name_is_unique_across_shards() {
    let shared = Shared::new();
    let (first, second) = (shared.open(0), shared.open(1));
    first.create_volume("pgdata", VOLUME_BYTES).unwrap();
    let err = second.create_volume("pgdata", VOLUME_BYTES).unwrap_err();
    assert!(err.to_string().contains("shard 0"), "{err}");
    first.create_snapshot("pgdata", "mon").unwrap();
    let err = second.create_volume("pgwal", VOLUME_BYTES).map(|_| ());
    assert!(err.is_ok());
    assert!(first.create_clone("pgdata@mon", "pgwal").is_err());
    // A rename moves the claim; the old name is free for every shard.
    first.rename_volume("pgdata", "pgprod").unwrap();
    second.create_volume("pgdata", VOLUME_BYTES).unwrap();
    assert!(second.rename_volume("pgdata", "pgprod").is_err());
    let shard_of = |n: &str| weft_engine::name_claims::shard_of(&*shared.meta, n).unwrap();
    assert_eq!(shard_of("pgprod"), Some(ShardId(0)));
    assert_eq!(shard_of("pgdata"), Some(ShardId(1)));
    // Deleting releases the name.
    second.delete_volume("pgwal", false).unwrap();
    assert_eq!(shard_of("pgwal"), None);
    first.create_volume("pgwal", VOLUME_BYTES).unwrap();
    // A restart keeps every claim.
    first.shutdown();
    drop(first);
    let first = shared.open(0);
    assert_eq!(shard_of("pgprod"), Some(ShardId(0)));
    assert_eq!(shard_of("pgwal"), Some(ShardId(0)));
    first.shutdown();
    second.shutdown();
}
