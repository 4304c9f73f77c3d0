//! A shard owned besides a c.node's own is mirrored to another c.node, which takes it over
//! when its owner dies: c1 owns shard 0 and, restarted with `--shard 0,2` once s1 (shard 1)
//! runs, shard 2, whose write buffer it mirrors to s1's shard-mirror service. Writes to a
//! shard-2 volume are acknowledged (some flushed, the last not), c1 is killed with -9 and
//! its data dir deleted: s1 takes shard 2 over on its mirror after the lease time-out and
//! every acknowledged write reads back through it. Real etcd, d.nodes and c.nodes on
//! loopback.

mod cluster_support;
mod common;

use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;

const KIB: u64 = 1 << 10;

#[test]
fn an_extra_shards_partner_takes_it_over_when_its_owner_dies() {
    let _serial = serial();
    let (_, seed) = test_rng("shard-rescue");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0".into()]);
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shard-rescue", seed, opts);
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    // c1 takes shard 2 besides its own now that another c.node can keep its mirror.
    c.opts
        .cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0,2".into()]);
    c.cnode().terminate(Duration::from_secs(60));
    c.start_cnode("c1");
    let c1_id = c.this_cnode_id();
    assert_eq!(c.extra_shards_of(&c1_id), [2], "c1 owns shard 2 besides 0");
    c.cli_ok(&["volume", "create", "db2", "--size", "16M", "--shard", "2"]);
    let served = poll_until(
        Duration::from_secs(30),
        "shard 2's write buffer to be mirrored",
        || {
            let info = c.cli_json(&["volume", "info", "db2", "--json"]);
            (info["served_by"]["write_buffer"] == "mirrored").then_some(info)
        },
    );
    assert_eq!(served["served_by"]["owner"], c1_id.as_str(), "{served}");
    assert!(
        served["served_by"]["partner"].is_string(),
        "shard 2 names its partner: {served}"
    );
    c.step("c1 owns shard 2 besides its own; its write buffer is mirrored to s1");

    // 64 KiB writes (journaled): the first 2 MiB flushed, the last 256 KiB only
    // acknowledged. Then c1 dies with its data dir.
    let data = blocks_data(seed, 2, 0, (2048 + 256) * KIB / 4096);
    let mut client = c.nbd_client("db2");
    for (i, chunk) in data.chunks(64 * KIB as usize).enumerate() {
        client.write(i as u64 * 64 * KIB, chunk).unwrap();
        if (i as u64 + 1) * 64 * KIB == 2048 * KIB {
            client.flush().unwrap();
        }
    }
    let killed = Instant::now();
    c.cnode().kill9();
    drop(client);
    let c1_dir = c.cnode().data_dir.clone();
    std::fs::remove_dir_all(&c1_dir).unwrap();
    c.step("c1 killed with -9 and its data dir deleted, 256 KiB acknowledged but not flushed");

    let mut c1 = c.make_current(s1).expect("c1");
    let s1_id = c.this_cnode_id();
    poll_until(Duration::from_secs(30), "s1 to take shard 2 over", || {
        (c.extra_shards_of(&s1_id) == [2]).then_some(())
    });
    let s1_nbd = c.cnode().nbd;
    let mut client = poll_until(Duration::from_secs(30), "db2 through s1", || {
        NbdClient::connect(s1_nbd, "db2").ok()
    });
    let got = read_all(&mut client, 0, data.len() as u64)
        .unwrap_or_else(|(at, e)| panic!("reading db2 at {at} through s1: {e:?}"));
    c.step(&format!(
        "s1 took shard 2 over on its mirror and serves db2 {:.1} s after the kill (lease 2 s)",
        killed.elapsed().as_secs_f64()
    ));
    assert!(
        got == data,
        "db2 does not read back every acknowledged write"
    );
    assert!(
        c.cnode()
            .output()
            .contains("recovering on its write-buffer mirror"),
        "s1 recovered shard 2 on its mirror: {}",
        tail(&c.cnode().output(), 4000)
    );
    // And it is writable there.
    let more = blocks_data(seed, 3, 0, 16);
    write_all(&mut client, 0, &more);
    client.flush().unwrap();
    let got = read_all(&mut client, 0, more.len() as u64).expect("read back");
    assert!(got == more, "a write through s1 reads back");
    client.disconnect();
    c.step("every acknowledged write of shard 2 read back through s1, which writes on");
    c1.kill9();
}
