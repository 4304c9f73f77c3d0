//! Cluster endpoints of the management API: `GET /cluster` (d.nodes, pools and their PG
//! health, repair progress), `GET /dnodes`, `GET /dnodes/{id}`, `POST /dnodes/{id}/out`,
//! `POST /dnodes/{id}/in`, `GET|POST /pools`, `GET /pools/{name}`, `PUT /cluster/repair`
//! (`{"rate_bytes_per_s": N}`), `POST /cluster/repair` (scan now) and `POST /cluster/scrub`
//! (verify every chunk on every d.node now; corrupt ones are rebuilt). In single-process mode
//! `/cluster` reports the local d.node and the rest answer 409 (no cluster).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use weft_ec::Redundancy;

use super::types::{
    ClusterStatus, ClusterWideStatus, ComputeStatus, CreatePool, DnodeOut, ErrorBody, LocalNode,
    PoolCreated, RepairRate, RepairScan, ScanState, ScrubReport, SingleProcessStatus,
};
use super::{ApiError, ApiState, JsonBody};
use crate::cluster::pool_tiers::PoolTier;
use crate::cluster::{ClusterPlacement, CreatePoolError, NodeState, NodeStatus, PoolStatus};
use crate::tiering::TierPrices;

/// Placement groups of a pool created without a count.
const PG_COUNT_DEFAULT: u32 = 64;

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

/// The cluster's health.
///
/// Its d.nodes, pools and their PG health, and repair progress (in single-process mode: the
/// local d.node).
#[utoipa::path(
    get,
    path = "/api/v1/cluster",
    operation_id = "cluster_status",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The status, by `mode`", body = ClusterStatus),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn status(State(state): State<ApiState>) -> Result<Json<ClusterStatus>, ApiError> {
    let engine = state.engine.clone();
    let single = state.cluster.is_none();
    let (stats, local_capacity_bytes) = tokio::task::spawn_blocking(move || {
        let stats = engine.stats();
        // statvfs of the local store, only where there is one.
        let local = single
            .then(|| crate::capacity::local_store_capacity_bytes(&engine, stats.capacity_bytes))
            .flatten();
        (stats, local)
    })
    .await
    .map_err(internal)?;
    let Some(c) = &state.cluster else {
        return Ok(Json(ClusterStatus::SingleProcess(SingleProcessStatus {
            nodes: vec![LocalNode {
                id: "local".into(),
                state: NodeState::Up,
                capacity_bytes: local_capacity_bytes,
                used_bytes: stats.used_bytes,
            }],
            pools: Vec::new(),
            repair: stats.repair,
            degraded_reads: stats.degraded_reads,
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
    Ok(Json(ClusterStatus::Cluster(ClusterWideStatus {
        healthy,
        nodes,
        pools,
        repair: stats.repair,
        degraded_reads: stats.degraded_reads,
        chunks_missed_at_write: stats.chunks_missed_at_write,
        capacity_bytes: stats.capacity_bytes,
        used_bytes: stats.used_bytes,
        compute: compute_status(state.compute.as_deref(), stats.buffer_bytes),
    })))
}

fn compute_status(c: Option<&crate::ha::ComputeInfo>, buffer_bytes: u64) -> ComputeStatus {
    let Some(c) = c else {
        return ComputeStatus {
            owner: String::new(),
            partner: None,
            write_buffer: "single".into(),
            detail: "one c.node".into(),
            write_buffer_bytes: buffer_bytes,
            lease_ttl_ms: 0,
        };
    };
    ComputeStatus {
        owner: c.id.clone(),
        partner: c.partner.clone(),
        write_buffer: c.write_buffer().into(),
        detail: c.mirror.describe(),
        write_buffer_bytes: buffer_bytes,
        lease_ttl_ms: c.lease_ttl.as_millis() as u64,
    }
}

/// The cluster's d.nodes.
#[utoipa::path(
    get,
    path = "/api/v1/dnodes",
    operation_id = "list_dnodes",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every d.node", body = Vec<NodeStatus>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
    ),
)]
pub(super) async fn dnodes(
    State(state): State<ApiState>,
) -> Result<Json<Vec<NodeStatus>>, ApiError> {
    Ok(Json(cluster(&state)?.nodes()))
}

/// A d.node.
#[utoipa::path(
    get,
    path = "/api/v1/dnodes/{id}",
    tag = "cluster",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The d.node")),
    responses(
        (status = 200, description = "The d.node", body = NodeStatus),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such d.node", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
    ),
)]
pub(super) async fn dnode_info(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<NodeStatus>, ApiError> {
    cluster(&state)?
        .nodes()
        .into_iter()
        .find(|n| n.id == id)
        .map(Json)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no d.node {id:?}")))
}

async fn set_out(state: ApiState, id: String, out: bool) -> Result<Json<DnodeOut>, ApiError> {
    let c = cluster(&state)?.clone();
    if !c.nodes().iter().any(|n| n.id == id) {
        return Err(ApiError(StatusCode::NOT_FOUND, format!("no d.node {id:?}")));
    }
    let needing = if out { c.pgs_needing(&id) } else { 0 };
    if needing > 0 {
        return Err(ApiError(
            StatusCode::CONFLICT,
            format!("d.node {id} is up and {needing} placement group(s) have fewer than k other d.nodes up: it may hold the only readable copy of their stripes; bring the others back first"),
        ));
    }
    let who = id.clone();
    tokio::task::spawn_blocking(move || c.set_out(&who, out))
        .await
        .map_err(internal)?
        .map_err(internal)?;
    tracing::info!(node = %id, out, "d.node marked by the operator");
    Ok(Json(DnodeOut { id, out }))
}

/// Mark a d.node out: its PG positions move to other d.nodes.
#[utoipa::path(
    post,
    path = "/api/v1/dnodes/{id}/out",
    tag = "cluster",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The d.node")),
    responses(
        (status = 200, description = "Marked out", body = DnodeOut),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such d.node", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster; or the d.node is up and some of its placement groups have fewer than k other d.nodes up", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn dnode_out(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<DnodeOut>, ApiError> {
    set_out(state, id, true).await
}

/// Mark a d.node in again.
#[utoipa::path(
    post,
    path = "/api/v1/dnodes/{id}/in",
    tag = "cluster",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The d.node")),
    responses(
        (status = 200, description = "Marked in", body = DnodeOut),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such d.node", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn dnode_in(
    State(state): State<ApiState>,
    Path(id): Path<String>,
) -> Result<Json<DnodeOut>, ApiError> {
    set_out(state, id, false).await
}

/// The cluster's pools.
#[utoipa::path(
    get,
    path = "/api/v1/pools",
    operation_id = "list_pools",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every pool", body = Vec<PoolStatus>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
    ),
)]
pub(super) async fn pools(
    State(state): State<ApiState>,
) -> Result<Json<Vec<PoolStatus>>, ApiError> {
    Ok(Json(cluster(&state)?.pools()))
}

