//! Tiers in a cluster, end to end through `weft`: real etcd, six `weft dnode` processes on
//! loopback (three `--tier performance`, three `--tier capacity`) and a `weft cnode`.
//!
//! `weft pool create cold --ec 2+1 --tier capacity --price-gb 0.02 --price-iops 0.0` keeps
//! the tier and prices in the pool record (`weft pool info/list`, text and JSON) and places
//! the pool's placement groups only on the capacity d.nodes (`weft dnode list` shows each
//! d.node's tier); data written to a volume of the pool reads back. `weft tier list` lists the
//! pool under its tier at the pool's prices, and `weft tier advise` counts the pool's volume
//! on capacity and the default (untiered) pool's vol0 on the c.node's tier; `weft stats`
//! shows the bytes stored on each tier. A second pool
//! pricing the same tier otherwise, and a tier nobody priced, are refused.

mod cluster_support;
mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use serde_json::Value;

const CAPACITY: [usize; 3] = [3, 4, 5];

fn advice_of<'a>(advice: &'a Value, volume: &str) -> &'a Value {
    advice["volumes"]
        .as_array()
        .and_then(|vs| vs.iter().find(|v| v["volume"] == volume))
        .unwrap_or_else(|| panic!("no advice for {volume}: {advice:#}"))
}

