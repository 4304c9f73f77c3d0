//! The web UI in headless Chromium (driven through `browser_support`): the static files'
//! headers, login with the token (a wrong one refused), the volume list, the volume page's
//! live charts and heat map moving while fio writes, the list sorted by IOPS with the busy
//! volume first, the cluster page (with the capacity of the file systems), and 500 volumes
//! listed and sorted; and the UI acting as the CLI does, with its confirmations (resize,
//! rename, rollback, refresh, hosts page create/delete and map/unmap, clients listed). A
//! host's initiators and CHAP edited on the hosts page: `web_ui_hosts.rs`.
//!
//! Screenshots of each page go to `$CARGO_TARGET_TMPDIR/web-ui-screenshots/` (the path is
//! printed), each checked to be a PNG of the viewport's size with something drawn on it. The
//! page exposes its data for tests as `window.weft` (see ui/app.js).

mod browser_support;
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use browser_support::*;
use common::*;
use serde_json::{json, Value};

/// The fio run: long enough for the volume page and the list checks while it writes.
const FIO_RUNTIME_S: u32 = 15;
/// Volumes in the datastore for the list check.
const VOLUMES_MANY: usize = 500;
/// A sort of 500 rows: a functional bound, not a benchmark.
const SORT_TIMEOUT_MS: f64 = 5000.0;

