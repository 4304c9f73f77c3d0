//! Snapshot endpoints of the management API: a volume's snapshot (`POST
//! /volumes/{name}/snapshots`), refresh and rollback of a volume to a snapshot
//! (`POST /volumes/{name}/{refresh,rollback}`, refused while clients have it open unless
//! forced), the snapshot list and one snapshot (`GET /snapshots[?volume=V]`,
//! `GET|DELETE /snapshots/{name}[?keep_hidden=true]`), and clones (`POST
//! /snapshots/{name}/clones`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;

use super::types::{
    DeleteSnapshotQuery, ErrorBody, ListSnapshotsQuery, NewName, Snapshot, ToSnapshot, Volume,
};
use super::{
    blocking, forget_reservations, sessions, snapshot, snapshot_with, volume, ApiError, ApiState,
    JsonBody, QueryArgs,
};

/// Snapshot a volume (crash-consistent, metadata only).
#[utoipa::path(
    post,
    path = "/api/v1/volumes/{name}/snapshots",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = NewName,
    responses(
        (status = 201, description = "Created", body = Snapshot),
        (status = 400, description = "Invalid name or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 409, description = "The name is taken, or the chain is too deep", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn create_snapshot(
    State(state): State<ApiState>,
    Path(volume): Path<String>,
    JsonBody(body): JsonBody<NewName>,
) -> Result<(StatusCode, Json<Snapshot>), ApiError> {
    // Retention prunes by name: the scheduler's names are its own, so no snapshot a user takes
    // is ever pruned as one it took.
    if weft_engine::schedules::auto_snapshot_time(&body.name).is_some() {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!(
                "snapshot names of the form auto-YYYYMMDD-HHMMSS belong to the snapshot scheduler (its retention deletes them): {:?}",
                body.name
            ),
        ));
    }
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_snapshot(&volume, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(snapshot(&state, info))))
}

/// List the snapshots, of every volume or of one.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots",
    tag = "snapshots",
    security(("bearer" = [])),
    params(ListSnapshotsQuery),
    responses(
        (status = 200, description = "The snapshots", body = Vec<Snapshot>),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn list_snapshots(
    State(state): State<ApiState>,
    QueryArgs(query): QueryArgs<ListSnapshotsQuery>,
) -> Result<Json<Vec<Snapshot>>, ApiError> {
    let engine = state.engine.clone();
    let (snapshots, hosts) = blocking(move || {
        Ok((
            engine.list_snapshots(query.volume.as_deref())?,
            engine.list_hosts(),
        ))
    })
    .await?;
    Ok(Json(
        snapshots
            .into_iter()
            .map(|s| snapshot_with(&state, s, &hosts))
            .collect(),
    ))
}

/// A snapshot.
#[utoipa::path(
    get,
    path = "/api/v1/snapshots/{name}",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The snapshot")),
    responses(
        (status = 200, description = "The snapshot", body = Snapshot),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such snapshot", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn snapshot_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Snapshot>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.snapshot_info(&name)).await?;
    Ok(Json(snapshot(&state, info)))
}

/// Delete a snapshot (refused while clones use it, unless `keep_hidden` hides it).
#[utoipa::path(
    delete,
    path = "/api/v1/snapshots/{name}",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The snapshot"), DeleteSnapshotQuery),
    responses(
        (status = 204, description = "Deleted (or hidden)"),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such snapshot", body = ErrorBody),
        (status = 409, description = "Clones use it, or it is mapped to a host", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn delete_snapshot(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteSnapshotQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    let export = name.clone();
    blocking(move || engine.delete_snapshot(&name, query.keep_hidden)).await?;
    forget_reservations(&state, vec![export]).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Clone a snapshot into a new writable, thin volume.
#[utoipa::path(
    post,
    path = "/api/v1/snapshots/{name}/clones",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The snapshot")),
    request_body = NewName,
    responses(
        (status = 201, description = "Created", body = Volume),
        (status = 400, description = "Invalid name or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such snapshot", body = ErrorBody),
        (status = 409, description = "The name is taken, or the chain is too deep", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn create_clone(
    State(state): State<ApiState>,
    Path(snapshot_name): Path<String>,
    JsonBody(body): JsonBody<NewName>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_clone(&snapshot_name, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(volume(&state, info))))
}

/// Drop a clone's changes and have it read a snapshot of its family (clients reconnect).
#[utoipa::path(
    post,
    path = "/api/v1/volumes/{name}/refresh",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = ToSnapshot,
    responses(
        (status = 200, description = "Refreshed", body = Volume),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume or snapshot", body = ErrorBody),
        (status = 409, description = "The snapshot is of another family, the chain is too deep, or clients have the volume open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn refresh_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<Volume>, ApiError> {
    refuse_if_busy(&state, &name, "refresh", body.force).await?;
    let engine = state.engine.clone();
    let info = blocking(move || engine.refresh_volume(&name, &body.snapshot)).await?;
    Ok(Json(volume(&state, info)))
}

/// Roll a volume back to one of its own snapshots (clients reconnect).
#[utoipa::path(
    post,
    path = "/api/v1/volumes/{name}/rollback",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = ToSnapshot,
    responses(
        (status = 200, description = "Rolled back", body = Volume),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume or snapshot", body = ErrorBody),
        (status = 409, description = "Not a snapshot of this volume, or clients have the volume open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn rollback_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<Volume>, ApiError> {
    refuse_if_busy(&state, &name, "roll back", body.force).await?;
    let engine = state.engine.clone();
    let info = blocking(move || engine.rollback_volume(&name, &body.snapshot)).await?;
    Ok(Json(volume(&state, info)))
}

/// Refresh and rollback: 404 for a volume that does not exist, 409 while clients have it
/// open and the request does not say `force`.
async fn refuse_if_busy(
    state: &ApiState,
    name: &str,
    action: &str,
    force: bool,
) -> Result<(), ApiError> {
    let engine = state.engine.clone();
    let lookup = name.to_string();
    let volume = blocking(move || engine.volume_info(&lookup)).await?;
    sessions::refuse_if_busy(
        state,
        &[volume.name],
        &format!("{action} volume {name}"),
        force,
    )
    .await
}
