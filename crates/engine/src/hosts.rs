//! Hosts and LUN mappings: the storage-array model of who may reach which exports.
//!
//! A host is a database server as the array knows it: its iSCSI initiator names, the
//! addresses its NBD connections come from, the names its NBD client certificates carry
//! (NBD over TLS), and optionally CHAP secrets (one-way, or mutual
//! so the host also authenticates the target). An export (volume or snapshot) is mapped to
//! a host under a LUN number; the front ends serve a mapped export only to the hosts it is
//! mapped to, and a host sees exactly its LUNs. Hosts live in the cluster state beside the
//! volumes, committed the same way, so a c.node restart or failover keeps them.
//!
//! Secrets are kept in the cluster state (the data dir's metadata file, mode 0600, or etcd)
//! and never printed: [`Secret`]'s `Debug` hides them and [`HostInfo`] does not carry them.
//!
//! A mapped export cannot be deleted (the catalog refuses: unmap it first); refresh and
//! rollback keep the mapping, so a host keeps its LUN across a clone refresh.

use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};

use crate::engine::Engine;
use crate::error::EngineError;
pub use crate::host_records::{ChapRecord, HostRecord, LunMapping, MutualChap, Secret};
use crate::metastore::ClusterState;
use crate::names::{check_name, resolve_snapshot};

mod edit;
mod luns;
mod validate;

pub use edit::ChapSpec;
pub use validate::{network_contains, parse_network, SECRET_MIN_BYTES};

/// Largest LUN number (SAM-5 flat space addressing, 14 bits).
pub const LUN_MAX: u64 = 0x3fff;

/// What `host create` takes. Secrets arrive in plain text and are validated here.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostSpec {
    pub name: String,
    pub iqns: Vec<String>,
    pub nbd_addresses: Vec<String>,
    pub tls_names: Vec<String>,
    pub chap_user: Option<String>,
    pub chap_secret: Option<String>,
    /// The name the target answers mutual CHAP with (default: the CHAP user).
    pub mutual_user: Option<String>,
    pub mutual_secret: Option<String>,
}

/// A host as the API shows it: everything but the secrets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct HostInfo {
    pub name: String,
    pub iqns: Vec<String>,
    pub nbd_addresses: Vec<String>,
    pub tls_names: Vec<String>,
    /// The CHAP user the initiator must log in as (`None`: no CHAP).
    pub chap_user: Option<String>,
    /// The name the target answers mutual CHAP with (`None`: one-way or no CHAP).
    pub mutual_chap_user: Option<String>,
    pub luns: Vec<LunInfo>,
    pub created_unix_s: u64,
}

/// One LUN of a host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct LunInfo {
    pub lun: u64,
    pub export: String,
    /// A snapshot: served read-only.
    pub read_only: bool,
}