/// A pool.
#[utoipa::path(
    get,
    path = "/api/v1/pools/{name}",
    tag = "cluster",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The pool")),
    responses(
        (status = 200, description = "The pool", body = PoolStatus),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such pool", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
    ),
)]
pub(super) async fn pool_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<PoolStatus>, ApiError> {
    cluster(&state)?
        .pools()
        .into_iter()
        .find(|p| p.name == name)
        .map(Json)
        .ok_or_else(|| ApiError(StatusCode::NOT_FOUND, format!("no pool {name:?}")))
}

/// Create a pool.
#[utoipa::path(
    post,
    path = "/api/v1/pools",
    tag = "cluster",
    security(("bearer" = [])),
    request_body = CreatePool,
    responses(
        (status = 201, description = "Created", body = PoolCreated),
        (status = 400, description = "Invalid redundancy, counts or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "The name is taken, or no cluster", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn create_pool(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreatePool>,
) -> Result<(StatusCode, Json<PoolCreated>), ApiError> {
    let c = cluster(&state)?.clone();
    let redundancy = Redundancy::parse(&body.redundancy)
        .map_err(|e| ApiError(StatusCode::BAD_REQUEST, format!("redundancy: {e}")))?;
    let pg_count = body.pg_count.unwrap_or(PG_COUNT_DEFAULT);
    let name = body.name.clone();
    let min_size = body.min_size;
    let tier = pool_tier(&state, &body)?;
    let created = tokio::task::spawn_blocking(move || {
        c.create_pool(&name, redundancy, pg_count, min_size, tier)
    })
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
        Json(PoolCreated {
            name: body.name,
            redundancy: redundancy.to_string(),
            pg_count,
            tier: body.tier,
        }),
    ))
}

/// The tier of a pool to create: prices both or neither, and a tier without its own prices
/// must be in this c.node's tier book (the advisor has to price it).
fn pool_tier(state: &ApiState, body: &CreatePool) -> Result<Option<PoolTier>, ApiError> {
    let bad = |m: String| ApiError(StatusCode::BAD_REQUEST, m);
    let prices = match (body.price_gb, body.price_iops) {
        (Some(price_gb), Some(price_iops)) => Some(TierPrices {
            price_gb,
            price_iops,
        }),
        (None, None) => None,
        _ => {
            return Err(bad(
                "give both --price-gb and --price-iops, or neither".into()
            ))
        }
    };
    let Some(name) = body.tier.clone() else {
        if prices.is_some() {
            return Err(bad("prices belong to a tier: give --tier too".into()));
        }
        return Ok(None);
    };
    if prices.is_none() && !state.tiering.book().tiers.contains_key(&name) {
        return Err(bad(format!(
            "the tier {name:?} has no prices: give --price-gb and --price-iops (or weft tier set)"
        )));
    }
    Ok(Some(PoolTier { name, prices }))
}

/// Set the rebuild rate limit.
#[utoipa::path(
    put,
    path = "/api/v1/cluster/repair",
    tag = "cluster",
    security(("bearer" = [])),
    request_body = RepairRate,
    responses(
        (status = 200, description = "The new limit", body = RepairRate),
        (status = 400, description = "Zero, or an invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn set_repair_rate(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<RepairRate>,
) -> Result<Json<RepairRate>, ApiError> {
    if body.rate_bytes_per_s == 0 {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            "rate_bytes_per_s must be above 0".into(),
        ));
    }
    state.engine.set_repair_rate(body.rate_bytes_per_s);
    Ok(Json(body))
}

/// Start a repair scan now.
#[utoipa::path(
    post,
    path = "/api/v1/cluster/repair",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "A scan was started", body = RepairScan),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn repair_now(
    State(state): State<ApiState>,
) -> Result<Json<RepairScan>, ApiError> {
    state.engine.repair_now();
    Ok(Json(RepairScan {
        scan: ScanState::Started,
    }))
}

/// Verify every chunk on every d.node now; corrupt ones are rebuilt.
#[utoipa::path(
    post,
    path = "/api/v1/cluster/scrub",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "What the scrub found", body = ScrubReport),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn scrub(State(state): State<ApiState>) -> Result<Json<ScrubReport>, ApiError> {
    let engine = state.engine.clone();
    let (checked, corrupt, failed) = tokio::task::spawn_blocking(move || engine.scrub())
        .await
        .map_err(internal)?;
    Ok(Json(ScrubReport {
        checked,
        corrupt: corrupt.iter().map(ToString::to_string).collect(),
        failed_stores: failed,
    }))
}
