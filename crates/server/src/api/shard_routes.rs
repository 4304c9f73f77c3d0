//! Management of every shard's volumes through any c.node: a request about a volume or
//! snapshot of another shard goes to that shard's owner's API, and the lists of volumes and
//! snapshots gather every shard's, and so does the list of consistency groups (requests about
//! one group are routed by [`super::group_routes`]).
//!
//! - `/api/v1/volumes/{name}...` and `/api/v1/snapshots/{vol@snap}...`: a volume this c.node's
//!   engine holds is answered here; for any other, its name claim (`weft/names/<name>`, see
//!   `weft_engine::name_claims`) says its shard; another shard's
//!   request is passed on as it came ([`crate::api_proxy::to_owner`]), and its owner checks the
//!   token again (every c.node's tokens are accepted everywhere, `crate::cluster_tokens`).
//! - `GET /api/v1/volumes` and `GET /api/v1/snapshots`: this shard's list, then every other
//!   shard owner's, each entry with its `shard`. A shard without an owner now is left out
//!   and named in the `x-weft-shards-unreachable` header.
//!
//! - `POST /api/v1/volumes?shard=N`: created in shard N, by its owner; without `shard`, in the
//!   shard of the c.node that receives the request.
//!
//! A passed-on request carries [`ROUTED`], so the owner that receives it answers from its own
//! shard only and never passes it on again (a create routed to an owner of another shard than
//! it asks for, ownership having moved meanwhile, is refused with 409).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderName, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use weft_engine::ShardId;
use weft_meta::MetaStore;

use super::ApiState;
use crate::api_proxy::{to_owner, OwnerApi};
use crate::ha::ownership::Ownership;

/// Marks a request one c.node passed on to another shard's owner.
pub const ROUTED: &str = "x-weft-shard-routed";
/// The shards a gathered list lacks (no owner now, or it did not answer).
pub const UNREACHABLE: &str = "x-weft-shards-unreachable";
/// The largest list answer read from another shard's owner.
const LIST_MAX_BYTES: usize = 64 << 20;

/// The volume a per-volume or per-snapshot path names (`vol` of `vol@snap`), percent-decoded.
fn volume_of_path(path: &str) -> Option<String> {
    let rest = path
        .strip_prefix("/api/v1/volumes/")
        .or_else(|| path.strip_prefix("/api/v1/snapshots/"))?;
    let segment = rest.split('/').next().filter(|s| !s.is_empty())?;
    let name = percent_decode(segment)?;
    Some(name.split('@').next().unwrap_or(&name).to_string())
}

pub(super) fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The API of the owner of `shard`, if it has one now.
pub(super) fn owner_api(kv: &dyn MetaStore, shard: ShardId) -> Option<OwnerApi> {
    let owner = Ownership::owner(kv, shard).ok().flatten()?;
    Some(OwnerApi {
        id: owner.id,
        api: owner.api,
    })
}

/// Where a request about volume `name` goes: `None` for this c.node (its own shard, or a
/// name nobody claims, which the local handler answers with 404).
pub(super) fn foreign_owner(
    kv: &dyn MetaStore,
    own: ShardId,
    name: &str,
) -> Result<Option<OwnerApi>, String> {
    let shard = match weft_engine::name_claims::shard_of(kv, name) {
        Ok(Some(shard)) if shard != own => shard,
        Ok(_) => return Ok(None),
        Err(e) => return Err(format!("reading the name claim of {name}: {e}")),
    };
    owner_api(kv, shard).map(Some).ok_or_else(|| {
        format!(
            "volume {name} belongs to shard {shard}, which has no owner c.node now (its c.nodes are down or taking over)"
        )
    })
}

pub(super) fn unavailable(message: String) -> Response {
    refuse(StatusCode::SERVICE_UNAVAILABLE, message)
}

pub(super) fn refuse(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({ "error": message }))).into_response()
}

/// The `shard` query parameter of a create: `None` when absent.
fn shard_asked(query: Option<&str>) -> Result<Option<ShardId>, String> {
    let Some(value) = query
        .into_iter()
        .flat_map(|q| q.split('&'))
        .find_map(|pair| pair.strip_prefix("shard="))
    else {
        return Ok(None);
    };
    value
        .parse::<u16>()
        .map(|n| Some(ShardId(n)))
        .map_err(|_| format!("shard={value}: not a shard number (0 to 65535)"))
}

/// The shards other than `own` that the registrations name (shard 0 always).
pub(super) fn other_shards(kv: &dyn MetaStore, own: ShardId) -> Vec<ShardId> {
    let records = crate::ha::registry::list(kv).unwrap_or_default();
    let mut shards = crate::ha::registry::shards_named(&records);
    shards.retain(|s| *s != own);
    shards
}

