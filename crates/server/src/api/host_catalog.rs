//! The cluster's host catalog through any c.node. In a cluster of several shards a host is
//! defined once, in shard 0's catalog, and every shard maps its own exports to it (holder
//! records and LUN claims: `weft_engine::hosts`). Inside the token check:
//!
//! - host definitions and edits (create, delete, initiators, CHAP) go to shard 0's owner; a
//!   host this c.node's own catalog defines (from before the cluster had one host catalog) is
//!   edited here;
//! - a LUN map or unmap goes to the owner of the export's shard (the volume's name claim,
//!   `weft_engine::name_claims`), whose catalog maps it;
//! - `GET /hosts` and `GET /hosts/{name}` answer every shard's records merged by host name
//!   ([`merged`]), read from the catalogs in etcd: the identity from shard 0's record, the LUNs
//!   of every shard, each with its `shard`;
//! - a host is deleted only when no shard maps a LUN to it ([`luns_elsewhere`]).
//!
//! A passed-on request carries `shard_routes::ROUTED` and is answered where it arrives.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use weft_engine::hosts::{shard_hosts, ShardHost};
use weft_engine::metastore::{state_key, ClusterState};
use weft_engine::ShardId;
use weft_meta::MetaStore;

use super::shard_routes::{
    foreign_owner, mark, other_shards, owner_api, percent_decode, refuse, unavailable, ROUTED,
};
use super::types::Host;
use super::{ApiError, ApiState};
use crate::api_proxy::to_owner;

/// The shard whose catalog defines the cluster's hosts.
const HOST_CATALOG: ShardId = ShardId(0);
/// The largest LUN map body read to find its export.
const MAP_BODY_MAX_BYTES: usize = 64 << 10;

/// The middleware (see the module doc); a no-op in single-process mode.
pub async fn route(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let (Some(compute), Some(cluster)) = (state.compute.clone(), state.cluster.clone()) else {
        return next.run(request).await;
    };
    let Some(segments) = host_path(request.uri().path()) else {
        return next.run(request).await;
    };
    let (own, kv) = (compute.shard, Arc::clone(cluster.kv()));
    let routed = request.headers().contains_key(ROUTED);
    let method = request.method().clone();
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    match (&method, segments.as_slice()) {
        (&Method::POST, [_, "luns"]) if !routed => map_to_owner(request, next, kv, own).await,
        (&Method::DELETE, [_, "luns", export]) if !routed => {
            let volume = volume_of(export);
            by_export(request, next, kv, own, volume).await
        }
        (&Method::POST, []) => identity(&state, request, next, kv, own, None, false).await,
        (&Method::DELETE, [host]) => {
            let host = (*host).to_string();
            identity(&state, request, next, kv, own, Some(host), true).await
        }
        (&Method::POST, [host, "initiators"])
        | (&Method::DELETE, [host, "initiators", _])
        | (&Method::PUT | &Method::DELETE, [host, "chap"]) => {
            let host = (*host).to_string();
            identity(&state, request, next, kv, own, Some(host), false).await
        }
        _ => next.run(request).await,
    }
}

/// The decoded segments after `/api/v1/hosts`, or `None` for another path.
fn host_path(path: &str) -> Option<Vec<String>> {
    let rest = path.strip_prefix("/api/v1/hosts")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    rest.split('/')
        .filter(|s| !s.is_empty())
        .map(percent_decode)
        .collect()
}

/// The volume of an export name (`vol` of `vol@snap`).
fn volume_of(export: &str) -> String {
    export.split('@').next().unwrap_or(export).to_string()
}

/// A LUN map: its body names the export, whose shard's owner maps it.
async fn map_to_owner(
    request: Request,
    next: Next,
    kv: Arc<dyn MetaStore>,
    own: ShardId,
) -> Response {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAP_BODY_MAX_BYTES).await else {
        return refuse(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a LUN map body is at most {MAP_BODY_MAX_BYTES} bytes"),
        );
    };
    let export = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|v| v.get("export")?.as_str().map(str::to_string));
    let request = Request::from_parts(parts, Body::from(bytes));
    match export {
        // The handler answers a body without an export with its own 400.
        None => next.run(request).await,
        Some(export) => by_export(request, next, kv, own, volume_of(&export)).await,
    }
}

/// Answered here when `volume` is this shard's (or nobody's), else by its shard's owner.
async fn by_export(
    request: Request,
    next: Next,
    kv: Arc<dyn MetaStore>,
    own: ShardId,
    volume: String,
) -> Response {
    let found = tokio::task::spawn_blocking(move || foreign_owner(&*kv, own, &volume)).await;
    match found {
        Ok(Ok(Some(owner))) => to_owner(owner, mark(request)).await,
        Ok(Ok(None)) => next.run(request).await,
        Ok(Err(why)) => unavailable(why),
        Err(e) => unavailable(format!("routing by shard: {e}")),
    }
}

