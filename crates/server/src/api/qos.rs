//! QoS endpoints: `GET /volumes/{name}/qos` (the settings as set, the values in force, the
//! throttled counts), `PUT /volumes/{name}/qos` (a [`QosSettings`] body: replaces the
//! settings, live), `DELETE /volumes/{name}/qos` (no QoS), and `GET /qos` (every volume this
//! c.node throttles, for `weft top`); the same three on `/groups/{name}/qos` for a consistency
//! group's shared limits. The settings go to the catalog with the volume or group; the
//! throttle ([`crate::qos::QosRegistry`]) picks them up within a tick, and at once here.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use weft_engine::qos_settings::{resolve, QosSettings};

use super::types::ErrorBody;
use super::{blocking, ApiError, ApiState, JsonBody};

/// A volume's QoS: as set, in force, and what the throttle did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct VolumeQos {
    pub volume: String,
    /// As set (`class` and the fields given); absent: no QoS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<QosSettings>,
    /// In force: the class's values under the fields set.
    pub effective: QosSettings,
    /// I/Os that waited for a limit or the latency controller's cap since the server started.
    pub throttled_ios: u64,
    /// Their waits, summed.
    pub throttled_wait_seconds: f64,
    /// The latency controller's cap now (4 KiB units per second), while it holds another
    /// volume's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_cap_iops: Option<f64>,
    /// The p99 latency (µs) of the last 100 ms window with at least 20 I/Os on this c.node,
    /// as the latency target counts it: from the front end's receipt of a request to its
    /// reply, the volume's own throttle wait left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_us: Option<f64>,
}

fn answer(state: &ApiState, volume: String, settings: Option<QosSettings>) -> VolumeQos {
    let live = state.qos.states().into_iter().find(|s| s.name == volume);
    VolumeQos {
        effective: resolve(settings.as_ref()),
        settings,
        throttled_ios: live.as_ref().map_or(0, |s| s.throttled_ios),
        throttled_wait_seconds: live.as_ref().map_or(0.0, |s| s.throttled_wait_seconds),
        latency_cap_iops: live.as_ref().and_then(|s| s.cap_units_per_s),
        latency_p99_us: live.and_then(|s| s.latency_p99_us),
        volume,
    }
}

/// Store `settings` and apply every setting to this c.node's throttles now (all of them, so a
/// group member keeps the target it takes from its group).
async fn set(
    state: &ApiState,
    name: String,
    settings: Option<QosSettings>,
) -> Result<VolumeQos, ApiError> {
    let engine = state.engine.clone();
    let registry = state.qos.clone();
    let lookup = name.clone();
    let stored = blocking(move || {
        let stored = engine.set_volume_qos(&lookup, settings)?;
        registry.apply(&engine.volumes_qos(), &engine.groups_qos());
        Ok(stored)
    })
    .await?;
    Ok(answer(state, name, stored))
}

/// A volume's QoS settings and throttled counts.
#[utoipa::path(
    get,
    path = "/api/v1/volumes/{name}/qos",
    operation_id = "volume_qos",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    responses(
        (status = 200, description = "The volume's QoS", body = VolumeQos),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
    ),
)]
pub(super) async fn get(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<VolumeQos>, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    let settings = blocking(move || engine.volume_qos(&lookup)).await?;
    Ok(Json(answer(&state, name, settings)))
}

/// Set (replace) a volume's QoS, live: limits, burst, minimum share, latency target, class.
#[utoipa::path(
    put,
    path = "/api/v1/volumes/{name}/qos",
    operation_id = "set_volume_qos",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = QosSettings,
    responses(
        (status = 200, description = "Set", body = VolumeQos),
        (status = 400, description = "Unknown class, a zero limit, or an invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
    ),
)]
pub(super) async fn put(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<QosSettings>,
) -> Result<Json<VolumeQos>, ApiError> {
    Ok(Json(set(&state, name, Some(body)).await?))
}

