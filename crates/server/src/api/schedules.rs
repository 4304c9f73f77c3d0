//! Snapshot schedule endpoints: `GET /snapshot-schedules` (every schedule with its next run
//! and its snapshots), `PUT /volumes/{name}/snapshot-schedule` (`{"every_s", "keep",
//! "daily"}`, set or replace) and `DELETE /volumes/{name}/snapshot-schedule` (the schedule
//! goes, its snapshots stay). The server's `snapshot_scheduler` fires them; times are by its
//! clock.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use weft_engine::schedules::{auto_snapshot_time, AUTO_PREFIX};
use weft_engine::{ScheduleRecord, SNAPSHOT_SEPARATOR};

use super::types::{ErrorBody, Schedule, SetSchedule};
use super::{blocking, ApiError, ApiState, JsonBody};

/// A schedule's JSON; `images` are the export names (for its snapshots).
fn schedule(record: ScheduleRecord, images: &[String]) -> Schedule {
    let prefix = format!("{}{SNAPSHOT_SEPARATOR}{AUTO_PREFIX}", record.volume);
    let mut snapshots: Vec<(u64, String)> = images
        .iter()
        .filter(|n| n.starts_with(&prefix))
        .filter_map(|n| {
            let short = n.split_once(SNAPSHOT_SEPARATOR)?.1;
            Some((auto_snapshot_time(short)?, n.clone()))
        })
        .collect();
    snapshots.sort();
    Schedule {
        next_run_unix_s: record.next_run_unix_s(),
        snapshots: snapshots.into_iter().map(|(_, n)| n).collect(),
        volume: record.volume,
        every_s: record.every_s,
        keep: record.keep,
        daily: record.daily,
        created_unix_s: record.created_unix_s,
        last_run_unix_s: record.last_run_unix_s,
    }
}

fn snapshot_images(engine: &weft_engine::Engine) -> Vec<String> {
    engine
        .list_images()
        .into_iter()
        .filter(|i| i.read_only)
        .map(|i| i.name)
        .collect()
}

/// Every snapshot schedule, with its next run.
#[utoipa::path(
    get,
    path = "/api/v1/snapshot-schedules",
    operation_id = "list_snapshot_schedules",
    tag = "snapshots",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every schedule, by volume", body = Vec<Schedule>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn list(State(state): State<ApiState>) -> Result<Json<Vec<Schedule>>, ApiError> {
    let engine = state.engine.clone();
    let (records, images) =
        blocking(move || Ok((engine.snapshot_schedules(), snapshot_images(&engine)))).await?;
    Ok(Json(
        records.into_iter().map(|r| schedule(r, &images)).collect(),
    ))
}

/// Set (or replace) a volume's snapshot schedule.
#[utoipa::path(
    put,
    path = "/api/v1/volumes/{name}/snapshot-schedule",
    operation_id = "set_snapshot_schedule",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    request_body = SetSchedule,
    responses(
        (status = 200, description = "The schedule", body = Schedule),
        (status = 400, description = "Invalid interval, retention or body", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such volume", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn set(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<SetSchedule>,
) -> Result<Json<Schedule>, ApiError> {
    let engine = state.engine.clone();
    let now = state.schedule_clock.now_unix_s();
    let (record, images) = blocking(move || {
        let record =
            engine.set_snapshot_schedule(&name, body.every_s, body.keep, body.daily, now)?;
        Ok((record, snapshot_images(&engine)))
    })
    .await?;
    Ok(Json(schedule(record, &images)))
}

/// Remove a volume's snapshot schedule (its snapshots stay).
#[utoipa::path(
    delete,
    path = "/api/v1/volumes/{name}/snapshot-schedule",
    operation_id = "remove_snapshot_schedule",
    tag = "snapshots",
    security(("bearer" = [])),
    params(("name" = String, Path, description = "The volume")),
    responses(
        (status = 204, description = "Removed"),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "The volume has no schedule", body = ErrorBody),
        (status = 500, description = "Internal error", body = ErrorBody),
    ),
)]
pub(super) async fn remove(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.remove_snapshot_schedule(&name)).await?;
    Ok(StatusCode::NO_CONTENT)
}
