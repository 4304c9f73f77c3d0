//! Compute-layer failover: an owner c.node mirrors its write buffer to a standby partner; the
//! owner's machine disappears (kill -9 and its data dir deleted) in the middle of writes; the
//! standby takes over when the owner's lease expires and serves every write the owner
//! acknowledged, flushed or not. Real etcd, d.nodes and c.nodes on loopback.

mod cluster_support;
mod common;
mod failover_support;
#[allow(dead_code)]
#[path = "thrash_support/proxy.rs"]
mod proxy;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use failover_support::*;

/// 64 KiB writes: a record each, most still in the write buffer when the owner dies.
const WRITE_BYTES: u64 = 64 << 10;

const SLOTS: u64 = 256 * MIB / WRITE_BYTES;

fn slot_of(i: u64) -> u64 {
    (i * 7919) % SLOTS
}

/// What a writer had acknowledged, and when the last acknowledgement came.
#[derive(Default)]
struct Acked {
    writes: Vec<u64>,
    last_at: Option<Instant>,
    /// The write that failed (it may or may not have been applied, as after a crash).
    in_flight: Option<u64>,
}

/// Writes 64 KiB records at pseudo-random slots through the current c.node, never flushing,
/// until told to stop; the thread returns the numbers of the writes acknowledged.
fn start_writer(
    c: &Cluster,
    seed: u64,
    first: u64,
) -> (Arc<AtomicBool>, std::thread::JoinHandle<Acked>) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut nbd = c.nbd_client("vol0");
    let flag = Arc::clone(&stop);
    let writer = std::thread::spawn(move || {
        let mut acked = Acked::default();
        for i in first.. {
            if flag.load(Ordering::Acquire) {
                break;
            }
            let slot = slot_of(i);
            let data = blocks_data(seed, i, slot * WRITE_BYTES / 4096, WRITE_BYTES / 4096);
            if nbd.write(slot * WRITE_BYTES, &data).is_err() {
                acked.in_flight = Some(i);
                break;
            }
            acked.writes.push(i);
            acked.last_at = Some(Instant::now());
        }
        acked
    });
    (stop, writer)
}

/// The last acknowledged write of every slot reads back exactly through the current c.node
/// (or a write to that slot that failed, in flight at the fault: a crash may keep it).
fn verify(c: &Cluster, seed: u64, acked: &[u64], in_flight: &[u64]) {
    let mut last: std::collections::BTreeMap<u64, u64> = Default::default();
    for &i in acked {
        last.insert(slot_of(i), i);
    }
    let data =
        |slot: u64, i: u64| blocks_data(seed, i, slot * WRITE_BYTES / 4096, WRITE_BYTES / 4096);
    let mut nbd = c.nbd_client("vol0");
    for (&slot, &i) in &last {
        let got = nbd.read(slot * WRITE_BYTES, WRITE_BYTES as u32).unwrap();
        let later = in_flight
            .iter()
            .any(|&f| f > i && slot_of(f) == slot && got == data(slot, f));
        assert!(
            got == data(slot, i) || later,
            "slot {slot}: write #{i} was acknowledged but other bytes are served"
        );
    }
    nbd.disconnect();
    c.step(&format!(
        "{} acknowledged writes ({} slots) verified",
        acked.len(),
        last.len()
    ));
}

/// The number a c.node logged for `journal_records_replayed=` at recovery.
fn replayed(cnode: &Cnode) -> u64 {
    let log = cnode.output();
    log.split("journal_records_replayed=")
        .nth(1)
        .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no recovery line in the log:\n{}", tail(&log, 4000)))
}

