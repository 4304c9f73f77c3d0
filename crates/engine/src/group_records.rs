//! Consistency groups as the cluster state keeps them, and the pure rules about them: a
//! group's record (its member volumes, by id, so a rename keeps them), its group snapshots
//! (one member snapshot per member, taken at one point: see `catalog::groups`), and how a
//! clone group's members are named. No I/O, no engine state.

use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use crate::metastore::ClusterState;
use crate::names::{check_name, SNAPSHOT_SEPARATOR};
use crate::units::VolumeId;

/// Between a clone group's name and a source member's name in the name of the member a
/// clone makes of it: `pgdev-pgdata` (volume names cannot contain `/`).
pub const CLONE_MEMBER_SEPARATOR: char = '-';

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

impl GroupRecord {
    pub fn full_snapshot_name(&self, short: &str) -> String {
        format!("{}{SNAPSHOT_SEPARATOR}{short}", self.name)
    }

    pub fn snapshot(&self, short: &str) -> Option<&GroupSnapshotRecord> {
        self.snapshots.iter().find(|s| s.name == short)
    }

    pub fn has_member(&self, volume: VolumeId) -> bool {
        self.members.iter().any(|m| m.volume == volume)
    }
}

/// The group a volume belongs to (a volume is in at most one).
pub fn group_of(state: &ClusterState, volume: VolumeId) -> Option<&GroupRecord> {
    state.groups.iter().find(|g| g.has_member(volume))
}

/// The group snapshot a member snapshot belongs to, as (group, short name).
pub fn group_snapshot_of(state: &ClusterState, snapshot: VolumeId) -> Option<(&str, &str)> {
    state.groups.iter().find_map(|g| {
        g.snapshots
            .iter()
            .find(|s| s.members.iter().any(|(_, id)| *id == snapshot))
            .map(|s| (g.name.as_str(), s.name.as_str()))
    })
}

/// Split `GROUP@SNAPSHOT`; an error when there is no `@`.
pub fn split_group_snapshot(name: &str) -> Result<(&str, &str), EngineError> {
    name.split_once(SNAPSHOT_SEPARATOR)
        .ok_or_else(|| EngineError::InvalidGroup {
            reason: format!("{name:?}: a group snapshot is named GROUP@SNAPSHOT"),
        })
}

/// The name a clone group `clone` gives the member it makes of source member `source`:
/// `map`'s name for it if the user gave one (`--map pgdata=devdata`), else `CLONE-SOURCE`
/// (`pgdev-pgdata`).
pub fn clone_member_name(
    clone: &str,
    source: &str,
    map: &[(String, String)],
) -> Result<String, EngineError> {
    let name = map
        .iter()
        .find(|(from, _)| from == source)
        .map(|(_, to)| to.clone())
        .unwrap_or_else(|| format!("{clone}{CLONE_MEMBER_SEPARATOR}{source}"));
    check_name(&name).map_err(|_| EngineError::InvalidGroup {
        reason: format!(
            "the clone of member {source:?} would be named {name:?}, which is not a valid volume name (1-64 characters from [A-Za-z0-9._-]): map it to another name (--map {source}=NAME)"
        ),
    })?;
    Ok(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_members_are_named_group_dash_member_unless_mapped() {
        let map = vec![("pgwal".to_string(), "devwal".to_string())];
        assert_eq!(
            clone_member_name("pgdev", "pgdata", &map).unwrap(),
            "pgdev-pgdata"
        );
        assert_eq!(clone_member_name("pgdev", "pgwal", &map).unwrap(), "devwal");
        let long = "x".repeat(40);
        assert!(clone_member_name(&long, &long, &[]).is_err());
    }

    #[test]
    fn group_snapshot_names_split_at_the_at_sign() {
        assert_eq!(
            split_group_snapshot("pgprod@monday").unwrap(),
            ("pgprod", "monday")
        );
        assert!(split_group_snapshot("pgprod").is_err());
    }
}
