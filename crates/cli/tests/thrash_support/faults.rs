//! The faults: process kills and restarts (d.nodes, the c.node, etcd), hangs, and the
//! cluster's own operations (out/in, GC, checkpoint, scrub, repair, snapshots). Disk and
//! network faults are in `faults_io.rs`.
//!
//! Each fault starts from a healed cluster, checks the invariant while the fault holds and
//! after it is undone, and leaves the cluster healed (every d.node up, every chunk rebuilt), so
//! the faults of one run never add up beyond what the schedule says. Every random choice is
//! drawn before it is needed and the same way whatever the cluster's state, so a seed replays.

use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rand::Rng;

use crate::cluster_support::CnodeNotReady;
use crate::thrash_support::thrasher::{Thrasher, EIO_RETRY, M, UP_TIMEOUT};
use crate::thrash_support::verify::Expect;

/// Something else to do while d.nodes are down.
#[derive(Clone, Copy, Debug)]
enum During {
    Nothing,
    Gc,
    Checkpoint,
    Snapshot,
    CnodeRestart,
}

const EXACT: Expect = Expect::Exact {
    retry_for: EIO_RETRY,
};
/// How long a c.node started with more than m d.nodes down is given before they come back
/// (more than its `--wait-for-dnodes`, 20 s).
const CNODE_BEYOND_M_WAIT: Duration = Duration::from_secs(30);
/// How long it may take to be ready once only m d.nodes are down.
const CNODE_M_DOWN_WAIT: Duration = Duration::from_secs(60);
/// How long it may take to be ready once they are back.
const CNODE_RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);

impl Thrasher {
    /// Kill -9 one or two (at most m) d.nodes, maybe with GC, a checkpoint, a snapshot or a
    /// c.node restart meanwhile; restart them.
    pub fn fault_kill_dnodes(&mut self) {
        let n = self.rng.random_range(1..=M);
        let victims = self.pick_dnodes(n);
        let down_ms = self.rng.random_range(1000..6000);
        let during = match self.rng.random_range(0..6) {
            0 => During::Gc,
            1 => During::Checkpoint,
            2 => During::Snapshot,
            3 => During::CnodeRestart,
            _ => During::Nothing,
        };
        let vol = self.rng.random_range(0..2usize);
        for &i in &victims {
            self.kill_dnode(i);
        }
        std::thread::sleep(Duration::from_millis(down_ms));
        self.do_during(during, vol);
        self.check(&format!("{n} d.node(s) killed"), EXACT);
        for &i in &victims {
            self.restart_dnode(i);
        }
        self.wait_all_up();
        self.check("d.nodes back", EXACT);
    }

    /// A c.node restarted meanwhile must start with up to m d.nodes down.
    fn do_during(&mut self, during: During, vol: usize) {
        match during {
            During::Nothing => {}
            During::Gc => self.cli_step_degraded("gc", &["gc"]),
            During::Checkpoint => self.cli_step_degraded("checkpoint", &["checkpoint"]),
            During::Snapshot => {
                self.snapshot(["vol0", "vol1"][vol], vol);
            }
            During::CnodeRestart => {
                self.kill_cnode();
                self.start_cnode_must();
                self.check("c.node restarted", EXACT);
                self.cnode_settled();
            }
        }
    }

    /// `weft ARGS` must succeed.
    pub fn cli_step(&mut self, kind: &str, args: &[&str]) {
        let t = std::time::Instant::now();
        let out = self.c.cli(args);
        if !out.success() {
            self.fail(&format!(
                "`weft {}` failed ({}):\n{}\n{}",
                args.join(" "),
                out.describe(),
                out.stdout,
                out.stderr
            ));
        }
        // One line: the first of the text, or the JSON compacted.
        let text = serde_json::from_str::<serde_json::Value>(&out.stdout)
            .map(|v| v.to_string())
            .unwrap_or_else(|_| out.stdout.lines().next().unwrap_or("").to_string());
        let first = text.chars().take(160).collect::<String>();
        self.log.record(
            kind,
            "cluster",
            &format!("{:.1}s {first}", t.elapsed().as_secs_f64()),
        );
    }

