//! Shared harness for the end-to-end tests (test pyramid layer 5, see docs/TESTING.md).
//!
//! It starts the real `weft serve` binary on 127.0.0.1 port 0 with a temp data dir, waits for
//! readiness by polling (the `ready` line on stdout and a `serve.json` with the child's pid), can
//! kill -9 the server by pid and restart it on the same data dir and the same ports, runs client
//! tools (fio, qemu-img, nbdinfo, nbdfuse, ...) with a time limit and bounded output capture,
//! talks to the HTTP API, and has a tiny synchronous NBD client of its own.
//!
//! Environment knobs (all optional):
//! - `WEFT_E2E_SEED=N`: replay the random choices (kill points, data) of a failed run.
//! - `WEFT_E2E_KEEP=1`: keep temp dirs (data dir, server logs, fio state) after the test.
//! - `WEFT_E2E_SERVER=nbdkit`: run the NBD-only tests against `nbdkit file` instead of weft, to
//!   tell a test bug from a server bug. Tests that need the weft API are skipped in that mode.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;

pub const BLOCK: u64 = 4096;
pub const MIB: u64 = 1 << 20;

/// How long a server may take to print `ready`.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------------------------------
// Small helpers
// ------------------------------------------------------------------------------------------

/// The `weft` binary under test: `WEFT_BIN` when set (a long thrash run keeps its own copy so
/// that rebuilding the workspace meanwhile does not swap the binary under it), else the one
/// cargo built for this test.
pub fn weft_bin() -> PathBuf {
    match std::env::var_os("WEFT_BIN") {
        Some(path) if !path.is_empty() => PathBuf::from(path),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_weft")),
    }
}

/// Debian package that provides each client tool, for the error message.
fn package_of(tool: &str) -> &'static str {
    match tool {
        "fio" => "fio",
        "nbdinfo" | "nbdcopy" | "nbdsh" | "nbdfuse" => "libnbd-bin",
        "fusermount3" => "fuse3",
        "nbdkit" => "nbdkit",
        "qemu-img" | "qemu-io" | "qemu-nbd" => "qemu-utils",
        "mkfs.ext4" | "e2fsck" => "e2fsprogs",
        "mount" | "umount" | "losetup" => "mount",
        _ => "(unknown package)",
    }
}

pub fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
    // mkfs.ext4 lives in /usr/sbin, which a non-login PATH may lack.
    dirs.extend(["/usr/sbin", "/sbin"].map(PathBuf::from));
    dirs.into_iter().map(|d| d.join(tool)).find(|p| p.is_file())
}

/// Fails the test (never skips it) when a client tool is missing: CI installs them.
pub fn require_tool(tool: &str) -> PathBuf {
    which(tool).unwrap_or_else(|| {
        panic!(
            "required client tool `{tool}` is not installed (Debian package `{}`); \
             .ci/run installs it: apt-get install -y {}",
            package_of(tool),
            package_of(tool)
        )
    })
}

pub fn require_tools(tools: &[&str]) {
    for t in tools {
        require_tool(t);
    }
}

