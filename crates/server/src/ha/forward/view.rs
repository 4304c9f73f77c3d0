//! What a c.node that does not own the cluster knows of it: the exports (volumes and
//! snapshots), the hosts and their mappings (the access rules its front ends apply), and who
//! owns the cluster now, read from etcd by a thread every [`POLL_INTERVAL`]. The owner commits
//! every change of them to the cluster state before it answers the user, so a forwarder is at
//! most one interval behind.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use weft_engine::metastore::{state_key, ClusterState};
use weft_engine::ShardId;
use weft_meta::MetaStore;

use crate::access::AccessTable;
use crate::backend::ExportInfo;
use crate::ha::ownership::{owner_key, OwnerRecord};

pub const POLL_INTERVAL: Duration = Duration::from_millis(500);

/// One reading of the cluster.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub exports: Vec<ExportInfo>,
    pub access: Arc<AccessTable>,
    pub owner: Option<OwnerRecord>,
}

/// The latest reading, kept fresh by a thread until [`ClusterView::stop`].
#[derive(Debug)]
pub struct ClusterView {
    kv: Arc<dyn MetaStore>,
    /// The shard's ownership record and catalog keys.
    owner_key: String,
    state_key: String,
    now: Mutex<Arc<Snapshot>>,
    /// The cluster state's revision last decoded (0: none yet).
    state_revision: Mutex<u64>,
    /// Bumped when the hosts change: the access generation front ends compare.
    hosts_generation: Mutex<u64>,
    /// When etcd last answered a reading.
    read_at: Mutex<std::time::Instant>,
    stop: AtomicBool,
}

impl ClusterView {
    /// Read the shard once, then keep reading it in the background.
    pub fn start(kv: Arc<dyn MetaStore>, shard: ShardId) -> Arc<ClusterView> {
        let view = Arc::new(ClusterView {
            kv,
            owner_key: owner_key(shard),
            state_key: state_key(shard),
            now: Mutex::default(),
            state_revision: Mutex::new(0),
            hosts_generation: Mutex::new(1),
            read_at: Mutex::new(std::time::Instant::now()),
            stop: AtomicBool::new(false),
        });
        view.refresh();
        let weak = Arc::downgrade(&view);
        let _ = std::thread::Builder::new()
            .name("weft-cluster-view".into())
            .spawn(move || loop {
                std::thread::sleep(POLL_INTERVAL);
                match weak.upgrade() {
                    Some(v) if !v.stop.load(Ordering::Acquire) => v.refresh(),
                    _ => return,
                }
            });
        view
    }

    pub fn now(&self) -> Arc<Snapshot> {
        Arc::clone(&self.now.lock())
    }

    /// How long since etcd last answered a reading.
    pub fn unread_for(&self) -> Duration {
        self.read_at.lock().elapsed()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }

    /// Read etcd again; an unreachable etcd keeps the last reading.
    pub fn refresh(&self) {
        let owner = match self.kv.get(&self.owner_key) {
            Ok(v) => v.and_then(|v| serde_json::from_slice::<OwnerRecord>(&v.value).ok()),
            Err(e) => {
                tracing::debug!(error = %e, "cluster view: etcd unreachable");
                return;
            }
        };
        let last = self.now();
        let state = match self.kv.get(&self.state_key) {
            Ok(v) => v,
            Err(_) => return,
        };
        *self.read_at.lock() = std::time::Instant::now();
        let (exports, access) = match state {
            Some(v) if v.mod_revision != *self.state_revision.lock() => {
                match serde_json::from_slice::<ClusterState>(&v.value) {
                    Ok(state) => {
                        *self.state_revision.lock() = v.mod_revision;
                        (exports_of(&state), self.access_of(&last.access, state))
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cluster view: the cluster state does not decode");
                        (last.exports.clone(), Arc::clone(&last.access))
                    }
                }
            }
            _ => (last.exports.clone(), Arc::clone(&last.access)),
        };
        *self.now.lock() = Arc::new(Snapshot {
            exports,
            access,
            owner,
        });
    }

    /// The access table of `state`: the last one while the hosts did not change, so front ends
    /// rebuild their LUN maps only when they did.
    fn access_of(&self, last: &Arc<AccessTable>, state: ClusterState) -> Arc<AccessTable> {
        let mut generation = self.hosts_generation.lock();
        if last.generation == *generation && last.hosts() == state.hosts.as_slice() {
            return Arc::clone(last);
        }
        *generation += 1;
        Arc::new(AccessTable::new(*generation, state.hosts))
    }
}

fn exports_of(state: &ClusterState) -> Vec<ExportInfo> {
    weft_engine::image_summaries(state)
        .into_iter()
        .map(crate::engine_backend::export_info)
        .collect()
}
