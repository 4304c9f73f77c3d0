//! Several owners at once: c.nodes of two shards (`weft cnode --shard`) each own their own
//! volumes on one etcd and one set of d.nodes. Names are unique across the shards; each c.node
//! lists its shard's volumes and serves every shard's over NBD and iSCSI (forwarding the other
//! shard's to its owner, which ALUA reports as the active/optimized path); `weft cnode list`
//! shows both owners; and after a kill -9 of both, each shard recovers every byte it
//! acknowledged, forwarded writes included: the first to recover sees the other shard's
//! stripes on the d.nodes and leaves them alone. Real etcd, d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;
mod failover_support;
mod iscsi_support;

use std::time::Duration;

use cluster_support::*;
use common::*;
use failover_support::wait_for_mirror;
use iscsi_support::{report_target_port_groups, Session, TARGET_PREFIX};

const MIB: u64 = 1 << 20;
/// Data written to each shard's volume (write-through and journaled writes both).
const WRITTEN: u64 = 8 * MIB;

#[test]
fn two_shards_own_their_volumes_at_once_on_the_same_dnodes() {
    let _serial = serial();
    let (_, seed) = test_rng("shards");
    let mut opts = ClusterOpts::new(3).volume_size("64M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shards", seed, opts);
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    c.step("c1 owns shard 0 (vol0), s1 owns shard 1");

    // Shard 0 through c1: vol0 (the default volume).
    let vol0 = blocks_data(seed, 0, 0, WRITTEN / 4096);
    write_all(&mut c.nbd_client("vol0"), 0, &vol0);
    // Shard 1 through s1: its own volume; vol0's name is shard 0's.
    let c1 = c.make_current(s1).expect("c1");
    c.cli_ok(&["volume", "create", "db1", "--size", "64M"]);
    let taken = c.cli(&["volume", "create", "vol0", "--size", "64M"]);
    assert!(
        !taken.success(),
        "shard 1 created a second vol0: {}",
        taken.stdout
    );
    assert!(
        taken.stderr.contains("shard 0"),
        "the refusal names the shard: {}",
        taken.stderr
    );
    let db1 = blocks_data(seed, 1, 0, WRITTEN / 4096);
    let mut client = c.nbd_client("db1");
    // Small writes (journaled) and large ones (written through) both.
    client.write(0, &db1[..64 << 10]).unwrap();
    write_all(&mut client, 64 << 10, &db1[64 << 10..]);
    client.flush().unwrap();
    client.disconnect();
    // Into stripes, the journal released: from now on only the d.nodes hold db1's data.
    c.sync();
    // Every shard's volumes are listed through any c.node, each with its shard.
    let listed = c.cli_json(&["volume", "ls", "--json"]);
    let mut names: Vec<(String, u64)> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| Some((v["name"].as_str()?.to_string(), v["shard"].as_u64()?)))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("db1".to_string(), 1), ("vol0".to_string(), 0)],
        "{listed}"
    );
    let text = c.cli_ok(&["volume", "ls"]);
    assert!(text.contains("SHARD"), "{text}");
    // Managed through a c.node of another shard: passed on to the owner of vol0's shard.
    c.cli_ok(&["snapshot", "create", "vol0@through-s1"]);
    let info = c.cli_json(&["volume", "info", "vol0", "--json"]);
    assert_eq!(info["name"], "vol0", "{info}");
    let snapshots = c.cli_json(&["snapshot", "ls", "--json"]);
    assert!(
        snapshots
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["name"] == "vol0@through-s1" && s["shard"] == 0),
        "{snapshots}"
    );
    c.cli_ok(&["snapshot", "delete", "vol0@through-s1", "--yes"]);
    // Created in shard 0 through shard 1's c.node, and gone again.
    c.cli_ok(&[
        "volume",
        "create",
        "made-in-0",
        "--size",
        "8M",
        "--shard",
        "0",
    ]);
    let info = c.cli_json(&["volume", "ls", "--json"]);
    assert!(
        info.as_array()
            .unwrap()
            .iter()
            .any(|v| v["name"] == "made-in-0" && v["shard"] == 0),
        "{info}"
    );
    c.cli_ok(&["volume", "delete", "made-in-0", "--yes"]);
    c.step(
        "volume ls lists both shards; vol0's snapshot made and deleted through shard 1's c.node",
    );

    // Both own their shard at once.
    let cnodes = poll_until(
        Duration::from_secs(20),
        "both shards' owners listed",
        || {
            let v = c.cli_json(&["cnode", "list", "--json"]);
            let rows = v.as_array()?.clone();
            let owners: Vec<u64> = rows
                .iter()
                .filter(|r| r["owner"] == true)
                .filter_map(|r| r["shard"].as_u64())
                .collect();
            (owners == [0, 1]).then_some(rows)
        },
    );
    c.step(&format!(
        "weft cnode list: {} c.nodes, an owner per shard",
        cnodes.len()
    ));
    let text = c.cli_ok(&["cnode", "list"]);
    assert!(text.contains("SHARD"), "{text}");

    // Every c.node serves every shard's volumes. Through s1 (shard 1): vol0 of shard 0.
    let patch0 = blocks_data(seed, 2, 0, MIB / 4096);
    write_all(&mut c.nbd_client("vol0"), 0, &patch0);
    let mut vol0 = vol0;
    vol0[..MIB as usize].copy_from_slice(&patch0);
    let through_s1 = read_all(&mut c.nbd_client("vol0"), 0, WRITTEN).expect("vol0 through s1");
    assert!(
        through_s1 == vol0,
        "shard 0's vol0 read through shard 1's c.node"
    );
    let s1_portal = iscsi_portal(c.cnode());
    // Through c1 (shard 0): db1 of shard 1, every byte, then a forwarded write.
    let s1 = c.make_current(c1).expect("s1");
    // c1 finds shard 1 at its next reading of the registrations (every 2 s).
    poll_until(
        Duration::from_secs(10),
        "NBD lists both shards' exports",
        || (nbd_exports(&c.nbd_uri("")) == ["db1", "vol0"]).then_some(()),
    );
    let through_c1 = read_all(&mut c.nbd_client("db1"), 0, WRITTEN).expect("db1 through c1");
    assert!(
        through_c1 == db1,
        "shard 1's db1 read through shard 0's c.node"
    );
    let patch1 = blocks_data(seed, 3, 0, MIB / 4096);
    let mut client = c.nbd_client("db1");
    client.write(4 * MIB, &patch1).unwrap();
    client.flush().unwrap();
    client.disconnect();
    let mut db1 = db1;
    db1[4 * MIB as usize..5 * MIB as usize].copy_from_slice(&patch1);
    c.step("each shard's volume reads and writes through the other shard's c.node");

    // ALUA: every c.node is a path to every LU, active/optimized on the LU's shard's owner.
    let c1_portal = iscsi_portal(c.cnode());
    let (c1_group, s1_group) = (port_group(c.cnode()), port_group(&s1));
    for (portal, export, optimized, other) in [
        (c1_portal, "db1", s1_group, c1_group),
        (s1_portal, "vol0", c1_group, s1_group),
        (c1_portal, "vol0", c1_group, s1_group),
    ] {
        let groups = poll_until(
            Duration::from_secs(10),
            "the LU's groups follow its shard's owner",
            || {
                let mut s = Session::login(
                    portal,
                    "iqn.2026-11.test:shards",
                    &format!("{TARGET_PREFIX}{export}"),
                );
                let mut groups = report_target_port_groups(&mut s);
                groups.sort();
                let mut want = vec![
                    (optimized, 0u8, vec![optimized * 256 + 1]),
                    (other, 1u8, vec![other * 256 + 1]),
                ];
                want.sort();
                (groups == want).then_some(groups)
            },
        );
        c.step(&format!(
            "REPORT TARGET PORT GROUPS of {export} through {portal}: {groups:?}"
        ));
    }
    let c1 = c.make_current(s1).expect("c1");
    // Into stripes again, the journal released.
    c.sync();

    // kill -9 both; shard 0 recovers first, with shard 1's stripes on every d.node.
    let mut s1 = c.make_current(c1).expect("s1");
    s1.kill9();
    c.cnode().kill9();
    c.step("both c.nodes killed");
    c.start_cnode("c1");
    let back = read_all(&mut c.nbd_client("vol0"), 0, WRITTEN).expect("vol0 reads");
    assert!(back == vol0, "shard 0 lost acknowledged writes");
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node again: {e:?}"));
    let c1 = c.make_current(s1).expect("c1");
    let back = read_all(&mut c.nbd_client("db1"), 0, WRITTEN).expect("db1 reads");
    assert!(
        back == db1,
        "shard 1 lost acknowledged writes (shard 0's recovery must not delete them)"
    );
    c.step("after kill -9 of both: every acknowledged byte of both shards reads back");
    let mut s1 = c.make_current(c1).expect("s1");
    s1.kill9();
}

