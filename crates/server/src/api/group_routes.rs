//! Consistency groups of every shard through any c.node (a middleware inside
//! [`super::shard_routes`]'s, as `host_catalog`'s): a group lives in the catalog of its members' shard, and group
//! names have no name claim of their own, so a request about a group this c.node's catalog
//! does not hold is passed to the other shards' owners in turn, to the first that knows the
//! group (asked with a `GET`, marked as routed so it is answered there and not passed on
//! again). A create goes to the shard of its first member volume (that volume's name claim).
//!
//! Paths: `/api/v1/groups/{name}...` and `/api/v1/group-snapshots/{group@snapshot}...`, and
//! `POST /api/v1/groups`; `GET /api/v1/groups` is gathered from every shard by
//! [`super::shard_routes`], like the volume list. A no-op in single-process mode.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use weft_engine::ShardId;
use weft_meta::MetaStore;

use super::shard_routes::{
    foreign_owner, mark, other_shards, owner_api, percent_decode, refuse, unavailable, ROUTED,
};
use super::ApiState;
use crate::api_proxy::{to_owner, OwnerApi};

/// The largest create body read to find its first member.
const CREATE_BODY_MAX_BYTES: usize = 1 << 20;

/// The middleware (see the module doc).
pub async fn route(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let (Some(compute), Some(cluster)) = (state.compute.clone(), state.cluster.clone()) else {
        return next.run(request).await;
    };
    if request.headers().contains_key(ROUTED) {
        return next.run(request).await;
    }
    let (own, kv) = (compute.shard, Arc::clone(cluster.kv()));
    let path = request.uri().path().to_string();
    if let Some((group, raw)) = group_of_path(&path) {
        // This shard's own groups need no asking around.
        if state.engine.has_group(&group) {
            return next.run(request).await;
        }
        let auth = request.headers().get(header::AUTHORIZATION).cloned();
        let owners = other_owners(&kv, own).await;
        return match owner_with_group(owners, &raw, auth).await {
            Some(owner) => to_owner(owner, mark(request)).await,
            // Nobody has it: this c.node answers (404).
            None => next.run(request).await,
        };
    }
    if request.method() != Method::POST || path != "/api/v1/groups" {
        return next.run(request).await;
    }
    let (first, request) = match first_member(request).await {
        Ok(read) => read,
        Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
    };
    let Some(first) = first.filter(|v| state.engine.open_volume(v).is_err()) else {
        return next.run(request).await;
    };
    let found = tokio::task::spawn_blocking(move || foreign_owner(&*kv, own, &first)).await;
    match found {
        Ok(Ok(Some(owner))) => to_owner(owner, mark(request)).await,
        Ok(Ok(None)) => next.run(request).await,
        Ok(Err(why)) => unavailable(why),
        Err(e) => unavailable(format!("routing by shard: {e}")),
    }
}

/// The owners of the shards other than `own` that have one now.
async fn other_owners(kv: &Arc<dyn MetaStore>, own: ShardId) -> Vec<OwnerApi> {
    let k = Arc::clone(kv);
    tokio::task::spawn_blocking(move || {
        other_shards(&*k, own)
            .into_iter()
            .filter_map(|s| owner_api(&*k, s))
            .collect()
    })
    .await
    .unwrap_or_default()
}

/// The group a per-group or per-group-snapshot path names, percent-decoded, with the raw
/// (still encoded) segment to ask other owners about.
fn group_of_path(path: &str) -> Option<(String, String)> {
    let rest = path
        .strip_prefix("/api/v1/groups/")
        .or_else(|| path.strip_prefix("/api/v1/group-snapshots/"))?;
    let segment = rest.split('/').next().filter(|s| !s.is_empty())?;
    let name = percent_decode(segment)?;
    let group = name.split('@').next().unwrap_or(&name).to_string();
    let raw = segment.split("%40").next().unwrap_or(segment);
    let raw = raw.split('@').next().unwrap_or(raw).to_string();
    Some((group, raw))
}

/// The first of `owners` whose catalog has group `raw` (an encoded path segment), asked with
/// the caller's `auth`.
async fn owner_with_group(
    owners: Vec<OwnerApi>,
    raw: &str,
    auth: Option<header::HeaderValue>,
) -> Option<OwnerApi> {
    for owner in owners {
        let mut ask = Request::builder()
            .method(Method::GET)
            .uri(format!("/api/v1/groups/{raw}"));
        if let Some(auth) = &auth {
            ask = ask.header(header::AUTHORIZATION, auth.clone());
        }
        let Ok(ask) = ask.body(Body::empty()) else {
            continue;
        };
        if to_owner(owner.clone(), mark(ask)).await.status() == StatusCode::OK {
            return Some(owner);
        }
    }
    None
}

/// A create's first member volume, and the request rebuilt (its body was read).
async fn first_member(request: Request) -> Result<(Option<String>, Request), String> {
    let (parts, body) = request.into_parts();
    let bytes = axum::body::to_bytes(body, CREATE_BODY_MAX_BYTES)
        .await
        .map_err(|e| format!("reading the group create body: {e}"))?;
    let first = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v["volumes"][0].as_str().map(str::to_string));
    Ok((first, Request::from_parts(parts, Body::from(bytes))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_group_of_a_path_is_its_first_segment_without_the_snapshot() {
        let g = group_of_path;
        assert_eq!(g("/api/v1/groups/pg"), Some(("pg".into(), "pg".into())));
        assert_eq!(g("/api/v1/groups/pg/qos"), Some(("pg".into(), "pg".into())));
        assert_eq!(
            g("/api/v1/group-snapshots/pg%40mon/clones"),
            Some(("pg".into(), "pg".into()))
        );
        assert_eq!(
            g("/api/v1/group-snapshots/pg@mon"),
            Some(("pg".into(), "pg".into()))
        );
        assert_eq!(g("/api/v1/groups"), None);
        assert_eq!(g("/api/v1/groups/"), None);
    }
}
