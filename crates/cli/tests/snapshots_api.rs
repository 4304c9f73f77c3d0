//! Snapshots, clones, refresh and rollback through the real `weft` binary: its CLI and its
//! HTTP API. The happy paths check what the data reads as over NBD; every refused request is
//! checked for its status, a message that tells the user what is wrong, and an unchanged
//! catalog (volumes and snapshots).

mod common;

use common::*;
use serde_json::{json, Value};

/// What a refused request must not change: names, sizes, origins, links between volumes and
/// snapshots, families. (Space figures are left out: the destager may still be moving.)
fn catalog(srv: &Server) -> Value {
    let volumes = srv.api_json("GET", "/api/v1/volumes", None);
    let snapshots = srv.api_json("GET", "/api/v1/snapshots", None);
    let project = |list: &Value, keys: &[&str]| -> Value {
        list.as_array()
            .unwrap_or_else(|| panic!("not a list: {list}"))
            .iter()
            .map(|item| {
                let mut out = json!({ "family": item["family"]["id"] });
                for k in keys {
                    out[*k] = item[*k].clone();
                }
                out
            })
            .collect()
    };
    let volume_keys = ["name", "size_bytes", "origin", "snapshots", "chain_layers"];
    json!({
        "volumes": project(&volumes, &volume_keys),
        "snapshots": project(&snapshots, &["name", "volume", "size_bytes", "clones"]),
    })
}

fn names(list: &Value) -> Vec<String> {
    list.as_array()
        .unwrap_or_else(|| panic!("not a list: {list}"))
        .iter()
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect()
}

fn snapshot_names(srv: &Server) -> Vec<String> {
    names(&srv.api_json("GET", "/api/v1/snapshots", None))
}

fn volume_names(srv: &Server) -> Vec<String> {
    names(&srv.api_json("GET", "/api/v1/volumes", None))
}

/// `"METHOD /path"` with a JSON body (`null`: none), as `(status, body)`.
fn call(srv: &Server, request: &str, body: &Value) -> (u16, String) {
    let (method, path) = request.split_once(' ').expect("METHOD /path");
    srv.api(method, path, (!body.is_null()).then(|| body.clone()))
}

/// A request that must succeed with `status`; its JSON answer.
fn accepted(srv: &Server, request: &str, body: Value, status: u16) -> Value {
    let (st, text) = call(srv, request, &body);
    assert_eq!(st, status, "{request} {body}: {text}");
    serde_json::from_str(&text).unwrap_or(Value::Null)
}

/// A request that must be refused with `status` and an `{"error"}` naming each of `words`,
/// leaving the catalog as it was.
fn refused(srv: &Server, request: &str, body: &Value, status: u16, words: &[&str]) {
    let before = catalog(srv);
    let (st, text) = call(srv, request, body);
    assert_eq!(st, status, "{request} {body}: {text}");
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{request}: error body is not JSON ({e}): {text}"));
    let msg = v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("{request}: no \"error\" in {text}"));
    for w in words {
        assert!(msg.contains(w), "{request}: {msg:?} should mention {w:?}");
    }
    let after = catalog(srv);
    assert_eq!(
        after, before,
        "{request} was refused but changed the catalog"
    );
}

/// A CLI command that must fail with `error: ...` naming each of `words`, changing nothing.
fn cli_refused(srv: &Server, args: &[&str], words: &[&str]) {
    let before = catalog(srv);
    let out = srv.cli(args);
    assert!(
        !out.success(),
        "`weft {}` should fail: {}",
        args.join(" "),
        out.all()
    );
    assert!(
        out.stderr.starts_with("error: "),
        "`weft {}` should print `error: ...`: {}",
        args.join(" "),
        out.stderr
    );
    for w in words {
        assert!(
            out.stderr.contains(w),
            "`weft {}`: {:?} should mention {w:?}",
            args.join(" "),
            out.stderr
        );
    }
    assert_eq!(
        catalog(srv),
        before,
        "`weft {}` failed but changed the catalog",
        args.join(" ")
    );
}

/// The export reads as `data` at `offset` (a mismatch does not print megabytes).
fn assert_reads(srv: &Server, export: &str, offset: u64, data: &[u8], why: &str) {
    let mut c = srv.nbd_client(export);
    let got = c.read(offset, data.len() as u32).unwrap();
    c.disconnect();
    assert!(got == data, "{export} at {offset}: {why}: data differs");
}

