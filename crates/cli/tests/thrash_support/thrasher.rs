//! The thrasher: the cluster, the proxies, the writers and the models, and the steps every
//! fault is made of (kill, restart, check, heal). The faults themselves are in `faults.rs`, the
//! schedule in `schedule.rs`.
//!
//! Replay: every random choice of the schedule (which fault, which d.nodes, how long, which
//! chunk) comes from one `StdRng` seeded from `WEFT_THRASH_SEED`, drawn the same way whatever
//! the timing, so a seed replays the same faults in the same order. What the writers had
//! written when a fault hit depends on timing and differs from run to run.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cluster_support::{free_port, node_state, Cluster, ClusterOpts};
use crate::thrash_support::log::EventLog;
use crate::thrash_support::model::{Base, BlockModel, ImageModel, Models, SnapBlock, SnapModel};
use crate::thrash_support::proxy::Proxy;
use crate::thrash_support::verify::{verify, Expect, Report};
use crate::thrash_support::writer::{Shared, Target, Writers};

/// d.nodes in the cluster: k+m = 6 plus one spare, so a d.node marked out has somewhere to go.
pub const DNODES: usize = 7;
/// Parity chunks of the default pool (4+2): the faults the cluster must ride out.
pub const M: usize = 2;
/// d.nodes reached only through a fault-injecting proxy (indexes 0..PROXIED).
pub const PROXIED: usize = 2;
/// Blocks of each image the writers use (4 MiB): small, so overwrites make garbage and every
/// check reads everything.
pub const IMAGE_BLOCKS: u64 = 1024;
/// Size of each volume.
pub const VOLUME_SIZE: &str = "64M";
/// How long writers may take to pause (a request may wait out a stall).
const PAUSE_TIMEOUT: Duration = Duration::from_secs(150);
/// How long blocks may stay EIO after every d.node is back.
pub const EIO_RETRY: Duration = Duration::from_secs(60);
/// How long the repair may take after a fault.
const HEAL_TIMEOUT: Duration = Duration::from_secs(240);
/// How long the d.nodes may take to be seen up.
pub const UP_TIMEOUT: Duration = Duration::from_secs(60);

/// The knobs, from the environment.
#[derive(Clone, Debug)]
pub struct Config {
    pub seed: u64,
    /// Stop starting faults after this long.
    pub secs: u64,
    /// Stop after this many faults.
    pub events_max: Option<u64>,
    /// Only these kinds of fault (`WEFT_THRASH_FAULTS`, comma-separated `Fault` names).
    pub only: Option<Vec<String>>,
}

impl Config {
    /// `WEFT_THRASH_SEED` (else random), `WEFT_THRASH_SECS` (default 240),
    /// `WEFT_THRASH_EVENTS` (default: no limit), `WEFT_THRASH_FAULTS` (default: all kinds).
    pub fn from_env() -> Config {
        let num = |name: &str| {
            std::env::var(name).ok().map(|v| {
                v.trim()
                    .parse::<u64>()
                    .unwrap_or_else(|e| panic!("{name}={v}: {e}"))
            })
        };
        Config {
            seed: num("WEFT_THRASH_SEED").unwrap_or_else(rand::random),
            secs: num("WEFT_THRASH_SECS").unwrap_or(240),
            events_max: num("WEFT_THRASH_EVENTS"),
            only: std::env::var("WEFT_THRASH_FAULTS")
                .ok()
                .map(|v| v.split(',').map(|f| f.trim().to_string()).collect()),
        }
    }
}

/// Totals over every check.
#[derive(Clone, Debug, Default)]
pub struct Totals {
    pub checks: u64,
    pub blocks: u64,
    pub acked_checked: u64,
    pub eio_allowed: u64,
    pub wrong: u64,
    pub lost: u64,
    pub unreadable: u64,
    pub unreadable_acked: u64,
    pub unflushed_gone: u64,
}

pub struct Thrasher {
    // Declared first: dropped (stopped) before the processes they talk to.
    pub writers: Writers,
    pub c: Cluster,
    pub proxies: Vec<Arc<Proxy>>,
    pub rng: StdRng,
    pub log: EventLog,
    pub shared: Arc<Shared>,
    pub totals: Totals,
    pub cfg: Config,
    /// Snapshots taken so far (names t1, t2, ...).
    pub snaps_taken: u32,
    /// Faults run.
    pub faults: u64,
    /// vol2 (fio's) exists.
    pub fio_volume: bool,
    /// Findings that do not fail the run (an admin command refused while degraded, scrub
    /// reporting chunks nobody corrupted), repeated in the summary.
    pub notes: Vec<String>,
}

