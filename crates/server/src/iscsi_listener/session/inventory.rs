//! What the session sees: its LUNs, opened as exports and followed through host and mapping
//! changes ([`Reader::refresh_luns`]), and the targets a SendTargets text request lists.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use weft_iscsi::text::{parse_pairs, push_pair};
use weft_scsi::Nexus;

use super::dispatch::Lun;
use super::Reader;
use crate::api::types::SessionProtocol;
use crate::iscsi_listener::lun::ExportLun;
use crate::iscsi_listener::targets::Viewer;
use crate::iscsi_listener::{Portal, PORTAL_GROUP_TAG};
use crate::sessions::SessionOrigin;

/// Open `export` as a LUN of a session logged in to `target` (`None`: it vanished), and
/// register it as a session of `origin`.
fn open_lun(
    portal: &Portal,
    export: &str,
    target: &str,
    nexus: &Nexus,
    origin: &SessionOrigin,
) -> Option<Arc<Lun>> {
    let handle = portal.backend.open(export).ok()?;
    let handle = portal.sessions.track(handle, origin.clone());
    let shared = portal.shared_lu(export);
    // From now on this nexus hears of the LU's access state changes.
    shared.state.nexus_joined(nexus);
    let resets_seen = AtomicU64::new(shared.resets.load(Ordering::Acquire));
    Some(Arc::new(Lun {
        export: export.to_string(),
        shared,
        resets_seen,
        luns_changed: AtomicBool::new(false),
        lu: Arc::new(ExportLun::new(
            handle,
            target,
            portal.port_group,
            nexus.relative_target_port,
            portal.ports.clone(),
        )),
    }))
}

impl Reader<'_> {
    /// Follow a host or mapping change: LUNs mapped since appear, unmapped ones go, and
    /// every LUN the session keeps reports REPORTED LUNS DATA HAS CHANGED once.
    pub(super) fn refresh_luns(&mut self) {
        let generation = self.portal.backend.access_generation();
        if self.generation == Some(generation) {
            return;
        }
        let Some(target) = &self.target else {
            return;
        };
        let table = self.portal.backend.access();
        let viewer = Viewer {
            backend: &*self.portal.backend,
            table: &table,
            array_target: &self.portal.array_target,
            open: self.open,
        };
        let wanted = viewer.luns(&self.initiator, target);
        let first = self.generation.is_none();
        self.generation = Some(generation);
        let unchanged = wanted.len() == self.luns.len()
            && wanted
                .iter()
                .all(|(n, e)| self.luns.get(n).is_some_and(|l| &l.export == e));
        if unchanged {
            return;
        }
        let origin = SessionOrigin {
            protocol: SessionProtocol::Iscsi,
            client: self.initiator.clone(),
            address: self.peer,
            host: table
                .host_of_initiator(&self.initiator)
                .map(|h| h.name.clone()),
        };
        let mut luns = BTreeMap::new();
        for (n, export) in wanted {
            let lun = match self.luns.get(&n) {
                Some(l) if l.export == export => Some(Arc::clone(l)),
                _ => open_lun(self.portal, &export, target, &self.nexus, &origin),
            };
            if let Some(lun) = lun {
                lun.luns_changed.store(!first, Ordering::Release);
                luns.insert(n, lun);
            }
        }
        let previous = std::mem::replace(&mut self.luns, luns);
        for gone in previous.into_values() {
            let still_seen = self
                .luns
                .values()
                .any(|l| Arc::ptr_eq(&l.shared, &gone.shared));
            let known = self.departed.iter().any(|d| Arc::ptr_eq(d, &gone.shared));
            if !still_seen && !known {
                self.departed.push(Arc::clone(&gone.shared));
            }
        }
    }

    pub(super) fn text_reply(&self, text: &[u8]) -> Vec<u8> {
        let mut reply = Vec::new();
        let Ok(pairs) = parse_pairs(text) else {
            return reply;
        };
        for (key, value) in pairs {
            if key != "SendTargets" {
                push_pair(&mut reply, &key, "NotUnderstood");
                continue;
            }
            let table = self.portal.backend.access();
            let visible = Viewer {
                backend: &*self.portal.backend,
                table: &table,
                array_target: &self.portal.array_target,
                open: self.open,
            }
            .targets(&self.initiator);
            let names: Vec<String> = match (&self.target, value.as_str()) {
                (Some(own), _) => vec![own.clone()],
                (None, "All") => visible,
                (None, one) => visible
                    .into_iter()
                    .filter(|t| t.eq_ignore_ascii_case(one))
                    .collect(),
            };
            for name in names {
                push_pair(&mut reply, "TargetName", &name);
                push_pair(
                    &mut reply,
                    "TargetAddress",
                    &format!("{},{}", self.local, PORTAL_GROUP_TAG),
                );
            }
        }
        reply
    }
}
