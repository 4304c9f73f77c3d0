//! The management API: HTTP/JSON under `/api/v1/`, every request authenticated by the bearer
//! token created at first start (`api-token`), or by the read-only one, which may only read;
//! every answer to an accepted token says its role in `x-weft-role` (`admin`, `read-only`).
//! Handlers call the engine on the blocking pool.
//!
//! Volumes ([`volumes`]): `GET|POST /volumes`, `GET|DELETE /volumes/{name}[?with_snapshots=true&force=true]`,
//! `POST /volumes/{name}/{resize,rename,snapshots,refresh,rollback}`,
//! `GET /volumes/{name}/sessions`, snapshot schedules (see [`schedules`]).
//! Delete, rename, refresh and rollback are refused (409) while clients have the volume open, unless
//! forced (`force`: a query parameter of the delete, a body field of refresh and rollback);
//! see [`sessions`].
//! Snapshots ([`snapshots`]): `GET /snapshots[?volume=V]`, `GET|DELETE /snapshots/{name}[?keep_hidden=true]`,
//! `POST /snapshots/{name}/clones`. A snapshot's `name` is its full name `VOLUME@SNAPSHOT`
//! (`/snapshots/pgdata@monday`, or `pgdata%40monday`), beside its `short_name`; a name without
//! `@` finds the one snapshot with that short name (409 listing them when several have it).
//! Consistency groups: see [`groups`].
//! Volumes and snapshots carry their `nbd_uri` (a snapshot is exported read-only under its
//! full name) and, with iSCSI on, their own target's `iscsi_uri` (`@` is `:` there). Hosts and
//! LUN mappings: see [`hosts`]. Errors are `{"error": message}` with the engine's text.
//!
//! Every handler carries its `#[utoipa::path]`; [`openapi`] gathers them into the OpenAPI
//! document checked in as `docs/openapi.json` and served at `GET /api/v1/openapi.json`. The
//! bodies are typed: engine types and [`types`].

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use weft_engine::{Engine, EngineError, SnapshotInfo, VolumeInfo};

use crate::cluster::ClusterPlacement;
use types::{Checkpointed, ErrorBody, Snapshot, Synced, Volume};

pub mod audit;
mod cluster;
mod cnodes;
mod group_routes;
mod groups;
mod host_catalog;
mod hosts;
pub mod openapi;
pub mod qos;
mod rename;
mod schedules;
mod sessions;
mod shard_moves;
mod shard_routes;
mod snapshots;
pub mod stats;
mod tiers;
pub mod types;
mod volumes;
use volumes::forget_reservations;

/// What handlers share.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub engine: Arc<Engine>,
    /// The read-only token (GET only; see [`audit`]).
    pub read_only_token: Arc<str>,
    /// Every call that changed something or was refused.
    pub audit: Arc<audit::AuditLog>,
    /// The used bytes over the last day, for the capacity report's growth rate.
    pub capacity: Arc<crate::capacity::CapacityHistory>,
    /// The cluster this c.node serves (`None`: single-process mode).
    pub cluster: Option<Arc<ClusterPlacement>>,
    /// This c.node's part in the compute layer (`None`: single-process mode).
    pub compute: Option<Arc<crate::ha::ComputeInfo>>,
    pub token: Arc<str>,
    /// `host:port` of the NBD listener, for volume URIs.
    pub nbd_address: Arc<str>,
    /// `host:port` of the first iSCSI portal (`None`: no iSCSI), for LUN URIs.
    pub iscsi_portal: Option<Arc<str>>,
    /// The array target hosts log in to.
    pub array_target: Arc<str>,
    /// Per-export I/O statistics.
    pub io: Arc<crate::io_stats::IoStats>,
    /// The volumes' throttles on this c.node (`crate::qos`).
    pub qos: Arc<crate::qos::QosRegistry>,
    /// The live client sessions of the front ends.
    pub sessions: Arc<crate::sessions::Sessions>,
    /// The SCSI reservation records, removed with their exports.
    pub reservations: crate::reservation_records::ReservationRecords,
    /// Every c.node's tokens (`None`: single-process mode): any of them is accepted here.
    pub cluster_tokens: Option<Arc<crate::cluster_tokens::ClusterTokens>>,
    /// The snapshot scheduler's clock (the wall clock but in tests).
    pub schedule_clock: crate::snapshot_scheduler::Clock,
    /// Heat per volume and extent, the tiers and their prices.
    pub tiering: Arc<crate::tiering::Tiering>,
    /// Every shard's exports as this c.node's front ends serve them, each with its shard
    /// and owner, for the statistics (`None`: single-process mode).
    pub router: Option<Arc<crate::ha::forward::shards::ShardRouter>>,
}

