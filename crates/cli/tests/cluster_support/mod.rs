//! Harness for the cluster tests (`tests/cluster.rs`): a real etcd ([`EtcdServer`]), N
//! `weft dnode` processes and one or more `weft cnode` processes, all on 127.0.0.1.
//!
//! It builds on `common/mod.rs` (process spawning with bounded output capture, `poll_until`,
//! the NBD client, fio, temp dirs kept on failure):
//!
//! - every process is a [`Bg`], SIGKILLed by pid when dropped (also when a test panics), etcd
//!   included ([`EtcdServer`] kills and reaps on drop);
//! - d.nodes listen on a port probed free *below* the kernel's ephemeral range, so that the port
//!   is still free when a killed d.node restarts on it (outgoing connections never take it);
//! - every wait polls with a deadline, and a timeout panics with the last `cluster status`;
//! - each step is logged with the time since the test started; on a panic the tail of every
//!   process's output is printed and the temp dir (data dirs, full logs) is kept.
//!
//! Cluster tests run one at a time ([`serial`]): each starts ten or so processes, and lease and
//! grace timings are in seconds, which two concurrent clusters on two cores could stretch.
#![allow(dead_code)]

use std::fs;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use weft_meta::testing::EtcdServer;

use crate::common::{cli_in, poll_until, weft_bin, Bg, CmdOut, NbdClient, NbdError, Scratch};

/// How long a d.node or a c.node may take to print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How often `cluster status` is polled.
const STATUS_POLL: Duration = Duration::from_millis(300);
/// Bytes of each process's output printed when a test fails (full logs are in the temp dir).
const FAIL_TAIL_DNODE: usize = 3_000;
const FAIL_TAIL_CNODE: usize = 12_000;

/// One cluster test at a time (see the module doc). A panicking test poisons the lock; the
/// next test takes it anyway.
pub fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last `n` bytes of `s` (on a char boundary).
pub fn tail(s: &str, n: usize) -> &str {
    if s.len() <= n {
        return s;
    }
    let mut start = s.len() - n;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    &s[start..]
}