impl Engine {
    /// Define a host.
    pub fn create_host(&self, spec: &HostSpec) -> Result<HostInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let record = host_record(&meta.state, spec)?;
        let mut next = meta.state.clone();
        next.hosts.push(record);
        next.hosts.sort_by(|a, b| a.name.cmp(&b.name));
        meta.commit(next)?;
        self.hosts_changed();
        tracing::info!(host = spec.name, "host created");
        host_info(&meta.state, &spec.name)
    }

    /// Delete a host that has no LUNs.
    pub fn delete_host(&self, name: &str) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let host = find_host(&meta.state, name)?;
        if !host.luns.is_empty() {
            let luns: Vec<String> = host
                .luns
                .iter()
                .map(|m| format!("{} (LUN {})", m.export, m.lun))
                .collect();
            return Err(EngineError::InUse {
                what: format!("host {name:?}"),
                detail: format!(
                    "it still sees {}: unmap them first (weft volume unmap VOLUME --host {name})",
                    luns.join(", ")
                ),
            });
        }
        let mut next = meta.state.clone();
        next.hosts.retain(|h| h.name != name);
        meta.commit(next)?;
        self.hosts_changed();
        tracing::info!(host = name, "host deleted");
        Ok(())
    }

    pub fn list_hosts(&self) -> Vec<HostInfo> {
        let meta = self.shared.meta.lock();
        meta.state
            .hosts
            .iter()
            .map(|h| info_of(&meta.state, h))
            .collect()
    }

    /// Every host record of this shard's catalog as the API shows it, holders included
    /// (see [`shard_hosts`]).
    pub fn shard_hosts(&self) -> Vec<ShardHost> {
        shard_hosts(&self.shared.meta.lock().state)
    }

    pub fn host_info(&self, name: &str) -> Result<HostInfo, EngineError> {
        host_info(&self.shared.meta.lock().state, name)
    }

    /// Every host with its secrets, for the front ends' access checks.
    pub fn host_records(&self) -> Vec<HostRecord> {
        self.shared.meta.lock().state.hosts.clone()
    }

    /// Changes whenever a host or mapping changes: front ends compare it to the value their
    /// sessions were set up with.
    pub fn hosts_generation(&self) -> u64 {
        self.shared.hosts_generation.load(Ordering::Acquire)
    }

    pub(crate) fn hosts_changed(&self) {
        self.shared.hosts_generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// The hosts `export` is mapped to, with its LUN on each: the catalog refuses to delete a
/// mapped export.
pub(crate) fn mapped_to(state: &ClusterState, export: &str) -> Vec<String> {
    state
        .hosts
        .iter()
        .filter_map(|h| {
            h.luns
                .iter()
                .find(|m| m.export == export)
                .map(|m| format!("{} (LUN {})", h.name, m.lun))
        })
        .collect()
}

/// Refuse to delete `export` while a host sees it.
pub(crate) fn check_unmapped(state: &ClusterState, export: &str) -> Result<(), EngineError> {
    let hosts = mapped_to(state, export);
    if hosts.is_empty() {
        Ok(())
    } else {
        Err(EngineError::Mapped {
            export: export.to_string(),
            hosts,
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ExportKind {
    Volume,
    Snapshot,
}

fn export_kind(state: &ClusterState, export: &str) -> Result<ExportKind, EngineError> {
    if state.volumes.iter().any(|v| v.name == export) {
        Ok(ExportKind::Volume)
    } else if state
        .snapshots
        .iter()
        .any(|s| s.name == export && !s.hidden)
    {
        Ok(ExportKind::Snapshot)
    } else {
        Err(EngineError::UnknownVolume {
            name: export.to_string(),
        })
    }
}

/// The export a user named, by its full name, with its kind: a volume by its name, else a
/// snapshot as [`resolve_snapshot`] finds it.
fn resolve_export(state: &ClusterState, export: &str) -> Result<(String, ExportKind), EngineError> {
    if state.volumes.iter().any(|v| v.name == export) {
        return Ok((export.to_string(), ExportKind::Volume));
    }
    match resolve_snapshot(state, export, None) {
        Ok(s) => Ok((s.name, ExportKind::Snapshot)),
        Err(EngineError::UnknownSnapshot { .. }) => Err(EngineError::UnknownVolume {
            name: export.to_string(),
        }),
        Err(e) => Err(e),
    }
}

/// A host record of one shard's catalog as the API shows it, and whether it is a holder of
/// that shard's LUNs for a host the cluster's host catalog (shard 0's) defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHost {
    pub info: HostInfo,
    pub holder: bool,
}

/// Every host record of a catalog (one shard's), holders included: the cluster's list of
/// hosts merges those of every shard.
pub fn shard_hosts(state: &ClusterState) -> Vec<ShardHost> {
    state
        .hosts
        .iter()
        .map(|h| ShardHost {
            info: info_of(state, h),
            holder: h.holder,
        })
        .collect()
}

fn find_host(state: &ClusterState, name: &str) -> Result<HostRecord, EngineError> {
    state
        .hosts
        .iter()
        .find(|h| h.name == name)
        .cloned()
        .ok_or_else(|| EngineError::UnknownHost {
            name: name.to_string(),
        })
}

fn host_info(state: &ClusterState, name: &str) -> Result<HostInfo, EngineError> {
    Ok(info_of(state, &find_host(state, name)?))
}

fn info_of(state: &ClusterState, h: &HostRecord) -> HostInfo {
    HostInfo {
        name: h.name.clone(),
        iqns: h.iqns.clone(),
        nbd_addresses: h.nbd_addresses.clone(),
        tls_names: h.tls_names.clone(),
        chap_user: h.chap.as_ref().map(|c| c.user.clone()),
        mutual_chap_user: h
            .chap
            .as_ref()
            .and_then(|c| c.mutual.as_ref().map(|m| m.user.clone())),
        luns: h
            .luns
            .iter()
            .map(|m| LunInfo {
                lun: m.lun,
                export: m.export.clone(),
                read_only: matches!(export_kind(state, &m.export), Ok(ExportKind::Snapshot)),
            })
            .collect(),
        created_unix_s: h.created_unix_s,
    }
}

/// Validate a spec against the hosts already defined.
fn host_record(state: &ClusterState, spec: &HostSpec) -> Result<HostRecord, EngineError> {
    check_name(&spec.name).map_err(|_| EngineError::InvalidHost {
        reason: format!(
            "host name {:?}: use 1-64 characters from [A-Za-z0-9._-], not starting with '.' or '-'",
            spec.name
        ),
    })?;
    if state.hosts.iter().any(|h| h.name == spec.name) {
        return Err(EngineError::HostExists {
            name: spec.name.clone(),
        });
    }
    let invalid = |reason: String| EngineError::InvalidHost { reason };
    if spec.iqns.is_empty() && spec.nbd_addresses.is_empty() && spec.tls_names.is_empty() {
        return Err(invalid(
            "a host needs at least one initiator name (--iqn), NBD client address (--nbd-address) or TLS client name (--tls-name)".into(),
        ));
    }
    if [&spec.iqns, &spec.nbd_addresses, &spec.tls_names]
        .iter()
        .any(|l| l.len() > validate::HOST_NAMES_MAX)
    {
        return Err(invalid(format!(
            "at most {} initiator names, NBD addresses and TLS names each per host",
            validate::HOST_NAMES_MAX
        )));
    }
    let mut iqns = Vec::new();
    for iqn in &spec.iqns {
        let iqn = validate::initiator_name(iqn)?;
        if let Some(other) = state.hosts.iter().find(|h| h.iqns.contains(&iqn)) {
            return Err(EngineError::InUse {
                what: format!("initiator {iqn:?}"),
                detail: format!("it belongs to host {:?}", other.name),
            });
        }
        if !iqns.contains(&iqn) {
            iqns.push(iqn);
        }
    }
    let mut nbd_addresses = Vec::new();
    for a in &spec.nbd_addresses {
        let a = validate::client_address(a)?;
        if !nbd_addresses.contains(&a) {
            nbd_addresses.push(a);
        }
    }
    let mut tls_names = Vec::new();
    for n in &spec.tls_names {
        let n = validate::tls_name(n)?;
        if !tls_names.contains(&n) {
            tls_names.push(n);
        }
    }
    let chap = edit::chap_record(&ChapSpec {
        user: spec.chap_user.clone(),
        secret: spec.chap_secret.clone(),
        mutual_user: spec.mutual_user.clone(),
        mutual_secret: spec.mutual_secret.clone(),
    })?;
    if chap.is_some() && iqns.is_empty() {
        return Err(invalid(
            "CHAP secrets are for iSCSI: give the host's initiator name (--iqn)".into(),
        ));
    }
    Ok(HostRecord {
        name: spec.name.clone(),
        iqns,
        nbd_addresses,
        tls_names,
        chap,
        luns: Vec::new(),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        holder: false,
    })
}
