//! Consistency groups in the engine: the one point of a group snapshot against a writer with
//! dependent writes (B's write issued only after A's was acknowledged), the records and their
//! refusals, clone groups, refresh and rollback of a whole group, persistence across a
//! restart, and the refusal of members from another shard.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use weft_engine::{Backends, Engine, EngineConfig, EngineError, ShardId, BLOCK_SIZE_BYTES};
use weft_meta::{EmbeddedMetaStore, MetaStore};

const BLOCK: usize = BLOCK_SIZE_BYTES;
const SLOTS: u64 = 64;
const VOLUME_BYTES: u64 = SLOTS * BLOCK as u64;

fn open(dir: &std::path::Path) -> Engine {
    Engine::open(EngineConfig::for_tests(dir)).expect("engine opens")
}

fn names(list: &[String]) -> Vec<String> {
    list.to_vec()
}

fn v(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

/// A block carrying sequence number `seq` (8 bytes, repeated).
fn seq_block(seq: u64) -> Vec<u8> {
    seq.to_le_bytes().repeat(BLOCK / 8)
}

/// The highest sequence number in an image whose block `seq % SLOTS` holds `seq`.
fn newest_seq(engine: &Engine, image: &str) -> u64 {
    let id = engine.open_volume(image).unwrap().id;
    let mut buf = vec![0u8; VOLUME_BYTES as usize];
    engine.read(id, 0, &mut buf).unwrap();
    buf.chunks(BLOCK)
        .map(|b| u64::from_le_bytes(b[..8].try_into().unwrap()))
        .max()
        .unwrap()
}

/// A writer that writes `seq` to A, and only after that write returned (acknowledged) the same
/// `seq` to B, for seq = 1, 2, ... until stopped; returns the last seq it completed.
fn dependent_writer(
    engine: Arc<Engine>,
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let a = engine.open_volume("a").unwrap().id;
        let b = engine.open_volume("b").unwrap().id;
        let mut seq = 0u64;
        while !stop.load(Ordering::Acquire) {
            seq += 1;
            let offset = (seq % SLOTS) * BLOCK as u64;
            engine.write(a, offset, &seq_block(seq), false).unwrap();
            engine.write(b, offset, &seq_block(seq), false).unwrap();
            done.store(seq, Ordering::Release);
        }
    })
}

#[test]
fn a_group_snapshot_never_holds_a_dependent_write_without_the_write_it_followed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(open(dir.path()));
    engine.create_volume("a", VOLUME_BYTES).unwrap();
    engine.create_volume("b", VOLUME_BYTES).unwrap();
    engine.create_group("g", &v(&["a", "b"])).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let writer = dependent_writer(engine.clone(), stop.clone(), done.clone());
    let mut separate_violations = 0;
    let rounds = 40;
    for round in 0..rounds {
        // Wait for some progress between points.
        let at = done.load(Ordering::Acquire);
        while done.load(Ordering::Acquire) < at + 20 {
            std::thread::yield_now();
        }
        let acked_before = done.load(Ordering::Acquire);
        let info = engine
            .create_group_snapshot("g", &format!("s{round}"))
            .unwrap();
        let acked_after = done.load(Ordering::Acquire);
        assert_eq!(
            info.members,
            v(&[&format!("a@s{round}"), &format!("b@s{round}")])
        );
        let (sa, sb) = (
            newest_seq(&engine, &format!("a@s{round}")),
            newest_seq(&engine, &format!("b@s{round}")),
        );
        assert!(
            sb <= sa,
            "group snapshot s{round}: B holds seq {sb} but A only {sa}"
        );
        // Every write acknowledged before the call is in it; nothing issued after it is.
        assert!(
            sb >= acked_before,
            "B lost an acknowledged write: {sb} < {acked_before}"
        );
        assert!(
            sa <= acked_after + 1,
            "A holds a write issued after the point"
        );
        // The same with two separate snapshots, A's then B's.
        engine.create_snapshot("a", &format!("x{round}")).unwrap();
        engine.create_snapshot("b", &format!("x{round}")).unwrap();
        let (xa, xb) = (
            newest_seq(&engine, &format!("a@x{round}")),
            newest_seq(&engine, &format!("b@x{round}")),
        );
        if xb > xa {
            separate_violations += 1;
        }
    }
    stop.store(true, Ordering::Release);
    writer.join().unwrap();
    // Not asserted (it depends on scheduling): separate snapshots taken A then B under this
    // load usually break the order in some rounds.
    eprintln!("separate A-then-B snapshots: B ahead of A in {separate_violations} of {rounds}");
}

