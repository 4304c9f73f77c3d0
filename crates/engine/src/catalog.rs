//! The catalog: volumes and snapshots, and the operations the management API makes on them
//! (create, delete, resize, snapshot, clone, refresh, rollback). Each one is metadata only:
//!
//! 1. the new cluster state is committed to the MetaStore (with the layer operations it
//!    implies in its pending list), so a crash after this point finishes the operation;
//! 2. with the journal locked (so it falls between two records), the in-memory images and
//!    layer graph switch, and each layer operation (drop, merge) is journaled and queued;
//! 3. the destager applies the queued operations in journal order (see `destage`).
//!
//! A snapshot freezes the volume's top layer and gives the volume a new empty top on it; a
//! clone is a new top on a snapshot's layer; refresh and rollback give the volume a new top
//! on the chosen snapshot and drop the old top. A deleted snapshot is merged into the one
//! layer that sits on it, or dropped if none does, or kept hidden while several do.
//!
//! Names: a volume's name is its export name. A snapshot's full name is `VOLUME@SNAPSHOT`
//! (`pgdata@monday`, as zfs and rbd users type it), unique among visible snapshots, and is its
//! export name; the part after `@` is its short name, so `pgdata@monday` and `mysql@monday`
//! coexist and no snapshot name collides with a volume name (volume names cannot contain `@`).
//! Snapshots made before these names keep their plain names (no `@`; their short name is the
//! whole name), which still share one namespace with volume names. Wherever a snapshot is
//! looked up, a name without `@` also finds the one visible snapshot whose short name it is
//! (see [`resolve_snapshot`]).

use std::collections::HashMap;
use std::time::Instant;

use crate::engine::{Engine, VolumeHandle};
use crate::error::EngineError;
use crate::family::Family;
use crate::images::Image;
use crate::journal::{RecordHeader, RecordKind};
use crate::layers::{LayerOp, CHAIN_LAYERS_MAX};
use crate::metastore::{ClusterState, ClusterStore, PendingLayerOp, SnapshotRecord, VolumeRecord};
use crate::name_claims::{self, names_of};
use crate::state::State;
use crate::units::{
    binary_size, FamilyId, LayerId, LogicalBlockSize, SegmentId, VolumeId, BLOCK_SIZE_U64,
};

mod group_names;
mod group_qos;
mod group_report;
mod groups;
mod qos;
mod rename;
mod report;
mod switches;

use crate::names::{
    check_free, check_name, check_snapshot_free, find_snapshot, new_snapshot_name, resolve_snapshot,
};
pub use crate::names::{snapshot_short_name, SNAPSHOT_SEPARATOR};

pub use group_report::{GroupInfo, GroupMemberInfo, GroupSnapshotInfo, GroupSpace};
pub use rename::Renamed;
use report::{children_of, clones_of, snapshot_info, volume_info, Child};
pub use report::{image_summaries, FamilySummary, ImageSummary, SnapshotInfo, VolumeInfo};
use switches::{repoint_into, snapshot_into};

/// Largest volume: 2^52 bytes (4 PiB) keeps every LBA and byte offset far from overflow.
const VOLUME_SIZE_MAX_BYTES: u64 = 1 << 52;

/// What a catalog change does to the engine state once the cluster state is committed.
#[derive(Default)]
struct Switch {
    /// Images to stop serving (their clients are disconnected).
    remove_images: Vec<String>,
    /// Images to serve, under new keys.
    add_images: Vec<Image>,
    /// Images whose top moves to a new layer without their clients noticing (snapshot).
    retarget: Vec<(String, LayerId)>,
    /// Graph edges to set: (family, layer, parent).
    parents: Vec<(FamilyId, LayerId, Option<LayerId>)>,
    /// Layer operations to journal and queue.
    ops: Vec<PendingLayerOp>,
    /// A family that lost its last member: its state and segments go.
    delete_family: Option<FamilyId>,
}

impl Engine {
    // ---- volumes -------------------------------------------------------------------------