/// An API error: status and message.
#[derive(Debug)]
pub struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(ErrorBody { error: self.1 })).into_response()
    }
}

/// The one place engine errors become HTTP statuses.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let status = match &e {
            EngineError::UnknownVolume { .. }
            | EngineError::UnknownSnapshot { .. }
            | EngineError::UnknownHost { .. }
            | EngineError::UnknownGroup { .. }
            | EngineError::NoSchedule { .. }
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
            | EngineError::GroupConflict { .. }
            | EngineError::ChainTooDeep { .. } => StatusCode::CONFLICT,
            EngineError::InvalidName { .. }
            | EngineError::InvalidSnapshotName { .. }
            | EngineError::InvalidHost { .. }
            | EngineError::InvalidGroup { .. }
            | EngineError::InvalidSchedule { .. }
            | EngineError::InvalidSize { .. }
            | EngineError::InvalidQos { .. }
            | EngineError::InvalidPool { .. }
            | EngineError::OutOfRange { .. } => StatusCode::BAD_REQUEST,
            EngineError::NoSpace => StatusCode::INSUFFICIENT_STORAGE,
            // Stripes cannot be made durable now (d.nodes down): try again when they are back.
            EngineError::MaintenanceFailed { .. } => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route(
            "/api/v1/volumes",
            get(volumes::list_volumes).post(volumes::create_volume),
        )
        .route(
            "/api/v1/volumes/{name}",
            get(volumes::volume_info).delete(volumes::delete_volume),
        )
        .route(
            "/api/v1/volumes/{name}/resize",
            post(volumes::resize_volume),
        )
        .route("/api/v1/volumes/{name}/rename", post(rename::rename_volume))
        .route(
            "/api/v1/volumes/{name}/qos",
            get(qos::get).put(qos::put).delete(qos::clear),
        )
        .route("/api/v1/qos", get(qos::list))
        .route(
            "/api/v1/volumes/{name}/snapshot-schedule",
            axum::routing::put(schedules::set).delete(schedules::remove),
        )
        .route("/api/v1/snapshot-schedules", get(schedules::list))
        .route(
            "/api/v1/volumes/{name}/snapshots",
            post(snapshots::create_snapshot),
        )
        .route(
            "/api/v1/volumes/{name}/refresh",
            post(snapshots::refresh_volume),
        )
        .route(
            "/api/v1/volumes/{name}/rollback",
            post(snapshots::rollback_volume),
        )
        .route("/api/v1/volumes/{name}/sessions", get(sessions::of_volume))
        .route("/api/v1/sessions", get(sessions::all))
        .route("/api/v1/snapshots", get(snapshots::list_snapshots))
        .route(
            "/api/v1/snapshots/{name}",
            get(snapshots::snapshot_info).delete(snapshots::delete_snapshot),
        )
        .route(
            "/api/v1/snapshots/{name}/clones",
            post(snapshots::create_clone),
        )
        .route(
            "/api/v1/snapshots/{name}/sessions",
            get(sessions::of_snapshot),
        )
        .route("/api/v1/groups", get(groups::list).post(groups::create))
        .route(
            "/api/v1/groups/{name}",
            get(groups::info).delete(groups::delete),
        )
        .route(
            "/api/v1/groups/{name}/qos",
            get(qos::get_group)
                .put(qos::put_group)
                .delete(qos::clear_group),
        )
        .route("/api/v1/groups/{name}/members", post(groups::add_members))
        .route(
            "/api/v1/groups/{name}/members/{volume}",
            axum::routing::delete(groups::remove_member),
        )
        .route(
            "/api/v1/groups/{name}/snapshots",
            post(groups::create_snapshot),
        )
        .route("/api/v1/groups/{name}/refresh", post(groups::refresh))
        .route("/api/v1/groups/{name}/rollback", post(groups::rollback))
        .route(
            "/api/v1/group-snapshots/{name}",
            get(groups::snapshot_info).delete(groups::delete_snapshot),
        )
        .route("/api/v1/group-snapshots/{name}/clones", post(groups::clone))
        .route("/api/v1/version", get(version))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/capacity", get(capacity))
        .route("/api/v1/audit", get(audit::list))
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
        .route("/api/v1/cnodes", get(cnodes::list))
        .route("/api/v1/cnodes/{id}/drain", post(cnodes::drain))
        .route(
            "/api/v1/shards/{shard}/move",
            post(shard_moves::move_shard).delete(shard_moves::unpin),
        )
        .route("/api/v1/dnodes/{id}", get(cluster::dnode_info))
        .route("/api/v1/dnodes/{id}/out", post(cluster::dnode_out))
        .route("/api/v1/dnodes/{id}/in", post(cluster::dnode_in))
        .route(
            "/api/v1/pools",
            get(cluster::pools).post(cluster::create_pool),
        )
        .route("/api/v1/pools/{name}", get(cluster::pool_info))
        .route("/api/v1/tiers", get(tiers::list))
        .route("/api/v1/tiers/advice", get(tiers::advice))
        .route("/api/v1/tiers/{name}", axum::routing::put(tiers::set))
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
        .route(
            "/api/v1/hosts/{name}/initiators",
            post(hosts::add_initiator),
        )
        .route(
            "/api/v1/hosts/{name}/initiators/{iqn}",
            axum::routing::delete(hosts::remove_initiator),
        )
        .route(
            "/api/v1/hosts/{name}/chap",
            axum::routing::put(hosts::set_chap).delete(hosts::remove_chap),
        )
        // Inside the token check: another shard's volumes go to that shard's owner, host
        // definitions to the host catalog's (shard 0's), LUN maps to the export's shard's.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            host_catalog::route,
        ))
        // Another shard's consistency groups to the owner whose catalog has them.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            group_routes::route,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            shard_routes::route,
        ))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        // Probes for load balancers and supervisors: no token, no data.
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        // The API's own description: no token, no data.
        .route("/api/v1/openapi.json", get(openapi::serve))
        .merge(crate::web_ui::router()) // the web UI's static files: no token, no data
        .with_state(state)
}

