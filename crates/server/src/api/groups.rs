//! Consistency group endpoints (the engine's `catalog::groups` does the work):
//!
//! - `GET|POST /groups` (`{"name", "volumes": [..]}`), `GET /groups/{name}`,
//!   `DELETE /groups/{name}[?with_snapshots=true&volumes=true&force=true]`;
//! - `POST /groups/{name}/members` (`{"volumes": [..]}`), `DELETE /groups/{name}/members/{volume}`;
//! - `POST /groups/{name}/snapshots` (`{"name"}`): one crash-consistent point across every
//!   member; `GET|DELETE /group-snapshots/{group@snap}[?keep_hidden=true]`;
//! - `POST /group-snapshots/{group@snap}/clones` (`{"name", "map": {"pgwal": "devwal"}}`): a
//!   clone group, members `NAME-MEMBER` unless mapped;
//! - `POST /groups/{name}/refresh|rollback` (`{"snapshot", "force"}`): the whole group at once,
//!   refused (409) while clients have a member open, unless forced.
//!
//! Groups live in the catalog of the shard whose c.node answers; their members must be its.

use std::collections::BTreeMap;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use weft_engine::{GroupInfo, GroupSnapshotInfo};

use super::types::{DeleteSnapshotQuery, ErrorBody, NewName, ToSnapshot};
use super::{blocking, forget_reservations, sessions, ApiError, ApiState, JsonBody, QueryArgs};

/// `POST /groups`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGroup {
    pub name: String,
    /// Its member volumes (at least one; each in no other group, all in this shard).
    pub volumes: Vec<String>,
}

/// `POST /groups/{name}/members`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GroupVolumes {
    pub volumes: Vec<String>,
}

/// `POST /group-snapshots/{name}/clones`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CloneGroup {
    /// The clone group's name; its members are `NAME-MEMBER` unless `map` names them.
    pub name: String,
    /// Source member -> the name of its clone.
    #[serde(default)]
    pub map: BTreeMap<String, String>,
}

/// `DELETE /groups/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteGroupQuery {
    /// Delete its group snapshots too (refused without it when it has some).
    #[serde(default)]
    pub with_snapshots: bool,
    /// Delete its member volumes too (they stay, out of any group, without it).
    #[serde(default)]
    pub volumes: bool,
    /// Go on while clients have an export this deletes open (they are disconnected).
    #[serde(default)]
    pub force: bool,
}

/// Every consistency group, with its members, group snapshots and space.
#[utoipa::path(
    get,
    path = "/api/v1/groups",
    operation_id = "list_groups",
    tag = "groups",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "The groups", body = Vec<GroupInfo>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<Vec<GroupInfo>>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || Ok(engine.list_groups())).await?))
}

/// Create a consistency group of existing volumes.
#[utoipa::path(
    post,
    path = "/api/v1/groups",
    operation_id = "create_group",
    tag = "groups",
    security(("bearer" = [])),
    request_body = CreateGroup,
    responses(
        (status = 201, description = "Created", body = GroupInfo),
        (status = 400, description = "Invalid name, no volumes, or invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 409, description = "The name is taken, a volume is in another group or another shard", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn create(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateGroup>,
) -> Result<(StatusCode, Json<GroupInfo>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_group(&body.name, &body.volumes)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// A consistency group.
#[utoipa::path(
    get,
    path = "/api/v1/groups/{name}",
    operation_id = "group_info",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    responses(
        (status = 200, description = "The group", body = GroupInfo),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<GroupInfo>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || engine.group_info(&name)).await?))
}

