//! Compute-layer failover: an owner c.node mirrors its write buffer to a standby partner; the
//! owner's machine disappears (kill -9 and its data dir deleted) in the middle of writes; the
//! standby takes over when the owner's lease expires and serves every write the owner
//! acknowledged, flushed or not. Real etcd, d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;

/// 64 KiB writes: a record each, most still in the write buffer when the owner dies.
const WRITE_BYTES: u64 = 64 << 10;

#[test]
fn owner_machine_lost_mid_write_standby_serves_every_acknowledged_write() {
    let _serial = serial();
    let test = "owner_machine_lost_mid_write_standby_serves_every_acknowledged_write";
    let (mut rng, seed) = test_rng(test);
    let mirror_c1 = format!("127.0.0.1:{}", free_port(&mut rng));
    let mirror_c2 = format!("127.0.0.1:{}", free_port(&mut rng));
    let mut opts = ClusterOpts::new(6).volume_size("256M");
    let args = |partner: &str, listen: &str| -> Vec<String> {
        [
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
    opts.cnode_args
        .insert("c1".into(), args(&mirror_c2, &mirror_c1));
    opts.cnode_args
        .insert("c2".into(), args(&mirror_c1, &mirror_c2));
    let mut c = Cluster::start(test, seed, opts);
    let mut standby = c.spawn_other_cnode("c2");
    let c1_id = std::fs::read_to_string(c.cnode().data_dir.join("cnode-id")).unwrap();
    let mirror_of_c1 = standby.data_dir.join("mirror").join(c1_id.trim());
    poll_until(
        Duration::from_secs(30),
        "the standby to hold a complete mirror",
        || {
            std::fs::read_dir(&mirror_of_c1)
                .ok()?
                .flatten()
                .any(|g| g.path().join("complete").exists())
                .then_some(())
        },
    );
    c.step("the standby holds the owner's mirror");

    // A writer acknowledges as fast as it can, never flushing; the owner's machine goes
    // in the middle of it.
    let acked: Arc<Mutex<Vec<u64>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (acked, stop) = (Arc::clone(&acked), Arc::clone(&stop));
        let mut nbd = c.nbd_client("vol0");
        std::thread::spawn(move || {
            let slots = 256 * MIB / WRITE_BYTES;
            for i in 0.. {
                if stop.load(Ordering::Acquire) {
                    break;
                }
                let slot = (i * 7919) % slots;
                let data = blocks_data(seed, i, slot * WRITE_BYTES / 4096, WRITE_BYTES / 4096);
                if nbd.write(slot * WRITE_BYTES, &data).is_err() {
                    break;
                }
                acked.lock().unwrap().push(i);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(2500));
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    let killed = Instant::now();
    std::fs::remove_dir_all(&owner_dir).expect("deleting the owner's data dir");
    c.step("owner killed -9 and its data dir deleted");
    stop.store(true, Ordering::Release);
    writer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    assert!(
        acked.len() > 50,
        "only {} writes acknowledged before the kill",
        acked.len()
    );

    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    let failover = killed.elapsed();
    c.step(&format!(
        "the standby serves: failover took {:.1} s after the kill (lease TTL 3 s)",
        failover.as_secs_f64()
    ));
    // The acknowledged writes came from the mirror: most were not in stripes yet.
    let log = standby.output();
    let replayed: u64 = log
        .split("journal_records_replayed=")
        .nth(1)
        .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no recovery line in the standby's log:\n{}",
                tail(&log, 4000)
            )
        });
    c.step(&format!(
        "the standby replayed {replayed} records of the owner's mirror"
    ));
    assert!(
        replayed > 0,
        "nothing came from the mirror: the test proves nothing"
    );
    c.make_current(standby);

    // The last acknowledged write of every slot reads back exactly.
    let slots = 256 * MIB / WRITE_BYTES;
    let mut last: std::collections::BTreeMap<u64, u64> = Default::default();
    for &i in &acked {
        last.insert((i * 7919) % slots, i);
    }
    let mut nbd = c.nbd_client("vol0");
    for (&slot, &i) in &last {
        let want = blocks_data(seed, i, slot * WRITE_BYTES / 4096, WRITE_BYTES / 4096);
        let got = nbd.read(slot * WRITE_BYTES, WRITE_BYTES as u32).unwrap();
        assert!(
            got == want,
            "slot {slot}: write #{i} was acknowledged by the owner but the standby serves other bytes"
        );
    }
    c.step(&format!(
        "{} acknowledged writes ({} slots) verified through the new owner",
        acked.len(),
        last.len()
    ));
    nbd.disconnect();
    // The old owner's lease is gone; the new owner holds it.
    let owner = c.cli_json(&["cluster", "status", "--json"]);
    assert_eq!(owner["mode"].as_str(), Some("cluster"), "{owner}");
}
