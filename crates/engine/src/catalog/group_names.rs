//! Names and lookups of consistency groups: `GROUP@SNAPSHOT` group snapshot names, how a clone
//! group's members are named (`CLONE-MEMBER`, or as `--map` says), and which group a volume or
//! member snapshot belongs to. Pure functions of the cluster state.

use crate::error::EngineError;
use crate::group_records::GroupRecord;
use crate::metastore::ClusterState;
use crate::names::{check_name, SNAPSHOT_SEPARATOR};
use crate::units::VolumeId;

/// Between a clone group's name and a source member's name in the name of the member a
/// clone makes of it: `pgdev-pgdata` (volume names cannot contain `/`).
pub const CLONE_MEMBER_SEPARATOR: char = '-';

/// `GROUP@SHORT`.
pub(crate) fn full_snapshot_name(g: &GroupRecord, short: &str) -> String {
    format!("{}{SNAPSHOT_SEPARATOR}{short}", g.name)
}

/// The group a volume belongs to (a volume is in at most one).
pub(crate) fn group_of(state: &ClusterState, volume: VolumeId) -> Option<&GroupRecord> {
    state.groups.iter().find(|g| g.has_member(volume))
}

/// The group snapshot a member snapshot belongs to, as (group, short name).
pub(crate) fn group_snapshot_of(state: &ClusterState, snapshot: VolumeId) -> Option<(&str, &str)> {
    state.groups.iter().find_map(|g| {
        g.snapshots
            .iter()
            .find(|s| s.members.iter().any(|(_, id)| *id == snapshot))
            .map(|s| (g.name.as_str(), s.name.as_str()))
    })
}

/// Split `GROUP@SNAPSHOT`; an error when there is no `@`.
pub(crate) fn split_group_snapshot(name: &str) -> Result<(&str, &str), EngineError> {
    name.split_once(SNAPSHOT_SEPARATOR)
        .ok_or_else(|| EngineError::InvalidGroup {
            reason: format!("{name:?}: a group snapshot is named GROUP@SNAPSHOT"),
        })
}

/// The name a clone group `clone` gives the member it makes of source member `source`:
/// `map`'s name for it if the user gave one (`--map pgdata=devdata`), else `CLONE-SOURCE`
/// (`pgdev-pgdata`).
pub(crate) fn clone_member_name(
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
