//! Mapping exports to hosts under LUN numbers, and taking them away.
//!
//! A host's LUN numbers are unique across the cluster: each LUN is claimed for this shard
//! (`crate::lun_claims`) before the catalog commit that maps it, and released after the one
//! that unmaps it, so exports of two shards never share a LUN of one host.
//!
//! In a cluster of several shards, hosts are defined once, in the cluster's host catalog:
//! shard 0's catalog. Another shard maps its own exports to such a host in a *holder* record
//! of its own catalog (`HostRecord::holder`: the name and the LUNs, no identity), added with
//! its first LUN and removed with its last; the front ends merge the records of every shard by
//! host name, identity from shard 0's.

use super::{find_host, resolve_export, ExportKind, LunInfo, LUN_MAX};
use crate::engine::Engine;
use crate::error::EngineError;
use crate::host_records::{HostRecord, LunMapping};
use crate::lun_claims::{self, Taken};
use crate::names::check_name;

impl Engine {
    /// Map an export (volume or snapshot) to a host under `lun` (default: the lowest free
    /// one, across every shard). An export may be mapped to several hosts (a cluster's shared
    /// disk). A snapshot is found as the catalog finds it (`pgdata@monday`, or `monday` when
    /// one snapshot has that short name) and mapped under its full name.
    pub fn map_export(
        &self,
        host: &str,
        export: &str,
        lun: Option<u64>,
    ) -> Result<LunInfo, EngineError> {
        self.map(host, export, lun, false)
    }

    /// Map an export of this shard to a host of the cluster's host catalog (shard 0's), which
    /// the caller found there: without a record of the host in this catalog, a holder record
    /// is added (see the module doc).
    pub fn map_export_to_cluster_host(
        &self,
        host: &str,
        export: &str,
        lun: Option<u64>,
    ) -> Result<LunInfo, EngineError> {
        self.map(host, export, lun, true)
    }

    fn map(
        &self,
        host: &str,
        export: &str,
        lun: Option<u64>,
        may_hold: bool,
    ) -> Result<LunInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let (record, new_holder) = match find_host(&meta.state, host) {
            Ok(record) => (record, false),
            Err(EngineError::UnknownHost { .. }) if may_hold && check_name(host).is_ok() => {
                (holder(host), true)
            }
            Err(e) => return Err(e),
        };
        let (export, kind) = resolve_export(&meta.state, export)?;
        let export = export.as_str();
        if let Some(m) = record.luns.iter().find(|m| m.export == export) {
            return Err(EngineError::InUse {
                what: format!("{export:?}"),
                detail: format!("it is already mapped to host {host:?} as LUN {}", m.lun),
            });
        }
        let shard = meta.shard();
        let taken_here = |lun: u64| record.luns.iter().find(|m| m.lun == lun);
        let lun = match lun {
            Some(lun) if lun > LUN_MAX => {
                return Err(EngineError::InvalidHost {
                    reason: format!("LUN {lun}: LUN numbers go from 0 to {LUN_MAX}"),
                })
            }
            Some(lun) => {
                if let Some(m) = taken_here(lun) {
                    return Err(EngineError::InUse {
                        what: format!("LUN {lun} of host {host:?}"),
                        detail: format!("it maps {:?}; pick another --lun", m.export),
                    });
                }
                match lun_claims::claim(meta.kv(), shard, host, lun) {
                    Ok(()) => lun,
                    Err(Taken::ByShard(other)) => {
                        return Err(EngineError::InUse {
                            what: format!("LUN {lun} of host {host:?}"),
                            detail: format!(
                                "it maps an export of shard {other}; pick another --lun"
                            ),
                        })
                    }
                    Err(Taken::Failed(e)) => return Err(e),
                }
            }
            None => {
                let mut chosen = None;
                for n in (0..=LUN_MAX).filter(|n| taken_here(*n).is_none()) {
                    match lun_claims::claim(meta.kv(), shard, host, n) {
                        Ok(()) => {
                            chosen = Some(n);
                            break;
                        }
                        Err(Taken::ByShard(_)) => {}
                        Err(Taken::Failed(e)) => return Err(e),
                    }
                }
                chosen.ok_or_else(|| EngineError::InvalidHost {
                    reason: format!("host {host:?} has every LUN from 0 to {LUN_MAX}"),
                })?
            }
        };
        let mut next = meta.state.clone();
        if new_holder {
            next.hosts.push(record);
            next.hosts.sort_by(|a, b| a.name.cmp(&b.name));
        }
        for h in &mut next.hosts {
            if h.name == host {
                h.luns.push(LunMapping {
                    lun,
                    export: export.to_string(),
                });
                h.luns.sort_by_key(|m| m.lun);
            }
        }
        if let Err(e) = meta.commit(next) {
            lun_claims::release(meta.kv(), shard, host, lun);
            return Err(e.into());
        }
        self.hosts_changed();
        tracing::info!(host, export, lun, "export mapped");
        Ok(LunInfo {
            lun,
            export: export.to_string(),
            read_only: kind == ExportKind::Snapshot,
        })
    }

    /// Take an export away from a host. Its sessions lose the LUN at their next command.
    pub fn unmap_export(&self, host: &str, export: &str) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        let record = find_host(&meta.state, host)?;
        let mapped = |e: &str| record.luns.iter().find(|m| m.export == e).map(|m| m.lun);
        let resolved;
        let export = if mapped(export).is_some() {
            export
        } else {
            match resolve_export(&meta.state, export) {
                Ok((full, _)) => {
                    resolved = full;
                    resolved.as_str()
                }
                Err(e @ EngineError::AmbiguousSnapshot { .. }) => return Err(e),
                Err(_) => export,
            }
        };
        let Some(lun) = mapped(export) else {
            return Err(EngineError::NotMapped {
                export: export.to_string(),
                host: host.to_string(),
            });
        };
        let mut next = meta.state.clone();
        for h in &mut next.hosts {
            if h.name == host {
                h.luns.retain(|m| m.export != export);
            }
        }
        // A holder lives as long as it holds a LUN.
        next.hosts.retain(|h| !(h.holder && h.luns.is_empty()));
        meta.commit(next)?;
        let shard = meta.shard();
        lun_claims::release(meta.kv(), shard, host, lun);
        self.hosts_changed();
        tracing::info!(host, export, "export unmapped");
        Ok(())
    }
}

/// A holder record for `host` (see the module doc).
fn holder(host: &str) -> HostRecord {
    HostRecord {
        name: host.to_string(),
        iqns: Vec::new(),
        nbd_addresses: Vec::new(),
        tls_names: Vec::new(),
        chap: None,
        luns: Vec::new(),
        created_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        holder: true,
    }
}
