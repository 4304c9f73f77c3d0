//! One c.node process owning several shards, and a shard handed to another c.node by a
//! drain: c1 starts with `--shard 0,2` (shard 2 in an engine of its own, besides shard 0) and
//! s1 owns shard 1. Shard 2's volume is created, written and read through both c.nodes.
//! `weft cnode drain` of s1, which has no standby, hands shard 1 to c1, which adopts it while
//! running: shard 1's data reads back through c1, and writes go on. c1 restarted takes back
//! every shard it owned; after a kill -9 of c1 with acknowledged writes of an adopted shard
//! only in its journal, the restart recovers them. And the spread policy: a c.node that
//! joins takes a shard from one that owns two more, under a client writing through the giving
//! c.node, which sees no error. Real etcd, d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;

use std::time::Duration;

use cluster_support::*;
use common::*;

const MIB: u64 = 1 << 20;

fn read_back(c: &Cluster, export: &str, want: &[u8], what: &str) {
    let mut client = c.nbd_client(export);
    let got = read_all(&mut client, 0, want.len() as u64)
        .unwrap_or_else(|(at, e)| panic!("{what}: reading {export} at {at}: {e:?}"));
    assert!(
        got == want,
        "{what}: {export} does not read back as written"
    );
    client.disconnect();
}

#[test]
fn a_cnode_owns_several_shards_and_adopts_a_drained_ones() {
    let _serial = serial();
    let (_, seed) = test_rng("shard-move");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0,2".into()]);
    opts.cnode_args
        .insert("s1".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shard-move", seed, opts);
    let c1_id = c.this_cnode_id();
    assert_eq!(c.extra_shards_of(&c1_id), [2], "c1 owns shard 2 besides 0");
    let mut s1 = c.spawn_other_cnode("s1");
    s1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("shard 1's c.node: {e:?}"));
    c.step("c1 owns shards 0 and 2 (two engines), s1 owns shard 1");

    // Shard 2 through c1's API: created by shard 2's engine, listed with its shard.
    c.cli_ok(&["volume", "create", "db2", "--size", "16M", "--shard", "2"]);
    let info = c.cli_json(&["volume", "info", "db2", "--json"]);
    assert_eq!(info["name"], "db2", "{info}");
    let listed = c.cli_json(&["volume", "ls", "--json"]);
    let db2 = listed
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"] == "db2")
        .unwrap_or_else(|| panic!("db2 not listed: {listed}"));
    assert_eq!(db2["shard"], 2, "{listed}");
    // Written through c1 (its own engine of shard 2) and s1 (forwarded to it).
    let first = blocks_data(seed, 2, 0, MIB / 4096);
    let mut client = c.nbd_client("db2");
    write_all(&mut client, 0, &first);
    client.flush().unwrap();
    client.disconnect();
    let c1 = c.make_current(s1).expect("c1");
    let second = blocks_data(seed, 3, MIB / 4096, MIB / 4096);
    // Another c.node lists a new volume of another shard at its next reading of that
    // shard's catalog (every 0.5 s).
    let s1_nbd = c.cnode().nbd;
    let mut client = poll_until(Duration::from_secs(10), "s1 to list db2", || {
        NbdClient::connect(s1_nbd, "db2").ok()
    });
    write_all(&mut client, MIB, &second);
    client.flush().unwrap();
    client.disconnect();
    let db2_data = [first, second].concat();
    read_back(&c, "db2", &db2_data, "db2 through s1 (forwarded)");
    c.step("db2 (shard 2) written through c1 and through s1 (forwarded to c1's shard 2 engine)");

    // Shard 1's volume, through its owner s1.
    c.cli_ok(&["volume", "create", "db1", "--size", "16M"]);
    let db1_data = blocks_data(seed, 1, 0, 2 * MIB / 4096);
    let mut client = c.nbd_client("db1");
    // Journaled (small) writes: at the drain they are in s1's journal only.
    for (i, chunk) in db1_data.chunks(64 << 10).enumerate() {
        client.write(i as u64 * (64 << 10), chunk).unwrap();
    }
    client.flush().unwrap();
    client.disconnect();
    let s1_id = c.this_cnode_id();

    // s1 has no standby: its drain hands shard 1 to c1, the only other owner.
    let drained = c.cli_json(&["cnode", "drain", &s1_id, "--yes", "--json"]);
    assert_eq!(drained["draining"], true, "{drained}");
    assert_eq!(
        drained["handovers"],
        serde_json::json!([{ "shard": 1, "to": c1_id }]),
        "{drained}"
    );
    let mut s1 = c.make_current(c1).expect("s1");
    poll_until(Duration::from_secs(30), "the drained s1 to exit", || {
        (!s1.is_running()).then_some(())
    });
    let adopted = poll_until(Duration::from_secs(30), "c1 to adopt shard 1", || {
        let shards = c.extra_shards_of(&c1_id);
        (shards == [1, 2]).then_some(shards)
    });
    c.step(&format!(
        "s1 drained; c1 adopted shard 1 while running and owns shards 0 and {adopted:?}"
    ));
    read_back(&c, "db1", &db1_data, "db1 through c1 after the handover");
    read_back(&c, "db2", &db2_data, "db2 through c1");
    let more = blocks_data(seed, 4, 0, 256 << 10 >> 12);
    let mut client = c.nbd_client("db1");
    client.write(0, &more[..64 << 10]).unwrap();
    client.write(64 << 10, &more[64 << 10..]).unwrap();
    client.flush().unwrap();
    client.disconnect();
    let mut db1_now = db1_data.clone();
    db1_now[..more.len()].copy_from_slice(&more);
    read_back(&c, "db1", &db1_now, "db1 written through c1");
    c.step("shard 1's data read back through c1, and written there");

    // A clean restart of c1: it takes back shard 2 (--shard) and shard 1 (its journal).
    c.cnode().terminate(Duration::from_secs(60));
    c.start_cnode("c1");
    assert_eq!(c.extra_shards_of(&c1_id), [1, 2], "c1 took its shards back");
    read_back(&c, "db1", &db1_now, "db1 after c1's restart");

    // Acknowledged writes of the adopted shard only in c1's journal, then kill -9.
    let last = blocks_data(seed, 5, 0, 64 << 10 >> 12);
    let mut client = c.nbd_client("db1");
    client.write(MIB, &last).unwrap();
    client.flush().unwrap();
    client.disconnect();
    db1_now[MIB as usize..MIB as usize + last.len()].copy_from_slice(&last);
    c.cnode().kill9();
    c.start_cnode("c1");
    assert_eq!(c.extra_shards_of(&c1_id), [1, 2]);
    read_back(&c, "db1", &db1_now, "db1 after a kill -9 of c1");
    read_back(&c, "db2", &db2_data, "db2 after a kill -9 of c1");
    c.step("kill -9 of c1: shard 1's journaled writes recovered from c1's journal of it");
    s1.kill9();
}