    /// `weft ARGS` with up to m d.nodes down: it may answer 503 (cannot finish now); another
    /// failure is not a client error either, so it is noted (event log and summary) rather
    /// than failing the run.
    pub fn cli_step_degraded(&mut self, kind: &str, args: &[&str]) {
        let t = std::time::Instant::now();
        let out = self.c.cli(args);
        if out.success() {
            self.log.record(
                kind,
                "cluster",
                &format!("{:.1}s ok", t.elapsed().as_secs_f64()),
            );
            return;
        }
        let err = out
            .stderr
            .trim()
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(300)
            .collect::<String>();
        // 503: stripes cannot be made durable now (a placement group with m d.nodes down has
        // fewer than min(k+1, k+m) chunks): the documented answer, try again later.
        if out.stderr.contains("HTTP 503") && !out.stderr.contains("corrupt") {
            self.log
                .record(kind, "cluster", &format!("503, not now: {err}"));
            return;
        }
        let note = format!(
            "`weft {}` failed with <= m d.nodes down: {err}",
            args.join(" ")
        );
        self.log.record("NOTE", "cluster", &note);
        self.notes.push(format!("+{:.1}s {note}", self.log.secs()));
    }

    /// Kill -9 m+1 d.nodes: reads get EIO or the right bytes; then they come back and every
    /// block must read again.
    pub fn fault_kill_beyond_m(&mut self) {
        let victims = self.pick_dnodes(M + 1);
        let down_ms = self.rng.random_range(1000..5000);
        self.shared.errors_ok.store(true, Ordering::SeqCst);
        for &i in &victims {
            self.kill_dnode(i);
        }
        std::thread::sleep(Duration::from_millis(down_ms));
        self.check(&format!("{} d.nodes killed", M + 1), Expect::EioAllowed);
        for &i in &victims {
            self.restart_dnode(i);
        }
        self.wait_all_up();
        self.check("d.nodes back", EXACT);
        self.shared.errors_ok.store(false, Ordering::SeqCst);
    }

