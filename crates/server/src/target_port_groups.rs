//! The ALUA target port groups of the iSCSI LUs: one group per c.node, each holding that
//! c.node's portals (relative target ports), with the access state each LU has through it.
//! The volume's owner c.node is active/optimized, the others active/non-optimized, and both
//! ends of a handover transitioning until it is done.
//!
//! [`TargetPortGroups`] is the shared handle: the server makes it with its own group
//! ([`TargetPortGroups::single`], today's one-c.node answer: one group, active/optimized), and
//! a cluster layer feeds it the c.nodes ([`TargetPortGroups::set_cnodes`]) and who owns each
//! export ([`TargetPortGroups::set_owner`]). Each LU reads it through
//! [`TargetPortGroups::for_export`], the `weft_scsi::AluaProvider` of that export, whose
//! generation moves only when that export's states change (so only its nexuses get
//! ASYMMETRIC ACCESS STATE CHANGED).
//!
//! Group ids and relative target port ids must be unique across the cluster (SPC-4: within
//! the SCSI target device); choosing them is the cluster layer's job.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use weft_scsi::{AccessState, AluaProvider, PortGroup, PortGroups};

/// One c.node's target port group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnodeGroup {
    /// The c.node's id in the cluster.
    pub cnode: String,
    /// Its target port group id.
    pub group_id: u16,
    /// The relative target port ids of its portals.
    pub relative_ports: Vec<u16>,
}

/// Which c.node serves an export with priority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// This c.node owns it: active/optimized there, active/non-optimized elsewhere.
    Owner(String),
    /// Moving from one c.node to another: both transitioning, the rest active/non-optimized.
    Handover { from: String, to: String },
    /// Nobody now (its shard's owner lost its lease, the successor has not taken over):
    /// every group transitioning.
    Nobody,
}

/// The target port groups every LU of this server is reached through, and who owns each.
#[derive(Debug)]
pub struct TargetPortGroups {
    layout: RwLock<Layout>,
    /// Moves on every change of `layout`.
    generation: AtomicU64,
}

/// Who owns the exports `set_owner` did not name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterOwner {
    /// This c.node (a server on its own).
    Local,
    /// That c.node.
    Cnode(String),
    /// Nobody now (the last owner's lease expired, its successor has not taken over):
    /// every group is transitioning.
    Nobody,
}

#[derive(Debug)]
struct Layout {
    /// This c.node's id.
    local: String,
    /// The owner of every export `owners` does not name.
    default_owner: ClusterOwner,
    cnodes: Vec<CnodeGroup>,
    owners: HashMap<String, Ownership>,
    implicit_transition_time_secs: u8,
}

impl TargetPortGroups {
    /// A c.node on its own: one group, `group_id`, holding its `relative_ports`, owner of
    /// everything (every LU active/optimized).
    pub fn single(local: &str, group_id: u16, relative_ports: Vec<u16>) -> Arc<TargetPortGroups> {
        Arc::new(TargetPortGroups {
            layout: RwLock::new(Layout {
                local: local.to_string(),
                cnodes: vec![CnodeGroup {
                    cnode: local.to_string(),
                    group_id,
                    relative_ports,
                }],
                owners: HashMap::new(),
                default_owner: ClusterOwner::Local,
                implicit_transition_time_secs: 0,
            }),
            generation: AtomicU64::new(0),
        })
    }

    /// The c.nodes serving the LUs and their groups (this one among them).
    pub fn set_cnodes(&self, cnodes: Vec<CnodeGroup>) {
        self.change(|layout| layout.cnodes = cnodes);
    }

    /// Who owns the exports [`TargetPortGroups::set_owner`] did not name; no change (no unit
    /// attention) when it is the same.
    pub fn set_cluster_owner(&self, owner: ClusterOwner) {
        if self.layout.read().default_owner != owner {
            self.change(|layout| layout.default_owner = owner);
        }
    }

    /// The c.nodes now (this one among them).
    pub fn cnodes(&self) -> Vec<CnodeGroup> {
        self.layout.read().cnodes.clone()
    }

    /// Who owns `export` now.
    pub fn set_owner(&self, export: &str, ownership: Ownership) {
        self.change(|layout| {
            layout.owners.insert(export.to_string(), ownership);
        });
    }

