//! Tiering, first half, end to end through `weft serve` and fio's nbd engine: one extent of a
//! volume is hammered with random reads, the others are written once; `weft tier advise
//! --json` then shows the hot extent's IOPS/GB far above the others', advises performance for
//! it and capacity for the cold ones at the configured prices, and its dollar figures match
//! the cost model computed here from its own counts. The heat survives a kill -9 after the
//! persist interval; the API refuses the routes without a token, and the read-only token may
//! not set prices.
//!
//! Needs fio (with its nbd engine).

mod common;

use std::time::{Duration, Instant};

use common::*;
use serde_json::Value;

const MIB: u64 = 1 << 20;
const EXTENT: u64 = 16 * MIB;
const EXTENTS: u64 = 16;
const HOT: u64 = 5;
/// 4096 4 KiB blocks in the hot extent, each read once per loop.
const LOOPS: u64 = 5;
const HOT_READS: u64 = LOOPS * (EXTENT / 4096);
/// The prices: performance (the store) and capacity (set through the API).
const PERF_GB: f64 = 0.10;
const PERF_IOPS: f64 = 0.0;
const CAP_GB: f64 = 0.02;
/// Low enough that a cold extent (16 fill writes) is cheaper on capacity however short the
/// window the test covers (a fast run covers about a second: 16 IOPS there), high enough
/// that the hot one (20,480 reads) stays on flash up to about 100 s covered.
const CAP_IOPS: f64 = 0.00001;

fn advise(srv: &Server) -> Value {
    srv.cli_json(&["tier", "advise", "vol0", "--window", "hour", "--json"])
}

fn extents(advice: &Value) -> Vec<Value> {
    advice["volumes"][0]["extents"]
        .as_array()
        .expect("extents")
        .clone()
}