/// The server's version (the CLI's `weft status` shows it beside its own).
#[utoipa::path(
    get,
    path = "/api/v1/version",
    tag = "probes",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The version", body = types::Version),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
async fn version() -> Json<types::Version> {
    Json(types::Version {
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// The process answers.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "probes",
    responses((status = 200, description = "`ok`", body = String, content_type = "text/plain")),
)]
async fn healthz() -> &'static str {
    "ok\n"
}

/// The datastore answers: its catalog can be read.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "probes",
    responses(
        (status = 200, description = "`ready`", body = String, content_type = "text/plain"),
        (status = 500, description = "The datastore does not answer", body = ErrorBody),
    ),
)]
async fn readyz(State(state): State<ApiState>) -> Result<&'static str, ApiError> {
    let engine = state.engine.clone();
    blocking(move || Ok(engine.list_images().len())).await?;
    Ok("ready\n")
}

/// The role another c.node's token has here (read from etcd again if it is new to us).
async fn cluster_role(
    tokens: Option<Arc<crate::cluster_tokens::ClusterTokens>>,
    presented: String,
) -> audit::Role {
    use crate::cluster_tokens::TokenRole;
    let Some(tokens) = tokens else {
        return audit::Role::Unknown;
    };
    let role = match tokens.role(&presented) {
        Some(role) => Some(role),
        None => tokio::task::spawn_blocking(move || tokens.role_or_refresh(&presented))
            .await
            .ok()
            .flatten(),
    };
    match role {
        Some(TokenRole::Admin) => audit::Role::Admin,
        Some(TokenRole::ReadOnly) => audit::Role::ReadOnly,
        None => audit::Role::Unknown,
    }
}

