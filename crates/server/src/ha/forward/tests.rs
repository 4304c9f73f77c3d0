//! Forwarding in one process: an "owner" serves its engine on a forward listener; a
//! "forwarder" reaches it through a [`RoutedBackend`] that reads the owner and the exports from
//! a metadata store. Errors come back as errors, a deleted export as gone, and when the owner
//! stops a waiting request is served by the forwarder's own engine once it has one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use weft_engine::metastore::{ClusterState, CLUSTER_STATE_KEY};
use weft_engine::{Engine, EngineConfig};
use weft_meta::MetaStore;

use super::routed::{LocalSlot, RoutedBackend};
use super::server::ForwardService;
use super::view::ClusterView;
use crate::backend::{ExportBackend, ExportIoError};
use crate::engine_backend::EngineBackend;
use crate::ha::ownership::{OwnerRecord, OWNER_KEY};
use crate::sessions::Sessions;

struct Owner {
    engine: Arc<Engine>,
    backend: Arc<dyn ExportBackend>,
    sessions: Arc<Sessions>,
    stop: CancellationToken,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// An engine with volume `v` (64 MiB), served on a forward listener; the metadata store names
/// it as the owner and holds the cluster state the forwarder lists.
fn owner(kv: &Arc<dyn MetaStore>) -> Owner {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(Engine::open(EngineConfig::for_tests(dir.path())).unwrap());
    engine.create_volume("v", 64 << 20).unwrap();
    let backend: Arc<dyn ExportBackend> = Arc::new(EngineBackend::new(Arc::clone(&engine)));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let local = LocalSlot::new();
    local.set(Arc::clone(&backend));
    let sessions = Sessions::new();
    let stop = CancellationToken::new();
    runtime.spawn(super::server::run(
        listener,
        ForwardService {
            local,
            secret: "s3cret".into(),
            id: "owner".into(),
            sessions: Arc::clone(&sessions),
        },
        stop.clone(),
    ));
    let record = OwnerRecord {
        id: "owner".into(),
        api: String::new(),
        nbd: String::new(),
        iscsi: String::new(),
        partner: String::new(),
        forward: addr.to_string(),
        since_unix_s: 0,
    };
    kv.put(OWNER_KEY, &serde_json::to_vec(&record).unwrap(), None)
        .unwrap();
    let state = ClusterState {
        format_version: weft_engine::metastore::FORMAT_VERSION,
        volumes: vec![weft_engine::metastore::VolumeRecord {
            id: weft_engine::VolumeId(1),
            name: "v".into(),
            size_bytes: 64 << 20,
            family: weft_engine::FamilyId(1),
            layer: weft_engine::units::LayerId(1),
            base: None,
            origin: None,
            created_unix_s: 0,
            logical_block_size: weft_engine::LogicalBlockSize::default(),
            qos: None,
        }],
        ..ClusterState::default()
    };
    kv.put(
        CLUSTER_STATE_KEY,
        &serde_json::to_vec(&state).unwrap(),
        None,
    )
    .unwrap();
    Owner {
        engine,
        backend,
        sessions,
        stop,
        runtime,
        _dir: dir,
    }
}

fn forwarder(kv: &Arc<dyn MetaStore>, secret: &str) -> (RoutedBackend, Arc<LocalSlot>) {
    let local = LocalSlot::new();
    let backend = RoutedBackend::new(
        Arc::clone(&local),
        ClusterView::start(Arc::clone(kv), weft_engine::ShardId::default()),
        "forwarder".into(),
        secret.into(),
        Duration::from_secs(10),
        Duration::from_secs(60),
    );
    (backend, local)
}

fn memory_store() -> Arc<dyn MetaStore> {
    Arc::new(weft_meta::EmbeddedMetaStore::in_memory())
}

#[test]
fn requests_errors_and_sessions_go_through_the_owner() {
    let kv = memory_store();
    let owner = owner(&kv);
    let (routed, _) = forwarder(&kv, "s3cret");
    assert_eq!(routed.list_exports().len(), 1);
    assert!(routed.open("nope").is_err(), "an export the cluster lacks");
    let v = routed.open("v").unwrap();
    v.write(4096, &[7u8; 8192], false).unwrap();
    v.flush().unwrap();
    let mut buf = vec![0u8; 8192];
    v.read(4096, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    // What the owner's own clients see is the same.
    let direct = owner.backend.open("v").unwrap();
    let mut buf = vec![0u8; 4096];
    direct.read(8192, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7));
    // COMPARE AND WRITE runs on the owner, under its lock table.
    assert_eq!(
        v.compare_and_write(4096, &[7u8; 4096], &[9u8; 4096], false),
        Ok(None)
    );
    assert_eq!(
        v.compare_and_write(4096, &[7u8; 4096], &[1u8; 4096], false),
        Ok(Some(0)),
        "the block holds 9s now"
    );
    assert_eq!(
        v.compare_and_write(4096, &[9u8; 4096], &[7u8; 4096], false),
        Ok(None)
    );
    let extents = v.block_status(0, 64 << 20).unwrap();
    assert!(
        extents[0].hole,
        "the first block was never written: {extents:?}"
    );
    // An error of the owner is the client's error, at once.
    let started = Instant::now();
    let misaligned = v.read(1, &mut [0u8; 4096]);
    assert!(
        matches!(misaligned, Err(ExportIoError::Invalid { .. })),
        "{misaligned:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(2));
    // The owner counts the forwarded open among its sessions.
    let sessions = owner.sessions.of_export("v");
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(sessions[0].client, "c.node forwarder");
    // Deleted on the owner: the forwarded export is gone.
    drop(direct);
    owner.engine.delete_volume("v", false).unwrap();
    assert_eq!(v.write(0, &[1u8; 4096], false), Err(ExportIoError::Gone));
    assert!(v.is_gone());
    drop(v);
    owner.stop.cancel();
    owner.runtime.shutdown_timeout(Duration::from_secs(5));
}

#[test]
fn a_connection_without_the_clusters_secret_is_refused() {
    let kv = memory_store();
    let owner = owner(&kv);
    let (routed, _) = forwarder(&kv, "wrong");
    let v = routed.open("v").unwrap();
    let started = Instant::now();
    // Refused every time: the request fails once the retry window (10 s) is over.
    let r = v.read(0, &mut [0u8; 4096]);
    assert!(matches!(r, Err(ExportIoError::Io { .. })), "{r:?}");
    assert!(started.elapsed() >= Duration::from_secs(9));
    assert!(owner.sessions.all().is_empty());
    owner.stop.cancel();
    owner.runtime.shutdown_timeout(Duration::from_secs(5));
}

#[test]
fn a_request_waiting_when_the_owner_stops_is_served_by_the_forwarders_own_engine() {
    let kv = memory_store();
    let owner = owner(&kv);
    let (routed, local) = forwarder(&kv, "s3cret");
    let v = routed.open("v").unwrap();
    v.write(0, &[3u8; 4096], false).unwrap();
    // The owner stops answering; nobody owns the cluster for a while.
    owner.stop.cancel();
    owner.runtime.shutdown_timeout(Duration::from_secs(5));
    kv.delete(OWNER_KEY).unwrap();
    let waiting = std::thread::spawn(move || {
        let started = Instant::now();
        let r = v.write(4096, &[4u8; 4096], false);
        (r, started.elapsed(), v)
    });
    std::thread::sleep(Duration::from_millis(700));
    assert!(!waiting.is_finished(), "the write waits for an owner");
    // This c.node takes over (here: serves the same engine, as it would after recovery).
    local.set(Arc::clone(&owner.backend));
    let (r, waited, v) = waiting.join().unwrap();
    r.unwrap();
    assert!(waited >= Duration::from_millis(700));
    let mut buf = vec![0u8; 8192];
    v.read(0, &mut buf).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 3) && buf[4096..].iter().all(|&b| b == 4));
}

