//! Renaming a volume: one commit of the cluster state that moves every name that carries the
//! volume's, so nothing is left pointing at the old one:
//!
//! - the volume record itself (its id, family and layers do not change: no data moves);
//! - its snapshots `OLD@x` become `NEW@x`, as zfs renames a dataset's snapshots with it
//!   (snapshots made before `VOLUME@SNAPSHOT` names keep their plain names);
//! - clones that name one of those snapshots as their origin name the new one;
//! - host LUN maps of the volume and of its snapshots keep their LUN numbers under the new
//!   names, so a host keeps seeing the same LUNs;
//! - snapshot schedules of the volume follow it.
//!
//! The images of the renamed exports are served under the new names with new keys: clients
//! that had them open are disconnected and must reconnect by the new name (the API refuses
//! while there are any, unless forced). Export names are the key of everything the front ends
//! keep, so renaming under a live client is not attempted.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::images::Image;
use crate::metastore::ClusterState;
use crate::names::{check_free, check_name, SNAPSHOT_SEPARATOR};

use super::{find_volume, Switch, VolumeInfo};

/// What a rename changed, for the caller (the API moves per-export records it keeps).
#[derive(Debug, Clone, PartialEq)]
pub struct Renamed {
    pub volume: VolumeInfo,
    /// (old, new) export names: the volume first, then its visible snapshots.
    pub exports: Vec<(String, String)>,
}

impl Engine {
    /// Rename volume `old` to `new` (see the module doc). Refused when `new` is not a valid
    /// name or is taken by a volume or a legacy snapshot's export name, or when one of the
    /// snapshots' new names is taken.
    pub fn rename_volume(&self, old: &str, new: &str) -> Result<Renamed, EngineError> {
        check_name(new)?;
        let mut meta = self.shared.meta.lock();
        let record = find_volume(&meta.state, old)?;
        if old == new {
            return Err(EngineError::VolumeExists {
                name: new.to_string(),
            });
        }
        check_free(&meta.state, new)?;
        let mut next = meta.state.clone();
        let exports = rename_in(&mut next, record.id, old, new)?;
        let mut switch = Switch::default();
        for (from, to) in &exports {
            switch.remove_images.push(from.clone());
            if let Some(v) = next.volumes.iter().find(|v| &v.name == to) {
                switch.add_images.push(Image::of_volume(v));
            } else if let Some(s) = next.snapshots.iter().find(|s| &s.name == to && !s.hidden) {
                switch.add_images.push(Image::of_snapshot(s));
            }
        }
        self.apply(&mut meta, next, switch)?;
        // Host LUN maps name exports: the front ends rebuild their tables.
        self.hosts_changed();
        tracing::info!(volume = old, new_name = new, "volume renamed");
        Ok(Renamed {
            volume: self.volume_info_locked(&meta, new)?,
            exports,
        })
    }
}