/// The middleware (see the module doc); a no-op in single-process mode.
pub async fn route(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let (Some(compute), Some(cluster)) = (state.compute.clone(), state.cluster.clone()) else {
        return next.run(request).await;
    };
    let own = compute.shard;
    let path = request.uri().path().to_string();
    let asked = if request.method() == Method::POST && path == "/api/v1/volumes" {
        match shard_asked(request.uri().query()) {
            Ok(asked) => asked,
            Err(why) => return refuse(StatusCode::BAD_REQUEST, why),
        }
    } else {
        None
    };
    if request.headers().contains_key(ROUTED) {
        if let Some(shard) = asked.filter(|s| *s != own) {
            return refuse(
                StatusCode::CONFLICT,
                format!(
                    "this c.node owns shard {own}, not shard {shard} (ownership moved): ask again"
                ),
            );
        }
        return next.run(request).await;
    }
    let kv = Arc::clone(cluster.kv());
    if let Some(shard) = asked.filter(|s| *s != own) {
        let k = Arc::clone(&kv);
        return match tokio::task::spawn_blocking(move || owner_api(&*k, shard)).await {
            Ok(Some(owner)) => to_owner(owner, mark(request)).await,
            _ => unavailable(format!("shard {shard} has no owner c.node now")),
        };
    }
    if let Some(name) = volume_of_path(&path) {
        // This shard's own volumes (nearly every request) need no reading of etcd.
        if state.engine.open_volume(&name).is_ok() {
            return next.run(request).await;
        }
        let k = Arc::clone(&kv);
        let found = tokio::task::spawn_blocking(move || foreign_owner(&*k, own, &name)).await;
        return match found {
            Ok(Ok(Some(owner))) => to_owner(owner, mark(request)).await,
            Ok(Ok(None)) => next.run(request).await,
            Ok(Err(why)) => unavailable(why),
            Err(e) => unavailable(format!("routing by shard: {e}")),
        };
    }
    let gathers = request.method() == Method::GET
        && (path == "/api/v1/volumes" || path == "/api/v1/snapshots" || path == "/api/v1/groups");
    if !gathers {
        return next.run(request).await;
    }
    let (uri, auth) = (
        request.uri().clone(),
        request.headers().get(header::AUTHORIZATION).cloned(),
    );
    let local = next.run(request).await;
    if !local.status().is_success() {
        return local;
    }
    let k = Arc::clone(&kv);
    let owners = tokio::task::spawn_blocking(move || {
        other_shards(&*k, own)
            .into_iter()
            .map(|s| (s, owner_api(&*k, s)))
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let mut all = match list_of(local, own).await {
        Ok(list) => list,
        Err(e) => return unavailable(format!("this shard's list: {e}")),
    };
    let mut unreachable = Vec::new();
    for (shard, owner) in owners {
        let Some(owner) = owner else {
            unreachable.push(shard);
            continue;
        };
        let mut ask = Request::builder().method(Method::GET).uri(uri.clone());
        if let Some(auth) = &auth {
            ask = ask.header(header::AUTHORIZATION, auth.clone());
        }
        let Ok(ask) = ask.body(Body::empty()) else {
            unreachable.push(shard);
            continue;
        };
        match list_of(to_owner(owner.clone(), mark(ask)).await, shard).await {
            Ok(list) => all.extend(list),
            Err(e) => {
                tracing::warn!(shard = shard.0, owner = %owner.id, error = %e, "listing another shard's volumes");
                unreachable.push(shard);
            }
        }
    }
    let mut response = axum::Json(all).into_response();
    if !unreachable.is_empty() {
        let text: Vec<String> = unreachable.iter().map(ToString::to_string).collect();
        if let Ok(v) = HeaderValue::from_str(&text.join(",")) {
            response
                .headers_mut()
                .insert(HeaderName::from_static(UNREACHABLE), v);
        }
    }
    response
}

/// `request` marked as passed on.
pub(super) fn mark(mut request: Request) -> Request {
    request.headers_mut().insert(
        HeaderName::from_static(ROUTED),
        HeaderValue::from_static("1"),
    );
    request
}

/// The entries of a list answer, each given its `shard`.
async fn list_of(response: Response, shard: ShardId) -> Result<Vec<serde_json::Value>, String> {
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), LIST_MAX_BYTES)
        .await
        .map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    let list: Vec<serde_json::Value> =
        serde_json::from_slice(&body).map_err(|e| format!("not a JSON list: {e}"))?;
    Ok(list
        .into_iter()
        .map(|mut entry| {
            if let Some(map) = entry.as_object_mut() {
                map.entry("shard").or_insert(shard.0.into());
            }
            entry
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_volume_of_a_path_is_its_first_segment_decoded_without_the_snapshot() {
        assert_eq!(
            volume_of_path("/api/v1/volumes/db1").as_deref(),
            Some("db1")
        );
        assert_eq!(
            volume_of_path("/api/v1/volumes/db1/resize").as_deref(),
            Some("db1")
        );
        assert_eq!(
            volume_of_path("/api/v1/snapshots/db1%40mon/clones").as_deref(),
            Some("db1")
        );
        assert_eq!(
            volume_of_path("/api/v1/snapshots/db1@mon").as_deref(),
            Some("db1")
        );
        assert_eq!(volume_of_path("/api/v1/volumes"), None);
        assert_eq!(volume_of_path("/api/v1/volumes/"), None);
        assert_eq!(volume_of_path("/api/v1/hosts/db1"), None);
        assert_eq!(volume_of_path("/api/v1/volumes/%zz"), None);
    }

    #[test]
    fn the_shard_asked_is_the_query_parameter() {
        assert_eq!(shard_asked(None), Ok(None));
        assert_eq!(shard_asked(Some("x=1")), Ok(None));
        assert_eq!(shard_asked(Some("x=1&shard=3")), Ok(Some(ShardId(3))));
        assert!(shard_asked(Some("shard=-1")).is_err());
    }
}