#[test]
fn a_forwarder_cut_off_from_etcd_stops_forwarding() {
    let kv = memory_store();
    let owner = owner(&kv);
    let faulty = Arc::new(weft_meta::FaultyMetaStore::new(Arc::clone(&kv), 7));
    let faulty_kv: Arc<dyn MetaStore> = faulty.clone();
    let routed = RoutedBackend::new(
        LocalSlot::new(),
        ClusterView::start(faulty_kv, weft_engine::ShardId::default()),
        "forwarder".into(),
        "s3cret".into(),
        Duration::from_secs(3),
        Duration::from_secs(1),
    );
    let v = routed.open("v").unwrap();
    v.write(0, &[5u8; 4096], false).unwrap();
    // Its access rules and cached reservations may go stale: it stops forwarding until etcd
    // answers again.
    faulty.set_partitioned(true);
    std::thread::sleep(Duration::from_millis(1500));
    let r = v.write(4096, &[6u8; 4096], false);
    assert!(
        matches!(r, Err(ExportIoError::Io { ref detail }) if detail.contains("etcd")),
        "{r:?}"
    );
    faulty.set_partitioned(false);
    std::thread::sleep(Duration::from_millis(1200));
    v.write(4096, &[6u8; 4096], false).unwrap();
    owner.stop.cancel();
    owner.runtime.shutdown_timeout(Duration::from_secs(5));
}
