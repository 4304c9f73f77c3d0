//! `POST /volumes/{name}/rename` (`{"name": NEW, "force": false}`): the engine renames the
//! volume with its snapshots, clone origins, host LUN maps and schedule in one commit (see
//! `weft_engine::catalog`'s `rename`); here the rename is refused (409) while clients have
//! the volume or one of its snapshots open, unless forced, and the SCSI reservation records of
//! the renamed exports move to their new names.

use axum::extract::{Path, State};
use axum::Json;

use super::types::{ErrorBody, RenameVolume, Volume};
use super::{blocking, sessions, volume, ApiError, ApiState, JsonBody};

/// Rename a volume (its snapshots follow: `OLD@x` becomes `NEW@x`).
#[utoipa::path(
    post,
    path = "/api/v1/volumes/{name}/rename",
    operation_id = "rename_volume",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = RenameVolume,
    responses(
        (status = 200, description = "Renamed", body = Volume),
        (status = 400, description = "Invalid name or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 409, description = "The new name is taken, or clients have the volume or its snapshots open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn rename_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<RenameVolume>,
) -> Result<Json<Volume>, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    let info = blocking(move || engine.volume_info(&lookup)).await?;
    let mut exports = vec![info.name.clone()];
    exports.extend(info.snapshots.iter().cloned());
    sessions::refuse_if_busy(
        &state,
        &exports,
        &format!("rename volume {name}"),
        body.force,
    )
    .await?;
    let engine = state.engine.clone();
    let new = body.name.clone();
    let renamed = blocking(move || engine.rename_volume(&name, &new)).await?;
    let records = state.reservations.clone();
    let moved = renamed.exports.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for (from, to) in moved {
            if let Err(error) = records.rename(&from, &to) {
                tracing::warn!(%from, %to, %error, "could not move the reservation record of a renamed export");
            }
        }
    })
    .await;
    Ok(Json(volume(&state, renamed.volume)))
}
