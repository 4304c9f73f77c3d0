//! What the cluster keeps in the metadata store, and under which keys. JSON values, so an
//! operator can read them with `etcdctl get --prefix weft/`.
//!
//! | key | value |
//! | --- | --- |
//! | `weft/dnodes/<id>` | [`DnodeRecord`], attached to the d.node's lease: gone = down |
//! | `weft/dnode-admin/<id>` | [`DnodeAdmin`]: marked out (or back in) by an operator |
//! | `weft/pools/<name>` | [`PoolRecord`] |
//! | `weft/pgmaps/<pool>` | [`PgMap`]: each placement group's ordered d.nodes, with an epoch |
//! | `weft/cluster/state` | the engine's cluster state (volumes, snapshots, checkpoints) |

use serde::{Deserialize, Serialize};

pub const DNODES_PREFIX: &str = "weft/dnodes/";
pub const DNODE_ADMIN_PREFIX: &str = "weft/dnode-admin/";
pub const POOLS_PREFIX: &str = "weft/pools/";
pub const PGMAPS_PREFIX: &str = "weft/pgmaps/";

/// A d.node as it registers itself (only the fields the c.node uses; others are ignored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnodeRecord {
    pub id: String,
    pub addr: String,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub disks: Vec<DiskRecord>,
    /// Its storage tier (`weft dnode --tier`; empty: none said). A pool with a tier is placed
    /// only on d.nodes of that tier once any d.node says one (`super::pool_tiers`).
    #[serde(default)]
    pub tier: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    #[serde(default)]
    pub path: String,
    #[serde(default)]
    pub capacity_bytes: u64,
    #[serde(default)]
    pub used_bytes: u64,
    #[serde(default)]
    pub chunks: u64,
    /// The d.node's configured capacity alone (`None`: until the file system is full).
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// The file system under the disk (`<machine id>:<device>`; empty from a d.node that
    /// does not say): disks on one file system share its free space.
    #[serde(default)]
    pub fs_id: String,
    #[serde(default)]
    pub fs_size_bytes: u64,
    #[serde(default)]
    pub fs_free_bytes: u64,
}

impl DnodeRecord {
    pub fn capacity_bytes(&self) -> u64 {
        self.disks.iter().map(|d| d.capacity_bytes).sum()
    }

    pub fn used_bytes(&self) -> u64 {
        self.disks.iter().map(|d| d.used_bytes).sum()
    }
}

/// An operator's decision about a d.node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnodeAdmin {
    /// Out: its placement-group positions move to other d.nodes and its chunks are rebuilt.
    pub out: bool,
}

/// A pool: a redundancy and a number of placement groups.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PoolRecord {
    pub name: String,
    /// `none`, `x3`, `4+2`, ...
    pub redundancy: String,
    pub pg_count: u32,
    /// Chunks that must be durable before a stripe is (Ceph's `min_size`); `None`: the
    /// redundancy's minimum, min(k+1, k+m). Raising it trades write availability for safety.
    #[serde(default)]
    pub min_size: Option<u8>,
    /// The storage tier its d.nodes are (`weft pool create --tier`; `None`: untiered, on every
    /// d.node, and its volumes are on the c.node's `--tier`). Records from before tiers load
    /// as untiered.
    #[serde(default)]
    pub tier: Option<String>,
    /// The tier's prices as the pool states them, dollars per GB-month and per IOPS-month
    /// (`None`: the tier book's).
    #[serde(default)]
    pub price_gb: Option<f64>,
    #[serde(default)]
    pub price_iops: Option<f64>,
}

/// Each placement group's d.nodes, in chunk order (`None`: no d.node available for that
/// position). The epoch rises with every change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PgMap {
    pub epoch: u64,
    pub pgs: Vec<Vec<Option<String>>>,
}

/// The key of a d.node's registration.
pub fn dnode_key(id: &str) -> String {
    format!("{DNODES_PREFIX}{id}")
}

pub fn dnode_admin_key(id: &str) -> String {
    format!("{DNODE_ADMIN_PREFIX}{id}")
}

pub fn pool_key(name: &str) -> String {
    format!("{POOLS_PREFIX}{name}")
}

pub fn pgmap_key(pool: &str) -> String {
    format!("{PGMAPS_PREFIX}{pool}")
}