/// Rename volume `id` from `old` to `new` in `next`, with everything that names it; returns
/// the (old, new) names of the exports that moved (the volume, then its visible snapshots).
fn rename_in(
    next: &mut ClusterState,
    id: crate::units::VolumeId,
    old: &str,
    new: &str,
) -> Result<Vec<(String, String)>, EngineError> {
    let prefix = format!("{old}{SNAPSHOT_SEPARATOR}");
    let mut exports = vec![(old.to_string(), new.to_string())];
    let mut snapshot_names: Vec<(String, String)> = Vec::new();
    for s in next.snapshots.iter().filter(|s| s.volume == id) {
        if let Some(short) = s.name.strip_prefix(&prefix) {
            let to = format!("{new}{SNAPSHOT_SEPARATOR}{short}");
            if !s.hidden && next.snapshots.iter().any(|o| o.name == to && !o.hidden) {
                return Err(EngineError::SnapshotExists { name: to });
            }
            snapshot_names.push((s.name.clone(), to));
        }
    }
    for v in &mut next.volumes {
        if v.id == id {
            v.name = new.to_string();
        }
    }
    for s in &mut next.snapshots {
        if s.volume != id {
            continue;
        }
        if let Some((_, to)) = snapshot_names.iter().find(|(from, _)| *from == s.name) {
            if !s.hidden {
                exports.push((s.name.clone(), to.clone()));
            }
            s.name = to.clone();
        }
    }
    let renamed = |name: &str| -> Option<String> {
        exports
            .iter()
            .find(|(from, _)| from == name)
            .map(|(_, to)| to.clone())
    };
    for v in &mut next.volumes {
        if let Some(to) = v.origin.as_deref().and_then(|o| {
            snapshot_names
                .iter()
                .find(|(from, _)| from == o)
                .map(|(_, to)| to.clone())
        }) {
            v.origin = Some(to);
        }
    }
    for h in &mut next.hosts {
        for m in &mut h.luns {
            if let Some(to) = renamed(&m.export) {
                m.export = to;
            }
        }
    }
    for s in &mut next.snapshot_schedules {
        if s.volume == old {
            s.volume = new.to_string();
        }
    }
    Ok(exports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_records::{HostRecord, LunMapping};
    use crate::metastore::{SnapshotRecord, VolumeRecord};
    use crate::units::{FamilyId, LayerId, LogicalBlockSize, VolumeId};

    fn volume(id: u64, name: &str, origin: Option<&str>) -> VolumeRecord {
        VolumeRecord {
            id: VolumeId(id),
            name: name.into(),
            size_bytes: 1 << 20,
            family: FamilyId(1),
            layer: LayerId(id),
            base: None,
            origin: origin.map(Into::into),
            created_unix_s: 0,
            logical_block_size: LogicalBlockSize::default(),
            qos: None,
        }
    }

    fn snapshot(id: u64, name: &str, of: u64, hidden: bool) -> SnapshotRecord {
        SnapshotRecord {
            id: VolumeId(id),
            name: name.into(),
            family: FamilyId(1),
            volume: VolumeId(of),
            layer: LayerId(id),
            parent: None,
            size_bytes: 1 << 20,
            created_unix_s: 0,
            hidden,
            logical_block_size: LogicalBlockSize::default(),
        }
    }

    #[test]
    fn rename_moves_snapshots_clone_origins_and_lun_maps() {
        let mut state = ClusterState {
            volumes: vec![volume(1, "pg", None), volume(3, "dev", Some("pg@mon"))],
            snapshots: vec![
                snapshot(2, "pg@mon", 1, false),
                snapshot(4, "pg@old", 1, true),
                snapshot(5, "legacy", 1, false),
                snapshot(6, "pgx@mon", 9, false),
            ],
            hosts: vec![HostRecord {
                name: "db1".into(),
                iqns: vec![],
                nbd_addresses: vec![],
                tls_names: vec![],
                chap: None,
                luns: vec![
                    LunMapping {
                        lun: 0,
                        export: "pg".into(),
                    },
                    LunMapping {
                        lun: 1,
                        export: "pg@mon".into(),
                    },
                    LunMapping {
                        lun: 2,
                        export: "dev".into(),
                    },
                ],
                created_unix_s: 0,
                holder: false,
            }],
            ..ClusterState::default()
        };
        let exports = rename_in(&mut state, VolumeId(1), "pg", "pg2").unwrap();
        assert_eq!(
            exports,
            [
                ("pg".into(), "pg2".into()),
                ("pg@mon".into(), "pg2@mon".into())
            ]
        );
        let names: Vec<&str> = state.snapshots.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["pg2@mon", "pg2@old", "legacy", "pgx@mon"]);
        assert_eq!(state.volumes[0].name, "pg2");
        assert_eq!(state.volumes[1].origin.as_deref(), Some("pg2@mon"));
        let luns: Vec<(u64, &str)> = state.hosts[0]
            .luns
            .iter()
            .map(|m| (m.lun, m.export.as_str()))
            .collect();
        assert_eq!(luns, [(0, "pg2"), (1, "pg2@mon"), (2, "dev")]);
    }

    #[test]
    fn rename_is_refused_when_a_snapshot_name_is_taken() {
        let mut state = ClusterState {
            volumes: vec![volume(1, "pg", None)],
            snapshots: vec![
                snapshot(2, "pg@mon", 1, false),
                // A snapshot of a deleted volume once named pg2, still visible.
                snapshot(3, "pg2@mon", 7, false),
            ],
            ..ClusterState::default()
        };
        let before = state.clone();
        let e = rename_in(&mut state.clone(), VolumeId(1), "pg", "pg2").unwrap_err();
        assert!(matches!(e, EngineError::SnapshotExists { ref name } if name == "pg2@mon"));
        assert_eq!(state, before);
        state.snapshots[1].hidden = true;
        rename_in(&mut state, VolumeId(1), "pg", "pg2").unwrap();
    }
}
