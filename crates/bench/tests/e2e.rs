//! End-to-end tests of the `weft-bench` binary against nbdkit's memory plugin and a file:
//! every mode writes JSON valid against `schema/results.schema.json`, CSV and HTML; the HTML
//! renders its uPlot charts and ORION grids in headless Chromium; data patterns and the server's
//! CPU are recorded; writes to an export, or to a file that holds data, need
//! `--allow-destructive`; unwritten ranges are found (NBD block status), warned about and
//! prefilled; bad targets (NBD, iSCSI, files) fail with exit code 2 and a message. iSCSI runs against a real target, and `--create-volume`,
//! are `crates/cli/tests/bench_iscsi.rs` and `bench_volume.rs`.
//!
//! Needs nbdkit and chromium on PATH (Debian packages `nbdkit`, `chromium`).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_weft-bench");
/// Short points keep the suite within its time budget; correctness, not numbers, is tested.
const QUICK: &[&str] = &[
    "--duration",
    "200ms",
    "--warmup",
    "0s",
    "--no-progress",
    "--large",
    "256k",
];
const NBDKIT_READY_TIMEOUT: Duration = Duration::from_secs(10);
const CHROMIUM_TIMEOUT: Duration = Duration::from_secs(90);

/// Tries to start nbdkit on a fresh free port before giving up.
const NBDKIT_START_ATTEMPTS: usize = 5;

/// nbdkit serving a memory disk on a free loopback port, killed (by PID) on drop.
struct Nbdkit {
    child: Child,
    port: u16,
}

impl Nbdkit {
    /// Starts nbdkit on a free port. A port picked free can be taken by another test before
    /// nbdkit binds it (nbdkit then exits, and the readiness probe may even reach the other
    /// test's server): retry on a new port until our own child is the one listening.
    fn start(extra: &[&str], size: &str) -> Nbdkit {
        for _ in 0..NBDKIT_START_ATTEMPTS {
            if let Some(n) = Nbdkit::try_start(extra, size) {
                return n;
            }
        }
        panic!("nbdkit did not start after {NBDKIT_START_ATTEMPTS} attempts");
    }

