//! Consistency groups as the cluster state keeps them: a group's record (its member volumes,
//! by id, so a rename keeps them) and its group snapshots (one member snapshot per member,
//! taken at one point: see `catalog::groups`). Plain data: the rules about names and lookups
//! are in `catalog::group_names`.

use serde::{Deserialize, Serialize};

use crate::qos_settings::QosSettings;
use crate::units::VolumeId;

/// A consistency group: volumes that are snapshotted, cloned, refreshed and rolled back
/// together, at one point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// Shares the namespace of volume names (`weft snapshot create GROUP@NAME` must not be
    /// ambiguous).
    pub name: String,
    /// In the order they were added.
    pub members: Vec<GroupMember>,
    pub created_unix_s: u64,
    /// The group snapshot this group was cloned, refreshed or rolled back from (full name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Its group snapshots, oldest first.
    #[serde(default)]
    pub snapshots: Vec<GroupSnapshotRecord>,
    /// QoS of the group as a whole (`weft group qos`): its limits are one set of buckets the
    /// members share (absent in catalogs written before group QoS: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosSettings>,
}

/// A member volume of a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupMember {
    pub volume: VolumeId,
    /// For a member of a clone group: the member of the source group it was cloned from, so
    /// a refresh to another snapshot of that group finds its counterpart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<VolumeId>,
}

/// A group snapshot: one snapshot of each member, all cut at one point.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSnapshotRecord {
    /// The short name: the group snapshot is `GROUP@SHORT`, each member's `VOLUME@SHORT`.
    pub name: String,
    /// (member volume, its snapshot's id) for every member at the time.
    pub members: Vec<(VolumeId, VolumeId)>,
    pub created_unix_s: u64,
}

/// A group with settings, as the throttle follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupQosListing {
    pub group: String,
    pub settings: QosSettings,
    /// Its member volumes' names.
    pub members: Vec<String>,
}

impl GroupRecord {
    pub fn snapshot(&self, short: &str) -> Option<&GroupSnapshotRecord> {
        self.snapshots.iter().find(|s| s.name == short)
    }

    pub fn has_member(&self, volume: VolumeId) -> bool {
        self.members.iter().any(|m| m.volume == volume)
    }
}