impl Thrasher {
    /// etcd, 7 d.nodes (two behind proxies), the c.node; vol0 and vol1 with a writer each; a
    /// snapshot of vol0 and a clone of it with a writer.
    pub fn start(cfg: Config) -> Thrasher {
        eprintln!(
            "[thrash] seed = {} (replay: WEFT_THRASH_SEED={} cargo test -p weft --test thrash -- --nocapture), {} s{}",
            cfg.seed,
            cfg.seed,
            cfg.secs,
            cfg.events_max.map(|n| format!(", at most {n} faults")).unwrap_or_default()
        );
        if let Some(o) = &cfg.only {
            eprintln!("[thrash] only faults {o:?}");
        }
        let mut rng = StdRng::seed_from_u64(cfg.seed);
        let salt: u64 = rng.random();
        let c = Cluster::start(
            "thrash",
            cfg.seed,
            ClusterOpts::new(DNODES).volume_size(VOLUME_SIZE),
        );
        let shared = Shared::new(salt, Models::default());
        let mut t = Thrasher {
            writers: Writers::new(shared.clone()),
            c,
            proxies: Vec::new(),
            rng,
            log: EventLog::new(cfg.seed),
            shared,
            totals: Totals::default(),
            cfg,
            snaps_taken: 0,
            faults: 0,
            fio_volume: false,
            notes: Vec::new(),
        };
        t.set_target(1);
        t.start_proxies();
        t.c.cli_ok(&["volume", "create", "vol1", "--size", VOLUME_SIZE]);
        t.add_image("vol0", 1, Base::Zero);
        t.add_image("vol1", 2, Base::Zero);
        std::thread::sleep(Duration::from_secs(3));
        let s = t.snapshot("vol0", 0);
        t.c.cli_ok(&[
            "clone",
            "create",
            &t.shared.models.lock().unwrap().snaps[s].export.clone(),
            "k1",
        ]);
        t.log
            .record("clone", "k1", "of the first snapshot; a writer on it");
        t.add_image("k1", 3, Base::Snapshot(s));
        std::thread::sleep(Duration::from_secs(2));
        t.check(
            "setup",
            Expect::Exact {
                retry_for: EIO_RETRY,
            },
        );
        t
    }

    /// d.nodes 0..PROXIED restart advertising a proxy's address: the c.node reaches them only
    /// through it.
    fn start_proxies(&mut self) {
        for i in 0..PROXIED {
            let port = free_port(&mut self.rng);
            let p = Proxy::start(port, self.c.dnodes[i].addr);
            self.c.dnodes[i].advertise = Some(p.listen);
            self.c.kill_dnode(i);
            self.c.restart_dnode(i);
            self.log.record(
                "proxy",
                &self.dnode_name(i),
                &format!("c.node reaches it through {}", p.listen),
            );
            self.proxies.push(Arc::new(p));
        }
        self.wait_all_up();
    }

    fn add_image(&mut self, export: &str, tag: u64, base: Base) {
        let i = {
            let mut m = self.shared.models.lock().unwrap();
            m.images.push(ImageModel {
                export: export.into(),
                tag,
                base,
                blocks: vec![BlockModel::default(); IMAGE_BLOCKS as usize],
            });
            m.images.len() - 1
        };
        let seed = self.rng.random();
        self.writers.spawn(i, seed);
    }

    pub fn dnode_name(&self, i: usize) -> String {
        format!("d{i}")
    }

    /// Points the writers at the running c.node as incarnation `inc`.
    fn set_target(&mut self, inc: u64) {
        let nbd: SocketAddr = self.c.cnode.as_ref().expect("c.node").nbd;
        *self.shared.target.lock().unwrap() = Target {
            nbd: Some(nbd),
            inc,
        };
    }

    pub fn incarnation(&self) -> u64 {
        self.shared.target().inc
    }

    // ---- the steps faults are made of -------------------------------------------------------

    /// Snapshots image `image` (a volume) as `VOLUME@tN` under load: the floor before the call,
    /// the highest version issued after it. Returns its index in the models.
    pub fn snapshot(&mut self, volume: &str, image: usize) -> usize {
        self.snaps_taken += 1;
        let name = format!("t{}", self.snaps_taken);
        let inc = self.incarnation();
        let lo: Vec<SnapBlock> = self.shared.models.lock().unwrap().images[image]
            .blocks
            .iter()
            .map(|b| SnapBlock {
                lo_flushed: b.flushed,
                lo_acked: b.acked,
                lo_inc: b.acked_inc.min(inc),
                hi: 0,
                pinned: None,
            })
            .collect();
        self.c.cli_ok(&["snapshot", "create", volume, &name]);
        let mut m = self.shared.models.lock().unwrap();
        let tag = m.images[image].tag;
        let blocks = lo
            .into_iter()
            .zip(&m.images[image].blocks)
            .map(|(mut s, b)| {
                s.hi = b.issued;
                // Acked by an earlier c.node run: only the flushed floor holds.
                if s.lo_inc != inc {
                    s.lo_acked = s.lo_flushed;
                }
                s
            })
            .collect();
        let export = format!("{volume}@{name}");
        m.snaps.push(SnapModel {
            export: export.clone(),
            tag,
            blocks,
            deleted: false,
            in_use: false,
        });
        let idx = m.snaps.len() - 1;
        if m.snaps.len() == 1 {
            m.snaps[0].in_use = true;
        }
        drop(m);
        self.log.record("snapshot", &export, "");
        idx
    }