#[test]
fn owner_machine_lost_mid_write_standby_serves_every_acknowledged_write() {
    let _serial = serial();
    let (mut c, mut standby, seed) =
        pair("owner_machine_lost_mid_write_standby_serves_every_acknowledged_write");
    let (c1_id, c2_id) = (cnode_id(c.cnode()), cnode_id(&standby));
    check_cnode_list(&c, &c1_id, &c2_id);
    // A writer acknowledges as fast as it can, never flushing; the owner's machine goes
    // in the middle of it.
    let (stop, writer) = start_writer(&c, seed, 0);
    std::thread::sleep(Duration::from_millis(2500));
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    let killed = Instant::now();
    std::fs::remove_dir_all(&owner_dir).expect("deleting the owner's data dir");
    c.step("owner c1 killed -9 and its data dir deleted");
    stop.store(true, Ordering::Release);
    let done = writer.join().unwrap();
    let mut acked = done.writes;
    let mut in_flight: Vec<u64> = done.in_flight.into_iter().collect();
    assert!(
        acked.len() > 50,
        "only {} writes acknowledged before the kill",
        acked.len()
    );

    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    c.step(&format!(
        "c2 serves: failover took {:.1} s after the kill (lease TTL 3 s)",
        killed.elapsed().as_secs_f64()
    ));
    // The acknowledged writes came from the mirror: some were not in stripes yet.
    let from_mirror = replayed(&standby);
    c.step(&format!("c2 replayed {from_mirror} records of c1's mirror"));
    assert!(
        from_mirror > 0,
        "nothing came from the mirror: the test proves nothing"
    );
    c.make_current(standby);
    verify(&c, seed, &acked, &in_flight);

    // A new machine for c1 (empty data dir): it becomes c2's standby, the mirror
    // re-synchronises, and c2's machine goes in turn.
    let mut c1 = c.spawn_other_cnode("c1");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c1);
    // c1's machine is new: a new id, the standby of c2 now.
    check_cnode_list(&c, &c2_id, &cnode_id(&c1));
    let (stop, writer) = start_writer(&c, seed, 1_000_000);
    std::thread::sleep(Duration::from_millis(2000));
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    let killed = Instant::now();
    std::fs::remove_dir_all(&owner_dir).expect("deleting c2's data dir");
    c.step("owner c2 killed -9 and its data dir deleted");
    stop.store(true, Ordering::Release);
    let done = writer.join().unwrap();
    acked.extend(done.writes);
    in_flight.extend(done.in_flight);
    c1.wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("c1 did not take over"));
    c.step(&format!(
        "c1 serves again: failover took {:.1} s",
        killed.elapsed().as_secs_f64()
    ));
    c.make_current(c1);
    verify(&c, seed, &acked, &in_flight);
}

#[test]
fn a_drained_owner_hands_over_to_its_standby_at_once() {
    let _serial = serial();
    let (mut c, mut standby, seed) = pair("a_drained_owner_hands_over_to_its_standby_at_once");
    let (c1_id, c2_id) = (cnode_id(c.cnode()), cnode_id(&standby));
    // A standby owns nothing: nothing to drain.
    let v = c.cli_json(&["cnode", "drain", &c2_id, "--yes", "--json"]);
    assert_eq!(v["draining"], false, "{v}");
    let (stop, writer) = start_writer(&c, seed, 0);
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::Release);
    let done = writer.join().unwrap();
    assert!(done.in_flight.is_none(), "a write failed before the drain");
    let v = c.cli_json(&["cnode", "drain", &c1_id, "--yes", "--json"]);
    let drained = Instant::now();
    assert_eq!(v["draining"], true, "{v}");
    standby
        .wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the standby did not take over after the drain"));
    let took = drained.elapsed();
    c.step(&format!(
        "drained c1: c2 serves {:.1} s later (lease TTL 3 s: no waiting for it)",
        took.as_secs_f64()
    ));
    poll_until(Duration::from_secs(30), "the drained owner to exit", || {
        (!c.cnode().is_running()).then_some(())
    });
    c.make_current(standby);
    verify(&c, seed, &done.writes, &[]);
    // The drained c.node restarted on its data dir is the new owner's standby.
    let c1 = c.spawn_other_cnode("c1");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c1);
    check_cnode_list(&c, &c2_id, &c1_id);
}