#[test]
fn groups_are_records_with_clear_refusals_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    for name in ["pgdata", "pgwal", "temp", "other"] {
        engine.create_volume(name, VOLUME_BYTES).unwrap();
    }
    let g = engine
        .create_group("pgprod", &v(&["pgdata", "pgwal"]))
        .unwrap();
    assert_eq!(g.members.len(), 2);
    // Refusals.
    let e = engine.create_group("pgprod", &v(&["temp"])).unwrap_err();
    assert!(matches!(e, EngineError::NameTaken { .. }), "{e}");
    let e = engine.create_group("pgdata", &v(&["temp"])).unwrap_err();
    assert!(matches!(e, EngineError::VolumeExists { .. }), "{e}");
    let e = engine.create_volume("pgprod", VOLUME_BYTES).unwrap_err();
    assert!(matches!(e, EngineError::NameTaken { .. }), "{e}");
    let e = engine.create_group("g2", &v(&["pgwal"])).unwrap_err();
    assert!(e.to_string().contains("member of group \"pgprod\""), "{e}");
    let e = engine.create_group("g2", &v(&["nosuch"])).unwrap_err();
    assert!(matches!(e, EngineError::UnknownVolume { .. }), "{e}");
    let e = engine.create_group("g2", &[]).unwrap_err();
    assert!(matches!(e, EngineError::InvalidGroup { .. }), "{e}");
    let e = engine.create_group("bad/name", &v(&["temp"])).unwrap_err();
    assert!(matches!(e, EngineError::InvalidName { .. }), "{e}");
    let e = engine.delete_volume("pgwal", true).unwrap_err();
    assert!(
        e.to_string().contains("weft group remove pgprod pgwal"),
        "{e}"
    );
    // Add and remove.
    let g = engine.add_group_members("pgprod", &v(&["temp"])).unwrap();
    assert_eq!(g.members.len(), 3);
    let e = engine
        .add_group_members("pgprod", &v(&["temp"]))
        .unwrap_err();
    assert!(e.to_string().contains("member already"), "{e}");
    let g = engine
        .remove_group_members("pgprod", &v(&["temp"]))
        .unwrap();
    assert_eq!(g.members.len(), 2);
    let e = engine
        .remove_group_members("pgprod", &v(&["other"]))
        .unwrap_err();
    assert!(e.to_string().contains("not a member"), "{e}");
    // A group snapshot is a snapshot of each member, and goes as a whole.
    let s = engine.create_group_snapshot("pgprod", "monday").unwrap();
    assert_eq!(s.name, "pgprod@monday");
    assert!(s.barrier_micros.is_some());
    let e = engine
        .create_group_snapshot("pgprod", "pgprod@monday")
        .unwrap_err();
    assert!(matches!(e, EngineError::SnapshotExists { .. }), "{e}");
    let e = engine.delete_snapshot("pgdata@monday", false).unwrap_err();
    assert!(
        e.to_string().contains("weft snapshot delete pgprod@monday"),
        "{e}"
    );
    let e = engine.delete_group("pgprod", false, false).unwrap_err();
    assert!(e.to_string().contains("pgprod@monday"), "{e}");
    drop(engine);

    let engine = open(dir.path());
    let g = engine.group_info("pgprod").unwrap();
    let members: Vec<&str> = g.members.iter().map(|m| m.volume.as_str()).collect();
    assert_eq!(members, ["pgdata", "pgwal"]);
    assert_eq!(g.snapshots.len(), 1);
    assert_eq!(
        names(&g.snapshots[0].members),
        v(&["pgdata@monday", "pgwal@monday"])
    );
    engine
        .delete_group_snapshot("pgprod@monday", false)
        .unwrap();
    assert!(engine.snapshot_info("pgdata@monday").is_err());
    engine.delete_group("pgprod", false, true).unwrap();
    assert!(engine.volume_info("pgdata").is_err());
    assert!(engine.volume_info("temp").is_ok());
    assert!(matches!(
        engine.group_info("pgprod").unwrap_err(),
        EngineError::UnknownGroup { .. }
    ));
}

fn write_seq(engine: &Engine, image: &str, seq: u64) {
    let id = engine.open_volume(image).unwrap().id;
    engine.write(id, 0, &seq_block(seq), false).unwrap();
}

fn first_seq(engine: &Engine, image: &str) -> u64 {
    let id = engine.open_volume(image).unwrap().id;
    let mut buf = vec![0u8; BLOCK];
    engine.read(id, 0, &mut buf).unwrap();
    u64::from_le_bytes(buf[..8].try_into().unwrap())
}