/// A host definition or edit: answered where the host is defined (shard 0's owner, or this
/// c.node for a host its own catalog defines); a delete of the host first checks every other
/// shard.
async fn identity(
    state: &ApiState,
    request: Request,
    next: Next,
    kv: Arc<dyn MetaStore>,
    own: ShardId,
    host: Option<String>,
    deletes_host: bool,
) -> Response {
    let defined_here = own == HOST_CATALOG
        || host.as_deref().is_some_and(|h| {
            state
                .engine
                .shard_hosts()
                .iter()
                .any(|s| s.info.name == h && !s.holder)
        });
    if !defined_here {
        if request.headers().contains_key(ROUTED) {
            return next.run(request).await;
        }
        let k = Arc::clone(&kv);
        return match tokio::task::spawn_blocking(move || owner_api(&*k, HOST_CATALOG)).await {
            Ok(Some(owner)) => to_owner(owner, mark(request)).await,
            _ => unavailable(format!(
                "hosts are defined in shard {HOST_CATALOG}'s catalog, and shard {HOST_CATALOG} has no owner c.node now"
            )),
        };
    }
    if let (Some(host), true) = (host, deletes_host) {
        let k = Arc::clone(&kv);
        let h = host.clone();
        match tokio::task::spawn_blocking(move || luns_elsewhere(&*k, own, &h)).await {
            Ok(Ok(held)) if held.is_empty() => {}
            Ok(Ok(held)) => {
                return refuse(
                    StatusCode::CONFLICT,
                    format!(
                        "host {host:?} still sees {}: unmap them first (weft volume unmap VOLUME --host {host})",
                        held.join(", ")
                    ),
                )
            }
            Ok(Err(why)) => return unavailable(why),
            Err(e) => return unavailable(format!("reading the other shards' hosts: {e}")),
        }
    }
    next.run(request).await
}

/// Every shard of the cluster but `own`: those of the c.node registrations, shard 0, and those
/// of the volume name claims (a shard whose c.nodes are all down still holds its volumes).
fn shards_besides(kv: &dyn MetaStore, own: ShardId) -> Result<Vec<ShardId>, String> {
    let mut shards = other_shards(kv, own);
    let claims = kv
        .list(weft_engine::name_claims::NAME_CLAIMS_PREFIX)
        .map_err(|e| format!("reading the volume name claims: {e}"))?;
    for (_, v) in claims {
        match serde_json::from_slice::<weft_engine::name_claims::NameClaim>(&v.value) {
            Ok(claim) if claim.shard != own => shards.push(claim.shard),
            _ => {}
        }
    }
    shards.sort_unstable();
    shards.dedup();
    Ok(shards)
}

/// The catalog of `shard` as committed in etcd (`None`: it has none yet).
fn catalog(kv: &dyn MetaStore, shard: ShardId) -> Result<Option<ClusterState>, String> {
    let key = state_key(shard);
    let Some(v) = kv.get(&key).map_err(|e| format!("reading {key}: {e}"))? else {
        return Ok(None);
    };
    serde_json::from_slice(&v.value)
        .map(Some)
        .map_err(|e| format!("{key} does not decode: {e}"))
}

/// The LUNs of `host` that shards other than `own` map, as `export (LUN n, shard s)`.
fn luns_elsewhere(kv: &dyn MetaStore, own: ShardId, host: &str) -> Result<Vec<String>, String> {
    let mut held = Vec::new();
    for shard in shards_besides(kv, own)? {
        let Some(state) = catalog(kv, shard)? else {
            continue;
        };
        for h in state.hosts.iter().filter(|h| h.name == host) {
            held.extend(
                h.luns
                    .iter()
                    .map(|m| format!("{} (LUN {}, shard {shard})", m.export, m.lun)),
            );
        }
    }
    Ok(held)
}

/// Whether the cluster's host catalog defines `host` (a LUN map in another shard may hold
/// it then).
pub(super) fn defined_in_host_catalog(kv: &dyn MetaStore, host: &str) -> Result<bool, String> {
    Ok(catalog(kv, HOST_CATALOG)?
        .is_some_and(|state| state.hosts.iter().any(|h| h.name == host && !h.holder)))
}

