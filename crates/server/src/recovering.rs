//! The API and `/metrics` while the engine recovers. Recovery may wait for d.nodes (a stripe
//! it can neither read nor prove torn, see `weft_engine::recovery_status`); meanwhile the
//! c.node's addresses already answer, so an operator sees what it waits for:
//!
//! - `GET /healthz` (no token): the process is up; `GET /readyz` (no token): 503 and why;
//! - `GET /api/v1/cluster` (token): `"mode": "recovering"` with the blocked stripes, the
//!   d.nodes it waits for and every d.node's state (`weft cluster status`);
//! - any other API route (token): 503 "recovering";
//! - the tokens: this c.node's admin token, and once it has joined its cluster every c.node's
//!   tokens by their digests (its own read-only token among them), with the roles of the API:
//!   a read-only token reads (a monitor's `weft cluster status` works, a UI viewer is not sent
//!   back to the login page) and is refused (403) anything else; every answer to an accepted
//!   token names its role in `x-weft-role`, as the API's do;
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
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use tower::ServiceExt as _;
use weft_engine::recovery_status::{RecoveryStatus, RecoveryWait};

use crate::api_proxy::{to_owner, OwnerApi};
use crate::cluster::placement::ClusterPlacement;
use crate::cluster_tokens::{ClusterTokens, TokenRole};

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
    /// This c.node's read-only token (`api-token-read-only`).
    pub read_only_token: Arc<str>,
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

/// The role of the request's token here: this c.node's admin or read-only token, or any c.node's token by
/// its digest once this c.node has joined its cluster; `None`: no token, or a wrong one.
fn role(r: &Recovering, request: &Request) -> Option<TokenRole> {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))?;
    if crate::api::constant_time_eq(presented.as_bytes(), r.token.as_bytes()) {
        return Some(TokenRole::Admin);
    }
    if crate::api::constant_time_eq(presented.as_bytes(), r.read_only_token.as_bytes()) {
        return Some(TokenRole::ReadOnly);
    }
    r.cluster_tokens.get().and_then(|c| c.role(presented))
}

/// Why a request is refused while recovering.
enum Refusal {
    /// No token, or a wrong one: 401.
    Unknown,
    /// A read-only token asking to change something: 403.
    ReadOnly,
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        match self {
            Refusal::Unknown => unauthorized(),
            Refusal::ReadOnly => with_role(
                (
                    StatusCode::FORBIDDEN,
                    Json(serde_json::json!({
                        "error": "this token is read-only (api-token-read-only): it may not change anything"
                    })),
                )
                    .into_response(),
                TokenRole::ReadOnly,
            ),
        }
    }
}

/// What a token may ask while recovering: a read-only token only reads.
fn admit(r: &Recovering, request: &Request) -> Result<TokenRole, Refusal> {
    let reads = request.method() == Method::GET || request.method() == Method::HEAD;
    match role(r, request) {
        None => Err(Refusal::Unknown),
        Some(TokenRole::ReadOnly) if !reads => Err(Refusal::ReadOnly),
        Some(role) => Ok(role),
    }
}

