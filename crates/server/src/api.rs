//! The management API: HTTP/JSON under `/api/v1/`, every request authenticated by the bearer
//! token created at first start. Handlers call the engine on the blocking pool.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use weft_engine::{Engine, EngineError};

/// What handlers share.
#[derive(Debug, Clone)]
pub struct ApiState {
    pub engine: Arc<Engine>,
    pub token: Arc<str>,
    /// `host:port` of the NBD listener, for volume URIs.
    pub nbd_address: Arc<str>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateVolume {
    name: String,
    size_bytes: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ResizeVolume {
    size_bytes: u64,
}

/// An API error: status and message.
#[derive(Debug)]
pub struct ApiError(StatusCode, String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

/// The one place engine errors become HTTP statuses.
impl From<EngineError> for ApiError {
    fn from(e: EngineError) -> ApiError {
        let status = match &e {
            EngineError::UnknownVolume { .. } | EngineError::Gone => StatusCode::NOT_FOUND,
            EngineError::VolumeExists { .. } => StatusCode::CONFLICT,
            EngineError::InvalidName { .. }
            | EngineError::InvalidSize { .. }
            | EngineError::OutOfRange { .. } => StatusCode::BAD_REQUEST,
            EngineError::NoSpace => StatusCode::INSUFFICIENT_STORAGE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        ApiError(status, e.to_string())
    }
}

pub fn router(state: ApiState) -> Router {
    Router::new()
        .route("/api/v1/volumes", get(list_volumes).post(create_volume))
        .route(
            "/api/v1/volumes/{name}",
            get(volume_info).delete(delete_volume),
        )
        .route("/api/v1/volumes/{name}/resize", post(resize_volume))
        .route("/api/v1/stats", get(stats))
        .route("/api/v1/sync", post(sync))
        .route("/api/v1/gc", post(gc))
        .route("/api/v1/checkpoint", post(checkpoint))
        .layer(middleware::from_fn_with_state(state.clone(), require_token))
        .with_state(state)
}

async fn require_token(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match presented {
        Some(t) if constant_time_eq(t.as_bytes(), state.token.as_bytes()) => {
            next.run(request).await
        }
        _ => ApiError(
            StatusCode::UNAUTHORIZED,
            "missing or wrong bearer token".into(),
        )
        .into_response(),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(ApiError::from)
}

fn with_uri(state: &ApiState, info: weft_engine::VolumeInfo) -> serde_json::Value {
    let mut v = serde_json::to_value(&info).expect("volume info serialises");
    v["nbd_uri"] = format!("nbd://{}/{}", state.nbd_address, info.name).into();
    v
}

async fn list_volumes(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let volumes = blocking(move || Ok(engine.list_volumes())).await?;
    Ok(Json(
        volumes.into_iter().map(|v| with_uri(&state, v)).collect(),
    ))
}

/// A JSON body, or 400 with the parser's reason (axum's own rejection would be 422).
struct JsonBody<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(request, state).await {
            Ok(Json(value)) => Ok(JsonBody(value)),
            Err(rejection) => Err(ApiError(StatusCode::BAD_REQUEST, rejection.body_text())),
        }
    }
}

async fn create_volume(
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<CreateVolume>,
) -> Result<(StatusCode, Json<serde_json::Value>), ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.create_volume(&body.name, body.size_bytes)).await?;
    tracing::info!(volume = %info.name, size_bytes = info.size_bytes, "volume created");
    Ok((StatusCode::CREATED, Json(with_uri(&state, info))))
}

async fn volume_info(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.volume_info(&name)).await?;
    Ok(Json(with_uri(&state, info)))
}

async fn delete_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.delete_volume(&name, false)).await?;
    Ok(StatusCode::NO_CONTENT)
}

async fn resize_volume(
    State(state): State<ApiState>,
    Path(name): Path<String>,
    JsonBody(body): JsonBody<ResizeVolume>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    let info = blocking(move || engine.resize_volume(&name, body.size_bytes)).await?;
    Ok(Json(with_uri(&state, info)))
}

async fn stats(State(state): State<ApiState>) -> Result<Json<weft_engine::EngineStats>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || Ok(engine.stats())).await?))
}

async fn sync(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.sync()).await?;
    Ok(Json(serde_json::json!({ "synced": true })))
}

async fn gc(State(state): State<ApiState>) -> Result<Json<weft_engine::GcReport>, ApiError> {
    let engine = state.engine.clone();
    Ok(Json(blocking(move || engine.gc_now()).await?))
}

async fn checkpoint(State(state): State<ApiState>) -> Result<Json<serde_json::Value>, ApiError> {
    let engine = state.engine.clone();
    blocking(move || engine.checkpoint_now()).await?;
    Ok(Json(serde_json::json!({ "checkpointed": true })))
}