#[test]
fn a_tiered_pool_lives_on_its_tiers_dnodes_and_the_advisor_counts_its_volumes_there() {
    let _serial = serial();
    let started = Instant::now();
    let (_, seed) = test_rng("cluster_tiers");
    let mut opts = ClusterOpts::new(6).volume_size("256M");
    for i in 0..6 {
        let tier = if CAPACITY.contains(&i) {
            "capacity"
        } else {
            "performance"
        };
        opts.dnode_args
            .insert(i, vec!["--tier".to_string(), tier.to_string()]);
    }
    opts.cnode_args.insert(
        "c1".into(),
        ["--heat-extent-size", "16M", "--heat-persist-interval", "1s"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
    );
    let c = Cluster::start("cluster_tiers", seed, opts);
    let capacity_ids: BTreeSet<String> = CAPACITY.iter().map(|&i| c.dnodes[i].id.clone()).collect();

    // d.nodes say their tier.
    let nodes = c.cli_json(&["dnode", "list", "--json"]);
    for d in &c.dnodes {
        let n = nodes
            .as_array()
            .and_then(|ns| ns.iter().find(|n| n["id"] == d.id.as_str()))
            .unwrap_or_else(|| panic!("{} not listed: {nodes:#}", d.id));
        let want = if capacity_ids.contains(&d.id) {
            "capacity"
        } else {
            "performance"
        };
        assert_eq!(n["tier"], want, "{n}");
    }
    let text = c.cli_ok(&["dnode", "list"]);
    assert!(
        text.lines().filter(|l| l.contains(" capacity ")).count() == 3,
        "{text}"
    );

    c.cli_ok(&[
        "pool",
        "create",
        "cold",
        "--ec",
        "2+1",
        "--pg-count",
        "8",
        "--tier",
        "capacity",
        "--price-gb",
        "0.02",
        "--price-iops",
        "0.0",
    ]);
    c.step("created pool cold on tier capacity");
    // The monitor maps the new pool at its next round: only capacity d.nodes.
    let info = poll_until(Duration::from_secs(30), "pool cold mapped", || {
        let v = c.cli_json(&["pool", "info", "cold", "--json"]);
        (v["pgs_healthy"] == 8).then_some(v)
    });
    assert_eq!(info["tier"], "capacity", "{info}");
    assert_eq!(info["price_gb"], 0.02, "{info}");
    assert_eq!(info["price_iops"], 0.0, "{info}");
    let placed: BTreeSet<String> = info["dnodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        placed, capacity_ids,
        "pool cold is on other d.nodes: {info}"
    );
    // The untiered default pool is on every d.node.
    let default = c.cli_json(&["pool", "info", "default", "--json"]);
    assert_eq!(default["tier"], Value::Null, "{default}");
    assert_eq!(
        default["dnodes"].as_array().map(Vec::len),
        Some(6),
        "{default}"
    );
    let list = c.cli_ok(&["pool", "list"]);
    let line = list.lines().find(|l| l.starts_with("cold ")).unwrap_or("");
    assert!(
        line.contains("tier capacity ($0.02/GB-mo, $0/IOPS-mo)"),
        "{list}"
    );
    let listed = c.cli_json(&["pool", "list", "--json"]);
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "cold" && p["tier"] == "capacity"),
        "{listed}"
    );

    // A tier has one price; a tier nobody priced needs prices.
    let other = c.cli(&[
        "pool",
        "create",
        "cold2",
        "--ec",
        "2+1",
        "--tier",
        "capacity",
        "--price-gb",
        "0.05",
        "--price-iops",
        "0.0",
    ]);
    assert!(
        !other.success() && other.stderr.contains("pool cold prices tier capacity"),
        "{}",
        other.all()
    );
    let unpriced = c.cli(&["pool", "create", "arch", "--ec", "2+1", "--tier", "archive"]);
    assert!(
        !unpriced.success() && unpriced.stderr.contains("has no prices"),
        "{}",
        unpriced.all()
    );

    // A volume of the pool: written and read back over NBD (its stripes on capacity).
    c.cli_ok(&[
        "volume", "create", "cold1", "--size", "64M", "--pool", "cold",
    ]);
    let data = blocks_data(seed, 1, 0, 256);
    let mut nbd = c.nbd_client("cold1");
    write_all(&mut nbd, 0, &data);
    nbd.flush().expect("flush");
    let hot = blocks_data(seed, 2, 0, 16);
    let mut nbd0 = c.nbd_client("vol0");
    write_all(&mut nbd0, 0, &hot);
    nbd0.flush().expect("flush");
    c.sync();
    assert_eq!(read_all(&mut nbd, 0, data.len() as u64).unwrap(), data);
    drop((nbd, nbd0));

    // The advisor: cold1 is on capacity (its pool's), vol0 on performance (the c.node's),
    // and the tiers it prices include capacity at the pool's prices.
    let tiers = c.cli_json(&["tier", "list", "--json"]);
    let cap = tiers["tiers"]
        .as_array()
        .and_then(|ts| ts.iter().find(|t| t["name"] == "capacity"))
        .unwrap_or_else(|| panic!("{tiers:#}"));
    assert_eq!(cap["price_gb"], 0.02, "{tiers}");
    assert_eq!(cap["pools"], serde_json::json!(["cold"]), "{tiers}");
    // Stored bytes per tier: cold1's family on capacity, vol0's on performance (random data:
    // nothing to reduce, so at least what was written).
    let stored = |name: &str| {
        tiers["tiers"]
            .as_array()
            .and_then(|ts| ts.iter().find(|t| t["name"] == name))
            .and_then(|t| t["stored_bytes"].as_u64())
            .unwrap_or(0)
    };
    assert!(stored("capacity") >= data.len() as u64, "{tiers}");
    assert!(stored("performance") >= hot.len() as u64, "{tiers}");
    let stats = c.cli_ok(&["stats"]);
    let line = stats
        .lines()
        .find(|l| l.starts_with("stored by tier"))
        .unwrap_or_else(|| panic!("no tier line in weft stats:\n{stats}"));
    assert!(
        line.contains("capacity ") && line.contains("performance "),
        "{stats}"
    );
    let text = c.cli_ok(&["tier", "list"]);
    assert!(
        text.lines()
            .any(|l| l.starts_with("capacity ") && l.trim_end().ends_with("cold")),
        "{text}"
    );
    let advice = c.cli_json(&["tier", "advise", "--window", "hour", "--json"]);
    assert_eq!(advice["tiers"]["capacity"]["price_gb"], 0.02, "{advice}");
    let cold1 = advice_of(&advice, "cold1");
    assert_eq!(cold1["tier_now"], "capacity", "{cold1}");
    let vol0 = advice_of(&advice, "vol0");
    assert_eq!(vol0["tier_now"], "performance", "{vol0}");
    // cold1's first extent holds the 1 MiB written; at $0.02/GB and no IOPS price it costs
    // 1/1024 GiB x 0.02 a month on capacity.
    let e0 = &cold1["extents"][0];
    assert_eq!(e0["tier_now"], "capacity", "{e0}");
    assert_eq!(e0["data_bytes"], data.len() as u64, "{e0}");
    let want = data.len() as f64 / (1u64 << 30) as f64 * 0.02;
    assert!(
        (e0["cost_now"].as_f64().unwrap() - want).abs() < 1e-12,
        "{e0}"
    );
    assert!(
        e0["writes"]["hour"].as_u64().unwrap() > 0,
        "cold1's writes were not counted: {e0}"
    );
    let text = c.cli_ok(&["tier", "advise", "cold1"]);
    assert!(text.contains("capacity"), "{text}");
    c.step(&format!("done in {:.1}s", started.elapsed().as_secs_f64()));
}