/// The low end of the kernel's ephemeral port range (32768 if unreadable).
fn ephemeral_low() -> u16 {
    fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

/// A loopback port that is free now and outside the ephemeral range, so no outgoing connection
/// takes it while its d.node is down between a kill and a restart.
pub fn free_port(rng: &mut StdRng) -> u16 {
    let high = ephemeral_low().max(12_000);
    for _ in 0..1000 {
        let port = rng.random_range(10_000..high);
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 10000..{high} after 1000 tries");
}

// ------------------------------------------------------------------------------------------
// Options
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
pub struct ClusterOpts {
    pub dnodes: usize,
    /// `--redundancy` of the c.node (the default pool is created with it).
    pub redundancy: String,
    pub pg_count: u32,
    /// `--out-grace` of the c.node.
    pub out_grace: String,
    /// `--lease-ttl` of the d.nodes.
    pub lease_ttl: String,
    /// `--default-volume-size` (vol0).
    pub volume_size: String,
    /// More `weft cnode` arguments, per c.node name (`--partner`, `--mirror-listen`...).
    pub cnode_args: std::collections::HashMap<String, Vec<String>>,
    /// More `weft dnode` arguments, per d.node index (`--tier capacity`...).
    pub dnode_args: std::collections::HashMap<usize, Vec<String>>,
}

impl ClusterOpts {
    /// `dnodes` d.nodes, 4+2 over 64 PGs, lease 2 s, out grace 5 min (never out in a test
    /// unless it asks), vol0 of 1 GiB.
    pub fn new(dnodes: usize) -> ClusterOpts {
        ClusterOpts {
            dnodes,
            redundancy: "4+2".into(),
            pg_count: 64,
            out_grace: "5m".into(),
            lease_ttl: "2s".into(),
            volume_size: "1G".into(),
            cnode_args: std::collections::HashMap::new(),
            dnode_args: std::collections::HashMap::new(),
        }
    }
    pub fn out_grace(mut self, g: &str) -> Self {
        self.out_grace = g.into();
        self
    }
    pub fn volume_size(mut self, s: &str) -> Self {
        self.volume_size = s.into();
        self
    }
}

// ------------------------------------------------------------------------------------------
// Processes
// ------------------------------------------------------------------------------------------

/// One `weft dnode` process (or its data dir and address while it is down).
pub struct Dnode {
    pub index: usize,
    /// Its node id (`dn-` and 8 hex digits), read from the line it prints at start,
    /// `dnode <id> listening on <addr>`.
    pub id: String,
    pub addr: SocketAddr,
    pub data: PathBuf,
    pub zone: String,
    /// `--advertise` (the address c.nodes are told), e.g. a fault-injecting proxy in front of
    /// it; `None`: the listen address.
    pub advertise: Option<SocketAddr>,
    /// More `weft dnode` arguments for the next starts (e.g. `--capacity 64M`).
    pub extra_args: Vec<String>,
    child: Option<Bg>,
    starts: u32,
    log_dir: PathBuf,
}

impl Dnode {
    fn launch(&mut self, etcd_url: &str, lease_ttl: &str) {
        self.starts += 1;
        let mut cmd = Command::new(weft_bin());
        cmd.arg("dnode")
            .args(["--cluster", etcd_url])
            .arg("--listen")
            .arg(self.addr.to_string())
            .arg("--data")
            .arg(&self.data)
            .args(["--zone", &self.zone])
            .args(["--lease-ttl", lease_ttl])
            .args(&self.extra_args)
            .env("NO_COLOR", "1")
            .env_remove("WEFT_CLUSTER")
            .env_remove("WEFT_LOG");
        if let Some(a) = self.advertise {
            cmd.arg("--advertise").arg(a.to_string());
        }
        let bg = Bg::spawn(&mut cmd);
        let pid = bg.pid();
        let child = self.child.insert(bg);
        let what = format!("d.node {} (pid {pid}) to print `ready`", self.index);
        let (id, addr) = poll_until(READY_TIMEOUT, &what, || {
            if let Some(st) = child.try_wait() {
                panic!(
                    "d.node {} exited before ready ({st}):\n{}",
                    self.index,
                    child.all_so_far()
                );
            }
            let out = child.stdout_so_far();
            if !out.lines().any(|l| l.trim() == "ready") {
                return None;
            }
            let line = out.lines().find(|l| l.starts_with("dnode "))?;
            // dnode <id> listening on <addr>
            let words: Vec<&str> = line.split_whitespace().collect();
            let addr: SocketAddr = words.get(4)?.parse().ok()?;
            Some((words.get(1)?.to_string(), addr))
        });
        assert_eq!(addr, self.addr, "d.node {} listens elsewhere", self.index);
        if self.id.is_empty() {
            self.id = id;
        } else {
            assert_eq!(
                id, self.id,
                "d.node {} restarted on the same data dir with another id",
                self.index
            );
        }
        eprintln!(
            "d.node {} {} ready on {} (pid {pid}, start #{})",
            self.index, self.id, self.addr, self.starts
        );
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("d.node not running").pid()
    }

    /// SIGKILL by pid, reap, save its output.
    pub fn kill9(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.pid();
        child.sigkill();
        let out = child.wait(Duration::from_secs(30));
        eprintln!(
            "killed -9 d.node {} {} (pid {pid}, {})",
            self.index,
            self.id,
            out.describe()
        );
        self.save_log(&out);
    }

    fn save_log(&self, out: &CmdOut) {
        let p = self
            .log_dir
            .join(format!("dnode{}-{}.log", self.index, self.starts));
        let _ = fs::write(p, out.all());
    }

    pub fn output(&self) -> String {
        match &self.child {
            Some(c) => c.all_so_far(),
            None => "(not running)".into(),
        }
    }
}

/// Why [`Cnode::wait_ready`] returned without `ready`.
#[derive(Debug)]
pub enum CnodeNotReady {
    /// It exited; its output.
    Exited(String),
    /// Still running after the timeout.
    Waiting,
}

/// One `weft cnode` process with its own data dir.
pub struct Cnode {
    pub name: String,
    pub data_dir: PathBuf,
    pub nbd: SocketAddr,
    pub api: String,
    /// `http://host:port/metrics`.
    pub metrics: String,
    child: Option<Bg>,
    log_dir: PathBuf,
}

impl Cnode {
    fn launch(
        name: &str,
        data_dir: PathBuf,
        etcd_url: &str,
        opts: &ClusterOpts,
        log_dir: &Path,
    ) -> Cnode {
        Cnode::try_launch(name, data_dir, etcd_url, opts, log_dir).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Starts it and waits for `ready`; `Err` with its output when it exits first or is not
    /// ready in time (then it is killed).
    fn try_launch(
        name: &str,
        data_dir: PathBuf,
        etcd_url: &str,
        opts: &ClusterOpts,
        log_dir: &Path,
    ) -> Result<Cnode, String> {
        let mut c = Cnode::spawn(name, data_dir, etcd_url, opts, log_dir);
        match c.wait_ready(READY_TIMEOUT) {
            Ok(()) => Ok(c),
            Err(CnodeNotReady::Exited(e)) => Err(e),
            Err(CnodeNotReady::Waiting) => {
                let out = c.output();
                c.kill9();
                Err(format!(
                    "c.node {name} not ready after {READY_TIMEOUT:?}:\n{}",
                    tail(&out, FAIL_TAIL_CNODE)
                ))
            }
        }
    }

    /// Starts the process (on `data_dir`) without waiting for it.
    fn spawn(
        name: &str,
        data_dir: PathBuf,
        etcd_url: &str,
        opts: &ClusterOpts,
        log_dir: &Path,
    ) -> Cnode {
        let mut cmd = Command::new(weft_bin());
        let extra = opts.cnode_args.get(name).cloned().unwrap_or_default();
        // Its own `--cluster` (e.g. etcd through a proxy) replaces the cluster's.
        let own_cluster = extra.iter().any(|a| a == "--cluster");
        cmd.arg("--data-dir")
            .arg(&data_dir)
            .arg("cnode")
            .args(
                (!own_cluster)
                    .then_some(["--cluster", etcd_url])
                    .into_iter()
                    .flatten(),
            )
            // Free ports, unless the c.node's own arguments fix one (a restart that clients
            // reconnect to).
            .args(
                [
                    "--nbd-listen",
                    "--api-listen",
                    "--metrics-listen",
                    "--iscsi-listen",
                ]
                .into_iter()
                .filter(|flag| !extra.iter().any(|a| a == flag))
                .flat_map(|flag| [flag, "127.0.0.1:0"]),
            )
            .args(["--default-volume-size", &opts.volume_size])
            .args(["--out-grace", &opts.out_grace])
            .args(["--wait-for-dnodes", "20s"])
            .args(["--redundancy", &opts.redundancy])
            .args(["--pg-count", &opts.pg_count.to_string()])
            .args(&extra)
            .env("NO_COLOR", "1")
            .env_remove("WEFT_CLUSTER")
            .env_remove("WEFT_LOG")
            .env_remove("WEFT_DATA_DIR");
        let bg = Bg::spawn(&mut cmd);
        Cnode {
            name: name.into(),
            data_dir,
            nbd: "127.0.0.1:0".parse().unwrap(),
            api: String::new(),
            metrics: String::new(),
            child: Some(bg),
            log_dir: log_dir.to_path_buf(),
        }
    }

    /// Waits up to `timeout` for `ready` and a `serve.json` with its pid and NBD address, then
    /// fills in the addresses. `Exited` (with its output, the process reaped and its log saved)
    /// or `Waiting` (still running, e.g. recovering).
    pub fn wait_ready(&mut self, timeout: Duration) -> Result<(), CnodeNotReady> {
        let name = self.name.clone();
        let serve_json = self.data_dir.join("serve.json");
        let deadline = Instant::now() + timeout;
        let child = self.child.as_mut().expect("c.node not started");
        let pid = child.pid();
        let info: Value = loop {
            if let Some(st) = child.try_wait() {
                let e = format!(
                    "c.node {name} (pid {pid}) exited before ready ({st}):\n{}",
                    child.all_so_far()
                );
                self.kill9();
                return Err(CnodeNotReady::Exited(e));
            }
            if child.stdout_so_far().lines().any(|l| l.trim() == "ready") {
                let v: Option<Value> = fs::read_to_string(&serve_json)
                    .ok()
                    .and_then(|t| serde_json::from_str(&t).ok());
                if let Some(v) = v.filter(|v| {
                    v["pid"].as_u64() == Some(u64::from(pid)) && v["nbd"].as_str().is_some()
                }) {
                    break v;
                }
            }
            if Instant::now() > deadline {
                return Err(CnodeNotReady::Waiting);
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        self.nbd = info["nbd"].as_str().unwrap().parse().unwrap();
        self.api = info["api"].as_str().unwrap().trim_end_matches('/').into();
        self.metrics = info["metrics"].as_str().unwrap_or_default().into();
        eprintln!(
            "c.node {name} ready: nbd {}, api {} (pid {pid})",
            self.nbd, self.api
        );
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("c.node not running").pid()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().is_none())
    }

    /// SIGKILL by pid, reap.
    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let pid = child.pid();
            child.sigkill();
            let out = child.wait(Duration::from_secs(30));
            eprintln!(
                "killed -9 c.node {} (pid {pid}, {})",
                self.name,
                out.describe()
            );
            self.save_log(pid, &out);
        }
    }

    /// SIGTERM by pid and wait (bounded) for a clean exit (destage, checkpoint).
    pub fn terminate(&mut self, timeout: Duration) {
        let child = self.child.take().expect("c.node not running");
        let pid = child.pid();
        child.signal("TERM");
        let out = child.wait(timeout);
        self.save_log(pid, &out);
        assert!(
            out.success(),
            "c.node {} (pid {pid}) did not exit cleanly after SIGTERM ({}):\n{}",
            self.name,
            out.describe(),
            tail(&out.all(), FAIL_TAIL_CNODE)
        );
        eprintln!("c.node {} (pid {pid}) stopped by SIGTERM", self.name);
    }

    /// `logs/cnode-NAME-PID.log`: one file per run, so a restarted c.node keeps the logs of
    /// the runs before.
    fn save_log(&self, pid: u32, out: &CmdOut) {
        let _ = fs::write(
            self.log_dir.join(format!("cnode-{}-{pid}.log", self.name)),
            out.all(),
        );
    }

    pub fn output(&self) -> String {
        match &self.child {
            Some(c) => c.all_so_far(),
            None => "(not running)".into(),
        }
    }
}

impl Drop for Cnode {
    fn drop(&mut self) {
        self.kill9();
    }
}

// ------------------------------------------------------------------------------------------
// The cluster
// ------------------------------------------------------------------------------------------

pub struct Cluster {
    pub test: String,
    pub seed: u64,
    pub rng: StdRng,
    pub opts: ClusterOpts,
    pub dnodes: Vec<Dnode>,
    /// The c.node the CLI talks to.
    pub cnode: Option<Cnode>,
    t0: Instant,
    cnodes_started: u32,
    // Declared last: dropped after the processes above are killed.
    pub etcd: EtcdServer,
    pub scratch: Scratch,
}

impl Cluster {
    /// etcd, `opts.dnodes` d.nodes (zones z0, z1, ...) and c.node `c1`.
    pub fn start(test: &str, seed: u64, opts: ClusterOpts) -> Cluster {
        let scratch = Scratch::new(test);
        fs::create_dir_all(scratch.join("logs")).unwrap();
        let etcd = EtcdServer::start().unwrap_or_else(|e| panic!("starting etcd: {e}"));
        let mut c = Cluster {
            test: test.into(),
            seed,
            rng: StdRng::seed_from_u64(seed ^ 0x5eed_c105),
            opts,
            dnodes: Vec::new(),
            cnode: None,
            t0: Instant::now(),
            cnodes_started: 0,
            etcd,
            scratch,
        };
        c.step(&format!(
            "etcd {} (pid {:?}); starting {} d.nodes",
            c.etcd.url(),
            c.etcd.pid(),
            c.opts.dnodes
        ));
        for i in 0..c.opts.dnodes {
            let port = free_port(&mut c.rng);
            let mut d = Dnode {
                index: i,
                id: String::new(),
                addr: SocketAddr::from(([127, 0, 0, 1], port)),
                data: c.scratch.join(format!("dnode{i}")),
                zone: format!("z{i}"),
                advertise: None,
                extra_args: c.opts.dnode_args.get(&i).cloned().unwrap_or_default(),
                child: None,
                starts: 0,
                log_dir: c.scratch.join("logs"),
            };
            d.launch(&c.etcd.url(), &c.opts.lease_ttl);
            c.dnodes.push(d);
        }
        c.start_cnode("c1");
        c
    }

    /// Logs a step with the time since the test started.
    pub fn step(&self, msg: &str) {
        eprintln!(
            "[{} seed={} +{:.1}s] {msg}",
            self.test,
            self.seed,
            self.t0.elapsed().as_secs_f64()
        );
    }

    pub fn etcd_url(&self) -> String {
        self.etcd.url()
    }

    /// Starts a c.node on a new empty data dir against the same etcd; the CLI talks to it from
    /// now on. The previous one (if any) must be stopped first.
    pub fn start_cnode(&mut self, name: &str) {
        assert!(
            self.cnode.as_mut().is_none_or(|c| !c.is_running()),
            "stop the running c.node first"
        );
        self.cnodes_started += 1;
        let data_dir = self.scratch.join(format!("cnode-{name}"));
        let c = Cnode::launch(
            name,
            data_dir,
            &self.etcd.url(),
            &self.opts,
            &self.scratch.join("logs"),
        );
        self.cnode = Some(c);
        self.step(&format!("c.node {name} ready"));
    }

    /// Starts a c.node on the data dir of `name` without waiting for it (see
    /// [`Cnode::wait_ready`]); the CLI talks to it from now on (its API answers while it
    /// recovers).
    pub fn spawn_cnode(&mut self, name: &str) {
        assert!(
            self.cnode.as_mut().is_none_or(|c| !c.is_running()),
            "stop the running c.node first"
        );
        self.cnodes_started += 1;
        let data_dir = self.scratch.join(format!("cnode-{name}"));
        self.cnode = Some(Cnode::spawn(
            name,
            data_dir,
            &self.etcd.url(),
            &self.opts,
            &self.scratch.join("logs"),
        ));
        self.step(&format!("c.node {name} started (not waiting for it)"));
    }

    /// Like [`Cluster::start_cnode`] (the same data dir for the same name), but a c.node that
    /// exits before `ready` (e.g. it could not recover with too few d.nodes) is an `Err` with
    /// its output, and `self.cnode` is left `None`.
    pub fn try_start_cnode(&mut self, name: &str) -> Result<(), String> {
        assert!(
            self.cnode.as_mut().is_none_or(|c| !c.is_running()),
            "stop the running c.node first"
        );
        self.cnodes_started += 1;
        let data_dir = self.scratch.join(format!("cnode-{name}"));
        self.cnode = None;
        let c = Cnode::try_launch(
            name,
            data_dir,
            &self.etcd.url(),
            &self.opts,
            &self.scratch.join("logs"),
        )?;
        self.cnode = Some(c);
        self.step(&format!("c.node {name} ready"));
        Ok(())
    }

    /// Starts another c.node on the data dir of `name` without waiting for it and without
    /// making it the one the CLI talks to (a standby); see [`Cluster::make_current`].
    pub fn spawn_other_cnode(&mut self, name: &str) -> Cnode {
        self.cnodes_started += 1;
        let data_dir = self.scratch.join(format!("cnode-{name}"));
        let c = Cnode::spawn(
            name,
            data_dir,
            &self.etcd.url(),
            &self.opts,
            &self.scratch.join("logs"),
        );
        self.step(&format!("c.node {name} started (not current)"));
        c
    }

    /// The CLI talks to `cnode` from now on; returns the previous one.
    pub fn make_current(&mut self, cnode: Cnode) -> Option<Cnode> {
        self.cnode.replace(cnode)
    }

    pub fn cnode(&mut self) -> &mut Cnode {
        self.cnode.as_mut().expect("no c.node")
    }

    pub fn nbd_uri(&self, export: &str) -> String {
        let c = self.cnode.as_ref().expect("no c.node");
        format!("nbd://{}/{export}", c.nbd)
    }

    pub fn nbd_client(&self, export: &str) -> NbdClient {
        let c = self.cnode.as_ref().expect("no c.node");
        NbdClient::connect(c.nbd, export)
            .unwrap_or_else(|e| panic!("NBD connect to {}/{export}: {e}", c.nbd))
    }

    // ---- d.nodes ----------------------------------------------------------------------------

    pub fn kill_dnode(&mut self, i: usize) {
        self.dnodes[i].kill9();
        let d = &self.dnodes[i];
        self.step(&format!("killed -9 d.node {i} ({})", d.id));
    }

    /// Restarts a killed d.node on its data dir and port.
    pub fn restart_dnode(&mut self, i: usize) {
        assert!(!self.dnodes[i].is_running(), "d.node {i} is running");
        let url = self.etcd.url();
        let ttl = self.opts.lease_ttl.clone();
        self.dnodes[i].launch(&url, &ttl);
        self.step(&format!("restarted d.node {i} ({})", self.dnodes[i].id));
    }

    pub fn dnode_ids(&self) -> Vec<String> {
        self.dnodes.iter().map(|d| d.id.clone()).collect()
    }

    // ---- CLI --------------------------------------------------------------------------------

    /// `weft --data-dir <c.node's data dir> ARGS...`
    pub fn cli(&self, args: &[&str]) -> CmdOut {
        let c = self.cnode.as_ref().expect("no c.node");
        cli_in(&c.data_dir, args)
    }

    /// Like [`Cluster::cli`], and it must succeed; `weft cluster status` may also exit 7
    /// (its documented "not healthy" verdict, with the whole status printed).
    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        let unhealthy_status = args.starts_with(&["cluster", "status"])
            && out.status.and_then(|s| s.code()) == Some(7);
        if !out.success() && !unhealthy_status {
            panic!(
                "`weft {}` failed ({}):\n{}\n{}",
                args.join(" "),
                out.describe(),
                out.stdout,
                out.stderr
            );
        }
        out.stdout
    }

    /// The id of the c.node the CLI talks to (`this` in `weft cnode list --json`).
    pub fn this_cnode_id(&self) -> String {
        let listed = self.cli_json(&["cnode", "list", "--json"]);
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["this"] == true)
            .and_then(|n| n["id"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("no c.node says it answered: {listed}"))
    }

    /// The id of the c.node whose own shard is `shard`.
    pub fn cnode_id_of_shard(&self, shard: u64) -> String {
        let listed = self.cli_json(&["cnode", "list", "--json"]);
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["shard"] == shard)
            .and_then(|n| n["id"].as_str().map(String::from))
            .unwrap_or_else(|| panic!("no c.node of shard {shard}: {listed}"))
    }

    /// The shards c.node `id` owns besides its own, as `weft cnode list` shows them.
    pub fn extra_shards_of(&self, id: &str) -> Vec<u64> {
        let listed = self.cli_json(&["cnode", "list", "--json"]);
        listed
            .as_array()
            .into_iter()
            .flatten()
            .find(|n| n["id"] == id)
            .and_then(|n| n["shards"].as_array().cloned())
            .unwrap_or_default()
            .iter()
            .filter_map(Value::as_u64)
            .collect()
    }

    pub fn cli_json(&self, args: &[&str]) -> Value {
        let out = self.cli_ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| {
            panic!("`weft {}` did not print JSON ({e}):\n{out}", args.join(" "))
        })
    }

    /// `weft cluster status --json`.
    pub fn status(&self) -> Value {
        self.cli_json(&["cluster", "status", "--json"])
    }

    /// `weft sync` (bounded by the CLI's own time limit).
    pub fn sync(&self) {
        let t = Instant::now();
        self.cli_ok(&["sync"]);
        self.step(&format!(
            "weft sync done in {:.1}s",
            t.elapsed().as_secs_f64()
        ));
    }

    /// Polls `cluster status --json` until `cond` holds; on timeout panics with the last one.
    pub fn wait_status(
        &self,
        timeout: Duration,
        what: &str,
        mut cond: impl FnMut(&Value) -> bool,
    ) -> Value {
        let t = Instant::now();
        let deadline = t + timeout;
        loop {
            let s = self.status();
            if cond(&s) {
                self.step(&format!("{what}: after {:.1}s", t.elapsed().as_secs_f64()));
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {what}; last cluster status:\n{}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            std::thread::sleep(STATUS_POLL);
        }
    }

    /// Waits until the c.node sees d.node `i` in `state` (up, down, out).
    pub fn wait_node_state(&self, i: usize, state: &str, timeout: Duration) -> Value {
        let id = self.dnodes[i].id.clone();
        self.wait_status(timeout, &format!("d.node {i} ({id}) {state}"), |s| {
            node_state(s, &id).as_deref() == Some(state)
        })
    }

    /// Waits until the repairer has nothing left: a scan started after our last kick found
    /// nothing to rebuild, no chunk failed, the cluster is healthy (if `healthy`), and at least
    /// `min_rebuilt_total` chunks were rebuilt since the c.node started. Kicks a scan
    /// (`weft cluster repair`) whenever the repairer is idle and that is not the case yet.
    pub fn wait_repaired(&self, timeout: Duration, min_rebuilt_total: u64, healthy: bool) -> Value {
        let t = Instant::now();
        let deadline = t + timeout;
        let mut kicked_at: Option<u64> = None;
        let mut last_kick = Instant::now() - Duration::from_secs(10);
        loop {
            let s = self.status();
            let r = &s["repair"];
            let running = r["running"].as_bool().unwrap_or(true);
            let scans = r["scans"].as_u64().unwrap_or(0);
            let done = !running
                && kicked_at.is_some_and(|k| scans > k)
                && r["chunks_to_rebuild"].as_u64() == Some(0)
                && r["chunks_failed"].as_u64() == Some(0)
                && r["chunks_rebuilt_total"].as_u64().unwrap_or(0) >= min_rebuilt_total
                && (!healthy || s["healthy"].as_bool() == Some(true));
            if done {
                self.step(&format!(
                    "repair done after {:.1}s: {} chunks rebuilt in all, {} scans",
                    t.elapsed().as_secs_f64(),
                    r["chunks_rebuilt_total"],
                    scans
                ));
                return s;
            }
            if Instant::now() > deadline {
                panic!(
                    "timed out after {timeout:?} waiting for the repair to finish (at least \
                     {min_rebuilt_total} chunks rebuilt, healthy: {healthy}); last cluster status:\n{}",
                    serde_json::to_string_pretty(&s).unwrap()
                );
            }
            // Kick a scan when none runs and the last kicked one (if any) is over.
            if !running
                && kicked_at.is_none_or(|k| scans > k)
                && last_kick.elapsed() > Duration::from_millis(900)
            {
                kicked_at = Some(scans);
                last_kick = Instant::now();
                self.cli_ok(&["cluster", "repair"]);
            }
            std::thread::sleep(STATUS_POLL);
        }
    }

    /// Dumps every process's output tail (for a failure).
    fn dump(&self) {
        eprintln!(
            "===== cluster test {} failed (seed {}); full logs and data dirs in {} =====",
            self.test,
            self.seed,
            self.scratch.path().display()
        );
        for d in &self.dnodes {
            eprintln!(
                "----- d.node {} {} {} (tail) -----\n{}",
                d.index,
                d.id,
                d.addr,
                tail(&d.output(), FAIL_TAIL_DNODE)
            );
        }
        if let Some(c) = &self.cnode {
            eprintln!(
                "----- c.node {} (tail) -----\n{}",
                c.name,
                tail(&c.output(), FAIL_TAIL_CNODE)
            );
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            if let Some(c) = self.cnode.as_ref() {
                let _ = fs::write(self.scratch.join("logs/cnode-at-failure.log"), c.output());
            }
            for d in &self.dnodes {
                let _ = fs::write(
                    self.scratch
                        .join(format!("logs/dnode{}-at-failure.log", d.index)),
                    d.output(),
                );
            }
            self.dump();
        }
        // c.node first (it talks to the d.nodes), then the d.nodes; etcd goes with its field.
        if let Some(mut c) = self.cnode.take() {
            c.kill9();
        }
        for d in &mut self.dnodes {
            d.kill9();
        }
    }
}

