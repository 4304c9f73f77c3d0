//! The cluster's statistics: c1 owns shards 0 and 2 (shard 2 in an engine of its own), s1
//! owns shard 1. A client writes db2 (shard 2) through c1 and db1 (shard 1) through c1 too,
//! which forwards it to s1. `weft top --json` through either c.node lists both volumes with
//! their owner and shard and the write rates of every c.node's front ends; `--cnode` shows
//! c1's own front ends, db1 as forwarded; c1's `/metrics` has db2's series of its extra
//! shard and db1's forwarded I/O, each with its shard and route. With s1 killed, the view
//! through c1 names it as not answering instead of showing its volume idle. Real etcd,
//! d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use serde_json::Value;

/// How long the writers run at most (the test stops them sooner).
const WRITE_FOR: Duration = Duration::from_secs(120);

/// Writes 4 KiB blocks to `export` through `nbd` until `stop` (or [`WRITE_FOR`]); the
/// number of writes.
fn writer(
    nbd: std::net::SocketAddr,
    export: &str,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<u64> {
    let export = export.to_string();
    std::thread::spawn(move || {
        let mut client = poll_until(Duration::from_secs(15), "an NBD connection", || {
            NbdClient::connect(nbd, &export).ok()
        });
        let started = Instant::now();
        let mut n = 0u64;
        while !stop.load(Ordering::Relaxed) && started.elapsed() < WRITE_FOR {
            client
                .write((n % 256) * 4096, &[n as u8; 4096])
                .unwrap_or_else(|e| panic!("writing {export}: {e:?}"));
            n += 1;
            std::thread::sleep(Duration::from_millis(2));
        }
        client.disconnect();
        n
    })
}

fn row<'a>(stats: &'a Value, name: &str) -> Option<&'a Value> {
    stats["volumes"]
        .as_array()?
        .iter()
        .find(|v| v["name"] == name)
}

fn write_iops(v: &Value) -> f64 {
    v["write"]["iops"].as_f64().unwrap_or(0.0)
}

