//! What the catalog reports: volumes, snapshots and families with their space, and the
//! lineage queries (which images sit on a snapshot) that reports and deletes share.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::lock_timing::TimedMutex;

use crate::metastore::{ClusterState, SnapshotRecord, VolumeRecord};
use crate::space::{self, DeleteEffect, FamilyReduction, SpaceUsage};
use crate::state::State;
use crate::units::{BlockId, FamilyId, LayerId, LogicalBlockSize, VolumeId, BLOCK_SIZE_U64};

/// Space accounting takes the engine's state lock for this many map pages (32 Ki blocks, about
/// 0.1-0.5 ms of work) at a time, so a report over terabytes of clones never holds I/O for
/// long. Figures of an image written meanwhile are approximate.
const PAGES_PER_LOCK: usize = 64;

/// A family as a volume or snapshot shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct FamilySummary {
    pub id: u64,
    pub volumes: usize,
    pub snapshots: usize,
    /// Deleted snapshots that clones still read through.
    pub hidden_snapshots: usize,
    pub reduction: FamilyReduction,
}

/// A volume as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct VolumeInfo {
    pub name: String,
    pub id: u64,
    pub size_bytes: u64,
    /// The engine's block (mapping, dedup, compression unit): 4096.
    pub block_size_bytes: u64,
    /// The sector size hosts see (NBD minimum block size, SCSI logical block): 512 or 4096.
    pub logical_block_size: LogicalBlockSize,
    /// Blocks that read as written data or zeroes, through the whole chain, in bytes.
    pub mapped_bytes: u64,
    /// Of those, blocks that read as zeroes (no space used), in bytes.
    pub zero_bytes: u64,
    pub created_unix_s: u64,
    /// The snapshot it was cloned, refreshed or rolled back from.
    pub origin: Option<String>,
    /// Its snapshots (by full name, oldest first).
    pub snapshots: Vec<String>,
    /// Layers a read goes through (1 for a volume without snapshots).
    pub chain_layers: usize,
    pub space: SpaceUsage,
    pub family: FamilySummary,
    /// Quality of service as set (`weft volume qos`); absent: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<crate::qos_settings::QosSettings>,
}

/// A snapshot as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, utoipa::ToSchema)]
pub struct SnapshotInfo {
    /// The full name, `VOLUME@SNAPSHOT` (a snapshot made before those names: its plain name);
    /// its NBD export name.
    pub name: String,
    /// The part after `@` (a legacy snapshot: its name).
    pub short_name: String,
    pub id: u64,
    /// The volume it was taken of, if that still exists.
    pub volume: Option<String>,
    pub size_bytes: u64,
    /// The engine's block: 4096.
    pub block_size_bytes: u64,
    /// The sector size hosts see, the volume's when it was cut: 512 or 4096.
    pub logical_block_size: LogicalBlockSize,
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
    pub logical_block_size: LogicalBlockSize,
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
    st: &TimedMutex<State>,
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
                .lock()
                .families
                .get(&fid)
                .map(space::family_reduction)
                .unwrap_or_default(),
        })
        .clone()
}

/// Space of the image of `family` that reads through `chain`, computed in slices of pages
/// with the state lock taken per slice.
fn usage_in_slices(
    st: &TimedMutex<State>,
    family: FamilyId,
    chain: &[LayerId],
    effect: DeleteEffect,
) -> SpaceUsage {
    let mut usage = SpaceUsage::default();
    let Some(&own) = chain.first() else {
        return usage;
    };
    // Runs `f` on the family under the lock; false once the family is gone.
    let with_family = |f: &mut dyn FnMut(&crate::family::Family)| -> bool {
        let guard = st.lock();
        match guard.families.get(&family) {
            Some(fam) => {
                f(fam);
                true
            }
            None => false,
        }
    };
    let (mut pages, own_pages, buffered) = {
        let guard = st.lock();
        let Some(f) = guard.families.get(&family) else {
            return usage;
        };
        (
            space::pages_of(f, chain),
            space::pages_of(f, &[own]),
            space::Buffered::new(chain.iter().map(|&l| guard.buffer.buffered_lbas(l))),
        )
    };
    pages.extend(buffered.pages());
    pages.sort_unstable();
    pages.dedup();
    let mut own_refs = HashMap::new();
    for slice in own_pages.chunks(PAGES_PER_LOCK) {
        with_family(&mut |f| space::count_own_refs(f, own, slice, &mut own_refs));
    }
    for slice in pages.chunks(PAGES_PER_LOCK) {
        with_family(&mut |f| space::add_usage(f, chain, slice, &own_refs, &buffered, &mut usage));
    }
    let mut released = HashMap::new();
    for slice in own_pages.chunks(PAGES_PER_LOCK) {
        with_family(&mut |f| space::count_released(f, own, effect, slice, &mut released));
    }
    let released: Vec<(BlockId, u32)> = released.into_iter().collect();
    for slice in released.chunks(PAGES_PER_LOCK * crate::block_map::PAGE_ENTRIES) {
        with_family(&mut |f| usage.unique_stored_bytes += space::freed_bytes(f, slice));
    }
    usage
}

/// The chain an image reads through, as the engine state has it now.
fn chain_of(st: &TimedMutex<State>, family: FamilyId, layer: LayerId) -> Vec<LayerId> {
    st.lock()
        .families
        .get(&family)
        .map_or_else(|| vec![layer], |f| f.graph.chain(layer))
}

pub(crate) fn volume_info(
    state: &ClusterState,
    st: &TimedMutex<State>,
    r: &VolumeRecord,
    families: &mut HashMap<FamilyId, FamilySummary>,
) -> VolumeInfo {
    let chain = chain_of(st, r.family, r.layer);
    let usage = usage_in_slices(st, r.family, &chain, DeleteEffect::Drop);
    let chain_layers = chain.len();
    VolumeInfo {
        name: r.name.clone(),
        id: r.id.0,
        size_bytes: r.size_bytes,
        block_size_bytes: BLOCK_SIZE_U64,
        logical_block_size: r.logical_block_size,
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
        qos: r.qos.clone(),
    }
}

pub(crate) fn snapshot_info(
    state: &ClusterState,
    st: &TimedMutex<State>,
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
    let chain = chain_of(st, s.family, s.layer);
    let usage = usage_in_slices(st, s.family, &chain, effect);
    let chain_layers = chain.len();
    SnapshotInfo {
        name: s.name.clone(),
        short_name: super::snapshot_short_name(&s.name).to_string(),
        id: s.id.0,
        volume: state
            .volumes
            .iter()
            .find(|v| v.id == s.volume)
            .map(|v| v.name.clone()),
        size_bytes: s.size_bytes,
        block_size_bytes: BLOCK_SIZE_U64,
        logical_block_size: s.logical_block_size,
        created_unix_s: s.created_unix_s,
        clones,
        chain_layers,
        space: usage,
        family: family_summary(state, st, s.family, families),
        barrier_micros: None,
    }
}

/// What a front end lists of a cluster state's images, sorted by name: what a c.node that
/// does not own the cluster serves (through the owner) before it has an engine of its own.
pub fn image_summaries(state: &crate::metastore::ClusterState) -> Vec<ImageSummary> {
    let mut out: Vec<ImageSummary> = crate::images::images_of(state)
        .into_iter()
        .map(|i| ImageSummary {
            name: i.name,
            size_bytes: i.size_bytes,
            read_only: !i.writable,
            logical_block_size: i.logical_block_size,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}