    /// Create a volume with the default logical block size (512) in the default pool.
    pub fn create_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        self.create_volume_in(name, size_bytes, None, LogicalBlockSize::default())
    }

    /// Create a volume in a pool (`None`: the placement's default) with the sector size hosts
    /// will see. Its snapshots and clones stay in the same pool (a family's stripes all have
    /// one redundancy) and have the same logical block size.
    pub fn create_volume_in(
        &self,
        name: &str,
        size_bytes: u64,
        pool: Option<&str>,
        logical_block_size: LogicalBlockSize,
    ) -> Result<VolumeInfo, EngineError> {
        check_name(name)?;
        check_size(size_bytes)?;
        let mut meta = self.shared.meta.lock();
        check_free(&meta.state, name)?;
        let mut next = meta.state.clone();
        let family = FamilyId(next.next_in_shard(next.next_family_id));
        if let Some(pool) = pool {
            self.shared
                .stripes
                .placement()
                .bind_family(family.0, pool)
                .map_err(|reason| EngineError::InvalidPool {
                    pool: pool.to_string(),
                    reason,
                })?;
            next.family_pools.insert(family.0, pool.to_string());
        }
        let record = VolumeRecord {
            id: alloc_image_id(&mut next),
            name: name.to_string(),
            size_bytes,
            family,
            layer: alloc_layer(&mut next),
            base: None,
            origin: None,
            created_unix_s: now_unix_s(),
            logical_block_size,
            qos: None,
        };
        next.next_family_id = record.family.0 + 1;
        next.volumes.push(record.clone());
        let switch = Switch {
            add_images: vec![Image::of_volume(&record)],
            parents: vec![(record.family, record.layer, None)],
            ..Switch::default()
        };
        self.apply(&mut meta, next, switch)?;
        self.volume_info_locked(&meta, name)
    }

    /// Delete a volume. One with snapshots is refused unless `with_snapshots`: then its
    /// snapshots go too, except those clones still use, which stay hidden until they go.
    pub fn delete_volume(&self, name: &str, with_snapshots: bool) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let record = find_volume(&meta.state, name)?;
        crate::hosts::check_unmapped(&meta.state, name)?;
        groups::check_not_member(&meta.state, &record)?;
        let own: Vec<&SnapshotRecord> = meta
            .state
            .snapshots
            .iter()
            .filter(|s| !s.hidden && s.volume == record.id)
            .collect();
        if !own.is_empty() && !with_snapshots {
            let kept: Vec<String> = own
                .iter()
                .filter_map(|s| {
                    let clones = clones_of(&meta.state, s);
                    (!clones.is_empty())
                        .then(|| format!("{} (used by {})", s.name, clones.join(", ")))
                })
                .collect();
            let detail = if kept.is_empty() {
                String::new()
            } else {
                format!(
                    "; snapshots that clones still use would stay hidden until their clones are deleted: {}",
                    kept.join("; ")
                )
            };
            return Err(EngineError::HasSnapshots {
                volume: name.to_string(),
                snapshots: own.iter().map(|s| s.name.clone()).collect(),
                detail,
            });
        }
        for s in &own {
            crate::hosts::check_unmapped(&meta.state, &s.name)?;
        }
        let mut next = meta.state.clone();
        next.volumes.retain(|v| v.id != record.id);
        crate::schedules::forget_volume(&mut next, name);
        let mut switch = Switch {
            remove_images: vec![record.name.clone()],
            ..Switch::default()
        };
        for s in &mut next.snapshots {
            if s.volume == record.id && !s.hidden {
                s.hidden = true;
                switch.remove_images.push(s.name.clone());
            }
        }
        switch.ops.push(PendingLayerOp {
            family: record.family,
            op: LayerOp::Drop {
                layer: record.layer,
            },
        });
        collect_hidden(&mut next, record.family, &mut switch);
        finish_family(&mut next, record.family, &mut switch);
        self.apply(&mut meta, next, switch)?;
        tracing::info!(volume = name, "volume deleted");
        Ok(())
    }

    pub fn resize_volume(&self, name: &str, size_bytes: u64) -> Result<VolumeInfo, EngineError> {
        check_size(size_bytes)?;
        let mut meta = self.shared.meta.lock();
        let record = find_volume(&meta.state, name)?;
        if size_bytes < record.size_bytes {
            return Err(EngineError::InvalidSize {
                reason: format!(
                    "volumes only grow: {name} is {}, more than {}",
                    binary_size(record.size_bytes),
                    binary_size(size_bytes)
                ),
            });
        }
        let mut next = meta.state.clone();
        for v in &mut next.volumes {
            if v.id == record.id {
                v.size_bytes = size_bytes;
            }
        }
        meta.commit(next)?;
        {
            let mut st = self.shared.state.lock();
            st.images
                .by_name_mut(name)
                .ok_or(EngineError::Gone)?
                .size_bytes = size_bytes;
        }
        self.volume_info_locked(&meta, name)
    }

    pub fn list_volumes(&self) -> Vec<VolumeInfo> {
        let meta = self.shared.meta.lock();
        let mut families = HashMap::new();
        meta.state
            .volumes
            .iter()
            .map(|r| volume_info(&meta.state, &self.shared.state, r, &mut families))
            .collect()
    }

    /// Every volume's name and size, without the space figures [`Engine::list_volumes`]
    /// computes (those walk every mapped block: seconds at tens of GiB).
    /// Whether no volume was ever created in this datastore (a new data dir or cluster): the
    /// server creates its default volume only then, so a deleted default volume stays deleted.
    pub fn is_new(&self) -> bool {
        self.shared.meta.lock().state.next_volume_id == 0
    }

    pub fn volume_sizes(&self) -> Vec<(String, u64)> {
        let meta = self.shared.meta.lock();
        meta.state
            .volumes
            .iter()
            .map(|r| (r.name.clone(), r.size_bytes))
            .collect()
    }

    pub fn volume_info(&self, name: &str) -> Result<VolumeInfo, EngineError> {
        let meta = self.shared.meta.lock();
        self.volume_info_locked(&meta, name)
    }

    fn volume_info_locked(
        &self,
        meta: &ClusterStore,
        name: &str,
    ) -> Result<VolumeInfo, EngineError> {
        let record = find_volume(&meta.state, name)?;
        Ok(volume_info(
            &meta.state,
            &self.shared.state,
            &record,
            &mut HashMap::new(),
        ))
    }

    /// Every open-able image (volumes read-write, snapshots read-only) with its size, sorted
    /// by name; cheap (no space accounting), for export lists.
    pub fn list_images(&self) -> Vec<ImageSummary> {
        let st = self.shared.state.lock();
        let mut out: Vec<ImageSummary> = st
            .images
            .iter()
            .map(|i| ImageSummary {
                name: i.name.clone(),
                size_bytes: i.size_bytes,
                read_only: !i.writable,
                logical_block_size: i.logical_block_size,
            })
            .collect();
        out.sort_by(|a, b| a.name.cmp(&b.name));
        out
    }

    /// Open a volume (read-write) or a snapshot (read-only) for I/O.
    /// An exact name (a volume, a snapshot's full name or a legacy snapshot's name) opens
    /// that image; a name without `@` that names no image opens the one snapshot whose short
    /// name it is (an error listing them when several have it).
    pub fn open_volume(&self, name: &str) -> Result<VolumeHandle, EngineError> {
        let st = self.shared.state.lock();
        let key = match st.images.key_of(name) {
            Some(key) => key,
            None => {
                let unknown = || EngineError::UnknownVolume {
                    name: name.to_string(),
                };
                if name.contains(SNAPSHOT_SEPARATOR) {
                    return Err(unknown());
                }
                let mut candidates: Vec<&str> = st
                    .images
                    .iter()
                    .filter(|i| !i.writable && snapshot_short_name(&i.name) == name)
                    .map(|i| i.name.as_str())
                    .collect();
                match candidates.as_slice() {
                    [] => return Err(unknown()),
                    [one] => st.images.key_of(one).ok_or_else(unknown)?,
                    _ => {
                        candidates.sort_unstable();
                        return Err(EngineError::AmbiguousSnapshot {
                            name: name.to_string(),
                            candidates: candidates.into_iter().map(str::to_string).collect(),
                        });
                    }
                }
            }
        };
        let image = st.image(key)?;
        Ok(VolumeHandle {
            id: key,
            name: image.name.clone(),
            read_only: !image.writable,
            logical_block_size: image.logical_block_size,
            gone: image.gone.clone(),
        })
    }

    // ---- snapshots and clones ------------------------------------------------------------

    /// Cut a crash-consistent snapshot of a volume: every write acknowledged before this call
    /// is in it, none issued after it returns. Writes are held only while the volume's top
    /// layer is switched in memory (reported as `barrier_micros`).
    ///
    /// `name` is the snapshot's short name (`monday`) or its full name (`pgdata@monday`, whose
    /// volume part must be `volume`); the snapshot is named `VOLUME@SHORT`.
    pub fn create_snapshot(&self, volume: &str, name: &str) -> Result<SnapshotInfo, EngineError> {
        let full = new_snapshot_name(volume, name)?;
        let name = full.as_str();
        let mut meta = self.shared.meta.lock();
        let v = find_volume(&meta.state, volume)?;
        check_snapshot_free(&meta.state, name)?;
        self.check_depth(&v.name, v.family, v.layer, 1)?;
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        snapshot_into(&mut next, &mut switch, &v, name);
        let barrier = self.apply(&mut meta, next, switch)?;
        tracing::info!(
            volume,
            snapshot = name,
            barrier_us = barrier,
            "snapshot created"
        );
        let mut info = self.snapshot_info_locked(&meta, name)?;
        info.barrier_micros = Some(barrier);
        Ok(info)
    }

    /// Snapshots (visible ones), of one volume or of all, oldest first.
    pub fn list_snapshots(&self, volume: Option<&str>) -> Result<Vec<SnapshotInfo>, EngineError> {
        let meta = self.shared.meta.lock();
        let of = match volume {
            Some(name) => Some(find_volume(&meta.state, name)?.id),
            None => None,
        };
        let mut families = HashMap::new();
        Ok(meta
            .state
            .snapshots
            .iter()
            .filter(|s| !s.hidden && of.is_none_or(|id| s.volume == id))
            .map(|s| snapshot_info(&meta.state, &self.shared.state, s, &mut families))
            .collect())
    }

    pub fn snapshot_info(&self, name: &str) -> Result<SnapshotInfo, EngineError> {
        let meta = self.shared.meta.lock();
        self.snapshot_info_locked(&meta, name)
    }

    fn snapshot_info_locked(
        &self,
        meta: &ClusterStore,
        name: &str,
    ) -> Result<SnapshotInfo, EngineError> {
        let s = find_snapshot(&meta.state, name)?;
        Ok(snapshot_info(
            &meta.state,
            &self.shared.state,
            &s,
            &mut HashMap::new(),
        ))
    }

    /// Delete a snapshot: its layer merges into the one layer on it (or is dropped). One that
    /// clones use is refused unless `keep_hidden`: then it disappears from lists and exports
    /// and its layer stays until its last clone goes.
    pub fn delete_snapshot(&self, name: &str, keep_hidden: bool) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let s = find_snapshot(&meta.state, name)?;
        let name = s.name.as_str();
        crate::hosts::check_unmapped(&meta.state, name)?;
        groups::check_not_group_snapshot_member(&meta.state, &s)?;
        let clones = clones_of(&meta.state, &s);
        if !clones.is_empty() && !keep_hidden {
            return Err(EngineError::InUse {
                what: format!("snapshot {name:?}"),
                detail: format!(
                    "clones {} read through it: delete them or refresh them to another snapshot first, or delete it with keep-hidden (weft snapshot delete --keep-hidden) to hide it until they go",
                    clones.join(", ")
                ),
            });
        }
        let mut next = meta.state.clone();
        for r in &mut next.snapshots {
            if r.id == s.id {
                r.hidden = true;
            }
        }
        let mut switch = Switch {
            remove_images: vec![s.name.clone()],
            ..Switch::default()
        };
        collect_hidden(&mut next, s.family, &mut switch);
        finish_family(&mut next, s.family, &mut switch);
        self.apply(&mut meta, next, switch)?;
        tracing::info!(
            snapshot = name,
            hidden = !clones.is_empty(),
            "snapshot deleted"
        );
        Ok(())
    }

    /// Create a writable thin volume whose base is a snapshot. Metadata only.
    pub fn create_clone(&self, snapshot: &str, name: &str) -> Result<VolumeInfo, EngineError> {
        check_name(name)?;
        let mut meta = self.shared.meta.lock();
        let s = find_snapshot(&meta.state, snapshot)?;
        let snapshot = s.name.as_str();
        check_free(&meta.state, name)?;
        self.check_depth(name, s.family, s.layer, 1)?;
        let mut next = meta.state.clone();
        let record = VolumeRecord {
            id: alloc_image_id(&mut next),
            name: name.to_string(),
            size_bytes: s.size_bytes,
            family: s.family,
            layer: alloc_layer(&mut next),
            base: Some(s.layer),
            origin: Some(s.name.clone()),
            created_unix_s: now_unix_s(),
            logical_block_size: s.logical_block_size,
            qos: None,
        };
        next.volumes.push(record.clone());
        let switch = Switch {
            add_images: vec![Image::of_volume(&record)],
            parents: vec![(record.family, record.layer, Some(s.layer))],
            ..Switch::default()
        };
        self.apply(&mut meta, next, switch)?;
        tracing::info!(snapshot, clone = name, "clone created");
        self.volume_info_locked(&meta, name)
    }

    /// Discard a volume's contents and make it read as `snapshot` (any snapshot of its
    /// family). Connected clients are disconnected; they reconnect to the new contents.
    /// A name without `@` means `VOLUME@snapshot` first, then the snapshot whose (legacy or
    /// short) name it is.
    pub fn refresh_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, EngineError> {
        self.repoint(volume, snapshot, false)
    }

    /// Discard a volume's changes since one of its own snapshots (`monday` is
    /// `VOLUME@monday` first, as for refresh).
    pub fn rollback_volume(&self, volume: &str, snapshot: &str) -> Result<VolumeInfo, EngineError> {
        self.repoint(volume, snapshot, true)
    }

    fn repoint(&self, volume: &str, snapshot: &str, own: bool) -> Result<VolumeInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let v = find_volume(&meta.state, volume)?;
        let s = resolve_snapshot(&meta.state, snapshot, Some(&v.name))?;
        let snapshot = s.name.as_str();
        if s.family != v.family {
            return Err(EngineError::WrongFamily {
                snapshot: snapshot.to_string(),
                volume: volume.to_string(),
            });
        }
        if own && s.volume != v.id {
            return Err(EngineError::NotOwnSnapshot {
                snapshot: snapshot.to_string(),
                volume: volume.to_string(),
            });
        }
        self.check_depth(volume, s.family, s.layer, 1)?;
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        repoint_into(&mut next, &mut switch, &v, &s);
        collect_hidden(&mut next, v.family, &mut switch);
        self.apply(&mut meta, next, switch)?;
        tracing::info!(volume, snapshot, rollback = own, "volume repointed");
        self.volume_info_locked(&meta, volume)
    }

    // ---- helpers -------------------------------------------------------------------------

    /// Refuse a new layer on `layer` whose chain would be too deep.
    fn check_depth(
        &self,
        what: &str,
        family: FamilyId,
        layer: LayerId,
        added: usize,
    ) -> Result<(), EngineError> {
        let st = self.shared.state.lock();
        let depth = st
            .families
            .get(&family)
            .map_or(1, |f| f.graph.chain(layer).len());
        if depth + added > CHAIN_LAYERS_MAX {
            return Err(EngineError::ChainTooDeep {
                what: what.to_string(),
                max: CHAIN_LAYERS_MAX,
            });
        }
        Ok(())
    }

    /// Commit `next` (with the switch's layer operations queued in it), then switch the
    /// engine state with the journal locked. Returns how long the journal was held, in µs.
    fn apply(
        &self,
        meta: &mut ClusterStore,
        mut next: ClusterState,
        switch: Switch,
    ) -> Result<u64, EngineError> {
        next.pending_layer_ops.extend(switch.ops.iter().copied());
        let old_checkpoint = switch
            .delete_family
            .and_then(|fid| next.checkpoints.remove(&fid.0));
        if let Some(fid) = switch.delete_family {
            next.family_pools.remove(&fid.0);
        }
        // Names are claimed across shards before a catalog names them, and released after
        // it no longer does (see `name_claims`).
        let (gone, new): (Vec<String>, Vec<String>) = {
            let (before, after) = (names_of(&meta.state), names_of(&next));
            (
                before
                    .difference(&after)
                    .map(|n| (*n).to_string())
                    .collect(),
                after
                    .difference(&before)
                    .map(|n| (*n).to_string())
                    .collect(),
            )
        };
        let shard = meta.shard();
        for (i, name) in new.iter().enumerate() {
            if let Err(e) = name_claims::claim(meta.kv(), shard, name) {
                for claimed in &new[..i] {
                    name_claims::release(meta.kv(), shard, claimed);
                }
                return Err(e);
            }
        }
        if let Err(e) = meta.commit(next) {
            for claimed in &new {
                name_claims::release(meta.kv(), shard, claimed);
            }
            return Err(e.into());
        }
        for name in &gone {
            name_claims::release(meta.kv(), shard, name);
        }
        let shared = &self.shared;
        let mut doomed: Vec<(SegmentId, weft_ec::Redundancy)> = Vec::new();
        let held_us = shared.journal.locked(|appender| {
            let started = Instant::now();
            let seqs: Vec<u64> = switch
                .ops
                .iter()
                .map(|op| {
                    let (layer, lba) = match op.op {
                        LayerOp::Drop { layer } => (layer, 0),
                        LayerOp::Merge { from, into } => (from, into.0),
                    };
                    let kind = match op.op {
                        LayerOp::Drop { .. } => RecordKind::DropLayer,
                        LayerOp::Merge { .. } => RecordKind::MergeLayer,
                    };
                    let header = RecordHeader {
                        kind,
                        layer,
                        lba,
                        count: 0,
                    };
                    appender.append(header, &[]).unwrap_or_else(|e| {
                        // The cluster state holds the operation: it is applied now and
                        // again at the next start.
                        tracing::error!(error = %e, "could not journal a layer operation");
                        shared.journal.written_seq()
                    })
                })
                .collect();
            let mut st = shared.state.lock();
            for name in &switch.remove_images {
                st.images.remove(name);
            }
            for (name, layer) in &switch.retarget {
                if let Some(image) = st.images.by_name_mut(name) {
                    image.layer = *layer;
                }
            }
            for (family, layer, parent) in &switch.parents {
                st.families
                    .entry(*family)
                    .or_insert_with(|| Family::new(*family))
                    .graph
                    .set_parent(*layer, *parent);
            }
            for image in switch.add_images {
                st.images.insert(image);
            }
            for (op, seq) in switch.ops.iter().zip(seqs) {
                st.queue_layer_op(seq, op.family, op.op);
            }
            if let Some(fid) = switch.delete_family {
                doomed = remove_family(&mut st, fid);
            }
            started.elapsed().as_micros() as u64
        });
        shared.work.notify_one();
        if let Some(fid) = switch.delete_family {
            if let Some(r) = old_checkpoint {
                doomed.extend(r.parts().into_iter().map(|(s, _)| (s, r.redundancy.0)));
            }
            for (id, redundancy) in doomed {
                if let Err(e) = shared.stripes.delete(fid.0, id.0, redundancy) {
                    tracing::warn!(segment = id.0, error = %e, "could not delete a segment of a deleted family");
                }
            }
        }
        Ok(held_us)
    }
}

