//! The catalog over a metadata store that fails: calls refused outright, and writes that are
//! applied but reported failed (a lost reply, as a timeout to etcd can be). Every catalog
//! operation either happens (and says so) or does not (and says why); what the engine
//! reports always matches what the store holds, also after a crash and restart over the
//! store's real contents; data written to volumes that exist is all there.

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_engine::{Backends, Engine, EngineConfig, BLOCK_SIZE_BYTES};
use weft_meta::{EmbeddedMetaStore, FaultyMetaStore, MetaStore};

fn open(dir: &std::path::Path, meta: Arc<dyn MetaStore>, disk: &weft_chunk::SimDisk) -> Engine {
    let store = weft_chunk::LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
    let backends = Backends {
        placement: Arc::new(weft_engine::stripe::SingleStore(Arc::new(store))),
        metastore: meta,
        write_log: None,
        epoch: 0,
        shard: weft_engine::ShardId::default(),
    };
    Engine::open_with(EngineConfig::for_tests(dir), backends).expect("engine opens")
}

fn names(engine: &Engine) -> (BTreeSet<String>, BTreeSet<String>) {
    let volumes = engine.list_volumes().into_iter().map(|v| v.name).collect();
    let snapshots = engine
        .list_snapshots(None)
        .unwrap()
        .into_iter()
        .map(|s| s.name)
        .collect();
    (volumes, snapshots)
}

#[test]
fn catalog_operations_happen_or_not_exactly_as_reported_when_the_store_fails() {
    for seed in 1..=6u64 {
        let dir = tempfile::tempdir().unwrap();
        let disk = weft_chunk::SimDisk::new();
        let inner: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
        let faulty = Arc::new(FaultyMetaStore::new(inner.clone(), seed));
        let engine = open(dir.path(), faulty.clone(), &disk);
        faulty.set_failure_rate(0.2);
        faulty.set_lost_reply_rate(0.2);
        let mut rng = StdRng::seed_from_u64(seed);
        let mut volumes: BTreeSet<String> = BTreeSet::new();
        let mut snapshots: BTreeSet<String> = BTreeSet::new();
        let (mut ok, mut failed) = (0, 0);
        for step in 0..60 {
            let name = format!("n{step}");
            let outcome = match rng.random_range(0..4) {
                0 | 1 => engine
                    .create_volume(&name, 64 * BLOCK_SIZE_BYTES as u64)
                    .map(|_| {
                        volumes.insert(name.clone());
                    }),
                2 if !volumes.is_empty() => {
                    let v = volumes.iter().next().unwrap().clone();
                    engine.create_snapshot(&v, &name).map(|_| {
                        snapshots.insert(format!("{v}@{name}"));
                    })
                }
                _ if !snapshots.is_empty() => {
                    let s = snapshots.iter().next().unwrap().clone();
                    engine.create_clone(&s, &name).map(|_| {
                        volumes.insert(name.clone());
                    })
                }
                _ => continue,
            };
            match outcome {
                Ok(()) => ok += 1,
                Err(_) => failed += 1,
            }
            assert_eq!(
                names(&engine),
                (volumes.clone(), snapshots.clone()),
                "seed {seed} step {step}: the engine's catalog"
            );
            // Data written to an existing volume is kept whatever the store does.
            if let Some(v) = volumes.iter().next() {
                let id = engine.open_volume(v).unwrap().id;
                engine
                    .write(id, 0, &vec![step as u8 + 1; BLOCK_SIZE_BYTES], false)
                    .unwrap();
            }
        }
        assert!(
            ok > 0 && failed > 0,
            "seed {seed}: {ok} succeeded, {failed} failed"
        );
        assert!(faulty.injected_failures() > 0);
        // Crash, and restart over what the store really holds.
        engine.crash();
        drop(engine);
        let engine = open(dir.path(), inner, &disk);
        assert_eq!(
            names(&engine),
            (volumes.clone(), snapshots.clone()),
            "seed {seed}: after restart the store holds exactly what was reported done"
        );
        let first = volumes.iter().next().unwrap();
        let id = engine.open_volume(first).unwrap().id;
        let mut buf = vec![0u8; BLOCK_SIZE_BYTES];
        engine.read(id, 0, &mut buf).unwrap();
        assert_ne!(
            buf,
            vec![0u8; BLOCK_SIZE_BYTES],
            "seed {seed}: written data kept"
        );
    }
}