/// Poll `cond` every 20 ms until it returns Some or `timeout` passes.
pub fn poll_until<T>(timeout: Duration, what: &str, mut cond: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = cond() {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A seeded RNG whose seed is printed, and can be forced with WEFT_E2E_SEED to replay a failure.
pub fn test_rng(test: &str) -> (StdRng, u64) {
    let seed = match std::env::var("WEFT_E2E_SEED") {
        Ok(s) => s.parse().expect("WEFT_E2E_SEED must be a u64"),
        Err(_) => rand::random::<u64>(),
    };
    eprintln!("[{test}] seed = {seed} (replay: WEFT_E2E_SEED={seed} cargo test -p weft --test <file> {test} -- --nocapture)");
    (StdRng::seed_from_u64(seed), seed)
}

pub fn random_bytes(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    rng.fill(&mut v[..]);
    v
}

pub fn keep_dirs() -> bool {
    std::env::var("WEFT_E2E_KEEP")
        .map(|v| v == "1")
        .unwrap_or(false)
}

/// A temp dir that is kept when WEFT_E2E_KEEP=1 or when the test panics.
pub struct Scratch {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
}

impl Scratch {
    pub fn new(prefix: &str) -> Scratch {
        let dir = tempfile::Builder::new()
            .prefix(&format!("weft-e2e-{prefix}-"))
            .tempdir()
            .expect("create temp dir");
        let path = dir.path().to_path_buf();
        Scratch {
            dir: Some(dir),
            path,
        }
    }
    pub fn path(&self) -> &Path {
        &self.path
    }
    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.path.join(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if keep_dirs() || std::thread::panicking() {
            if let Some(d) = self.dir.take() {
                let p = d.keep();
                eprintln!("kept temp dir {}", p.display());
            }
        }
    }
}

pub fn parse_size(s: &str) -> u64 {
    let s = s.trim();
    let (num, mult) = match s.chars().last() {
        Some('K') | Some('k') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') | Some('m') => (&s[..s.len() - 1], 1 << 20),
        Some('G') | Some('g') => (&s[..s.len() - 1], 1 << 30),
        Some('T') | Some('t') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("size") * mult
}

// ------------------------------------------------------------------------------------------
// Running client tools with a time limit and bounded output
// ------------------------------------------------------------------------------------------

/// Keeps the first 256 KiB and the last 64 KiB of a stream (fio can loop printing errors).
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    dropped: u64,
}

const HEAD_MAX: usize = 256 << 10;
const TAIL_MAX: usize = 64 << 10;

impl Capture {
    fn push(&mut self, buf: &[u8]) {
        for &b in buf {
            if self.head.len() < HEAD_MAX {
                self.head.push(b);
            } else {
                if self.tail.len() == TAIL_MAX {
                    self.tail.pop_front();
                    self.dropped += 1;
                }
                self.tail.push_back(b);
            }
        }
    }
    fn text(&self) -> String {
        let mut s = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            s.push_str(&format!("\n[... {} bytes dropped ...]\n", self.dropped));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        s.push_str(&String::from_utf8_lossy(&tail));
        s
    }
}

fn capture_thread(mut r: impl Read + Send + 'static) -> (Arc<Mutex<Capture>>, JoinHandle<()>) {
    let cap = Arc::new(Mutex::new(Capture {
        head: Vec::new(),
        tail: VecDeque::new(),
        dropped: 0,
    }));
    let c2 = cap.clone();
    let h = std::thread::spawn(move || {
        let mut buf = [0u8; 8192];
        loop {
            match r.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => c2.lock().unwrap().push(&buf[..n]),
            }
        }
    });
    (cap, h)
}

#[derive(Debug)]
pub struct CmdOut {
    pub status: Option<ExitStatus>,
    pub timed_out: bool,
    pub stdout: String,
    pub stderr: String,
    pub cmdline: String,
}

impl CmdOut {
    pub fn success(&self) -> bool {
        self.status.map(|s| s.success()).unwrap_or(false)
    }
    pub fn all(&self) -> String {
        format!("{}\n{}", self.stdout, self.stderr)
    }
    /// Panics with the command line and its output unless it exited 0.
    pub fn ok(self) -> CmdOut {
        if !self.success() {
            panic!(
                "command failed ({}): {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.describe(),
                self.cmdline,
                self.stdout,
                self.stderr
            );
        }
        self
    }
    pub fn describe(&self) -> String {
        if self.timed_out {
            "timed out, killed".into()
        } else {
            format!("{:?}", self.status)
        }
    }
}

fn cmdline(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    if let Some(d) = cmd.get_current_dir() {
        s = format!("(cd {} && {s})", d.display());
    }
    s
}

/// A child process with its output captured; it is SIGKILLed on drop if still running.
pub struct Bg {
    child: Child,
    /// It leads a process group of its own (see [`Bg::spawn_group`]): killing it kills the
    /// group.
    group: bool,
    out: (Arc<Mutex<Capture>>, Option<JoinHandle<()>>),
    err: (Arc<Mutex<Capture>>, Option<JoinHandle<()>>),
    cmdline: String,
    status: Option<ExitStatus>,
}

impl Bg {
    pub fn spawn(cmd: &mut Command) -> Bg {
        let line = cmdline(cmd);
        eprintln!("$ {line}");
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {line}: {e}"));
        let (oc, oh) = capture_thread(child.stdout.take().unwrap());
        let (ec, eh) = capture_thread(child.stderr.take().unwrap());
        Bg {
            child,
            group: false,
            out: (oc, Some(oh)),
            err: (ec, Some(eh)),
            cmdline: line,
            status: None,
        }
    }

    /// [`Bg::spawn`] for a program that forks workers (fio runs each job as a child
    /// process): it leads a process group, and a timeout or a drop kills the whole group, so
    /// no orphaned worker keeps its output pipes open and the wait for them ends.
    pub fn spawn_group(cmd: &mut Command) -> Bg {
        use std::os::unix::process::CommandExt;
        let mut bg = Bg::spawn(cmd.process_group(0));
        bg.group = true;
        bg
    }

    /// SIGKILL the process (and its group, if it leads one).
    fn kill(&mut self) {
        if self.group {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", self.child.id())])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        if self.status.is_none() {
            self.status = self.child.try_wait().expect("try_wait");
        }
        self.status
    }

    pub fn stdout_so_far(&self) -> String {
        self.out.0.lock().unwrap().text()
    }
    pub fn stderr_so_far(&self) -> String {
        self.err.0.lock().unwrap().text()
    }
    pub fn all_so_far(&self) -> String {
        format!("{}\n{}", self.stdout_so_far(), self.stderr_so_far())
    }

    /// Waits up to `timeout`; on timeout the process is killed with SIGKILL.
    pub fn wait(mut self, timeout: Duration) -> CmdOut {
        let deadline = Instant::now() + timeout;
        let mut timed_out = false;
        while self.try_wait().is_none() {
            if Instant::now() > deadline {
                timed_out = true;
                self.kill();
                self.status = Some(self.child.wait().expect("wait"));
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some(h) = self.out.1.take() {
            let _ = h.join();
        }
        if let Some(h) = self.err.1.take() {
            let _ = h.join();
        }
        CmdOut {
            status: if timed_out { None } else { self.status },
            timed_out,
            stdout: self.out.0.lock().unwrap().text(),
            stderr: self.err.0.lock().unwrap().text(),
            cmdline: self.cmdline.clone(),
        }
    }

    /// SIGKILL to this child's pid only.
    pub fn sigkill(&mut self) {
        if self.try_wait().is_none() {
            let _ = self.child.kill();
        }
    }

    /// Sends a signal by pid (`kill -SIG PID`, procps) to this child only.
    pub fn signal(&self, sig: &str) {
        let _ = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status();
    }
}

impl Drop for Bg {
    fn drop(&mut self) {
        if self.try_wait().is_none() {
            self.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs a command to completion with a time limit.
/// `weft --data-dir DATA_DIR ARGS...`, with none of the CLI's environment variables inherited.
pub fn cli_in(data_dir: &Path, args: &[&str]) -> CmdOut {
    let mut cmd = Command::new(weft_bin());
    cmd.arg("--data-dir")
        .arg(data_dir)
        .args(args)
        .env_remove("WEFT_API")
        .env_remove("WEFT_TOKEN")
        .env_remove("WEFT_DATA_DIR");
    run(&mut cmd, Duration::from_secs(120))
}

pub fn run(cmd: &mut Command, timeout: Duration) -> CmdOut {
    Bg::spawn(cmd).wait(timeout)
}

// ------------------------------------------------------------------------------------------
// The server under test
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
pub enum Backend {
    Weft,
    /// Reference server (nbdkit file plugin) for the NBD-only tests; no API.
    Nbdkit,
}

pub fn backend() -> Backend {
    match std::env::var("WEFT_E2E_SERVER").as_deref() {
        Ok("nbdkit") => Backend::Nbdkit,
        Ok("weft") | Err(_) => Backend::Weft,
        Ok(other) => panic!("WEFT_E2E_SERVER={other}: expected weft or nbdkit"),
    }
}

#[derive(Clone, Debug)]
pub struct ServeOpts {
    pub default_volume: String,
    pub default_volume_size: String,
    /// Extra `weft serve` arguments, e.g. ["--capacity", "64M"].
    pub extra: Vec<String>,
    /// How many iSCSI portals (each on a free loopback port) to open.
    pub iscsi_portals: usize,
}

impl Default for ServeOpts {
    fn default() -> Self {
        ServeOpts {
            default_volume: "vol0".into(),
            default_volume_size: "1G".into(),
            extra: vec![],
            iscsi_portals: 1,
        }
    }
}

impl ServeOpts {
    pub fn iscsi_portals(mut self, n: usize) -> Self {
        self.iscsi_portals = n;
        self
    }

    pub fn volume_size(mut self, s: &str) -> Self {
        self.default_volume_size = s.into();
        self
    }
    pub fn arg(mut self, a: &str) -> Self {
        self.extra.push(a.into());
        self
    }
}

pub struct Server {
    pub scratch: Scratch,
    pub data_dir: PathBuf,
    pub opts: ServeOpts,
    pub backend: Backend,
    child: Option<Bg>,
    pub nbd: SocketAddr,
    pub api: String,
    /// The iSCSI portal (kept across restarts, like the NBD address), and every portal.
    pub iscsi: Option<SocketAddr>,
    pub iscsi_portals: Vec<SocketAddr>,
    /// `http://host:port/metrics` (Prometheus, no token).
    pub metrics: Option<String>,
    starts: u32,
}

impl Server {
    pub fn start(name: &str) -> Server {
        Server::start_with(name, ServeOpts::default())
    }

    pub fn start_with(name: &str, opts: ServeOpts) -> Server {
        let scratch = Scratch::new(name);
        let data_dir = scratch.join("data");
        let mut s = Server {
            scratch,
            data_dir,
            opts,
            backend: backend(),
            child: None,
            nbd: "127.0.0.1:0".parse().unwrap(),
            iscsi: None,
            iscsi_portals: Vec::new(),
            metrics: None,
            api: String::new(),
            starts: 0,
        };
        s.launch(None);
        s
    }

    /// `--iscsi-listen`: the portals it had (a restart keeps them), else free loopback ports.
    fn iscsi_listen(&self) -> String {
        if self.iscsi_portals.is_empty() {
            vec!["127.0.0.1:0"; self.opts.iscsi_portals.max(1)].join(",")
        } else {
            let kept: Vec<String> = self.iscsi_portals.iter().map(|a| a.to_string()).collect();
            kept.join(",")
        }
    }

    pub fn is_weft(&self) -> bool {
        self.backend == Backend::Weft
    }

    /// In reference (nbdkit) mode, tests that need the weft API call this and return early.
    pub fn skip_without_api(&self, test: &str) -> bool {
        if !self.is_weft() {
            eprintln!("[{test}] SKIPPED: needs the weft API (WEFT_E2E_SERVER=nbdkit)");
            return true;
        }
        false
    }

    fn launch(&mut self, ports: Option<(SocketAddr, String)>) {
        self.starts += 1;
        match self.backend {
            Backend::Weft => self.launch_weft(ports),
            Backend::Nbdkit => self.launch_nbdkit(ports.map(|p| p.0)),
        }
    }

    fn launch_weft(&mut self, ports: Option<(SocketAddr, String)>) {
        let (nbd_listen, api_listen) = match &ports {
            Some((nbd, api)) => {
                let api_hostport = api
                    .trim_start_matches("http://")
                    .trim_end_matches('/')
                    .to_string();
                (nbd.to_string(), api_hostport)
            }
            None => ("127.0.0.1:0".to_string(), "127.0.0.1:0".to_string()),
        };
        let mut cmd = Command::new(weft_bin());
        cmd.arg("serve")
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--nbd-listen")
            .arg(&nbd_listen)
            .arg("--api-listen")
            .arg(&api_listen)
            .arg("--iscsi-listen")
            .arg(self.iscsi_listen())
            .arg("--default-volume")
            .arg(&self.opts.default_volume)
            .arg("--default-volume-size")
            .arg(&self.opts.default_volume_size);
        if !self.opts.extra.iter().any(|a| a == "--metrics-listen") {
            // Tests run in parallel: no fixed port.
            cmd.args(["--metrics-listen", "127.0.0.1:0"]);
        }
        cmd.args(&self.opts.extra).current_dir(self.scratch.path());
        let bg = Bg::spawn(&mut cmd);
        let pid = bg.pid();
        self.child = Some(bg);
        let serve_json = self.data_dir.join("serve.json");
        let child = self.child.as_mut().unwrap();
        // Poll: the `ready` line on stdout, then serve.json written by *this* pid.
        let info: Value = poll_until(
            READY_TIMEOUT,
            "weft serve to print `ready` and write serve.json",
            || {
                if let Some(st) = child.try_wait() {
                    panic!(
                    "weft serve exited before ready ({st}).\n--- stdout ---\n{}\n--- stderr ---\n{}",
                    child.stdout_so_far(),
                    child.stderr_so_far()
                );
                }
                let out = child.stdout_so_far();
                if !out.lines().any(|l| l.trim() == "ready") {
                    return None;
                }
                let text = fs::read_to_string(&serve_json).ok()?;
                let v: Value = serde_json::from_str(&text).ok()?;
                (v["pid"].as_u64() == Some(pid as u64)).then_some(v)
            },
        );
        let nbd: SocketAddr = info["nbd"]
            .as_str()
            .unwrap_or_else(|| panic!("serve.json lacks \"nbd\": {info}"))
            .parse()
            .unwrap_or_else(|e| panic!("serve.json \"nbd\" is not host:port ({e}): {info}"));
        let api = info["api"]
            .as_str()
            .unwrap_or_else(|| panic!("serve.json lacks \"api\": {info}"))
            .to_string();
        assert!(nbd.ip().is_loopback(), "NBD must listen on loopback: {nbd}");
        assert_ne!(
            nbd.port(),
            0,
            "serve.json must carry the real NBD port, not 0: {info}"
        );
        if let Some((old_nbd, old_api)) = ports {
            assert_eq!(
                nbd, old_nbd,
                "restart did not get the NBD address it was given"
            );
            assert_eq!(
                api.trim_end_matches('/'),
                old_api.trim_end_matches('/'),
                "restart did not get the API address it was given"
            );
        }
        eprintln!(
            "weft serve pid {pid} ready: nbd {nbd}, api {api} (start #{})",
            self.starts
        );
        self.nbd = nbd;
        self.api = api.trim_end_matches('/').to_string();
        self.iscsi = info["iscsi"].as_str().and_then(|a| a.parse().ok());
        self.metrics = info["metrics"].as_str().map(str::to_string);
        self.iscsi_portals = info["iscsi_portals"]
            .as_array()
            .map(|a| a.iter().filter_map(|p| p.as_str()?.parse().ok()).collect())
            .unwrap_or_default();
    }

    fn launch_nbdkit(&mut self, port: Option<SocketAddr>) {
        let vols = self.data_dir.join("volumes");
        fs::create_dir_all(&vols).unwrap();
        let f = vols.join(&self.opts.default_volume);
        if !f.exists() {
            let file = fs::File::create(&f).unwrap();
            file.set_len(parse_size(&self.opts.default_volume_size))
                .unwrap();
        }
        let addr = port.unwrap_or_else(|| {
            // nbdkit does not report a port it picked: take a free one (reference mode only).
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        });
        let mut cmd = Command::new(require_tool("nbdkit"));
        cmd.args(["--exit-with-parent", "-f", "-i", "127.0.0.1", "-p"])
            .arg(addr.port().to_string())
            .arg("file")
            .arg(format!("dir={}", vols.display()));
        self.child = Some(Bg::spawn(&mut cmd));
        let child = self.child.as_mut().unwrap();
        poll_until(READY_TIMEOUT, "nbdkit to listen", || {
            if let Some(st) = child.try_wait() {
                panic!("nbdkit exited ({st}): {}", child.stderr_so_far());
            }
            TcpStream::connect(addr).ok().map(|_| ())
        });
        self.nbd = addr;
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("server not running").pid()
    }

    pub fn is_alive(&mut self) -> bool {
        self.child
            .as_mut()
            .map(|c| c.try_wait().is_none())
            .unwrap_or(false)
    }

    /// SIGKILL by pid, then reap.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().expect("server not running");
        let pid = child.pid();
        // std's Child::kill is kill(pid, SIGKILL): no dependency on procps' kill(1).
        child.sigkill();
        let out = child.wait(Duration::from_secs(30));
        eprintln!("killed -9 server pid {pid} ({})", out.describe());
        self.save_log(&out);
    }

    /// Restarts on the same data dir and the same ports (read back from serve.json).
    pub fn restart(&mut self) {
        assert!(
            self.child.is_none(),
            "restart() needs the server stopped (kill9 first)"
        );
        let ports = match self.backend {
            Backend::Weft => {
                let text = fs::read_to_string(self.data_dir.join("serve.json"))
                    .expect("serve.json after kill");
                let v: Value = serde_json::from_str(&text).expect("serve.json is JSON");
                let nbd: SocketAddr = v["nbd"].as_str().unwrap().parse().unwrap();
                Some((nbd, v["api"].as_str().unwrap().to_string()))
            }
            Backend::Nbdkit => Some((self.nbd, String::new())),
        };
        self.launch(ports);
    }

    pub fn kill9_and_restart(&mut self) {
        self.kill9();
        self.restart();
    }

    /// Stops the server (SIGKILL) and returns the output it printed.
    pub fn stop(&mut self) -> Option<CmdOut> {
        let mut child = self.child.take()?;
        child.sigkill();
        let out = child.wait(Duration::from_secs(30));
        self.save_log(&out);
        Some(out)
    }

    fn save_log(&self, out: &CmdOut) {
        let p = self.scratch.join(format!("serve-{}.log", self.starts));
        let _ = fs::write(
            &p,
            format!(
                "--- stdout ---\n{}\n--- stderr ---\n{}",
                out.stdout, out.stderr
            ),
        );
    }

    pub fn server_output(&self) -> String {
        match &self.child {
            Some(c) => format!(
                "--- stdout ---\n{}\n--- stderr ---\n{}",
                c.stdout_so_far(),
                c.stderr_so_far()
            ),
            None => "(server not running)".into(),
        }
    }

    pub fn nbd_uri(&self, export: &str) -> String {
        format!("nbd://{}/{}", self.nbd, export)
    }

    pub fn nbd_client(&self, export: &str) -> NbdClient {
        NbdClient::connect(self.nbd, export)
            .unwrap_or_else(|e| panic!("NBD connect to {}/{export}: {e}", self.nbd))
    }

    pub fn token(&self) -> String {
        fs::read_to_string(self.data_dir.join("api-token"))
            .expect("read api-token")
            .trim()
            .to_string()
    }

    /// `weft --data-dir DIR ARGS...`
    pub fn cli(&self, args: &[&str]) -> CmdOut {
        cli_in(&self.data_dir, args)
    }

    pub fn cli_ok(&self, args: &[&str]) -> String {
        let out = self.cli(args);
        if !out.success() {
            panic!(
                "`weft {}` failed ({}):\n{}\n{}\nserver:\n{}",
                args.join(" "),
                out.describe(),
                out.stdout,
                out.stderr,
                self.server_output()
            );
        }
        out.stdout
    }

    pub fn cli_json(&self, args: &[&str]) -> Value {
        let out = self.cli_ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| {
            panic!("`weft {}` did not print JSON ({e}):\n{out}", args.join(" "))
        })
    }

    /// An API request with the server's token. Returns (status, body).
    pub fn api(&self, method: &str, path: &str, body: Option<Value>) -> (u16, String) {
        let token = self.token();
        api_request(&self.api, method, path, body, Some(&token))
    }

    pub fn api_json(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let (st, text) = self.api(method, path, body);
        assert!((200..300).contains(&st), "{method} {path} -> {st}: {text}");
        if text.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{method} {path}: not JSON ({e}): {text}"))
    }

    pub fn stats(&self) -> Value {
        self.api_json("GET", "/api/v1/stats", None)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("server output at failure:\n{}", self.server_output());
        }
        let _ = self.stop();
    }
}

/// One HTTP request against `base` (e.g. http://127.0.0.1:PORT). `token` None sends no header.
pub fn api_request(
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> (u16, String) {
    try_api_request(base, method, path, body, token)
        .unwrap_or_else(|e| panic!("{method} {base}{path}: {e}"))
}

/// Like `api_request`, but a transport error (server gone) is an Err instead of a panic.
pub fn try_api_request(
    base: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
    token: Option<&str>,
) -> Result<(u16, String), ureq::Error> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into();
    let url = format!("{}{}", base.trim_end_matches('/'), path);
    let auth = token.map(|t| format!("Bearer {t}"));
    let res = match method {
        "GET" | "DELETE" => {
            let mut req = if method == "GET" {
                agent.get(&url)
            } else {
                agent.delete(&url)
            };
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            req.call()
        }
        "POST" | "PUT" => {
            let mut req = if method == "POST" {
                agent.post(&url)
            } else {
                agent.put(&url)
            };
            if let Some(a) = &auth {
                req = req.header("Authorization", a);
            }
            match body {
                Some(b) => req.send_json(b),
                None => req.send_empty(),
            }
        }
        m => panic!("method {m}"),
    };
    let mut resp = res?;
    let status = resp.status().as_u16();
    let text = resp.body_mut().read_to_string().unwrap_or_default();
    Ok((status, text))
}

// ------------------------------------------------------------------------------------------
// Tiny synchronous NBD client (fixed newstyle, NBD_OPT_GO, simple replies)
// ------------------------------------------------------------------------------------------

pub const NBD_CMD_READ: u16 = 0;
pub const NBD_CMD_WRITE: u16 = 1;
pub const NBD_CMD_DISC: u16 = 2;
pub const NBD_CMD_FLUSH: u16 = 3;
pub const NBD_CMD_TRIM: u16 = 4;
pub const NBD_CMD_WRITE_ZEROES: u16 = 6;
pub const NBD_CMD_FLAG_FUA: u16 = 1;

pub const NBD_FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const NBD_FLAG_SEND_FUA: u16 = 1 << 3;
pub const NBD_FLAG_SEND_TRIM: u16 = 1 << 5;
pub const NBD_FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const NBD_FLAG_CAN_MULTI_CONN: u16 = 1 << 8;

#[derive(Debug)]
pub enum NbdError {
    /// The server answered with this NBD error code (errno values: EIO 5, EINVAL 22, ENOSPC 28, ...).
    Server(u32),
    Io(std::io::Error),
    Protocol(String),
}

impl std::fmt::Display for NbdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NbdError::Server(e) => write!(f, "server error {e}"),
            NbdError::Io(e) => write!(f, "i/o: {e}"),
            NbdError::Protocol(s) => write!(f, "protocol: {s}"),
        }
    }
}