#[test]
fn clone_groups_refresh_and_roll_back_as_a_whole() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    engine.create_volume("pgdata", VOLUME_BYTES).unwrap();
    engine.create_volume("pgwal", VOLUME_BYTES).unwrap();
    engine
        .create_group("pgprod", &v(&["pgdata", "pgwal"]))
        .unwrap();
    write_seq(&engine, "pgdata", 1);
    write_seq(&engine, "pgwal", 11);
    engine.create_group_snapshot("pgprod", "monday").unwrap();
    write_seq(&engine, "pgdata", 2);
    write_seq(&engine, "pgwal", 12);
    engine.create_group_snapshot("pgprod", "tuesday").unwrap();
    write_seq(&engine, "pgdata", 3);

    let map = vec![("pgwal".to_string(), "devwal".to_string())];
    let e = engine
        .clone_group("pgprod@monday", "pgdev", &[("nosuch".into(), "x".into())])
        .unwrap_err();
    assert!(e.to_string().contains("not a member"), "{e}");
    let dev = engine.clone_group("pgprod@monday", "pgdev", &map).unwrap();
    let members: Vec<&str> = dev.members.iter().map(|m| m.volume.as_str()).collect();
    assert_eq!(members, ["pgdev-pgdata", "devwal"]);
    assert_eq!(dev.origin.as_deref(), Some("pgprod@monday"));
    assert_eq!(first_seq(&engine, "pgdev-pgdata"), 1);
    assert_eq!(first_seq(&engine, "devwal"), 11);
    let monday = engine.group_snapshot_info("pgprod@monday").unwrap();
    assert_eq!(monday.clones, v(&["pgdev"]));
    // The clones' own writes, then a refresh of the whole group to tuesday.
    write_seq(&engine, "devwal", 99);
    let dev = engine.refresh_group("pgdev", "pgprod@tuesday").unwrap();
    assert_eq!(dev.origin.as_deref(), Some("pgprod@tuesday"));
    assert_eq!(first_seq(&engine, "pgdev-pgdata"), 2);
    assert_eq!(first_seq(&engine, "devwal"), 12);
    // A group snapshot clones use: refused (keep-hidden hides it instead).
    let e = engine
        .delete_group_snapshot("pgprod@tuesday", false)
        .unwrap_err();
    assert!(matches!(e, EngineError::InUse { .. }), "{e}");
    // A clone group cannot roll back to its source's snapshot; it can to its own.
    let e = engine.rollback_group("pgdev", "pgprod@monday").unwrap_err();
    assert!(
        e.to_string().contains("not one of its group snapshots"),
        "{e}"
    );
    engine.create_group_snapshot("pgdev", "before").unwrap();
    write_seq(&engine, "pgdev-pgdata", 50);
    write_seq(&engine, "devwal", 51);
    engine.rollback_group("pgdev", "before").unwrap();
    assert_eq!(first_seq(&engine, "pgdev-pgdata"), 2);
    assert_eq!(first_seq(&engine, "devwal"), 12);
    // The source rolls back too.
    engine.rollback_group("pgprod", "monday").unwrap();
    assert_eq!(first_seq(&engine, "pgdata"), 1);
    assert_eq!(first_seq(&engine, "pgwal"), 11);
    // Deleting it merges its layers into the clone group's snapshot above them.
    engine
        .delete_group_snapshot("pgprod@tuesday", true)
        .unwrap();
    assert_eq!(first_seq(&engine, "pgdev-pgdata"), 2);
    // The clone group goes with its snapshots and volumes; then the source.
    engine.delete_group("pgdev", true, true).unwrap();
    engine.delete_group("pgprod", true, true).unwrap();
    assert!(engine.list_volumes().is_empty());
    assert!(engine.list_groups().is_empty());
    drop(engine);
    let engine = open(dir.path());
    assert!(engine.list_volumes().is_empty());
}

#[test]
fn members_from_another_shard_are_refused_with_both_shards_named() {
    let meta: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
    let disk = weft_chunk::SimDisk::new();
    let root = tempfile::tempdir().unwrap();
    let shard = |n: u16| {
        let store = weft_chunk::LocalChunkStore::open(Arc::new(disk.clone()), None).unwrap();
        let backends = Backends {
            placement: Arc::new(weft_engine::stripe::SingleStore(Arc::new(store))),
            metastore: Arc::clone(&meta),
            write_log: None,
            epoch: 0,
            shard: ShardId(n),
        };
        Engine::open_with(
            EngineConfig::for_tests(root.path().join(format!("shard-{n}"))),
            backends,
        )
        .unwrap()
    };
    let first = shard(0);
    let second = shard(2);
    first.create_volume("pgdata", VOLUME_BYTES).unwrap();
    second.create_volume("pgwal", VOLUME_BYTES).unwrap();
    let e = first
        .create_group("pgprod", &v(&["pgdata", "pgwal"]))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("in shard 2") && text.contains("in shard 0"),
        "{text}"
    );
}
