//! Tokens with roles and the audit log, through the real `weft` binary and the HTTP API: the
//! read-only token (`api-token-read-only`) reads everything and is refused (403, exit 6 in
//! the CLI) on every route the OpenAPI document lists that is not a GET, changing nothing;
//! every call that changes something or is refused is in `GET /api/v1/audit` and in
//! `audit.log` in the data dir, with who, what, when and the result.

mod common;

use std::collections::BTreeSet;

use common::*;
use serde_json::{json, Value};

/// Every (method, path) of the API document that is not a GET, path parameters filled in
/// with names that exist (a refusal must come before anything is looked up).
fn mutating_routes() -> Vec<(String, String)> {
    let doc = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/openapi.json"),
    )
    .expect("docs/openapi.json");
    let doc: Value = serde_json::from_str(&doc).expect("JSON");
    let mut out = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        for method in ops.as_object().expect("operations").keys() {
            if method == "get" || !path.starts_with("/api/v1/") {
                continue;
            }
            let filled = path
                .replace("{name}", "vol0")
                .replace("{export}", "vol0")
                .replace("{id}", "local");
            out.push((method.to_uppercase(), filled));
        }
    }
    out
}

#[test]
fn a_read_only_token_reads_and_is_refused_every_change_and_the_audit_log_says_so() {
    const TEST: &str =
        "a_read_only_token_reads_and_is_refused_every_change_and_the_audit_log_says_so";
    let srv = Server::start_with(TEST, ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let ro = std::fs::read_to_string(srv.data_dir.join("api-token-read-only"))
        .expect("the read-only token file")
        .trim()
        .to_string();
    assert_ne!(ro, srv.token());

    // It reads.
    let (status, body) = api_request(&srv.api, "GET", "/api/v1/volumes", None, Some(&ro));
    assert_eq!(status, 200, "{body}");
    let (status, _) = api_request(&srv.api, "GET", "/api/v1/capacity", None, Some(&ro));
    assert_eq!(status, 200);

    // It is refused every change the API offers.
    let routes = mutating_routes();
    assert!(
        routes.len() >= 15,
        "too few mutating routes found: {routes:?}"
    );
    for (method, path) in &routes {
        let (status, body) = api_request(&srv.api, method, path, Some(json!({})), Some(&ro));
        assert_eq!(
            status, 403,
            "{method} {path} with the read-only token: {body}"
        );
        assert!(body.contains("read-only"), "{body}");
    }
    // Nothing changed.
    let names: Vec<String> = srv
        .cli_json(&["volume", "ls", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names, ["vol0"]);

    // The CLI with it: reads work, changes exit 6 (the token refused).
    let ls = srv.cli(&["--token", &ro, "volume", "ls"]);
    assert!(ls.success(), "{}", ls.all());
    let create = srv.cli(&["--token", &ro, "volume", "create", "x", "--size", "1M"]);
    assert_eq!(
        create.status.and_then(|s| s.code()),
        Some(6),
        "{}",
        create.all()
    );
    assert!(create.stderr.contains("read-only"), "{}", create.all());

    // The admin's change and every refusal are in the audit log, in the API and the file.
    srv.cli_ok(&["volume", "create", "audited", "--size", "1M"]);
    let (status, _) = api_request(&srv.api, "GET", "/api/v1/volumes", None, Some("wrong"));
    assert_eq!(status, 401);
    let audit = srv.cli_json(&["--token", &ro, "stats", "--json"]); // a read: audited, coalesced
    assert!(audit.is_object());
    let (status, body) = api_request(&srv.api, "GET", "/api/v1/audit", None, Some(&ro));
    assert_eq!(status, 200, "{body}");
    let entries: Vec<Value> = serde_json::from_str(&body).expect("JSON");
    let refused: BTreeSet<(String, String)> = entries
        .iter()
        .filter(|e| e["role"] == "read-only" && e["status"] == 403)
        .map(|e| {
            (
                e["method"].as_str().unwrap().to_string(),
                e["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for route in &routes {
        assert!(
            refused.contains(route),
            "{route:?} not audited: {entries:#?}"
        );
    }
    assert!(
        entries.iter().any(|e| e["role"] == "admin"
            && e["method"] == "POST"
            && e["path"] == "/api/v1/volumes"
            && e["status"] == 201
            && e["time_ms"].as_u64().is_some_and(|t| t > 1_700_000_000_000)),
        "{entries:#?}"
    );
    assert!(
        entries
            .iter()
            .any(|e| e["role"] == "unknown" && e["status"] == 401),
        "{entries:#?}"
    );
    assert!(
        entries.iter().any(|e| e["role"] == "read-only"
            && e["method"] == "GET"
            && e["path"] == "/api/v1/stats"
            && e["status"] == 200),
        "an allowed read is audited: {entries:#?}"
    );
    // A second identical read within the minute is counted, not logged: the line of the
    // next one logged says how many it stands for.
    let (status, _) = api_request(&srv.api, "GET", "/api/v1/stats", None, Some(&ro));
    assert_eq!(status, 200);
    let file = std::fs::read_to_string(srv.data_dir.join("audit.log")).expect("audit.log");
    let stats_lines = file
        .lines()
        .filter(|l| l.contains(r#""path":"/api/v1/stats""#) && l.contains(r#""status":200"#))
        .count();
    assert_eq!(stats_lines, 1, "{file}");
    // The file has every entry listed, then the read of the list itself (logged once it
    // was answered).
    let lines: Vec<Value> = file
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), entries.len() + 1, "{file}");
    assert_eq!(&lines[entries.len() - 1], entries.last().unwrap());
    assert_eq!(lines[entries.len()]["path"], "/api/v1/audit", "{file}");
}
