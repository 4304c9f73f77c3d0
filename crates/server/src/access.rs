//! Who may reach which exports: the hosts and LUN mappings of the cluster state
//! (`weft_engine::hosts`) as the front ends apply them to a connection.
//!
//! The rules, the same for NBD and iSCSI:
//! - an export mapped to hosts is served only to those hosts: on iSCSI to their initiator
//!   names (with their CHAP, if set), on NBD to connections from their addresses or whose
//!   verified TLS client certificate carries one of their TLS names;
//! - an export mapped to nobody is served to anyone who reaches an *open* listener: one on
//!   loopback (the quick start), or one the operator opened with `--iscsi-open-network` /
//!   `--nbd-open-network`. On any other listener it is invisible.
//!
//! A connection is open when the address it reached is loopback or its listener was opened
//! explicitly; a listener on 0.0.0.0 is open to local clients only.

use std::net::{IpAddr, SocketAddr};

use weft_engine::hosts::network_contains;
use weft_engine::HostRecord;

/// The hosts as of one generation of the cluster state.
#[derive(Debug, Default)]
pub struct AccessTable {
    /// `ExportBackend::access_generation` when this was read.
    pub generation: u64,
    hosts: Vec<HostRecord>,
}

impl AccessTable {
    pub fn new(generation: u64, hosts: Vec<HostRecord>) -> AccessTable {
        AccessTable { generation, hosts }
    }

    /// Every host, as read.
    pub fn hosts(&self) -> &[HostRecord] {
        &self.hosts
    }

    /// The host an iSCSI initiator name belongs to (names compare case-insensitively).
    pub fn host_of_initiator(&self, initiator: &str) -> Option<&HostRecord> {
        let initiator = initiator.to_ascii_lowercase();
        self.hosts.iter().find(|h| h.iqns.contains(&initiator))
    }

    /// Whether any host has `export` mapped.
    pub fn is_mapped(&self, export: &str) -> bool {
        self.hosts
            .iter()
            .any(|h| h.luns.iter().any(|m| m.export == export))
    }

    /// Whether an iSCSI initiator may reach `export` through its own target.
    pub fn iscsi_may_use(&self, initiator: &str, export: &str, open: bool) -> bool {
        if self.is_mapped(export) {
            self.host_of_initiator(initiator)
                .is_some_and(|h| h.luns.iter().any(|m| m.export == export))
        } else {
            open
        }
    }

    /// The host an NBD client belongs to, for `export`: the host it reaches the export
    /// through when it is mapped, else the first whose addresses or TLS names it matches.
    pub fn nbd_host(&self, client: &NbdClient, export: &str) -> Option<&str> {
        let matches = |h: &&HostRecord| {
            h.nbd_addresses
                .iter()
                .any(|n| network_contains(n, client.peer))
                || h.tls_names.iter().any(|n| client.tls_names.contains(n))
        };
        let mapped = |h: &&HostRecord| h.luns.iter().any(|m| m.export == export);
        self.hosts
            .iter()
            .filter(matches)
            .find(mapped)
            .or_else(|| self.hosts.iter().find(matches))
            .map(|h| h.name.as_str())
    }

    /// Whether an NBD client may list and open `export`.
    pub fn nbd_may_use(&self, client: &NbdClient, export: &str) -> bool {
        if self.is_mapped(export) {
            self.hosts.iter().any(|h| {
                h.luns.iter().any(|m| m.export == export)
                    && (h
                        .nbd_addresses
                        .iter()
                        .any(|n| network_contains(n, client.peer))
                        || h.tls_names.iter().any(|n| client.tls_names.contains(n)))
            })
        } else {
            client.open
        }
    }
}

/// The hosts of several shards' catalogs as one list, by host name: in a cluster of several
/// shards a host is defined in shard 0's catalog and the others hold only its LUNs of their
/// exports (`HostRecord::holder`). `per_shard` goes in shard order (shard 0 first); a host's
/// identity (initiators, addresses, TLS names, CHAP) is its first record that is not a
/// holder, its LUNs those of every record. A host only holders name keeps no identity: its
/// exports stay mapped, to nobody, so no connection sees them.
pub fn merge_hosts(per_shard: impl IntoIterator<Item = Vec<HostRecord>>) -> Vec<HostRecord> {
    let mut merged: Vec<HostRecord> = Vec::new();
    for hosts in per_shard {
        for host in hosts {
            match merged.iter_mut().find(|m| m.name == host.name) {
                None => merged.push(host),
                Some(m) => {
                    let luns = std::mem::take(&mut m.luns);
                    if m.holder && !host.holder {
                        *m = HostRecord {
                            luns: Vec::new(),
                            ..host.clone()
                        };
                    }
                    m.luns = luns;
                    for lun in host.luns {
                        if !m.luns.iter().any(|l| l.export == lun.export) {
                            m.luns.push(lun);
                        }
                    }
                    m.luns.sort_by_key(|l| l.lun);
                }
            }
        }
    }
    merged
}

/// Who an NBD client is.
#[derive(Debug, Clone)]
pub struct NbdClient {
    pub peer: IpAddr,
    /// The subject CN and DNS names of its verified TLS client certificate (empty without).
    pub tls_names: Vec<String>,
    /// The connection sees unmapped exports.
    pub open: bool,
}

