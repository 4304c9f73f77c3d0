//! One host catalog for a cluster of several shards: a host is defined once (in shard 0's
//! catalog, whichever c.node is asked), its volumes may live in any shard, and its initiator
//! sees every one of its LUNs through every c.node's portal, under LUN numbers unique across
//! the shards. Real etcd, d.nodes and c.nodes on loopback, checked with libiscsi's `iscsi-ls`.

mod cluster_support;
mod common;
mod iscsi_support;

use std::time::Duration;

use cluster_support::*;
use common::*;

const PG: &str = "iqn.2026-11.test:pg";

#[test]
fn a_host_sees_its_luns_of_every_shard_through_every_cnode() {
    let _serial = serial();
    require_tool("iscsi-ls");
    let (_, seed) = test_rng("shard-hosts");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shard-hosts", seed, opts);
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    let c1_portal = iscsi_portal(c.cnode());
    let s1_portal = iscsi_portal(&s1);
    // From here the CLI talks to s1, shard 1's owner.
    let c1 = c.make_current(s1).expect("c1");
    c.cli_ok(&["volume", "create", "db1", "--size", "16M"]);
    c.cli_ok(&["volume", "create", "db2", "--size", "16M"]);
    c.step("c1 owns shard 0 (vol0), s1 owns shard 1 (db1, db2)");

    // Defined through shard 1's c.node: kept in shard 0's catalog, the host catalog.
    c.cli_ok(&["host", "create", "pg", "--iqn", PG]);
    let vol0 = c.cli_json(&["volume", "map", "vol0", "--host", "pg", "--json"]);
    assert_eq!(vol0["lun"], 0, "{vol0}");
    // Shard 1 maps its own volume to shard 0's host, under the next LUN of the cluster.
    let db1 = c.cli_json(&["volume", "map", "db1", "--host", "pg", "--json"]);
    assert_eq!(db1["lun"], 1, "{db1}");
    let taken = c.cli(&["volume", "map", "db2", "--host", "pg", "--lun", "0"]);
    assert!(!taken.success(), "LUN 0 mapped twice: {}", taken.stdout);
    assert!(taken.stderr.contains("shard 0"), "{}", taken.stderr);
    c.step("host pg defined once; vol0 (shard 0) is its LUN 0, db1 (shard 1) its LUN 1; LUN 0 refused to db2");

    let want = vec![(0, "vol0".to_string(), 0), (1, "db1".to_string(), 1)];
    assert_eq!(
        luns_of(&c.cli_json(&["host", "info", "pg", "--json"])),
        want
    );
    let listed = c.cli_json(&["host", "ls", "--json"]);
    assert_eq!(
        listed.as_array().map(Vec::len),
        Some(1),
        "one host: {listed}"
    );
    let target = listed[0]["iscsi_target"]
        .as_str()
        .expect("iscsi_target")
        .to_string();
    for portal in [c1_portal, s1_portal] {
        let seen = poll_until(
            Duration::from_secs(15),
            "the initiator sees both shards' LUNs",
            || {
                let luns = iscsi_support::array_luns::array_luns(portal, &target, PG, "").ok()?;
                (luns == [0, 1]).then_some(luns)
            },
        );
        c.step(&format!("iscsi-ls as {PG} through {portal}: LUNs {seen:?}"));
    }

    // The same catalog through shard 0's c.node.
    let s1 = c.make_current(c1).expect("s1");
    assert_eq!(
        luns_of(&c.cli_json(&["host", "info", "pg", "--json"])),
        want
    );
    let busy = c.cli(&["host", "delete", "pg"]);
    assert!(!busy.success(), "a host with LUNs deleted: {}", busy.stdout);
    assert!(
        busy.all().contains("db1"),
        "the refusal names shard 1's LUN: {}",
        busy.all()
    );
    // Unmapped through the other shard's c.node: passed on to the export's shard.
    c.cli_ok(&["volume", "unmap", "db1", "--host", "pg"]);
    c.cli_ok(&["volume", "unmap", "vol0", "--host", "pg"]);
    c.cli_ok(&["host", "delete", "pg"]);
    let left = c.cli_json(&["host", "ls", "--json"]);
    assert_eq!(
        left,
        serde_json::json!([]),
        "shard 1's holder went with its last LUN"
    );
    c.step("delete refused while shard 1 maps a LUN; unmapped through shard 0's c.node; deleted");
    let mut s1 = s1;
    s1.kill9();
}

/// `(lun, export, shard)` of a host's JSON.
fn luns_of(host: &serde_json::Value) -> Vec<(u64, String, u64)> {
    host["luns"]
        .as_array()
        .unwrap_or_else(|| panic!("a host's LUNs: {host}"))
        .iter()
        .map(|l| {
            (
                l["lun"].as_u64().unwrap(),
                l["export"].as_str().unwrap().to_string(),
                l["shard"].as_u64().unwrap(),
            )
        })
        .collect()
}