    /// Who owns each export named in `owners`, replacing what was set before (exports not
    /// named follow the cluster owner); no change (no unit attention) when it is the same.
    pub fn set_owners(&self, owners: HashMap<String, Ownership>) {
        if self.layout.read().owners != owners {
            self.change(|layout| layout.owners = owners);
        }
    }

    /// The IMPLICIT TRANSITION TIME reported: how long a handover may take, in seconds.
    pub fn set_implicit_transition_time(&self, secs: u8) {
        self.change(|layout| layout.implicit_transition_time_secs = secs);
    }

    /// This c.node's group: its id and relative target ports.
    pub fn local_group(&self) -> Option<CnodeGroup> {
        let layout = self.layout.read();
        layout
            .cnodes
            .iter()
            .find(|c| c.cnode == layout.local)
            .cloned()
    }

    /// The ALUA provider of `export`'s LU.
    pub fn for_export(self: &Arc<Self>, export: &str) -> Arc<dyn AluaProvider> {
        let groups = self.groups_of(export);
        Arc::new(ExportGroups {
            handle: Arc::clone(self),
            export: export.to_string(),
            seen: AtomicU64::new(self.generation.load(Ordering::Acquire)),
            generation: AtomicU64::new(0),
            groups: RwLock::new(groups),
            refresh: Mutex::new(()),
        })
    }

    fn change(&self, apply: impl FnOnce(&mut Layout)) {
        let mut layout = self.layout.write();
        apply(&mut layout);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// `export`'s groups and states now.
    fn groups_of(&self, export: &str) -> PortGroups {
        let layout = self.layout.read();
        let ownership = layout.owners.get(export);
        let groups = layout
            .cnodes
            .iter()
            .map(|c| PortGroup {
                id: c.group_id,
                state: state_of(&c.cnode, ownership, &layout.default_owner, &layout.local),
                ports: c.relative_ports.clone(),
            })
            .collect();
        PortGroups {
            groups,
            implicit_transition_time_secs: layout.implicit_transition_time_secs,
        }
    }
}

/// The state of `cnode`'s group for an export owned so (by `default` when unnamed).
fn state_of(
    cnode: &str,
    ownership: Option<&Ownership>,
    default: &ClusterOwner,
    local: &str,
) -> AccessState {
    match (ownership, default) {
        (None, ClusterOwner::Local) if cnode == local => AccessState::ActiveOptimized,
        (None, ClusterOwner::Cnode(owner)) if owner == cnode => AccessState::ActiveOptimized,
        (None, ClusterOwner::Nobody) => AccessState::Transitioning,
        (None, _) => AccessState::ActiveNonOptimized,
        (Some(ownership), _) => match ownership {
            Ownership::Owner(owner) if owner == cnode => AccessState::ActiveOptimized,
            Ownership::Handover { from, to } if from == cnode || to == cnode => {
                AccessState::Transitioning
            }
            Ownership::Nobody => AccessState::Transitioning,
            _ => AccessState::ActiveNonOptimized,
        },
    }
}

/// One export's view of the handle: its groups as last computed, and a generation that
/// moves when they change.
#[derive(Debug)]
struct ExportGroups {
    handle: Arc<TargetPortGroups>,
    export: String,
    /// The handle's generation `groups` was computed at.
    seen: AtomicU64,
    generation: AtomicU64,
    groups: RwLock<PortGroups>,
    /// Held while recomputing, so one change counts once.
    refresh: Mutex<()>,
}

impl ExportGroups {
    /// Recompute `groups` if the handle changed since; one atomic load when it did not.
    fn refresh(&self) {
        let current = self.handle.generation.load(Ordering::Acquire);
        if current == self.seen.load(Ordering::Acquire) {
            return;
        }
        let _one = self.refresh.lock();
        if current == self.seen.load(Ordering::Acquire) {
            return;
        }
        let groups = self.handle.groups_of(&self.export);
        let mut cached = self.groups.write();
        if *cached != groups {
            *cached = groups;
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        self.seen.store(current, Ordering::Release);
    }
}

impl AluaProvider for ExportGroups {
    fn generation(&self) -> u64 {
        self.refresh();
        self.generation.load(Ordering::Acquire)
    }

