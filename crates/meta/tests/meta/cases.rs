//! The conformance suite every `MetaStore` must pass. Each case works under its own key prefix,
//! so several cases can share one store (one etcd server per test binary run keeps it fast).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use weft_meta::{
    cas_json, get_json, list_json, update_json, MetaError, MetaStore, Watch, WatchEvent,
};

/// How long a test waits for a watch event before failing.
pub const EVENT_WAIT: Duration = Duration::from_millis(5_000);

/// Run every fast case (no lease expiry) against `store`, under `prefix`.
pub fn run_all(store: &Arc<dyn MetaStore>, prefix: &str) {
    let t = Instant::now();
    basic_kv(store.as_ref(), &format!("{prefix}/kv/"));
    compare_and_put(store.as_ref(), &format!("{prefix}/cas/"));
    compare_and_delete(store.as_ref(), &format!("{prefix}/cad/"));
    list_revision(store.as_ref(), &format!("{prefix}/lr/"));
    json_helpers(store, &format!("{prefix}/json/"));
    watch_from_revision(store.as_ref(), &format!("{prefix}/watch/"));
    leases(store.as_ref(), &format!("{prefix}/lease/"));
    eprintln!("conformance under {prefix:?}: {:?}", t.elapsed());
}

pub fn basic_kv(s: &dyn MetaStore, p: &str) {
    let k = |name: &str| format!("{p}{name}");
    assert_eq!(s.get(&k("a")).unwrap(), None);
    let r1 = s.put(&k("a"), b"one", None).unwrap();
    let got = s.get(&k("a")).unwrap().unwrap();
    assert_eq!((got.value.as_slice(), got.mod_revision), (&b"one"[..], r1));
    let r2 = s.put(&k("a"), b"two", None).unwrap();
    assert!(r2 > r1);
    s.put(&k("c"), b"", None).unwrap();
    s.put(&k("b"), &[0, 255, 7], None).unwrap();
    s.put(&format!("{p}x"), b"other prefix", None).unwrap();
    let listed = s.list(&k("")).unwrap();
    let keys: Vec<&str> = listed.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, [k("a"), k("b"), k("c"), format!("{p}x")]);
    let sub = s.list(&k("b")).unwrap();
    assert_eq!(sub.len(), 1);
    assert_eq!(sub[0].1.value, vec![0, 255, 7]);
    assert_eq!(s.get(&k("c")).unwrap().unwrap().value, b"");
    s.delete(&k("a")).unwrap();
    assert_eq!(s.get(&k("a")).unwrap(), None);
    s.delete(&k("a")).unwrap(); // absent: fine
    assert!(matches!(
        s.put("", b"v", None),
        Err(MetaError::InvalidArgument { .. })
    ));
}

pub fn compare_and_put(s: &dyn MetaStore, p: &str) {
    let key = format!("{p}k");
    let r1 = s.compare_and_put(&key, 0, b"v1", None).unwrap();
    match s.compare_and_put(&key, 0, b"again", None) {
        Err(MetaError::Conflict { key: k, current }) => {
            assert_eq!((k.as_str(), current), (key.as_str(), Some(r1)))
        }
        other => panic!("create over an existing key: {other:?}"),
    }
    let r2 = s.compare_and_put(&key, r1, b"v2", None).unwrap();
    assert!(r2 > r1);
    match s.compare_and_put(&key, r1, b"stale", None) {
        Err(MetaError::Conflict { current, .. }) => assert_eq!(current, Some(r2)),
        other => panic!("stale compare: {other:?}"),
    }
    assert_eq!(s.get(&key).unwrap().unwrap().value, b"v2");
    match s.compare_and_put(&format!("{p}absent"), r2, b"x", None) {
        Err(MetaError::Conflict { current, .. }) => assert_eq!(current, None),
        other => panic!("compare on an absent key: {other:?}"),
    }
    assert_eq!(s.get(&format!("{p}absent")).unwrap(), None);
}

pub fn compare_and_delete(s: &dyn MetaStore, p: &str) {
    let key = format!("{p}k");
    let r1 = s.put(&key, b"v", None).unwrap();
    match s.compare_and_delete(&key, r1 + 1000) {
        Err(MetaError::Conflict { current, .. }) => assert_eq!(current, Some(r1)),
        other => panic!("wrong revision: {other:?}"),
    }
    assert!(matches!(
        s.compare_and_delete(&key, 0),
        Err(MetaError::Conflict { .. })
    ));
    s.compare_and_delete(&key, r1).unwrap();
    assert_eq!(s.get(&key).unwrap(), None);
    s.compare_and_delete(&key, 0).unwrap(); // absent, expected absent: no-op
    match s.compare_and_delete(&key, r1) {
        Err(MetaError::Conflict { current, .. }) => assert_eq!(current, None),
        other => panic!("delete of a deleted key: {other:?}"),
    }
}

