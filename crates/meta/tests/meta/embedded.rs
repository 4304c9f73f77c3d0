//! EmbeddedMetaStore: conformance in memory and on disk, persistence across reopen, leases
//! lost in a restart, and compacted watch history.

use std::sync::Arc;
use std::time::Duration;

use weft_meta::{
    EmbeddedMetaStore, MetaError, MetaStore, META_FILE_NAME, WATCH_HISTORY_EVENTS_MAX,
};

use crate::cases;

#[test]
fn conformance_in_memory() {
    let store: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
    cases::run_all(&store, "mem");
}

#[test]
fn conformance_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::open(dir.path()).unwrap());
    cases::run_all(&store, "disk");
    assert!(dir.path().join(META_FILE_NAME).is_file());
}

#[test]
fn lease_expiry() {
    let store = EmbeddedMetaStore::in_memory();
    cases::lease_expiry(&store, "exp/", Duration::from_millis(400));
}

#[test]
fn reopen_keeps_data_and_revisions_but_not_leases() {
    let dir = tempfile::tempdir().unwrap();
    let (rev_a, last) = {
        let s = EmbeddedMetaStore::open(dir.path()).unwrap();
        let rev_a = s.put("cluster/a", b"A", None).unwrap();
        s.put("cluster/b", &[1, 2, 3], None).unwrap();
        let lease = s.grant_lease(Duration::from_secs(60)).unwrap();
        s.put("members/n1", b"up", Some(lease)).unwrap();
        s.put("gone", b"x", None).unwrap();
        s.delete("gone").unwrap();
        (rev_a, s.revision())
    };
    let s = EmbeddedMetaStore::open(dir.path()).unwrap();
    assert!(
        s.revision() > last,
        "deleting the leased key takes a revision"
    );
    let got = s.get("cluster/a").unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.mod_revision), (&b"A"[..], rev_a));
    assert_eq!(s.get("cluster/b").unwrap().unwrap().value, vec![1, 2, 3]);
    assert_eq!(
        s.get("members/n1").unwrap(),
        None,
        "leases do not survive a restart"
    );
    assert_eq!(s.get("gone").unwrap(), None);
    // Revisions from before the restart still work in compares.
    let r = s.compare_and_put("cluster/a", rev_a, b"A2", None).unwrap();
    assert!(r > s.revision() - 1);
    // History from before the restart is gone.
    assert!(matches!(s.watch("", 0), Err(MetaError::Compacted { .. })));
    let w = s.watch("", s.revision()).unwrap();
    s.put("cluster/c", b"C", None).unwrap();
    assert_eq!(cases::recv_n(&w, 1)[0].key(), "cluster/c");
    drop(s);
    // A third open sees the update.
    let s = EmbeddedMetaStore::open(dir.path()).unwrap();
    assert_eq!(s.get("cluster/a").unwrap().unwrap().value, b"A2");
    assert_eq!(s.list("cluster/").unwrap().len(), 3);
}

#[test]
fn corrupt_file_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(META_FILE_NAME), b"{ not json").unwrap();
    assert!(matches!(
        EmbeddedMetaStore::open(dir.path()),
        Err(MetaError::Corrupt { .. })
    ));
}

#[test]
fn old_history_is_compacted() {
    let s = EmbeddedMetaStore::in_memory();
    let first = s.put("k", b"0", None).unwrap();
    for i in 0..WATCH_HISTORY_EVENTS_MAX {
        s.put("k", i.to_string().as_bytes(), None).unwrap();
    }
    match s.watch("k", first - 1) {
        Err(MetaError::Compacted {
            compact_revision, ..
        }) => assert!(compact_revision >= first),
        other => panic!("expected Compacted, got {other:?}"),
    }
    let recent = s.revision() - 10;
    let w = s.watch("k", recent).unwrap();
    assert_eq!(cases::recv_n(&w, 10).len(), 10);
}

#[test]
fn dropped_watches_are_forgotten() {
    let s = EmbeddedMetaStore::in_memory();
    for _ in 0..100 {
        drop(s.watch("", 0).unwrap());
    }
    // Each put prunes watchers whose Watch is gone; nothing blocks or errs.
    s.put("k", b"v", None).unwrap();
    let w = s.watch("", 0).unwrap();
    assert_eq!(cases::recv_n(&w, 1)[0].key(), "k");
}

#[test]
fn failed_persist_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("meta");
    let s = EmbeddedMetaStore::open(&data).unwrap();
    let r = s.put("k", b"v1", None).unwrap();
    let w = s.watch("", r).unwrap();
    // Make the directory unusable (root ignores permissions, so replace it with a file).
    std::fs::remove_dir_all(&data).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();
    assert!(matches!(s.put("k", b"v2", None), Err(MetaError::Io { .. })));
    assert!(matches!(s.delete("k"), Err(MetaError::Io { .. })));
    let got = s.get("k").unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.mod_revision), (&b"v1"[..], r));
    assert_eq!(s.revision(), r);
    cases::assert_quiet(&w);
}