/// The state (up, down, out) of d.node `id` in a `cluster status`.
pub fn node_state(status: &Value, id: &str) -> Option<String> {
    status["nodes"]
        .as_array()?
        .iter()
        .find(|n| n["id"].as_str() == Some(id))
        .and_then(|n| n["state"].as_str())
        .map(str::to_string)
}

/// Sum of a field over the pools of a `cluster status`.
pub fn pools_sum(status: &Value, field: &str) -> u64 {
    status["pools"]
        .as_array()
        .map(|ps| ps.iter().map(|p| p[field].as_u64().unwrap_or(0)).sum())
        .unwrap_or(0)
}

// ------------------------------------------------------------------------------------------
// Data: deterministic, distinct, incompressible blocks
// ------------------------------------------------------------------------------------------

/// The 4 KiB block `lba` of data set `tag`: random bytes from (seed, tag, lba), with the lba
/// and tag in its first 16 bytes so a misplaced block is told apart from a wrong one.
pub fn block_data(seed: u64, tag: u64, lba: u64) -> Vec<u8> {
    let mut rng = StdRng::seed_from_u64(
        seed ^ tag.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ lba.wrapping_mul(0xc2b2_ae3d_27d4_eb4f),
    );
    let mut b = vec![0u8; 4096];
    rng.fill(&mut b[..]);
    b[..8].copy_from_slice(&lba.to_le_bytes());
    b[8..16].copy_from_slice(&tag.to_le_bytes());
    b
}

