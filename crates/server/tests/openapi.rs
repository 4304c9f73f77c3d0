//! The management API's OpenAPI document: the checked-in `docs/openapi.json` is the one the
//! code generates, and it describes exactly the routes the router has.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{header, Method, Request, StatusCode};
use tower::ServiceExt;
use weft_engine::{Engine, EngineConfig};
use weft_server::api::{self, openapi, ApiState};

const UPDATE: &str = "WEFT_UPDATE_OPENAPI=1 cargo test -p weft-server --test openapi";

fn repo_file(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(path)
}

#[test]
fn the_openapi_document_is_up_to_date() {
    let path = repo_file("docs/openapi.json");
    let generated = openapi::document_json();
    if std::env::var_os("WEFT_UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &generated).expect("write docs/openapi.json");
        return;
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    if checked_in == generated {
        return;
    }
    let first_difference = checked_in
        .lines()
        .zip(generated.lines())
        .enumerate()
        .find(|(_, (old, new))| old != new)
        .map(|(n, (old, new))| format!("line {}:\n  file: {old}\n  code: {new}", n + 1))
        .unwrap_or_else(|| "one is a prefix of the other".into());
    panic!(
        "docs/openapi.json is not the document the code generates (first difference at {first_difference}).\n\
         The management API changed: run `{UPDATE}` and commit docs/openapi.json."
    );
}

/// (method, path) of every operation of the document.
fn documented() -> BTreeSet<(String, String)> {
    let doc = serde_json::to_value(openapi::document()).expect("document serialises");
    let paths = doc["paths"].as_object().expect("paths");
    let mut operations = BTreeSet::new();
    let mut ids = BTreeSet::new();
    for (path, item) in paths {
        for (method, operation) in item.as_object().expect("path item") {
            if [
                "get", "put", "post", "delete", "patch", "head", "options", "trace",
            ]
            .contains(&method.as_str())
            {
                operations.insert((method.to_uppercase(), path.clone()));
                let id = operation["operationId"].as_str().expect("an operationId");
                assert!(ids.insert(id.to_string()), "operationId {id} twice");
            }
        }
    }
    operations
}

/// (method, path) of every `.route(...)` in `api::router`, read from its source.
fn routed() -> BTreeSet<(String, String)> {
    let source = std::fs::read_to_string(repo_file("crates/server/src/api.rs")).expect("api.rs");
    let start = source.find("pub fn router(").expect("api::router");
    let end = start + source[start..].find("\n}\n").expect("end of api::router");
    let body = &source[start..end];
    let mut operations = BTreeSet::new();
    for (at, _) in body.match_indices(".route(") {
        // The call's arguments: up to the parenthesis that closes `.route(`.
        let args_start = at + ".route(".len();
        let mut depth = 1;
        let mut args_end = args_start;
        for (i, c) in body[args_start..].char_indices() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                args_end = args_start + i;
                break;
            }
        }
        let args = &body[args_start..args_end];
        let path = args.split('"').nth(1).expect("a route's path literal");
        let handlers = &args[args.find(',').expect("a route's handlers")..];
        let mut methods = 0;
        for method in ["get", "post", "put", "delete", "patch"] {
            let called = handlers.match_indices(&format!("{method}(")).any(|(i, _)| {
                i == 0 || !handlers[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_')
            });
            if called {
                operations.insert((method.to_uppercase(), path.to_string()));
                methods += 1;
            }
        }
        assert!(methods > 0, "no method found in .route({args})");
    }
    operations
}

#[test]
fn every_route_is_documented_and_every_documented_route_exists() {
    let documented = documented();
    let routed = routed();
    let undocumented: Vec<_> = routed.difference(&documented).collect();
    let unrouted: Vec<_> = documented.difference(&routed).collect();
    assert!(
        undocumented.is_empty() && unrouted.is_empty(),
        "routes without a #[utoipa::path] in api::openapi: {undocumented:?}; \
         documented operations the router lacks: {unrouted:?}"
    );
    assert!(
        routed.len() > 30,
        "the router's source was not read: {routed:?}"
    );
}

/// Every documented operation reaches a handler of the real router: not axum's 404 (an empty
/// body; a handler's 404 says `{"error": ...}`), not 405.
#[tokio::test]
async fn every_documented_operation_reaches_a_handler() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Arc::new(Engine::open(EngineConfig::for_tests(dir.path())).expect("engine"));
    let router = api::router(ApiState {
        engine,
        cluster: None,
        compute: None,
        capacity: Default::default(),
        read_only_token: "read-only-secret".into(),
        audit: Default::default(),
        token: "secret".into(),
        nbd_address: "127.0.0.1:10809".into(),
        iscsi_portal: None,
        array_target: "iqn.2026-11.dev.weft:array".into(),
        io: weft_server::io_stats::IoStats::new(),
        qos: weft_server::qos::QosRegistry::new(),
        sessions: weft_server::sessions::Sessions::new(),
        reservations: weft_server::reservation_records::ReservationRecords::in_memory(),
        cluster_tokens: None,
        schedule_clock: Default::default(),
        tiering: Default::default(),
        router: None,
    });
    for (method, path) in documented() {
        // Path parameters name nothing that exists: handlers answer 404 with a JSON error.
        let uri: String = path
            .split('/')
            .map(|part| if part.starts_with('{') { "none" } else { part })
            .collect::<Vec<_>>()
            .join("/");
        let request = Request::builder()
            .method(Method::from_bytes(method.as_bytes()).expect("method"))
            .uri(&uri)
            .header(header::AUTHORIZATION, "Bearer secret")
            .body(Body::empty())
            .expect("request");
        let response = router.clone().oneshot(request).await.expect("response");
        let status = response.status();
        assert_ne!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        if status == StatusCode::NOT_FOUND {
            let body = axum::body::to_bytes(response.into_body(), 1 << 20)
                .await
                .expect("body");
            let error: serde_json::Value = serde_json::from_slice(&body)
                .unwrap_or_else(|_| panic!("{method} {uri}: 404 from no handler"));
            assert!(error["error"].is_string(), "{method} {uri}: {error}");
        }
    }
}

/// The document is served without a token, as checked in.
#[tokio::test]
async fn the_document_is_served_without_a_token() {
    let dir = tempfile::tempdir().expect("tempdir");
    let engine = Arc::new(Engine::open(EngineConfig::for_tests(dir.path())).expect("engine"));
    let router = api::router(ApiState {
        engine,
        cluster: None,
        compute: None,
        capacity: Default::default(),
        read_only_token: "read-only-secret".into(),
        audit: Default::default(),
        token: "secret".into(),
        nbd_address: "127.0.0.1:10809".into(),
        iscsi_portal: None,
        array_target: "iqn.2026-11.dev.weft:array".into(),
        io: weft_server::io_stats::IoStats::new(),
        qos: weft_server::qos::QosRegistry::new(),
        sessions: weft_server::sessions::Sessions::new(),
        reservations: weft_server::reservation_records::ReservationRecords::in_memory(),
        cluster_tokens: None,
        schedule_clock: Default::default(),
        tiering: Default::default(),
        router: None,
    });
    let request = Request::get("/api/v1/openapi.json")
        .body(Body::empty())
        .expect("request");
    let response = router.oneshot(request).await.expect("response");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/json",
        "content type"
    );
    let body = axum::body::to_bytes(response.into_body(), 16 << 20)
        .await
        .expect("body");
    assert_eq!(
        std::str::from_utf8(&body).expect("utf-8"),
        openapi::document_json()
    );
}
