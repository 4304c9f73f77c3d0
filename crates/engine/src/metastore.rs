//! The cluster state a c.node keeps in the metadata store (`weft_meta::MetaStore`: the
//! embedded store in single-process mode, etcd in a cluster): volumes, snapshots, their
//! families and layer graph, layer operations not yet covered by a checkpoint, each family's
//! checkpoint reference, id counters. One JSON document per shard ([`state_key`]: shard 0's
//! under [`CLUSTER_STATE_KEY`], where it was before shards existed), replaced by
//! compare-and-swap on its revision, so a second writer (a c.node that lost ownership) is
//! refused rather than overwriting it. The data path never waits on it.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use weft_meta::{MetaStore, Revision};

use crate::error::IoFailure;
use crate::layers::LayerOp;
use crate::units::{FamilyId, LayerId, LogicalBlockSize, ShardId, VolumeId};

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
    /// The sector size hosts see. Absent in records written before it existed: those
    /// volumes were 4Kn and stay so.
    #[serde(default = "LogicalBlockSize::legacy")]
    pub logical_block_size: LogicalBlockSize,
    /// Quality of service as the user set it (`None`: no limits, no target).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<crate::qos_settings::QosSettings>,
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
    /// The volume's sector size when the snapshot was cut (a family has one: clones inherit
    /// it). Absent in records written before it existed: 4096.
    #[serde(default = "LogicalBlockSize::legacy")]
    pub logical_block_size: LogicalBlockSize,
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
    /// The shard this document is the catalog of; its ids come from the shard's range.
    /// Written only for shards after the first, so shard 0's document reads as before.
    #[serde(default, skip_serializing_if = "is_first_shard")]
    pub shard: ShardId,
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
    /// Hosts and the exports mapped to them (see `hosts`), sorted by name.
    #[serde(default)]
    pub hosts: Vec<crate::host_records::HostRecord>,
    /// Stripes a recovery proved never durable (the journal held their records, which it
    /// replayed into later segments): later recoveries skip them, never replay them, whether
    /// they can read them or not. Recorded before the journal may release those records.
    #[serde(default)]
    pub ignored_stripes: Vec<IgnoredStripe>,
    /// Snapshot schedules, by volume name (see `schedules`). Written only when there are
    /// some, so a state without them stays readable by builds from before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub snapshot_schedules: Vec<crate::schedule_records::ScheduleRecord>,
    /// Consistency groups (see `group_records`). Written only when there are some, so a
    /// state without them stays readable by builds from before them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<crate::group_records::GroupRecord>,
}

/// A stripe recovery proved never durable; see [`ClusterState::ignored_stripes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct IgnoredStripe {
    pub family: u64,
    pub segment: u64,
}

/// Where the cluster state of shard 0 lives in the metadata store.
pub const CLUSTER_STATE_KEY: &str = "weft/cluster/state";
/// Where the cluster states of the other shards live: `<prefix><shard>/state`.
pub const SHARD_STATES_PREFIX: &str = "weft/shards/";

/// The key of a shard's cluster state.
pub fn state_key(shard: ShardId) -> String {
    if shard == ShardId::default() {
        CLUSTER_STATE_KEY.to_string()
    } else {
        format!("{SHARD_STATES_PREFIX}{shard}/state")
    }
}

fn is_first_shard(shard: &ShardId) -> bool {
    *shard == ShardId::default()
}

impl ClusterState {
    /// The next id of a counter (`next_volume_id`, ...), allocated from the shard's range:
    /// never below its first id, so ids stay unique across shards.
    pub fn next_in_shard(&self, counter: u64) -> u64 {
        counter.max(self.shard.first_id())
    }
}

/// The cluster state as last committed, and the revision it was committed at.
#[derive(Debug)]
pub struct ClusterStore {
    kv: Arc<dyn MetaStore>,
    /// [`state_key`] of the shard.
    key: String,
    revision: Revision,
    pub state: ClusterState,
    /// A commit whose outcome could not be learned (the store stayed unreachable after the
    /// write): it was reported failed, so if it turns out applied it is undone before the
    /// next commit.
    unsettled: Option<Vec<u8>>,
}

/// Reads that settle a commit of unknown outcome.
const SETTLE_ATTEMPTS_MAX: u32 = 10;
const SETTLE_RETRY_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

impl ClusterStore {
    /// Load shard 0's cluster state (an empty one if none was ever committed).
    pub fn open(kv: Arc<dyn MetaStore>) -> Result<ClusterStore, IoFailure> {
        ClusterStore::open_shard(kv, ShardId::default())
    }

    /// Load a shard's cluster state (an empty one if none was ever committed).
    pub fn open_shard(kv: Arc<dyn MetaStore>, shard: ShardId) -> Result<ClusterStore, IoFailure> {
        let key = state_key(shard);
        let corrupt = |detail: String| IoFailure::CorruptMetadata {
            what: key.clone(),
            detail,
        };
        let (state, revision) = match kv.get(&key).map_err(|e| corrupt(e.to_string()))? {
            Some(v) => {
                let state: ClusterState =
                    serde_json::from_slice(&v.value).map_err(|e| corrupt(e.to_string()))?;
                if state.format_version != FORMAT_VERSION {
                    return Err(corrupt(format!(
                        "data dir format {} was written by another weft version; this one reads format {FORMAT_VERSION} (format 3: chunks carry headers and per-page checksums, segment ids and checkpoints are per family and live on the d.nodes): start with a new --data-dir",
                        state.format_version
                    )));
                }
                if state.shard != shard {
                    return Err(corrupt(format!(
                        "the document holds the catalog of shard {}, not of shard {shard}",
                        state.shard
                    )));
                }
                (state, v.mod_revision)
            }
            None => (
                ClusterState {
                    format_version: FORMAT_VERSION,
                    shard,
                    ..ClusterState::default()
                },
                0,
            ),
        };
        Ok(ClusterStore {
            kv,
            key,
            revision,
            state,
            unsettled: None,
        })
    }

