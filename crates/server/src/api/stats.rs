//! Live per-volume statistics ([`crate::io_stats`]) over the API:
//!
//! - `GET /api/v1/stats/volumes`: every export's rates over the last second, IO intensity
//!   (IOPS per GB) and a one-minute sparkline of IOPS;
//! - `GET /api/v1/volumes/{name}/stats?step=100ms|1s|10s[&since_ms=T]`: the kept series (100 ms
//!   for a minute, 1 s for 15 minutes, 10 s for an hour) with a latency heat map per sample;
//! - `GET /api/v1/stats/stream[?volume=NAME]`: server-sent events, `sample` every 100 ms for
//!   one volume, or `volumes` (the `/stats/volumes` answer) every second.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::Json;
use futures_util::stream::{self, Stream};
use serde::{Deserialize, Serialize};

use super::types::ErrorBody;
use super::{blocking, ApiError, ApiState};
use crate::io_stats::{IoStats, OpRate, Sample, Step, HEAT_BOUNDS_US};

/// Samples in a sparkline (one per second).
const SPARK_SECONDS: usize = 60;
/// A 1 s sample older than this does not describe "now" (the export went idle).
const STALE_MS: u64 = 2_500;

/// Every export's recent rates.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumesStats {
    /// Unix ms of the answer.
    pub time_ms: u64,
    /// The rates are averages over this window.
    pub window_ms: u64,
    pub volumes: Vec<VolumeRate>,
}

/// One export's rates over the last second.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeRate {
    pub name: String,
    pub size_bytes: u64,
    pub read_only: bool,
    pub read: OpRate,
    pub write: OpRate,
    /// Read plus write IOPS per 10^9 bytes of provisioned size.
    pub iops_per_gb: f64,
    /// Read plus write IOPS per second over the last minute, oldest first.
    pub spark_iops: Vec<f32>,
    /// Percent of the last second with a request in flight (iostat's `%util`).
    #[serde(default)]
    pub util_pct: f32,
}

/// One export's series.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeSeries {
    pub name: String,
    pub step_ms: u64,
    /// Upper bound (µs) of each heat-map bucket; the last is `1e308` (no bound).
    pub heat_bounds_us: Vec<f64>,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct SeriesQuery {
    /// `100ms` (the default, kept for a minute), `1s` (15 minutes) or `10s` (an hour).
    step: Option<String>,
    /// Only samples after this Unix time in ms.
    #[serde(default)]
    since_ms: u64,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct StreamQuery {
    /// Stream this volume's (or snapshot's) 100 ms samples instead of every export's rates.
    volume: Option<String>,
}

fn volumes_stats(state: &ApiState) -> VolumesStats {
    let now = crate::io_stats::unix_ms();
    let recent: HashMap<String, Vec<Sample>> = state.io.latest(Step::Second, SPARK_SECONDS);
    let volumes = state
        .engine
        .list_images()
        .into_iter()
        .map(|image| {
            let samples = recent.get(&image.name).map(Vec::as_slice).unwrap_or(&[]);
            let last = samples
                .last()
                .filter(|s| now.saturating_sub(s.t_ms) <= STALE_MS);
            let (read, write) = last.map(|s| (s.read, s.write)).unwrap_or_default();
            let util_pct = last.map_or(0.0, |s| s.util_pct);
            let iops = f64::from(read.iops + write.iops);
            VolumeRate {
                iops_per_gb: if image.size_bytes == 0 {
                    0.0
                } else {
                    iops / (image.size_bytes as f64 / 1e9)
                },
                spark_iops: samples.iter().map(|s| s.read.iops + s.write.iops).collect(),
                name: image.name,
                size_bytes: image.size_bytes,
                read_only: image.read_only,
                read,
                write,
                util_pct,
            }
        })
        .collect();
    VolumesStats {
        time_ms: now,
        window_ms: Step::Second.millis(),
        volumes,
    }
}

/// Every export's rates over the last second, IO intensity and a one-minute sparkline.
#[utoipa::path(
    get,
    path = "/api/v1/stats/volumes",
    operation_id = "volume_rates",
    tag = "stats",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every volume's and snapshot's rates", body = VolumesStats),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn volumes(State(state): State<ApiState>) -> Result<Json<VolumesStats>, ApiError> {
    blocking(move || Ok(volumes_stats(&state))).await.map(Json)
}

