//! Registration in the metadata store: the record appears, tracks disk usage, goes at once on
//! shutdown, expires after a crash, and comes back after the lease was lost.

use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_chunk::ChunkStore;
use weft_dnode::{dnode_key, Dnode, DnodeRecord, DNODES_PREFIX};
use weft_meta::testing::{etcd_binary, EtcdServer};
use weft_meta::{get_json, EmbeddedMetaStore, FaultyMetaStore, MetaStore};

use crate::support::{bounded, client, config, eventually, loopback, meta, Dirs};

/// etcd's shortest lease with default settings (see weft-meta).
const ETCD_TTL: Duration = Duration::from_millis(2_000);
/// Time etcd may take past a lease's TTL to delete its keys (its expiry checks run every
/// ~500 ms, and the last keep-alive may have been up to TTL/3 before the crash).
const EXPIRY_SLACK: Duration = Duration::from_millis(3_000);

fn record(meta: &dyn MetaStore, node_id: &str) -> Option<DnodeRecord> {
    get_json::<DnodeRecord>(meta, &dnode_key(node_id))
        .expect("metadata store answers")
        .map(|(r, _)| r)
}

#[test]
fn the_record_lives_with_the_dnode_in_etcd() {
    if etcd_binary().is_none() {
        // CI installs etcd-server; a developer box without it skips (loudly).
        eprintln!("skipping: no etcd binary (apt-get install -y etcd-server)");
        return;
    }
    let etcd = EtcdServer::start().expect("etcd");
    let meta: Arc<dyn MetaStore> = Arc::new(etcd.connect().expect("connect"));
    bounded(Duration::from_secs(60), move || {
        let dirs = Dirs::new(2);
        let mut c = config(&dirs, loopback());
        c.lease_ttl = ETCD_TTL;
        c.stat_interval = Duration::from_millis(300);
        let dnode = Dnode::start(c.clone(), meta.clone()).expect("start");
        let id = dnode.node_id().to_owned();

        // Registered by the time start returns.
        let r = record(&*meta, &id).expect("registered at start");
        assert_eq!(r.id, id);
        assert_eq!(r.addr, dnode.local_addr());
        assert_eq!(r.zone, "zone-a");
        assert_eq!(r.disks.len(), 2);
        assert!(
            r.disks
                .iter()
                .all(|d| d.capacity_bytes > 0 && d.chunks == 0),
            "{r:?}"
        );
        let listed = meta.list(DNODES_PREFIX).expect("list");
        assert_eq!(listed.len(), 1);

        // Disk usage is refreshed.
        client(&dnode).put(&meta_of(1), &[1u8; 1000]).expect("put");
        eventually(Duration::from_secs(5), "usage refresh", || {
            record(&*meta, &id).is_some_and(|r| r.disks.iter().map(|d| d.chunks).sum::<u64>() == 1)
        });

        // Shutdown revokes: the record goes at once.
        dnode.shutdown();
        assert!(record(&*meta, &id).is_none(), "revoked on shutdown");

        // A crash (no revoke): the record stays until the lease expires.
        let dnode = Dnode::start(c, meta.clone()).expect("restart");
        assert_eq!(dnode.node_id(), id, "the node id survives a restart");
        assert!(record(&*meta, &id).is_some());
        let crashed = Instant::now();
        dnode.abandon();
        assert!(
            record(&*meta, &id).is_some(),
            "a crash leaves the record to its lease"
        );
        eventually(ETCD_TTL + EXPIRY_SLACK, "record expires", || {
            record(&*meta, &id).is_none()
        });
        assert!(
            crashed.elapsed() >= ETCD_TTL / 2,
            "not deleted by us: {:?}",
            crashed.elapsed()
        );
    });
    drop(etcd);
}

#[test]
fn a_lost_lease_is_granted_again_and_the_record_comes_back() {
    bounded(Duration::from_secs(30), || {
        let store: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
        let faulty = FaultyMetaStore::new(store.clone(), 1);
        let dirs = Dirs::new(1);
        let mut c = config(&dirs, loopback());
        c.lease_ttl = Duration::from_millis(1_000);
        let dnode = Dnode::start(c, Arc::new(faulty.clone())).expect("start");
        let id = dnode.node_id().to_owned();
        assert!(record(&*store, &id).is_some());

        // Cut off from the store for longer than the lease: the record expires.
        faulty.set_partitioned(true);
        eventually(Duration::from_secs(5), "record expires", || {
            record(&*store, &id).is_none()
        });
        faulty.set_partitioned(false);
        eventually(Duration::from_secs(5), "registered again", || {
            record(&*store, &id).is_some()
        });
        dnode.shutdown();
        assert!(record(&*store, &id).is_none());
    });
}

fn meta_of(segment: u64) -> weft_chunk::ChunkMeta {
    meta(1, segment, 0, 0, 1000)
}
