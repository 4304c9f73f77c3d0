//! The tiering routes (behind the API token like every `/api/v1/` route):
//! `GET /api/v1/tiers` (the tiers, their prices, the heat's size), `PUT /api/v1/tiers/{name}`
//! (set a tier's prices), `GET /api/v1/tiers/advice[?volume=V&window=hour|day|week&margin=M]`
//! (the advisor: per volume and extent, IOPS/GB over the windows, the tier now, the tier the
//! cost model picks, the monthly cost now and after).
//!
//! In a cluster the pools' tiers count too: a volume is on its pool's tier (the c.node's
//! `--tier` for an untiered pool), and the tiers the advisor prices are the tier book's with
//! the pools' tiers added, at the prices a pool states (`weft pool create --tier T --price-gb
//! X --price-iops Y`) over the book's.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use weft_engine::Engine;

use super::types::ErrorBody;
use super::{ApiError, ApiState};
use crate::cluster::pool_tiers::prices_of;
use crate::cluster::{ClusterPlacement, PoolRecord};
use crate::tiering::advisor::{
    self, Advice, ExtentAdvice, VolumeAdvice, WindowCounts, WindowIntensities, WindowRates, GIB,
};
use crate::tiering::heat::{VolumeHeat, Window, BYTES_PER_EXTENT};
use crate::tiering::{now_s, TierPrices, Tiering};

/// A tier and its prices.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Tier {
    pub name: String,
    /// Dollars per GB-month (GB: 2^30 bytes).
    pub price_gb: f64,
    /// Dollars per IOPS-month.
    pub price_iops: f64,
    /// This server's store is on this tier (in a cluster: the tier of volumes in untiered
    /// pools).
    pub local: bool,
    /// The cluster's pools on this tier (empty outside a cluster).
    #[serde(default)]
    pub pools: Vec<String>,
    /// Bytes stored on this tier after data reduction: the families of the volumes on it
    /// (`weft stats`).
    #[serde(default)]
    pub stored_bytes: u64,
    /// $/GB over $/IOPS: above this intensity (IOPS/GB) the tier bills IOPS, below it GB
    /// (null for a tier whose IOPS are free).
    pub intensity_cutoff: Option<f64>,
}

/// `GET /api/v1/tiers`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TiersReport {
    /// The tier of this server's store: every extent is on it (no mover yet).
    pub local_tier: String,
    pub tiers: Vec<Tier>,
    /// Heat is counted per extent of this size.
    pub extent_bytes: u64,
    /// The heat file is rewritten this often (a kill -9 loses at most this much).
    pub persist_interval_s: f64,
    pub volumes: usize,
    pub extents: u64,
    /// Memory per extent and in all.
    pub bytes_per_extent: u64,
    pub memory_bytes: u64,
    /// Memory per TiB of volume at this extent size.
    pub memory_bytes_per_tib: u64,
}

#[utoipa::path(
    get,
    path = "/api/v1/tiers",
    operation_id = "list_tiers",
    tag = "tiering",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The tiers and their prices", body = TiersReport),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    ),
)]
pub async fn list(State(state): State<ApiState>) -> Json<TiersReport> {
    let (engine, tiering) = (state.engine.clone(), Arc::clone(&state.tiering));
    let cluster = state.cluster.clone();
    let stored =
        tokio::task::spawn_blocking(move || stored_by_tier(&engine, &tiering, cluster.as_deref()))
            .await
            .unwrap_or_default();
    Json(report(&state.tiering, state.cluster.as_deref(), &stored))
}

/// The tier a family is on: its pool's, or this server's `--tier` (an untiered pool, or
/// `weft serve`).
fn tier_of(t: &Tiering, cluster: Option<&ClusterPlacement>, family: u64) -> String {
    cluster
        .and_then(|c| c.pool_of_family(family))
        .and_then(|p| p.tier)
        .unwrap_or_else(|| t.config.tier.clone())
}

/// Stored bytes (after data reduction) per tier, each family counted once through its
/// volumes (a family left with snapshots alone is not counted).
fn stored_by_tier(
    engine: &Engine,
    t: &Tiering,
    cluster: Option<&ClusterPlacement>,
) -> BTreeMap<String, u64> {
    let mut seen = std::collections::HashSet::new();
    let mut out = BTreeMap::new();
    for (name, _) in engine.volume_sizes() {
        let Ok(info) = engine.volume_info(&name) else {
            continue; // deleted meanwhile
        };
        if seen.insert(info.family.id) {
            *out.entry(tier_of(t, cluster, info.family.id)).or_default() +=
                info.family.reduction.stored_bytes;
        }
    }
    out
}