/// Whether a connection that reached `local` on a listener opened with `open_network` is
/// open (sees unmapped exports).
pub fn connection_is_open(local: SocketAddr, open_network: bool) -> bool {
    open_network || local.ip().is_loopback() || is_mapped_loopback(local.ip())
}

fn is_mapped_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
        IpAddr::V4(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_engine::hosts::LunMapping;

    #[test]
    fn hosts_of_several_shards_merge_by_name_with_shard_0s_identity() {
        let defined = host("db1", "iqn.2026-01.org.example:db1", "10.0.0.1/32", &["a"]);
        let mut held = host("db1", "iqn.x:stale", "10.9.9.9/32", &[]);
        held.holder = true;
        held.iqns.clear();
        held.nbd_addresses.clear();
        held.luns = vec![LunMapping {
            lun: 1,
            export: "b".into(),
        }];
        let other = host("db2", "iqn.2026-01.org.example:db2", "10.0.0.2/32", &["c"]);
        // The holder's shard may come first: the identity is still the defining record's.
        let merged = merge_hosts([vec![held.clone()], vec![defined.clone(), other.clone()]]);
        assert_eq!(merged.len(), 2);
        let db1 = merged.iter().find(|h| h.name == "db1").unwrap();
        assert!(!db1.holder);
        assert_eq!(db1.iqns, defined.iqns);
        let exports: Vec<(u64, &str)> = db1
            .luns
            .iter()
            .map(|l| (l.lun, l.export.as_str()))
            .collect();
        assert_eq!(exports, [(0, "a"), (1, "b")]);
        let table = AccessTable::new(1, merged);
        assert!(table.iscsi_may_use("iqn.2026-01.org.example:db1", "b", false));
        assert!(!table.iscsi_may_use("iqn.2026-01.org.example:db2", "b", true));
        // Held LUNs of a host nobody defines are mapped to nobody.
        let orphan = AccessTable::new(2, merge_hosts([vec![held]]));
        assert!(orphan.is_mapped("b"));
        assert!(!orphan.iscsi_may_use("iqn.x:stale", "b", true));
    }

    fn host(name: &str, iqn: &str, net: &str, exports: &[&str]) -> HostRecord {
        HostRecord {
            name: name.into(),
            iqns: vec![iqn.into()],
            nbd_addresses: vec![net.into()],
            tls_names: vec![format!("{name}.example")],
            chap: None,
            luns: exports
                .iter()
                .enumerate()
                .map(|(i, e)| LunMapping {
                    lun: i as u64,
                    export: (*e).into(),
                })
                .collect(),
            created_unix_s: 0,
            holder: false,
        }
    }

    #[test]
    fn mapped_exports_only_to_their_hosts_unmapped_only_when_open() {
        let t = AccessTable::new(
            1,
            vec![
                host("db1", "iqn.a:db1", "10.0.0.0/24", &["pgdata"]),
                host("db2", "iqn.a:db2", "10.0.1.5/32", &["pgdata", "wal"]),
            ],
        );
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let client = |peer: &str, open: bool| NbdClient {
            peer: ip(peer),
            tls_names: Vec::new(),
            open,
        };
        assert!(t.iscsi_may_use("IQN.A:DB1", "pgdata", false));
        assert!(!t.iscsi_may_use("iqn.a:db1", "wal", true));
        assert!(!t.iscsi_may_use("iqn.a:other", "pgdata", true));
        assert!(t.iscsi_may_use("iqn.a:other", "scratch", true));
        assert!(!t.iscsi_may_use("iqn.a:db1", "scratch", false));
        assert!(t.nbd_may_use(&client("10.0.0.9", false), "pgdata"));
        assert!(!t.nbd_may_use(&client("10.0.0.9", true), "wal"));
        assert!(t.nbd_may_use(&client("10.0.1.5", false), "wal"));
        assert!(!t.nbd_may_use(&client("127.0.0.1", true), "wal"));
        assert!(t.nbd_may_use(&client("127.0.0.1", true), "scratch"));
        assert!(!t.nbd_may_use(&client("10.0.0.9", false), "scratch"));
        // A verified certificate name stands for the host wherever the client connects from.
        let certified = NbdClient {
            peer: ip("192.168.7.7"),
            tls_names: vec!["db2.example".into()],
            open: false,
        };
        assert!(t.nbd_may_use(&certified, "wal"));
        assert!(!t.nbd_may_use(&certified, "scratch"));
        assert_eq!(t.nbd_host(&certified, "wal"), Some("db2"));
        assert_eq!(
            t.nbd_host(&client("10.0.0.9", false), "pgdata"),
            Some("db1")
        );
        assert_eq!(t.nbd_host(&client("127.0.0.1", true), "scratch"), None);
    }

    #[test]
    fn open_connections() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert!(connection_is_open(a("127.0.0.2:10809"), false));
        assert!(connection_is_open(a("[::1]:10809"), false));
        assert!(connection_is_open(a("[::ffff:127.0.0.1]:10809"), false));
        assert!(!connection_is_open(a("10.0.0.1:10809"), false));
        assert!(connection_is_open(a("10.0.0.1:10809"), true));
    }
}
