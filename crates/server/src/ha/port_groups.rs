//! ALUA across c.nodes: each c.node of a cluster is one target port group, holding its iSCSI
//! portals. Its group id is its own for life (allocated once from etcd, kept in its data dir);
//! its portals' relative target ports are `group id × 256 + 1, + 2, ...`, so both are unique
//! in the cluster. A thread on every c.node reads the registrations and the ownership record
//! and tells the LUs ([`TargetPortGroups`]): the owner's group active/optimized, the others
//! active/non-optimized (they forward), every group transitioning while nobody owns the
//! cluster. Every c.node serves every shard's LUs (`forward::shards`), so every registered
//! c.node is a group of every LU, and an LU of another shard is active/optimized on that
//! shard's owner. A change reaches each nexus as ASYMMETRIC ACCESS STATE CHANGED.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use weft_meta::MetaStore;

use crate::ha::ownership::Ownership;
use crate::target_port_groups::{self, ClusterOwner, CnodeGroup, TargetPortGroups};

/// The owners of the exports of other shards than the c.node's own (see
/// `forward::shards::ShardRouter::foreign_owners`).
pub type ForeignOwners =
    Arc<dyn Fn() -> HashMap<String, target_port_groups::Ownership> + Send + Sync>;

/// The file in a c.node's data dir holding its target port group id.
pub const PORT_GROUP_FILE: &str = "port-group";
/// The last group id handed out.
const PORT_GROUP_COUNTER_KEY: &str = "weft/cnode/port-group-last";
const FOLLOW_INTERVAL: Duration = Duration::from_millis(500);

/// This c.node's group: its id (allocated at first start) and one relative port per portal.
pub fn local_group(
    kv: &dyn MetaStore,
    data_dir: &Path,
    cnode: &str,
    portals: usize,
) -> anyhow::Result<CnodeGroup> {
    let path = data_dir.join(PORT_GROUP_FILE);
    let group_id: u16 = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse()
            .with_context(|| format!("{} does not hold a number", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let (id, _) =
                weft_meta::update_json(kv, PORT_GROUP_COUNTER_KEY, |last: Option<u16>| {
                    Ok::<_, weft_meta::MetaError>(last.unwrap_or(0) + 1)
                })
                .context("allocating this c.node's ALUA target port group")?;
            anyhow::ensure!(
                id <= 255,
                "the cluster has handed out 255 ALUA target port groups: none is left for a new c.node"
            );
            crate::data_files::write_atomically(
                data_dir,
                PORT_GROUP_FILE,
                id.to_string().as_bytes(),
            )?;
            id
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let relative_ports = (1..=portals).map(|i| group_id * 256 + i as u16).collect();
    Ok(CnodeGroup {
        cnode: cnode.to_string(),
        group_id,
        relative_ports,
    })
}

/// The target port groups of a c.node of a cluster, kept up to date by a thread until
/// `stop` is cancelled. The first reading is made before it returns.
pub fn follow(
    kv: Arc<dyn MetaStore>,
    shard: weft_engine::ShardId,
    local: CnodeGroup,
    foreign: ForeignOwners,
    lease_ttl: Duration,
    stop: tokio_util::sync::CancellationToken,
) -> Arc<TargetPortGroups> {
    let handle =
        TargetPortGroups::single(&local.cnode, local.group_id, local.relative_ports.clone());
    // A takeover takes the lease's time to live and the successor's recovery.
    let transition = (lease_ttl * 2 + Duration::from_secs(10)).as_secs().min(255) as u8;
    handle.set_implicit_transition_time(transition);
    update(&*kv, shard, &handle, &local, &foreign);
    let h = Arc::clone(&handle);
    let _ = std::thread::Builder::new()
        .name("weft-port-groups".into())
        .spawn(move || {
            while !stop.is_cancelled() {
                std::thread::sleep(FOLLOW_INTERVAL);
                update(&*kv, shard, &h, &local, &foreign);
            }
        });
    handle
}

/// One reading: the groups of the registered c.nodes, the owner of this c.node's shard, and
/// those of the other shards' exports. An unreachable etcd changes nothing.
fn update(
    kv: &dyn MetaStore,
    shard: weft_engine::ShardId,
    handle: &TargetPortGroups,
    local: &CnodeGroup,
    foreign: &ForeignOwners,
) {
    let (Ok(registered), Ok(owner)) = (crate::ha::registry::list(kv), Ownership::owner(kv, shard))
    else {
        return;
    };
    // Every c.node presents every shard's LUs: each one's portals are paths to them.
    let mut groups: Vec<CnodeGroup> = registered
        .into_iter()
        .filter(|r| r.id != local.cnode)
        .filter_map(|r| {
            Some(CnodeGroup {
                group_id: r.port_group?,
                cnode: r.id,
                relative_ports: r.relative_ports,
            })
        })
        .chain(std::iter::once(local.clone()))
        .collect();
    groups.sort_by_key(|g| g.group_id);
    if handle.cnodes() != groups {
        handle.set_cnodes(groups);
    }
    handle.set_cluster_owner(match owner {
        Some(o) => ClusterOwner::Cnode(o.id),
        None => ClusterOwner::Nobody,
    });
    handle.set_owners(foreign());
}
