//! Consistency groups: the catalog operations on a set of volumes taken as one (create, add
//! and remove members, delete; snapshot, clone, refresh and rollback of the whole group).
//!
//! **The point.** A group snapshot is one cluster-state commit that records a snapshot of
//! every member, and one [`Engine::apply`]: with the journal locked, every member's top layer
//! switches before the lock is released. A write resolves its volume's top layer and is
//! appended to the journal under that same lock, so every write record falls either before
//! the switch (it is in the member's snapshot: the snapshot's layer is the old top) or after
//! it (it is in no member snapshot). A write acknowledged before the point was appended
//! before it, so it is in its member's snapshot; a write issued after the point is appended
//! after it, so it is in none. If a write to B was issued only after a write to A was
//! acknowledged (a dependent write), A's record precedes B's in the journal, so B's in the
//! snapshot implies A's. Writes in flight at the point are in or out, per record, as a crash
//! would leave them. The proof and its limits are in `docs/ARCHITECTURE.md`, "Consistency
//! groups".
//!
//! Refresh and rollback of a group are one commit and one switch too, and a clone group is
//! one commit: no client sees half a group moved. Members must be volumes of this shard's
//! catalog (one journal); a volume of another shard is refused with both shards named.

use std::collections::HashMap;

use super::group_names::{
    clone_member_name, full_snapshot_name, group_of, group_snapshot_of, split_group_snapshot,
};
use super::group_report::{group_info, group_snapshot_info, GroupInfo, GroupSnapshotInfo};
use super::report::clones_of;
use super::switches::{repoint_into, snapshot_into};
use super::{
    alloc_image_id, alloc_layer, collect_hidden, find_volume, finish_family, now_unix_s, Switch,
};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::group_records::{GroupMember, GroupRecord, GroupSnapshotRecord};
use crate::images::Image;
use crate::metastore::{ClusterState, ClusterStore, SnapshotRecord, VolumeRecord};
use crate::names::{check_free, check_name, check_snapshot_free, new_snapshot_name};

impl Engine {
    /// Create a consistency group of existing volumes (at least one; each in no other group).
    pub fn create_group(&self, name: &str, volumes: &[String]) -> Result<GroupInfo, EngineError> {
        check_name(name)?;
        let mut meta = self.shared.meta.lock();
        check_free(&meta.state, name)?;
        if volumes.is_empty() {
            return Err(EngineError::InvalidGroup {
                reason: format!("group {name:?} needs at least one volume (--volumes A,B)"),
            });
        }
        let mut next = meta.state.clone();
        let members = new_members(&meta, name, volumes, &[])?;
        next.groups.push(GroupRecord {
            name: name.to_string(),
            members,
            created_unix_s: now_unix_s(),
            origin: None,
            snapshots: Vec::new(),
            qos: None,
        });
        meta.commit(next)?;
        tracing::info!(group = name, members = ?volumes, "consistency group created");
        self.group_info_locked(&meta, name)
    }