/// GET without following redirects: (status, headers as lowercase name -> value, body).
fn raw_get(base: &str, path: &str) -> (u16, Vec<(String, String)>, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into();
    let mut resp = agent
        .get(&format!("{base}{path}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_ascii_lowercase(),
                v.to_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let status = resp.status().as_u16();
    let body = resp.body_mut().read_to_string().unwrap_or_default();
    (status, headers, body)
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> &'a str {
    headers
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or("")
}

/// The UI's files: no token needed, right types, a strict policy; the API still wants one.
fn check_static_files(api: &str) {
    let (st, h, _) = raw_get(api, "/");
    assert!((300..400).contains(&st), "GET / -> {st}, want a redirect");
    assert_eq!(header(&h, "location"), "/ui/");

    let (st, h, body) = raw_get(api, "/ui/");
    assert_eq!(st, 200, "GET /ui/");
    assert!(header(&h, "content-type").starts_with("text/html"), "{h:?}");
    let csp = header(&h, "content-security-policy");
    for part in [
        "default-src 'none'",
        "script-src 'self'",
        "connect-src 'self'",
    ] {
        assert!(csp.contains(part), "CSP lacks {part}: {csp}");
    }
    assert!(!csp.contains("unsafe"), "CSP allows unsafe sources: {csp}");
    assert!(!header(&h, "cache-control").is_empty(), "no Cache-Control");
    assert!(body.contains("assets/app.js"), "index.html: {body}");

    let (st, h, _) = raw_get(api, "/ui/assets/app.js");
    assert_eq!(st, 200);
    assert!(header(&h, "content-type").starts_with("text/javascript"));
    let (st, h, _) = raw_get(api, "/ui/assets/uplot-1.6.32/uPlot.iife.min.js");
    assert_eq!(st, 200);
    assert!(header(&h, "cache-control").contains("immutable"), "{h:?}");
    let (st, h, _) = raw_get(api, "/ui/assets/app.css");
    assert_eq!(st, 200);
    assert!(header(&h, "content-type").starts_with("text/css"));
    let (st, _, _) = raw_get(api, "/ui/assets/nothing.js");
    assert_eq!(st, 404);
    let (st, _, _) = raw_get(api, "/api/v1/volumes");
    assert_eq!(st, 401, "the API without a token");
}

#[test]
fn web_ui_in_headless_chromium() {
    let started = Instant::now();
    require_tools(&["fio", "timeout"]);
    chromium();
    let srv = Server::start_with("web-ui", ServeOpts::default().volume_size("1G"));
    if srv.skip_without_api("web_ui_in_headless_chromium") {
        return;
    }
    let token = srv.token();
    check_static_files(&srv.api);

    // A quiet volume, a snapshot of vol0 and a clone of it: the tree and the sort have
    // something to show.
    srv.api_json(
        "POST",
        "/api/v1/volumes",
        Some(json!({"name": "quiet", "size_bytes": 1u64 << 30})),
    );
    srv.api_json(
        "POST",
        "/api/v1/volumes/vol0/snapshots",
        Some(json!({"name": "monday"})),
    );
    srv.api_json(
        "POST",
        "/api/v1/snapshots/vol0@monday/clones",
        Some(json!({"name": "vol0-dev"})),
    );

    let shots = screenshot_dir();
    eprintln!("web UI screenshots: {}", shots.display());
    let browser = Browser::launch();
    let mut page = browser.page();

    // Login: refused with a wrong token, accepted with the right one.
    page.navigate(&format!("{}/", srv.api));
    page.wait_for(
        "the login page",
        "window.weft && weft.page === 'login' && !!document.getElementById('login-token') \
         && getComputedStyle(document.getElementById('topbar')).display === 'none'",
        PAGE_TIMEOUT,
    );
    page.screenshot(&shots, "1-login", VIEW_HEIGHT_PX);
    page.login("not-the-token");
    page.wait_for(
        "the wrong token refused",
        "document.getElementById('login-error').textContent.includes('Wrong token')",
        PAGE_TIMEOUT,
    );
    assert_eq!(page.eval("weft.page"), "login");
    assert_eq!(
        page.eval("sessionStorage.getItem('weft.token')"),
        Value::Null,
        "a wrong token kept"
    );
    page.login(&token);
    page.wait_for(
        "the volume list",
        "weft.page === 'volumes' && weft.volumes && weft.volumes.rows().length >= 4",
        PAGE_TIMEOUT,
    );
    let rows = page.eval("weft.volumes.rows()");
    for name in ["vol0", "quiet", "vol0@monday", "vol0-dev"] {
        assert!(
            rows.as_array().unwrap().iter().any(|r| r == name),
            "{name} not listed: {rows}"
        );
    }

    // The volume page, quiet first: its history loads with zero IOPS.
    page.go("#/volume/vol0");
    page.wait_for(
        "vol0's history",
        "weft.page === 'volume' && weft.volume && weft.volume.samples() > 0",
        PAGE_TIMEOUT,
    );
    let idle = page.eval("weft.volume.lastIops()");
    assert_eq!(idle.as_f64(), Some(0.0), "vol0 is idle: {idle}");
    page.wait_for(
        "the snapshot/clone tree",
        "document.querySelector('#vv-tree li[data-name=\"vol0-dev\"]') !== null",
        PAGE_TIMEOUT,
    );

    // fio writes: the charts move.
    let mut fio = Command::new(require_tool("timeout"));
    fio.arg(format!("{}", FIO_RUNTIME_S + 20))
        .arg(require_tool("fio"))
        .arg("--ioengine=nbd")
        .arg(format!("--uri={}", srv.nbd_uri("vol0")))
        .args([
            "--rw=randwrite",
            "--bs=4k",
            "--iodepth=8",
            "--time_based",
            &format!("--runtime={FIO_RUNTIME_S}"),
            "--name=w",
        ])
        .current_dir(srv.scratch.path());
    let fio = Bg::spawn(&mut fio);
    page.wait_for(
        "vol0's IOPS chart above 0",
        "weft.volume.lastIops() > 0",
        PAGE_TIMEOUT,
    );
    let read = |page: &mut Page| {
        page.eval(
            "JSON.stringify({t: weft.volume.lastTimeMs(), iops: weft.volume.iops().slice(-20)})",
        )
    };
    let first = read(&mut page);
    std::thread::sleep(Duration::from_secs(1));
    let second = read(&mut page);
    assert_ne!(first, second, "the IOPS chart did not move in a second");
    let (a, b): (Value, Value) = (
        serde_json::from_str(first.as_str().unwrap()).unwrap(),
        serde_json::from_str(second.as_str().unwrap()).unwrap(),
    );
    assert!(
        b["t"].as_u64() > a["t"].as_u64(),
        "no newer sample: {a} then {b}"
    );
    let attr = page.eval("parseFloat(document.getElementById('vv-iops').dataset.lastIops)");
    assert!(
        attr.as_f64().unwrap_or(0.0) > 0.0,
        "data-last-iops is {attr}"
    );
    page.wait_for(
        "non-zero heat map cells",
        "weft.volume.heatNonZero() > 0",
        PAGE_TIMEOUT,
    );
    // A few seconds of writes on the charts for the picture.
    page.wait_for(
        "4 s of writes on the chart",
        "weft.volume.iops().filter((v) => v > 0).length >= 40",
        PAGE_TIMEOUT,
    );
    page.screenshot(&shots, "3-volume", 1500);
    // The 15-minute range: history at 1 s steps.
    page.eval("document.querySelector('button[data-range=\"1s\"]').click()");
    page.wait_for(
        "the 1 s history",
        "weft.volume.range() === '1s' && weft.volume.iops().some((v) => v > 0)",
        PAGE_TIMEOUT,
    );

    // The list sorted by IOPS: the busy volume first.
    page.go("#/volumes");
    page.wait_for(
        "the volume list",
        "weft.page === 'volumes' && weft.volumes.rows().length >= 4",
        PAGE_TIMEOUT,
    );
    page.sort_list("iops", true);
    page.wait_for(
        "vol0 first by IOPS",
        "weft.volumes.rows()[0] === 'vol0' \
         && document.querySelector('#vl-table tbody tr').dataset.name === 'vol0' \
         && parseFloat(document.querySelector('#vl-table tbody tr').dataset.iops) > 0",
        PAGE_TIMEOUT,
    );
    page.screenshot(&shots, "2-volumes", VIEW_HEIGHT_PX);

    page.go("#/cluster");
    page.wait_for(
        "the cluster page",
        "weft.page === 'cluster' && weft.cluster.refreshes > 0 \
         && document.getElementById('cl-capacity').textContent.length > 0 \
         && document.querySelector('#cl-nodes tbody tr') !== null \
         && document.getElementById('cl-throughput-now').textContent.includes('IOPS now')",
        PAGE_TIMEOUT,
    );
    // Capacity from the file systems: one (data dir and chunk store share it), with its free
    // space and the growth; no rebuild card in single-process mode.
    page.wait_for(
        "the capacity card",
        "weft.cluster.capacity !== null && weft.cluster.capacity.filesystems.length === 1 \
         && document.getElementById('cl-capacity').textContent.includes(' free of ') \
         && document.querySelectorAll('#cl-filesystems tbody tr').length === 1 \
         && document.querySelector('#cl-filesystems tbody td').textContent.startsWith('data dir ') \
         && document.getElementById('cl-capacity-kv').textContent.includes('overcommit') \
         && document.getElementById('cl-rebuild-card').hidden",
        PAGE_TIMEOUT,
    );
    let warnings = page.eval(
        "weft.cluster.capacity.warnings.length === \
         document.querySelectorAll('#cl-capacity-warnings li').length",
    );
    assert_eq!(warnings, json!(true), "every capacity warning is shown");
    page.screenshot(&shots, "4-cluster", VIEW_HEIGHT_PX);

    // A snapshot's page asks for the snapshot straight away (no 404 from /volumes first),
    // and a rolled-back volume says so rather than "cloned from".
    srv.cli_ok(&["snapshot", "create", "vol0", "tuesday"]);
    page.go("#/volume/vol0%40tuesday");
    page.wait_for(
        "the snapshot's page",
        "document.getElementById('vv-kind').textContent === 'snapshot (read-only)'",
        PAGE_TIMEOUT,
    );
    let asked = page.eval(
        "performance.getEntriesByType('resource').map((e) => e.name)\
           .filter((n) => n.endsWith('/api/v1/volumes/vol0%40tuesday'))",
    );
    assert_eq!(asked, json!([]), "a snapshot's page asked /volumes for it");
    page.go("#/cluster");
    srv.cli_ok(&["snapshot", "delete", "vol0@tuesday", "--yes"]);
    assert_no_page_errors(&mut page, "after the fio run");

    let out = fio.wait(Duration::from_secs(u64::from(FIO_RUNTIME_S) + 30));
    assert_fio_ok(&out, "fio randwrite on vol0");

    // The UI acts: a volume created from the list, a snapshot and a clone taken on their
    // pages, the clone deleted after the page asked.
    page.go("#/volumes");
    page.wait_for("the volumes page", "weft.page === 'volumes'", PAGE_TIMEOUT);
    page.eval(
        "document.getElementById('vl-new-name').value = 'ui-made';         document.getElementById('vl-new-size').value = '64M';         document.getElementById('vl-new').click()",
    );
    page.wait_for(
        "the new volume's page",
        "location.hash === '#/volume/ui-made' && weft.volume && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    let made = srv.api_json("GET", "/api/v1/volumes/ui-made", None);
    assert_eq!(made["size_bytes"], 64u64 << 20, "{made}");
    page.eval(
        "document.getElementById('vv-new-name').value = 's1';         document.getElementById('vv-make').click()",
    );
    page.wait_for(
        "the snapshot's page",
        "location.hash === '#/volume/ui-made%40s1' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    page.eval(
        "document.getElementById('vv-new-name').value = 'ui-clone';         document.getElementById('vv-make').click()",
    );
    page.wait_for(
        "the clone's page",
        "location.hash === '#/volume/ui-clone' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    page.eval("document.getElementById('vv-delete').click()");
    let asked = page.eval("document.getElementById('vv-confirm-text').textContent");
    assert!(
        asked
            .as_str()
            .is_some_and(|t| t.starts_with("Delete ui-clone (64")),
        "the page asks before deleting: {asked}"
    );
    page.eval("document.getElementById('vv-confirm-yes').click()");
    page.wait_for(
        "back at the list after the delete",
        "location.hash === '#/volumes'",
        PAGE_TIMEOUT,
    );
    let (status, _) = srv.api("GET", "/api/v1/volumes/ui-clone", None);
    assert_eq!(status, 404, "the clone is still there");
    srv.api_json("GET", "/api/v1/snapshots/ui-made%40s1", None);
    assert_no_page_errors(&mut page, "after the UI's actions");
    srv.cli_ok(&["volume", "delete", "ui-made", "--with-snapshots", "--yes"]);

    // 500 volumes: every row rendered, a sort completes.
    let have = srv.api_json("GET", "/api/v1/volumes", None);
    let existing = have.as_array().unwrap().len();
    let t = Instant::now();
    for i in 0..VOLUMES_MANY.saturating_sub(existing) {
        srv.api_json(
            "POST",
            "/api/v1/volumes",
            Some(json!({"name": format!("bulk-{i:03}"), "size_bytes": 1u64 << 30})),
        );
    }
    eprintln!(
        "created {} volumes in {:?}",
        VOLUMES_MANY - existing,
        t.elapsed()
    );
    let exports = VOLUMES_MANY + 1; // and the snapshot
    page.go("#/volumes");
    page.wait_for(
        "every export in the list",
        &format!(
            "weft.page === 'volumes' && weft.volumes.rows().length === {exports} \
             && document.querySelectorAll('#vl-table tbody tr').length === {exports}"
        ),
        Duration::from_secs(30),
    );
    let t = Instant::now();
    let ms = page.sort_list("name", false);
    page.wait_for(
        "the list sorted by name",
        "document.querySelector('#vl-table tbody tr').dataset.name === 'bulk-000'",
        PAGE_TIMEOUT,
    );
    eprintln!(
        "sort of {exports} rows: {ms:.1} ms in the page, {:?} seen from the test",
        t.elapsed()
    );
    assert!(ms < SORT_TIMEOUT_MS, "sorting {exports} rows took {ms} ms");
    page.screenshot(&shots, "5-volumes-500", VIEW_HEIGHT_PX);
    assert_no_page_errors(&mut page, "with 500 volumes");

    // A token that stops working (here: removed from the session) sends the user to login.
    page.eval("sessionStorage.setItem('weft.token', 'revoked'); location.hash = '#/cluster'");
    page.wait_for(
        "back at the login page after a 401",
        "weft.page === 'login' \
         && document.getElementById('login-error').textContent.includes('refused')",
        PAGE_TIMEOUT,
    );
    eprintln!(
        "web UI test done in {:?}; screenshots in {}",
        started.elapsed(),
        shots.display()
    );
}

/// The UI does what the CLI does, asking what the CLI asks: the list's space, reduction and
/// hosts columns and its sparklines on one labelled scale; the hosts page creates and deletes
/// a host, maps and unmaps; a
/// volume's page lists its clients, resizes, rolls back (naming the client it cuts off),
/// refreshes a clone and renames; read and write latency on charts of their own; every time in
/// UTC.
#[test]
fn web_ui_acts_like_the_cli() {
    const TEST: &str = "web_ui_acts_like_the_cli";
    chromium();
    let srv = Server::start_with("web-ui-acts", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let (mut rng, _) = test_rng(TEST);
    srv.cli_ok(&["volume", "create", "pg", "--size", "64M"]);
    let mut c = srv.nbd_client("pg");
    c.write(0, &random_bytes(&mut rng, 2 << 20)).unwrap();
    c.flush().unwrap();
    c.disconnect();
    srv.cli_ok(&["snapshot", "create", "pg@mon"]);
    srv.cli_ok(&["clone", "create", "pg@mon", "dev"]);
    let mut c = srv.nbd_client("dev");
    c.write(8 << 20, &random_bytes(&mut rng, 1 << 20)).unwrap();
    c.flush().unwrap();
    c.disconnect();
    srv.cli_ok(&[
        "host",
        "create",
        "db1",
        "--iqn",
        "iqn.1994-05.com.redhat:db1",
        "--nbd-address",
        "10.1.1.1",
    ]);

    let shots = screenshot_dir();
    let browser = Browser::launch();
    let mut page = browser.page();
    page.navigate(&format!("{}/", srv.api));
    page.wait_for(
        "the login page",
        "window.weft && weft.page === 'login'",
        PAGE_TIMEOUT,
    );
    page.login(&srv.token());

    // The list: space, reduction and hosts columns from the catalog; one sparkline scale.
    page.wait_for(
        "the list with its catalog columns",
        "weft.page === 'volumes' && weft.volumes.catalogReads > 0 \
         && document.querySelector('#vl-table tr[data-name=\"pg\"] td:nth-child(3)').textContent.endsWith('MiB')",
        PAGE_TIMEOUT,
    );
    let header = page.eval(
        "Array.from(document.querySelectorAll('#vl-table th')).map((th) => th.textContent.trim())",
    );
    for col in ["allocated", "reduction", "hosts"] {
        assert!(
            header.as_array().unwrap().iter().any(|h| h == col),
            "{col} not in {header}"
        );
    }
    let reduction = page.eval(
        "document.querySelector('#vl-table tr[data-name=\"pg\"] td:nth-child(4)').textContent",
    );
    assert!(reduction.as_str().unwrap().ends_with('×'), "{reduction}");
    // Some I/O for the sparklines: the scale is the busiest row's peak, and it says so.
    let mut c = srv.nbd_client("pg");
    for i in 0..200u64 {
        c.read((i % 16) * 4096, 4096).unwrap();
    }
    c.disconnect();
    let scale = page.wait_for(
        "a shared sparkline scale above 1",
        "weft.volumes.sparkMax() > 1 && document.getElementById('vl-spark-max').textContent",
        PAGE_TIMEOUT,
    );
    assert!(scale.as_str().unwrap().starts_with("(scale 0–"), "{scale}");
    page.screenshot(&shots, "acts-1-volumes", VIEW_HEIGHT_PX);

    // Hosts: map pg as LUN 3, then unmap it after the page asked.
    page.go("#/hosts");
    page.wait_for(
        "the hosts page",
        "weft.page === 'hosts' && weft.hosts.names().includes('db1')",
        PAGE_TIMEOUT,
    );
    // A host made on the page, as `weft host create db2 --iqn ...` makes it.
    set_value(&mut page, "hs-new-name", "db2");
    set_value(&mut page, "hs-new-iqn", "iqn.1994-05.com.redhat:db2");
    set_value(&mut page, "hs-new-nbd", "10.1.1.2");
    click(&mut page, "hs-new");
    page.wait_for(
        "db2 on the hosts page",
        "weft.hosts.names().includes('db2')",
        PAGE_TIMEOUT,
    );
    let db2 = srv.api_json("GET", "/api/v1/hosts/db2", None);
    assert_eq!(db2["iqns"], json!(["iqn.1994-05.com.redhat:db2"]), "{db2}");
    assert_eq!(db2["nbd_addresses"], json!(["10.1.1.2/32"]), "{db2}");
    assert_eq!(
        page.eval("document.getElementById('hs-new-name').value"),
        "",
        "the form is cleared for the next host"
    );
    // ... and deleted there after the page asked.
    page.eval(
        "document.querySelector('#hs-table tr[data-host=\"db2\"] button.delete-host').click()",
    );
    assert_eq!(
        page.eval("weft.hosts.asking"),
        "Delete host db2? Its definition and CHAP secrets go, no data."
    );
    click(&mut page, "hs-confirm-yes");
    page.wait_for(
        "db2 gone from the hosts page",
        "!weft.hosts.names().includes('db2')",
        PAGE_TIMEOUT,
    );
    let (status, _) = srv.api("GET", "/api/v1/hosts/db2", None);
    assert_eq!(status, 404, "db2 was not deleted");
    page.eval(
        "const tr = document.querySelector('#hs-table tr[data-host=\"db1\"]'); \
         tr.querySelector('select.map-export').value = 'pg'; \
         tr.querySelector('input.map-lun').value = '3'; \
         tr.querySelector('button.map').click()",
    );
    page.wait_for(
        "pg mapped as LUN 3",
        "JSON.stringify(weft.hosts.luns('db1')) === '[[3,\"pg\"]]'",
        PAGE_TIMEOUT,
    );
    let host = srv.api_json("GET", "/api/v1/hosts/db1", None);
    assert_eq!(host["luns"][0]["export"], "pg", "{host}");
    assert_eq!(host["luns"][0]["lun"], 3, "{host}");
    page.screenshot(&shots, "acts-2-hosts", VIEW_HEIGHT_PX);
    page.eval("document.querySelector('#hs-table button.unmap').click()");
    let asked = page.eval("weft.hosts.asking");
    assert_eq!(
        asked,
        "Unmap pg (LUN 3) from host db1? Its sessions lose the LUN at their next command."
    );
    click(&mut page, "hs-confirm-yes");
    page.wait_for(
        "pg unmapped",
        "weft.hosts.loads > 2 && weft.hosts.luns('db1').length === 0",
        PAGE_TIMEOUT,
    );
    let host = srv.api_json("GET", "/api/v1/hosts/db1", None);
    assert_eq!(host["luns"], json!([]), "{host}");

    // pg's page with a client connected: it is listed, times are UTC, latency has two charts.
    let mut held = srv.nbd_client("pg");
    page.go("#/volume/pg");
    page.wait_for(
        "pg's page with its client",
        "weft.page === 'volume' && weft.volume.actionsReady === true && weft.volume.sessions === 1 \
         && document.querySelectorAll('#vv-sessions tbody tr[data-client]').length === 1",
        PAGE_TIMEOUT,
    );
    let info = page.eval("document.getElementById('vv-info').textContent");
    assert!(info.as_str().unwrap().contains(" UTC"), "{info}");
    let since =
        page.eval("document.querySelector('#vv-sessions tbody td:nth-child(4)').textContent");
    assert!(since.as_str().unwrap().ends_with(" UTC"), "{since}");
    let series = page.eval(
        "[document.querySelectorAll('#vv-lat-read .u-series').length, \
          document.querySelectorAll('#vv-lat-write .u-series').length]",
    );
    assert_eq!(
        series,
        json!([4, 4]),
        "time + p50, p99, max on each latency chart"
    );
    page.screenshot(&shots, "acts-3-volume", 1600);

    // Resize asks nothing and grows it.
    set_value(&mut page, "vv-size", "128M");
    click(&mut page, "vv-resize");
    poll_until(PAGE_TIMEOUT, "pg resized", || {
        let v = srv.api_json("GET", "/api/v1/volumes/pg", None);
        (v["size_bytes"] == 128u64 << 20).then_some(())
    });
    page.wait_for(
        "pg's page again",
        "weft.volume.actionsReady === true && document.getElementById('vv-info').textContent.includes('128 MiB')",
        PAGE_TIMEOUT,
    );

    // Rollback asks the CLI's question, naming the client it disconnects.
    set_value(&mut page, "vv-rollback-to", "pg@mon");
    click(&mut page, "vv-rollback");
    let asked = page.eval("weft.volume.asking");
    let asked = asked.as_str().unwrap();
    assert!(
        asked.starts_with("Roll back volume pg (128 MiB) to snapshot pg@mon (taken 20")
            && asked.contains(" UTC)? Its writes since then are discarded")
            && asked.contains("This disconnects nbd 127.0.0.1:"),
        "{asked}"
    );
    assert_eq!(
        page.eval("document.getElementById('vv-confirm-yes').textContent"),
        "Disconnect and roll back"
    );
    click(&mut page, "vv-confirm-yes");
    poll_until(PAGE_TIMEOUT, "pg rolled back", || {
        let v = srv.api_json("GET", "/api/v1/volumes/pg", None);
        (v["origin"] == "pg@mon").then_some(())
    });
    assert!(held.read(0, 4096).is_err(), "the client was not cut off");

    // Refresh of the clone: the CLI's question (its own changes), then they are gone.
    page.go("#/volume/dev");
    page.wait_for(
        "dev's page",
        "weft.page === 'volume' && weft.volume.name === 'dev' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    set_value(&mut page, "vv-refresh-to", "pg@mon");
    click(&mut page, "vv-refresh");
    let asked = page.eval("weft.volume.asking");
    assert!(
        asked
            .as_str()
            .unwrap()
            .starts_with("Refresh volume dev (64 MiB, 1 MiB of its own changes) to snapshot pg@mon of pg (taken 20"),
        "{asked}"
    );
    click(&mut page, "vv-confirm-yes");
    poll_until(PAGE_TIMEOUT, "dev refreshed", || {
        let v = srv.api_json("GET", "/api/v1/volumes/dev", None);
        (v["space"]["own_bytes"] == 0).then_some(())
    });

    // Rename, with nobody connected: no question; the page follows the new name.
    page.go("#/volume/pg");
    page.wait_for(
        "pg's page",
        "weft.volume.name === 'pg' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    set_value(&mut page, "vv-rename-to", "pgx");
    click(&mut page, "vv-rename");
    page.wait_for(
        "the renamed volume's page",
        "location.hash === '#/volume/pgx' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    let v = srv.api_json("GET", "/api/v1/volumes/pgx", None);
    assert_eq!(v["snapshots"], json!(["pgx@mon"]), "{v}");

    // A viewer with the read-only token sees the same pages without their actions.
    click(&mut page, "logout");
    page.wait_for("the login page", "weft.page === 'login'", PAGE_TIMEOUT);
    let read_only = std::fs::read_to_string(srv.data_dir.join("api-token-read-only")).unwrap();
    page.login(read_only.trim());
    page.wait_for(
        "the list, read-only",
        "weft.page === 'volumes' && weft.role === 'read-only' && weft.volumes.catalogReads > 0",
        PAGE_TIMEOUT,
    );
    let hidden = |page: &mut Page, id: &str| {
        page.eval(&format!(
            "getComputedStyle(document.getElementById({})).display",
            json!(id)
        ))
    };
    assert_eq!(
        hidden(&mut page, "vl-create"),
        "none",
        "new volume, read-only"
    );
    // One snapshot is one snapshot.
    page.wait_for(
        "the list's count",
        "document.getElementById('vl-count').textContent === '3 volumes, 1 snapshot'",
        PAGE_TIMEOUT,
    );
    assert_ne!(
        hidden(&mut page, "role-tag"),
        "none",
        "the header says read-only"
    );
    page.screenshot(&shots, "acts-4-read-only", VIEW_HEIGHT_PX);
    page.go("#/volume/pgx");
    page.wait_for(
        "pgx's page, read-only",
        "weft.page === 'volume' && weft.volume.name === 'pgx' && weft.volume.actionsReady === true",
        PAGE_TIMEOUT,
    );
    assert_eq!(
        hidden(&mut page, "vv-actions"),
        "none",
        "volume actions, read-only"
    );
    page.go("#/hosts");
    page.wait_for(
        "the hosts page, read-only",
        "weft.page === 'hosts' && weft.hosts.names().includes('db1')",
        PAGE_TIMEOUT,
    );
    assert_eq!(
        hidden(&mut page, "hs-create"),
        "none",
        "new host, read-only"
    );
    // An admin's header does not say read-only.
    click(&mut page, "logout");
    page.wait_for("the login page", "weft.page === 'login'", PAGE_TIMEOUT);
    page.login(&srv.token());
    page.wait_for(
        "the list, as admin",
        "weft.page === 'volumes' && weft.role === 'admin'",
        PAGE_TIMEOUT,
    );
    assert_eq!(hidden(&mut page, "role-tag"), "none", "an admin's header");
    assert_no_page_errors(&mut page, "after the UI's actions");
}