    fn try_start(extra: &[&str], size: &str) -> Option<Nbdkit> {
        let port = free_port();
        let mut args = vec!["--exit-with-parent", "-f", "-i", "127.0.0.1"];
        args.extend_from_slice(extra);
        let port_s = port.to_string();
        args.extend_from_slice(&["-p", &port_s, "memory", size]);
        let mut child = Command::new("nbdkit")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nbdkit must be installed (apt-get install nbdkit)");
        let deadline = Instant::now() + NBDKIT_READY_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if child.try_wait().ok().flatten().is_some() {
                return None; // it could not bind: the port was taken meanwhile
            }
            assert!(
                Instant::now() < deadline,
                "nbdkit did not listen on port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(50));
        if child.try_wait().ok().flatten().is_some() {
            return None; // someone else answered on that port
        }
        Some(Nbdkit { child, port })
    }

    fn uri(&self) -> String {
        format!("nbd://127.0.0.1:{}/", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Nbdkit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn bench(args: &[&str]) -> Output {
    let out = Command::new(BIN)
        .args(args)
        .output()
        .expect("run weft-bench");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked"),
        "weft-bench panicked: {stderr}"
    );
    out
}

fn run_ok(target: &str, prefix: &Path, extra: &[&str]) -> serde_json::Value {
    let prefix_s = prefix.to_str().unwrap();
    let mut args = vec![target, "-o", prefix_s];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(extra);
    let out = bench(&args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "weft-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let json = std::fs::read_to_string(prefix.with_extension("json")).unwrap();
    let value: serde_json::Value = serde_json::from_str(&json).unwrap();
    validate(&value);
    check_csv(&prefix.with_extension("csv"), &value);
    let html = std::fs::read_to_string(prefix.with_extension("html")).unwrap();
    assert!(html.contains("id=\"weft-data\""));
    assert!(
        !html.contains("http://") || !html.contains("src=\"http"),
        "report loads from network"
    );
    value
}

fn validate(value: &serde_json::Value) {
    let schema_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/results.schema.json");
    let schema: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(schema_path).unwrap()).unwrap();
    let validator = jsonschema::validator_for(&schema).expect("schema compiles");
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "results do not match the schema: {errors:#?}"
    );
}

fn check_csv(path: &Path, value: &serde_json::Value) {
    let csv = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = csv.lines().collect();
    let points = value["points"].as_array().unwrap();
    assert_eq!(
        lines.len(),
        points.len() + 1,
        "one CSV row per point plus a header"
    );
    assert!(lines[0].starts_with("label,index,name,kind"));
    assert!(lines[0].ends_with(",client_cpu_pct,server_cpu_pct"));
}

fn points_of(v: &serde_json::Value) -> &Vec<serde_json::Value> {
    v["points"].as_array().unwrap()
}

fn assert_every_point_did_io(v: &serde_json::Value) {
    for p in points_of(v) {
        assert!(
            p["total"]["ios"].as_u64().unwrap() > 0,
            "point without I/O: {p}"
        );
        assert!(p["total"]["iops"].as_f64().unwrap() > 0.0);
        let w = p["write_pct"].as_u64().unwrap();
        if w == 100 {
            assert_eq!(p["read"]["ios"], 0);
        }
        if w == 0 {
            assert_eq!(p["write"]["ios"], 0);
        }
        // The time series covers the window and adds up to the point's I/Os.
        let series = p["series"].as_array().unwrap();
        assert_eq!(series.len(), 10, "a window under 10 s has ten samples");
        let ios: u64 = series.iter().map(|s| s["ios"].as_u64().unwrap()).sum();
        assert_eq!(ios, p["total"]["ios"].as_u64().unwrap());
        assert!(
            p["cpu"]["client_pct"].as_f64().unwrap() > 0.0,
            "no client CPU: {p}"
        );
    }
}

fn temp_file(dir: &Path, size_bytes: u64) -> PathBuf {
    let path = dir.join("disk.img");
    let f = std::fs::File::create(&path).unwrap();
    f.set_len(size_bytes).unwrap();
    path
}

#[test]
fn simple_mode_against_nbdkit() {
    let nbd = Nbdkit::start(&[], "64M");
    let dir = tempfile::tempdir().unwrap();
    let v = run_ok(
        &nbd.uri(),
        &dir.path().join("simple"),
        &["--qd", "1,4", "--large-qd", "1,2"],
    );
    assert_eq!(v["config"]["mode"], "simple");
    assert_eq!(v["target"]["kind"], "nbd");
    assert_eq!(v["target"]["size_bytes"], 64 << 20);
    let kinds: Vec<&str> = points_of(&v)
        .iter()
        .map(|p| p["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "small_random",
            "small_random",
            "large_sequential",
            "large_sequential"
        ]
    );
    assert_every_point_did_io(&v);
    assert!(!v["knees"].as_array().unwrap().is_empty());
}

#[test]
fn oltp_mode_against_nbdkit_with_two_workers() {
    let nbd = Nbdkit::start(&[], "64M");
    let dir = tempfile::tempdir().unwrap();
    let v = run_ok(
        &nbd.uri(),
        &dir.path().join("oltp"),
        &[
            "--mode",
            "oltp",
            "--qd",
            "1,8",
            "--workers",
            "2",
            "--small",
            "4k",
            "--allow-destructive",
        ],
    );
    assert_eq!(
        points_of(&v).len(),
        8,
        "2 queue depths x 4 default write percentages"
    );
    assert_every_point_did_io(&v);
    let qd8 = &points_of(&v)[1];
    assert_eq!(qd8["queues"], 2);
    let mixed = points_of(&v).iter().find(|p| p["write_pct"] == 40).unwrap();
    assert!(
        mixed["read"]["ios"].as_u64().unwrap() > 0 && mixed["write"]["ios"].as_u64().unwrap() > 0
    );
}

#[test]
fn dss_and_matrix_modes_against_nbdkit_in_a_region() {
    let nbd = Nbdkit::start(&[], "64M");
    let dir = tempfile::tempdir().unwrap();
    let v = run_ok(
        &nbd.uri(),
        &dir.path().join("dss"),
        &["--mode", "dss", "--large-qd", "1,4", "--region", "40%-100%"],
    );
    assert!(points_of(&v)
        .iter()
        .all(|p| p["kind"] == "large_sequential"));
    let start = v["config"]["region"]["start_bytes"].as_u64().unwrap();
    assert!(start >= (64 << 20) * 2 / 5, "inner 60% starts at 40%");
    assert_every_point_did_io(&v);

    let v = run_ok(
        &nbd.uri(),
        &dir.path().join("matrix"),
        &[
            "--mode",
            "matrix",
            "--qd",
            "2",
            "--large-qd",
            "1",
            "-w",
            "0,50",
            "--region",
            "0-40%",
            "--allow-destructive",
        ],
    );
    assert_eq!(
        points_of(&v).len(),
        6,
        "(1+1) x (1+1) - 1 combinations x 2 write percentages"
    );
    assert!(points_of(&v).iter().any(|p| p["kind"] == "mixed"));
    assert_every_point_did_io(&v);
}

#[test]
fn every_mode_against_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = temp_file(dir.path(), 32 << 20);
    let file = file.to_str().unwrap();
    for (mode, extra) in [
        ("simple", &["--qd", "1,2", "--large-qd", "1"][..]),
        // A file of holes is a scratch file: no flag needed to write it...
        ("oltp", &["--qd", "2", "-w", "0,100"][..]),
        // ... but once written it holds data.
        (
            "dss",
            &["--large-qd", "2", "-w", "0,100", "--allow-destructive"][..],
        ),
        (
            "matrix",
            &[
                "--qd",
                "1",
                "--large-qd",
                "1",
                "-w",
                "40",
                "--allow-destructive",
            ][..],
        ),
    ] {
        let mut args = vec!["--mode", mode];
        args.extend_from_slice(extra);
        let v = run_ok(file, &dir.path().join(mode), &args);
        assert_eq!(v["target"]["kind"], "file");
        assert!(v["target"]["direct_io"].is_boolean());
        assert_every_point_did_io(&v);
    }
}

#[test]
fn data_pattern_and_server_cpu_are_recorded() {
    let nbd = Nbdkit::start(&[], "64M");
    let dir = tempfile::tempdir().unwrap();
    let pid = nbd.pid().to_string();
    let v = run_ok(
        &nbd.uri(),
        &dir.path().join("pattern"),
        &[
            "--mode",
            "oltp",
            "--qd",
            "4",
            "-w",
            "100",
            "--compressible",
            "50",
            "--dedupable",
            "25%",
            "--server-pid",
            &pid,
            "--small",
            "8KiB",
            "--allow-destructive",
        ],
    );
    assert_eq!(v["config"]["data_pattern"]["compressible_pct"], 50);
    assert_eq!(v["config"]["data_pattern"]["dedupable_pct"], 25);
    assert_eq!(v["config"]["server_pid"], nbd.pid());
    assert_eq!(v["config"]["small_io_bytes"], 8192);
    let p = &points_of(&v)[0];
    assert!(
        p["cpu"]["server_pct"].as_f64().unwrap() > 0.0,
        "nbdkit served: {p}"
    );
    assert!(p["cpu"]["server_us_per_io"].as_f64().unwrap() > 0.0);
    assert!(p["series"][0]["server_cpu_pct"].is_number());
    expect_usage_error(
        &[&nbd.uri(), "--server-pid", "4294967295"],
        "--server-pid 4294967295: cannot read /proc/4294967295/stat",
    );
    expect_usage_error(&[&nbd.uri(), "--compressible", "101"], "percentage");
}

#[test]
fn report_overlays_results_and_renders_in_chromium() {
    let nbd = Nbdkit::start(&[], "64M");
    let dir = tempfile::tempdir().unwrap();
    let file = temp_file(dir.path(), 32 << 20);
    let common = ["--qd", "1,2,4", "-w", "0,40", "--large-qd", "1,2"];
    let mut a = common.to_vec();
    let pid = nbd.pid().to_string();
    a.extend_from_slice(&["--label", "nbdkit", "--mode", "oltp", "--server-pid", &pid]);
    a.extend_from_slice(&[
        "--compressible",
        "60",
        "--dedupable",
        "20",
        "--allow-destructive",
    ]);
    run_ok(&nbd.uri(), &dir.path().join("a"), &a);
    let mut b = common.to_vec();
    b.extend_from_slice(&["--label", "file", "--mode", "simple"]);
    run_ok(file.to_str().unwrap(), &dir.path().join("b"), &b);

    let html = dir.path().join("cmp.html");
    let out = bench(&[
        "report",
        dir.path().join("a.json").to_str().unwrap(),
        dir.path().join("b.json").to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--latency-threshold",
        "10ms",
    ]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let dom = chromium(
        dir.path(),
        &["--dump-dom", "--window-size=1200,2000"],
        &html,
    );
    assert!(
        dom.contains("data-rendered=\"true\""),
        "report script did not finish"
    );
    let charts = plot_charts(&dom);
    for c in &charts {
        assert!(c.num("data-points") > 0.0, "a chart was left empty: {c:?}");
    }
    for kind in [
        "latency-qd",
        "iops-latency",
        "mbps-qd",
        "iops-qd",
        "histogram",
        "cpu-point",
        "time-io",
        "time-latency",
        "time-cpu",
    ] {
        let c = charts
            .iter()
            .find(|c| c.attr("data-chart") == kind)
            .unwrap_or_else(|| panic!("no {kind} chart in {charts:#?}"));
        assert!(
            c.num("data-points") > 0.0 && c.num("data-series") > 0.0,
            "{kind} chart has no data: {c:?}"
        );
        assert_eq!(c.attr("data-drawn"), "true", "uPlot did not draw {kind}");
        assert!(c.num("data-y-max") > 0.0, "{kind}: flat zero data {c:?}");
        assert!(c.num("data-x-max") >= c.num("data-x-min"), "{kind}: {c:?}");
        // Charts take the page's width: two 560 px columns or one wider one at 1200 px.
        assert!(c.num("data-width") >= 500.0, "{kind} is narrow: {c:?}");
    }
    // IOPS and MB/s over time on two axes: MB/s has its own scale, so one line does not
    // flatten the other.
    let time_io = charts
        .iter()
        .find(|c| c.attr("data-chart") == "time-io")
        .unwrap();
    assert_eq!(time_io.attr("data-y-axes"), "2", "{time_io:?}");
    assert_eq!(time_io.attr("data-labels"), "IOPS|MB/s", "{time_io:?}");
    assert_eq!(time_io.attr("data-scales"), "y|y2", "{time_io:?}");
    // Mean, p99 and p99.9 against outstanding I/Os (1, 2, 4): both runs, small random I/O.
    let lat = charts
        .iter()
        .find(|c| c.attr("data-chart") == "latency-qd" && c.attr("data-labels").contains("file"))
        .expect("a latency chart overlays both runs");
    let labels: Vec<&str> = lat.attr("data-labels").split('|').collect();
    for stat in ["mean", "p99", "p99.9"] {
        for run in ["nbdkit", "file"] {
            let want = format!("{run}: {stat}");
            assert!(
                labels.contains(&want.as_str()),
                "{want} missing: {labels:?}"
            );
        }
    }
    assert_eq!((lat.num("data-x-min"), lat.num("data-x-max")), (1.0, 4.0));
    let iops_latency = charts
        .iter()
        .find(|c| c.attr("data-chart") == "iops-latency")
        .unwrap();
    assert_eq!(
        iops_latency.num("data-series"),
        4.0,
        "2 runs x 2 write percentages"
    );
    assert!(iops_latency.num("data-points") >= 12.0);
    // Large sequential MB/s at 1 and 2 outstanding I/Os (the simple run), per write %.
    let mbps = charts
        .iter()
        .find(|c| c.attr("data-chart") == "mbps-qd")
        .unwrap();
    assert_eq!((mbps.num("data-x-min"), mbps.num("data-x-max")), (1.0, 2.0));
    // The server's CPU (nbdkit's pid) is drawn for the run that watched it.
    assert!(charts.iter().any(|c| c.attr("data-chart") == "time-cpu"
        && c.attr("data-labels")
            .contains(&format!("server CPU (pid {pid})"))));
    // ORION grids: IOPS and latency by small outstanding I/Os for both runs; MB/s by large
    // outstanding I/Os for the simple run.
    for grid in ["iops", "mbps", "latency"] {
        assert!(
            dom.contains(&format!("class=\"grid\" data-grid=\"{grid}\"")),
            "no {grid} grid"
        );
    }
    assert!(dom.contains("small \\ large"));
    // The oltp run has no large I/O: its grids are one row, a column per outstanding I/Os
    // (1, 2, 4), not a one-column matrix.
    let oltp_grid = dom
        .split("<table")
        .find(|t| t.contains("data-grid=\"iops\" data-run=\"0\""))
        .expect("the oltp run's IOPS grid");
    assert!(oltp_grid.contains("data-layout=\"row\""), "{oltp_grid}");
    assert_eq!(oltp_grid.matches("<td").count(), 3, "{oltp_grid}");
    // The target's size in binary units, as the CLI prints it (64 MiB, not "67MB").
    assert!(dom.contains("(64.0 MiB), mode oltp"), "target size");
    assert!(!dom.contains("67MB"));
    assert!(dom.contains("60% compressible, 20% duplicate 4 KiB blocks"));
    assert!(dom.contains("class=\"knee\""));

    let shot = dir.path().join("report.png");
    let arg = format!("--screenshot={}", shot.display());
    chromium(dir.path(), &[&arg, "--window-size=1200,2000"], &html);
    let png = std::fs::read(&shot).expect("screenshot written");
    assert!(
        png.len() > 10_000 && png.starts_with(b"\x89PNG"),
        "screenshot too small"
    );
    if let Ok(keep) = std::env::var("WEFT_BENCH_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
}

/// Runs headless Chromium on `html`, returns stdout. Kills it by PID on timeout.
fn chromium(dir: &Path, args: &[&str], html: &Path) -> String {
    let profile = tempfile::tempdir_in(dir).unwrap();
    let mut child = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(format!("file://{}", html.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium must be installed (apt-get install chromium)");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut s).unwrap();
        s
    });
    let deadline = Instant::now() + CHROMIUM_TIMEOUT;
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium timed out");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

/// The attributes report.js puts on one chart's container.
#[derive(Debug)]
struct Chart(Vec<(String, String)>);

impl Chart {
    fn attr(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.as_str())
    }

    fn num(&self, name: &str) -> f64 {
        self.attr(name)
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number in {self:?}"))
    }
}

/// Every `<div class="plot" data-chart=...>` in the dumped DOM with its attributes (the
/// inlined script mentions the bare tag in a comment).
fn plot_charts(dom: &str) -> Vec<Chart> {
    dom.match_indices("<div class=\"plot\" data-chart=")
        .filter_map(|(i, _)| {
            let tag = &dom[i + "<div".len()..i + dom[i..].find('>')?];
            Some(Chart(attributes(tag)))
        })
        .collect()
}

/// `name="value"` pairs of a serialised tag (values hold no '"': the DOM escapes it).
fn attributes(mut tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    while let Some((name, rest)) = tag.split_once("=\"") {
        let Some((value, rest)) = rest.split_once('"') else {
            break;
        };
        out.push((name.trim().to_string(), value.to_string()));
        tag = rest;
    }
    out
}

fn expect_usage_error(args: &[&str], needle: &str) {
    let out = bench(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: expected exit 2, stderr: {stderr}"
    );
    assert!(
        stderr.contains(needle),
        "{args:?}: stderr lacks '{needle}': {stderr}"
    );
}

#[test]
fn missing_file_is_a_clear_target_error() {
    expect_usage_error(
        &["/nonexistent/weft/disk.img", "--no-progress"],
        "cannot be opened",
    );
}

#[test]
fn unreachable_port_is_a_clear_target_error() {
    let port = free_port(); // nothing listens once the probe listener is dropped
    let uri = format!("nbd://127.0.0.1:{port}/");
    expect_usage_error(&[&uri, "--no-progress"], "cannot connect to NBD server");
    // The cause follows the message.
    expect_usage_error(&[&uri, "--no-progress"], "Connection refused");
}

#[test]
fn non_nbd_server_is_a_clear_target_error() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let uri = format!("nbd://127.0.0.1:{port}/");
    expect_usage_error(&[&uri, "--no-progress"], "not an NBD server");
    server.join().unwrap();
}

#[test]
fn unreachable_or_non_iscsi_portals_and_bad_iscsi_uris_are_clear_target_errors() {
    let port = free_port();
    let uri = format!("iscsi://127.0.0.1:{port}/iqn.2026-11.dev.weft:vol0/0");
    expect_usage_error(&[&uri, "--no-progress"], "cannot connect to iSCSI target");
    expect_usage_error(&[&uri, "--no-progress"], "Connection refused");
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        // Take the whole Login Request first: closing with unread bytes would reset the
        // connection instead of ending it.
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut buf = [0u8; 4096];
        while matches!(std::io::Read::read(&mut s, &mut buf), Ok(n) if n > 0) {}
        let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n");
    });
    let uri = format!("iscsi://127.0.0.1:{port}/iqn.2026-11.dev.weft:vol0/0");
    expect_usage_error(
        &[&uri, "--no-progress"],
        "violated the protocol: the target closed the connection during login",
    );
    server.join().unwrap();
    expect_usage_error(
        &["iscsi://u%hush@127.0.0.1/iqn.x", "--no-progress"],
        "not a valid iSCSI URI (missing LUN after the target name",
    );
    let out = bench(&["iscsi://u%hush@127.0.0.1/iqn.x", "--no-progress"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("hush"));
}

#[test]
fn region_outside_the_device_is_a_clear_error() {
    let nbd = Nbdkit::start(&[], "16M");
    let uri = nbd.uri();
    expect_usage_error(&[&uri, "--region", "0-200%"], "outside the device");
    // Sizes in binary units, never byte counts.
    expect_usage_error(
        &[&uri, "--region", "1g-2g"],
        "ends at 2.0 GiB, beyond the end of the target (16.0 MiB)",
    );
    expect_usage_error(&[&uri, "--large", "128m"], "between 1 B and 64.0 MiB");
    expect_usage_error(&[&uri, "--region", "60%-40%"], "is empty");
    let dir = tempfile::tempdir().unwrap();
    let file = temp_file(dir.path(), 1 << 20);
    expect_usage_error(
        &[file.to_str().unwrap(), "--region", "0-4m"],
        "beyond the end",
    );
}

#[test]
fn bad_arguments_and_read_only_targets_exit_2() {
    expect_usage_error(&["x", "--write", "150"], "percentage");
    expect_usage_error(&["x", "--qd", "0"], "positive");
    expect_usage_error(&["x", "--region", "40%"], "START-END");
    expect_usage_error(&["ftp://x/y"], "unsupported scheme");
    let nbd = Nbdkit::start(&["-r"], "16M");
    expect_usage_error(&[&nbd.uri(), "--mode", "oltp", "-w", "10"], "read-only");
    // Only `weft bench` talks to the management API.
    expect_usage_error(&["--create-volume", "64M"], "management API");
    expect_usage_error(&["--create-volume", "64M", "x"], "cannot be used with");
}

#[test]
fn writes_to_an_nbd_export_need_allow_destructive() {
    let nbd = Nbdkit::start(&[], "16M");
    let uri = nbd.uri();
    for plan in [
        &["--mode", "oltp"][..],
        &["--mode", "dss", "-w", "100"],
        &["--mode", "matrix", "-w", "40"],
        &["-w", "10"],
    ] {
        let mut args = vec![uri.as_str(), "--no-progress"];
        args.extend_from_slice(plan);
        expect_usage_error(&args, "destroys what it holds: pass --allow-destructive");
        expect_usage_error(&args, "--create-volume SIZE");
    }
    // Nothing was written: the export is still all holes.
    let dir = tempfile::tempdir().unwrap();
    let v = run_ok(
        &uri,
        &dir.path().join("after"),
        &["--qd", "1", "--large-qd", "1"],
    );
    assert_eq!(
        v["unwritten"]["before_bytes"],
        16 << 20,
        "{}",
        v["unwritten"]
    );
}

/// A regular file with data in it may be a database file: writes need the flag, as on an
/// export. A file of holes (`truncate -s`) is a scratch file and needs none.
#[test]
fn writes_to_a_file_that_holds_data_need_allow_destructive() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let file = temp_file(dir.path(), 16 << 20);
    let path = file.to_str().unwrap();
    let data = std::fs::OpenOptions::new().write(true).open(&file).unwrap();
    data.write_all_at(&[0x5a; 1 << 20], 4 << 20).unwrap();
    data.sync_all().unwrap();
    let before = std::fs::read(&file).unwrap();
    for plan in [&["--mode", "oltp"][..], &["-w", "10"]] {
        let mut args = vec![path, "--no-progress"];
        args.extend_from_slice(plan);
        expect_usage_error(
            &args,
            &format!("to file {path}, which destroys what it holds"),
        );
        expect_usage_error(&args, "pass --allow-destructive");
    }
    assert!(
        std::fs::read(&file).unwrap() == before,
        "the refused runs wrote"
    );
    // What it measures is said in binary units.
    let units = dir.path().join("units");
    let mut args = vec![path, "-o", units.to_str().unwrap()];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(&["--qd", "1", "--large-qd", "1"]);
    let out = bench(&args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains(&format!(
            "against {path} (16.0 MiB, region 0 B to 16.0 MiB)"
        )),
        "{stderr}"
    );
    // Reading it needs nothing; writing it, the flag.
    run_ok(
        path,
        &dir.path().join("reads"),
        &["--qd", "1", "--large-qd", "1"],
    );
    let v = run_ok(
        path,
        &dir.path().join("writes"),
        &[
            "--mode",
            "oltp",
            "--qd",
            "1",
            "-w",
            "100",
            "--allow-destructive",
        ],
    );
    assert_every_point_did_io(&v);
    // A new file of holes takes writes without it.
    let scratch = dir.path().join("scratch.img");
    std::fs::File::create(&scratch)
        .unwrap()
        .set_len(16 << 20)
        .unwrap();
    let v = run_ok(
        scratch.to_str().unwrap(),
        &dir.path().join("scratch"),
        &["--mode", "oltp", "--qd", "1", "-w", "100"],
    );
    assert_every_point_did_io(&v);
}

