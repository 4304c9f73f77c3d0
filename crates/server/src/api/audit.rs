//! Who may do what, and the record of what was done: the admin token (`api-token`) may do
//! everything; the read-only token (`api-token-read-only`, for monitoring and the UI's
//! viewers) may only read (GET), and anything else it asks is refused with 403. Every call
//! that changes something, and every refused call, is one line of the audit log: who (which
//! token), what (method and path), when, and the result (HTTP status). The lines are JSON,
//! appended to `audit.log` in the data dir, and the last [`RECENT_MAX`] are served at
//! `GET /api/v1/audit`.

use std::collections::VecDeque;
use std::io::Write;
use std::path::Path;

use axum::extract::State;
use axum::Json;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::types::ErrorBody;
use super::ApiState;

/// Entries kept in memory for `GET /api/v1/audit` (the file keeps them all).
pub const RECENT_MAX: usize = 1000;
/// The audit log's file in the data dir.
pub const AUDIT_FILE: &str = "audit.log";

/// The role a token gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// `api-token`: everything.
    Admin,
    /// `api-token-read-only`: GET only.
    ReadOnly,
    /// No token, or one that matches neither.
    Unknown,
}

/// One management call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct AuditEntry {
    /// Unix time in ms.
    pub time_ms: u64,
    /// Who: the role of the token presented.
    pub role: Role,
    pub method: String,
    /// The path and query asked for.
    pub path: String,
    /// The HTTP status answered.
    pub status: u16,
}

/// The audit log: the file, and the recent entries.
#[derive(Debug, Default)]
pub struct AuditLog {
    file: Mutex<Option<std::fs::File>>,
    recent: Mutex<VecDeque<AuditEntry>>,
}

impl AuditLog {
    /// Appending to `<dir>/audit.log` (created if needed).
    pub fn open(dir: &Path) -> std::io::Result<AuditLog> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(AUDIT_FILE))?;
        Ok(AuditLog {
            file: Mutex::new(Some(file)),
            recent: Mutex::default(),
        })
    }

    /// Keep `entry`: a line of the file (a failure to write is logged, the call stands), and
    /// the recent list.
    pub fn record(&self, entry: AuditEntry) {
        if let Some(file) = self.file.lock().as_mut() {
            let mut line = serde_json::to_vec(&entry).expect("an audit entry is JSON");
            line.push(b'\n');
            if let Err(error) = file.write_all(&line) {
                tracing::error!(%error, "cannot append to the audit log");
            }
        }
        let mut recent = self.recent.lock();
        if recent.len() == RECENT_MAX {
            recent.pop_front();
        }
        recent.push_back(entry);
    }

    pub fn recent(&self) -> Vec<AuditEntry> {
        self.recent.lock().iter().cloned().collect()
    }
}

/// The recent management calls, oldest first: every call that changed something or was
/// refused (also in `audit.log` in the data dir).
#[utoipa::path(
    get,
    path = "/api/v1/audit",
    tag = "probes",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The last calls", body = Vec<AuditEntry>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn list(State(state): State<ApiState>) -> Json<Vec<AuditEntry>> {
    Json(state.audit.recent())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(status: u16) -> AuditEntry {
        AuditEntry {
            time_ms: 1,
            role: Role::Admin,
            method: "POST".into(),
            path: "/api/v1/volumes".into(),
            status,
        }
    }

    #[test]
    fn entries_go_to_the_file_as_json_lines_and_the_recent_list_is_bounded() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = AuditLog::open(dir.path()).expect("open");
        for i in 0..RECENT_MAX + 5 {
            log.record(entry(u16::try_from(200 + i % 2).unwrap()));
        }
        assert_eq!(log.recent().len(), RECENT_MAX);
        let text = std::fs::read_to_string(dir.path().join(AUDIT_FILE)).expect("read");
        assert_eq!(text.lines().count(), RECENT_MAX + 5);
        let first: AuditEntry = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first, entry(200));
        assert!(text.contains(r#""role":"admin""#), "{text}");
    }
}