    /// Pauses the writers, reads and judges every image, resumes. Fails the test on anything
    /// wrong (and on any problem a writer recorded).
    pub fn check(&mut self, why: &str, expect: Expect) -> Report {
        self.writers.pause(PAUSE_TIMEOUT);
        let target = self.shared.target();
        let nbd = target.nbd.expect("check needs a running c.node");
        let r = verify(&self.shared, nbd, target.inc, expect);
        self.writers.resume();
        self.totals.checks += 1;
        self.totals.blocks += r.blocks;
        self.totals.acked_checked += r.acked_checked;
        self.totals.eio_allowed += r.eio_allowed;
        self.totals.wrong += r.wrong.len() as u64;
        self.totals.lost += r.lost.len() as u64;
        self.totals.unreadable += r.unreadable.len() as u64;
        self.totals.unreadable_acked += r.unreadable_acked;
        self.totals.unflushed_gone += r.unflushed_gone;
        let mode = match expect {
            Expect::Exact { .. } => "exact",
            Expect::EioAllowed => "EIO allowed",
        };
        self.log
            .record("check", mode, &format!("{why}: {}", r.summary()));
        if !r.clean() {
            let mut msg = format!("check after {why} ({mode}) failed: {}\n", r.summary());
            for (what, list) in [
                ("WRONG", &r.wrong),
                ("LOST", &r.lost),
                ("UNREADABLE", &r.unreadable),
            ] {
                for l in list.iter().take(20) {
                    let _ = writeln!(msg, "  {what} {l}");
                }
                if list.len() > 20 {
                    let _ = writeln!(msg, "  ... {} more {what}", list.len() - 20);
                }
            }
            self.fail(&msg);
        }
        self.assert_no_problems(why);
        r
    }

    pub fn assert_no_problems(&self, after: &str) {
        let problems = self.shared.problems.lock().unwrap().clone();
        if !problems.is_empty() {
            self.fail(&format!(
                "a client saw an error it should not have (by {after}):\n  {}",
                problems.join("\n  ")
            ));
        }
    }

    /// Panics with the seed, the event log and the totals.
    pub fn fail(&self, msg: &str) -> ! {
        // The processes are killed as we unwind: what the writers see from now on is no
        // finding.
        self.shared.errors_ok.store(true, Ordering::SeqCst);
        self.shared.stop.store(true, Ordering::SeqCst);
        panic!(
            "THRASH FAILED (seed {seed}; replay: WEFT_THRASH_SEED={seed} cargo test -p weft --test thrash -- --nocapture)\n{msg}\nevent log:\n{}\n{}",
            self.log.text(),
            self.summary(),
            seed = self.cfg.seed
        );
    }

    /// Kill -9 the c.node; the writers see their connections break (expected).
    pub fn kill_cnode(&mut self) {
        self.shared.disconnects_ok.store(true, Ordering::SeqCst);
        self.shared.target.lock().unwrap().nbd = None;
        self.c.cnode().kill9();
        self.log.record(
            "kill -9",
            "c.node",
            &format!("incarnation {}", self.incarnation()),
        );
    }

    /// Starts the c.node on its data dir as the next incarnation; `Err` if it exits first.
    pub fn start_cnode(&mut self) -> Result<(), String> {
        let t = std::time::Instant::now();
        match self.c.try_start_cnode("c1") {
            Ok(()) => {
                let inc = self.incarnation() + 1;
                self.set_target(inc);
                self.log.record(
                    "start",
                    "c.node",
                    &format!(
                        "incarnation {inc} ready after {:.1}s",
                        t.elapsed().as_secs_f64()
                    ),
                );
                Ok(())
            }
            Err(e) => {
                let first = e
                    .lines()
                    .rev()
                    .find(|l| l.contains("rror"))
                    .unwrap_or("")
                    .to_string();
                self.log.record("start failed", "c.node", &first);
                Err(e)
            }
        }
    }

    /// Waits for the c.node spawned by `Cluster::spawn_cnode`; when ready, it is the next
    /// incarnation.
    pub fn wait_cnode(
        &mut self,
        timeout: Duration,
    ) -> Result<(), crate::cluster_support::CnodeNotReady> {
        let t = std::time::Instant::now();
        self.c.cnode().wait_ready(timeout)?;
        let inc = self.incarnation() + 1;
        self.set_target(inc);
        self.log.record(
            "start",
            "c.node",
            &format!(
                "incarnation {inc} ready after {:.1}s more",
                t.elapsed().as_secs_f64()
            ),
        );
        Ok(())
    }

