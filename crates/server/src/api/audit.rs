//! Who may do what, and the record of what was done: the admin token (`api-token`) may do
//! everything; the read-only token (`api-token-read-only`, for monitoring and the UI's
//! viewers) may only read (GET), and anything else it asks is refused with 403. Every call is
//! one line of the audit log: who (which token), what (method and path), when, and the result
//! (HTTP status). Reads are coalesced: a read answered like one logged less than
//! [`READ_COALESCE`] ago by the same role (same method, path and status) is counted, not
//! logged, and the next line of that read says how many it stands for (`repeats`), so a UI
//! polling every two seconds writes a line a minute per page, not thirty. The lines are JSON,
//! appended to `audit.log` in the data dir, and the last [`RECENT_MAX`] are served at
//! `GET /api/v1/audit`.

use std::collections::{HashMap, VecDeque};
use std::io::Write;
use std::path::Path;
use std::time::Duration;

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
/// An identical read within this long of the last one logged is counted, not logged.
pub const READ_COALESCE: Duration = Duration::from_secs(60);
/// Distinct reads remembered for coalescing; beyond, the oldest half is forgotten (their next
/// read is logged at once).
const READS_REMEMBERED_MAX: usize = 4096;

/// The role a token gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// For a read: the identical reads answered since the previous line of it, not logged
    /// one by one (see [`READ_COALESCE`]).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub repeats: u64,
}

#[allow(clippy::trivially_copy_pass_by_ref)] // serde's skip_serializing_if passes a reference
fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// What coalesces reads: role, method, path and status.
type ReadKey = (Role, String, String, u16);

/// The audit log: the file, and the recent entries.
#[derive(Debug, Default)]
pub struct AuditLog {
    file: Mutex<Option<std::fs::File>>,
    recent: Mutex<VecDeque<AuditEntry>>,
    /// Per distinct read: when it was last logged (Unix ms), and the reads since.
    reads: Mutex<HashMap<ReadKey, (u64, u64)>>,
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
            reads: Mutex::default(),
        })
    }

    /// Keep an allowed read `entry`, coalesced (see the module doc).
    pub fn record_read(&self, mut entry: AuditEntry) {
        let key = (
            entry.role,
            entry.method.clone(),
            entry.path.clone(),
            entry.status,
        );
        let window_ms = u64::try_from(READ_COALESCE.as_millis()).unwrap_or(u64::MAX);
        {
            let mut reads = self.reads.lock();
            match reads.get_mut(&key) {
                Some((logged_ms, since)) if entry.time_ms < *logged_ms + window_ms => {
                    *since += 1;
                    return;
                }
                Some((logged_ms, since)) => {
                    entry.repeats = *since;
                    *logged_ms = entry.time_ms;
                    *since = 0;
                }
                None => {
                    if reads.len() >= READS_REMEMBERED_MAX {
                        let mut times: Vec<u64> = reads.values().map(|(t, _)| *t).collect();
                        times.sort_unstable();
                        let cut = times[times.len() / 2];
                        reads.retain(|_, (t, _)| *t > cut);
                    }
                    reads.insert(key, (entry.time_ms, 0));
                }
            }
        }
        self.record(entry);
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
/// refused, and the reads, coalesced (also in `audit.log` in the data dir).
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
            repeats: 0,
        }
    }

    fn read_at(time_ms: u64, path: &str) -> AuditEntry {
        AuditEntry {
            time_ms,
            role: Role::ReadOnly,
            method: "GET".into(),
            path: path.into(),
            status: 200,
            repeats: 0,
        }
    }

    #[test]
    fn identical_reads_within_the_window_are_counted_in_the_next_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = AuditLog::open(dir.path()).expect("open");
        let minute = u64::try_from(READ_COALESCE.as_millis()).unwrap();
        // A UI polling two pages every 2 s for two minutes.
        for t in (0..2 * minute).step_by(2000) {
            log.record_read(read_at(t, "/api/v1/volumes"));
            log.record_read(read_at(t, "/api/v1/stats"));
        }
        let lines: Vec<AuditEntry> = log.recent();
        let volumes: Vec<&AuditEntry> = lines
            .iter()
            .filter(|e| e.path == "/api/v1/volumes")
            .collect();
        assert_eq!(volumes.len(), 2, "{lines:?}");
        assert_eq!((volumes[0].time_ms, volumes[0].repeats), (0, 0));
        assert_eq!((volumes[1].time_ms, volumes[1].repeats), (minute, 29));
        assert_eq!(lines.len(), 4, "{lines:?}");
        // Another status is another read; a change is never coalesced.
        log.record_read(AuditEntry {
            status: 404,
            ..read_at(minute + 10, "/api/v1/volumes")
        });
        log.record(entry(201));
        log.record(entry(201));
        assert_eq!(log.recent().len(), 7);
        let text = std::fs::read_to_string(dir.path().join(AUDIT_FILE)).expect("read");
        assert!(text.contains(r#""repeats":29"#), "{text}");
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