impl From<std::io::Error> for NbdError {
    fn from(e: std::io::Error) -> Self {
        NbdError::Io(e)
    }
}

pub struct NbdClient {
    sock: TcpStream,
    pub size: u64,
    pub flags: u16,
    cookie: u64,
}

const IHAVEOPT: u64 = 0x49484156454F5054;
const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const NBD_OPT_GO: u32 = 7;
const NBD_REP_ACK: u32 = 1;
const NBD_REP_INFO: u32 = 3;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

fn rd_u16(s: &mut TcpStream) -> std::io::Result<u16> {
    let mut b = [0u8; 2];
    s.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}
fn rd_u32(s: &mut TcpStream) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    s.read_exact(&mut b)?;
    Ok(u32::from_be_bytes(b))
}
fn rd_u64(s: &mut TcpStream) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    s.read_exact(&mut b)?;
    Ok(u64::from_be_bytes(b))
}

impl NbdClient {
    pub fn connect(addr: SocketAddr, export: &str) -> Result<NbdClient, NbdError> {
        let mut s = TcpStream::connect(addr)?;
        s.set_nodelay(true)?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        let magic = rd_u64(&mut s)?;
        if magic != u64::from_be_bytes(*b"NBDMAGIC") {
            return Err(NbdError::Protocol(format!("bad magic {magic:x}")));
        }
        let opt = rd_u64(&mut s)?;
        if opt != IHAVEOPT {
            return Err(NbdError::Protocol("server is not newstyle".into()));
        }
        let hflags = rd_u16(&mut s)?;
        if hflags & 1 == 0 {
            return Err(NbdError::Protocol("server is not fixed newstyle".into()));
        }
        let no_zeroes = hflags & 2 != 0;
        let cflags: u32 = 1 | if no_zeroes { 2 } else { 0 };
        s.write_all(&cflags.to_be_bytes())?;
        // NBD_OPT_GO with the export name and a request for NBD_INFO_BLOCK_SIZE.
        let mut data = Vec::new();
        data.extend_from_slice(&(export.len() as u32).to_be_bytes());
        data.extend_from_slice(export.as_bytes());
        data.extend_from_slice(&1u16.to_be_bytes());
        data.extend_from_slice(&3u16.to_be_bytes());
        let mut msg = Vec::new();
        msg.extend_from_slice(&IHAVEOPT.to_be_bytes());
        msg.extend_from_slice(&NBD_OPT_GO.to_be_bytes());
        msg.extend_from_slice(&(data.len() as u32).to_be_bytes());
        msg.extend_from_slice(&data);
        s.write_all(&msg)?;
        let mut size = None;
        let mut flags = 0u16;
        loop {
            let m = rd_u64(&mut s)?;
            if m != OPT_REPLY_MAGIC {
                return Err(NbdError::Protocol(format!("bad option reply magic {m:x}")));
            }
            let _opt = rd_u32(&mut s)?;
            let typ = rd_u32(&mut s)?;
            let len = rd_u32(&mut s)? as usize;
            let mut payload = vec![0u8; len];
            s.read_exact(&mut payload)?;
            if typ & 0x8000_0000 != 0 {
                return Err(NbdError::Protocol(format!(
                    "NBD_OPT_GO({export}) refused: reply type {typ:#x} {}",
                    String::from_utf8_lossy(&payload)
                )));
            }
            if typ == NBD_REP_INFO
                && payload.len() >= 12
                && u16::from_be_bytes([payload[0], payload[1]]) == 0
            {
                size = Some(u64::from_be_bytes(payload[2..10].try_into().unwrap()));
                flags = u16::from_be_bytes([payload[10], payload[11]]);
            }
            if typ == NBD_REP_ACK {
                break;
            }
        }
        let size =
            size.ok_or_else(|| NbdError::Protocol("no NBD_INFO_EXPORT before ACK".into()))?;
        Ok(NbdClient {
            sock: s,
            size,
            flags,
            cookie: 1,
        })
    }

