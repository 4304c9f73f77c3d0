//! What the catalog reports about consistency groups: a group with its members, its group
//! snapshots and their space summed over the members, for `weft group list|info`, the API
//! and the UI.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::group_names::full_snapshot_name;
use super::report::{snapshot_info, volume_info};
use crate::group_records::{GroupRecord, GroupSnapshotRecord};
use crate::lock_timing::TimedMutex;
use crate::metastore::ClusterState;
use crate::qos_settings::QosSettings;
use crate::state::State;
use crate::units::FamilyId;

/// Space of a group or group snapshot: its members' figures added up (see `SpaceUsage`).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct GroupSpace {
    /// Blocks that read as data or zeroes, over every member, in bytes.
    pub mapped_bytes: u64,
    /// Blocks written in the members' own layers.
    pub own_bytes: u64,
    /// Stored bytes deleting every member would free now.
    pub unique_stored_bytes: u64,
}

/// A member of a group as reported.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct GroupMemberInfo {
    /// The member volume.
    pub volume: String,
    pub size_bytes: u64,
    /// For a clone group's member: the member of the source group it was cloned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// A consistency group as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct GroupInfo {
    pub name: String,
    pub members: Vec<GroupMemberInfo>,
    pub created_unix_s: u64,
    /// The group snapshot it was cloned, refreshed or rolled back from.
    pub origin: Option<String>,
    /// Its group snapshots (full names `GROUP@SNAPSHOT`, oldest first).
    pub snapshots: Vec<GroupSnapshotInfo>,
    pub space: GroupSpace,
    /// The group's QoS as set (`weft group qos`): limits its members share.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<QosSettings>,
}

/// A group snapshot: one snapshot per member, cut at one point.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct GroupSnapshotInfo {
    /// `GROUP@SNAPSHOT`.
    pub name: String,
    pub short_name: String,
    pub group: String,
    pub created_unix_s: u64,
    /// The member snapshots (`VOLUME@SNAPSHOT`, each a read-only NBD export).
    pub members: Vec<String>,
    /// Clone groups made from it (or refreshed to it).
    pub clones: Vec<String>,
    pub space: GroupSpace,
    /// How long writes to every member were held while the point was taken (create only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier_micros: Option<u64>,
}

pub(super) fn group_info(
    state: &ClusterState,
    st: &TimedMutex<State>,
    g: &GroupRecord,
    families: &mut HashMap<FamilyId, super::FamilySummary>,
) -> GroupInfo {
    let mut space = GroupSpace::default();
    let mut members = Vec::new();
    for m in &g.members {
        let Some(v) = state.volumes.iter().find(|v| v.id == m.volume) else {
            continue;
        };
        let info = volume_info(state, st, v, families);
        add(&mut space, &info.space);
        members.push(GroupMemberInfo {
            volume: v.name.clone(),
            size_bytes: v.size_bytes,
            source: m.source.map(|id| {
                state
                    .volumes
                    .iter()
                    .find(|v| v.id == id)
                    .map_or_else(|| format!("(deleted volume {})", id.0), |v| v.name.clone())
            }),
        });
    }
    GroupInfo {
        name: g.name.clone(),
        members,
        created_unix_s: g.created_unix_s,
        origin: g.origin.clone(),
        snapshots: g
            .snapshots
            .iter()
            .map(|gs| group_snapshot_info(state, st, g, gs, families))
            .collect(),
        space,
        qos: g.qos.clone(),
    }
}

pub(super) fn group_snapshot_info(
    state: &ClusterState,
    st: &TimedMutex<State>,
    g: &GroupRecord,
    gs: &GroupSnapshotRecord,
    families: &mut HashMap<FamilyId, super::FamilySummary>,
) -> GroupSnapshotInfo {
    let full = full_snapshot_name(g, &gs.name);
    let mut space = GroupSpace::default();
    let mut members = Vec::new();
    for (_, sid) in &gs.members {
        let Some(s) = state.snapshots.iter().find(|s| s.id == *sid && !s.hidden) else {
            continue;
        };
        let info = snapshot_info(state, st, s, families);
        add(&mut space, &info.space);
        members.push(s.name.clone());
    }
    let clones = state
        .groups
        .iter()
        .filter(|c| c.origin.as_deref() == Some(full.as_str()) && c.name != g.name)
        .map(|c| c.name.clone())
        .collect();
    GroupSnapshotInfo {
        name: full,
        short_name: gs.name.clone(),
        group: g.name.clone(),
        created_unix_s: gs.created_unix_s,
        members,
        clones,
        space,
        barrier_micros: None,
    }
}

fn add(sum: &mut GroupSpace, one: &crate::space::SpaceUsage) {
    sum.mapped_bytes += one.mapped_bytes;
    sum.own_bytes += one.own_bytes;
    sum.unique_stored_bytes += one.unique_stored_bytes;
}
