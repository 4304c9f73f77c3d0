//! Host endpoints of the management API, the storage-array model of who sees what:
//! `GET|POST /hosts`, `GET|DELETE /hosts/{name}`, `POST /hosts/{name}/luns`
//! (`{"export": NAME, "lun": N}`, `lun` optional: the lowest free) and
//! `DELETE /hosts/{name}/luns/{export}`.
//!
//! CHAP secrets go in with `POST /hosts` and never come out: a host's JSON says which CHAP
//! user it logs in as, never the secret. Every host's JSON carries how to reach its LUNs:
//! the array target, the portal, and an `iscsi://` URI per LUN.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::Value;
use weft_engine::{HostInfo, HostSpec, LunInfo};

use super::{blocking, ApiError, ApiState, JsonBody};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateHost {
    name: String,
    #[serde(default)]
    iqns: Vec<String>,
    #[serde(default)]
    nbd_addresses: Vec<String>,
    #[serde(default)]
    tls_names: Vec<String>,
    chap_user: Option<String>,
    chap_secret: Option<String>,
    mutual_chap_user: Option<String>,
    mutual_chap_secret: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MapExport {
    export: String,
    lun: Option<u64>,
}

fn lun_json(state: &ApiState, lun: &LunInfo) -> Value {
    let mut v = serde_json::to_value(lun).expect("LUN info serialises");
    if let Some(portal) = &state.iscsi_portal {
        v["iscsi_uri"] = format!("iscsi://{portal}/{}/{}", state.array_target, lun.lun).into();
    }
    v
}

fn host_json(state: &ApiState, host: &HostInfo) -> Value {
    let mut v = serde_json::to_value(host).expect("host info serialises");
    v["luns"] = host.luns.iter().map(|l| lun_json(state, l)).collect();
    v["iscsi_target"] = state.array_target.to_string().into();
    v["iscsi_portal"] = state.iscsi_portal.as_deref().into();
    v
}

pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    let hosts = blocking(move || Ok(engine.list_hosts())).await?;
    Ok(Json(hosts.iter().map(|h| host_json(&state, h)).collect()))
}

pub(super) async fn create(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateHost>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
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
    Ok((StatusCode::CREATED, Json(host_json(&state, &info))))
}

pub(super) async fn info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.host_info(&name)).await?;
    Ok(Json(host_json(&state, &info)))
}

pub(super) async fn delete(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_host(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn map(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<MapExport>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let engine = state.engine.clone();
    let host = name.clone();
    let lun = blocking(move || engine.map_export(&host, &body.export, body.lun)).await?;
    let mut v = lun_json(&state, &lun);
    v["host"] = name.into();
    Ok((StatusCode::CREATED, Json(v)))
}

pub(super) async fn unmap(
    State(state): State<ApiState>,
    Path((name, export)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.unmap_export(&name, &export)).await?;
    Ok(StatusCode::NO_CONTENT)
}
