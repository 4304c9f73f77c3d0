//! FaultyMetaStore: transparent without faults, deterministic per seed, partitions stall
//! watches without losing events, lost replies leave the write applied.

use std::sync::Arc;

use weft_meta::{EmbeddedMetaStore, FaultyMetaStore, MetaError, MetaStore};

use crate::cases;

fn faulty(seed: u64) -> FaultyMetaStore {
    FaultyMetaStore::new(Arc::new(EmbeddedMetaStore::in_memory()), seed)
}

#[test]
fn conformance_without_faults() {
    let store: Arc<dyn MetaStore> = Arc::new(faulty(1));
    cases::run_all(&store, "faulty");
}

/// The outcome pattern of 200 gets at a 30% failure rate.
fn pattern(seed: u64) -> Vec<bool> {
    let s = faulty(seed);
    s.set_failure_rate(0.3);
    (0..200).map(|_| s.get("k").is_ok()).collect()
}

#[test]
fn failures_follow_the_seed() {
    let a = pattern(7);
    assert_eq!(a, pattern(7), "same seed, same faults");
    assert_ne!(a, pattern(8));
    let failed = a.iter().filter(|ok| !**ok).count();
    assert!(
        (30..=90).contains(&failed),
        "{failed} of 200 failed at rate 0.3"
    );
}

#[test]
fn partition_fails_everything_and_stalls_watches() {
    let s = faulty(3);
    let w = s.watch("p/", 0).unwrap();
    s.put("p/a", b"1", None).unwrap();
    assert_eq!(cases::recv_n(&w, 1)[0].key(), "p/a");
    s.set_partitioned(true);
    assert!(matches!(s.get("p/a"), Err(MetaError::Unavailable { .. })));
    assert!(matches!(
        s.put("p/b", b"2", None),
        Err(MetaError::Unavailable { .. })
    ));
    assert!(s.watch("p/", 0).is_err());
    // Writes behind the partition (another client): the watch holds them back.
    s.inner().put("p/c", b"3", None).unwrap();
    cases::assert_quiet(&w);
    s.set_partitioned(false);
    let ev = cases::recv_n(&w, 1);
    assert_eq!(ev[0].key(), "p/c", "p/b never reached the store");
    assert!(s.injected_failures() >= 3);
}

#[test]
fn lost_replies_are_applied() {
    let s = faulty(5);
    s.set_lost_reply_rate(1.0);
    assert!(matches!(
        s.put("k", b"v", None),
        Err(MetaError::Unavailable { .. })
    ));
    // Reads are not affected by lost replies; the write happened.
    assert_eq!(s.get("k").unwrap().unwrap().value, b"v");
    s.set_lost_reply_rate(0.0);
    let rev = s.get("k").unwrap().unwrap().mod_revision;
    s.compare_and_put("k", rev, b"w", None).unwrap();
}
