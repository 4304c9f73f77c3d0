//! Heat across a c.node failover: the owner keeps the heat of its shard in etcd as well as in
//! its data dir (`weft/heat/<shard>`, every `--heat-persist-interval`), so the standby that
//! takes over after the owner's machine is lost (kill -9, data dir deleted) advises from the
//! old owner's counts instead of starting cold. Real etcd, six d.nodes and two c.nodes on
//! loopback.

mod cluster_support;
mod common;
mod failover_support;

use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use failover_support::*;
use serde_json::Value;
use weft_server::tiering::heat_etcd;

const EXTENT: u64 = 16 * MIB;
const HOT: u64 = 5;
/// 4 KiB reads of the hot extent, and writes of extent 0.
const HOT_READS: u64 = 3000;
const WRITES: u64 = 64;

fn extent(advice: &Value, index: u64) -> Value {
    advice["volumes"][0]["extents"][index as usize].clone()
}

#[test]
fn the_standby_that_takes_over_advises_from_the_old_owners_heat() {
    let _serial = serial();
    let started = Instant::now();
    let test = "the_standby_that_takes_over_advises_from_the_old_owners_heat";
    let (mut rng, seed) = test_rng(test);
    let mirror = [free_port(&mut rng), free_port(&mut rng)].map(|p| format!("127.0.0.1:{p}"));
    let mut opts = ClusterOpts::new(6).volume_size("256M");
    for (name, partner, listen) in [("c1", 1, 0), ("c2", 0, 1)] {
        let args = [
            "--partner",
            &mirror[partner],
            "--mirror-listen",
            &mirror[listen],
            "--lease-ttl",
            "3s",
            "--heat-extent-size",
            "16M",
            "--heat-persist-interval",
            "1s",
        ];
        opts.cnode_args
            .insert(name.into(), args.iter().map(|s| s.to_string()).collect());
    }
    let mut c = Cluster::start(test, seed, opts);
    let mut standby = c.spawn_other_cnode("c2");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &standby);

    // Heat on c1: extent 0 written, extent HOT read over and over.
    let mut nbd = c.nbd_client("vol0");
    for i in 0..WRITES {
        nbd.write(i * 4096, &block_data(seed, 1, i)).expect("write");
    }
    nbd.flush().expect("flush");
    for i in 0..HOT_READS {
        let at = HOT * EXTENT + (i * 4096) % EXTENT;
        nbd.read(at, 4096).expect("read");
    }
    nbd.disconnect();
    let on_c1 = poll_until(Duration::from_secs(30), "c1 to count the reads", || {
        let v = c.cli_json(&["tier", "advise", "vol0", "--window", "hour", "--json"]);
        (extent(&v, HOT)["reads"]["hour"].as_u64() >= Some(HOT_READS)).then_some(v)
    });
    let since = on_c1["volumes"][0]["counted_since_unix_s"].clone();
    c.step("c1 counted the reads");

    // The owner writes them to etcd within the persist interval.
    let kv = weft_meta::connect_etcd(&c.etcd_url()).expect("etcd");
    let saved = poll_until(Duration::from_secs(30), "the heat in etcd", || {
        let v = kv.get(&heat_etcd::key(0)).ok()??;
        let volumes = heat_etcd::decode(&v.value).expect("the value decodes");
        let vol0 = volumes.into_iter().find(|s| s.name == "vol0")?;
        let hot = vol0.folded.rings[HOT as usize].sum(weft_server::tiering::Window::Hour);
        (hot.reads >= HOT_READS).then_some(vol0)
    });
    assert_eq!(saved.extent_bytes, EXTENT);
    c.step("the heat is in etcd");
    assert!(
        !standby.data_dir.join("heat").exists(),
        "the standby has a heat file of its own: the test would prove nothing"
    );

    // The owner's machine goes; the standby takes over.
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    std::fs::remove_dir_all(&owner_dir).expect("deleting c1's data dir");
    c.step("owner c1 killed -9 and its data dir deleted");
    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    c.make_current(standby);
    c.step("c2 took over");

    // c2's advice has c1's counts: the hot extent's reads, extent 0's writes, the same start.
    let on_c2 = c.cli_json(&["tier", "advise", "vol0", "--window", "hour", "--json"]);
    assert_eq!(
        on_c2["volumes"][0]["counted_since_unix_s"], since,
        "{on_c2}"
    );
    let hot = extent(&on_c2, HOT);
    assert!(
        hot["reads"]["hour"].as_u64() >= Some(HOT_READS),
        "c2 lost c1's reads: {hot}"
    );
    let first = extent(&on_c2, 0);
    assert!(
        first["writes"]["hour"].as_u64() >= Some(WRITES),
        "c2 lost c1's writes: {first}"
    );
    let cold = extent(&on_c2, 9);
    assert_eq!(cold["reads"]["hour"], 0, "{cold}");
    // And c2 keeps writing it: its own write lands in etcd (a later revision).
    let before = kv.get(&heat_etcd::key(0)).unwrap().unwrap().mod_revision;
    let mut nbd = c.nbd_client("vol0");
    nbd.read(9 * EXTENT, 4096).expect("read");
    nbd.disconnect();
    poll_until(Duration::from_secs(30), "c2 to write the heat", || {
        let v = kv.get(&heat_etcd::key(0)).ok()??;
        let volumes = heat_etcd::decode(&v.value).ok()?;
        let vol0 = volumes.into_iter().find(|s| s.name == "vol0")?;
        let reads = vol0.folded.rings[9]
            .sum(weft_server::tiering::Window::Hour)
            .reads;
        (v.mod_revision > before && reads >= 1).then_some(())
    });
    c.step(&format!(
        "c2 advises from c1's heat and writes its own; {:.1}s",
        started.elapsed().as_secs_f64()
    ));
}