/// `count` blocks from `lba` of data set `tag`, concatenated.
pub fn blocks_data(seed: u64, tag: u64, lba: u64, count: u64) -> Vec<u8> {
    (lba..lba + count)
        .flat_map(|l| block_data(seed, tag, l))
        .collect()
}

/// Writes `data` at `offset` in pieces of at most 1 MiB.
pub fn write_all(c: &mut NbdClient, offset: u64, data: &[u8]) {
    for (i, piece) in data.chunks(1 << 20).enumerate() {
        let at = offset + (i as u64) * (1 << 20);
        c.write(at, piece)
            .unwrap_or_else(|e| panic!("NBD write of {} bytes at {at}: {e}", piece.len()));
    }
}

/// Reads `len` bytes at `offset` in pieces of at most 1 MiB.
pub fn read_all(c: &mut NbdClient, offset: u64, len: u64) -> Result<Vec<u8>, (u64, NbdError)> {
    let mut out = Vec::with_capacity(len as usize);
    let mut at = offset;
    while at < offset + len {
        let n = (offset + len - at).min(1 << 20) as u32;
        out.extend(c.read(at, n).map_err(|e| (at, e))?);
        at += u64::from(n);
    }
    Ok(out)
}

/// A c.node's first iSCSI portal, from its `serve.json`.
pub fn iscsi_portal(cnode: &Cnode) -> SocketAddr {
    let v = poll_until(
        Duration::from_secs(30),
        "serve.json with an iSCSI portal",
        || {
            let text = std::fs::read_to_string(cnode.data_dir.join("serve.json")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            (v["pid"].as_u64() == Some(u64::from(cnode.pid())) && v["iscsi"].is_string())
                .then_some(v)
        },
    );
    v["iscsi"].as_str().unwrap().parse().unwrap()
}