    /// Kill -9 m+1 d.nodes, then kill -9 the c.node and start it again while they are down:
    /// it may fail to start, wait (recovering) until they are back, or serve EIO for what it
    /// cannot read; then the d.nodes come back and every acknowledged-and-flushed write must be
    /// there.
    pub fn fault_cnode_restart_beyond_m(&mut self) {
        let victims = self.pick_dnodes(M + 1);
        let down_ms = self.rng.random_range(0..4000);
        // Bring one d.node back first: with m down the waiting c.node has k chunks of every
        // stripe again.
        let staggered = self.rng.random_bool(0.5);
        self.shared.errors_ok.store(true, Ordering::SeqCst);
        for &i in &victims {
            self.kill_dnode(i);
        }
        std::thread::sleep(Duration::from_millis(down_ms));
        self.kill_cnode();
        self.c.spawn_cnode("c1");
        let mut ready = false;
        match self.wait_cnode(CNODE_BEYOND_M_WAIT) {
            Ok(()) => {
                ready = true;
                self.check(
                    &format!("c.node restarted with {} d.nodes down", M + 1),
                    Expect::EioAllowed,
                );
            }
            Err(CnodeNotReady::Waiting) => {
                let mode = self.c.cli(&["cluster", "status", "--json"]);
                let v: serde_json::Value = serde_json::from_str(&mode.stdout).unwrap_or_default();
                self.log.record(
                    "c.node waits",
                    "c.node",
                    &format!(
                        "not ready after {CNODE_BEYOND_M_WAIT:?}: mode {}, waiting for {}",
                        v["mode"], v["recovery"]["waiting_for"]
                    ),
                );
            }
            Err(CnodeNotReady::Exited(e)) => {
                let first = e
                    .lines()
                    .rev()
                    .find(|l| l.contains("rror"))
                    .unwrap_or("")
                    .to_string();
                self.log.record("start failed", "c.node", &first);
            }
        }
        let mut back = 0;
        if staggered && !ready && self.c.cnode.as_mut().is_some_and(|c| c.is_running()) {
            self.restart_dnode(victims[0]);
            back = 1;
            match self.wait_cnode(CNODE_M_DOWN_WAIT) {
                Ok(()) => {
                    ready = true;
                    self.check("c.node ready with m d.nodes still down", EXACT);
                }
                Err(CnodeNotReady::Waiting) => {
                    let note = format!(
                        "the c.node still recovers {CNODE_M_DOWN_WAIT:?} after only m d.nodes are down"
                    );
                    self.log.record("NOTE", "c.node", &note);
                    self.notes.push(format!("+{:.1}s {note}", self.log.secs()));
                }
                Err(CnodeNotReady::Exited(e)) => {
                    // Found by the thrasher (seed 15270610114330696200, fault #31): recovery
                    // finished with m d.nodes down, then sealing the replayed journal could not
                    // make a stripe durable and the c.node exited (fixed in edfabef).
                    let tail = crate::cluster_support::tail(&e, 3000).to_string();
                    self.fail(&format!(
                        "the c.node exited with only m d.nodes down:\n{tail}"
                    ));
                }
            }
        }
        for &i in &victims[back..] {
            self.restart_dnode(i);
        }
        if !ready {
            if self.c.cnode.as_mut().is_some_and(|c| c.is_running()) {
                if let Err(e) = self.wait_cnode(CNODE_RECOVERY_TIMEOUT) {
                    self.fail(&format!("the c.node was not ready {CNODE_RECOVERY_TIMEOUT:?} after every d.node came back: {e:?}"));
                }
            } else {
                self.start_cnode_must();
            }
        }
        self.wait_all_up();
        self.check("d.nodes back after a c.node restart beyond m", EXACT);
        self.cnode_settled();
        self.shared.errors_ok.store(false, Ordering::SeqCst);
    }

    /// Kill -9 the c.node and start it on its data dir.
    pub fn fault_kill_cnode(&mut self) {
        let up_ms = self.rng.random_range(0..3000);
        std::thread::sleep(Duration::from_millis(up_ms));
        self.kill_cnode();
        self.start_cnode_must();
        self.check("c.node restarted", EXACT);
        self.cnode_settled();
    }

    /// SIGSTOP a d.node for a few seconds (a hang: connections open, nothing answers), and
    /// sometimes kill -9 another one meanwhile (two faults, still at most m).
    pub fn fault_stop_dnode(&mut self) {
        let pair = self.pick_dnodes(2);
        let (i, other) = (pair[0], pair[1]);
        let stop_ms = self.rng.random_range(2000..8000);
        let check_while = self.rng.random_bool(0.5);
        let also_kill = self.rng.random_bool(0.33);
        let pid = self.c.dnodes[i].pid();
        signal(pid, "STOP");
        self.log
            .record("SIGSTOP", &self.dnode_name(i), &format!("for {stop_ms} ms"));
        if also_kill {
            self.kill_dnode(other);
        }
        std::thread::sleep(Duration::from_millis(stop_ms));
        if check_while {
            self.check("a d.node stopped", EXACT);
        }
        signal(pid, "CONT");
        self.log.record("SIGCONT", &self.dnode_name(i), "");
        if also_kill {
            self.restart_dnode(other);
        }
        self.wait_all_up();
        self.check("d.node continued", EXACT);
    }

    /// A d.node down under load (its chunks of new stripes left for repair), back, and while
    /// the repair runs another d.node killed and sometimes the c.node too: the rebuild is
    /// interrupted and must resume.
    pub fn fault_kill_during_repair(&mut self) {
        let pair = self.pick_dnodes(2);
        let (first, second) = (pair[0], pair[1]);
        let down_ms = self.rng.random_range(2000..6000);
        let restart_cnode = self.rng.random_bool(0.5);
        self.kill_dnode(first);
        std::thread::sleep(Duration::from_millis(down_ms));
        self.restart_dnode(first);
        self.cli_step("repair", &["cluster", "repair"]);
        self.kill_dnode(second);
        if restart_cnode {
            self.kill_cnode();
            self.start_cnode_must();
        }
        self.check("a d.node killed during the repair", EXACT);
        if restart_cnode {
            self.cnode_settled();
        }
        self.restart_dnode(second);
        self.wait_all_up();
        self.check("d.nodes back after an interrupted repair", EXACT);
    }