fn heat_bounds() -> Vec<f64> {
    HEAT_BOUNDS_US
        .iter()
        .map(|b| *b as f64)
        .chain([1e308])
        .collect()
}

/// A volume's (or snapshot's) kept series, with a latency heat map per sample.
#[utoipa::path(
    get,
    path = "/api/v1/volumes/{name}/stats",
    operation_id = "volume_series",
    tag = "stats",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume or snapshot"), SeriesQuery),
    responses(
        (status = 200, description = "The series", body = VolumeSeries),
        (status = 400, description = "Invalid step", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume or snapshot", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn series(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    Query(query): Query<SeriesQuery>,
) -> Result<Json<VolumeSeries>, ApiError> {
    let step = match query.step.as_deref() {
        None => Step::Tenth,
        Some(text) => Step::parse(text).ok_or_else(|| {
            ApiError(
                StatusCode::BAD_REQUEST,
                format!("step {text:?}: use 100ms, 1s or 10s"),
            )
        })?,
    };
    let engine = state.engine.clone();
    let exists_name = name.clone();
    let exists =
        blocking(move || Ok(engine.list_images().iter().any(|i| i.name == exists_name))).await?;
    if !exists {
        return Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("no volume or snapshot named {name:?}"),
        ));
    }
    Ok(Json(VolumeSeries {
        samples: state.io.series(&name, step, query.since_ms),
        name,
        step_ms: step.millis(),
        heat_bounds_us: heat_bounds(),
    }))
}

/// A sample with its export's name, as streamed.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct NamedSample<'a> {
    name: &'a str,
    #[serde(flatten)]
    sample: &'a Sample,
}

/// Live statistics as server-sent events.
///
/// `sample` (a `NamedSample`) every 100 ms for one volume, or `volumes` (a `VolumesStats`)
/// every second.
#[utoipa::path(
    get,
    path = "/api/v1/stats/stream",
    operation_id = "stats_stream",
    tag = "stats",
    security(("bearer" = [])),
    params(StreamQuery),
    responses(
        (status = 200, description = "An endless `text/event-stream`: events `sample` (JSON `NamedSample`) with `?volume=`, else `volumes` (JSON `VolumesStats`)", body = String, content_type = "text/event-stream"),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn stream(
    State(state): State<ApiState>,
    Query(query): Query<StreamQuery>,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let ticks = state.io.subscribe();
    let start = *ticks.borrow();
    let events = stream::unfold(
        (state, ticks, query.volume, start, 0u64),
        |(state, mut ticks, volume, mut last_tick, mut since_ms)| async move {
            loop {
                ticks.changed().await.ok()?;
                let tick = *ticks.borrow_and_update();
                let event = match &volume {
                    Some(name) => next_samples(&state.io, name, &mut since_ms),
                    None if tick >= last_tick + Step::Second.ticks() => {
                        last_tick = tick;
                        let state2 = state.clone();
                        let stats = tokio::task::spawn_blocking(move || volumes_stats(&state2))
                            .await
                            .ok()?;
                        Event::default().event("volumes").json_data(&stats).ok()
                    }
                    None => None,
                };
                if let Some(event) = event {
                    return Some((Ok(event), (state, ticks, volume, last_tick, since_ms)));
                }
            }
        },
    );
    Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

/// The volume's newest 100 ms sample not yet sent, as an event; an idle one when the volume
/// did no I/O in the last hour (it keeps no history), so charts keep moving.
fn next_samples(io: &Arc<IoStats>, name: &str, since_ms: &mut u64) -> Option<Event> {
    let samples = io.series(name, Step::Tenth, *since_ms);
    let sample = match samples.last() {
        Some(s) => s.clone(),
        None if io.has_history(name) => return None,
        None => Sample::idle(crate::io_stats::unix_ms()),
    };
    *since_ms = sample.t_ms;
    Event::default()
        .event("sample")
        .json_data(NamedSample {
            name,
            sample: &sample,
        })
        .ok()
}
