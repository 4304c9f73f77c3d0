//! The registration record: what a d.node publishes about itself in the metadata store, under
//! [`DNODES_PREFIX`]`<node id>`, attached to its lease (so it disappears when the d.node
//! dies). c.nodes list the prefix to find d.nodes and deserialize [`DnodeRecord`]s.
//!
//! The JSON shape is a contract between d.nodes and c.nodes of different builds: add fields
//! with `#[serde(default)]`, never rename or retype one.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Where d.nodes register: `weft/dnodes/<node id>`.
pub const DNODES_PREFIX: &str = "weft/dnodes/";

/// One live d.node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnodeRecord {
    /// The node id (also the last part of the key).
    pub id: String,
    /// Where c.nodes connect.
    pub addr: SocketAddr,
    /// Failure domain, for placement.
    pub zone: String,
    pub disks: Vec<DiskRecord>,
    /// When this process started (seconds since the Unix epoch): a change means a restart.
    pub started_unix_s: u64,
    /// Its storage tier (`weft dnode --tier`; empty: none said): a pool of a tier is placed
    /// on d.nodes of that tier.
    #[serde(default)]
    pub tier: String,
}

/// One disk of a d.node, as of the last refresh.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    pub path: String,
    /// Configured capacity, else the file system's size; 0 if unknown.
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub chunks: u64,
    /// The configured capacity alone (`None`: until the file system is full).
    #[serde(default)]
    pub limit_bytes: Option<u64>,
    /// The file system under the disk: `<machine id>:<device>`, the same for every disk on
    /// it, so c.nodes count its space once (empty: unknown).
    #[serde(default)]
    pub fs_id: String,
    #[serde(default)]
    pub fs_size_bytes: u64,
    /// What a writer without root may still use on it.
    #[serde(default)]
    pub fs_free_bytes: u64,
}

/// The metadata key of a d.node's record.
pub fn dnode_key(node_id: &str) -> String {
    format!("{DNODES_PREFIX}{node_id}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_shape_is_the_documented_one() {
        let record = DnodeRecord {
            id: "dn-0000abcd".into(),
            addr: "10.0.0.7:7410".parse().expect("addr"),
            zone: "rack-1".into(),
            disks: vec![DiskRecord {
                path: "/data/0".into(),
                capacity_bytes: 1000,
                used_bytes: 10,
                chunks: 1,
                limit_bytes: None,
                fs_id: "m:803".into(),
                fs_size_bytes: 5000,
                fs_free_bytes: 4000,
            }],
            started_unix_s: 1_700_000_000,
            tier: "capacity".into(),
        };
        let json = serde_json::to_value(&record).expect("json");
        assert_eq!(
            json,
            serde_json::json!({
                "id": "dn-0000abcd",
                "addr": "10.0.0.7:7410",
                "zone": "rack-1",
                "disks": [{
                    "path": "/data/0", "capacity_bytes": 1000, "used_bytes": 10, "chunks": 1,
                    "limit_bytes": null, "fs_id": "m:803", "fs_size_bytes": 5000,
                    "fs_free_bytes": 4000,
                }],
                "started_unix_s": 1_700_000_000u64,
                "tier": "capacity",
            })
        );
        let back: DnodeRecord = serde_json::from_value(json).expect("parse");
        assert_eq!(back, record);
        // A record of a d.node from before the file-system fields still parses.
        let old = serde_json::json!({
            "id": "dn-1", "addr": "10.0.0.7:7410", "zone": "", "started_unix_s": 1,
            "disks": [{"path": "/d", "capacity_bytes": 1, "used_bytes": 0, "chunks": 0}],
        });
        let old: DnodeRecord = serde_json::from_value(old).expect("old record");
        assert_eq!(old.disks[0].fs_id, "");
        assert_eq!(old.tier, "");
        assert_eq!(dnode_key("dn-1"), "weft/dnodes/dn-1");
    }
}