#[test]
fn a_standby_with_a_stale_mirror_does_not_take_over() {
    let _serial = serial();
    let (mut c, mut standby, seed) = pair("a_standby_with_a_stale_mirror_does_not_take_over");
    // The standby goes; the owner acknowledges writes its journal alone holds, and says so.
    standby.kill9();
    wait_write_buffer(&c, "degraded");
    let (stop, writer) = start_writer(&c, seed, 0);
    std::thread::sleep(Duration::from_millis(3000));
    stop.store(true, Ordering::Release);
    let done = writer.join().unwrap();
    let acked = done.writes;
    let in_flight: Vec<u64> = done.in_flight.into_iter().collect();
    assert!(
        !acked.is_empty(),
        "the owner acknowledged nothing without its partner"
    );
    c.step(&format!(
        "{} writes acknowledged with the partner down",
        acked.len()
    ));
    c.cnode().kill9();
    c.step("owner c1 killed -9 (its data dir kept)");

    // The standby comes back with an older mirror: it must not serve that older image; it
    // waits, saying why.
    let mut c2 = c.spawn_other_cnode("c2");
    match c2.wait_ready(Duration::from_secs(15)) {
        Err(CnodeNotReady::Waiting) => {}
        Err(CnodeNotReady::Exited(out)) => panic!("c2 exited:\n{}", tail(&out, 3000)),
        Ok(()) => {
            panic!("c2 took over with a stale mirror: the writes acknowledged since are lost")
        }
    }
    let out = c2.output();
    assert!(
        out.contains("only its own journal holds"),
        "c2 does not say why it waits:\n{}",
        tail(&out, 3000)
    );
    c.step("c2 waits as a standby and says c1's journal alone holds acknowledged writes");

    // c1 on its own data dir serves everything; c2, still waiting, becomes its partner again
    // and takes over once its mirror is current.
    let mut c1 = c.spawn_other_cnode("c1");
    c1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c1 did not restart"));
    c.make_current(c1);
    verify(&c, seed, &acked, &in_flight);
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c2);
    c.cnode().kill9();
    c2.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c2 did not take over once its mirror was current"));
    c.make_current(c2);
    verify(&c, seed, &acked, &in_flight);
}

#[test]
fn an_owner_cut_off_from_etcd_stops_acknowledging_and_its_standby_serves() {
    let _serial = serial();
    let test = "an_owner_cut_off_from_etcd_stops_acknowledging_and_its_standby_serves";
    let (mut c, mut c2, seed) = pair(test);
    // c2 reaches etcd through a proxy the test can cut. It becomes the owner: c1 goes.
    let proxy = proxy::Proxy::start(
        free_port(&mut c.rng),
        format!("127.0.0.1:{}", c.etcd.client_port())
            .parse()
            .unwrap(),
    );
    c2.kill9();
    c.opts
        .cnode_args
        .get_mut("c2")
        .unwrap()
        .extend(["--cluster".to_string(), format!("etcd://{}", proxy.listen)]);
    let c2 = c.spawn_other_cnode("c2");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c2);
    c.cnode().kill9();
    let mut c2 = c2;
    c2.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c2 did not take over"));
    let mut c1 = c.make_current(c2).expect("c1");
    c.step("c2 owns the cluster, reaching etcd through the proxy");
    let c1 = {
        let _ = &mut c1;
        c.spawn_other_cnode("c1")
    };
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c1);

    // A writer on c2, and a reader connected to c2 before anything happens.
    let mut reader = c.nbd_client("vol0");
    let (stop, writer) = start_writer(&c, seed, 0);
    std::thread::sleep(Duration::from_millis(1500));
    proxy.set_mode(proxy::NetMode::Partition);
    let cut = Instant::now();
    c.step("c2 cut off from etcd");
    // Its writes fail once its lease may have expired (3 s), never later.
    let Acked {
        writes: acked,
        last_at,
        in_flight,
    } = writer.join().unwrap();
    let in_flight: Vec<u64> = in_flight.into_iter().collect();
    let stopped_after = last_at.map_or(Duration::ZERO, |t| t.saturating_duration_since(cut));
    stop.store(true, Ordering::Release);
    c.step(&format!(
        "c2 stopped acknowledging {:.1} s after the cut ({} writes acknowledged)",
        stopped_after.as_secs_f64(),
        acked.len()
    ));
    // c1 takes over and serves every write c2 acknowledged.
    let mut c1 = c1;
    c1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c1 did not take over"));
    let serves_after = cut.elapsed();
    c.step(&format!(
        "c1 serves {:.1} s after the cut",
        serves_after.as_secs_f64()
    ));
    // Never two owners acknowledging: c2's last acknowledgement came before c1 served.
    assert!(
        stopped_after < serves_after,
        "c2 acknowledged a write {stopped_after:?} after the cut, c1 served at {serves_after:?}"
    );
    let mut c2 = c.make_current(c1).expect("c2");
    verify(&c, seed, &acked, &in_flight);
    // New bytes through c1; c2 must not serve the old ones.
    let slot = slot_of(acked.last().copied().unwrap_or(0));
    let fresh = blocks_data(
        seed,
        9_999_999,
        slot * WRITE_BYTES / 4096,
        WRITE_BYTES / 4096,
    );
    let mut nbd = c.nbd_client("vol0");
    nbd.write(slot * WRITE_BYTES, &fresh).unwrap();
    nbd.flush().unwrap();
    nbd.disconnect();
    match reader.read(slot * WRITE_BYTES, WRITE_BYTES as u32) {
        Ok(bytes) => assert!(
            bytes == fresh,
            "c2, cut off from etcd, served bytes its successor has overwritten"
        ),
        Err(e) => c.step(&format!("a read through c2 fails as it must: {e}")),
    }
    // Healed, c2 learns its lease is gone and exits.
    proxy.set_mode(proxy::NetMode::Pass);
    poll_until(Duration::from_secs(30), "c2 to exit", || {
        (!c2.is_running()).then_some(())
    });
    c.step("healed: c2 saw its lease gone and exited");
}