/// Forget a family whose last volume and snapshot are gone; returns its sealed segments,
/// for the caller to delete.
fn remove_family(st: &mut State, fid: FamilyId) -> Vec<(SegmentId, weft_ec::Redundancy)> {
    if let Some(f) = st.families.remove(&fid) {
        for layer in f.layers.keys() {
            st.buffer.drop_layer(*layer);
        }
    }
    let doomed = st.segments.forget_family(fid);
    st.segment_ids.forget(fid);
    st.segments.space_freed();
    doomed
}

/// Remove hidden snapshots that at most one layer still sits on: merge each into its one
/// child, or drop it when it has none. Repeats until nothing changes (a merge can free the
/// hidden snapshot below).
fn collect_hidden(next: &mut ClusterState, family: FamilyId, switch: &mut Switch) {
    loop {
        let candidate = next
            .snapshots
            .iter()
            .filter(|s| s.hidden && s.family == family)
            .find_map(|s| {
                let children = children_of(next, s.layer);
                (children.len() <= 1).then(|| (s.clone(), children.first().copied()))
            });
        let Some((hidden, child)) = candidate else {
            return;
        };
        next.snapshots.retain(|s| s.id != hidden.id);
        let op = match child {
            None => LayerOp::Drop {
                layer: hidden.layer,
            },
            Some(Child::Volume(id)) => {
                let v = next
                    .volumes
                    .iter_mut()
                    .find(|v| v.id == id)
                    .expect("child exists");
                v.base = hidden.parent;
                LayerOp::Merge {
                    from: hidden.layer,
                    into: v.layer,
                }
            }
            Some(Child::Snapshot(id)) => {
                let s = next
                    .snapshots
                    .iter_mut()
                    .find(|s| s.id == id)
                    .expect("child exists");
                s.parent = hidden.parent;
                LayerOp::Merge {
                    from: hidden.layer,
                    into: s.layer,
                }
            }
        };
        switch.ops.push(PendingLayerOp { family, op });
    }
}