    fn port_groups(&self) -> PortGroups {
        self.refresh();
        self.groups.read().clone()
    }

    fn access_state(&self, relative_target_port: u16) -> AccessState {
        self.refresh();
        self.groups
            .read()
            .group_of(relative_target_port)
            .map_or(AccessState::ActiveOptimized, |g| g.state)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Arc<TargetPortGroups> {
        let handle = TargetPortGroups::single("c1", 1, vec![1, 2]);
        handle.set_cnodes(vec![
            CnodeGroup {
                cnode: "c1".into(),
                group_id: 1,
                relative_ports: vec![1, 2],
            },
            CnodeGroup {
                cnode: "c2".into(),
                group_id: 2,
                relative_ports: vec![257],
            },
            CnodeGroup {
                cnode: "c3".into(),
                group_id: 3,
                relative_ports: vec![513],
            },
        ]);
        handle
    }

    fn states(p: &dyn AluaProvider) -> Vec<(u16, AccessState)> {
        p.port_groups()
            .groups
            .iter()
            .map(|g| (g.id, g.state))
            .collect()
    }

    #[test]
    fn a_single_cnode_answers_one_optimized_group() {
        let handle = TargetPortGroups::single("c1", 1, vec![1, 2]);
        let p = handle.for_export("vol0");
        assert_eq!(
            p.port_groups(),
            PortGroups::single(1, vec![1, 2]),
            "what REPORT TARGET PORT GROUPS answered before ALUA had a provider"
        );
        assert_eq!(p.access_state(2), AccessState::ActiveOptimized);
        assert_eq!(
            handle.local_group().map(|g| g.relative_ports),
            Some(vec![1, 2])
        );
    }

    #[test]
    fn the_owner_is_optimized_and_a_handover_transitions_both_ends() {
        use AccessState::*;
        let handle = three();
        let p = handle.for_export("vol0");
        let other = handle.for_export("vol1");
        assert_eq!(
            states(&*p),
            vec![
                (1, ActiveOptimized),
                (2, ActiveNonOptimized),
                (3, ActiveNonOptimized)
            ]
        );
        let (g0, g1) = (p.generation(), other.generation());
        handle.set_owner(
            "vol0",
            Ownership::Handover {
                from: "c1".into(),
                to: "c2".into(),
            },
        );
        assert_eq!(
            states(&*p),
            vec![
                (1, Transitioning),
                (2, Transitioning),
                (3, ActiveNonOptimized)
            ]
        );
        assert_eq!(p.access_state(257), Transitioning);
        assert_ne!(p.generation(), g0, "vol0's states changed");
        assert_eq!(
            other.generation(),
            g1,
            "vol1's did not: no unit attention there"
        );
        let g0 = p.generation();
        handle.set_owner("vol0", Ownership::Owner("c2".into()));
        assert_eq!(
            states(&*p),
            vec![
                (1, ActiveNonOptimized),
                (2, ActiveOptimized),
                (3, ActiveNonOptimized)
            ]
        );
        assert_ne!(p.generation(), g0);
        let g0 = p.generation();
        handle.set_owner("vol0", Ownership::Owner("c2".into()));
        assert_eq!(p.generation(), g0, "the same states again are no change");
    }

    #[test]
    fn the_cluster_owner_is_optimized_and_nobody_means_every_group_transitions() {
        use AccessState::*;
        let handle = three();
        let p = handle.for_export("vol0");
        handle.set_cluster_owner(ClusterOwner::Cnode("c3".into()));
        assert_eq!(
            states(&*p),
            vec![
                (1, ActiveNonOptimized),
                (2, ActiveNonOptimized),
                (3, ActiveOptimized)
            ]
        );
        let g = p.generation();
        handle.set_cluster_owner(ClusterOwner::Nobody);
        assert_eq!(
            states(&*p),
            vec![(1, Transitioning), (2, Transitioning), (3, Transitioning)]
        );
        assert_ne!(p.generation(), g, "a unit attention on the change");
        let g = p.generation();
        handle.set_cluster_owner(ClusterOwner::Nobody);
        assert_eq!(p.generation(), g, "the same owner again is no change");
    }
}