/// `text` contains every one of `words`.
fn assert_mentions(text: &str, words: &[&str]) {
    for w in words {
        assert!(text.contains(w), "{w:?} missing from:\n{text}");
    }
}

/// A table row whose first column is `first` and that also shows `also`.
fn has_row(table: &str, first: &str, also: &str) -> bool {
    table
        .lines()
        .any(|l| l.split_whitespace().next() == Some(first) && l.contains(also))
}

fn write(srv: &Server, export: &str, offset: u64, data: &[u8]) {
    let mut c = srv.nbd_client(export);
    c.write(offset, data).unwrap();
    c.disconnect();
}

#[test]
fn snapshot_clone_refresh_rollback_through_the_cli() {
    let srv = Server::start_with("snap-cli", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("snapshot_clone_refresh_rollback_through_the_cli") {
        return;
    }
    let (mut rng, _) = test_rng("snapshot_clone_refresh_rollback_through_the_cli");
    let (a, b, c, d) = (
        random_bytes(&mut rng, 1 << 20),
        random_bytes(&mut rng, 1 << 20),
        random_bytes(&mut rng, 1 << 20),
        random_bytes(&mut rng, 1 << 20),
    );
    let off = 8 * MIB;
    write(&srv, "vol0", off, &a);

    // snapshot create: name (VOLUME@NAME), barrier, URI
    let out = srv.cli_ok(&["snapshot", "create", "vol0", "s1"]);
    assert_mentions(
        &out,
        &["snapshot vol0@s1 of vol0", " us", &srv.nbd_uri("vol0@s1")],
    );
    write(&srv, "vol0", off, &b);
    assert_reads(
        &srv,
        "vol0@s1",
        off,
        &a,
        "s1 reads as vol0 did when it was cut",
    );
    assert_reads(&srv, "vol0", off, &b, "vol0 reads its newer data");

    // list (human, JSON, of one volume) and info (human, JSON = API)
    let human = srv.cli_ok(&["snapshot", "list"]);
    let columns = [
        "NAME",
        "VOLUME",
        "SIZE",
        "ALLOCATED",
        "OWN",
        "SHARED",
        "UNIQUE",
        "CLONES",
    ];
    assert_mentions(&human, &columns);
    assert_mentions(&human, &["CREATED"]);
    assert!(has_row(&human, "vol0@s1", " vol0 "), "{human}");
    let list = srv.cli_json(&["snapshot", "list", "--json"]);
    assert_eq!(names(&list), ["vol0@s1"], "{list}");
    assert_eq!(list, srv.cli_json(&["snapshot", "list", "vol0", "--json"]));
    // By its short name (the only s1) or its full name, '@' plain or percent-encoded.
    let info = srv.cli_json(&["snapshot", "info", "s1", "--json"]);
    assert_eq!(
        info,
        srv.cli_json(&["snapshot", "info", "vol0@s1", "--json"])
    );
    for path in ["s1", "vol0@s1", "vol0%40s1"] {
        let by_api = srv.api_json("GET", &format!("/api/v1/snapshots/{path}"), None);
        assert_eq!(info, by_api, "{path}");
    }
    assert_eq!(
        (&info["name"], &info["short_name"]),
        (&json!("vol0@s1"), &json!("s1"))
    );
    assert_eq!(info["volume"], "vol0", "{info}");
    assert_eq!(info["nbd_uri"], srv.nbd_uri("vol0@s1").as_str(), "{info}");
    let iscsi = format!(
        "iscsi://{}/iqn.2026-11.dev.weft:vol0:s1/0",
        srv.iscsi.unwrap()
    );
    assert_eq!(info["iscsi_uri"], iscsi.as_str(), "{info}");
    assert!(info["space"]["unique_stored_bytes"].is_u64(), "{info}");
    let reduction = &info["family"]["reduction"];
    assert!(reduction["stored_bytes"].is_u64(), "{info}");
    let human = srv.cli_ok(&["snapshot", "info", "s1"]);
    assert_mentions(&human, &["vol0", "family", "reduction", "(read-only)"]);

    // clone create: a writable volume reading as the snapshot, in the snapshot's family
    let out = srv.cli_ok(&["clone", "create", "vol0@s1", "c1"]);
    assert_mentions(&out, &["clone c1 of vol0@s1", &srv.nbd_uri("c1")]);
    assert_reads(&srv, "c1", off, &a, "the clone reads as its snapshot");
    let clone = srv.cli_json(&["volume", "info", "c1", "--json"]);
    assert_eq!(clone["origin"], "vol0@s1", "{clone}");
    assert_eq!(clone["family"]["id"], info["family"]["id"], "{clone}");
    let human = srv.cli_ok(&["volume", "list"]);
    assert_mentions(
        &human,
        &["ORIGIN", "ALLOCATED", "OWN", "SHARED", "UNIQUE", "HOSTS"],
    );
    assert!(has_row(&human, "c1", " vol0@s1 "), "{human}");
    let human = srv.cli_ok(&["volume", "info", "c1"]);
    let family = [
        "family",
        "2 volumes",
        "1 snapshot,",
        "reduction",
        "dedup",
        "compression",
    ];
    assert_mentions(&human, &family);
    assert!(has_row(&human, "origin", "vol0@s1"), "{human}");
    assert!(has_row(
        &srv.cli_ok(&["snapshot", "list"]),
        "vol0@s1",
        " c1 "
    ));

    // refresh: the clone's changes go, it reads as the snapshot again
    write(&srv, "c1", off, &c);
    assert_reads(&srv, "c1", off, &c, "the clone takes writes");
    let out = srv.cli_ok(&["volume", "refresh", "c1", "--to", "s1", "--yes"]);
    // Full names in both messages, whatever name was typed.
    assert_mentions(&out, &["refreshed c1 to snapshot vol0@s1"]);
    let human = srv.cli_ok(&["volume", "info", "c1"]);
    assert_mentions(&human, &["vol0@s1 (a clone of it, or refreshed to it)"]);
    assert_reads(&srv, "c1", off, &a, "refreshed clone reads as s1");

    // rollback: vol0 back to its own snapshot s2
    srv.cli_ok(&["snapshot", "create", "vol0", "vol0@s2"]);
    write(&srv, "vol0", off, &d);
    let out = srv.cli_ok(&["volume", "rollback", "vol0", "--to", "s2", "--yes"]);
    assert_mentions(&out, &["rolled back vol0 to snapshot vol0@s2"]);
    let human = srv.cli_ok(&["volume", "info", "vol0"]);
    assert_mentions(&human, &["vol0@s2 (rolled back to it)"]);
    assert_reads(&srv, "vol0", off, &b, "vol0 rolled back to s2");
    let vol0 = srv.cli_json(&["volume", "info", "vol0", "--json"]);
    assert_eq!(vol0["origin"], "vol0@s2", "{vol0}");
    assert_eq!(vol0["snapshots"], json!(["vol0@s1", "vol0@s2"]), "{vol0}");

    // delete: a snapshot, the clone, the last snapshot; vol0's data stays
    let out = srv.cli_ok(&["snapshot", "delete", "vol0@s2", "--yes"]);
    assert_mentions(&out, &["deleted snapshot vol0@s2"]);
    assert_eq!(snapshot_names(&srv), ["vol0@s1"]);
    assert_reads(&srv, "vol0", off, &b, "deleting s2 keeps vol0's data");
    srv.cli_ok(&["volume", "delete", "c1", "--yes"]);
    srv.cli_ok(&["snapshot", "delete", "s1", "--yes"]);
    assert!(snapshot_names(&srv).is_empty());
    assert_eq!(volume_names(&srv), ["vol0"]);
    assert_reads(
        &srv,
        "vol0",
        off,
        &b,
        "vol0 keeps its data after all deletes",
    );
}

#[test]
fn refused_requests_explain_and_change_nothing() {
    let srv = Server::start_with("snap-refused", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("refused_requests_explain_and_change_nothing") {
        return;
    }
    let (mut rng, _) = test_rng("refused_requests_explain_and_change_nothing");
    let data = random_bytes(&mut rng, 256 << 10);
    write(&srv, "vol0", 0, &data);
    // vol0 with snapshots s1, s2; clone c1 of s1; volume other (another family) with o1
    let s1 = accepted(
        &srv,
        "POST /api/v1/volumes/vol0/snapshots",
        json!({"name": "s1"}),
        201,
    );
    assert_eq!(s1["name"], "vol0@s1");
    assert!(s1["barrier_micros"].is_u64(), "{s1}");
    assert_eq!(s1["nbd_uri"], srv.nbd_uri("vol0@s1").as_str());
    accepted(
        &srv,
        "POST /api/v1/volumes/vol0/snapshots",
        json!({"name": "s2"}),
        201,
    );
    let c1 = accepted(
        &srv,
        "POST /api/v1/snapshots/s1/clones",
        json!({"name": "c1"}),
        201,
    );
    assert_eq!(c1["origin"], "vol0@s1", "{c1}");
    assert_eq!(c1["nbd_uri"], srv.nbd_uri("c1").as_str());
    let other = json!({"name": "other", "size_bytes": 16u64 << 20});
    accepted(&srv, "POST /api/v1/volumes", other, 201);
    accepted(
        &srv,
        "POST /api/v1/volumes/other/snapshots",
        json!({"name": "o1"}),
        201,
    );
    let of_vol0 = accepted(&srv, "GET /api/v1/snapshots?volume=vol0", Value::Null, 200);
    assert_eq!(names(&of_vol0), ["vol0@s1", "vol0@s2"]);

    let (none, x) = (Value::Null, json!({"name": "x"}));
    let (to_nosuch, to_s1, to_o1) = (
        json!({"snapshot": "nosuch"}),
        json!({"snapshot": "s1"}),
        json!({"snapshot": "o1"}),
    );
    #[rustfmt::skip] // a table: one request per line
    let cases: &[(&str, &Value, u16, &[&str])] = &[
        // unknown volume or snapshot
        ("POST /api/v1/volumes/nosuch/snapshots", &x, 404, &["no volume", "nosuch"]),
        ("GET /api/v1/snapshots?volume=nosuch", &none, 404, &["no volume", "nosuch"]),
        ("GET /api/v1/snapshots/nosuch", &none, 404, &["no snapshot", "nosuch"]),
        ("DELETE /api/v1/snapshots/nosuch", &none, 404, &["no snapshot"]),
        ("POST /api/v1/snapshots/nosuch/clones", &x, 404, &["no snapshot"]),
        ("POST /api/v1/volumes/c1/refresh", &to_nosuch, 404, &["nosuch"]),
        ("POST /api/v1/volumes/vol0/rollback", &to_nosuch, 404, &["nosuch"]),
        ("POST /api/v1/volumes/nosuch/refresh", &to_s1, 404, &["no volume"]),
        ("DELETE /api/v1/volumes/nosuch?with_snapshots=true", &none, 404, &["nosuch"]),
        // a snapshot's name is unique per volume; a volume's among volumes
        ("POST /api/v1/volumes/vol0/snapshots", &json!({"name": "s1"}), 409, &["\"vol0@s1\""]),
        ("POST /api/v1/volumes/vol0/snapshots", &json!({"name": "vol0@s1"}), 409, &["\"vol0@s1\""]),
        ("POST /api/v1/snapshots/s1/clones", &json!({"name": "other"}), 409, &["\"other\""]),
        ("POST /api/v1/snapshots/s1/clones", &json!({"name": "vol0"}), 409, &["\"vol0\""]),
        ("POST /api/v1/snapshots/s1/clones", &json!({"name": "vol0@c9"}), 400, &["vol0@c9"]),
        ("POST /api/v1/volumes/vol0/snapshots", &json!({"name": "other@x"}), 400, &["other@x", "\"other\""]),
        // refresh across families; rollback to a snapshot not taken of the volume
        ("POST /api/v1/volumes/c1/refresh", &to_o1, 409, &["family", "other@o1"]),
        ("POST /api/v1/volumes/vol0/rollback", &to_o1, 409, &["family"]),
        ("POST /api/v1/volumes/c1/rollback", &to_s1, 409, &["not taken of", "c1"]),
        // deleting what others use names them and the way out
        ("DELETE /api/v1/snapshots/s1", &none, 409, &["c1", "keep-hidden"]),
        ("DELETE /api/v1/volumes/vol0", &none, 409, &["vol0@s1, vol0@s2", "--with-snapshots"]),
        // malformed requests
        ("POST /api/v1/volumes/vol0/snapshots", &json!({"name": "a b"}), 400, &["a b"]),
        ("POST /api/v1/volumes/vol0/snapshots", &json!({"name": "y", "z": 1}), 400, &["z"]),
        ("POST /api/v1/volumes/vol0/snapshots", &json!({}), 400, &["name"]),
        ("POST /api/v1/volumes/c1/refresh", &json!({"name": "s1"}), 400, &["snapshot"]),
        ("DELETE /api/v1/snapshots/s1?keep_hidden=maybe", &none, 400, &["keep_hidden"]),
        ("DELETE /api/v1/volumes/vol0?force=maybe", &none, 400, &["force"]),
        ("DELETE /api/v1/volumes/vol0?cut=true", &none, 400, &["cut"]),
    ];
    for (request, body, status, words) in cases {
        refused(&srv, request, body, *status, words);
    }

    // the same refusals through the CLI
    #[rustfmt::skip]
    let cli_cases: &[(&[&str], &[&str])] = &[
        (&["snapshot", "create", "nosuch", "x"], &["no volume", "404"]),
        (&["snapshot", "info", "nosuch"], &["no snapshot", "404"]),
        (&["snapshot", "list", "nosuch"], &["no volume"]),
        (&["snapshot", "create", "vol0", "s2"], &["\"vol0@s2\"", "409"]),
        (&["clone", "create", "nosuch", "x"], &["no snapshot"]),
        (&["clone", "create", "s1", "other"], &["\"other\"", "409"]),
        (&["volume", "refresh", "c1", "--to", "o1", "--yes"], &["family", "409"]),
        (&["volume", "rollback", "c1", "--to", "s1", "--yes"], &["not taken of"]),
        (&["snapshot", "delete", "s1", "--yes"], &["c1", "409"]),
        (&["volume", "delete", "vol0", "--yes"], &["vol0@s1, vol0@s2", "409"]),
    ];
    for (args, words) in cli_cases {
        cli_refused(&srv, args, words);
    }
    assert_reads(&srv, "vol0", 0, &data, "refusals kept vol0's data");
    assert_reads(&srv, "c1", 0, &data, "refusals kept c1's data");

    // keep_hidden: s1 leaves the lists and exports, c1 still reads through it
    accepted(
        &srv,
        "DELETE /api/v1/snapshots/s1?keep_hidden=true",
        none.clone(),
        204,
    );
    assert_eq!(snapshot_names(&srv), ["vol0@s2", "other@o1"]);
    assert_eq!(volume_names(&srv), ["vol0", "c1", "other"]);
    assert!(
        NbdClient::connect(srv.nbd, "vol0@s1").is_err(),
        "hidden s1 still exported"
    );
    assert_reads(&srv, "c1", 0, &data, "c1 reads through hidden s1");
    refused(&srv, "GET /api/v1/snapshots/s1", &none, 404, &["s1"]);

    // with_snapshots: vol0 and s2 go, c1 stays
    accepted(
        &srv,
        "DELETE /api/v1/volumes/vol0?with_snapshots=true",
        none,
        204,
    );
    assert_eq!(volume_names(&srv), ["c1", "other"]);
    assert_eq!(snapshot_names(&srv), ["other@o1"]);
    assert_reads(&srv, "c1", 0, &data, "c1 outlives its origin's volume");

    // and through the CLI
    let out = srv.cli_ok(&["volume", "delete", "other", "--with-snapshots", "--yes"]);
    assert!(out.contains("deleted other and its snapshots"), "{out}");
    assert!(snapshot_names(&srv).is_empty());
    assert_eq!(volume_names(&srv), ["c1"]);
}

#[test]
fn new_routes_require_the_token() {
    let srv = Server::start_with("snap-token", ServeOpts::default().volume_size("16M"));
    if srv.skip_without_api("new_routes_require_the_token") {
        return;
    }
    srv.api_json(
        "POST",
        "/api/v1/volumes/vol0/snapshots",
        Some(json!({"name": "s1"})),
    );
    srv.api_json(
        "POST",
        "/api/v1/snapshots/s1/clones",
        Some(json!({"name": "c1"})),
    );
    let name = json!({"name": "x"});
    let to_s1 = json!({"snapshot": "s1"});
    let routes: [(&str, &str, Option<Value>); 10] = [
        ("GET", "/api/v1/snapshots", None),
        ("GET", "/api/v1/snapshots?volume=vol0", None),
        ("GET", "/api/v1/snapshots/s1", None),
        ("POST", "/api/v1/volumes/vol0/snapshots", Some(name.clone())),
        ("POST", "/api/v1/snapshots/s1/clones", Some(name)),
        ("POST", "/api/v1/volumes/c1/refresh", Some(to_s1.clone())),
        ("POST", "/api/v1/volumes/vol0/rollback", Some(to_s1)),
        ("DELETE", "/api/v1/snapshots/s1?keep_hidden=true", None),
        ("DELETE", "/api/v1/volumes/c1", None),
        ("DELETE", "/api/v1/volumes/vol0?with_snapshots=true", None),
    ];
    let before = catalog(&srv);
    for (method, path, body) in routes {
        for token in [None, Some("wrong-token")] {
            let (st, text) = api_request(&srv.api, method, path, body.clone(), token);
            assert_eq!(st, 401, "{method} {path} with token {token:?}: {text}");
            assert!(text.contains("token"), "{method} {path}: {text}");
        }
    }
    assert_eq!(
        catalog(&srv),
        before,
        "unauthenticated requests changed the catalog"
    );
    let out = srv.cli(&["--token", "nope", "snapshot", "list"]);
    assert!(
        !out.success() && out.stderr.contains("401"),
        "{}",
        out.all()
    );
}

/// `nbdinfo --json URI`.
fn nbdinfo_json(uri: &str) -> Value {
    let out = tool("nbdinfo", &["--json", uri]).ok();
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("nbdinfo --json {uri} ({e})"))
}

/// The whole export or LUN at `uri`, copied by `qemu-img convert` into a scratch file.
fn qemu_img_read(srv: &Server, uri: &str, file: &str) -> Vec<u8> {
    let copy = srv.scratch.join(file);
    tool(
        "qemu-img",
        &["convert", "-O", "raw", uri, copy.to_str().unwrap()],
    )
    .ok();
    std::fs::read(&copy).unwrap()
}

#[test]
fn volume_at_snapshot_names_over_nbd_iscsi_the_api_and_the_cli() {
    require_tools(&["nbdinfo", "qemu-img", "iscsi-ls"]);
    require_qemu_iscsi();
    let mut srv = Server::start_with("snap-names", ServeOpts::default().volume_size("16M"));
    if srv.skip_without_api("volume_at_snapshot_names_over_nbd_iscsi_the_api_and_the_cli") {
        return;
    }
    let portal = srv.iscsi.expect("an iSCSI portal");
    let (mut rng, _) = test_rng("volume_at_snapshot_names");
    let (pg, v0) = (
        random_bytes(&mut rng, 1 << 20),
        random_bytes(&mut rng, 1 << 20),
    );
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "16M"]);
    write(&srv, "pgdata", 0, &pg);
    write(&srv, "vol0", 0, &v0);

    // The same short name on two volumes: `weft snapshot create VOLUME NAME`.
    let out = srv.cli_ok(&["snapshot", "create", "pgdata", "monday"]);
    assert_mentions(&out, &["snapshot pgdata@monday of pgdata"]);
    srv.cli_ok(&["snapshot", "create", "vol0", "monday"]);
    assert_eq!(snapshot_names(&srv), ["pgdata@monday", "vol0@monday"]);
    write(&srv, "pgdata", 0, &v0);

    // The short name alone is ambiguous: refused, naming both, changing nothing.
    let none = Value::Null;
    let both = ["ambiguous", "pgdata@monday, vol0@monday", "VOLUME@SNAPSHOT"];
    refused(&srv, "GET /api/v1/snapshots/monday", &none, 409, &both);
    refused(
        &srv,
        "POST /api/v1/snapshots/monday/clones",
        &json!({"name": "x"}),
        409,
        &both,
    );
    cli_refused(&srv, &["snapshot", "info", "monday"], &both);
    cli_refused(&srv, &["clone", "create", "monday", "dev"], &both);
    // A volume's own snapshot goes first for its rollback.
    let out = srv.cli_ok(&["volume", "rollback", "pgdata", "--to", "monday", "--yes"]);
    assert_mentions(&out, &["rolled back pgdata to snapshot pgdata@monday"]);
    assert_reads(
        &srv,
        "pgdata",
        0,
        &pg,
        "pgdata rolled back to pgdata@monday",
    );

    // `weft clone create VOLUME@NAME CLONE`.
    let out = srv.cli_ok(&["clone", "create", "pgdata@monday", "dev"]);
    assert_mentions(&out, &["clone dev of pgdata@monday"]);
    assert_reads(&srv, "dev", 0, &pg, "the clone reads as pgdata@monday");
    // A volume may be named like a snapshot's short name.
    srv.cli_ok(&["volume", "create", "monday", "--size", "16M"]);
    assert_reads(
        &srv,
        "monday",
        0,
        &[0u8; 4096],
        "the volume monday is a new volume",
    );

    // NBD: the export is the full name, for nbdinfo and qemu-img alike.
    let uri = srv.nbd_uri("pgdata@monday");
    let info = nbdinfo_json(&uri);
    let export = &info["exports"][0];
    assert_eq!(export["export-name"], "pgdata@monday", "{info:#}");
    assert_eq!(export["is_read_only"], true, "{info:#}");
    let qinfo = tool("qemu-img", &["info", "--output=json", &uri]).ok();
    assert!(
        qinfo.stdout.contains(&format!("{}", 16u64 << 20)),
        "{}",
        qinfo.all()
    );
    let got = qemu_img_read(&srv, &uri, "pgdata-monday.nbd");
    assert!(
        got[..1 << 20] == pg[..],
        "qemu-img over NBD: pgdata@monday differs"
    );
    let got = qemu_img_read(&srv, &srv.nbd_uri("vol0@monday"), "vol0-monday.nbd");
    assert!(
        got[..1 << 20] == v0[..],
        "qemu-img over NBD: vol0@monday differs"
    );

    // iSCSI: target `...:pgdata:monday` ('@' is not allowed in an iSCSI name).
    let ls = tool("iscsi-ls", &["-s", &format!("iscsi://{portal}")])
        .ok()
        .all();
    for target in ["pgdata:monday", "vol0:monday", "monday"] {
        let line = format!("Target:iqn.2026-11.dev.weft:{target} Portal:{portal},1");
        assert!(ls.contains(&line), "no {line:?} in:\n{ls}");
    }
    assert!(!ls.contains('@'), "{ls}");
    let snap = srv.api_json("GET", "/api/v1/snapshots/pgdata%40monday", None);
    let lun = format!("iscsi://{portal}/iqn.2026-11.dev.weft:pgdata:monday/0");
    assert_eq!(snap["iscsi_uri"], lun.as_str(), "{snap}");
    let got = qemu_img_read(&srv, &lun, "pgdata-monday.iscsi");
    assert!(
        got[..1 << 20] == pg[..],
        "qemu-img over iSCSI: pgdata@monday differs"
    );

    // A snapshot from before these names (no '@') keeps its name everywhere.
    srv.cli_ok(&["volume", "delete", "dev", "--yes"]);
    srv.stop();
    {
        use weft_meta::MetaStore as _;
        let meta = weft_meta::EmbeddedMetaStore::open(&srv.data_dir.join("meta")).unwrap();
        let key = "weft/cluster/state";
        let stored = meta.get(key).unwrap().expect("cluster state");
        let mut state: Value = serde_json::from_slice(&stored.value).unwrap();
        let s = state["snapshots"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|s| s["name"] == "vol0@monday")
            .expect("vol0@monday in the cluster state");
        s["name"] = "old-friday".into();
        let bytes = serde_json::to_vec_pretty(&state).unwrap();
        meta.compare_and_put(key, stored.mod_revision, &bytes, None)
            .unwrap();
    }
    srv.restart();
    // `weft serve` says how snapshots are exported.
    let said = poll_until(
        std::time::Duration::from_secs(10),
        "weft serve's banner",
        || {
            let out = srv.server_output();
            out.contains("snapshots: 2,").then_some(out)
        },
    );
    let banner = [
        "read-only as nbd://",
        "/VOLUME@SNAPSHOT, iscsi iqn.2026-11.dev.weft:VOLUME:SNAPSHOT",
    ];
    assert_mentions(&said, &banner);
    let old = srv.cli_json(&["snapshot", "info", "old-friday", "--json"]);
    assert_eq!(
        (&old["name"], &old["short_name"]),
        (&json!("old-friday"), &json!("old-friday"))
    );
    assert_reads(&srv, "old-friday", 0, &v0, "a legacy snapshot over NBD");
    let got = qemu_img_read(
        &srv,
        &format!("iscsi://{portal}/iqn.2026-11.dev.weft:old-friday/0"),
        "old-friday.iscsi",
    );
    assert!(
        got[..1 << 20] == v0[..],
        "qemu-img over iSCSI: old-friday differs"
    );
    // The short name monday is pgdata's alone now.
    let monday = srv.cli_json(&["snapshot", "info", "monday", "--json"]);
    assert_eq!(monday["name"], "pgdata@monday", "{monday}");
}
