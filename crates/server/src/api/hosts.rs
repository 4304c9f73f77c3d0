//! Host endpoints of the management API, the storage-array model of who sees what:
//! `GET|POST /hosts`, `GET|DELETE /hosts/{name}`, `POST /hosts/{name}/luns`
//! (`{"export": NAME, "lun": N}`, `lun` optional: the lowest free) and
//! `DELETE /hosts/{name}/luns/{export}`; edits in place: `POST /hosts/{name}/initiators`
//! (`{"iqn": IQN}`), `DELETE /hosts/{name}/initiators/{iqn}`, `PUT /hosts/{name}/chap`
//! (new CHAP secrets) and `DELETE /hosts/{name}/chap`.
//!
//! CHAP secrets go in with `POST /hosts` and never come out: a host's JSON says which CHAP
//! user it logs in as, never the secret. Every host's JSON carries how to reach its LUNs:
//! the array target, the portal, and an `iscsi://` URI per LUN.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use weft_engine::{ChapSpec, HostSpec};

use super::types::{AddInitiator, CreateHost, ErrorBody, Host, Lun, MapExport, MappedLun, SetChap};
use super::{blocking, ApiError, ApiState, JsonBody};

fn host(state: &ApiState, info: weft_engine::HostInfo) -> Host {
    Host::new(info, &state.array_target, state.iscsi_portal.as_deref())
}

/// List the hosts.
#[utoipa::path(
    get,
    path = "/api/v1/hosts",
    operation_id = "list_hosts",
    tag = "hosts",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every host", body = Vec<Host>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<Vec<Host>>, ApiError> {
    if let Some(hosts) = super::host_catalog::merged(&state).await? {
        return Ok(Json(hosts));
    }
    let engine = state.engine.clone();
    let hosts = blocking(move || Ok(engine.list_hosts())).await?;
    Ok(Json(hosts.into_iter().map(|h| host(&state, h)).collect()))
}

/// Define a host.
#[utoipa::path(
    post,
    path = "/api/v1/hosts",
    operation_id = "create_host",
    tag = "hosts",
    security(("bearer" = [])),
    request_body = CreateHost,
    responses(
        (status = 201, description = "Created", body = Host),
        (status = 400, description = "Invalid name, initiator, address, CHAP or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "The name is taken", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn create(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateHost>,
) -> Result<(StatusCode, Json<Host>), ApiError> {
    let spec = HostSpec {
        name: body.name,
        iqns: body.iqns,
        nbd_addresses: body.nbd_addresses,
        tls_names: body.tls_names,
        chap_user: body.chap_user,
        chap_secret: body.chap_secret,
        mutual_user: body.mutual_chap_user,
        mutual_secret: body.mutual_chap_secret,
    };
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_host(&spec)).await?;
    Ok((StatusCode::CREATED, Json(host(&state, info))))
}