/// If the family has no volume or snapshot left, it goes as a whole: its layer operations
/// are moot.
fn finish_family(next: &mut ClusterState, family: FamilyId, switch: &mut Switch) {
    let alive = next.volumes.iter().any(|v| v.family == family)
        || next.snapshots.iter().any(|s| s.family == family);
    if !alive {
        switch.ops.retain(|op| op.family != family);
        next.pending_layer_ops.retain(|op| op.family != family);
        switch.delete_family = Some(family);
    }
}

fn alloc_image_id(next: &mut ClusterState) -> VolumeId {
    let id = VolumeId(next.next_in_shard(next.next_volume_id));
    next.next_volume_id = id.0 + 1;
    id
}

fn alloc_layer(next: &mut ClusterState) -> LayerId {
    let id = LayerId(next.next_in_shard(next.next_layer_id));
    next.next_layer_id = id.0 + 1;
    id
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn find_volume(state: &ClusterState, name: &str) -> Result<VolumeRecord, EngineError> {
    state
        .volumes
        .iter()
        .find(|v| v.name == name)
        .cloned()
        .ok_or_else(|| EngineError::UnknownVolume {
            name: name.to_string(),
        })
}

fn check_size(size_bytes: u64) -> Result<(), EngineError> {
    if size_bytes == 0
        || !size_bytes.is_multiple_of(BLOCK_SIZE_U64)
        || size_bytes > VOLUME_SIZE_MAX_BYTES
    {
        return Err(EngineError::InvalidSize {
            reason: format!(
                "{}: a volume is a non-zero multiple of {} and at most {}",
                binary_size(size_bytes),
                binary_size(BLOCK_SIZE_U64),
                binary_size(VOLUME_SIZE_MAX_BYTES)
            ),
        });
    }
    Ok(())
}
