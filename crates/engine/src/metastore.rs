//! The embedded MetaStore of single-process mode: the small, rarely changing cluster state
//! (volumes, snapshots, their families and layer graph, layer operations not yet known to be
//! durable in a checkpoint, id counters), as one JSON document replaced atomically (write,
//! fsync, rename, fsync dir). The data path never waits on it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::IoFailure;
use crate::layers::LayerOp;
use crate::units::{FamilyId, LayerId, VolumeId};

/// The format this build writes; older data dirs are refused with a clear message.
pub const FORMAT_VERSION: u32 = 3;

const METASTORE_FILE: &str = "cluster.json";

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
    /// Lifetime counters (write amplification, GC totals) as of the last checkpoint.
    #[serde(default)]
    pub counters: crate::checkpoint::LifetimeCounters,
}

/// The embedded store: a file and its current contents.
#[derive(Debug)]
pub struct MetaStore {
    dir: PathBuf,
    pub state: ClusterState,
}

impl MetaStore {
    pub fn open(dir: &Path) -> Result<MetaStore, IoFailure> {
        std::fs::create_dir_all(dir).map_err(|e| IoFailure::disk(dir.display().to_string(), e))?;
        let path = dir.join(METASTORE_FILE);
        let state = match std::fs::read(&path) {
            Ok(bytes) => {
                let state: ClusterState =
                    serde_json::from_slice(&bytes).map_err(|e| IoFailure::CorruptMetadata {
                        what: path.display().to_string(),
                        detail: e.to_string(),
                    })?;
                if state.format_version != FORMAT_VERSION {
                    return Err(IoFailure::CorruptMetadata {
                        what: path.display().to_string(),
                        detail: format!(
                            "data dir format {} was written by another weft version; this one reads format {FORMAT_VERSION} (format 3: chunks carry headers and per-page checksums, segment ids and checkpoints are per family and live on the d.nodes): start with a new --data-dir",
                            state.format_version
                        ),
                    });
                }
                state
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => ClusterState {
                format_version: FORMAT_VERSION,
                ..ClusterState::default()
            },
            Err(e) => return Err(IoFailure::disk(path.display().to_string(), e)),
        };
        Ok(MetaStore {
            dir: dir.to_path_buf(),
            state,
        })
    }

    /// Replace the stored state with `next`; on failure nothing changes.
    pub fn commit(&mut self, next: ClusterState) -> Result<(), IoFailure> {
        let bytes = serde_json::to_vec_pretty(&next).expect("cluster state always serialises");
        write_atomically(&self.dir, METASTORE_FILE, &bytes)?;
        self.state = next;
        Ok(())
    }
}

/// Write `name` in `dir` so that a crash leaves either the old or the new contents.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), IoFailure> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let err = |p: &Path, e| IoFailure::disk(p.display().to_string(), e);
    let mut f = std::fs::File::create(&tmp).map_err(|e| err(&tmp, e))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .map_err(|e| err(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| err(&path, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| err(dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = MetaStore::open(dir.path()).unwrap();
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
        assert_eq!(MetaStore::open(dir.path()).unwrap().state, next);
    }
}
