//! QoS endpoints: `GET /volumes/{name}/qos` (the settings as set, the values in force, the
//! throttled counts), `PUT /volumes/{name}/qos` (a [`QosSettings`] body: replaces the
//! settings, live), `DELETE /volumes/{name}/qos` (no QoS), and `GET /qos` (every volume this
//! c.node throttles, for `weft top`). The settings go to the catalog with the volume; the
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
}

fn answer(state: &ApiState, volume: String, settings: Option<QosSettings>) -> VolumeQos {
    let live = state.qos.states().into_iter().find(|s| s.name == volume);
    VolumeQos {
        effective: resolve(settings.as_ref()),
        settings,
        throttled_ios: live.as_ref().map_or(0, |s| s.throttled_ios),
        throttled_wait_seconds: live.as_ref().map_or(0.0, |s| s.throttled_wait_seconds),
        latency_cap_iops: live.and_then(|s| s.cap_units_per_s),
        volume,
    }
}

/// Store `settings` and apply them to this c.node's throttle now.
async fn set(
    state: &ApiState,
    name: String,
    settings: Option<QosSettings>,
) -> Result<VolumeQos, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    let stored = blocking(move || engine.set_volume_qos(&lookup, settings)).await?;
    state.qos.volume(&name).set(&resolve(stored.as_ref()));
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