    fn request(
        &mut self,
        typ: u16,
        cflags: u16,
        offset: u64,
        len: u32,
        data: &[u8],
    ) -> Result<Vec<u8>, NbdError> {
        let cookie = self.cookie;
        self.cookie += 1;
        let mut msg = Vec::with_capacity(28 + data.len());
        msg.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        msg.extend_from_slice(&cflags.to_be_bytes());
        msg.extend_from_slice(&typ.to_be_bytes());
        msg.extend_from_slice(&cookie.to_be_bytes());
        msg.extend_from_slice(&offset.to_be_bytes());
        msg.extend_from_slice(&len.to_be_bytes());
        msg.extend_from_slice(data);
        self.sock.write_all(&msg)?;
        let magic = rd_u32(&mut self.sock)?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(NbdError::Protocol(format!(
                "unexpected reply magic {magic:#x}"
            )));
        }
        let err = rd_u32(&mut self.sock)?;
        let c = rd_u64(&mut self.sock)?;
        if c != cookie {
            return Err(NbdError::Protocol(format!("reply cookie {c} != {cookie}")));
        }
        if err != 0 {
            return Err(NbdError::Server(err));
        }
        if typ == NBD_CMD_READ {
            let mut buf = vec![0u8; len as usize];
            self.sock.read_exact(&mut buf)?;
            return Ok(buf);
        }
        Ok(Vec::new())
    }

    pub fn read(&mut self, offset: u64, len: u32) -> Result<Vec<u8>, NbdError> {
        self.request(NBD_CMD_READ, 0, offset, len, &[])
    }
    pub fn write(&mut self, offset: u64, data: &[u8]) -> Result<(), NbdError> {
        self.request(NBD_CMD_WRITE, 0, offset, data.len() as u32, data)
            .map(|_| ())
    }
    pub fn write_fua(&mut self, offset: u64, data: &[u8]) -> Result<(), NbdError> {
        self.request(
            NBD_CMD_WRITE,
            NBD_CMD_FLAG_FUA,
            offset,
            data.len() as u32,
            data,
        )
        .map(|_| ())
    }
    pub fn flush(&mut self) -> Result<(), NbdError> {
        self.request(NBD_CMD_FLUSH, 0, 0, 0, &[]).map(|_| ())
    }
    pub fn trim(&mut self, offset: u64, len: u32) -> Result<(), NbdError> {
        self.request(NBD_CMD_TRIM, 0, offset, len, &[]).map(|_| ())
    }
    pub fn write_zeroes(&mut self, offset: u64, len: u32) -> Result<(), NbdError> {
        self.request(NBD_CMD_WRITE_ZEROES, 0, offset, len, &[])
            .map(|_| ())
    }
    pub fn disconnect(mut self) {
        let _ = self.request_no_reply(NBD_CMD_DISC);
    }
    fn request_no_reply(&mut self, typ: u16) -> std::io::Result<()> {
        let mut msg = Vec::new();
        msg.extend_from_slice(&REQUEST_MAGIC.to_be_bytes());
        msg.extend_from_slice(&0u16.to_be_bytes());
        msg.extend_from_slice(&typ.to_be_bytes());
        msg.extend_from_slice(&0u64.to_be_bytes());
        msg.extend_from_slice(&0u64.to_be_bytes());
        msg.extend_from_slice(&0u32.to_be_bytes());
        self.sock.write_all(&msg)
    }
}

