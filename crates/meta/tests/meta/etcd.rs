//! EtcdMetaStore against a real etcd (the `etcd` binary from Debian's etcd-server package):
//! conformance, lease expiry, endpoint failover, and watches that survive a server restart.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_meta::testing::{closed_endpoint, EtcdServer, TEST_REQUEST_TIMEOUT};
use weft_meta::{connect_etcd, parse_cluster_url, EtcdMetaStore, MetaError, MetaStore, WatchEvent};

use crate::cases;

/// etcd's minimum lease TTL with default heartbeat/election settings is 2 s.
const ETCD_LEASE_TTL: Duration = Duration::from_secs(2);

fn server() -> EtcdServer {
    EtcdServer::start().unwrap_or_else(|e| {
        panic!("cannot start etcd for the tests ({e}); install Debian's etcd-server package: apt-get install -y etcd-server (scripts/test.sh does it)")
    })
}

#[test]
fn conformance() {
    let t = Instant::now();
    let etcd = server();
    eprintln!("etcd ready in {:?}", t.elapsed());
    let store = connect_etcd(&etcd.url()).unwrap();
    cases::run_all(&store, "etcd");
    // Helpers take an Arc<dyn MetaStore> directly.
    assert!(weft_meta::get_json::<u32>(&store, "etcd/none")
        .unwrap()
        .is_none());
}

#[test]
fn lease_expiry() {
    let etcd = server();
    let store = etcd.connect().unwrap();
    cases::lease_expiry(&store, "exp/", ETCD_LEASE_TTL);
}

#[test]
fn failover_to_a_live_endpoint() {
    let etcd = server();
    let dead = closed_endpoint().unwrap();
    let url = format!(
        "etcd://{},{}",
        dead.trim_start_matches("http://"),
        etcd.url().trim_start_matches("etcd://")
    );
    let endpoints = parse_cluster_url(&url).unwrap();
    assert_eq!(endpoints[1], etcd.endpoint());
    let t = Instant::now();
    let store = EtcdMetaStore::connect(&endpoints, TEST_REQUEST_TIMEOUT).unwrap();
    // Writes fail over too: a refused connection never delivered the request.
    let r = store.put("f/a", b"1", None).unwrap();
    assert_eq!(store.compare_and_put("f/a", r, b"2", None).unwrap(), r + 1);
    let w = store.watch("f/", 0).unwrap();
    assert_eq!(cases::recv_n(&w, 2).len(), 2);
    let lease = store.grant_lease(ETCD_LEASE_TTL).unwrap();
    assert!(store.keep_alive(lease).unwrap());
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "failover took {:?}",
        t.elapsed()
    );

    // No endpoint alive: Unavailable, promptly.
    let t = Instant::now();
    let none = EtcdMetaStore::connect(
        &[dead.clone(), closed_endpoint().unwrap()],
        TEST_REQUEST_TIMEOUT,
    );
    assert!(
        matches!(none, Err(MetaError::Unavailable { .. })),
        "{none:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(1));
}

#[test]
fn store_and_watch_survive_a_restart() {
    let mut etcd = server();
    let store = etcd.connect().unwrap();
    let (_, at) = store.list_with_revision("r/").unwrap();
    let w = store.watch("r/", at).unwrap();
    let r1 = store.put("r/a", b"1", None).unwrap();
    assert_eq!(cases::recv_n(&w, 1)[0].revision(), r1);

    etcd.kill();
    assert!(matches!(
        store.get("r/a"),
        Err(MetaError::Unavailable { .. })
    ));
    etcd.restart().unwrap();

    let r2 = store.put("r/b", b"2", None).unwrap();
    store.delete("r/a").unwrap();
    let evs = cases::recv_n(&w, 2);
    assert_eq!(
        evs[0],
        WatchEvent::Put {
            key: "r/b".into(),
            value: b"2".to_vec(),
            revision: r2
        }
    );
    assert!(matches!(&evs[1], WatchEvent::Delete { key, .. } if key == "r/a"));
    cases::assert_quiet(&w);
    assert!(w.error().is_none());
}

#[test]
fn bad_urls_and_dead_clusters() {
    assert!(matches!(
        connect_etcd("http://x:1"),
        Err(MetaError::InvalidUrl { .. })
    ));
    let dead = closed_endpoint().unwrap();
    let r = connect_etcd(&format!("etcd://{}", dead.trim_start_matches("http://")));
    assert!(matches!(r, Err(MetaError::Unavailable { .. })));
    let _: Option<Arc<dyn MetaStore>> = r.ok();
}

#[test]
fn watch_of_compacted_history_fails() {
    let etcd = server();
    let store = etcd.connect().unwrap();
    let first = store.put("c/a", b"1", None).unwrap();
    let last = store.put("c/a", b"2", None).unwrap();
    // Compact through the gateway, as an operator (or auto-compaction) would.
    let body = format!(r#"{{"revision":"{last}"}}"#);
    let status = ureq::post(format!("{}/v3/kv/compaction", etcd.endpoint()))
        .send(body)
        .unwrap()
        .status();
    assert_eq!(status, 200);
    match store.watch("c/", first - 1) {
        Err(MetaError::Compacted {
            requested,
            compact_revision,
        }) => {
            assert_eq!((requested, compact_revision), (first, last))
        }
        other => panic!("expected Compacted, got {other:?}"),
    }
    // From the compaction point on, fine.
    let w = store.watch("c/", last).unwrap();
    store.delete("c/a").unwrap();
    assert_eq!(cases::recv_n(&w, 1)[0].key(), "c/a");
}
