//! Volumes: `GET|POST /volumes`, `GET|DELETE /volumes/{name}[?with_snapshots=true&force=true]`,
//! `POST /volumes/{name}/resize` (rename, snapshots, refresh and rollback are in their own
//! modules). A delete is refused (409) while clients have the volume open, unless forced; its
//! exports' SCSI reservation records go with it.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use weft_engine::EngineError;

use super::types::{CreateVolume, DeleteVolumeQuery, ErrorBody, ResizeVolume, Volume};
use super::{blocking, sessions, volume, volume_with, ApiError, ApiState, JsonBody, QueryArgs};

/// List the volumes.
#[utoipa::path(
    get,
    path = "/api/v1/volumes",
    tag = "volumes",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every volume (of every shard, each with its `shard`, in a cluster of several)", body = Vec<Volume>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn list_volumes(
    State(state): State<ApiState>,
) -> Result<Json<Vec<Volume>>, ApiError> {
    let engine = state.engine.clone();
    let (volumes, hosts) =
        blocking(move || Ok((engine.list_volumes(), engine.list_hosts()))).await?;
    Ok(Json(
        volumes
            .into_iter()
            .map(|v| volume_with(&state, v, &hosts))
            .collect(),
    ))
}

/// Create a volume.
#[utoipa::path(
    post,
    path = "/api/v1/volumes",
    tag = "volumes",
    security(("bearer" = [])),
    params(("shard" = Option<u16>, Query, description = "In a cluster of several shards: the shard to create it in (default: this c.node's); passed on to that shard's owner")),
    request_body = CreateVolume,
    responses(
        (status = 201, description = "Created", body = Volume),
        (status = 503, description = "The shard asked has no owner c.node now", body = ErrorBody),
        (status = 400, description = "Invalid name, size, pool, block size or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "The name is taken", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn create_volume(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateVolume>,
) -> Result<(StatusCode, Json<Volume>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || {
        // Checked first: a refused class or limit creates nothing.
        if let Some(q) = &body.qos {
            q.validate()
                .map_err(|reason| EngineError::InvalidQos { reason })?;
        }
        let info = engine.create_volume_in(
            &body.name,
            body.size_bytes,
            body.pool.as_deref(),
            body.logical_block_size,
        )?;
        if body.qos.is_none() {
            return Ok(info);
        }
        engine.set_volume_qos(&body.name, body.qos)?;
        engine.volume_info(&body.name)
    })
    .await?;
    tracing::info!(volume = %info.name, size_bytes = info.size_bytes, "volume created");
    if let Some(q) = &info.qos {
        state.qos.volume(&info.name).set(&q.resolve());
    }
    Ok((StatusCode::CREATED, Json(volume(&state, info))))
}

/// A volume.
#[utoipa::path(
    get,
    path = "/api/v1/volumes/{name}",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    responses(
        (status = 200, description = "The volume", body = Volume),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn volume_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Volume>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.volume_info(&name)).await?;
    Ok(Json(volume(&state, info)))
}

/// Delete a volume (refused while it is mapped, has snapshots without `with_snapshots`, or
/// clients have it or a snapshot deleted with it open, without `force`).
#[utoipa::path(
    delete,
    path = "/api/v1/volumes/{name}",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume"), DeleteVolumeQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 409, description = "Mapped to a host, has snapshots, or clients have it open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn delete_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteVolumeQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    // The exports this delete ends: the volume, and with `with_snapshots` its snapshots.
    let exports = blocking(move || {
        let volume = engine.volume_info(&lookup)?;
        let mut exports = vec![volume.name];
        if query.with_snapshots {
            exports.extend(
                engine
                    .list_snapshots(Some(&lookup))?
                    .into_iter()
                    .map(|s| s.name),
            );
        }
        Ok(exports)
    })
    .await?;
    sessions::refuse_if_busy(
        &state,
        &exports,
        &format!("delete volume {name}"),
        query.force,
    )
    .await?;
    let engine = state.engine.clone();
    blocking(move || engine.delete_volume(&name, query.with_snapshots)).await?;
    forget_reservations(&state, exports).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Resize a volume.
#[utoipa::path(
    post,
    path = "/api/v1/volumes/{name}/resize",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = ResizeVolume,
    responses(
        (status = 200, description = "Resized", body = Volume),
        (status = 400, description = "Invalid size or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
pub(super) async fn resize_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ResizeVolume>,
) -> Result<Json<Volume>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.resize_volume(&name, body.size_bytes)).await?;
    Ok(Json(volume(&state, info)))
}

/// The SCSI reservation records of deleted exports go. The delete is done whatever happens
/// here: a record left behind is dropped at the next start (it names no export).
pub(super) async fn forget_reservations(state: &ApiState, exports: Vec<String>) {
    let records = state.reservations.clone();
    let _ = tokio::task::spawn_blocking(move || {
        for export in exports {
            if let Err(error) = records.remove(&export) {
                tracing::warn!(%export, %error, "could not remove the reservation record of a deleted export");
            }
        }
    })
    .await;
}
