//! The management API: HTTP/JSON under `/api/v1/`, every request authenticated by the bearer
//! token created at first start. Handlers call the engine on the blocking pool.
//!
//! Volumes: `GET|POST /volumes`, `GET|DELETE /volumes/{name}[?with_snapshots=true]`,
//! `POST /volumes/{name}/{resize,snapshots,refresh,rollback}`.
//! Snapshots: `GET /snapshots[?volume=V]`, `GET|DELETE /snapshots/{name}[?keep_hidden=true]`,
//! `POST /snapshots/{name}/clones`. A snapshot's `name` is its full name `VOLUME@SNAPSHOT`
//! (`/snapshots/pgdata@monday`, or `pgdata%40monday`), beside its `short_name`; a name without
//! `@` finds the one snapshot with that short name (409 listing them when several have it).
//! Volumes and snapshots carry their `nbd_uri` (a snapshot is exported read-only under its
//! full name) and, with iSCSI on, their own target's `iscsi_uri` (`@` is `:` there). Hosts and
//! LUN mappings: see [`hosts`]. Errors are `{"error": message}` with the engine's text.

use std::sync::Arc;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use weft_engine::{Engine, EngineError, LogicalBlockSize, SnapshotInfo, VolumeInfo};

use crate::cluster::ClusterPlacement;

mod cluster;
mod hosts;
pub mod stats;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub engine: Arc<Engine>,
    /// The cluster this c.node serves (`None`: single-process mode).
    pub cluster: Option<Arc<ClusterPlacement>>,
    pub token: Arc<str>,
    /// `host:port` of the NBD listener, for volume URIs.
    pub nbd_address: Arc<str>,
    /// `host:port` of the first iSCSI portal (`None`: no iSCSI), for LUN URIs.
    pub iscsi_portal: Option<Arc<str>>,
    /// The array target hosts log in to.
    pub array_target: Arc<str>,
    /// Per-export I/O statistics.
    pub io: Arc<crate::io_stats::IoStats>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVolume {
    name: String,
    size_bytes: u64,
    /// A pool of the cluster (default: the c.node's pool).
    #[serde(default)]
    pool: Option<String>,
    /// The sector size hosts see: 512 (the default) or 4096; anything else is a 400.
    #[serde(default)]
    logical_block_size: LogicalBlockSize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResizeVolume {
    size_bytes: u64,
}

/// Body of snapshot create and clone create: the new snapshot's or volume's name.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NewName {
    name: String,
}

/// Body of refresh and rollback.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ToSnapshot {
    snapshot: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteVolumeQuery {
    #[serde(default)]
    with_snapshots: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeleteSnapshotQuery {
    #[serde(default)]
    keep_hidden: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListSnapshotsQuery {
    volume: Option<String>,
}

/// An API error: status and message.
#[derive(Debug)]
pub struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// The one place engine errors become HTTP statuses.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let status = match &e {
            EngineError::UnknownVolume { .. }
            | EngineError::UnknownSnapshot { .. }
            | EngineError::UnknownHost { .. }
            | EngineError::NotMapped { .. }
            | EngineError::Gone => StatusCode::NOT_FOUND,
            EngineError::VolumeExists { .. }
            | EngineError::HostExists { .. }
            | EngineError::Mapped { .. }
            | EngineError::NameTaken { .. }
            | EngineError::SnapshotExists { .. }
            | EngineError::AmbiguousSnapshot { .. }
            | EngineError::InUse { .. }
            | EngineError::HasSnapshots { .. }
            | EngineError::WrongFamily { .. }
            | EngineError::NotOwnSnapshot { .. }
            | EngineError::ChainTooDeep { .. } => StatusCode::CONFLICT,
            EngineError::InvalidName { .. }
            | EngineError::InvalidSnapshotName { .. }
            | EngineError::InvalidHost { .. }
            | EngineError::InvalidSize { .. }
            | EngineError::InvalidPool { .. }
            | EngineError::OutOfRange { .. } => StatusCode::BAD_REQUEST,
            EngineError::NoSpace => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/v1/volumes", get(list_volumes).post(create_volume))
        .route(
            "/api/v1/volumes/{name}",
            get(volume_info).delete(delete_volume),
        )
        .route("/api/v1/volumes/{name}/resize", post(resize_volume))
        .route("/api/v1/volumes/{name}/snapshots", post(create_snapshot))
        .route("/api/v1/volumes/{name}/refresh", post(refresh_volume))
        .route("/api/v1/volumes/{name}/rollback", post(rollback_volume))
        .route("/api/v1/snapshots", get(list_snapshots))
        .route(
            "/api/v1/snapshots/{name}",
            get(snapshot_info).delete(delete_snapshot),
        )
        .route("/api/v1/snapshots/{name}/clones", post(create_clone))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/stats/volumes", get(stats::volumes))
        .route("/api/v1/stats/stream", get(stats::stream))
        .route("/api/v1/volumes/{name}/stats", get(stats::series))
        .route("/api/v1/sync", post(sync))
        .route("/api/v1/gc", post(gc))
        .route("/api/v1/checkpoint", post(checkpoint))
        .route("/api/v1/cluster", get(cluster::status))
        .route(
            "/api/v1/cluster/repair",
            post(cluster::repair_now).put(cluster::set_repair_rate),
        )
        .route("/api/v1/cluster/scrub", post(cluster::scrub))
        .route("/api/v1/dnodes", get(cluster::dnodes))
        .route("/api/v1/dnodes/{id}", get(cluster::dnode_info))
        .route("/api/v1/dnodes/{id}/out", post(cluster::dnode_out))
        .route("/api/v1/dnodes/{id}/in", post(cluster::dnode_in))
        .route(
            "/api/v1/pools",
            get(cluster::pools).post(cluster::create_pool),
        )
        .route("/api/v1/pools/{name}", get(cluster::pool_info))
        .route("/api/v1/hosts", get(hosts::list).post(hosts::create))
        .route(
            "/api/v1/hosts/{name}",
            get(hosts::info).delete(hosts::delete),
        )
        .route("/api/v1/hosts/{name}/luns", post(hosts::map))
        .route(
            "/api/v1/hosts/{name}/luns/{export}",
            axum::routing::delete(hosts::unmap),
        )
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        // Probes for load balancers and supervisors: no token, no data.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// The process answers.
async fn healthz() -> &'static str {
    "ok\n"
}

/// The datastore answers: its catalog can be read.
async fn readyz(State(state): State<ApiState>) -> Result<&'static str, ApiError> {
    let engine = state.engine.clone();
    blocking(move || Ok(engine.list_images().len())).await?;
    Ok("ready\n")
}