/// The tiers the advisor prices: the book's, with the pools' tiers at their prices.
fn priced_tiers(
    t: &Tiering,
    cluster: Option<&ClusterPlacement>,
) -> (BTreeMap<String, TierPrices>, Vec<PoolRecord>) {
    let mut tiers = t.book().tiers;
    let pools = cluster
        .map(ClusterPlacement::pool_records)
        .unwrap_or_default();
    for p in &pools {
        if let (Some(tier), Some(prices)) = (&p.tier, prices_of(p)) {
            tiers.insert(tier.clone(), prices);
        }
    }
    (tiers, pools)
}

fn report(
    t: &Tiering,
    cluster: Option<&ClusterPlacement>,
    stored: &BTreeMap<String, u64>,
) -> TiersReport {
    let extent_bytes = t.config.extent_bytes;
    let extents = t.extents();
    let (tiers, pools) = priced_tiers(t, cluster);
    TiersReport {
        local_tier: t.config.tier.clone(),
        tiers: tiers
            .into_iter()
            .map(|(name, p)| Tier {
                local: name == t.config.tier,
                intensity_cutoff: (p.price_iops > 0.0).then(|| p.price_gb / p.price_iops),
                stored_bytes: stored.get(&name).copied().unwrap_or(0),
                pools: pools
                    .iter()
                    .filter(|r| r.tier.as_deref() == Some(name.as_str()))
                    .map(|r| r.name.clone())
                    .collect(),
                name,
                price_gb: p.price_gb,
                price_iops: p.price_iops,
            })
            .collect(),
        extent_bytes,
        persist_interval_s: t.config.persist_interval.as_secs_f64(),
        volumes: t.volume_count(),
        extents,
        bytes_per_extent: BYTES_PER_EXTENT,
        memory_bytes: extents * BYTES_PER_EXTENT,
        memory_bytes_per_tib: (1u64 << 40) / extent_bytes.max(1) * BYTES_PER_EXTENT,
    }
}

#[utoipa::path(
    put,
    path = "/api/v1/tiers/{name}",
    operation_id = "set_tier",
    tag = "tiering",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The tier: performance, capacity or a name")),
    request_body = TierPrices,
    responses(
        (status = 200, description = "The tiers after the change", body = TiersReport),
        (status = 400, description = "A bad name or price", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 403, description = "The read-only token", body = ErrorBody),
    ),
)]
pub async fn set(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    Json(prices): Json<TierPrices>,
) -> Result<Json<TiersReport>, ApiError> {
    let (engine, tiering) = (state.engine.clone(), Arc::clone(&state.tiering));
    let cluster = state.cluster.clone();
    tokio::task::spawn_blocking(move || {
        tiering
            .set_prices(&name, prices)
            .map_err(|e| ApiError(StatusCode::BAD_REQUEST, e))?;
        let stored = stored_by_tier(&engine, &tiering, cluster.as_deref());
        Ok(Json(report(&tiering, cluster.as_deref(), &stored)))
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct AdviceQuery {
    /// One volume (default: every volume).
    pub volume: Option<String>,
    /// The window the advice is computed on: hour, day (default) or week.
    pub window: Option<String>,
    /// The share of the cost now a move must save (default 0.2).
    pub margin: Option<f64>,
}

#[utoipa::path(
    get,
    path = "/api/v1/tiers/advice",
    operation_id = "tier_advice",
    tag = "tiering",
    security(("bearer" = [])),
    params(AdviceQuery),
    responses(
        (status = 200, description = "Per volume and extent: heat, tier now, advised tier, monthly costs", body = Advice),
        (status = 400, description = "A bad window or margin", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
    ),
)]
pub async fn advice(
    State(state): State<ApiState>,
    Query(q): Query<AdviceQuery>,
) -> Result<Json<Advice>, ApiError> {
    let window_name = q.window.unwrap_or_else(|| "day".into());
    let window = Window::parse(&window_name).ok_or_else(|| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!("window {window_name:?}: hour, day or week"),
        )
    })?;
    let margin = q.margin.unwrap_or(advisor::DEFAULT_MARGIN);
    if !(0.0..1.0).contains(&margin) {
        return Err(ApiError(
            StatusCode::BAD_REQUEST,
            format!("margin {margin}: between 0 and 1 (a share of the cost now)"),
        ));
    }
    let (engine, tiering) = (state.engine.clone(), Arc::clone(&state.tiering));
    let cluster = state.cluster.clone();
    super::blocking(move || {
        let names: Vec<String> = match q.volume {
            Some(v) => {
                engine.volume_info(&v)?;
                vec![v]
            }
            None => engine.volume_sizes().into_iter().map(|(n, _)| n).collect(),
        };
        let (tiers, _) = priced_tiers(&tiering, cluster.as_deref());
        let now = now_s();
        let mut volumes = Vec::new();
        for name in names {
            let on = VolumeOn {
                tiers: &tiers,
                cluster: cluster.as_deref(),
            };
            volumes.push(volume_advice(
                &engine, &tiering, on, &name, window, margin, now,
            )?);
        }
        let cost_now = volumes.iter().map(|v| v.cost_now).sum();
        let cost_after = volumes.iter().map(|v| v.cost_after).sum();
        Ok(Json(Advice {
            window: window_name,
            margin,
            tiers,
            volumes,
            cost_now,
            cost_after,
        }))
    })
    .await
}

