//! The engine's read cache (`read_cache`): blocks read from chunks are kept by what they are,
//! so a snapshot's clones share them; overwrites and GC never make a read return old bytes;
//! and the cache stays within its bound.

use weft_engine::read_cache::ENTRY_COST_BYTES;
use weft_engine::{Engine, EngineConfig, BLOCK_SIZE_BYTES};

const BS: u64 = BLOCK_SIZE_BYTES as u64;
const BLOCKS: u64 = 64;

/// A block whose bytes say which pattern it is.
fn pattern(p: u64) -> Vec<u8> {
    (0..BLOCK_SIZE_BYTES as u64)
        .map(|i| (p.wrapping_mul(0x9e37_79b9) ^ i.wrapping_mul(31)) as u8)
        .collect()
}

fn open(dir: &std::path::Path, cache_bytes: u64) -> Engine {
    let config = EngineConfig {
        read_cache_bytes: cache_bytes,
        ..EngineConfig::for_tests(dir)
    };
    Engine::open(config).expect("engine opens")
}

fn read_all(engine: &Engine, name: &str) -> Vec<u8> {
    let h = engine.open_volume(name).expect("open");
    let mut buf = vec![0u8; (BLOCKS * BS) as usize];
    engine.read(h.id, 0, &mut buf).expect("read");
    buf
}

#[test]
fn clones_of_one_snapshot_read_the_blocks_it_cached() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path(), 4 << 20);
    engine.create_volume("gold", BLOCKS * BS).expect("create");
    let h = engine.open_volume("gold").expect("open");
    let data: Vec<u8> = (0..BLOCKS).flat_map(pattern).collect();
    engine.write(h.id, 0, &data, false).expect("write");
    engine.sync().expect("sync");
    engine.create_snapshot("gold", "base").expect("snapshot");
    for c in 0..4 {
        engine
            .create_clone("gold@base", &format!("clone{c}"))
            .expect("clone");
    }
    assert_eq!(read_all(&engine, "gold"), data);
    let first = engine.stats().read_cache;
    assert_eq!(first.misses, BLOCKS, "the first read goes to the chunks");
    assert_eq!(first.entries, BLOCKS);
    for c in 0..4 {
        assert_eq!(read_all(&engine, &format!("clone{c}")), data, "clone{c}");
    }
    assert_eq!(read_all(&engine, "gold@base"), data);
    let after = engine.stats().read_cache;
    assert_eq!(
        after.misses, BLOCKS,
        "no clone or snapshot read went to the chunks"
    );
    assert_eq!(after.hits, 5 * BLOCKS);
    assert_eq!(after.entries, BLOCKS, "one entry per stored block, shared");
}

#[test]
fn overwritten_and_collected_blocks_are_never_read_from_the_cache() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path(), 4 << 20);
    engine.create_volume("v", BLOCKS * BS).expect("create");
    let h = engine.open_volume("v").expect("open");
    let old: Vec<u8> = (0..BLOCKS).flat_map(|b| pattern(1000 + b)).collect();
    engine.write(h.id, 0, &old, false).expect("write");
    engine.sync().expect("sync");
    assert_eq!(read_all(&engine, "v"), old);
    assert!(engine.stats().read_cache.entries >= BLOCKS);
    // Overwrite every block twice over, so the old segments are all garbage, then collect
    // them: their segments are deleted and new segments are written.
    let mut now = old.clone();
    for round in 0..2u64 {
        now = (0..BLOCKS)
            .flat_map(|b| pattern(2000 + round * BLOCKS + b))
            .collect();
        engine.write(h.id, 0, &now, false).expect("overwrite");
        engine.sync().expect("sync");
        assert_eq!(read_all(&engine, "v"), now, "round {round}");
    }
    let report = engine.gc_now().expect("gc");
    assert!(report.segments_reclaimed > 0, "{report:?}");
    assert_eq!(read_all(&engine, "v"), now, "after gc");
    // Half the blocks back to their first bytes: new stored blocks, the same fingerprints as
    // the cached old ones, so the cache may serve them (and must serve exactly these bytes).
    let half = (BLOCKS / 2) as usize * BLOCK_SIZE_BYTES;
    engine
        .write(h.id, 0, &old[..half], false)
        .expect("write back");
    engine.sync().expect("sync");
    engine.gc_now().expect("gc");
    let mut expected = old[..half].to_vec();
    expected.extend_from_slice(&now[half..]);
    assert_eq!(read_all(&engine, "v"), expected);
    // Blocks GC moved keep their entries: reading again costs no chunk read.
    let before = engine.stats().read_cache;
    assert_eq!(read_all(&engine, "v"), expected);
    let again = engine.stats().read_cache;
    assert_eq!(again.misses, before.misses, "all from the cache");
    assert_eq!(again.hits, before.hits + BLOCKS);
}

#[test]
fn the_cache_stays_within_its_bound_and_off_means_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Room for 2 entries per shard (16 shards): 32 of the 64 blocks.
    let bound = 32 * ENTRY_COST_BYTES;
    let engine = open(dir.path(), bound);
    engine.create_volume("v", BLOCKS * BS).expect("create");
    let h = engine.open_volume("v").expect("open");
    let data: Vec<u8> = (0..BLOCKS).flat_map(|b| pattern(5000 + b)).collect();
    engine.write(h.id, 0, &data, false).expect("write");
    engine.sync().expect("sync");
    for _ in 0..3 {
        assert_eq!(read_all(&engine, "v"), data);
        let s = engine.stats().read_cache;
        assert!(s.bytes <= bound, "{s:?}");
        assert_eq!(s.capacity_bytes, bound);
    }
    assert!(engine.stats().read_cache.evictions > 0);
    drop(engine);

    let dir = tempfile::tempdir().expect("tempdir");
    let engine = open(dir.path(), 0);
    engine.create_volume("v", BLOCKS * BS).expect("create");
    let h = engine.open_volume("v").expect("open");
    engine.write(h.id, 0, &data, false).expect("write");
    engine.sync().expect("sync");
    assert_eq!(read_all(&engine, "v"), data);
    let s = engine.stats().read_cache;
    assert_eq!(
        (s.capacity_bytes, s.entries, s.hits, s.misses),
        (0, 0, 0, 0)
    );
}