/// Remove a volume's QoS (no limits, no target).
#[utoipa::path(
    delete,
    path = "/api/v1/volumes/{name}/qos",
    operation_id = "clear_volume_qos",
    tag = "volumes",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    responses(
        (status = 200, description = "Cleared", body = VolumeQos),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
    ),
)]
pub(super) async fn clear(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<VolumeQos>, ApiError> {
    Ok(Json(set(&state, name, None).await?))
}

/// Every volume this c.node throttles or counts, with its QoS and throttled counts.
#[utoipa::path(
    get,
    path = "/api/v1/qos",
    operation_id = "list_qos",
    tag = "stats",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Per volume", body = [VolumeQos]),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<Vec<VolumeQos>>, ApiError> {
    let engine = state.engine.clone();
    let stored = blocking(move || Ok(engine.volumes_qos())).await?;
    let mut names: Vec<String> = state.qos.states().into_iter().map(|s| s.name).collect();
    names.extend(stored.iter().map(|(n, _)| n.clone()));
    names.sort();
    names.dedup();
    Ok(Json(
        names
            .into_iter()
            .map(|n| {
                let settings = stored.iter().find(|(s, _)| *s == n).map(|(_, q)| q.clone());
                answer(&state, n, settings)
            })
            .collect(),
    ))
}

/// A consistency group's QoS: its limits are one set of buckets every member's I/O pays
/// (besides the member's own); its latency target and minimum share apply to each member
/// that sets none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GroupQos {
    pub group: String,
    /// As set; absent: no group QoS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<QosSettings>,
    /// In force: the class's values under the fields set.
    pub effective: QosSettings,
    /// Members' I/Os that waited for the group's buckets since the server started.
    pub throttled_ios: u64,
    /// Their waits for the group's buckets, summed.
    pub throttled_wait_seconds: f64,
}

fn group_answer(state: &ApiState, group: String, settings: Option<QosSettings>) -> GroupQos {
    let live = state.qos.group_state(&group);
    GroupQos {
        effective: resolve(settings.as_ref()),
        settings,
        throttled_ios: live.as_ref().map_or(0, |s| s.throttled_ios),
        throttled_wait_seconds: live.as_ref().map_or(0.0, |s| s.throttled_wait_seconds),
        group,
    }
}

/// Store a group's `settings` and apply every setting to this c.node's throttles now.
async fn set_group(
    state: &ApiState,
    name: String,
    settings: Option<QosSettings>,
) -> Result<GroupQos, ApiError> {
    let engine = state.engine.clone();
    let registry = state.qos.clone();
    let lookup = name.clone();
    let stored = blocking(move || {
        let stored = engine.set_group_qos(&lookup, settings)?;
        registry.apply(&engine.volumes_qos(), &engine.groups_qos());
        Ok(stored)
    })
    .await?;
    Ok(group_answer(state, name, stored))
}

/// A consistency group's QoS settings and throttled counts.
#[utoipa::path(
    get,
    path = "/api/v1/groups/{name}/qos",
    operation_id = "group_qos",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "The group's QoS", body = GroupQos),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
    ),
)]
pub(super) async fn get_group(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<GroupQos>, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    let settings = blocking(move || engine.group_qos(&lookup)).await?;
    Ok(Json(group_answer(&state, name, settings)))
}

/// Set (replace) a consistency group's QoS, live: limits its members share, burst, and a
/// latency target and minimum share for members without their own.
#[utoipa::path(
    put,
    path = "/api/v1/groups/{name}/qos",
    operation_id = "set_group_qos",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    request_body = QosSettings,
    responses(
        (status = 200, description = "Set", body = GroupQos),
        (status = 400, description = "Unknown class, a zero limit, or an invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
    ),
)]
pub(super) async fn put_group(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<QosSettings>,
) -> Result<Json<GroupQos>, ApiError> {
    Ok(Json(set_group(&state, name, Some(body)).await?))
}

/// Remove a consistency group's QoS (its members keep their own).
#[utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/qos",
    operation_id = "clear_group_qos",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "Cleared", body = GroupQos),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
    ),
)]
pub(super) async fn clear_group(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<GroupQos>, ApiError> {
    Ok(Json(set_group(&state, name, None).await?))
}
