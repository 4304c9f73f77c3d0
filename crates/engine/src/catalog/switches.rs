//! The catalog changes a snapshot and a repoint (refresh, rollback) make, recorded in the next
//! cluster state and in a [`Switch`], so that a single volume's operation and a consistency
//! group's (several volumes in one commit and one switch: `groups`) share them.

use super::{alloc_image_id, alloc_layer, now_unix_s, Switch};
use crate::images::Image;
use crate::layers::LayerOp;
use crate::metastore::{ClusterState, PendingLayerOp, SnapshotRecord, VolumeRecord};

/// Record a snapshot `name` of volume `v` in `next` and the switch that cuts it: the volume's
/// top freezes as the snapshot's layer and a new empty top goes on it. Applied with other
/// volumes' in one `apply`, all of them switch under one hold of the journal lock: one point.
pub(super) fn snapshot_into(
    next: &mut ClusterState,
    switch: &mut Switch,
    v: &VolumeRecord,
    name: &str,
) -> SnapshotRecord {
    let snapshot = SnapshotRecord {
        id: alloc_image_id(next),
        name: name.to_string(),
        family: v.family,
        volume: v.id,
        layer: v.layer,
        parent: v.base,
        size_bytes: v.size_bytes,
        created_unix_s: now_unix_s(),
        hidden: false,
        logical_block_size: v.logical_block_size,
    };
    let top = alloc_layer(next);
    for r in &mut next.volumes {
        if r.id == v.id {
            r.layer = top;
            r.base = Some(snapshot.layer);
        }
    }
    next.snapshots.push(snapshot.clone());
    switch.add_images.push(Image::of_snapshot(&snapshot));
    switch.retarget.push((v.name.clone(), top));
    switch.parents.push((v.family, top, Some(snapshot.layer)));
    snapshot
}

/// Record in `next` that volume `v` now reads as snapshot `s` (refresh, rollback), and the
/// switch: a new top on `s`, the old top dropped, clients cut off.
pub(super) fn repoint_into(
    next: &mut ClusterState,
    switch: &mut Switch,
    v: &VolumeRecord,
    s: &SnapshotRecord,
) {
    let top = alloc_layer(next);
    let mut record = v.clone();
    record.layer = top;
    record.base = Some(s.layer);
    record.origin = Some(s.name.clone());
    record.size_bytes = s.size_bytes;
    // The same within a family today; the volume reads as the snapshot in every respect.
    record.logical_block_size = s.logical_block_size;
    for r in &mut next.volumes {
        if r.id == v.id {
            *r = record.clone();
        }
    }
    switch.remove_images.push(v.name.clone());
    switch.add_images.push(Image::of_volume(&record));
    switch.parents.push((v.family, top, Some(s.layer)));
    switch.ops.push(PendingLayerOp {
        family: v.family,
        op: LayerOp::Drop { layer: v.layer },
    });
}
