//! Several owners at once: c.nodes of two shards (`weft cnode --shard`) each own their own
//! volumes on one etcd and one set of d.nodes. Names are unique across the shards; each c.node
//! lists and serves its shard's volumes; `weft cnode list` shows both owners; and after a
//! kill -9 of both, each shard recovers every byte it acknowledged: the first to recover sees
//! the other shard's stripes on the d.nodes and leaves them alone. Real etcd, d.nodes and
//! c.nodes on loopback.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::*;
use common::*;

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
    let listed = c.cli_json(&["volume", "ls", "--json"]);
    let names: Vec<&str> = listed
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["name"].as_str())
        .collect();
    assert_eq!(names, ["db1"], "shard 1 lists its own volumes");

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