/// Runs `weft ARGS` on a pseudo-terminal (util-linux `script`), typing `answer`.
pub fn on_terminal(srv: &Server, args: &[&str], answer: &str) -> Option<(Option<i32>, String)> {
    let script = which("script")?;
    let mut line = format!(
        "{} --data-dir {}",
        weft_bin().display(),
        srv.data_dir.display()
    );
    for a in args {
        line.push(' ');
        line.push_str(a);
    }
    let mut child = Command::new(script)
        .args(["-q", "-e", "-c", &line, "/dev/null"])
        .env_remove("WEFT_API")
        .env_remove("WEFT_TOKEN")
        .env_remove("WEFT_DATA_DIR")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run script");
    let mut stdin = child.stdin.take().unwrap();
    // Typed once the question is up (script forwards it to the terminal's input).
    std::thread::sleep(Duration::from_millis(500));
    let _ = stdin.write_all(answer.as_bytes());
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`weft {}` on a terminal did not finish", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((status.code(), text))
}

// ------------------------------------------------------------------------------------------
// fio
// ------------------------------------------------------------------------------------------

/// `fio --ioengine=nbd --uri=URI ARGS...` in `cwd`, with a time limit.
pub fn fio(cwd: &Path, uri: &str, args: &[String], timeout: Duration) -> CmdOut {
    let mut cmd = fio_cmd(cwd, uri, args);
    Bg::spawn_group(&mut cmd).wait(timeout)
}

