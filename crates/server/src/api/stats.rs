//! Live per-volume statistics ([`crate::io_stats`]) over the API:
//!
//! - `GET /api/v1/stats/volumes[?scope=cluster|cnode]`: every export's rates over the last
//!   second, IO intensity (IOPS per GB) and a one-minute sparkline of IOPS. In a cluster each
//!   row names its shard and owner; by default every c.node's answer merged ([`cluster`]),
//!   with `scope=cnode` what this c.node's front ends did (every export it serves, each
//!   `local` or `forwarded` to its owner);
//! - `GET /api/v1/volumes/{name}/stats?step=100ms|1s|10s[&since_ms=T]`: the kept series (100 ms
//!   for a minute, 1 s for 15 minutes, 10 s for an hour) with a latency heat map per sample;
//! - `GET /api/v1/stats/stream[?volume=NAME][&scope=...]`: server-sent events, `sample` every
//!   100 ms for one volume, or `volumes` (the `/stats/volumes` answer) every second.

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

pub mod cluster;

/// Samples in a sparkline (one per second).
const SPARK_SECONDS: usize = 60;
/// A 1 s sample older than this does not describe "now" (the export went idle).
const STALE_MS: u64 = 2_500;
/// `scope` of every c.node's answer merged.
pub const SCOPE_CLUSTER: &str = "cluster";
/// `scope` of one c.node's front ends.
pub const SCOPE_CNODE: &str = "cnode";
/// `scope` of a single-process datastore.
pub const SCOPE_SINGLE: &str = "single";
/// `route` of an export served by an engine of the answering c.node.
pub const ROUTE_LOCAL: &str = "local";
/// `route` of an export the answering c.node passes on to its owner.
pub const ROUTE_FORWARDED: &str = "forwarded";

/// Every export's recent rates.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumesStats {
    /// Unix ms of the answer.
    pub time_ms: u64,
    /// The rates are averages over this window.
    pub window_ms: u64,
    pub volumes: Vec<VolumeRate>,
    /// `cluster` (every c.node's answer merged), `cnode` (the answering c.node's front ends)
    /// or `single` (a single-process datastore).
    #[serde(default)]
    pub scope: String,
    /// The c.node that answered (absent in single-process mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cnode: Option<String>,
    /// With `scope: cluster`: every registered c.node and whether it answered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cnodes: Vec<CnodeAnswer>,
}

/// A c.node asked for its statistics.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CnodeAnswer {
    pub id: String,
    pub api: String,
    pub answered: bool,
    /// Why it gave no answer of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl From<&cluster::Peer> for CnodeAnswer {
    fn from(peer: &cluster::Peer) -> CnodeAnswer {
        CnodeAnswer {
            id: peer.id.clone(),
            api: peer.api.clone(),
            answered: false,
            error: None,
        }
    }
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
    /// The volume's shard (absent in single-process mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u16>,
    /// The c.node that owns its shard (absent in single-process mode, or while the shard
    /// has no owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// With `scope: cnode`: `local` (served by an engine of the answering c.node) or
    /// `forwarded` (passed on to the owner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route: Option<String>,
    /// With `scope: cluster`: the c.nodes whose front ends did its I/O in the last second.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub served_by: Vec<String>,
    /// With `scope: cluster`: its owner did not answer, so the rates lack the I/O that came
    /// in through that c.node (unknown, not zero).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub owner_unreachable: bool,
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
    /// Of the `volumes` events, as `GET /stats/volumes` takes it.
    scope: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub(super) struct VolumesQuery {
    /// In a cluster: `cluster` (the default: every c.node's answer merged, one row per
    /// volume of every shard) or `cnode` (this c.node's front ends only). Ignored in
    /// single-process mode.
    scope: Option<String>,
}

/// Whether `scope` asks for the cluster's view (the default), or this c.node's.
fn cluster_scope(scope: Option<&str>) -> Result<bool, ApiError> {
    match scope {
        None | Some(SCOPE_CLUSTER) => Ok(true),
        Some(SCOPE_CNODE) => Ok(false),
        Some(other) => Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("scope {other:?}: use cluster or cnode"),
        )),
    }
}