    /// Kill etcd, wait, start it again on its data: leases, the c.node's view and the
    /// d.nodes' registrations must survive it.
    pub fn fault_etcd_restart(&mut self) {
        let down_ms = self.rng.random_range(1000..6000);
        self.c.etcd.kill();
        self.log
            .record("kill -9", "etcd", &format!("for {down_ms} ms"));
        std::thread::sleep(Duration::from_millis(down_ms));
        let mut last = None;
        for _ in 0..5 {
            match self.c.etcd.restart() {
                Ok(()) => {
                    last = None;
                    break;
                }
                Err(e) => {
                    last = Some(e);
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }
        if let Some(e) = last {
            self.fail(&format!("etcd did not restart: {e}"));
        }
        self.log.record("restart", "etcd", "");
        self.wait_all_up();
        self.check("etcd restarted", EXACT);
    }

    /// `weft dnode out` one d.node (its chunks are rebuilt on the others), then `in` again.
    pub fn fault_out_in(&mut self) {
        let i = self.pick_dnodes(1)[0];
        let id = self.c.dnodes[i].id.clone();
        self.cli_step("dnode out", &["dnode", "out", &id, "--yes"]);
        self.c.wait_node_state(i, "out", UP_TIMEOUT);
        self.c.wait_repaired(Duration::from_secs(240), 0, false);
        self.log
            .record("rebuilt", &self.dnode_name(i), "its chunks are elsewhere");
        self.check("a d.node out", EXACT);
        self.cli_step("dnode in", &["dnode", "in", &id]);
        self.c.wait_node_state(i, "up", UP_TIMEOUT);
        self.check("the d.node in again", EXACT);
    }

    /// GC, checkpoint, sync, scrub and repair, some of them, in a random order, under load.
    pub fn fault_maintenance(&mut self) {
        use rand::seq::SliceRandom;
        let mut ops: Vec<(&str, &[&str])> = vec![
            ("gc", &["gc"]),
            ("checkpoint", &["checkpoint"]),
            ("sync", &["sync"]),
            ("scrub", &["cluster", "scrub", "--json"]),
            ("repair", &["cluster", "repair"]),
        ];
        ops.shuffle(&mut self.rng);
        let n = self.rng.random_range(1..=ops.len());
        for (kind, args) in ops.into_iter().take(n) {
            self.cli_step(kind, args);
        }
        self.check("maintenance", EXACT);
    }

    /// A snapshot of vol0 or vol1 under load; the oldest one (not the clone's) is deleted when
    /// more than three are kept.
    pub fn fault_snapshot(&mut self) {
        let vol = self.rng.random_range(0..2usize);
        self.snapshot(["vol0", "vol1"][vol], vol);
        let victim = {
            let m = self.shared.models.lock().unwrap();
            let live: Vec<usize> = (0..m.snaps.len())
                .filter(|&s| !m.snaps[s].deleted && !m.snaps[s].in_use)
                .collect();
            (live.len() > 3).then(|| live[0])
        };
        if let Some(s) = victim {
            let export = self.shared.models.lock().unwrap().snaps[s].export.clone();
            self.cli_step("snapshot delete", &["snapshot", "delete", &export, "--yes"]);
            self.shared.models.lock().unwrap().snaps[s].deleted = true;
        }
        self.check("snapshot", EXACT);
    }
}

/// `kill -SIG PID` (procps) to one process.
pub fn signal(pid: u32, sig: &str) {
    let st = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(st.success(), "kill -{sig} {pid} failed");
}