pub fn list_revision(s: &dyn MetaStore, p: &str) {
    let r = s.put(&format!("{p}a"), b"1", None).unwrap();
    let (items, at) = s.list_with_revision(p).unwrap();
    assert_eq!(items.len(), 1);
    assert!(at >= r, "listing revision {at} before the put's {r}");
    let (none, at2) = s.list_with_revision(&format!("{p}nothing/")).unwrap();
    assert!(none.is_empty());
    assert!(at2 >= at);
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Counter {
    n: u32,
    by: Vec<u32>,
}

pub fn json_helpers(store: &Arc<dyn MetaStore>, p: &str) {
    let s = store.as_ref();
    let key = format!("{p}counter");
    assert!(get_json::<Counter>(s, &key).unwrap().is_none());
    let c = Counter { n: 0, by: vec![] };
    let r = cas_json(s, &key, 0, &c, None).unwrap();
    assert_eq!(get_json::<Counter>(s, &key).unwrap(), Some((c.clone(), r)));
    assert!(matches!(
        cas_json(s, &key, 0, &c, None),
        Err(MetaError::Conflict { .. })
    ));
    s.put(&format!("{p}bad"), b"not json", None).unwrap();
    assert!(matches!(
        get_json::<Counter>(s, &format!("{p}bad")),
        Err(MetaError::Decode { .. })
    ));

    // Concurrent read-modify-write: no increment is lost.
    const THREADS: u32 = 4;
    const INCREMENTS: u32 = 10;
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let store = store.clone();
            let key = key.clone();
            std::thread::spawn(move || {
                for _ in 0..INCREMENTS {
                    update_json::<Counter, MetaError, _>(store.as_ref(), &key, |c| {
                        let mut c = c.unwrap_or(Counter { n: 0, by: vec![] });
                        c.n += 1;
                        c.by.push(t);
                        Ok(c)
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    let (c, _) = get_json::<Counter>(s, &key).unwrap().unwrap();
    assert_eq!(c.n, THREADS * INCREMENTS);
    assert_eq!(c.by.len() as u32, THREADS * INCREMENTS);

    // An error from the closure ends the loop without writing.
    let before = s.get(&key).unwrap().unwrap().mod_revision;
    let r: Result<(Counter, u64), MetaError> = update_json(s, &key, |_| {
        Err(MetaError::InvalidArgument {
            what: "test".into(),
            reason: "refused".into(),
        })
    });
    assert!(matches!(r, Err(MetaError::InvalidArgument { .. })));
    assert_eq!(s.get(&key).unwrap().unwrap().mod_revision, before);

    // Creating through update_json, and list_json.
    let (c2, _) = update_json::<Counter, MetaError, _>(s, &format!("{p}new"), |old| {
        assert!(old.is_none());
        Ok(Counter { n: 7, by: vec![] })
    })
    .unwrap();
    assert_eq!(c2.n, 7);
    s.delete(&format!("{p}bad")).unwrap();
    let all = list_json::<Counter>(s, p).unwrap();
    assert_eq!(all.len(), 2);
    assert_eq!(all[1].1.n, 7);
}

/// Receive `n` events, failing after [`EVENT_WAIT`].
pub fn recv_n(w: &Watch, n: usize) -> Vec<WatchEvent> {
    let deadline = Instant::now() + EVENT_WAIT;
    let mut got = Vec::new();
    while got.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        match w.events.recv_timeout(left) {
            Ok(ev) => got.push(ev),
            Err(e) => panic!("got {} of {n} events ({got:?}); then {e:?}", got.len()),
        }
    }
    got
}

/// Nothing more arrives within a short while.
pub fn assert_quiet(w: &Watch) {
    if let Ok(ev) = w.events.recv_timeout(Duration::from_millis(300)) {
        panic!("unexpected event {ev:?}");
    }
}

pub fn watch_from_revision(s: &dyn MetaStore, p: &str) {
    let (_, start) = s.list_with_revision(p).unwrap();
    let r1 = s.put(&format!("{p}a"), b"1", None).unwrap();
    // Not under the watched prefix "{p}a": never delivered.
    s.put(&format!("{p}b"), b"x", None).unwrap();
    s.put(&format!("{p}_a"), b"x", None).unwrap();
    let w = s.watch(&format!("{p}a"), start).unwrap();
    // Past events are replayed, then live ones follow.
    let r2 = s.put(&format!("{p}ab"), b"2", None).unwrap();
    s.delete(&format!("{p}a")).unwrap();
    let evs = recv_n(&w, 3);
    assert_eq!(
        evs[0],
        WatchEvent::Put {
            key: format!("{p}a"),
            value: b"1".to_vec(),
            revision: r1
        }
    );
    assert_eq!(
        evs[1],
        WatchEvent::Put {
            key: format!("{p}ab"),
            value: b"2".to_vec(),
            revision: r2
        }
    );
    match &evs[2] {
        WatchEvent::Delete { key, revision } => {
            assert_eq!(key, &format!("{p}a"));
            assert!(*revision > r2);
        }
        other => panic!("expected a delete, got {other:?}"),
    }
    assert_quiet(&w);
    drop(w);

    // From a later revision: only what came after it.
    let w2 = s.watch(p, r2).unwrap();
    let ev = recv_n(&w2, 1);
    assert!(matches!(&ev[0], WatchEvent::Delete { key, .. } if key == &format!("{p}a")));
    assert_quiet(&w2);
    // A watch on everything ("" prefix) sees this crate's keys too.
    let (_, now) = s.list_with_revision("").unwrap();
    let all = s.watch("", now).unwrap();
    let r3 = s.put(&format!("{p}last"), b"3", None).unwrap();
    let ev = recv_n(&all, 1);
    assert_eq!(ev[0].revision(), r3);
    let ev = recv_n(&w2, 1);
    assert_eq!(ev[0].key(), format!("{p}last"));
}

pub fn leases(s: &dyn MetaStore, p: &str) {
    let lease = s.grant_lease(Duration::from_secs(30)).unwrap();
    s.put(&format!("{p}a"), b"1", Some(lease)).unwrap();
    s.compare_and_put(&format!("{p}b"), 0, b"2", Some(lease))
        .unwrap();
    assert!(s.keep_alive(lease).unwrap());
    assert_eq!(s.list(p).unwrap().len(), 2);
    let (_, at) = s.list_with_revision(p).unwrap();
    let w = s.watch(p, at).unwrap();
    s.revoke_lease(lease).unwrap();
    assert!(s.list(p).unwrap().is_empty(), "revoke deletes the keys");
    let evs = recv_n(&w, 2);
    assert!(evs.iter().all(|e| matches!(e, WatchEvent::Delete { .. })));
    assert!(!s.keep_alive(lease).unwrap());
    s.revoke_lease(lease).unwrap(); // already gone: fine
    match s.put(&format!("{p}c"), b"3", Some(lease)) {
        Err(MetaError::LeaseExpired { lease: l }) => assert_eq!(l, lease),
        other => panic!("put with a revoked lease: {other:?}"),
    }
    assert!(matches!(
        s.compare_and_put(&format!("{p}c"), 0, b"3", Some(lease)),
        Err(MetaError::LeaseExpired { .. })
    ));
    // A plain put detaches a key from its lease.
    let l2 = s.grant_lease(Duration::from_secs(30)).unwrap();
    s.put(&format!("{p}d"), b"leased", Some(l2)).unwrap();
    s.put(&format!("{p}d"), b"free", None).unwrap();
    s.revoke_lease(l2).unwrap();
    assert_eq!(s.get(&format!("{p}d")).unwrap().unwrap().value, b"free");
}

/// Keys of an unrefreshed lease vanish after its TTL; keep-alives extend it.
pub fn lease_expiry(s: &dyn MetaStore, p: &str, ttl: Duration) {
    let t = Instant::now();
    let lease = s.grant_lease(ttl).unwrap();
    let key = format!("{p}member");
    s.put(&key, b"alive", Some(lease)).unwrap();
    let (_, at) = s.list_with_revision(p).unwrap();
    let w = s.watch(p, at).unwrap();
    // Keep it alive past its TTL.
    let keep_until = Instant::now() + ttl + ttl / 2;
    while Instant::now() < keep_until {
        assert!(
            s.keep_alive(lease).unwrap(),
            "lease expired while kept alive"
        );
        std::thread::sleep(ttl / 4);
    }
    assert!(s.get(&key).unwrap().is_some(), "kept-alive key vanished");
    // Stop refreshing: the key goes, and watchers see it.
    let deadline = Instant::now() + ttl * 2 + Duration::from_secs(3);
    while s.get(&key).unwrap().is_some() {
        assert!(Instant::now() < deadline, "leased key outlived its lease");
        std::thread::sleep(Duration::from_millis(100));
    }
    let ev = recv_n(&w, 1);
    assert!(matches!(&ev[0], WatchEvent::Delete { key: k, .. } if k == &key));
    assert!(!s.keep_alive(lease).unwrap());
    eprintln!("lease expiry with ttl {ttl:?}: {:?}", t.elapsed());
}