/// The answer at `scope` (blocking: the cluster's view asks the other c.nodes).
fn volumes_stats(state: &ApiState, cluster_wide: bool) -> VolumesStats {
    let (Some(compute), Some(placement)) = (&state.compute, &state.cluster) else {
        return own_stats(state);
    };
    if !cluster_wide {
        return own_stats(state);
    }
    let me = compute.registration.id();
    let peers: Vec<cluster::Peer> = crate::ha::registry::list(&**placement.kv())
        .unwrap_or_default()
        .into_iter()
        .filter(|r| r.id != me)
        .map(|r| cluster::Peer {
            id: r.id,
            api: r.api,
        })
        .collect();
    let answers = cluster::ask_peers(&peers, &state.read_only_token);
    let own = cluster::Peer {
        id: me.clone(),
        api: String::new(),
    };
    let asked = std::iter::once((own, Ok(own_stats(state))))
        .chain(peers.into_iter().zip(answers))
        .collect();
    cluster::merge(
        &me,
        asked,
        crate::io_stats::unix_ms(),
        Step::Second.millis(),
    )
}

/// Each export this c.node serves with the rates its front ends saw: in a cluster every
/// shard's (the shard router's list), each with its shard, owner and route; else the
/// engine's.
fn own_stats(state: &ApiState) -> VolumesStats {
    struct Row {
        name: String,
        size_bytes: u64,
        read_only: bool,
        shard: Option<u16>,
        owner: Option<String>,
        route: Option<&'static str>,
    }
    let me = state.compute.as_ref().map(|c| c.registration.id());
    let rows: Vec<Row> = match (&state.router, &me) {
        (Some(router), Some(me)) => router
            .placements()
            .into_iter()
            .map(|p| Row {
                name: p.export.name,
                size_bytes: p.export.size_bytes,
                read_only: p.export.read_only,
                shard: Some(p.shard.0),
                owner: if p.here { Some(me.clone()) } else { p.owner },
                route: Some(if p.here { ROUTE_LOCAL } else { ROUTE_FORWARDED }),
            })
            .collect(),
        _ => state
            .engine
            .list_images()
            .into_iter()
            .map(|i| Row {
                name: i.name,
                size_bytes: i.size_bytes,
                read_only: i.read_only,
                shard: None,
                owner: None,
                route: None,
            })
            .collect(),
    };
    let now = crate::io_stats::unix_ms();
    let recent: HashMap<String, Vec<Sample>> = state.io.latest(Step::Second, SPARK_SECONDS);
    let volumes = rows
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
                shard: image.shard,
                owner: image.owner,
                route: image.route.map(String::from),
                served_by: Vec::new(),
                owner_unreachable: false,
            }
        })
        .collect();
    VolumesStats {
        time_ms: now,
        window_ms: Step::Second.millis(),
        volumes,
        scope: if me.is_some() {
            SCOPE_CNODE
        } else {
            SCOPE_SINGLE
        }
        .into(),
        cnode: me,
        cnodes: Vec::new(),
    }
}

/// Every export's rates over the last second, IO intensity and a one-minute sparkline; in a
/// cluster every c.node's (see `scope`).
#[utoipa::path(
    get,
    path = "/api/v1/stats/volumes",
    operation_id = "volume_rates",
    tag = "stats",
    security(("bearer" = [])),
    params(VolumesQuery),
    responses(
        (status = 200, description = "Every volume's and snapshot's rates", body = VolumesStats),
        (status = 400, description = "Invalid scope", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn volumes(
    State(state): State<ApiState>,
    Query(query): Query<VolumesQuery>,
) -> Result<Json<VolumesStats>, ApiError> {
    let cluster_wide = cluster_scope(query.scope.as_deref())?;
    blocking(move || Ok(volumes_stats(&state, cluster_wide)))
        .await
        .map(Json)
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
        (status = 400, description = "Invalid scope", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub(super) async fn stream(
    State(state): State<ApiState>,
    Query(query): Query<StreamQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let cluster_wide = cluster_scope(query.scope.as_deref())?;
    let ticks = state.io.subscribe();
    let start = *ticks.borrow();
    let events = stream::unfold(
        (state, ticks, query.volume, start, 0u64),
        move |(state, mut ticks, volume, mut last_tick, mut since_ms)| async move {
            loop {
                ticks.changed().await.ok()?;
                let tick = *ticks.borrow_and_update();
                let event = match &volume {
                    Some(name) => next_samples(&state.io, name, &mut since_ms),
                    None if tick >= last_tick + Step::Second.ticks() => {
                        last_tick = tick;
                        let state2 = state.clone();
                        let stats = tokio::task::spawn_blocking(move || {
                            volumes_stats(&state2, cluster_wide)
                        })
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
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
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