async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => {
            next.run(request).await
        }
        _ => ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".into(),
        )
        .into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
}

/// A volume or snapshot as JSON, with the NBD URI it is exported under (its name) and, with
/// iSCSI on, the URI of LUN 0 of its own target.
fn with_uri(state: &ApiState, name: &str, info: &impl Serialize) -> serde_json::Value {
    let mut v = serde_json::to_value(info).expect("volume and snapshot info serialise");
    v["nbd_uri"] = format!("nbd://{}/{name}", state.nbd_address).into();
    if let Some(portal) = &state.iscsi_portal {
        v["iscsi_uri"] = format!(
            "iscsi://{portal}/{}/0",
            crate::iscsi_listener::target_name(name)
        )
        .into();
    }
    v
}

fn volume_json(state: &ApiState, info: &VolumeInfo) -> serde_json::Value {
    with_uri(state, &info.name, info)
}

fn snapshot_json(state: &ApiState, info: &SnapshotInfo) -> serde_json::Value {
    with_uri(state, &info.name, info)
}

async fn list_volumes(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let volumes = blocking(move || Ok(engine.list_volumes())).await?;
    Ok(Json(
        volumes.iter().map(|v| volume_json(&state, v)).collect(),
    ))
}

/// A JSON body, or 400 with the parser's reason (axum's own rejection would be 422).
pub(crate) struct JsonBody<T>(pub(crate) T);

/// Query parameters, or 400 with the parser's reason as a JSON error like every other.
struct QueryArgs<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequestParts<S>
    for QueryArgs<T>
{
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(QueryArgs(value)),
            Err(rejection) => Err(ApiError(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(ApiError(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

async fn create_volume(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateVolume>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || {
        engine.create_volume_in(
            &body.name,
            body.size_bytes,
            body.pool.as_deref(),
            body.logical_block_size,
        )
    })
    .await?;
    tracing::info!(volume = %info.name, size_bytes = info.size_bytes, "volume created");
    Ok((StatusCode::CREATED, Json(volume_json(&state, &info))))
}

async fn volume_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.volume_info(&name)).await?;
    Ok(Json(volume_json(&state, &info)))
}

async fn delete_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteVolumeQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_volume(&name, query.with_snapshots)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resize_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ResizeVolume>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.resize_volume(&name, body.size_bytes)).await?;
    Ok(Json(volume_json(&state, &info)))
}

async fn create_snapshot(
    State(state): State<ApiState>,
    Path(volume): Path<String>,
    JsonBody(body): JsonBody<NewName>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_snapshot(&volume, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(snapshot_json(&state, &info))))
}

async fn list_snapshots(
    State(state): State<ApiState>,
    QueryArgs(query): QueryArgs<ListSnapshotsQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let snapshots = blocking(move || engine.list_snapshots(query.volume.as_deref())).await?;
    Ok(Json(
        snapshots.iter().map(|s| snapshot_json(&state, s)).collect(),
    ))
}

async fn snapshot_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.snapshot_info(&name)).await?;
    Ok(Json(snapshot_json(&state, &info)))
}

async fn delete_snapshot(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteSnapshotQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_snapshot(&name, query.keep_hidden)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn create_clone(
    State(state): State<ApiState>,
    Path(snapshot): Path<String>,
    JsonBody(body): JsonBody<NewName>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_clone(&snapshot, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(volume_json(&state, &info))))
}

async fn refresh_volume(
    State(state): State<ApiState>,
    Path(volume): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.refresh_volume(&volume, &body.snapshot)).await?;
    Ok(Json(volume_json(&state, &info)))
}

async fn rollback_volume(
    State(state): State<ApiState>,
    Path(volume): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.rollback_volume(&volume, &body.snapshot)).await?;
    Ok(Json(volume_json(&state, &info)))
}

async fn stats(State(state): State<ApiState>) -> Result<Json<weft_engine::EngineStats>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || Ok(engine.stats())).await?))
}

async fn sync(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.sync()).await?;
    Ok(Json(serde_json::json!({ "synced": true })))
}

async fn gc(State(state): State<ApiState>) -> Result<Json<weft_engine::GcReport>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || engine.gc_now()).await?))
}

async fn checkpoint(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.checkpoint_now()).await?;
    Ok(Json(serde_json::json!({ "checkpointed": true })))
}
