//! Session endpoints of the management API: who has an export open now, as `rbd status`
//! lists an image's watchers. `GET /sessions` (every export), `GET /volumes/{name}/sessions`
//! and `GET /snapshots/{name}/sessions`; volumes and snapshots also carry theirs in their own
//! body (`sessions`).
//!
//! [`refuse_if_busy`] is the guard of the commands that cut clients off (volume delete,
//! refresh, rollback): while the export has sessions they answer 409 naming the clients,
//! unless the request says `force`.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::types::{ErrorBody, ExportSession};
use super::{blocking, ApiError, ApiState};

/// The most clients a refusal names; the rest are counted.
const CLIENTS_NAMED_MAX: usize = 5;
/// How long a refusal waits for sessions that are ending: a client that has just said
/// goodbye (`nbdcopy`, `qemu-img` exiting, an iSCSI logout) is still draining for a moment,
/// and a script that deletes right after it must not be refused for it.
const ENDING_SESSIONS_GRACE: Duration = Duration::from_millis(500);
const ENDING_SESSIONS_POLL: Duration = Duration::from_millis(10);

/// Every live session of this server's front ends.
#[utoipa::path(
    get,
    path = "/api/v1/sessions",
    operation_id = "list_sessions",
    tag = "volumes",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every client session, oldest first", body = Vec<ExportSession>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn all(State(state): State<ApiState>) -> Json<Vec<ExportSession>> {
    Json(state.sessions.all())
}

/// The clients that have a volume open now.
#[utoipa::path(
    get,
    path = "/api/v1/volumes/{name}/sessions",
    operation_id = "volume_sessions",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    responses(
        (status = 200, description = "Its sessions, oldest first", body = Vec<ExportSession>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn of_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Vec<ExportSession>>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.volume_info(&name)).await?;
    Ok(Json(state.sessions.of_export(&info.name)))
}

/// The clients that have a snapshot open now.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{name}/sessions",
    operation_id = "snapshot_sessions",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The snapshot")),
    responses(
        (status = 200, description = "Its sessions, oldest first", body = Vec<ExportSession>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such snapshot", body = ErrorBody),
        (status = 409, description = "Several snapshots have that short name", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn of_snapshot(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Vec<ExportSession>>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.snapshot_info(&name)).await?;
    Ok(Json(state.sessions.of_export(&info.name)))
}

/// 409 naming the clients of `exports` when there are some and the request does not say
/// `force`; with `force`, a warning in the log names them (they are about to be cut off).
/// `what` is the action, e.g. "delete volume pgdata".
///
/// A client that connects between this check and the action is cut off like a forced one:
/// the check is advice to the operator, not a lock against new connections.
pub(super) async fn refuse_if_busy(
    state: &ApiState,
    exports: &[String],
    what: &str,
    force: bool,
) -> Result<(), ApiError> {
    let mut sessions = state.sessions.of_exports(exports);
    if !force {
        let deadline = tokio::time::Instant::now() + ENDING_SESSIONS_GRACE;
        while !sessions.is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(ENDING_SESSIONS_POLL).await;
            sessions = state.sessions.of_exports(exports);
        }
    }
    if sessions.is_empty() {
        return Ok(());
    }
    let clients = describe(&sessions);
    if force {
        tracing::warn!(%what, sessions = sessions.len(), %clients, "forced: disconnecting clients");
        return Ok(());
    }
    let (count, them) = if sessions.len() == 1 {
        ("1 client has".to_string(), "it")
    } else {
        (format!("{} clients have", sessions.len()), "them")
    };
    Err(ApiError(
        StatusCode::CONFLICT,
        format!(
            "refusing to {what}: {count} it open ({clients}); stop {them} first, or repeat with \
             force (weft: --force) to disconnect {them}"
        ),
    ))
}

/// The first few sessions by protocol, client and host; then how many more.
fn describe(sessions: &[ExportSession]) -> String {
    let mut parts: Vec<String> = sessions
        .iter()
        .take(CLIENTS_NAMED_MAX)
        .map(|s| {
            if s.export.contains(weft_engine::SNAPSHOT_SEPARATOR) {
                format!("{} on {}", s.describe(), s.export)
            } else {
                s.describe()
            }
        })
        .collect();
    if sessions.len() > CLIENTS_NAMED_MAX {
        parts.push(format!("{} more", sessions.len() - CLIENTS_NAMED_MAX));
    }
    parts.join(", ")
}