    /// The store the state lives in (the name claims live beside it).
    pub fn kv(&self) -> &dyn MetaStore {
        &*self.kv
    }

    /// The shard whose state this is.
    pub fn shard(&self) -> ShardId {
        self.state.shard
    }

    /// Replace the stored state with `next`; on failure nothing changes. Fails when someone
    /// else changed it since it was loaded.
    ///
    /// A failure whose outcome is unknown (a timeout, a lost reply: the store may have applied
    /// it) is settled by reading the key back: if it holds exactly what we wrote, the commit
    /// happened; if it still holds our revision, it did not. Were it left unknown, the next
    /// commit would compare against a revision that is no longer current and every later
    /// commit would be refused.
    pub fn commit(&mut self, next: ClusterState) -> Result<(), IoFailure> {
        self.settle_unknown()?;
        let bytes = serde_json::to_vec_pretty(&next).expect("cluster state always serialises");
        let revision = match self
            .kv
            .compare_and_put(&self.key, self.revision, &bytes, None)
        {
            Ok(revision) => revision,
            Err(e) => match self.read_back() {
                Some(Some((stored, rev))) if stored == bytes => rev,
                Some(_) => return Err(refused(&self.key, e.to_string())),
                None => {
                    self.unsettled = Some(bytes);
                    return Err(refused(
                        &self.key,
                        format!("{e}; the store stayed unreachable"),
                    ));
                }
            },
        };
        self.revision = revision;
        self.state = next;
        Ok(())
    }

    /// The stored value and revision (`Some(None)`: absent), or `None` if the store could not
    /// be read after [`SETTLE_ATTEMPTS_MAX`] tries.
    fn read_back(&self) -> Option<Option<(Vec<u8>, Revision)>> {
        for attempt in 0..SETTLE_ATTEMPTS_MAX {
            if attempt > 0 {
                std::thread::sleep(SETTLE_RETRY_INTERVAL);
            }
            if let Ok(v) = self.kv.get(&self.key) {
                return Some(v.map(|v| (v.value, v.mod_revision)));
            }
        }
        None
    }

    /// Undo a commit that was reported failed but may have been applied.
    fn settle_unknown(&mut self) -> Result<(), IoFailure> {
        let Some(unsettled) = self.unsettled.clone() else {
            return Ok(());
        };
        match self.read_back() {
            None => Err(refused(
                &self.key,
                "the metadata store is unreachable".into(),
            )),
            Some(Some((stored, rev))) if stored == unsettled => {
                let ours = serde_json::to_vec_pretty(&self.state)
                    .expect("cluster state always serialises");
                let revision = self
                    .kv
                    .compare_and_put(&self.key, rev, &ours, None)
                    .map_err(|e| {
                        refused(&self.key, format!("undoing a commit reported failed: {e}"))
                    })?;
                self.revision = revision;
                self.unsettled = None;
                Ok(())
            }
            Some(stored) => {
                // Not applied (or already undone): if the store holds our state, adopt its
                // revision (an undo whose reply was lost).
                let ours = serde_json::to_vec_pretty(&self.state)
                    .expect("cluster state always serialises");
                if let Some((value, rev)) = stored {
                    if value == ours {
                        self.revision = rev;
                    }
                }
                self.unsettled = None;
                Ok(())
            }
        }
    }
}

fn refused(key: &str, detail: String) -> IoFailure {
    IoFailure::CorruptMetadata {
        what: key.into(),
        detail: format!("commit refused: {detail}"),
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
            logical_block_size: LogicalBlockSize::B512,
            qos: None,
        });
        next.next_volume_id = 2;
        m.commit(next.clone()).unwrap();
        drop(m);
        assert_eq!(ClusterStore::open(kv()).unwrap().state, next);
    }

    #[test]
    fn records_without_a_logical_block_size_read_as_4kn() {
        let volume = serde_json::json!({
            "id": 1, "name": "old", "size_bytes": 4096, "family": 1, "layer": 1,
            "created_unix_s": 0
        });
        let v: VolumeRecord = serde_json::from_value(volume).unwrap();
        assert_eq!(v.logical_block_size, LogicalBlockSize::B4096);
        let snapshot = serde_json::json!({
            "id": 2, "name": "s", "family": 1, "volume": 1, "layer": 1, "parent": null,
            "size_bytes": 4096, "created_unix_s": 0
        });
        let s: SnapshotRecord = serde_json::from_value(snapshot).unwrap();
        assert_eq!(s.logical_block_size, LogicalBlockSize::B4096);
        // Written values round-trip; anything but 512 and 4096 is refused.
        let mut v2 = serde_json::to_value(VolumeRecord {
            logical_block_size: LogicalBlockSize::B512,
            ..v
        })
        .unwrap();
        assert_eq!(v2["logical_block_size"], 512);
        let back: VolumeRecord = serde_json::from_value(v2.clone()).unwrap();
        assert_eq!(back.logical_block_size, LogicalBlockSize::B512);
        v2["logical_block_size"] = 1024.into();
        assert!(serde_json::from_value::<VolumeRecord>(v2).is_err());
    }
}