/// Where the advisor looks up a volume's tier now and the tiers it may move to.
#[derive(Clone, Copy)]
struct VolumeOn<'a> {
    tiers: &'a BTreeMap<String, TierPrices>,
    cluster: Option<&'a ClusterPlacement>,
}

fn volume_advice(
    engine: &Engine,
    tiering: &Tiering,
    on: VolumeOn<'_>,
    name: &str,
    window: Window,
    margin: f64,
    now: u64,
) -> Result<VolumeAdvice, weft_engine::EngineError> {
    let info = engine.volume_info(name)?;
    let handle = engine.open_volume(name)?;
    let heat = tiering.existing(name).unwrap_or_else(|| {
        Arc::new(VolumeHeat::new(
            tiering.config.extent_bytes,
            info.size_bytes,
            now,
        ))
    });
    let extent_bytes = heat.extent_bytes();
    let (started_s, readings) = heat.read(now);
    let covered = WindowCounts::from_fn(|w| w.covered_s(now, started_s));
    let reduction = info.family.reduction.ratio.unwrap_or(1.0).max(1e-9);
    // In a cluster: its pool's tier (an untiered pool's volumes are on the c.node's).
    let tier_now = tier_of(tiering, on.cluster, info.family.id);
    let tiers = on.tiers;
    let mut extents = Vec::new();
    let count = info.size_bytes.div_ceil(extent_bytes);
    for index in 0..count {
        let offset_bytes = index * extent_bytes;
        let length_bytes = extent_bytes.min(info.size_bytes - offset_bytes);
        // One extent at a time: the engine's state lock is held per call.
        let data_bytes: u64 = engine
            .block_status(handle.id, offset_bytes, length_bytes)?
            .iter()
            .filter(|e| !e.hole && !e.zero)
            .map(|e| e.length_bytes)
            .sum();
        let reading = readings.get(index as usize).copied();
        let ops = |w: Window| reading.map_or_else(Default::default, |r| r.ops[w.index()]);
        let reads = WindowCounts::from_fn(|w| ops(w).reads);
        let writes = WindowCounts::from_fn(|w| ops(w).writes);
        let iops =
            WindowRates::from_fn(|w| (reads.get(w) + writes.get(w)) as f64 / covered.get(w) as f64);
        let gib = data_bytes as f64 / GIB;
        let choice = advisor::choose(tiers, &tier_now, iops.get(window), gib, margin);
        extents.push(ExtentAdvice {
            index,
            offset_bytes,
            length_bytes,
            data_bytes,
            gib,
            stored_gib: gib / reduction,
            reads,
            writes,
            iops,
            iops_per_gb: WindowIntensities::from_fn(|w| advisor::intensity(iops.get(w), gib)),
            tier_now: tier_now.clone(),
            advised_tier: choice.tier,
            cost_now: choice.cost_now,
            cost_after: choice.cost_after,
        });
    }
    let mut data_bytes_by_tier = BTreeMap::new();
    for e in &extents {
        *data_bytes_by_tier
            .entry(e.advised_tier.clone())
            .or_default() += e.data_bytes;
    }
    Ok(VolumeAdvice {
        volume: name.to_string(),
        size_bytes: info.size_bytes,
        extent_bytes,
        tier_now,
        counted_since_unix_s: started_s,
        covered_s: covered,
        cost_now: extents.iter().map(|e| e.cost_now).sum(),
        cost_after: extents.iter().map(|e| e.cost_after).sum(),
        extents,
        data_bytes_by_tier,
    })
}
