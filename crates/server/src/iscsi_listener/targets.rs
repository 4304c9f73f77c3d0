//! Which targets a portal offers, who may log in to them, and which LUNs a session sees.
//!
//! Two kinds of target:
//! - the **array target** (`iqn.2026-11.dev.weft.array:<id>`), the storage-array model: an
//!   initiator that belongs to a host logs in to it and sees exactly the exports mapped to
//!   that host, under their LUN numbers (`weft volume map VOL --host H --lun N`);
//! - one **export target** per volume or snapshot (`iqn.2026-11.dev.weft:<export>`, LUN 0;
//!   snapshot `pgdata@monday` is `iqn.2026-11.dev.weft:pgdata:monday`), the quick start:
//!   served to the hosts the export is mapped to, and, while it is mapped to nobody, to any
//!   initiator on an open connection (see [`crate::access`]).
//!
//! Logins are refused with the status RFC 7143 §11.13.5 names: an initiator that is no
//! host's, or a host the export is not mapped to, gets AUTHORIZATION FAILURE (0202h); a
//! target that does not exist, or is hidden from this connection, gets NOT FOUND (0203h); a
//! wrong CHAP answer gets AUTHENTICATION FAILURE (0201h, in `weft-iscsi`). A host with CHAP
//! secrets must use them for every session, discovery included.

use std::collections::BTreeMap;

use weft_iscsi::wire::{LOGIN_FORBIDDEN, LOGIN_TARGET_NOT_FOUND};
use weft_iscsi::{Access, ChapCredentials};

use crate::access::AccessTable;
use crate::backend::ExportBackend;

/// The prefix of every export target's name.
pub const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";
/// The prefix of the array target's name; the rest is the cluster (or data dir) id.
pub const ARRAY_TARGET_PREFIX: &str = "iqn.2026-11.dev.weft.array:";

/// The target name of `export`, lowercased. An iSCSI name has no `@` (RFC 3722: a-z, 0-9,
/// `-`, `.`, `:`), so a snapshot's `VOLUME@SNAPSHOT` becomes `VOLUME:SNAPSHOT`; volume and
/// snapshot names have no `:`, so [`export_of`] maps it back unambiguously.
pub fn target_name(export: &str) -> String {
    let name: String = export
        .chars()
        .map(|c| {
            if c == weft_engine::SNAPSHOT_SEPARATOR {
                ':'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .collect();
    format!("{TARGET_PREFIX}{name}")
}

/// The array target's name for a cluster or data dir id (lowercased, and cut to what an
/// iSCSI name may hold).
pub fn array_target_name(id: &str) -> String {
    let id: String = id
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    format!("{ARRAY_TARGET_PREFIX}{id}")
}

/// The export a target name names, if it exists (the reverse of [`target_name`]; target
/// names compare case-insensitively).
pub fn export_of(backend: &dyn ExportBackend, target: &str) -> Option<String> {
    let wanted = target.to_ascii_lowercase();
    wanted.strip_prefix(TARGET_PREFIX)?;
    backend
        .list_exports()
        .into_iter()
        .map(|e| e.name)
        .find(|name| target_name(name) == wanted)
}

/// What a connection may see of this server: the hosts as of one generation, and whether
/// the connection is open (sees unmapped exports).
pub struct Viewer<'a> {
    pub backend: &'a dyn ExportBackend,
    pub table: &'a AccessTable,
    pub array_target: &'a str,
    pub open: bool,
}

impl Viewer<'_> {
    fn is_array(&self, target: &str) -> bool {
        target.eq_ignore_ascii_case(self.array_target)
    }

    fn chap(&self, initiator: &str) -> Option<ChapCredentials> {
        let chap = self.table.host_of_initiator(initiator)?.chap.as_ref()?;
        Some(ChapCredentials {
            user: chap.user.clone(),
            secret: chap.secret.expose().as_bytes().to_vec(),
            mutual: chap
                .mutual
                .as_ref()
                .map(|m| (m.user.clone(), m.secret.expose().as_bytes().to_vec())),
        })
    }

    /// The targets SendTargets lists to this initiator.
    pub fn targets(&self, initiator: &str) -> Vec<String> {
        let mut names = Vec::new();
        if self.table.host_of_initiator(initiator).is_some() {
            names.push(self.array_target.to_string());
        }
        for export in self.backend.list_exports() {
            if self.table.iscsi_may_use(initiator, &export.name, self.open) {
                names.push(target_name(&export.name));
            }
        }
        names
    }

    /// The LUNs a session logged in to `target` sees, and their exports.
    pub fn luns(&self, initiator: &str, target: &str) -> BTreeMap<u64, String> {
        if self.is_array(target) {
            return self
                .table
                .host_of_initiator(initiator)
                .map(|h| h.luns.iter().map(|m| (m.lun, m.export.clone())).collect())
                .unwrap_or_default();
        }
        export_of(self.backend, target)
            .filter(|e| self.table.iscsi_may_use(initiator, e, self.open))
            .map(|e| BTreeMap::from([(0, e)]))
            .unwrap_or_default()
    }
}

impl Access for Viewer<'_> {
    fn authorize(
        &self,
        initiator: &str,
        target: Option<&str>,
    ) -> Result<Option<ChapCredentials>, u16> {
        let host = self.table.host_of_initiator(initiator);
        match target {
            None if host.is_some() || self.open => Ok(self.chap(initiator)),
            None => Err(LOGIN_FORBIDDEN),
            Some(t) if self.is_array(t) => match host {
                Some(_) => Ok(self.chap(initiator)),
                None => Err(LOGIN_FORBIDDEN),
            },
            Some(t) => {
                let export = export_of(self.backend, t).ok_or(LOGIN_TARGET_NOT_FOUND)?;
                if self.table.iscsi_may_use(initiator, &export, self.open) {
                    Ok(self.chap(initiator))
                } else if self.table.is_mapped(&export) {
                    Err(LOGIN_FORBIDDEN)
                } else {
                    Err(LOGIN_TARGET_NOT_FOUND)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshot_targets_use_a_colon() {
        assert_eq!(target_name("vol0"), "iqn.2026-11.dev.weft:vol0");
        assert_eq!(target_name("PgData"), "iqn.2026-11.dev.weft:pgdata");
        assert_eq!(
            target_name("pgdata@Monday"),
            "iqn.2026-11.dev.weft:pgdata:monday"
        );
        // A legacy snapshot keeps its plain name.
        assert_eq!(target_name("monday"), "iqn.2026-11.dev.weft:monday");
    }
}