#[test]
fn unwritten_ranges_are_found_warned_about_and_prefilled_before_reads() {
    let nbd = Nbdkit::start(&[], "32M");
    let uri = nbd.uri();
    let dir = tempfile::tempdir().unwrap();
    let reads = ["--qd", "1,2", "--large-qd", "1"];

    // A new export: all holes. Without --allow-destructive the prefill may not write, so the
    // reads measure holes and every output says so.
    let prefix = dir.path().join("holes");
    let mut args = vec![uri.as_str(), "-o", prefix.to_str().unwrap()];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(&reads);
    let out = bench(&args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("32.0 MiB of the 32.0 MiB measured (100.0%) has never been written (nbd base:allocation)"), "{stderr}");
    assert!(
        stderr.contains("not prefilled: it would write to NBD export"),
        "{stderr}"
    );
    assert!(stdout.contains("warning: 32.0 MiB of the 32.0 MiB measured (100.0%) was never written when the points ran"), "{stdout}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(prefix.with_extension("json")).unwrap())
            .unwrap();
    validate(&v);
    let u = &v["unwritten"];
    assert_eq!(u["method"], "nbd base:allocation", "{u}");
    assert_eq!(u["region_bytes"], 32 << 20, "{u}");
    assert_eq!(u["before_bytes"], 32 << 20, "{u}");
    assert_eq!(u["measured_bytes"], 32 << 20, "{u}");
    assert_eq!(u["prefilled_bytes"], 0, "{u}");
    assert!(
        u["prefill_skipped"]
            .as_str()
            .unwrap()
            .contains("--allow-destructive"),
        "{u}"
    );
    assert!(
        u["warning"].as_str().unwrap().contains("return zeroes"),
        "{u}"
    );
    // The report shows the warning above the charts.
    let dom = chromium(
        dir.path(),
        &["--dump-dom", "--window-size=1200,2000"],
        &prefix.with_extension("html"),
    );
    assert!(
        dom.contains("class=\"warning unwritten\""),
        "no warning in the report"
    );
    assert!(
        dom.contains("was never written when the points ran"),
        "the warning's text"
    );

    // --no-prefill says so.
    let v = run_ok(
        &uri,
        &dir.path().join("no-prefill"),
        &[&reads[..], &["--no-prefill", "--allow-destructive"]].concat(),
    );
    assert_eq!(v["unwritten"]["prefill_skipped"], "--no-prefill");
    assert_eq!(v["unwritten"]["prefilled_bytes"], 0);
    assert!(v["unwritten"]["warning"].is_string());

    // With --allow-destructive the holes are filled before the first point: no warning.
    let v = run_ok(
        &uri,
        &dir.path().join("prefilled"),
        &[&reads[..], &["--allow-destructive"]].concat(),
    );
    let u = &v["unwritten"];
    assert_eq!(u["before_bytes"], 32 << 20, "{u}");
    assert_eq!(u["prefilled_bytes"], 32 << 20, "{u}");
    assert_eq!(u["measured_bytes"], 0, "{u}");
    assert!(u["warning"].is_null(), "{u}");
    assert!(u["prefill_s"].as_f64().unwrap() > 0.0, "{u}");
    // ... and stay filled: the next run finds nothing to do.
    let v = run_ok(&uri, &dir.path().join("again"), &reads);
    assert_eq!(v["unwritten"]["before_bytes"], 0);
    assert!(v["unwritten"]["warning"].is_null());

    // A file is not checked, and says why.
    let file = temp_file(dir.path(), 4 << 20);
    let v = run_ok(file.to_str().unwrap(), &dir.path().join("file"), &reads);
    assert!(v["unwritten"]["method"].is_null());
    assert!(v["unwritten"]["not_checked"]
        .as_str()
        .unwrap()
        .contains("not checked"));
}
