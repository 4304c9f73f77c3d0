//! Volume management through the CLI and the HTTP API, the bearer token, and what survives a
//! kill -9 + restart (volumes, their data, the token).

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

fn volume_names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("volume list is not an array: {list}"))
        .iter()
        .map(|v| {
            v["name"]
                .as_str()
                .unwrap_or_else(|| panic!("volume without name: {v}"))
                .to_string()
        })
        .collect()
}

#[test]
fn restart_keeps_volumes_data_and_token() {
    let (mut rng, _) = test_rng("restart_keeps_volumes_data_and_token");
    let mut srv = Server::start_with("mgmt-restart", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("restart_keeps_volumes_data_and_token") {
        return;
    }
    let token_path = srv.data_dir.join("api-token");
    let mode = fs::metadata(&token_path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "api-token mode should be 0600, is {mode:o}");
    let token_before = fs::read_to_string(&token_path).unwrap();
    assert!(!token_before.trim().is_empty(), "empty api-token");

    let sizes = [
        ("alpha", 16u64 << 20),
        ("beta", 32 << 20),
        ("gamma", 1 << 30),
    ];
    let mut contents = Vec::new();
    for (name, size) in sizes {
        srv.cli_ok(&[
            "volume",
            "create",
            name,
            "--size",
            &format!("{}M", size >> 20),
        ]);
        let data = random_bytes(&mut rng, 1 << 20);
        let off = (size - (2 << 20)) & !4095; // near the end of each volume
        let mut c = srv.nbd_client(name);
        assert_eq!(c.size, size, "{name} size over NBD");
        c.write(off, &data).unwrap();
        c.write(0, &data[..8192]).unwrap();
        c.disconnect(); // no flush: acknowledged writes must survive kill -9 anyway
        contents.push((name, size, off, data));
    }

    srv.kill9_and_restart();

    let token_after = fs::read_to_string(&token_path).unwrap();
    assert_eq!(
        token_before, token_after,
        "api-token changed across restart"
    );
    // The old token still works.
    let (st, body) = api_request(
        &srv.api,
        "GET",
        "/api/v1/volumes",
        None,
        Some(token_before.trim()),
    );
    assert_eq!(st, 200, "old token after restart: {body}");
    let list: Value = serde_json::from_str(&body).unwrap();
    let names = volume_names(&list);
    for n in ["vol0", "alpha", "beta", "gamma"] {
        assert!(
            names.contains(&n.to_string()),
            "volume {n} missing after restart: {names:?}"
        );
    }
    let cli_list = srv.cli_json(&["volume", "list", "--json"]);
    assert_eq!(
        volume_names(&cli_list).len(),
        names.len(),
        "CLI and API lists differ: {cli_list} vs {list}"
    );
    for (name, size, off, data) in &contents {
        let info = srv.cli_json(&["volume", "info", name, "--json"]);
        assert_eq!(info["size_bytes"].as_u64(), Some(*size), "{name}: {info}");
        let mut c = srv.nbd_client(name);
        assert_eq!(c.size, *size);
        let got = c.read(*off, data.len() as u32).unwrap();
        assert!(
            got == *data,
            "{name}: data at {off} differs after restart (first diff at {:?})",
            first_diff(&got, data)
        );
        assert_eq!(
            c.read(0, 8192).unwrap(),
            &data[..8192],
            "{name}: block 0 after restart"
        );
        c.disconnect();
    }
}

#[test]
fn api_rejects_missing_and_wrong_token() {
    let srv = Server::start_with("mgmt-auth", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("api_rejects_missing_and_wrong_token") {
        return;
    }
    let good = srv.token();
    for (method, path, body) in [
        ("GET", "/api/v1/volumes", None),
        ("GET", "/api/v1/volumes/vol0", None),
        ("GET", "/api/v1/stats", None),
        (
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": "evil", "size_bytes": 1u64 << 20})),
        ),
        (
            "POST",
            "/api/v1/volumes/vol0/resize",
            Some(json!({"size_bytes": 1u64 << 30})),
        ),
        ("POST", "/api/v1/sync", None),
        ("POST", "/api/v1/gc", None),
        ("POST", "/api/v1/checkpoint", None),
        ("DELETE", "/api/v1/volumes/vol0", None),
        ("GET", "/api/v1/hosts", None),
        (
            "POST",
            "/api/v1/hosts",
            Some(json!({"name": "evil", "iqns": ["iqn.2026-01.evil:x"]})),
        ),
        (
            "POST",
            "/api/v1/hosts/evil/luns",
            Some(json!({"export": "vol0"})),
        ),
    ] {
        let (st, text) = api_request(&srv.api, method, path, body.clone(), None);
        assert_eq!(st, 401, "{method} {path} without token -> {st}: {text}");
        let wrong = format!("{good}x");
        let (st, text) = api_request(&srv.api, method, path, body.clone(), Some(&wrong));
        assert_eq!(
            st, 401,
            "{method} {path} with a wrong token -> {st}: {text}"
        );
        let (st, text) = api_request(&srv.api, method, path, body, Some(""));
        assert_eq!(
            st, 401,
            "{method} {path} with an empty token -> {st}: {text}"
        );
    }
    // Nothing above took effect.
    let list = srv.api_json("GET", "/api/v1/volumes", None);
    assert_eq!(
        volume_names(&list),
        vec!["vol0".to_string()],
        "unauthorised calls changed state: {list}"
    );
    assert_eq!(
        srv.api_json("GET", "/api/v1/volumes/vol0", None)["size_bytes"].as_u64(),
        Some(64 << 20)
    );
    // The CLI with a wrong token fails clearly.
    let out = srv.cli(&["--token", "nope", "volume", "list"]);
    assert!(
        !out.success(),
        "CLI with a wrong token should fail: {}",
        out.all()
    );
    assert!(
        out.all().contains("401")
            || out.all().to_lowercase().contains("token")
            || out.all().to_lowercase().contains("unauthori"),
        "CLI error should mention the token / 401: {}",
        out.all()
    );
}

#[test]
fn cli_volume_lifecycle_and_errors() {
    require_tool("nbdinfo");
    let srv = Server::start_with("mgmt-cli", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("cli_volume_lifecycle_and_errors") {
        return;
    }
    // create
    srv.cli_ok(&["volume", "create", "db1", "--size", "100M"]);
    let info = srv.cli_json(&["volume", "info", "db1", "--json"]);
    assert_eq!(info["name"], "db1");
    assert_eq!(info["size_bytes"].as_u64(), Some(100 << 20), "{info}");
    assert_eq!(info["block_size_bytes"].as_u64(), Some(4096), "{info}");
    let uri = info["nbd_uri"]
        .as_str()
        .unwrap_or_else(|| panic!("nbd_uri: {info}"));
    assert!(uri.ends_with("/db1"), "nbd_uri {uri}");
    assert_eq!(
        info["mapped_bytes"].as_u64(),
        Some(0),
        "fresh volume maps nothing: {info}"
    );
    // The API returns the same VolumeInfo.
    let api_info = srv.api_json("GET", "/api/v1/volumes/db1", None);
    assert_eq!(api_info, info, "API and CLI VolumeInfo differ");
    // The URI it gives works with a real client.
    let ni = nbdinfo_json(uri);
    assert_eq!(
        ni["exports"][0]["export-size"].as_u64(),
        Some(100 << 20),
        "{ni}"
    );

    // list (human and JSON)
    let human = srv.cli_ok(&["volume", "list"]);
    assert!(
        human.contains("db1") && human.contains("vol0"),
        "volume list: {human}"
    );
    let names = volume_names(&srv.cli_json(&["volume", "list", "--json"]));
    assert!(
        names.contains(&"db1".to_string()) && names.contains(&"vol0".to_string()),
        "{names:?}"
    );

    // duplicate create: non-zero exit and a clear message
    let dup = srv.cli(&["volume", "create", "db1", "--size", "100M"]);
    assert!(
        !dup.success(),
        "duplicate create should fail: {}",
        dup.all()
    );
    let msg = dup.stderr.to_lowercase();
    assert!(
        msg.contains("exist") || msg.contains("409"),
        "duplicate create error should say it exists: {}",
        dup.all()
    );
    let (st, body) = srv.api(
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": "db1", "size_bytes": 100u64 << 20})),
    );
    assert_eq!(st, 409, "duplicate create via API: {body}");
    let (st, body) = srv.api("GET", "/api/v1/volumes/nosuch", None);
    assert_eq!(st, 404, "unknown volume: {body}");
    let bad = srv.cli(&["volume", "info", "nosuch"]);
    assert!(
        !bad.success(),
        "info of an unknown volume should fail: {}",
        bad.all()
    );

    // write some data, then resize: grows, data stays, nbdinfo sees the new size
    let mut c = srv.nbd_client("db1");
    let (mut rng, _) = test_rng("cli_volume_lifecycle_and_errors");
    let data = random_bytes(&mut rng, 1 << 20);
    c.write(99 << 20, &data).unwrap();
    c.disconnect();
    assert_eq!(
        srv.cli_json(&["volume", "info", "db1", "--json"])["mapped_bytes"].as_u64(),
        Some(1 << 20)
    );
    srv.cli_ok(&["volume", "resize", "db1", "--size", "1G"]);
    assert_eq!(
        srv.cli_json(&["volume", "info", "db1", "--json"])["size_bytes"].as_u64(),
        Some(1 << 30)
    );
    let ni = nbdinfo_json(&srv.nbd_uri("db1"));
    assert_eq!(
        ni["exports"][0]["export-size"].as_u64(),
        Some(1 << 30),
        "nbdinfo after resize: {ni}"
    );
    let mut c = srv.nbd_client("db1");
    assert_eq!(
        c.read(99 << 20, data.len() as u32).unwrap(),
        data,
        "data after resize"
    );
    c.write((1 << 30) - 4096, &data[..4096]).unwrap(); // the new tail is writable
    c.disconnect();
    // shrinking is refused
    let shrink = srv.cli(&["volume", "resize", "db1", "--size", "10M"]);
    assert!(!shrink.success(), "shrink should fail: {}", shrink.all());
    assert_eq!(
        srv.cli_json(&["volume", "info", "db1", "--json"])["size_bytes"].as_u64(),
        Some(1 << 30)
    );

    // delete: gone from the list, the export is refused, the name can be reused (empty)
    srv.cli_ok(&["volume", "delete", "db1", "--yes"]);
    let names = volume_names(&srv.cli_json(&["volume", "list", "--json"]));
    assert!(
        !names.contains(&"db1".to_string()),
        "db1 still listed: {names:?}"
    );
    assert!(
        NbdClient::connect(srv.nbd, "db1").is_err(),
        "deleted export still served"
    );
    let (st, _) = srv.api("DELETE", "/api/v1/volumes/db1", None);
    assert_eq!(st, 404, "deleting twice");
    srv.cli_ok(&["volume", "create", "db1", "--size", "100M"]);
    let mut c = srv.nbd_client("db1");
    assert!(
        c.read(99 << 20, 1 << 20).unwrap().iter().all(|&b| b == 0),
        "a re-created volume must not show old data"
    );
    c.disconnect();

    // API create/delete round trip with the documented status codes
    let (st, body) = srv.api(
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": "viaapi", "size_bytes": 8u64 << 20})),
    );
    assert_eq!(st, 201, "create via API: {body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["size_bytes"].as_u64(), Some(8 << 20));
    let (st, body) = srv.api(
        "POST",
        "/api/v1/volumes/viaapi/resize",
        Some(json!({"size_bytes": 16u64 << 20})),
    );
    assert!((200..300).contains(&st), "resize via API: {st} {body}");
    let (st, body) = srv.api("DELETE", "/api/v1/volumes/viaapi", None);
    assert_eq!(st, 204, "delete via API: {body}");

    // The CLI also works from the environment (WEFT_DATA_DIR) and with explicit --api/--token.
    let out = run(
        Command::new(weft_bin())
            .args(["volume", "list"])
            .env("WEFT_DATA_DIR", &srv.data_dir)
            .current_dir(srv.scratch.path()),
        Duration::from_secs(60),
    )
    .ok();
    assert!(out.stdout.contains("vol0"), "WEFT_DATA_DIR: {}", out.stdout);
    let out = run(
        Command::new(weft_bin())
            .args(["--api", &srv.api, "--token", &srv.token(), "volume", "list"])
            .current_dir(srv.scratch.path())
            .env_remove("WEFT_DATA_DIR"),
        Duration::from_secs(60),
    )
    .ok();
    assert!(out.stdout.contains("vol0"), "--api/--token: {}", out.stdout);
    // stats, sync, gc, checkpoint all answer
    srv.cli_ok(&["sync"]);
    srv.cli_ok(&["gc"]);
    srv.cli_ok(&["checkpoint"]);
    let stats = srv.cli_json(&["stats", "--json"]);
    assert!(
        stats["reduction"]["logical_bytes"].is_u64(),
        "stats: {stats}"
    );
}

#[test]
fn api_bad_requests_get_400() {
    let srv = Server::start_with("mgmt-400", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("api_bad_requests_get_400") {
        return;
    }
    let mut wrong = Vec::new();
    for (what, body) in [
        ("empty name", json!({"name": "", "size_bytes": 1u64 << 20})),
        ("missing size_bytes", json!({"name": "nosize"})),
        (
            "size_bytes not a number",
            json!({"name": "str", "size_bytes": "1G"}),
        ),
        (
            "size not a multiple of the 4096-byte block",
            json!({"name": "odd", "size_bytes": 4097}),
        ),
        ("zero size", json!({"name": "zero", "size_bytes": 0})),
    ] {
        let (st, text) = srv.api("POST", "/api/v1/volumes", Some(body.clone()));
        if st != 400 {
            wrong.push(format!(
                "POST /api/v1/volumes {body} ({what}) -> {st} {text}"
            ));
        }
    }
    let (st, text) = srv.api(
        "POST",
        "/api/v1/volumes/vol0/resize",
        Some(json!({"size_bytes": 1u64 << 20})),
    );
    if st != 400 {
        wrong.push(format!("shrinking resize -> {st} {text}"));
    }
    let names = volume_names(&srv.api_json("GET", "/api/v1/volumes", None));
    assert_eq!(
        names,
        vec!["vol0".to_string()],
        "a bad request created a volume"
    );
    assert!(
        wrong.is_empty(),
        "the contract says bad requests get 400:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn health_probes_need_no_token_and_logs_carry_no_colour_codes() {
    let srv = Server::start_with("mgmt-health", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("health_probes_need_no_token_and_logs_carry_no_colour_codes") {
        return;
    }
    for (path, body) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let (st, text) = api_request(&srv.api, "GET", path, None, None);
        assert_eq!(st, 200, "{path} without a token -> {st}: {text}");
        assert!(text.contains(body), "{path}: {text}");
    }
    // stderr is a pipe here, as it is for a log file or journald: plain text.
    let log = srv.server_output();
    assert!(log.contains("INFO"), "no log lines: {log}");
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escape codes in a log that is no terminal"
    );
}

#[test]
fn a_deleted_default_volume_stays_deleted_after_a_restart() {
    let mut srv = Server::start_with("mgmt-default", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("a_deleted_default_volume_stays_deleted_after_a_restart") {
        return;
    }
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "64M"]);
    srv.cli_ok(&["volume", "delete", "vol0", "--yes"]);
    srv.stop();
    srv.restart();
    let list = srv.api_json("GET", "/api/v1/volumes", None);
    assert_eq!(volume_names(&list), vec!["pgdata".to_string()], "{list}");
    // The banner's connect line names a volume that exists, its size in binary units.
    let banner = srv.server_output();
    let last = banner.rsplit("weft: data dir").next().unwrap();
    assert!(
        last.contains(&format!("connect: qemu-img info nbd://{}/pgdata ", srv.nbd)),
        "{last}"
    );
    assert!(!last.contains("/vol0"), "{last}");
    assert!(last.contains("/pgdata  (64.0 MiB)"), "{last}");
    // A volume mapped to a host is said to be that host's, and no connect line offers it.
    srv.cli_ok(&["host", "create", "db1", "--iqn", "iqn.2026-11.test:db1"]);
    srv.cli_ok(&["volume", "map", "pgdata", "--host", "db1"]);
    srv.stop();
    srv.restart();
    let banner = srv.server_output();
    let last = banner.rsplit("weft: data dir").next().unwrap();
    assert!(
        last.contains("/pgdata  (64.0 MiB; mapped to db1: served to that host only)"),
        "{last}"
    );
    assert!(
        last.contains("connect: every volume is mapped to a host"),
        "{last}"
    );
    // A client asking for an export it may not open is refused, and the server says so.
    assert!(NbdClient::connect(srv.nbd, "nosuch").is_err());
    poll_until(Duration::from_secs(10), "the refusal logged", || {
        srv.server_output()
            .lines()
            .any(|l| {
                l.contains(" WARN ")
                    && l.contains("nbd export refused")
                    && l.contains("export=\"nosuch\"")
            })
            .then_some(())
    });
    srv.cli_ok(&["volume", "unmap", "pgdata", "--host", "db1"]);
    // Even with no volume left, a datastore that had volumes is not new.
    srv.cli_ok(&["volume", "delete", "pgdata", "--yes"]);
    srv.stop();
    srv.restart();
    let list = srv.api_json("GET", "/api/v1/volumes", None);
    assert!(volume_names(&list).is_empty(), "{list}");
    let banner = srv.server_output();
    let last = banner.rsplit("weft: data dir").next().unwrap();
    assert!(
        last.contains("connect: no volume yet: weft volume create NAME --size SIZE"),
        "{last}"
    );
}
