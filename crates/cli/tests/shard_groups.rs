//! Consistency groups of another shard through any c.node: with c.nodes of two shards on one
//! etcd, a group of shard 1's volumes is created, shown, given QoS, snapshotted, listed and
//! deleted through shard 0's c.node (the API passes each request to the owner whose catalog
//! has the group, a create to its first member's shard), and shard 1's c.node sees the same.
//! Real etcd, d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::*;
use common::*;
use serde_json::json;

#[test]
fn a_group_of_another_shard_is_managed_through_any_cnode() {
    let _serial = serial();
    let (_, seed) = test_rng("shard-groups");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shard-groups", seed, opts);
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    // Shard 1's volumes, made through its own c.node.
    let c1 = c.make_current(s1).expect("c1");
    c.cli_ok(&["volume", "create", "db1", "--size", "16M"]);
    c.cli_ok(&["volume", "create", "db2", "--size", "16M"]);
    // From here through shard 0's c.node.
    let s1 = c.make_current(c1).expect("s1");
    c.step("s1 owns shard 1 (db1, db2); the CLI talks to c1 (shard 0)");

    c.cli_ok(&["group", "create", "pg", "--volumes", "db1,db2"]);
    let info = c.cli_json(&["--json", "group", "info", "pg"]);
    let members: Vec<&str> = info["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["volume"].as_str().unwrap())
        .collect();
    assert_eq!(members, ["db1", "db2"], "{info}");
    let qos = c.cli_json(&["--json", "group", "qos", "pg", "--iops-max", "500"]);
    assert_eq!(qos["settings"], json!({"iops_max": 500}), "{qos}");
    c.cli_ok(&["group", "snapshot", "pg@mon"]);
    let listed = c.cli_json(&["--json", "group", "ls"]);
    let pg = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|g| g["name"] == "pg")
        .unwrap_or_else(|| panic!("pg not in the gathered list: {listed}"));
    assert_eq!(pg["shard"], 1, "{pg}");
    assert_eq!(pg["snapshots"][0]["name"], "pg@mon", "{pg}");
    let missing = c.cli(&["group", "info", "nope"]);
    assert!(!missing.success(), "{}", missing.all());
    c.step("created, shown, QoS set, snapshotted and listed through shard 0's c.node");

    // Shard 1's c.node has it in its own catalog.
    let c1 = c.make_current(s1).expect("c1");
    let there = c.cli_json(&["--json", "group", "qos", "pg"]);
    assert_eq!(there["settings"], json!({"iops_max": 500}), "{there}");
    let s1 = c.make_current(c1).expect("s1");
    c.cli_ok(&["group", "delete", "pg", "--with-snapshots", "--yes"]);
    let left = c.cli_json(&["--json", "group", "ls"]);
    assert!(
        !left.as_array().unwrap().iter().any(|g| g["name"] == "pg"),
        "{left}"
    );
    c.step("deleted through shard 0's c.node");
    let mut s1 = s1;
    s1.kill9();
}