/// `response` with the `x-weft-role` header the API's answers carry.
fn with_role(mut response: Response, role: TokenRole) -> Response {
    let name = match role {
        TokenRole::Admin => "admin",
        TokenRole::ReadOnly => "read-only",
    };
    response.headers_mut().insert(
        crate::api::ROLE_HEADER,
        header::HeaderValue::from_static(name),
    );
    response
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
                let role = match admit(&cluster, &request) {
                    Ok(role) => role,
                    Err(refused) => return refused.into_response(),
                };
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
                with_role(Json(body).into_response(), role)
            }),
        )
        .fallback(move |request: Request| async move {
            if let Some(owner) = other.owner() {
                return to_owner(owner, request).await;
            }
            match admit(&other, &request) {
                Ok(role) => with_role(unavailable(other.why()), role),
                Err(refused) => refused.into_response(),
            }
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

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use weft_meta::{EmbeddedMetaStore, MetaStore};

    use super::*;
    use crate::cluster_tokens::TokenDigests;

    /// A c.node recovering with no owner to pass requests to; `joined`: it has read the
    /// cluster's token digests (its own admin `admin` and read-only `ro`).
    fn recovering(joined: bool) -> Recovering {
        let r = Recovering {
            status: RecoveryStatus::default(),
            placement: Arc::default(),
            standby: Arc::default(),
            token: "admin".into(),
            read_only_token: "ro".into(),
            cluster_tokens: Arc::default(),
        };
        if joined {
            let kv: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
            let tokens = ClusterTokens::start(kv, "c1", TokenDigests::of("admin", "ro")).unwrap();
            assert!(r.cluster_tokens.set(tokens).is_ok());
        }
        r
    }

    /// The answer's status and `x-weft-role`.
    async fn ask(
        r: &Recovering,
        method: &str,
        path: &str,
        token: Option<&str>,
    ) -> (StatusCode, Option<String>) {
        let mut request = Request::builder().method(method).uri(path);
        if let Some(t) = token {
            request = request.header(header::AUTHORIZATION, format!("Bearer {t}"));
        }
        let response = api_router(r.clone())
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let role = response
            .headers()
            .get(crate::api::ROLE_HEADER)
            .map(|v| v.to_str().unwrap().to_string());
        (response.status(), role)
    }

    #[tokio::test]
    async fn a_read_only_token_reads_while_recovering_and_is_refused_changes() {
        let r = recovering(true);
        let ro = Some("read-only".to_string());
        let admin = Some("admin".to_string());
        assert_eq!(
            ask(&r, "GET", "/api/v1/cluster", Some("ro")).await,
            (StatusCode::OK, ro.clone())
        );
        assert_eq!(
            ask(&r, "GET", "/api/v1/volumes", Some("ro")).await,
            (StatusCode::SERVICE_UNAVAILABLE, ro.clone())
        );
        for (method, path) in [
            ("POST", "/api/v1/volumes"),
            ("DELETE", "/api/v1/hosts/db1/chap"),
            ("PUT", "/api/v1/hosts/db1/chap"),
        ] {
            assert_eq!(
                ask(&r, method, path, Some("ro")).await,
                (StatusCode::FORBIDDEN, ro.clone()),
                "{method} {path}"
            );
        }
        assert_eq!(
            ask(&r, "POST", "/api/v1/volumes", Some("admin")).await,
            (StatusCode::SERVICE_UNAVAILABLE, admin.clone())
        );
        assert_eq!(
            ask(&r, "GET", "/api/v1/cluster", Some("admin")).await,
            (StatusCode::OK, admin)
        );
        for wrong in [None, Some("wrong"), Some("ro "), Some("")] {
            assert_eq!(
                ask(&r, "GET", "/api/v1/cluster", wrong).await,
                (StatusCode::UNAUTHORIZED, None),
                "{wrong:?}"
            );
        }
        // Probes need no token.
        assert_eq!(
            ask(&r, "GET", "/healthz", None).await,
            (StatusCode::OK, None)
        );
    }

    /// Single-process mode never joins a cluster: its own read-only token must still read.
    #[tokio::test]
    async fn before_joining_its_cluster_only_its_own_tokens_are_known() {
        let r = recovering(false);
        assert_eq!(
            ask(&r, "GET", "/api/v1/cluster", Some("admin")).await,
            (StatusCode::OK, Some("admin".to_string()))
        );
        assert_eq!(
            ask(&r, "GET", "/api/v1/cluster", Some("ro")).await,
            (StatusCode::OK, Some("read-only".to_string()))
        );
        assert_eq!(
            ask(&r, "POST", "/api/v1/volumes", Some("ro")).await,
            (StatusCode::FORBIDDEN, Some("read-only".to_string()))
        );
        assert_eq!(
            ask(&r, "GET", "/api/v1/cluster", Some("another-cnodes-token")).await,
            (StatusCode::UNAUTHORIZED, None)
        );
    }
}
