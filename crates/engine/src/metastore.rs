//! The cluster state a c.node keeps in the metadata store (`weft_meta::MetaStore`: the
//! embedded store in single-process mode, etcd in a cluster): volumes, snapshots, their
//! families and layer graph, layer operations not yet covered by a checkpoint, each family's
//! checkpoint reference, id counters. One JSON document under [`CLUSTER_STATE_KEY`], replaced
//! by compare-and-swap on its revision, so a second writer (a c.node that lost ownership) is
//! refused rather than overwriting it. The data path never waits on it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_meta::{MetaStore, Revision};

use crate::error::IoFailure;
use crate::layers::LayerOp;
use crate::units::{FamilyId, LayerId, VolumeId};

/// The format this build writes; older data dirs are refused with a clear message.
pub const FORMAT_VERSION: u32 = 3;

/// One volume as the cluster state knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    pub id: VolumeId,
    pub name: String,
    pub size_bytes: u64,
    pub family: FamilyId,
    /// The volume's writable (top) layer.
    pub layer: LayerId,
    /// The frozen layer the top sits on: a snapshot's layer (clone, refresh, rollback, or a
    /// snapshot of this volume). `None`: the volume reads nothing below its top.
    #[serde(default)]
    pub base: Option<LayerId>,
    /// The snapshot this volume was cloned, refreshed or rolled back from, by name.
    #[serde(default)]
    pub origin: Option<String>,
    /// Seconds since the Unix epoch.
    pub created_unix_s: u64,
}

/// A snapshot: a frozen layer and the chain below it, read-only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotRecord {
    /// From the same id space as volumes.
    pub id: VolumeId,
    pub name: String,
    pub family: FamilyId,
    /// The volume it was taken of (it may have been deleted since).
    pub volume: VolumeId,
    pub layer: LayerId,
    pub parent: Option<LayerId>,
    pub size_bytes: u64,
    pub created_unix_s: u64,
    /// Deleted by the user but still used by clones: not listed, kept until its last user
    /// goes.
    #[serde(default)]
    pub hidden: bool,
}

/// A layer operation the journal may not yet hold or a checkpoint may not yet cover; recovery
/// applies it again (a no-op once it has been applied).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLayerOp {
    pub family: FamilyId,
    pub op: LayerOp,
}

/// The whole cluster state of a single node.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterState {
    pub format_version: u32,
    pub volumes: Vec<VolumeRecord>,
    #[serde(default)]
    pub snapshots: Vec<SnapshotRecord>,
    /// In the order they were issued.
    #[serde(default)]
    pub pending_layer_ops: Vec<PendingLayerOp>,
    pub next_volume_id: u64,
    pub next_family_id: u64,
    pub next_layer_id: u64,
    /// Each family's latest durable checkpoint (on the d.nodes), by family id.
    #[serde(default)]
    pub checkpoints: std::collections::BTreeMap<u64, crate::checkpoint::CheckpointRef>,
    /// The pool of each family created in a named pool (others use the placement's default).
    #[serde(default)]
    pub family_pools: std::collections::BTreeMap<u64, String>,
    /// Lifetime counters (write amplification, GC totals) as of the last checkpoint.
    #[serde(default)]
    pub counters: crate::checkpoint::LifetimeCounters,
}

/// Where the cluster state lives in the metadata store.
pub const CLUSTER_STATE_KEY: &str = "weft/cluster/state";

/// The cluster state as last committed, and the revision it was committed at.
#[derive(Debug)]
pub struct ClusterStore {
    kv: Arc<dyn MetaStore>,
    revision: Revision,
    pub state: ClusterState,
}

impl ClusterStore {
    /// Load the cluster state (an empty one if none was ever committed).
    pub fn open(kv: Arc<dyn MetaStore>) -> Result<ClusterStore, IoFailure> {
        let corrupt = |detail: String| IoFailure::CorruptMetadata {
            what: CLUSTER_STATE_KEY.into(),
            detail,
        };
        let (state, revision) = match kv
            .get(CLUSTER_STATE_KEY)
            .map_err(|e| corrupt(e.to_string()))?
        {
            Some(v) => {
                let state: ClusterState =
                    serde_json::from_slice(&v.value).map_err(|e| corrupt(e.to_string()))?;
                if state.format_version != FORMAT_VERSION {
                    return Err(corrupt(format!(
                        "data dir format {} was written by another weft version; this one reads format {FORMAT_VERSION} (format 3: chunks carry headers and per-page checksums, segment ids and checkpoints are per family and live on the d.nodes): start with a new --data-dir",
                        state.format_version
                    )));
                }
                (state, v.mod_revision)
            }
            None => (
                ClusterState {
                    format_version: FORMAT_VERSION,
                    ..ClusterState::default()
                },
                0,
            ),
        };
        Ok(ClusterStore {
            kv,
            revision,
            state,
        })
    }

    /// Replace the stored state with `next`; on failure nothing changes. Fails when someone
    /// else changed it since it was loaded.
    pub fn commit(&mut self, next: ClusterState) -> Result<(), IoFailure> {
        let bytes = serde_json::to_vec_pretty(&next).expect("cluster state always serialises");
        let revision = self
            .kv
            .compare_and_put(CLUSTER_STATE_KEY, self.revision, &bytes, None)
            .map_err(|e| IoFailure::CorruptMetadata {
                what: CLUSTER_STATE_KEY.into(),
                detail: format!("commit refused: {e}"),
            })?;
        self.revision = revision;
        self.state = next;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let kv = || -> Arc<dyn MetaStore> {
            Arc::new(weft_meta::EmbeddedMetaStore::open(dir.path()).unwrap())
        };
        let mut m = ClusterStore::open(kv()).unwrap();
        assert_eq!(m.state.format_version, FORMAT_VERSION);
        let mut next = m.state.clone();
        next.volumes.push(VolumeRecord {
            id: VolumeId(1),
            name: "db".into(),
            size_bytes: 1 << 30,
            family: FamilyId(1),
            layer: LayerId(1),
            base: None,
            origin: None,
            created_unix_s: 0,
        });
        next.next_volume_id = 2;
        m.commit(next.clone()).unwrap();
        drop(m);
        assert_eq!(ClusterStore::open(kv()).unwrap().state, next);
    }
}