    /// Add volumes to a group. Its existing group snapshots keep the members they were taken
    /// of; the next one includes the new ones.
    pub fn add_group_members(
        &self,
        name: &str,
        volumes: &[String],
    ) -> Result<GroupInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let group = find_group(&meta.state, name)?;
        let mut next = meta.state.clone();
        let added = new_members(&meta, name, volumes, &group.members)?;
        group_mut(&mut next, name).members.extend(added);
        meta.commit(next)?;
        tracing::info!(group = name, added = ?volumes, "consistency group members added");
        self.group_info_locked(&meta, name)
    }

    /// Take volumes out of a group (they stay volumes; group snapshots taken with them keep
    /// their snapshots). A group keeps at least one member: delete it instead.
    pub fn remove_group_members(
        &self,
        name: &str,
        volumes: &[String],
    ) -> Result<GroupInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let group = find_group(&meta.state, name)?;
        let mut next = meta.state.clone();
        let g = group_mut(&mut next, name);
        for v in volumes {
            let record = find_volume(&meta.state, v)?;
            if !group.has_member(record.id) {
                return Err(EngineError::GroupConflict {
                    group: name.to_string(),
                    reason: format!("volume {v:?} is not a member"),
                });
            }
            g.members.retain(|m| m.volume != record.id);
        }
        if g.members.is_empty() {
            return Err(EngineError::GroupConflict {
                group: name.to_string(),
                reason: format!(
                    "it would have no member left: delete the group instead (weft group delete {name})"
                ),
            });
        }
        meta.commit(next)?;
        tracing::info!(group = name, removed = ?volumes, "consistency group members removed");
        self.group_info_locked(&meta, name)
    }

    pub fn list_groups(&self) -> Vec<GroupInfo> {
        let meta = self.shared.meta.lock();
        let mut families = HashMap::new();
        meta.state
            .groups
            .iter()
            .map(|g| group_info(&meta.state, &self.shared.state, g, &mut families))
            .collect()
    }

    pub fn group_info(&self, name: &str) -> Result<GroupInfo, EngineError> {
        let meta = self.shared.meta.lock();
        self.group_info_locked(&meta, name)
    }

    fn group_info_locked(&self, meta: &ClusterStore, name: &str) -> Result<GroupInfo, EngineError> {
        let g = find_group(&meta.state, name)?;
        Ok(group_info(
            &meta.state,
            &self.shared.state,
            &g,
            &mut HashMap::new(),
        ))
    }

    /// The exports (member volumes and member snapshots) a [`Engine::delete_group`] with these
    /// options would end, for the caller's check of connected clients.
    pub fn group_exports(
        &self,
        name: &str,
        with_snapshots: bool,
        with_volumes: bool,
    ) -> Result<Vec<String>, EngineError> {
        let meta = self.shared.meta.lock();
        let g = find_group(&meta.state, name)?;
        let mut out = Vec::new();
        if with_snapshots {
            for gs in &g.snapshots {
                out.extend(
                    member_snapshots(&meta.state, gs)
                        .into_iter()
                        .map(|s| s.name),
                );
            }
        }
        if with_volumes {
            out.extend(members(&meta.state, &g).into_iter().map(|v| v.name));
        }
        Ok(out)
    }

    /// Delete a group. One with group snapshots is refused unless `with_snapshots` (they go,
    /// every member snapshot; those clones use stay hidden until they go). The member volumes
    /// stay unless `with_volumes`; then they go as `volume delete --with-snapshots` would
    /// delete them (their other snapshots too) when `with_snapshots`, else they must have none.
    pub fn delete_group(
        &self,
        name: &str,
        with_snapshots: bool,
        with_volumes: bool,
    ) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let g = find_group(&meta.state, name)?;
        if !g.snapshots.is_empty() && !with_snapshots {
            let names: Vec<String> = g
                .snapshots
                .iter()
                .map(|s| full_snapshot_name(&g, &s.name))
                .collect();
            return Err(EngineError::GroupConflict {
                group: name.to_string(),
                reason: format!(
                    "it has group snapshots ({}): delete them first (weft snapshot delete GROUP@SNAPSHOT), or delete the group with them (--with-snapshots)",
                    names.join(", ")
                ),
            });
        }
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        let mut families = Vec::new();
        for gs in &g.snapshots {
            for s in member_snapshots(&meta.state, gs) {
                crate::hosts::check_unmapped(&meta.state, &s.name)?;
                hide_snapshot(&mut next, &mut switch, &s);
                families.push(s.family);
            }
        }
        next.groups.retain(|r| r.name != name);
        if with_volumes {
            for v in members(&meta.state, &g) {
                crate::hosts::check_unmapped(&meta.state, &v.name)?;
                let own: Vec<SnapshotRecord> = next
                    .snapshots
                    .iter()
                    .filter(|s| !s.hidden && s.volume == v.id)
                    .cloned()
                    .collect();
                if !own.is_empty() && !with_snapshots {
                    return Err(EngineError::HasSnapshots {
                        volume: v.name.clone(),
                        snapshots: own.iter().map(|s| s.name.clone()).collect(),
                        detail: "; or delete the group with --with-snapshots".into(),
                    });
                }
                for s in &own {
                    crate::hosts::check_unmapped(&meta.state, &s.name)?;
                    hide_snapshot(&mut next, &mut switch, s);
                }
                next.volumes.retain(|r| r.id != v.id);
                crate::schedules::forget_volume(&mut next, &v.name);
                switch.remove_images.push(v.name.clone());
                switch.ops.push(crate::metastore::PendingLayerOp {
                    family: v.family,
                    op: crate::layers::LayerOp::Drop { layer: v.layer },
                });
                families.push(v.family);
            }
        }
        families.sort_unstable_by_key(|f| f.0);
        families.dedup();
        self.apply_all(&mut meta, next, switch, &families)?;
        tracing::info!(
            group = name,
            with_snapshots,
            with_volumes,
            "consistency group deleted"
        );
        Ok(())
    }

    // ---- the whole group at one point ---------------------------------------------------

    /// Snapshot every member of `group` at one point (see the module doc): `name` is the
    /// short name (`monday`) or `GROUP@monday`; each member's snapshot is `MEMBER@monday`.
    pub fn create_group_snapshot(
        &self,
        group: &str,
        name: &str,
    ) -> Result<GroupSnapshotInfo, EngineError> {
        let full = new_snapshot_name(group, name)?;
        let (_, short) = split_group_snapshot(&full)?;
        let mut meta = self.shared.meta.lock();
        let g = find_group(&meta.state, group)?;
        if g.snapshot(short).is_some() {
            return Err(EngineError::SnapshotExists { name: full.clone() });
        }
        let volumes = members(&meta.state, &g);
        for v in &volumes {
            check_snapshot_free(&meta.state, &new_snapshot_name(&v.name, short)?)?;
            self.check_depth(&v.name, v.family, v.layer, 1)?;
        }
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        let mut taken = Vec::new();
        for v in &volumes {
            let s = snapshot_into(
                &mut next,
                &mut switch,
                v,
                &new_snapshot_name(&v.name, short)?,
            );
            taken.push((v.id, s.id));
        }
        group_mut(&mut next, group)
            .snapshots
            .push(GroupSnapshotRecord {
                name: short.to_string(),
                members: taken,
                created_unix_s: now_unix_s(),
            });
        let barrier = self.apply(&mut meta, next, switch)?;
        tracing::info!(
            group,
            snapshot = short,
            members = volumes.len(),
            barrier_us = barrier,
            "group snapshot created"
        );
        let mut info = self.group_snapshot_info_locked(&meta, &full)?;
        info.barrier_micros = Some(barrier);
        Ok(info)
    }

    pub fn group_snapshot_info(&self, name: &str) -> Result<GroupSnapshotInfo, EngineError> {
        let meta = self.shared.meta.lock();
        self.group_snapshot_info_locked(&meta, name)
    }

    fn group_snapshot_info_locked(
        &self,
        meta: &ClusterStore,
        name: &str,
    ) -> Result<GroupSnapshotInfo, EngineError> {
        let (g, gs) = find_group_snapshot(&meta.state, name)?;
        Ok(group_snapshot_info(
            &meta.state,
            &self.shared.state,
            &g,
            &gs,
            &mut HashMap::new(),
        ))
    }

    /// Delete a group snapshot: every member snapshot, in one commit. Refused while clones
    /// use a member snapshot, unless `keep_hidden` (those stay hidden until their clones go).
    pub fn delete_group_snapshot(&self, name: &str, keep_hidden: bool) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let (g, gs) = find_group_snapshot(&meta.state, name)?;
        let snapshots = member_snapshots(&meta.state, &gs);
        let mut used = Vec::new();
        for s in &snapshots {
            crate::hosts::check_unmapped(&meta.state, &s.name)?;
            let clones = clones_of(&meta.state, s);
            if !clones.is_empty() {
                used.push(format!("{} (used by {})", s.name, clones.join(", ")));
            }
        }
        if !used.is_empty() && !keep_hidden {
            return Err(EngineError::InUse {
                what: format!("group snapshot {name:?}"),
                detail: format!(
                    "clones read through {}: delete them or refresh them to another snapshot first, or delete it with keep-hidden (weft snapshot delete --keep-hidden)",
                    used.join("; ")
                ),
            });
        }
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        let mut families = Vec::new();
        for s in &snapshots {
            hide_snapshot(&mut next, &mut switch, s);
            families.push(s.family);
        }
        group_mut(&mut next, &g.name)
            .snapshots
            .retain(|r| r.name != gs.name);
        families.sort_unstable_by_key(|f| f.0);
        families.dedup();
        self.apply_all(&mut meta, next, switch, &families)?;
        tracing::info!(snapshot = name, "group snapshot deleted");
        Ok(())
    }

    /// Make a clone group `clone` of group snapshot `snapshot` (`GROUP@SNAPSHOT`): a clone of
    /// each member snapshot, named `CLONE-MEMBER` or as `map` says (`(member, name)` pairs),
    /// in one commit.
    pub fn clone_group(
        &self,
        snapshot: &str,
        clone: &str,
        map: &[(String, String)],
    ) -> Result<GroupInfo, EngineError> {
        check_name(clone)?;
        let mut meta = self.shared.meta.lock();
        let (_, gs) = find_group_snapshot(&meta.state, snapshot)?;
        check_free(&meta.state, clone)?;
        let pairs = snapshot_members(&meta.state, &gs)?;
        for (from, _) in map {
            if !pairs.iter().any(|(source, _)| source == from) {
                return Err(EngineError::InvalidGroup {
                    reason: format!(
                        "--map {from}=...: {from:?} is not a member of {snapshot:?} (members: {})",
                        pairs
                            .iter()
                            .map(|(n, _)| n.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
        }
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        let mut members = Vec::new();
        let mut names = Vec::new();
        for (source, s) in &pairs {
            let name = clone_member_name(clone, source, map)?;
            check_free(&next, &name)?;
            self.check_depth(&name, s.family, s.layer, 1)?;
            let record = VolumeRecord {
                id: alloc_image_id(&mut next),
                name: name.clone(),
                size_bytes: s.size_bytes,
                family: s.family,
                layer: alloc_layer(&mut next),
                base: Some(s.layer),
                origin: Some(s.name.clone()),
                created_unix_s: now_unix_s(),
                logical_block_size: s.logical_block_size,
                // As a clone of one volume: QoS is set on the clone, not inherited.
                qos: None,
            };
            next.volumes.push(record.clone());
            switch.add_images.push(Image::of_volume(&record));
            switch
                .parents
                .push((record.family, record.layer, Some(s.layer)));
            members.push(GroupMember {
                volume: record.id,
                source: Some(s.volume),
            });
            names.push(name);
        }
        next.groups.push(GroupRecord {
            name: clone.to_string(),
            members,
            created_unix_s: now_unix_s(),
            origin: Some(snapshot.to_string()),
            snapshots: Vec::new(),
            // A clone group (dev, test) is not given the source's limits: set its own.
            qos: None,
        });
        self.apply(&mut meta, next, switch)?;
        tracing::info!(snapshot, clone, members = ?names, "clone group created");
        self.group_info_locked(&meta, clone)
    }

    /// Make every member of clone group `group` read as its counterpart in group snapshot
    /// `snapshot` (another snapshot of the group it was cloned from), in one commit and one
    /// switch. Connected clients of the members are cut off, as a volume refresh does.
    pub fn refresh_group(&self, group: &str, snapshot: &str) -> Result<GroupInfo, EngineError> {
        self.repoint_group(group, snapshot, false)
    }

    /// Discard every member's changes since one of the group's own group snapshots (`monday`
    /// or `GROUP@monday`), in one commit and one switch.
    pub fn rollback_group(&self, group: &str, snapshot: &str) -> Result<GroupInfo, EngineError> {
        self.repoint_group(group, snapshot, true)
    }

    /// The member volumes and snapshots `repoint_group` would cut off (for the caller's check
    /// of connected clients): the members' names.
    pub fn group_member_names(&self, group: &str) -> Result<Vec<String>, EngineError> {
        let meta = self.shared.meta.lock();
        let g = find_group(&meta.state, group)?;
        Ok(members(&meta.state, &g)
            .into_iter()
            .map(|v| v.name)
            .collect())
    }

    fn repoint_group(
        &self,
        group: &str,
        snapshot: &str,
        own: bool,
    ) -> Result<GroupInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let g = find_group(&meta.state, group)?;
        let full = if own && !snapshot.contains(crate::names::SNAPSHOT_SEPARATOR) {
            full_snapshot_name(&g, snapshot)
        } else {
            snapshot.to_string()
        };
        let (source_group, gs) = find_group_snapshot(&meta.state, &full)?;
        if own && source_group.name != g.name {
            return Err(EngineError::GroupConflict {
                group: group.to_string(),
                reason: format!(
                    "{full:?} is not one of its group snapshots: roll a group back to its own, or refresh a clone group to a snapshot of the group it was cloned from"
                ),
            });
        }
        let mut plan = Vec::new();
        for m in &g.members {
            let v = volume_by_id(&meta.state, m.volume)?;
            // A rollback's counterpart is the member itself; a refresh's the member it was
            // cloned from.
            let wanted = if own { Some(m.volume) } else { m.source };
            let target = wanted.and_then(|w| gs.members.iter().find(|(vol, _)| *vol == w));
            let Some((_, sid)) = target else {
                return Err(EngineError::GroupConflict {
                    group: group.to_string(),
                    reason: format!(
                        "member {:?} has no counterpart in {full:?}{}",
                        v.name,
                        if own {
                            " (it joined the group after that snapshot)"
                        } else {
                            ": refresh a clone group to a group snapshot of the group it was cloned from"
                        }
                    ),
                });
            };
            let s = meta
                .state
                .snapshots
                .iter()
                .find(|s| s.id == *sid && !s.hidden)
                .cloned()
                .ok_or_else(|| EngineError::UnknownSnapshot { name: full.clone() })?;
            self.check_depth(&v.name, s.family, s.layer, 1)?;
            plan.push((v, s));
        }
        let mut next = meta.state.clone();
        let mut switch = Switch::default();
        let mut families = Vec::new();
        for (v, s) in &plan {
            repoint_into(&mut next, &mut switch, v, s);
            families.push(v.family);
        }
        group_mut(&mut next, group).origin = Some(full.clone());
        families.sort_unstable_by_key(|f| f.0);
        families.dedup();
        self.apply_all(&mut meta, next, switch, &families)?;
        tracing::info!(group, snapshot = %full, rollback = own, "group repointed");
        self.group_info_locked(&meta, group)
    }

    /// [`Engine::apply`] after collecting the hidden snapshots of every family touched (and
    /// finishing those with nothing left: at most one per call can go, which the callers'
    /// deletes respect by deleting whole families only through `delete_volume`).
    fn apply_all(
        &self,
        meta: &mut ClusterStore,
        mut next: ClusterState,
        mut switch: Switch,
        families: &[crate::units::FamilyId],
    ) -> Result<u64, EngineError> {
        for f in families {
            collect_hidden(&mut next, *f, &mut switch);
        }
        let mut emptied = Vec::new();
        for f in families {
            let before = switch.delete_family;
            finish_family(&mut next, *f, &mut switch);
            if switch.delete_family != before {
                emptied.push(*f);
            }
        }
        if emptied.len() > 1 {
            // `Switch` removes one family per commit: apply the others' removal separately,
            // after this commit (their volumes and snapshots are already gone from `next`).
            switch.delete_family = Some(emptied[0]);
            let held = self.apply(meta, next, switch)?;
            for f in &emptied[1..] {
                let mut again = meta.state.clone();
                let mut rest = Switch::default();
                finish_family(&mut again, *f, &mut rest);
                self.apply(meta, again, rest)?;
            }
            return Ok(held);
        }
        self.apply(meta, next, switch)
    }
}

/// The member records of a group, in its order.
fn members(state: &ClusterState, g: &GroupRecord) -> Vec<VolumeRecord> {
    g.members
        .iter()
        .filter_map(|m| state.volumes.iter().find(|v| v.id == m.volume).cloned())
        .collect()
}

/// The visible member snapshots of a group snapshot.
fn member_snapshots(state: &ClusterState, gs: &GroupSnapshotRecord) -> Vec<SnapshotRecord> {
    gs.members
        .iter()
        .filter_map(|(_, sid)| {
            state
                .snapshots
                .iter()
                .find(|s| s.id == *sid && !s.hidden)
                .cloned()
        })
        .collect()
}

/// (source member's name, its snapshot) for every member of a group snapshot. A member
/// volume deleted since is named by its snapshot's volume part.
fn snapshot_members(
    state: &ClusterState,
    gs: &GroupSnapshotRecord,
) -> Result<Vec<(String, SnapshotRecord)>, EngineError> {
    member_snapshots(state, gs)
        .into_iter()
        .map(|s| {
            let source = state
                .volumes
                .iter()
                .find(|v| v.id == s.volume)
                .map(|v| v.name.clone())
                .unwrap_or_else(|| {
                    s.name
                        .split_once(crate::names::SNAPSHOT_SEPARATOR)
                        .map_or(s.name.clone(), |(v, _)| v.to_string())
                });
            Ok((source, s))
        })
        .collect()
}

/// Hide a snapshot in `next` and stop serving it (the caller collects hidden layers).
fn hide_snapshot(next: &mut ClusterState, switch: &mut Switch, s: &SnapshotRecord) {
    for r in &mut next.snapshots {
        if r.id == s.id {
            r.hidden = true;
        }
    }
    switch.remove_images.push(s.name.clone());
}

/// New members for group `group` from volume names: each must exist in this shard's catalog,
/// be in no group, and not be named twice.
fn new_members(
    meta: &ClusterStore,
    group: &str,
    volumes: &[String],
    existing: &[GroupMember],
) -> Result<Vec<GroupMember>, EngineError> {
    let state = &meta.state;
    let mut out: Vec<GroupMember> = Vec::new();
    for name in volumes {
        let v = match find_volume(state, name) {
            Ok(v) => v,
            Err(e) => return Err(other_shard(meta, group, name).unwrap_or(e)),
        };
        if existing.iter().chain(&out).any(|m| m.volume == v.id) {
            return Err(EngineError::GroupConflict {
                group: group.to_string(),
                reason: format!("volume {name:?} is a member already"),
            });
        }
        if let Some(other) = group_of(state, v.id) {
            return Err(EngineError::GroupConflict {
                group: group.to_string(),
                reason: format!(
                    "volume {name:?} is a member of group {:?}: a volume is in one group at most (weft group remove {} {name})",
                    other.name, other.name
                ),
            });
        }
        out.push(GroupMember {
            volume: v.id,
            source: None,
        });
    }
    Ok(out)
}

/// The refusal for a volume this catalog lacks but another shard holds.
fn other_shard(meta: &ClusterStore, group: &str, name: &str) -> Option<EngineError> {
    let shard = crate::name_claims::shard_of(meta.kv(), name).ok()??;
    (shard != meta.shard()).then(|| EngineError::GroupConflict {
        group: group.to_string(),
        reason: format!(
            "volume {name:?} is in shard {shard}, the group in shard {}: the members of a group must be in one shard for now (one journal gives them one point; docs/ARCHITECTURE.md, \"Consistency groups\")",
            meta.shard()
        ),
    })
}

impl Engine {
    /// Whether this shard's catalog has group `name` (the API routes by it).
    pub fn has_group(&self, name: &str) -> bool {
        let meta = self.shared.meta.lock();
        meta.state.groups.iter().any(|g| g.name == name)
    }
}

pub(super) fn find_group(state: &ClusterState, name: &str) -> Result<GroupRecord, EngineError> {
    state
        .groups
        .iter()
        .find(|g| g.name == name)
        .cloned()
        .ok_or_else(|| EngineError::UnknownGroup {
            name: name.to_string(),
        })
}

fn group_mut<'a>(state: &'a mut ClusterState, name: &str) -> &'a mut GroupRecord {
    state
        .groups
        .iter_mut()
        .find(|g| g.name == name)
        .expect("the group was found under the same lock")
}

fn find_group_snapshot(
    state: &ClusterState,
    name: &str,
) -> Result<(GroupRecord, GroupSnapshotRecord), EngineError> {
    let (group, short) = split_group_snapshot(name)?;
    let g = find_group(state, group)?;
    let gs = g
        .snapshot(short)
        .cloned()
        .ok_or_else(|| EngineError::UnknownSnapshot {
            name: name.to_string(),
        })?;
    Ok((g, gs))
}

fn volume_by_id(
    state: &ClusterState,
    id: crate::units::VolumeId,
) -> Result<VolumeRecord, EngineError> {
    state
        .volumes
        .iter()
        .find(|v| v.id == id)
        .cloned()
        .ok_or(EngineError::Gone)
}

/// A member volume goes only after it leaves its group (or with the group).
pub(super) fn check_not_member(state: &ClusterState, v: &VolumeRecord) -> Result<(), EngineError> {
    match group_of(state, v.id) {
        Some(g) => Err(EngineError::GroupConflict {
            group: g.name.clone(),
            reason: format!(
                "volume {:?} is a member: take it out first (weft group remove {} {}), or delete the group with its volumes (weft group delete {} --volumes)",
                v.name, g.name, v.name, g.name
            ),
        }),
        None => Ok(()),
    }
}

/// A member snapshot of a group snapshot goes only with the group snapshot.
pub(super) fn check_not_group_snapshot_member(
    state: &ClusterState,
    s: &SnapshotRecord,
) -> Result<(), EngineError> {
    match group_snapshot_of(state, s.id) {
        Some((group, short)) => Err(EngineError::GroupConflict {
            group: group.to_string(),
            reason: format!(
                "snapshot {:?} is part of group snapshot {group}@{short}: delete that one (weft snapshot delete {group}@{short})",
                s.name
            ),
        }),
        None => Ok(()),
    }
}
