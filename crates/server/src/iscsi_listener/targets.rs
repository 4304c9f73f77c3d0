//! Which targets a portal offers and who may log in to them. For now every export (volume
//! or snapshot) is its own target, `iqn.2026-11.dev.weft:<export>`, with the export as LUN 0,
//! open to any initiator that reaches the portal (the listener binds to loopback by default).
//! The host model (initiator ACLs, CHAP secrets, LUN maps) replaces [`OpenAccess`].

use std::sync::Arc;

use weft_iscsi::wire::LOGIN_TARGET_NOT_FOUND;
use weft_iscsi::{Access, ChapCredentials};

use crate::backend::ExportBackend;

/// The prefix of every target name this server gives an export.
pub const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";

/// The target name of `export`.
pub fn target_name(export: &str) -> String {
    format!("{TARGET_PREFIX}{}", export.to_ascii_lowercase())
}

/// The export a target name names, if it exists.
pub fn export_of(backend: &dyn ExportBackend, target: &str) -> Option<String> {
    let wanted = target.to_ascii_lowercase();
    let suffix = wanted.strip_prefix(TARGET_PREFIX)?;
    backend
        .list_exports()
        .into_iter()
        .map(|e| e.name)
        .find(|name| name.to_ascii_lowercase() == suffix)
}

/// Every initiator may log in to every existing target, without CHAP.
pub struct OpenAccess {
    pub backend: Arc<dyn ExportBackend>,
}

impl Access for OpenAccess {
    fn authorize(
        &self,
        _initiator: &str,
        target: Option<&str>,
    ) -> Result<Option<ChapCredentials>, u16> {
        match target {
            None => Ok(None),
            Some(t) => export_of(&*self.backend, t)
                .map(|_| None)
                .ok_or(LOGIN_TARGET_NOT_FOUND),
        }
    }
}