/// The response header that names the role of the token presented: `admin` or `read-only`.
pub const ROLE_HEADER: &str = "x-weft-role";

async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    let role = match presented {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => audit::Role::Admin,
        Some(t) if constant_time_eq(t.as_bytes(), state.read_only_token.as_bytes()) => {
            audit::Role::ReadOnly
        }
        Some(t) => cluster_role(state.cluster_tokens.clone(), t).await,
        None => audit::Role::Unknown,
    };
    let method = request.method().clone();
    let reads = method == axum::http::Method::GET || method == axum::http::Method::HEAD;
    let path = request.uri().path_and_query().map_or_else(
        || request.uri().path().to_string(),
        |p| p.as_str().to_string(),
    );
    let mut response = match role {
        audit::Role::Admin => next.run(request).await,
        audit::Role::ReadOnly if reads => next.run(request).await,
        audit::Role::ReadOnly => ApiError(
            StatusCode::FORBIDDEN,
            "this token is read-only (api-token-read-only): it may not change anything".into(),
        )
        .into_response(),
        audit::Role::Unknown => ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".into(),
        )
        .into_response(),
    };
    // Which role the token has, for a client that adapts to it (the web UI hides its actions
    // from a read-only token's viewers).
    let role_name = match role {
        audit::Role::Admin => Some("admin"),
        audit::Role::ReadOnly => Some("read-only"),
        audit::Role::Unknown => None,
    };
    if let Some(name) = role_name {
        response
            .headers_mut()
            .insert(ROLE_HEADER, header::HeaderValue::from_static(name));
    }
    let status = response.status();
    let entry = audit::AuditEntry {
        time_ms: crate::io_stats::unix_ms(),
        role,
        method: method.to_string(),
        path,
        status: status.as_u16(),
        repeats: 0,
    };
    // Allowed reads are coalesced: the UI polls every two seconds.
    if reads && status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN {
        state.audit.record_read(entry);
    } else {
        state.audit.record(entry);
    }
    response
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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

fn nbd_uri(state: &ApiState, name: &str) -> String {
    format!("nbd://{}/{name}", state.nbd_address)
}

/// With iSCSI on, LUN 0 of the export's own target (`@` is `:` in target names).
fn iscsi_uri(state: &ApiState, name: &str) -> Option<String> {
    state.iscsi_portal.as_ref().map(|portal| {
        format!(
            "iscsi://{portal}/{}/0",
            crate::iscsi_listener::target_name(name)
        )
    })
}

fn volume(state: &ApiState, info: VolumeInfo) -> Volume {
    volume_with(state, info, &state.engine.list_hosts())
}

/// A volume's JSON, its host mappings found among `hosts` (listed once for a whole list).
fn volume_with(state: &ApiState, info: VolumeInfo, hosts: &[weft_engine::HostInfo]) -> Volume {
    Volume {
        nbd_uri: nbd_uri(state, &info.name),
        iscsi_uri: iscsi_uri(state, &info.name),
        sessions: state.sessions.of_export(&info.name),
        hosts: mappings(state, &info.name, hosts),
        served_by: served_by(state),
        info,
    }
}

