//! The host records of the cluster state: who a host is (initiator names, NBD networks, TLS
//! names, CHAP) and which exports it sees under which LUN. Plain data, serialized with the
//! cluster state; the operations on them are in [`crate::hosts`].

use serde::{Deserialize, Serialize};

/// A CHAP secret: shown to nobody, serialized only into the cluster state.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub(crate) String);

impl Secret {
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// The CHAP a host's initiator must answer, and what the target answers with for mutual
/// CHAP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChapRecord {
    pub user: String,
    pub secret: Secret,
    #[serde(default)]
    pub mutual: Option<MutualChap>,
}

/// The name and secret the target proves itself with (mutual CHAP).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MutualChap {
    pub user: String,
    pub secret: Secret,
}

/// An export a host sees, under a LUN number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LunMapping {
    pub lun: u64,
    pub export: String,
}

/// One host in the cluster state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostRecord {
    pub name: String,
    /// Initiator names, lowercased.
    #[serde(default)]
    pub iqns: Vec<String>,
    /// Networks NBD connections of this host come from, as `address/prefix`.
    #[serde(default)]
    pub nbd_addresses: Vec<String>,
    /// Names its NBD client certificates carry (subject CN or a DNS name), for NBD over TLS.
    #[serde(default)]
    pub tls_names: Vec<String>,
    #[serde(default)]
    pub chap: Option<ChapRecord>,
    /// Sorted by LUN.
    #[serde(default)]
    pub luns: Vec<LunMapping>,
    pub created_unix_s: u64,
    /// A mapping holder: the host is defined in the cluster's host catalog (shard 0's
    /// catalog) and this record, in another shard's, only holds the LUNs of that shard's
    /// exports. It carries no initiators, addresses, TLS names or CHAP: the front ends take
    /// those from shard 0's record. It exists while it holds a LUN.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub holder: bool,
}
