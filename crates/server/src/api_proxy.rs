//! A c.node that does not own the cluster passes every management request on to the owner's
//! API and returns its answer, so `weft --data-dir` on any compute machine, the web UI and
//! scripts work through any c.node. The request goes as it came (method, path, query, the
//! caller's `Authorization` header, body); the owner checks the token, and accepts every
//! c.node's ([`crate::cluster_tokens`]). The answer streams back as it comes, so the UI's
//! live statistics (`text/event-stream`) work through a standby too, and carries
//! `x-weft-served-by: <owner id>`.
//!
//! An owner that does not answer gives 502 naming it; a takeover in progress gives the
//! caller that error, not a wait: management calls are rare and the caller retries.

use std::io::Read;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

/// The largest request body passed on (the API's bodies are small JSON documents).
pub const BODY_MAX_BYTES: usize = 16 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Until the owner's answer starts: some calls (a delete that frees a large volume) take
/// a while.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(300);
/// The header naming the c.node that answered.
pub const SERVED_BY: &str = "x-weft-served-by";

/// The owner a request goes to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OwnerApi {
    pub id: String,
    /// Its API: `http://host:port` (as its ownership record has it) or `host:port`.
    pub api: String,
}

impl OwnerApi {
    fn base(&self) -> String {
        let api = self.api.trim_end_matches('/');
        if api.contains("://") {
            api.to_string()
        } else {
            format!("http://{api}")
        }
    }
}

/// Headers that belong to one hop, not to the request or answer.
fn hop_by_hop(name: &HeaderName) -> bool {
    [
        header::CONNECTION,
        header::HOST,
        header::CONTENT_LENGTH,
        header::TRANSFER_ENCODING,
        header::TE,
        header::TRAILER,
        header::UPGRADE,
        header::PROXY_AUTHORIZATION,
        header::PROXY_AUTHENTICATE,
    ]
    .contains(name)
        || name.as_str() == "keep-alive"
}

fn agent() -> ureq::Agent {
    ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .max_redirects(0)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_recv_response(Some(ANSWER_TIMEOUT))
            .build(),
    )
}

fn bad_gateway(owner: &OwnerApi, why: &str) -> Response {
    (
        StatusCode::BAD_GATEWAY,
        Json(serde_json::json!({
            "error": format!(
                "this c.node passes management requests to the owner, c.node {} at {}, which did not answer: {why}",
                owner.id, owner.api
            )
        })),
    )
        .into_response()
}

/// Passes `request` on to `owner` and returns its answer.
pub async fn to_owner(owner: OwnerApi, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let body = match axum::body::to_bytes(body, BODY_MAX_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            return (
                StatusCode::PAYLOAD_TOO_LARGE,
                Json(serde_json::json!({ "error": format!("request body: {e}") })),
            )
                .into_response()
        }
    };
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut outgoing = ureq::http::Request::builder()
        .method(parts.method.clone())
        .uri(format!("{}{path}", owner.base()));
    for (name, value) in &parts.headers {
        if !hop_by_hop(name) {
            outgoing = outgoing.header(name, value);
        }
    }
    let outgoing = match outgoing.body(body.to_vec()) {
        Ok(r) => r,
        Err(e) => return bad_gateway(&owner, &format!("bad request to pass on: {e}")),
    };
    let (head_tx, head_rx) = tokio::sync::oneshot::channel();
    let (body_tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(8);
    // ureq blocks: the request and the reading of its answer run on the blocking pool, the
    // answer's body crossing to the response through a channel.
    tokio::task::spawn_blocking(move || {
        let (head, answer) = match agent().run(outgoing) {
            Ok(response) => response.into_parts(),
            Err(e) => {
                let _ = head_tx.send(Err(e.to_string()));
                return;
            }
        };
        if head_tx.send(Ok(head)).is_err() {
            return;
        }
        let mut reader = answer.into_reader();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match reader.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    // The caller went away: stop reading (dropping the owner's connection).
                    if body_tx
                        .blocking_send(Ok(Bytes::copy_from_slice(&buf[..n])))
                        .is_err()
                    {
                        return;
                    }
                }
                Err(e) => {
                    let _ = body_tx.blocking_send(Err(e));
                    return;
                }
            }
        }
    });
    let head = match head_rx.await {
        Ok(Ok(head)) => head,
        Ok(Err(why)) => return bad_gateway(&owner, &why),
        Err(_) => return bad_gateway(&owner, "the request was dropped"),
    };
    let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Response::new(Body::from_stream(stream));
    *response.status_mut() = head.status;
    for (name, value) in &head.headers {
        if !hop_by_hop(name) {
            response.headers_mut().append(name, value.clone());
        }
    }
    if let Ok(id) = HeaderValue::from_str(&owner.id) {
        response
            .headers_mut()
            .insert(HeaderName::from_static(SERVED_BY), id);
    }
    response
}