/// This c.node owns every family (one owner at a time), with its partner.
fn served_by(state: &ApiState) -> Option<types::ServedBy> {
    state.compute.as_ref().map(|c| types::ServedBy {
        owner: c.id.clone(),
        partner: c.partner.clone(),
        write_buffer: c.write_buffer().to_string(),
    })
}

fn snapshot(state: &ApiState, info: SnapshotInfo) -> Snapshot {
    snapshot_with(state, info, &state.engine.list_hosts())
}

fn snapshot_with(
    state: &ApiState,
    info: SnapshotInfo,
    hosts: &[weft_engine::HostInfo],
) -> Snapshot {
    Snapshot {
        nbd_uri: nbd_uri(state, &info.name),
        iscsi_uri: iscsi_uri(state, &info.name),
        sessions: state.sessions.of_export(&info.name),
        hosts: mappings(state, &info.name, hosts),
        served_by: served_by(state),
        info,
    }
}

fn mappings(
    state: &ApiState,
    export: &str,
    hosts: &[weft_engine::HostInfo],
) -> Vec<types::HostMapping> {
    types::HostMapping::of(
        export,
        hosts,
        &state.array_target,
        state.iscsi_portal.as_deref(),
    )
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

/// Engine-wide figures: data reduction, space, write amplification, GC, repair.
#[utoipa::path(
    get,
    path = "/api/v1/stats",
    operation_id = "engine_stats",
    tag = "stats",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The figures", body = weft_engine::EngineStats),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
async fn stats(State(state): State<ApiState>) -> Result<Json<weft_engine::EngineStats>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || Ok(engine.stats())).await?))
}

/// Capacity: the free space of the file systems under the data dir and every d.node disk
/// (each counted once), used, usable after redundancy, overcommit, days to full at the recent
/// growth, and warnings at 80 % and 90 %.
#[utoipa::path(
    get,
    path = "/api/v1/capacity",
    tag = "stats",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The capacity report", body = crate::capacity::CapacityReport),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
async fn capacity(
    State(state): State<ApiState>,
) -> Result<Json<crate::capacity::CapacityReport>, ApiError> {
    Ok(Json(
        blocking(move || {
            Ok(crate::capacity::report_now(
                &state.engine,
                state.cluster.as_deref(),
                &state.capacity,
            ))
        })
        .await?,
    ))
}

/// Wait until every acknowledged write is in sealed segments.
#[utoipa::path(
    post,
    path = "/api/v1/sync",
    tag = "maintenance",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Synced", body = Synced),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 503, description = "Stripes cannot be made durable now (too many d.nodes of a placement group down): try again when they are back", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
async fn sync(State(state): State<ApiState>) -> Result<Json<Synced>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.sync()).await?;
    Ok(Json(Synced { synced: true }))
}

/// Compact segments now.
#[utoipa::path(
    post,
    path = "/api/v1/gc",
    tag = "maintenance",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the run did", body = weft_engine::GcReport),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 503, description = "Stripes cannot be made durable now (too many d.nodes of a placement group down): try again when they are back", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
async fn gc(State(state): State<ApiState>) -> Result<Json<weft_engine::GcReport>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || engine.gc_now()).await?))
}

/// Checkpoint the maps now.
#[utoipa::path(
    post,
    path = "/api/v1/checkpoint",
    tag = "maintenance",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Checkpointed", body = Checkpointed),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
        (status = 503, description = "Stripes cannot be made durable now (too many d.nodes of a placement group down): try again when they are back", body = ErrorBody),
        (status = 507, description = "Out of space", body = ErrorBody),
    ),
)]
async fn checkpoint(State(state): State<ApiState>) -> Result<Json<Checkpointed>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.checkpoint_now()).await?;
    Ok(Json(Checkpointed { checkpointed: true }))
}