/// The iSCSI portal a c.node listens on, from its `serve.json`.
fn iscsi_portal(cnode: &Cnode) -> String {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cnode.data_dir.join("serve.json")).unwrap())
            .unwrap();
    v["iscsi"].as_str().expect("an iSCSI portal").to_string()
}

#[test]
fn iscsi_writes_acknowledged_by_a_lost_owner_are_read_through_the_standby() {
    require_qemu_iscsi();
    let _serial = serial();
    let (mut c, mut standby, _seed) =
        pair("iscsi_writes_acknowledged_by_a_lost_owner_are_read_through_the_standby");
    let lun = |cnode: &Cnode| {
        format!(
            "iscsi://{}/iqn.2026-11.dev.weft:vol0/0",
            iscsi_portal(cnode)
        )
    };
    // qemu's iSCSI driver writes 16 patterns of 1 MiB through the owner's portal, one
    // qemu-io per pattern: each one that exits 0 had its writes acknowledged.
    let owner_lun = lun(c.cnode.as_ref().unwrap());
    for i in 0..16u32 {
        let cmd = format!("write -P {} {}M 1M", 0x10 + i, i);
        let out = tool("qemu-io", &["-f", "raw", "-c", &cmd, &owner_lun]);
        assert!(
            out.success() && !out.all().contains("failed"),
            "qemu-io through the owner:\n{}",
            out.all()
        );
    }
    c.step("16 MiB written through c1's iSCSI portal by qemu-io");
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    std::fs::remove_dir_all(&owner_dir).expect("deleting the owner's data dir");
    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    c.step("c1 killed -9, data dir deleted; c2 serves");
    // Through the standby's own portal, same target name: every pattern is there.
    let standby_lun = lun(&standby);
    let mut args = vec!["-f".to_string(), "raw".to_string()];
    for i in 0..16u32 {
        args.push("-c".into());
        args.push(format!("read -P {} {}M 1M", 0x10 + i, i));
    }
    args.push(standby_lun);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = tool("qemu-io", &args);
    assert!(
        out.success() && !out.all().contains("Pattern verification failed"),
        "reading through c2's portal:\n{}",
        out.all()
    );
    c.step("every pattern reads back through c2's iSCSI portal");
    c.make_current(standby);
}
