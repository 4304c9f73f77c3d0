//! Test kit for this crate's and other crates' tests: [`EtcdServer`] runs a throwaway
//! single-member etcd on 127.0.0.1 (free ports, a temporary data dir) and kills it on drop.
//!
//! It needs the `etcd` binary: Debian's `etcd-server` package (scripts/test.sh installs it), or
//! a path in `WEFT_ETCD_BIN`.

use std::fs::File;
use std::io::{Read as _, Seek as _, SeekFrom};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{EtcdMetaStore, MetaError};

/// An environment variable naming the etcd binary to run instead of `etcd` from PATH.
pub const ETCD_BIN_ENV: &str = "WEFT_ETCD_BIN";
/// How long [`EtcdServer::start`] waits for etcd to answer before giving up.
pub const ETCD_READY_TIMEOUT: Duration = Duration::from_millis(10_000);
/// The request timeout of the stores [`EtcdServer::connect`] makes.
pub const TEST_REQUEST_TIMEOUT: Duration = Duration::from_millis(3_000);
const READY_POLL_INTERVAL: Duration = Duration::from_millis(50);
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// Starts retried with fresh ports (another process may grab a port we picked).
const START_ATTEMPTS_MAX: u32 = 3;
const LOG_TAIL_BYTES: u64 = 2_000;
const MEMBER_NAME: &str = "weft-test";
const INSTALL_HINT: &str = "install Debian's etcd-server package (apt-get install -y etcd-server; scripts/test.sh does it) or set WEFT_ETCD_BIN to an etcd binary";

/// A running etcd for tests. Dropping it (also when a test panics) kills the process and reaps it.
#[derive(Debug)]
pub struct EtcdServer {
    child: Option<Child>,
    binary: PathBuf,
    client_port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
}

/// The etcd binary: `$WEFT_ETCD_BIN`, else `etcd` on PATH.
pub fn etcd_binary() -> Option<PathBuf> {
    if let Some(bin) = std::env::var_os(ETCD_BIN_ENV) {
        return Some(PathBuf::from(bin));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("etcd"))
        .find(|p| p.is_file())
}

/// An `http://127.0.0.1:PORT` endpoint where nothing listens (for failover tests).
pub fn closed_endpoint() -> Result<String, MetaError> {
    Ok(format!("http://127.0.0.1:{}", free_ports::<1>()?[0]))
}

/// `N` distinct ports free right now on 127.0.0.1.
fn free_ports<const N: usize>() -> Result<[u16; N], MetaError> {
    let mut listeners = Vec::with_capacity(N);
    let mut ports = [0u16; N];
    for port in &mut ports {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| MetaError::io("127.0.0.1:0", e))?;
        *port = l
            .local_addr()
            .map_err(|e| MetaError::io("127.0.0.1:0", e))?
            .port();
        listeners.push(l);
    }
    Ok(ports)
}

impl EtcdServer {
    /// Start etcd and wait (at most [`ETCD_READY_TIMEOUT`]) until it serves requests.
    pub fn start() -> Result<EtcdServer, MetaError> {
        let binary = etcd_binary().ok_or_else(|| MetaError::Unavailable {
            endpoint: "etcd".into(),
            detail: format!("the etcd binary is not on PATH: {INSTALL_HINT}"),
        })?;
        let mut last = None;
        for _ in 0..START_ATTEMPTS_MAX {
            let [client_port, peer_port] = free_ports::<2>()?;
            let mut server = EtcdServer {
                child: None,
                binary: binary.clone(),
                client_port,
                peer_port,
                dir: tempfile::Builder::new()
                    .prefix("weft-etcd-")
                    .tempdir()
                    .map_err(|e| MetaError::io(std::env::temp_dir(), e))?,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    tracing::warn!(error = %e, "etcd did not start; retrying with other ports");
                    last = Some(e);
                }
            }
        }
        Err(last.unwrap_or_else(|| MetaError::Unavailable {
            endpoint: "etcd".into(),
            detail: "did not start".into(),
        }))
    }

    /// The cluster URL: `etcd://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.client_port)
    }

    /// The gateway endpoint: `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn client_port(&self) -> u16 {
        self.client_port
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The data directory (kept across [`EtcdServer::restart`]).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A store on this server with [`TEST_REQUEST_TIMEOUT`].
    pub fn connect(&self) -> Result<EtcdMetaStore, MetaError> {
        EtcdMetaStore::connect(&[self.endpoint()], TEST_REQUEST_TIMEOUT)
    }

    /// Kill the process (SIGKILL, as a crash) and reap it. Idempotent.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            if let Err(e) = child.kill() {
                tracing::warn!(pid = child.id(), error = %e, "cannot kill etcd");
            }
            if let Err(e) = child.wait() {
                tracing::warn!(pid = child.id(), error = %e, "cannot reap etcd");
            }
        }
    }

    /// Start etcd again on the same ports and data (after [`EtcdServer::kill`]).
    pub fn restart(&mut self) -> Result<(), MetaError> {
        self.kill();
        self.launch()
    }

    fn launch(&mut self) -> Result<(), MetaError> {
        let log_path = self.dir.path().join("etcd.log");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| MetaError::io(&log_path, e))?;
        let log2 = log.try_clone().map_err(|e| MetaError::io(&log_path, e))?;
        let client = self.endpoint();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--name")
            .arg(MEMBER_NAME)
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("{MEMBER_NAME}={peer}")])
            .args(["--logger", "zap", "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log2);
        // The caller's etcd settings must not leak into the test server.
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("ETCD_") {
                cmd.env_remove(name);
            }
        }
        let child = cmd.spawn().map_err(|e| MetaError::Unavailable {
            endpoint: self.endpoint(),
            detail: format!("cannot run {}: {e}; {INSTALL_HINT}", self.binary.display()),
        })?;
        self.child = Some(child);
        match self.wait_ready() {
            Ok(()) => Ok(()),
            Err(detail) => {
                self.kill();
                Err(MetaError::Unavailable {
                    endpoint: self.endpoint(),
                    detail: format!("{detail}; etcd log tail: {}", log_tail(&log_path)),
                })
            }
        }
    }

    /// Poll `/health` until it answers true, the process exits, or the deadline passes.
    fn wait_ready(&mut self) -> Result<(), String> {
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .http_status_as_error(false)
                .proxy(None)
                .timeout_global(Some(HEALTH_REQUEST_TIMEOUT))
                .build(),
        );
        let url = format!("{}/health", self.endpoint());
        let deadline = Instant::now() + ETCD_READY_TIMEOUT;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Err(format!("etcd exited at startup ({status})"));
                }
            }
            if let Ok(mut r) = agent.get(&url).call() {
                let body = r.body_mut().read_to_string().unwrap_or_default();
                if body.contains("\"health\":\"true\"") {
                    return Ok(());
                }
            }
            std::thread::sleep(READY_POLL_INTERVAL);
        }
        Err(format!(
            "etcd did not become healthy within {} ms",
            ETCD_READY_TIMEOUT.as_millis()
        ))
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The end of etcd's log, for error messages.
fn log_tail(path: &Path) -> String {
    let Ok(mut f) = File::open(path) else {
        return "(no log)".into();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)));
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    text
}
