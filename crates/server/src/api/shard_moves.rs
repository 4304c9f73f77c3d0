//! `POST /api/v1/shards/{shard}/move` (`{"to": ID}`): ask that c.node `ID` own the shard; its
//! owner gives it there while running and the shard stays pinned there (see
//! [`crate::ha::shard_moves`]). `DELETE` the same path: unpin it. Any c.node answers: the
//! request is a record in etcd that the shard's owner acts on.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use weft_engine::ShardId;

use super::{ApiError, ApiState, ErrorBody};
use crate::ha::ownership::Ownership;
use crate::ha::registry::{self, CnodeRole};
use crate::ha::shard_moves::{self, MoveRecord};

/// `POST /api/v1/shards/{shard}/move`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveShardRequest {
    /// The c.node that should own the shard (`weft cnode list`).
    pub to: String,
}

/// What a move request did.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MoveShardAnswer {
    pub shard: u16,
    /// The shard's owner when asked.
    pub from: String,
    pub to: String,
    /// The owner is handing it over (`false`: `to` owns it already; now pinned there).
    pub moving: bool,
    pub message: String,
}

/// Move a shard to another c.node, while both run: its owner stops the shard's engine
/// clean (requests pause, none fails) and `to` adopts it. The shard stays pinned to `to`:
/// the spread policy does not move it away (`DELETE` unpins). Only a shard its owner owns
/// besides its own moves this way; a c.node's own shard moves to its standby by a drain.
#[utoipa::path(
    post,
    path = "/api/v1/shards/{shard}/move",
    operation_id = "move_shard",
    tag = "cluster",
    security(("bearer" = [])),
    params(("shard" = u16, Path, description = "The shard (weft cnode list)")),
    request_body = MoveShardRequest,
    responses(
        (status = 202, description = "The owner hands the shard over", body = MoveShardAnswer),
        (status = 200, description = "`to` owns the shard already (now pinned there)", body = MoveShardAnswer),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such c.node", body = ErrorBody),
        (status = 409, description = "Single-process datastore; the shard is its owner's own shard or `to`'s; or `to` owns no shard of its own (a standby)", body = ErrorBody),
        (status = 503, description = "The shard has no owner now, or etcd did not answer", body = ErrorBody),
    ),
)]
pub(super) async fn move_shard(
    State(state): State<ApiState>,
    Path(shard): Path<u16>,
    Json(req): Json<MoveShardRequest>,
) -> Result<(StatusCode, Json<MoveShardAnswer>), ApiError> {
    let kv = kv_of(&state)?;
    let shard = ShardId(shard);
    let to = req.to;
    let read_kv = Arc::clone(&kv);
    let (records, owner) = tokio::task::spawn_blocking(move || {
        Ok::<_, anyhow::Error>((
            registry::list(&*read_kv)?,
            Ownership::owner(&*read_kv, shard)?,
        ))
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
    .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, format!("{e:#}")))?;
    let conflict = |m: String| Err(ApiError(StatusCode::CONFLICT, m));
    let Some(target) = records.iter().find(|r| r.id == to) else {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no c.node {to} is registered"),
        ));
    };
    let Some(owner) = owner else {
        return Err(ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("shard {shard} has no owner now: the c.node that starts with it (or holds its mirror) takes it; ask again then"),
        ));
    };
    if owner.id != to {
        if target.shard == shard {
            return conflict(format!("shard {shard} is c.node {to}'s own shard: it takes it over when the owner (c.node {}) is drained", owner.id));
        }
        if target.role != CnodeRole::Owner {
            return conflict(format!("c.node {to} owns no shard of its own (it is a standby or waiting): only a running owner adopts other shards"));
        }
        if records.iter().any(|r| r.id == owner.id && r.shard == shard) {
            return conflict(format!("shard {shard} is c.node {}'s own shard (its journal, partner and standby are that shard's): drain c.node {} to move it to its standby", owner.id, owner.id));
        }
    }
    let record = MoveRecord {
        shard,
        to: to.clone(),
        asked_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    tokio::task::spawn_blocking(move || shard_moves::ask(&*kv, &record))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    let moving = owner.id != to;
    tracing::warn!(shard = shard.0, from = %owner.id, %to, "shard move requested");
    let message = if moving {
        format!("c.node {} hands shard {shard} to c.node {to} while both run (requests pause, none fails); it stays there: the spread policy leaves it (unpin to let it move again)", owner.id)
    } else {
        format!("c.node {to} owns shard {shard} already; it is pinned there")
    };
    let status = if moving {
        StatusCode::ACCEPTED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(MoveShardAnswer {
            shard: shard.0,
            from: owner.id,
            to,
            moving,
            message,
        }),
    ))
}

/// Unpin a shard: the spread policy may move it again.
#[utoipa::path(
    delete,
    path = "/api/v1/shards/{shard}/move",
    operation_id = "unpin_shard",
    tag = "cluster",
    security(("bearer" = [])),
    params(("shard" = u16, Path, description = "The shard")),
    responses(
        (status = 204, description = "Unpinned"),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "The shard is not pinned", body = ErrorBody),
        (status = 409, description = "Single-process datastore", body = ErrorBody),
        (status = 503, description = "etcd did not answer", body = ErrorBody),
    ),
)]
pub(super) async fn unpin(
    State(state): State<ApiState>,
    Path(shard): Path<u16>,
) -> Result<StatusCode, ApiError> {
    let kv = kv_of(&state)?;
    let had = tokio::task::spawn_blocking(move || shard_moves::unpin(&*kv, ShardId(shard)))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    if had {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("shard {shard} is not pinned"),
        ))
    }
}

fn kv_of(state: &ApiState) -> Result<Arc<dyn weft_meta::MetaStore>, ApiError> {
    state
        .cluster
        .as_ref()
        .map(|c| Arc::clone(c.kv()))
        .ok_or_else(|| {
            ApiError(
                StatusCode::CONFLICT,
                "this is a single-process datastore (weft serve): it has one shard".into(),
            )
        })
}