pub fn fio_cmd(cwd: &Path, uri: &str, args: &[String]) -> Command {
    let mut cmd = Command::new(require_tool("fio"));
    cmd.current_dir(cwd)
        .arg("--ioengine=nbd")
        .arg(format!("--uri={uri}"))
        .args(args);
    cmd
}

pub fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// fio prints `verify:` lines and `err=` for failures; exit 0 and no such lines means pass.
pub fn assert_fio_ok(out: &CmdOut, what: &str) {
    let all = out.all();
    let bad_verify = all.lines().any(|l| {
        l.starts_with("verify:") || l.contains("bad magic") || l.contains("crc32c: verify failed")
    });
    if !out.success() || bad_verify {
        panic!(
            "fio {what} failed ({}):\n$ {}\n{}",
            out.describe(),
            out.cmdline,
            all
        );
    }
}

/// Reads a whole export into a file with qemu-img (raw), returning the bytes.
pub fn qemu_img_read_all(uri: &str, dest: &Path) -> Vec<u8> {
    run(
        Command::new(require_tool("qemu-img"))
            .args(["convert", "-f", "raw", "-O", "raw", uri])
            .arg(dest),
        Duration::from_secs(300),
    )
    .ok();
    fs::read(dest).unwrap()
}

/// `nbdinfo --json URI` parsed; panics with its output otherwise.
pub fn nbdinfo_json(uri: &str) -> Value {
    let out = run(
        Command::new(require_tool("nbdinfo")).arg("--json").arg(uri),
        Duration::from_secs(60),
    )
    .ok();
    serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("nbdinfo --json output is not JSON ({e}):\n{}", out.stdout))
}