/// Every sample line of a scrape, by its full name with labels.
fn scrape(metrics_url: &str) -> HashMap<String, f64> {
    let base = metrics_url.trim_end_matches("/metrics");
    let (status, text) = api_request(base, "GET", "/metrics", None, None);
    assert_eq!(status, 200, "/metrics: {text}");
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn top_and_metrics_show_every_shards_volumes_with_owner_and_shard() {
    let _serial = serial();
    let (_, seed) = test_rng("cluster-stats");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0,2".into()]);
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("cluster-stats", seed, opts);
    let c1_id = c.this_cnode_id();
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    c.cli_ok(&["volume", "create", "db2", "--size", "16M", "--shard", "2"]);
    let c1_nbd = c.cnode().nbd;
    let c1_metrics = c.cnode().metrics.clone();
    let c1 = c.make_current(s1).expect("c1");
    c.cli_ok(&["volume", "create", "db1", "--size", "16M"]);
    let s1_id = c.this_cnode_id();
    let s1_metrics = c.cnode().metrics.clone();
    c.step("c1 owns shards 0 and 2 (db2 in shard 2), s1 owns shard 1 (db1)");

    // Both written through c1: db2 by its engine of shard 2, db1 forwarded to s1.
    let stop = Arc::new(AtomicBool::new(false));
    let writers = [
        writer(c1_nbd, "db2", Arc::clone(&stop)),
        writer(c1_nbd, "db1", Arc::clone(&stop)),
    ];

    // The cluster's view through s1 (it asks c1, whose front ends did the I/O).
    let merged = poll_until(
        Duration::from_secs(30),
        "both volumes busy in the cluster's view",
        || {
            let stats = c.cli_json(&["top", "--json"]);
            let busy = |n| row(&stats, n).is_some_and(|v| write_iops(v) > 0.0);
            (busy("db1") && busy("db2")).then_some(stats)
        },
    );
    assert_eq!(merged["scope"], "cluster", "{merged}");
    let db1 = row(&merged, "db1").unwrap();
    let db2 = row(&merged, "db2").unwrap();
    assert_eq!(
        (&db1["owner"], &db1["shard"]),
        (&Value::from(s1_id.clone()), &Value::from(1)),
        "{db1}"
    );
    assert_eq!(
        (&db2["owner"], &db2["shard"]),
        (&Value::from(c1_id.clone()), &Value::from(2)),
        "{db2}"
    );
    assert_eq!(db1["served_by"], serde_json::json!([c1_id]), "{db1}");
    assert!(
        row(&merged, "vol0").is_some_and(|v| v["shard"] == 0 && v["owner"] == c1_id.as_str()),
        "{merged}"
    );
    let answered: Vec<&Value> = merged["cnodes"].as_array().unwrap().iter().collect();
    assert!(
        answered.len() == 2 && answered.iter().all(|a| a["answered"] == true),
        "{merged}"
    );
    c.step(&format!(
        "weft top --json through s1: db1 {:.0} w/s owned by s1 (shard 1), db2 {:.0} w/s owned by c1 (shard 2)",
        write_iops(db1),
        write_iops(db2)
    ));

    // s1's own front ends did nothing: its view of itself has no I/O.
    let own = c.cli_json(&["top", "--json", "--cnode"]);
    assert_eq!(own["scope"], "cnode", "{own}");
    assert!(
        row(&own, "db1").is_some_and(|v| write_iops(v) == 0.0 && v["route"] == "local"),
        "{own}"
    );

    // The text view: owner and shard columns.
    let text = c.cli_ok(&["top", "-n", "1"]);
    let db1_line = text
        .lines()
        .find(|l| l.starts_with("db1 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        text.contains(" OWNER ")
            && db1_line
                .split_whitespace()
                .rev()
                .take(2)
                .eq(["1", s1_id.as_str()]),
        "{text}"
    );

    // Through c1: db1 forwarded, db2 its own.
    let s1 = c.make_current(c1).expect("s1");
    let own = poll_until(Duration::from_secs(15), "c1's front ends busy", || {
        let own = c.cli_json(&["top", "--json", "--cnode"]);
        let busy = |n| row(&own, n).is_some_and(|v| write_iops(v) > 0.0);
        (busy("db1") && busy("db2")).then_some(own)
    });
    let db1 = row(&own, "db1").unwrap();
    let db2 = row(&own, "db2").unwrap();
    assert_eq!(
        (&db1["route"], &db1["owner"], &db1["shard"]),
        (
            &Value::from("forwarded"),
            &Value::from(s1_id.clone()),
            &Value::from(1)
        ),
        "{db1}"
    );
    assert_eq!(
        (&db2["route"], &db2["shard"]),
        (&Value::from("local"), &Value::from(2)),
        "{db2}"
    );
    c.step("weft top --cnode through c1: db1 forwarded to s1, db2 served by c1's shard 2 engine");

    // c1's /metrics: db2's series of its extra shard, db1's forwarded I/O.
    let m = scrape(&c1_metrics);
    let key = |v: &str, shard: u16, route: &str| {
        format!("weft_volume_io_requests_total{{volume=\"{v}\",protocol=\"nbd\",op=\"write\",shard=\"{shard}\",route=\"{route}\"}}")
    };
    assert!(
        m.get(&key("db2", 2, "local")).is_some_and(|n| *n > 0.0),
        "{:?}",
        m.keys().filter(|k| k.contains("db")).collect::<Vec<_>>()
    );
    assert!(
        m.get(&key("db1", 1, "forwarded")).is_some_and(|n| *n > 0.0),
        "{:?}",
        m.keys().filter(|k| k.contains("db")).collect::<Vec<_>>()
    );
    assert_eq!(
        m.get("weft_volume_size_bytes{volume=\"db2\",shard=\"2\"}"),
        Some(&16777216.0)
    );
    assert_eq!(
        m.get("weft_volume_size_bytes{volume=\"vol0\",shard=\"0\"}"),
        Some(&16777216.0)
    );
    assert!(
        !m.contains_key("weft_volume_size_bytes{volume=\"db1\",shard=\"1\"}"),
        "db1's engine is s1's"
    );
    let s1_m = scrape(&s1_metrics);
    assert_eq!(
        s1_m.get("weft_volume_size_bytes{volume=\"db1\",shard=\"1\"}"),
        Some(&16777216.0)
    );
    c.step(&format!(
        "c1's /metrics: db2 {} writes (shard 2, local), db1 {} writes (shard 1, forwarded); s1's has db1's size",
        m[&key("db2", 2, "local")],
        m[&key("db1", 1, "forwarded")]
    ));

    stop.store(true, Ordering::Relaxed);
    for w in writers {
        assert!(w.join().expect("a writer") > 0);
    }

    // s1 gone: while its registration lasts, the view names it as not answering.
    let mut s1 = s1;
    s1.kill9();
    let stats = poll_until(Duration::from_secs(30), "s1 named as not answering", || {
        let stats = c.cli_json(&["top", "--json"]);
        stats["cnodes"]
            .as_array()?
            .iter()
            .any(|a| a["id"] == s1_id.as_str() && a["answered"] == false)
            .then_some(stats)
    });
    let db1 = row(&stats, "db1").unwrap_or_else(|| panic!("db1 still listed: {stats}"));
    assert!(
        db1["owner_unreachable"] == true || db1["owner"].is_null(),
        "db1's rates are unknown, not zero: {db1}"
    );
    c.step("s1 killed: weft top through c1 names it as not answering, db1's owner unreachable");
}