/// Delete a group (with its group snapshots and member volumes, if asked).
#[utoipa::path(
    delete,
    path = "/api/v1/groups/{name}",
    operation_id = "delete_group",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group"), DeleteGroupQuery),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, description = "Invalid query", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
        (status = 409, description = "It has group snapshots, a member has snapshots, something is mapped, or clients have an export open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn delete(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteGroupQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    let lookup = name.clone();
    let exports =
        blocking(move || engine.group_exports(&lookup, query.with_snapshots, query.volumes))
            .await?;
    sessions::refuse_if_busy(
        &state,
        &exports,
        &format!("delete group {name}"),
        query.force,
    )
    .await?;
    let engine = state.engine.clone();
    blocking(move || engine.delete_group(&name, query.with_snapshots, query.volumes)).await?;
    forget_reservations(&state, exports).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Add member volumes.
#[utoipa::path(
    post,
    path = "/api/v1/groups/{name}/members",
    operation_id = "add_group_members",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    request_body = GroupVolumes,
    responses(
        (status = 200, description = "The group", body = GroupInfo),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or volume", body = ErrorBody),
        (status = 409, description = "A volume is a member already, of this or another group, or in another shard", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn add_members(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<GroupVolumes>,
) -> Result<Json<GroupInfo>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(
        blocking(move || engine.add_group_members(&name, &body.volumes)).await?,
    ))
}

/// Take a member out of the group (it stays a volume).
#[utoipa::path(
    delete,
    path = "/api/v1/groups/{name}/members/{volume}",
    operation_id = "remove_group_member",
    tag = "groups",
    security(("bearer" = [])),
    params(
        ("name" = String, Path, description = "The group"),
        ("volume" = String, Path, description = "The member volume"),
    ),
    responses(
        (status = 200, description = "The group", body = GroupInfo),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or volume", body = ErrorBody),
        (status = 409, description = "Not a member, or the last one", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn remove_member(
    State(state): State<ApiState>,
    Path((name, volume)): Path<(String, String)>,
) -> Result<Json<GroupInfo>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(
        blocking(move || engine.remove_group_members(&name, &[volume])).await?,
    ))
}

/// Snapshot every member at one crash-consistent point (metadata only).
#[utoipa::path(
    post,
    path = "/api/v1/groups/{name}/snapshots",
    operation_id = "create_group_snapshot",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    request_body = NewName,
    responses(
        (status = 201, description = "Created", body = GroupSnapshotInfo),
        (status = 400, description = "Invalid name or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group", body = ErrorBody),
        (status = 409, description = "The name is taken (by the group or a member), or a chain is too deep", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn create_snapshot(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<NewName>,
) -> Result<(StatusCode, Json<GroupSnapshotInfo>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_group_snapshot(&name, &body.name)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// A group snapshot.
#[utoipa::path(
    get,
    path = "/api/v1/group-snapshots/{name}",
    operation_id = "group_snapshot_info",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "GROUP@SNAPSHOT")),
    responses(
        (status = 200, description = "The group snapshot", body = GroupSnapshotInfo),
        (status = 400, description = "Not GROUP@SNAPSHOT", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or snapshot", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn snapshot_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<GroupSnapshotInfo>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(
        blocking(move || engine.group_snapshot_info(&name)).await?,
    ))
}

/// Delete a group snapshot: every member snapshot.
#[utoipa::path(
    delete,
    path = "/api/v1/group-snapshots/{name}",
    operation_id = "delete_group_snapshot",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "GROUP@SNAPSHOT"), DeleteSnapshotQuery),
    responses(
        (status = 204, description = "Deleted (member snapshots clones use: hidden)"),
        (status = 400, description = "Not GROUP@SNAPSHOT, or invalid query", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or snapshot", body = ErrorBody),
        (status = 409, description = "Clones use a member snapshot, or one is mapped", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn delete_snapshot(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    QueryArgs(query): QueryArgs<DeleteSnapshotQuery>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    let exports = blocking(move || {
        let members = engine.group_snapshot_info(&name)?.members;
        engine.delete_group_snapshot(&name, query.keep_hidden)?;
        Ok(members)
    })
    .await?;
    forget_reservations(&state, exports).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Clone a group snapshot into a clone group (metadata only).
#[utoipa::path(
    post,
    path = "/api/v1/group-snapshots/{name}/clones",
    operation_id = "clone_group",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "GROUP@SNAPSHOT")),
    request_body = CloneGroup,
    responses(
        (status = 201, description = "The clone group", body = GroupInfo),
        (status = 400, description = "Invalid name, map or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group snapshot", body = ErrorBody),
        (status = 409, description = "A name is taken, or a chain is too deep", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn clone(
    State(state): State<ApiState>,
    Path(snapshot): Path<String>,
    JsonBody(body): JsonBody<CloneGroup>,
) -> Result<(StatusCode, Json<GroupInfo>), ApiError> {
    let engine = state.engine.clone();
    let map: Vec<(String, String)> = body.map.into_iter().collect();
    let info = blocking(move || engine.clone_group(&snapshot, &body.name, &map)).await?;
    Ok((StatusCode::CREATED, Json(info)))
}

/// Refresh a clone group to another group snapshot of its source (every member at once).
#[utoipa::path(
    post,
    path = "/api/v1/groups/{name}/refresh",
    operation_id = "refresh_group",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The clone group")),
    request_body = ToSnapshot,
    responses(
        (status = 200, description = "Refreshed", body = GroupInfo),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or group snapshot", body = ErrorBody),
        (status = 409, description = "A member has no counterpart in it, or clients have a member open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn refresh(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<GroupInfo>, ApiError> {
    refuse_if_busy(&state, &name, "refresh", body.force).await?;
    let engine = state.engine.clone();
    Ok(Json(
        blocking(move || engine.refresh_group(&name, &body.snapshot)).await?,
    ))
}

/// Roll a group back to one of its own group snapshots (every member at once).
#[utoipa::path(
    post,
    path = "/api/v1/groups/{name}/rollback",
    operation_id = "rollback_group",
    tag = "groups",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The group")),
    request_body = ToSnapshot,
    responses(
        (status = 200, description = "Rolled back", body = GroupInfo),
        (status = 400, description = "Invalid body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such group or group snapshot", body = ErrorBody),
        (status = 409, description = "Not its own group snapshot, a member joined after it, or clients have a member open", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn rollback(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ToSnapshot>,
) -> Result<Json<GroupInfo>, ApiError> {
    refuse_if_busy(&state, &name, "roll back", body.force).await?;
    let engine = state.engine.clone();
    Ok(Json(
        blocking(move || engine.rollback_group(&name, &body.snapshot)).await?,
    ))
}

/// 404 for a group that does not exist, 409 while clients have a member open and the request
/// does not say `force`.
async fn refuse_if_busy(
    state: &ApiState,
    name: &str,
    action: &str,
    force: bool,
) -> Result<(), ApiError> {
    let engine = state.engine.clone();
    let lookup = name.to_string();
    let members = blocking(move || engine.group_member_names(&lookup)).await?;
    sessions::refuse_if_busy(state, &members, &format!("{action} group {name}"), force).await
}
