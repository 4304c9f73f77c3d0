//! The API and `/metrics` while the engine recovers. Recovery may wait for d.nodes (a stripe
//! it can neither read nor prove torn, see `weft_engine::recovery_status`); meanwhile the
//! c.node's addresses already answer, so an operator sees what it waits for:
//!
//! - `GET /healthz` (no token): the process is up; `GET /readyz` (no token): 503 and why;
//! - `GET /api/v1/cluster` (token): `"mode": "recovering"` with the blocked stripes, the
//!   d.nodes it waits for and every d.node's state (`weft cluster status`);
//! - any other API route (token): 503 "recovering";
//! - on a c.node that serves while another owns the cluster (a standby, or one waiting),
//!   every API route but the probes goes to the owner's API ([`crate::api_proxy`]), which
//!   checks the token, so the CLI, the UI and scripts work through any c.node;
//! - `/metrics`: `weft_recovery_waiting`, `weft_recovery_blocked_stripes` and one
//!   `weft_recovery_waiting_for_dnode{dnode}` per d.node it waits for.
//!
//! [`Switch`] serves these until the engine is open, then the real routers, on the same
//! listeners (no second bind, so a port chosen by the OS stays the same).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::{Arc, OnceLock};

use axum::extract::Request;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower::ServiceExt as _;
use weft_engine::recovery_status::{RecoveryStatus, RecoveryWait};

use crate::api_proxy::{to_owner, OwnerApi};
use crate::cluster::placement::ClusterPlacement;
use crate::cluster_tokens::ClusterTokens;

/// The placement, once the c.node has joined its cluster (single-process mode has none).
pub type PlacementSlot = Arc<OnceLock<Arc<ClusterPlacement>>>;

/// While another c.node owns the cluster, who it is and where its API is (this one serves
/// through it); `None` when it is not so.
pub type StandbySlot = Arc<OnceLock<Arc<dyn Fn() -> Option<OwnerApi> + Send + Sync>>>;

/// Every c.node's tokens, once this c.node has joined its cluster.
pub type TokensSlot = Arc<OnceLock<Arc<ClusterTokens>>>;

/// What the early routers read.
#[derive(Clone)]
pub struct Recovering {
    pub status: RecoveryStatus,
    pub placement: PlacementSlot,
    pub standby: StandbySlot,
    pub token: Arc<str>,
    pub cluster_tokens: TokensSlot,
}

impl Recovering {
    fn wait_json(&self) -> Option<serde_json::Value> {
        self.status.waiting().map(|w| wait_json(&w))
    }

    /// The owner this c.node passes requests to, while it does.
    fn owner(&self) -> Option<OwnerApi> {
        self.standby.get().and_then(|f| f())
    }

    fn why(&self) -> String {
        if let Some(o) = self.owner() {
            return format!(
                "this c.node serves through c.node {}, which owns the cluster and serves the management API at {}",
                o.id, o.api
            );
        }
        match self.status.waiting() {
            Some(w) => format!("weft is recovering: {w}"),
            None => "weft is recovering (reading its checkpoints and segments)".into(),
        }
    }
}

fn wait_json(w: &RecoveryWait) -> serde_json::Value {
    serde_json::to_value(w).unwrap_or_default()
}

fn unavailable(message: String) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({ "error": message })),
    )
        .into_response()
}

fn authorized(r: &Recovering, request: &Request) -> bool {
    request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .is_some_and(|t| {
            crate::api::constant_time_eq(t.as_bytes(), r.token.as_bytes())
                || r.cluster_tokens
                    .get()
                    .is_some_and(|c| c.role(t) == Some(crate::cluster_tokens::TokenRole::Admin))
        })
}

/// The API while recovering.
pub fn api_router(r: Recovering) -> Router {
    let ready = r.clone();
    let cluster = r.clone();
    let other = r;
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route(
            "/readyz",
            get(move || async move { unavailable(ready.why()) }),
        )
        .route(
            "/api/v1/cluster",
            get(move |request: Request| async move {
                if let Some(owner) = cluster.owner() {
                    return to_owner(owner, request).await;
                }
                if !authorized(&cluster, &request) {
                    return unauthorized();
                }
                let (nodes, pools) = cluster
                    .placement
                    .get()
                    .map(|p| (p.nodes(), p.pools()))
                    .unwrap_or_default();
                let body = serde_json::json!({
                    "mode": "recovering",
                    "recovery": cluster.wait_json(),
                    "nodes": nodes,
                    "pools": pools,
                });
                Json(body).into_response()
            }),
        )
        .fallback(move |request: Request| async move {
            if let Some(owner) = other.owner() {
                return to_owner(owner, request).await;
            }
            if !authorized(&other, &request) {
                return unauthorized();
            }
            unavailable(other.why())
        })
}

fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(serde_json::json!({ "error": "missing or wrong bearer token" })),
    )
        .into_response()
}

/// `/metrics` while recovering (the classic text format, which OpenMetrics scrapers also
/// accept from a target that sends it).
pub fn metrics_router(r: Recovering) -> Router {
    Router::new().route(
        "/metrics",
        get(move || async move {
            let wait = r.status.waiting();
            let mut out = String::new();
            let _ = writeln!(out, "# HELP weft_recovery_waiting 1 while recovery waits for d.nodes holding stripes it can neither read nor prove torn.");
            let _ = writeln!(out, "# TYPE weft_recovery_waiting gauge");
            let _ = writeln!(out, "weft_recovery_waiting {}", u8::from(wait.is_some()));
            let _ = writeln!(out, "# HELP weft_recovery_blocked_stripes Stripes recovery waits for (the first of each family).");
            let _ = writeln!(out, "# TYPE weft_recovery_blocked_stripes gauge");
            let blocked = wait.as_ref().map_or(0, |w| w.stripes.len());
            let _ = writeln!(out, "weft_recovery_blocked_stripes {blocked}");
            let _ = writeln!(out, "# HELP weft_recovery_waiting_for_dnode 1 for each d.node recovery waits for.");
            let _ = writeln!(out, "# TYPE weft_recovery_waiting_for_dnode gauge");
            for name in wait.iter().flat_map(|w| w.waiting_for.iter()) {
                // A store's name is `ID@ADDRESS` once it has registered: the label is the id.
                let id = name.split('@').next().unwrap_or(name);
                let id = id.replace('\\', "\\\\").replace('"', "\\\"");
                let _ = writeln!(out, "weft_recovery_waiting_for_dnode{{dnode=\"{id}\"}} 1");
            }
            (
                [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                out,
            )
        }),
    )
}

/// A router that serves `early` until `slot` is filled, then what it holds.
pub fn switch(slot: Arc<OnceLock<Router>>, early: Router) -> Router {
    Router::new().fallback_service(tower::service_fn(move |request: Request| {
        let router = slot.get().cloned().unwrap_or_else(|| early.clone());
        async move {
            match router.oneshot(request).await {
                Ok(response) => Ok::<_, Infallible>(response),
                Err(never) => match never {},
            }
        }
    }))
}