/// A c.node's ALUA target port group id, from its data dir.
fn port_group(cnode: &Cnode) -> u16 {
    std::fs::read_to_string(cnode.data_dir.join("port-group"))
        .expect("a c.node of a cluster has a port group")
        .trim()
        .parse()
        .unwrap()
}

/// The export names `nbdinfo --list` reads from `uri`, sorted.
fn nbd_exports(uri: &str) -> Vec<String> {
    let out = run(
        std::process::Command::new("nbdinfo").args(["--list", "--json", uri]),
        Duration::from_secs(30),
    );
    assert!(out.success(), "nbdinfo --list {uri}: {}", out.stderr);
    let v: serde_json::Value = serde_json::from_str(&out.stdout).expect("nbdinfo's JSON");
    let mut names: Vec<String> = v["exports"]
        .as_array()
        .expect("exports")
        .iter()
        .filter_map(|e| e["export-name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// A shard's owner lost with its data dir while a host writes to that shard's volume through
/// a c.node of another shard: the writes pause until the shard's standby takes over (the
/// forwarding c.node follows the shard's new owner) and go on; every write acknowledged
/// through the forwarding c.node, flushed or not, reads back through both.
#[test]
fn a_shard_owners_loss_costs_a_client_of_another_shards_cnode_a_pause_not_data() {
    let _serial = serial();
    let (mut rng, seed) = test_rng("shard-failover");
    let (m1, m2) = (
        format!("127.0.0.1:{}", free_port(&mut rng)),
        format!("127.0.0.1:{}", free_port(&mut rng)),
    );
    let mut opts = ClusterOpts::new(3).volume_size("64M");
    opts.redundancy = "2+1".into();
    let shard1 = |partner: &str, listen: &str| -> Vec<String> {
        [
            "--shard",
            "1",
            "--partner",
            partner,
            "--mirror-listen",
            listen,
            "--lease-ttl",
            "3s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    opts.cnode_args.insert("s1".into(), shard1(&m2, &m1));
    opts.cnode_args.insert("s2".into(), shard1(&m1, &m2));
    let mut c = Cluster::start("shard-failover", seed, opts);
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's owner: {e:?}"));
    let c1 = c.make_current(s1).expect("c1");
    c.cli_ok(&["volume", "create", "db1", "--size", "64M"]);
    let s2 = c.spawn_other_cnode("s2");
    let s1 = c.make_current(c1).expect("s1");
    wait_for_mirror(&c, &s1, &s2);
    c.step("c1 owns shard 0; s1 owns shard 1 with s2 as its standby");

    // Through c1 (shard 0), forwarded to s1: the first half, then s1 is lost with its data
    // dir, then the second half (it waits for s2 to take shard 1 over).
    let data = blocks_data(seed, 5, 0, WRITTEN / 4096);
    let half = data.len() / 2;
    let mut client = poll_until(Duration::from_secs(10), "c1 serves db1", || {
        NbdClient::connect(c.cnode.as_ref().unwrap().nbd, "db1").ok()
    });
    client.write(0, &data[..64 << 10]).unwrap();
    client.flush().unwrap();
    write_all(&mut client, 64 << 10, &data[64 << 10..half]);
    let mut s1 = s1;
    s1.kill9();
    std::fs::remove_dir_all(&s1.data_dir).expect("removing s1's data dir");
    c.step("s1 killed -9 and its data dir deleted, with unflushed writes acknowledged");
    let lost_at = std::time::Instant::now();
    client.write(half as u64, &data[half..half + 4096]).unwrap();
    let paused = lost_at.elapsed();
    write_all(&mut client, half as u64 + 4096, &data[half + 4096..]);
    client.flush().unwrap();
    c.step(&format!(
        "the first write after the loss was acknowledged {:.1} s later (lease 3 s)",
        paused.as_secs_f64()
    ));
    let back = read_all(&mut client, 0, WRITTEN).expect("db1 through c1");
    assert!(back == data, "db1 through c1 lost acknowledged writes");
    client.disconnect();
    let mut s2 = s2;
    s2.wait_ready(Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("s2 owning shard 1: {e:?}"));
    let c1 = c.make_current(s2).expect("c1");
    let back = read_all(&mut c.nbd_client("db1"), 0, WRITTEN).expect("db1 through s2");
    assert!(
        back == data,
        "db1 through its new owner lost acknowledged writes"
    );
    c.step("every acknowledged write reads back through c1 and through s2, shard 1's new owner");
    let mut s2 = c.make_current(c1).expect("s2");
    s2.kill9();
}
