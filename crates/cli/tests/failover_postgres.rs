//! PostgreSQL through a c.node failover: a database on a cluster volume (ext4 over nbdfuse and
//! a loop device, through the owner c.node) runs pgbench; the owner's machine disappears
//! (kill -9 and its data dir deleted) mid-run; the file system is mounted again through the
//! standby, which took over, and PostgreSQL restarted on it. It must recover, every
//! transaction pgbench saw committed must be there, the TPC-B sums must agree, and amcheck
//! must find every B-tree index consistent with its table.
//!
//! Needs root, /dev/fuse and PostgreSQL (Debian's `postgresql`, installed by `.ci/run`).

mod cluster_support;
mod common;
mod failover_support;
mod mount_support;
mod pg_support;

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use failover_support::*;
use mount_support::*;
use pg_support::{as_postgres, pg_bin, Postgres};

/// pgbench's scale: 100,000 accounts per unit.
const SCALE: &str = "2";
/// How long pgbench runs before the owner goes.
const LOAD_BEFORE_KILL: Duration = Duration::from_secs(8);

/// ext4 on `vol0` through the c.node at `uri`, mounted at `mnt`.
fn mount_volume(m: &mut Mounts, uri: &str, mnt: &Path, mkfs: bool) {
    m.expose(uri);
    let dev = m.attach_loop();
    if mkfs {
        mkfs_ext4(&dev);
    }
    m.mount();
    run(
        Command::new("chown").args(["postgres:postgres"]).arg(mnt),
        Duration::from_secs(10),
    )
    .ok();
}

/// "number of transactions actually processed: N" from pgbench's report (printed also when
/// its clients were aborted by the server's loss).
fn processed(report: &str) -> u64 {
    report
        .split("number of transactions actually processed: ")
        .nth(1)
        .and_then(|rest| rest.split(|ch: char| !ch.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no transaction count in pgbench's report:\n{report}"))
}

#[test]
fn postgres_on_a_cluster_volume_survives_the_owner_machine_loss() {
    let test = "postgres_on_a_cluster_volume_survives_the_owner_machine_loss";
    if !fs_prerequisites(test) {
        return;
    }
    require_tools(&[
        "nbdfuse",
        "fusermount3",
        "mkfs.ext4",
        "losetup",
        "mount",
        "umount",
    ]);
    let _serial = serial();
    let (mut c, standby, _seed) = pair(test);
    // The postgres user must reach the mount point and the log under the scratch dir.
    run(
        Command::new("chmod").arg("755").arg(c.scratch.path()),
        Duration::from_secs(10),
    )
    .ok();
    let mnt = c.scratch.join("mnt");
    let logs = c.scratch.join("pglogs");
    fs::create_dir_all(&logs).unwrap();
    run(
        Command::new("chown").arg("postgres:postgres").arg(&logs),
        Duration::from_secs(10),
    )
    .ok();
    let port = free_port(&mut c.rng);

    // Declared after `c`: unmounted before the c.nodes are killed.
    let mut m = Mounts::new(c.scratch.join("fuse"), mnt.clone());
    mount_volume(&mut m, &c.nbd_uri("vol0"), &mnt, true);
    let data = mnt.join("pgdata");
    let out = run(
        as_postgres(&pg_bin("initdb"))
            .args(["-U", "postgres", "--auth=trust", "-D"])
            .arg(&data),
        Duration::from_secs(300),
    );
    assert!(out.success(), "initdb failed: {}", out.all());
    let mut pg = Postgres::start(&data, &logs.join("before.log"), port);
    let out = run(
        pg.pgbench().args(["-i", "-q", "-s", SCALE, "postgres"]),
        Duration::from_secs(600),
    );
    assert!(out.success(), "pgbench -i failed: {}", out.all());
    c.step("PostgreSQL initialised on vol0 through c1 (ext4 over nbdfuse and a loop device)");

    // TPC-B-like load; each committed transaction adds one pgbench_history row.
    let bench = Bg::spawn(
        pg.pgbench()
            .args(["-n", "-c", "4", "-j", "2", "-T", "120", "postgres"]),
    );
    std::thread::sleep(LOAD_BEFORE_KILL);
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    let killed = Instant::now();
    fs::remove_dir_all(&owner_dir).expect("deleting the owner's data dir");
    c.step("owner c1 killed -9 and its data dir deleted under pgbench");

    // The database loses its disk: pgbench's clients are aborted. The server is crashed
    // whatever it did meanwhile, and the dead mounts are dropped.
    let report = bench.wait(Duration::from_secs(60));
    pg.crash();
    let report = report.all();
    let committed = processed(&report);
    assert!(
        committed > 100,
        "only {committed} transactions before the kill:\n{report}"
    );
    c.step(&format!(
        "pgbench saw {committed} transactions committed before the kill"
    ));
    m.abandon();

    let mut standby = standby;
    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    c.step(&format!(
        "c2 serves: failover took {:.1} s after the kill (lease TTL 3 s)",
        killed.elapsed().as_secs_f64()
    ));
    c.make_current(standby);

    // The same file system through c2; PostgreSQL recovers from its WAL.
    let mut m2 = Mounts::new(c.scratch.join("fuse2"), mnt.clone());
    mount_volume(&mut m2, &c.nbd_uri("vol0"), &mnt, false);
    let mut pg = Postgres::start(&data, &logs.join("after.log"), port);
    let history: u64 = pg
        .query("SELECT count(*) FROM pgbench_history")
        .parse()
        .unwrap();
    c.step(&format!(
        "after recovery through c2: {history} pgbench_history rows for {committed} transactions seen committed"
    ));
    assert!(
        history >= committed,
        "{} transactions pgbench saw committed are missing after the failover",
        committed - history
    );
    // pgbench -c 4: at most one transaction per client was in flight at the kill.
    assert!(
        history <= committed + 4,
        "{history} history rows: more than the transactions pgbench ran"
    );
    // Every transaction moved the same delta into an account, a teller, a branch and the
    // history: the four sums agree in any committed state.
    let sums = pg.query(
        "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ',' || \
                (SELECT sum(tbalance) FROM pgbench_tellers) || ',' || \
                (SELECT sum(bbalance) FROM pgbench_branches) || ',' || \
                (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
    );
    let parts: Vec<&str> = sums.split(',').collect();
    assert!(
        parts.len() == 4 && parts.iter().all(|p| *p == parts[0]),
        "TPC-B sums disagree (accounts, tellers, branches, history): {sums}"
    );
    // amcheck: every B-tree index matches its table (heapallindexed).
    pg.query("CREATE EXTENSION IF NOT EXISTS amcheck");
    let checked = pg.query(
        "SELECT count(bt_index_check(c.oid, true)) FROM pg_index i \
         JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam \
         WHERE a.amname = 'btree' AND c.relpersistence <> 't'",
    );
    c.step(&format!(
        "sums agree ({}); amcheck found {checked} B-tree indexes consistent",
        parts[0]
    ));
    pg.stop();
    m2.umount();
    m2.unexpose();
}