/// First differing offset of two buffers, for messages.
pub fn first_diff(a: &[u8], b: &[u8]) -> Option<usize> {
    if a.len() != b.len() {
        return Some(a.len().min(b.len()));
    }
    a.iter().zip(b).position(|(x, y)| x != y)
}

// ------------------------------------------------------------------------------------------
// iSCSI clients
// ------------------------------------------------------------------------------------------

/// How long one libiscsi or qemu tool may run.
pub const ISCSI_TOOL_TIMEOUT: Duration = Duration::from_secs(120);

/// Run a client tool (libiscsi's, qemu's) to completion, bounded.
pub fn tool(name: &str, args: &[&str]) -> CmdOut {
    let mut cmd = Command::new(require_tool(name));
    cmd.args(args);
    run(&mut cmd, ISCSI_TOOL_TIMEOUT)
}

/// qemu's iSCSI driver is a module from qemu-block-extra, of the very version of qemu-utils:
/// fail with the fix when it does not load. `qemu-img --help` lists iscsi even then, so this
/// opens an iSCSI URL on a closed loopback port, as `scripts/qemu-iscsi-ok.sh` does: a driver
/// that loads reports an iSCSI connection error; a missing one "Unable to load module iscsi"
/// (qemu 10) or "Unknown protocol 'iscsi'" (qemu 7.2).
pub fn require_qemu_iscsi() {
    // A port nobody listens on: bound, then released.
    let port = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("iscsi://127.0.0.1:{port}/iqn.2000-01.invalid:require-qemu-iscsi/0");
    let mut cmd = Command::new(require_tool("qemu-img"));
    cmd.arg("info").arg(&url);
    let out = run(&mut cmd, Duration::from_secs(20));
    let all = out.all();
    let fix = "qemu-img's iSCSI driver does not load: qemu-block-extra is missing or not the \
               version of qemu-utils; fix: run scripts/install-qemu.sh as root (installs a \
               matching qemu-utils + qemu-block-extra pair), scripts/qemu-iscsi-ok.sh checks it";
    let missing = [
        "Unable to load module",
        "Unknown protocol",
        "Unknown driver",
        "Must specify either driver or file",
        "Failed to initialize module",
    ];
    if missing.iter().any(|m| all.contains(m)) {
        panic!("{fix}\n{}: {}\n{all}", out.cmdline, out.describe());
    }
    // Still trying to connect when killed, or an iSCSI connection error: the driver ran.
    let loaded = out.timed_out || (!out.success() && all.contains("iSCSI"));
    assert!(
        loaded,
        "{fix}\n(unexpected answer from {}: {})\n{all}",
        out.cmdline,
        out.describe()
    );
}

/// The export names of an `nbdinfo --list --json` run, sorted (panics on output that is not
/// its JSON).
pub fn nbdinfo_export_names(out: &CmdOut) -> Vec<String> {
    let v: Value = serde_json::from_str(&out.stdout)
        .unwrap_or_else(|e| panic!("nbdinfo --json ({e}):\n{}", out.all()));
    let mut names: Vec<String> = v["exports"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["export-name"].as_str().map(str::to_string))
        .collect();
    names.sort();
    names
}

/// `df -B1 --output=size,avail PATH`: (size, available to a writer without root).
pub fn df(path: &std::path::Path) -> (u64, u64) {
    let out = run(
        Command::new(require_tool("df"))
            .args(["-B1", "--output=size,avail"])
            .arg(path),
        Duration::from_secs(30),
    )
    .ok();
    let line = out
        .stdout
        .lines()
        .nth(1)
        .expect("df prints a header and a line");
    let mut fields = line
        .split_whitespace()
        .map(|f| f.parse::<u64>().expect("a number"));
    (fields.next().expect("size"), fields.next().expect("avail"))
}