/// A c.node that joins takes shards from one that owns two or more shards more than it,
/// while a client writes to a volume of the shard that moves: the client, connected to the
/// giving c.node, sees a pause and no error, and every write it had acknowledged reads back
/// through both c.nodes.
#[test]
fn a_joining_cnode_takes_a_shard_under_load_without_an_error() {
    let _serial = serial();
    let (_, seed) = test_rng("shard-spread");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0,1,2".into()]);
    opts.cnode_args
        .insert("c2".into(), vec!["--shard".into(), "3".into()]);
    let mut c = Cluster::start("shard-spread", seed, opts);
    let c1_id = c.this_cnode_id();
    assert_eq!(c.extra_shards_of(&c1_id), [1, 2]);
    c.cli_ok(&["volume", "create", "db2", "--size", "16M", "--shard", "2"]);

    // 4 KiB writes, each a block of its own, flushed every 32: acknowledged = returned Ok.
    const BLOCKS: u64 = 3000;
    let nbd = c.cnode().nbd;
    let writer = std::thread::spawn(move || {
        let mut client = NbdClient::connect(nbd, "db2").expect("connect to c1");
        let mut errors = Vec::new();
        let started = std::time::Instant::now();
        let mut slowest = Duration::ZERO;
        for k in 0..BLOCKS {
            let t = std::time::Instant::now();
            if let Err(e) = client.write(k * 4096, &blocks_data(seed, 9, k, 1)) {
                errors.push(format!("write of block {k}: {e:?}"));
                break;
            }
            if k % 32 == 31 {
                if let Err(e) = client.flush() {
                    errors.push(format!("flush after block {k}: {e:?}"));
                    break;
                }
            }
            slowest = slowest.max(t.elapsed());
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = client.flush();
        client.disconnect();
        (errors, started.elapsed(), slowest)
    });
    std::thread::sleep(Duration::from_millis(500));
    let mut c2 = c.spawn_other_cnode("c2");
    c2.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("c2: {e:?}"));
    c.step("c2 joined (shard 3) while a client writes db2 (shard 2) through c1");
    let c2_id = c.cnode_id_of_shard(3);
    let moved = poll_until(
        Duration::from_secs(30),
        "c2 to take a shard from c1",
        || {
            let (mine, theirs) = (c.extra_shards_of(&c1_id), c.extra_shards_of(&c2_id));
            (mine == [1] && theirs == [2]).then_some(theirs)
        },
    );
    c.step(&format!(
        "c1 handed shard {moved:?} to c2 while running; c1 keeps 0 and 1"
    ));
    let (errors, took, slowest) = writer.join().expect("the writer");
    assert!(errors.is_empty(), "the client saw errors: {errors:?}");
    c.step(&format!(
        "{BLOCKS} writes through c1 in {:.1} s, none failed (slowest {} ms: the handover's pause)",
        took.as_secs_f64(),
        slowest.as_millis()
    ));
    let want: Vec<u8> = (0..BLOCKS)
        .flat_map(|k| blocks_data(seed, 9, k, 1))
        .collect();
    read_back(&c, "db2", &want, "db2 through c1 (forwarded to c2)");
    let c1 = c.make_current(c2).expect("c1");
    read_back(&c, "db2", &want, "db2 through c2, its owner now");
    c.step("every acknowledged write reads back through both c.nodes");
    let mut c1 = c1;
    c1.kill9();
}