#[test]
fn the_advisor_puts_the_hot_extent_on_flash_and_keeps_it_across_a_restart() {
    require_tool("fio");
    let started = Instant::now();
    let mut srv = Server::start_with(
        "tiering",
        ServeOpts::default()
            .volume_size("256M")
            .arg("--tier")
            .arg("performance")
            .arg(&format!("--price-gb={PERF_GB}"))
            .arg(&format!("--price-iops={PERF_IOPS}"))
            .arg("--heat-extent-size")
            .arg("16M")
            .arg("--heat-persist-interval")
            .arg("1s"),
    );
    let tiers = srv.cli_json(&[
        "tier",
        "set",
        "capacity",
        &format!("--price-gb={CAP_GB}"),
        &format!("--price-iops={CAP_IOPS}"),
        "--json",
    ]);
    assert_eq!(tiers["local_tier"], "performance", "{tiers}");
    assert_eq!(tiers["extent_bytes"], EXTENT, "{tiers}");

    // Every extent written once, sequentially in 1 MiB writes; then 4 KiB random reads of
    // every block of the hot extent, LOOPS times.
    let fill = fio(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &strs(&[
            "--name=fill",
            "--rw=write",
            "--bs=1M",
            "--size=256M",
            "--iodepth=4",
        ]),
        Duration::from_secs(300),
    );
    assert_fio_ok(&fill, "sequential fill");
    let hot = fio(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &strs(&[
            "--name=hot",
            "--rw=randread",
            "--bs=4k",
            &format!("--offset={}", HOT * EXTENT),
            &format!("--size={EXTENT}"),
            &format!("--loops={LOOPS}"),
            "--iodepth=8",
        ]),
        Duration::from_secs(300),
    );
    assert_fio_ok(&hot, "random reads of the hot extent");

    let advice = advise(&srv);
    let all = extents(&advice);
    assert_eq!(all.len() as u64, EXTENTS, "{advice}");
    let covered = advice["volumes"][0]["covered_s"]["hour"].as_u64().unwrap() as f64;
    assert!(covered >= 1.0, "{advice}");
    let mut cost_now = 0.0;
    let mut cost_after = 0.0;
    for e in &all {
        let index = e["index"].as_u64().unwrap();
        let reads = e["reads"]["hour"].as_u64().unwrap();
        let writes = e["writes"]["hour"].as_u64().unwrap();
        assert_eq!(e["data_bytes"], EXTENT, "written in full: {e}");
        assert!(writes >= 1, "every extent was written: {e}");
        if index == HOT {
            assert_eq!(reads, HOT_READS, "every read fio made, counted once: {e}");
        } else {
            assert_eq!(reads, 0, "nothing read there: {e}");
        }
        // The cost model by hand: IOPS over the covered seconds, GB = 2^30 bytes.
        let iops = (reads + writes) as f64 / covered;
        let gib = EXTENT as f64 / (1u64 << 30) as f64;
        let intensity = e["iops_per_gb"]["hour"].as_f64().unwrap();
        assert!(
            (intensity - iops / gib).abs() <= 1e-6 * intensity.max(1.0),
            "{e}"
        );
        let on_perf = (iops * PERF_IOPS).max(gib * PERF_GB);
        let on_cap = (iops * CAP_IOPS).max(gib * CAP_GB);
        let (advised, after) = if on_cap <= on_perf * 0.8 {
            ("capacity", on_cap)
        } else {
            ("performance", on_perf)
        };
        assert_eq!(e["tier_now"], "performance", "{e}");
        assert_eq!(e["advised_tier"], advised, "{e}");
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 + 1e-9 * b.abs();
        assert!(close(e["cost_now"].as_f64().unwrap(), on_perf), "{e}");
        assert!(close(e["cost_after"].as_f64().unwrap(), after), "{e}");
        cost_now += on_perf;
        cost_after += after;
    }
    // The workload's shape: the hot extent on flash, the rest on capacity.
    let hot_extent = &all[HOT as usize];
    assert_eq!(hot_extent["advised_tier"], "performance", "{hot_extent}");
    let hot_intensity = hot_extent["iops_per_gb"]["hour"].as_f64().unwrap();
    for e in all.iter().filter(|e| e["index"] != HOT) {
        assert_eq!(e["advised_tier"], "capacity", "{e}");
        let cold = e["iops_per_gb"]["hour"].as_f64().unwrap();
        assert!(
            hot_intensity > 100.0 * cold,
            "hot {hot_intensity} cold {cold}"
        );
    }
    let vol = &advice["volumes"][0];
    assert!(
        (vol["cost_now"].as_f64().unwrap() - cost_now).abs() < 1e-9,
        "{vol}"
    );
    assert!(
        (vol["cost_after"].as_f64().unwrap() - cost_after).abs() < 1e-9,
        "{vol}"
    );
    assert_eq!(vol["data_bytes_by_tier"]["performance"], EXTENT);
    assert_eq!(
        vol["data_bytes_by_tier"]["capacity"],
        (EXTENTS - 1) * EXTENT
    );

    // The table: a row for the hot extent, rows for the cold ones around it.
    let table = srv.cli_ok(&["tier", "advise", "vol0", "--window", "hour"]);
    assert!(table.contains("5-5"), "{table}");
    assert!(table.contains("0-4") && table.contains("6-15"), "{table}");
    assert!(
        table.contains("capacity") && table.contains("performance"),
        "{table}"
    );

    // Tokens: none is refused, the read-only one reads but may not set prices.
    for path in ["/api/v1/tiers", "/api/v1/tiers/advice?volume=vol0"] {
        let (status, body) = api_request(&srv.api, "GET", path, None, None);
        assert_eq!(status, 401, "{path}: {body}");
    }
    let ro = std::fs::read_to_string(srv.data_dir.join("api-token-read-only")).unwrap();
    let (status, _) = api_request(&srv.api, "GET", "/api/v1/tiers", None, Some(ro.trim()));
    assert_eq!(status, 200);
    let body = serde_json::json!({"price_gb": 1.0, "price_iops": 1.0});
    let (status, body) = api_request(
        &srv.api,
        "PUT",
        "/api/v1/tiers/capacity",
        Some(body),
        Some(ro.trim()),
    );
    assert_eq!(status, 403, "{body}");
    let (status, body) = srv.api("GET", "/api/v1/tiers/advice?volume=vol0&window=month", None);
    assert_eq!(status, 400, "{body}");
    let (status, _) = srv.api("GET", "/api/v1/tiers/advice?volume=nope", None);
    assert_eq!(status, 404);

    // /metrics: the tier's IOPS.
    if let Some(metrics) = &srv.metrics {
        let text = ureq::get(metrics)
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        assert!(
            text.contains("weft_tier_iops{tier=\"performance\",window=\"hour\"}"),
            "{text}"
        );
        assert!(text.contains("weft_tier_stored_bytes{tier=\"performance\"}"));
    }

    // Past the persist interval, a kill -9 keeps the heat (and the prices).
    std::thread::sleep(Duration::from_millis(2500));
    srv.kill9_and_restart();
    let again = advise(&srv);
    let hot_again = &extents(&again)[HOT as usize];
    assert_eq!(hot_again["reads"]["hour"], HOT_READS, "{hot_again}");
    assert_eq!(hot_again["advised_tier"], "performance");
    assert_eq!(
        again["tiers"]["capacity"]["price_iops"], CAP_IOPS,
        "{again}"
    );
    eprintln!("tiering test: {:?}", started.elapsed());
}
