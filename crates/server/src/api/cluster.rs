//! Cluster endpoints of the management API: `GET /cluster` (d.nodes, pools and their PG
//! health, repair progress), `GET /dnodes`, `GET /dnodes/{id}`, `POST /dnodes/{id}/out`,
//! `POST /dnodes/{id}/in`, `GET|POST /pools`, `GET /pools/{name}`, `PUT /cluster/repair`
//! (`{"rate_bytes_per_s": N}`), `POST /cluster/repair` (scan now) and `POST /cluster/scrub`
//! (verify every chunk on every d.node now; corrupt ones are rebuilt). In single-process mode
//! `/cluster` reports the local d.node and the rest answer 409 (no cluster).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use weft_ec::Redundancy;

use super::{ApiError, ApiState, JsonBody};
use crate::cluster::{ClusterPlacement, CreatePoolError};

/// Placement groups of a pool created without a count.
const PG_COUNT_DEFAULT: u32 = 64;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreatePool {
    name: String,
    /// `none`, `x3`, `4+2`, ...
    redundancy: String,
    pg_count: Option<u32>,
    /// Chunks durable before a stripe is (default min(k+1, k+m)).
    min_size: Option<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RepairRate {
    rate_bytes_per_s: u64,
}

fn cluster(state: &ApiState) -> Result<&std::sync::Arc<ClusterPlacement>, ApiError> {
    state.cluster.as_ref().ok_or_else(|| {
        ApiError(
            StatusCode::CONFLICT,
            "this is a single-process datastore (weft serve): d.nodes and pools belong to a cluster (weft cnode)".into(),
        )
    })
}

fn internal(e: impl std::fmt::Display) -> ApiError {
    ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

pub(super) async fn status(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    let stats = tokio::task::spawn_blocking(move || engine.stats())
        .await
        .map_err(internal)?;
    let repair = serde_json::to_value(&stats.repair).map_err(internal)?;
    let Some(c) = &state.cluster else {
        return Ok(Json(json!({
            "mode": "single-process",
            "nodes": [{
                "id": "local", "state": "up",
                "capacity_bytes": stats.capacity_bytes, "used_bytes": stats.used_bytes,
            }],
            "pools": [],
            "repair": repair,
            "degraded_reads": stats.degraded_reads,
        })));
    };
    let nodes = c.nodes();
    let pools = c.pools();
    // Healthy: every PG on up d.nodes, and a repair scan started after the last change of
    // the cluster (a d.node back, out, a map moved) found nothing left to rebuild.
    let healthy = pools
        .iter()
        .all(|p| p.pgs_degraded == 0 && p.pgs_incomplete == 0)
        && stats.repair.caught_up;
    Ok(Json(json!({
        "mode": "cluster",
        "healthy": healthy,
        "nodes": nodes,
        "pools": pools,
        "repair": repair,
        "degraded_reads": stats.degraded_reads,
        "chunks_missed_at_write": stats.chunks_missed_at_write,
        "capacity_bytes": stats.capacity_bytes,
        "used_bytes": stats.used_bytes,
    })))
}

pub(super) async fn dnodes(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(cluster(&state)?.nodes())))
}

pub(super) async fn dnode_info(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    cluster(&state)?
        .nodes()
        .into_iter()
        .find(|n| n.id == id)
        .map(|n| Json(json!(n)))
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no d.node {id:?}")))
}

async fn set_out(state: ApiState, id: String, out: bool) -> Result<Json<Value>, ApiError> {
    let c = cluster(&state)?.clone();
    if !c.nodes().iter().any(|n| n.id == id) {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no d.node {id:?}")));
    }
    let who = id.clone();
    tokio::task::spawn_blocking(move || c.set_out(&who, out))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    tracing::info!(node = %id, out, "d.node marked by the operator");
    Ok(Json(json!({ "id": id, "out": out })))
}

pub(super) async fn dnode_out(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_out(state, id, true).await
}

pub(super) async fn dnode_in(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<Value>, ApiError> {
    set_out(state, id, false).await
}

pub(super) async fn pools(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(cluster(&state)?.pools())))
}

pub(super) async fn pool_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    cluster(&state)?
        .pools()
        .into_iter()
        .find(|p| p.name == name)
        .map(|p| Json(json!(p)))
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no pool {name:?}")))
}

pub(super) async fn create_pool(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreatePool>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let c = cluster(&state)?.clone();
    let redundancy = Redundancy::parse(&body.redundancy)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("redundancy: {e}")))?;
    let pg_count = body.pg_count.unwrap_or(PG_COUNT_DEFAULT);
    let name = body.name.clone();
    let min_size = body.min_size;
    let created =
        tokio::task::spawn_blocking(move || c.create_pool(&name, redundancy, pg_count, min_size))
            .await
            .map_err(internal)?;
    match created {
        Ok(()) => {}
        Err(CreatePoolError::Exists) => {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!("a pool named {:?} exists", body.name),
            ))
        }
        Err(CreatePoolError::Invalid(m)) => return Err(ApiError(StatusCode::BAD_REQUEST, m)),
        Err(e) => return Err(internal(e)),
    }
    tracing::info!(pool = %body.name, %redundancy, pg_count, "pool created");
    Ok((
        StatusCode::CREATED,
        Json(
            json!({ "name": body.name, "redundancy": redundancy.to_string(), "pg_count": pg_count }),
        ),
    ))
}

pub(super) async fn set_repair_rate(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<RepairRate>,
) -> Result<Json<Value>, ApiError> {
    if body.rate_bytes_per_s == 0 {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "rate_bytes_per_s must be above 0".into(),
        ));
    }
    state.engine.set_repair_rate(body.rate_bytes_per_s);
    Ok(Json(json!({ "rate_bytes_per_s": body.rate_bytes_per_s })))
}

pub(super) async fn repair_now(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    state.engine.repair_now();
    Ok(Json(json!({ "scan": "started" })))
}

pub(super) async fn scrub(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    let (checked, corrupt, failed) = tokio::task::spawn_blocking(move || engine.scrub())
        .await
        .map_err(internal)?;
    let corrupt: Vec<String> = corrupt.iter().map(ToString::to_string).collect();
    Ok(Json(
        json!({ "checked": checked, "corrupt": corrupt, "failed_stores": failed }),
    ))
}