/// The operator moves a shard (`weft cnode move-shard`) and it stays where it was put: c1
/// owning shards 0, 2 and 3 gives shard 3 to c2 when c2 joins (the spread policy); the
/// operator moves it back to c1, and the spread policy then gives c2 shard 2 instead of the
/// pinned shard 3. Refused: moving a c.node's own shard, or to a c.node nobody knows.
#[test]
fn an_operator_moves_a_shard_and_the_spread_policy_leaves_it_there() {
    let _serial = serial();
    let (_, seed) = test_rng("shard-pin");
    let mut opts = ClusterOpts::new(3).volume_size("16M");
    opts.redundancy = "2+1".into();
    opts.cnode_args
        .insert("c1".into(), vec!["--shard".into(), "0,2,3".into()]);
    opts.cnode_args
        .insert("c2".into(), vec!["--shard".into(), "1".into()]);
    let mut c = Cluster::start("shard-pin", seed, opts);
    let c1_id = c.this_cnode_id();
    c.cli_ok(&["volume", "create", "db3", "--size", "16M", "--shard", "3"]);
    let data = blocks_data(seed, 3, 0, 256);
    let mut client = c.nbd_client("db3");
    write_all(&mut client, 0, &data);
    client.flush().unwrap();
    client.disconnect();
    let mut c2 = c.spawn_other_cnode("c2");
    c2.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|e| panic!("c2: {e:?}"));
    let c2_id = c.cnode_id_of_shard(1);
    poll_until(
        Duration::from_secs(30),
        "the spread to give c2 shard 3",
        || (c.extra_shards_of(&c2_id) == [3]).then_some(()),
    );
    c.step("c2 joined; the spread policy gave it shard 3");

    let moved = c.cli_ok(&["cnode", "move-shard", "3", "--to", &c1_id, "--wait", "30s"]);
    assert!(moved.contains("owned by c.node"), "{moved}");
    assert!(
        c.extra_shards_of(&c1_id).contains(&3),
        "c1 owns shard 3 again"
    );
    // c1 owns 0, 2 and 3 again: the spread gives c2 shard 2, never the pinned 3.
    poll_until(
        Duration::from_secs(30),
        "the spread to give c2 shard 2",
        || (c.extra_shards_of(&c2_id) == [2]).then_some(()),
    );
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(c.extra_shards_of(&c1_id), [3], "shard 3 stays pinned on c1");
    assert_eq!(c.extra_shards_of(&c2_id), [2]);
    read_back(&c, "db3", &data, "db3 after two moves");
    c.step("moved back to c1 by the operator; the spread moved shard 2 instead and left 3");

    let own = c.cli(&["cnode", "move-shard", "0", "--to", &c2_id]);
    assert_ne!(own.status.and_then(|s| s.code()), Some(0), "{own:?}");
    assert!(own.stderr.contains("own shard"), "{}", own.stderr);
    let nobody = c.cli(&["cnode", "move-shard", "3", "--to", "nosuch"]);
    assert!(
        nobody.stderr.contains("no c.node nosuch"),
        "{}",
        nobody.stderr
    );
    c.cli_ok(&["cnode", "move-shard", "3", "--unpin"]);
    let again = c.cli(&["cnode", "move-shard", "3", "--unpin"]);
    assert!(again.stderr.contains("not pinned"), "{}", again.stderr);
    c.step("refused: a c.node's own shard, an unknown c.node; unpinned once");
    c2.kill9();
}