    /// The c.node must start (every d.node it needs is up).
    pub fn start_cnode_must(&mut self) {
        if let Err(e) = self.start_cnode() {
            let tail = crate::cluster_support::tail(&e, 6000).to_string();
            self.fail(&format!(
                "the c.node did not start with every d.node up:\n{tail}"
            ));
        }
    }

    /// Connections may break again only through a fault.
    pub fn cnode_settled(&mut self) {
        self.shared.disconnects_ok.store(false, Ordering::SeqCst);
    }

    pub fn kill_dnode(&mut self, i: usize) {
        self.c.kill_dnode(i);
        self.log.record("kill -9", &self.dnode_name(i), "");
    }

    pub fn restart_dnode(&mut self, i: usize) {
        self.c.restart_dnode(i);
        self.log.record("restart", &self.dnode_name(i), "");
    }

    /// `n` distinct d.nodes, drawn from the rng (not timing dependent).
    pub fn pick_dnodes(&mut self, n: usize) -> Vec<usize> {
        use rand::seq::SliceRandom;
        let mut v: Vec<usize> = (0..DNODES).collect();
        v.shuffle(&mut self.rng);
        v.truncate(n);
        v.sort_unstable();
        v
    }

    pub fn wait_all_up(&self) {
        let ids = self.c.dnode_ids();
        self.c.wait_status(UP_TIMEOUT, "every d.node up", |s| {
            ids.iter()
                .all(|id| node_state(s, id).as_deref() == Some("up"))
        });
    }

    /// Every d.node running and up, every chunk in place, the cluster healthy.
    pub fn heal(&mut self) {
        for i in 0..DNODES {
            if !self.c.dnodes[i].is_running() {
                self.restart_dnode(i);
            }
        }
        self.wait_all_up();
        let s = self.c.wait_repaired(HEAL_TIMEOUT, 0, true);
        self.log.record(
            "healed",
            "cluster",
            &format!(
                "{} chunks rebuilt in all",
                s["repair"]["chunks_rebuilt_total"]
            ),
        );
    }

    /// Stops the writers, heals, checks everything once more, prints the totals.
    pub fn finish(mut self) {
        self.heal();
        self.check(
            "the end (writers running)",
            Expect::Exact {
                retry_for: EIO_RETRY,
            },
        );
        self.writers.stop();
        self.check(
            "the end (writers stopped)",
            Expect::Exact {
                retry_for: EIO_RETRY,
            },
        );
        eprintln!("[thrash] event log:\n{}", self.log.text());
        eprintln!("{}", self.summary());
        assert_eq!(self.totals.wrong, 0);
        assert_eq!(self.totals.lost, 0);
        self.assert_no_problems("the end");
    }

    pub fn summary(&self) -> String {
        let mut s = format!(
            "[thrash] seed {} summary\n  faults by kind ({} in all):\n",
            self.cfg.seed, self.faults
        );
        for (k, n) in self.log.faults_by_kind() {
            let _ = writeln!(s, "    {k:<22} {n}");
        }
        let _ = writeln!(s, "  events by kind:");
        for (k, n) in self.log.by_kind() {
            let _ = writeln!(s, "    {k:<22} {n}");
        }
        let load = self.shared.tally.lock().unwrap().clone();
        let t = &self.totals;
        let _ = writeln!(
            s,
            "  load: {} writes acknowledged ({} blocks), {} flushes acknowledged, {} expected errors, {} connections",
            load.writes_acked, load.blocks_acked, load.flushes_acked, load.errors_expected, load.reconnects
        );
        let _ = writeln!(
            s,
            "  checks: {}; blocks verified: {}; acknowledged writes checked: {}; EIO while > m down: {}; acknowledged but unflushed writes gone after a c.node kill -9: {} (allowed)",
            t.checks, t.blocks, t.acked_checked, t.eio_allowed, t.unflushed_gone
        );
        let _ = write!(
            s,
            "  wrong bytes served: {} (must be 0); acknowledged writes lost: {} (must be 0: {} read back older, {} unreadable with every d.node up); blocks unreadable with <= m down: {}; client errors with <= m down: {}",
            t.wrong,
            t.lost + t.unreadable_acked,
            t.lost,
            t.unreadable_acked,
            t.unreadable,
            self.shared.problems.lock().unwrap().len()
        );
        if !self.notes.is_empty() {
            let _ = write!(
                s,
                "\n  notes (not failures):\n    {}",
                self.notes.join("\n    ")
            );
        }
        s
    }
}

impl Drop for Thrasher {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "[thrash] FAILED, seed {}; event log:\n{}",
                self.cfg.seed,
                self.log.text()
            );
        }
    }
}