/// A host and its LUNs.
#[utoipa::path(
    get,
    path = "/api/v1/hosts/{name}",
    operation_id = "host_info",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    responses(
        (status = 200, description = "The host", body = Host),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Host>, ApiError> {
    if let Some(hosts) = super::host_catalog::merged(&state).await? {
        return match hosts.into_iter().find(|h| h.name == name) {
            Some(h) => Ok(Json(h)),
            None => Err(weft_engine::EngineError::UnknownHost { name }.into()),
        };
    }
    let engine = state.engine.clone();
    let info = blocking(move || engine.host_info(&name)).await?;
    Ok(Json(host(&state, info)))
}

/// Delete a host.
#[utoipa::path(
    delete,
    path = "/api/v1/hosts/{name}",
    operation_id = "delete_host",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 409, description = "It still has LUNs", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn delete(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_host(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Map a volume or snapshot to a host as a LUN (snapshots read-only).
#[utoipa::path(
    post,
    path = "/api/v1/hosts/{name}/luns",
    operation_id = "map_lun",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    request_body = MapExport,
    responses(
        (status = 201, description = "Mapped", body = MappedLun),
        (status = 400, description = "Invalid LUN or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host, volume or snapshot", body = ErrorBody),
        (status = 409, description = "The LUN is taken, or the export is mapped to the host already", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn map(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<MapExport>,
) -> Result<(StatusCode, Json<MappedLun>), ApiError> {
    let engine = state.engine.clone();
    let host = name.clone();
    // In a shard other than the host catalog's, a host shard 0 defines is mapped to through a
    // holder record (`host_catalog`).
    let kv = match (&state.compute, &state.cluster) {
        (Some(c), Some(cluster)) if c.shard != weft_engine::ShardId(0) => {
            Some(std::sync::Arc::clone(cluster.kv()))
        }
        _ => None,
    };
    let lun = blocking(move || {
        let defined_here = engine
            .shard_hosts()
            .iter()
            .any(|h| h.info.name == host && !h.holder);
        match kv {
            Some(kv) if !defined_here => {
                match super::host_catalog::defined_in_host_catalog(&*kv, &host) {
                    Ok(true) => engine.map_export_to_cluster_host(&host, &body.export, body.lun),
                    Ok(false) => Err(weft_engine::EngineError::UnknownHost { name: host }),
                    Err(why) => Err(weft_engine::EngineError::Io(
                        weft_engine::error::IoFailure::CorruptMetadata {
                            what: "the cluster's host catalog".into(),
                            detail: why,
                        },
                    )),
                }
            }
            _ => engine.map_export(&host, &body.export, body.lun),
        }
    })
    .await?;
    let lun = Lun::new(lun, &state.array_target, state.iscsi_portal.as_deref());
    Ok((StatusCode::CREATED, Json(MappedLun { lun, host: name })))
}

/// Unmap a volume or snapshot from a host.
#[utoipa::path(
    delete,
    path = "/api/v1/hosts/{name}/luns/{export}",
    operation_id = "unmap_lun",
    tag = "hosts",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The host"),
        ("export" = String, Path, description = "The volume or snapshot"),
    ),
    responses(
        (status = 204, description = "Unmapped"),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host, or not mapped to it", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn unmap(
    State(state): State<ApiState>,
    Path((name, export)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.unmap_export(&name, &export)).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Let a host log in with one more initiator name.
#[utoipa::path(
    post,
    path = "/api/v1/hosts/{name}/initiators",
    operation_id = "add_initiator",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    request_body = AddInitiator,
    responses(
        (status = 200, description = "The host", body = Host),
        (status = 400, description = "Not an initiator name, too many, or invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 409, description = "Another host has that initiator", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn add_initiator(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<AddInitiator>,
) -> Result<Json<Host>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.add_initiator(&name, &body.iqn)).await?;
    Ok(Json(host(&state, info)))
}

/// Take an initiator name away from a host (its sessions lose their LUNs).
#[utoipa::path(
    delete,
    path = "/api/v1/hosts/{name}/initiators/{iqn}",
    operation_id = "remove_initiator",
    tag = "hosts",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The host"),
        ("iqn" = String, Path, description = "The initiator name"),
    ),
    responses(
        (status = 200, description = "The host", body = Host),
        (status = 400, description = "The host has no such initiator, or it is the last one it needs", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn remove_initiator(
    State(state): State<ApiState>,
    Path((name, iqn)): Path<(String, String)>,
) -> Result<Json<Host>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.remove_initiator(&name, &iqn)).await?;
    Ok(Json(host(&state, info)))
}

/// Set or change a host's CHAP secrets (the next login uses them).
#[utoipa::path(
    put,
    path = "/api/v1/hosts/{name}/chap",
    operation_id = "set_host_chap",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    request_body = SetChap,
    responses(
        (status = 200, description = "The host", body = Host),
        (status = 400, description = "Invalid CHAP user or secret, no initiator, or invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn set_chap(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SetChap>,
) -> Result<Json<Host>, ApiError> {
    let spec = ChapSpec {
        user: Some(body.chap_user),
        secret: Some(body.chap_secret),
        mutual_user: body.mutual_chap_user,
        mutual_secret: body.mutual_chap_secret,
    };
    let engine = state.engine.clone();
    let info = blocking(move || engine.set_host_chap(&name, &spec)).await?;
    Ok(Json(host(&state, info)))
}

/// Remove a host's CHAP: its initiators log in without it.
#[utoipa::path(
    delete,
    path = "/api/v1/hosts/{name}/chap",
    operation_id = "remove_host_chap",
    tag = "hosts",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The host")),
    responses(
        (status = 200, description = "The host", body = Host),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such host", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn remove_chap(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Host>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.set_host_chap(&name, &ChapSpec::default())).await?;
    Ok(Json(host(&state, info)))
}
