//! What the catalog reports: volumes, snapshots and families with their space, and the
//! lineage queries (which images sit on a snapshot) that reports and deletes share.

use std::collections::HashMap;

use serde::Serialize;

use crate::engine::State;
use crate::metastore::{ClusterState, SnapshotRecord, VolumeRecord};
use crate::space::{self, DeleteEffect, FamilyReduction, SpaceUsage};
use crate::units::{FamilyId, LayerId, VolumeId, BLOCK_SIZE_U64};

/// A family as a volume or snapshot shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FamilySummary {
    pub id: u64,
    pub volumes: usize,
    pub snapshots: usize,
    /// Deleted snapshots that clones still read through.
    pub hidden_snapshots: usize,
    pub reduction: FamilyReduction,
}

/// A volume as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct VolumeInfo {
    pub name: String,
    pub id: u64,
    pub size_bytes: u64,
    pub block_size_bytes: u64,
    /// Blocks that read as written data or zeroes, through the whole chain, in bytes.
    pub mapped_bytes: u64,
    /// Of those, blocks that read as zeroes (no space used), in bytes.
    pub zero_bytes: u64,
    pub created_unix_s: u64,
    /// The snapshot it was cloned, refreshed or rolled back from.
    pub origin: Option<String>,
    /// Its snapshots (by name, oldest first).
    pub snapshots: Vec<String>,
    /// Layers a read goes through (1 for a volume without snapshots).
    pub chain_layers: usize,
    pub space: SpaceUsage,
    pub family: FamilySummary,
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SnapshotInfo {
    pub name: String,
    pub id: u64,
    /// The volume it was taken of, if that still exists.
    pub volume: Option<String>,
    pub size_bytes: u64,
    pub block_size_bytes: u64,
    pub created_unix_s: u64,
    /// Volumes cloned (or refreshed) from it, by name.
    pub clones: Vec<String>,
    pub chain_layers: usize,
    pub space: SpaceUsage,
    pub family: FamilySummary,
    /// How long writes to the volume were held while the snapshot was cut (create only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub barrier_micros: Option<u64>,
}

/// An image as an export list shows it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ImageSummary {
    pub name: String,
    pub size_bytes: u64,
    /// A snapshot.
    pub read_only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Child {
    Volume(VolumeId),
    Snapshot(VolumeId),
}

/// The volumes and snapshots whose own layer sits directly on `layer`.
pub(crate) fn children_of(state: &ClusterState, layer: LayerId) -> Vec<Child> {
    let volumes = state
        .volumes
        .iter()
        .filter(|v| v.base == Some(layer))
        .map(|v| Child::Volume(v.id));
    let snapshots = state
        .snapshots
        .iter()
        .filter(|s| s.parent == Some(layer))
        .map(|s| Child::Snapshot(s.id));
    volumes.chain(snapshots).collect()
}

/// Volumes other than the snapshot's own volume that sit directly on it.
pub(crate) fn clones_of(state: &ClusterState, s: &SnapshotRecord) -> Vec<String> {
    state
        .volumes
        .iter()
        .filter(|v| v.base == Some(s.layer) && v.id != s.volume)
        .map(|v| v.name.clone())
        .collect()
}

fn family_summary(
    state: &ClusterState,
    st: &State,
    fid: FamilyId,
    cache: &mut HashMap<FamilyId, FamilySummary>,
) -> FamilySummary {
    cache
        .entry(fid)
        .or_insert_with(|| FamilySummary {
            id: fid.0,
            volumes: state.volumes.iter().filter(|v| v.family == fid).count(),
            snapshots: state
                .snapshots
                .iter()
                .filter(|s| s.family == fid && !s.hidden)
                .count(),
            hidden_snapshots: state
                .snapshots
                .iter()
                .filter(|s| s.family == fid && s.hidden)
                .count(),
            reduction: st
                .families
                .get(&fid)
                .map(space::family_reduction)
                .unwrap_or_default(),
        })
        .clone()
}

pub(crate) fn volume_info(
    state: &ClusterState,
    st: &State,
    r: &VolumeRecord,
    families: &mut HashMap<FamilyId, FamilySummary>,
) -> VolumeInfo {
    let (chain_layers, usage) = match st.families.get(&r.family) {
        Some(f) => {
            let chain = f.graph.chain(r.layer);
            let usage = space::image_usage(f, &chain, DeleteEffect::Drop);
            (chain.len(), usage)
        }
        None => (1, SpaceUsage::default()),
    };
    VolumeInfo {
        name: r.name.clone(),
        id: r.id.0,
        size_bytes: r.size_bytes,
        block_size_bytes: BLOCK_SIZE_U64,
        mapped_bytes: usage.mapped_bytes,
        zero_bytes: usage.zero_bytes,
        created_unix_s: r.created_unix_s,
        origin: r.origin.clone(),
        snapshots: state
            .snapshots
            .iter()
            .filter(|s| s.volume == r.id && !s.hidden)
            .map(|s| s.name.clone())
            .collect(),
        chain_layers,
        space: usage,
        family: family_summary(state, st, r.family, families),
    }
}

pub(crate) fn snapshot_info(
    state: &ClusterState,
    st: &State,
    s: &SnapshotRecord,
    families: &mut HashMap<FamilyId, FamilySummary>,
) -> SnapshotInfo {
    let clones = clones_of(state, s);
    let children = children_of(state, s.layer);
    let effect = match (clones.is_empty(), children.as_slice()) {
        (_, []) => DeleteEffect::Drop,
        (true, [Child::Volume(id)]) => state
            .volumes
            .iter()
            .find(|v| v.id == *id)
            .map_or(DeleteEffect::Keep, |v| DeleteEffect::MergeInto(v.layer)),
        (true, [Child::Snapshot(id)]) => state
            .snapshots
            .iter()
            .find(|c| c.id == *id)
            .map_or(DeleteEffect::Keep, |c| DeleteEffect::MergeInto(c.layer)),
        _ => DeleteEffect::Keep,
    };
    let (chain_layers, usage) = match st.families.get(&s.family) {
        Some(f) => {
            let chain = f.graph.chain(s.layer);
            (chain.len(), space::image_usage(f, &chain, effect))
        }
        None => (1, SpaceUsage::default()),
    };
    SnapshotInfo {
        name: s.name.clone(),
        id: s.id.0,
        volume: state
            .volumes
            .iter()
            .find(|v| v.id == s.volume)
            .map(|v| v.name.clone()),
        size_bytes: s.size_bytes,
        block_size_bytes: BLOCK_SIZE_U64,
        created_unix_s: s.created_unix_s,
        clones,
        chain_layers,
        space: usage,
        family: family_summary(state, st, s.family, families),
        barrier_micros: None,
    }
}