/// Every shard's hosts merged by name (`None` in single-process mode): this c.node's own
/// shard from its engine, the others from their catalogs in etcd.
pub(super) async fn merged(state: &ApiState) -> Result<Option<Vec<Host>>, ApiError> {
    let (Some(compute), Some(cluster)) = (state.compute.clone(), state.cluster.clone()) else {
        return Ok(None);
    };
    let (own, kv, engine) = (
        compute.shard,
        Arc::clone(cluster.kv()),
        state.engine.clone(),
    );
    let per_shard = tokio::task::spawn_blocking(move || -> Result<_, String> {
        let mut per_shard = vec![(own, engine.shard_hosts())];
        for shard in shards_besides(&*kv, own)? {
            if let Some(state) = catalog(&*kv, shard)? {
                per_shard.push((shard, shard_hosts(&state)));
            }
        }
        per_shard.sort_by_key(|(shard, _)| *shard);
        Ok(per_shard)
    })
    .await
    .map_err(|e| {
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("reading the shards' hosts: {e}"),
        )
    })?
    .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e))?;
    Ok(Some(merge(
        per_shard,
        &state.array_target,
        state.iscsi_portal.as_deref(),
    )))
}

/// See [`merged`]: in shard order, a host's identity is its first record that is not a
/// holder, its LUNs those of every record, each marked with its shard.
fn merge(
    per_shard: Vec<(ShardId, Vec<ShardHost>)>,
    target: &str,
    portal: Option<&str>,
) -> Vec<Host> {
    let mut merged: Vec<(Host, bool)> = Vec::new();
    for (shard, hosts) in per_shard {
        for ShardHost { info, holder } in hosts {
            let mut host = Host::new(info, target, portal);
            for lun in &mut host.luns {
                lun.shard = Some(shard.0);
            }
            match merged.iter_mut().find(|(m, _)| m.name == host.name) {
                None => merged.push((host, holder)),
                Some((m, m_holder)) => {
                    let luns = std::mem::take(&mut m.luns);
                    let more = std::mem::take(&mut host.luns);
                    if *m_holder && !holder {
                        *m = host;
                        *m_holder = false;
                    }
                    m.luns = luns;
                    for lun in more {
                        if !m.luns.iter().any(|l| l.info.export == lun.info.export) {
                            m.luns.push(lun);
                        }
                    }
                    m.luns.sort_by_key(|l| l.info.lun);
                }
            }
        }
    }
    let mut hosts: Vec<Host> = merged.into_iter().map(|(h, _)| h).collect();
    hosts.sort_by(|a, b| a.name.cmp(&b.name));
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_engine::{HostInfo, LunInfo};

    fn info(name: &str, iqn: Option<&str>, luns: &[(u64, &str)]) -> HostInfo {
        HostInfo {
            name: name.into(),
            iqns: iqn.into_iter().map(str::to_string).collect(),
            nbd_addresses: Vec::new(),
            tls_names: Vec::new(),
            chap_user: None,
            mutual_chap_user: None,
            luns: luns
                .iter()
                .map(|(lun, export)| LunInfo {
                    lun: *lun,
                    export: (*export).into(),
                    read_only: export.contains('@'),
                })
                .collect(),
            created_unix_s: 0,
        }
    }

    #[test]
    fn a_hosts_records_merge_with_shard_0s_identity_and_every_shards_luns() {
        let shard0 = vec![ShardHost {
            info: info("db1", Some("iqn.2026-01.org.example:db1"), &[(0, "a")]),
            holder: false,
        }];
        let shard1 = vec![ShardHost {
            info: info("db1", None, &[(1, "b"), (2, "b@mon")]),
            holder: true,
        }];
        let hosts = merge(
            vec![(ShardId(0), shard0), (ShardId(1), shard1)],
            "iqn.t:array",
            Some("127.0.0.1:3260"),
        );
        assert_eq!(hosts.len(), 1);
        let db1 = &hosts[0];
        assert_eq!(db1.iqns, ["iqn.2026-01.org.example:db1"]);
        let luns: Vec<(u64, &str, Option<u16>)> = db1
            .luns
            .iter()
            .map(|l| (l.info.lun, l.info.export.as_str(), l.shard))
            .collect();
        assert_eq!(
            luns,
            [(0, "a", Some(0)), (1, "b", Some(1)), (2, "b@mon", Some(1))]
        );
        assert_eq!(
            db1.luns[1].iscsi_uri.as_deref(),
            Some("iscsi://127.0.0.1:3260/iqn.t:array/1")
        );
    }

    #[test]
    fn only_host_paths_are_taken() {
        assert_eq!(host_path("/api/v1/hosts"), Some(vec![]));
        assert_eq!(
            host_path("/api/v1/hosts/db1/luns/pg%40mon"),
            Some(vec!["db1".into(), "luns".into(), "pg@mon".into()])
        );
        assert_eq!(host_path("/api/v1/hostsx"), None);
        assert_eq!(host_path("/api/v1/volumes/db1"), None);
    }
}
