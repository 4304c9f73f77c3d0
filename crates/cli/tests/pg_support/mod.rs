//! A PostgreSQL server on a data dir for end-to-end tests: Debian's binaries, run as the
//! `postgres` user (initdb and the server refuse root), stopped at once on drop (also when the
//! test panics), and the checks a crash-consistent image must pass: the TPC-B sums of
//! pgbench agree and amcheck finds every B-tree index consistent with its table.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::common::*;

/// A PostgreSQL server binary of Debian's newest installed version (`initdb`, `pg_ctl`, ...).
pub fn pg_bin(name: &str) -> PathBuf {
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin").join(name)))
        })
        .filter(|(_, p)| p.is_file())
        .collect();
    versions.sort();
    versions.pop().map(|(_, p)| p).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's `{name}` is not installed (Debian package `postgresql`); \
             .ci/run installs it: apt-get install -y postgresql"
        )
    })
}

/// `BIN` as the `postgres` user.
pub fn as_postgres(bin: &Path) -> Command {
    let mut cmd = Command::new("runuser");
    cmd.args(["-u", "postgres", "--"]).arg(bin);
    cmd
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

/// A free loopback TCP port (bound and released).
pub fn free_tcp_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub struct Postgres {
    pub data: PathBuf,
    pub log: PathBuf,
    pub port: u16,
    running: bool,
}

impl Postgres {
    /// `pg_ctl start`; `Err` with the server log's tail when it does not start.
    pub fn try_start(data: &Path, log: &Path, port: u16) -> Result<Postgres, String> {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {port} -c unix_socket_directories='' \
             -c max_wal_size=256MB -c min_wal_size=64MB -c shared_buffers=32MB"
        );
        let out = run(
            as_postgres(&pg_bin("pg_ctl"))
                .args(["start", "-w", "-t", "120", "-D"])
                .arg(data)
                .arg("-l")
                .arg(log)
                .args(["-o", &opts]),
            Duration::from_secs(150),
        );
        let pg = Postgres {
            data: data.to_path_buf(),
            log: log.to_path_buf(),
            port,
            running: out.success(),
        };
        if out.success() {
            Ok(pg)
        } else {
            Err(format!(
                "{}\n--- server log ---\n{}",
                out.all(),
                tail(&fs::read_to_string(log).unwrap_or_default(), 4000)
            ))
        }
    }

    pub fn start(data: &Path, log: &Path, port: u16) -> Postgres {
        Postgres::try_start(data, log, port)
            .unwrap_or_else(|e| panic!("PostgreSQL did not start: {e}"))
    }

    /// `psql -Atc SQL`: its output, or its error.
    pub fn try_query(&self, sql: &str) -> Result<String, String> {
        let out = run(
            Command::new(pg_bin("psql"))
                .args(["-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"])
                .arg("-p")
                .arg(self.port.to_string())
                .args(["-v", "ON_ERROR_STOP=1", "-Atc", sql]),
            Duration::from_secs(300),
        );
        if out.success() {
            Ok(out.stdout.trim().to_string())
        } else {
            Err(out.all())
        }
    }

    pub fn query(&self, sql: &str) -> String {
        self.try_query(sql).unwrap_or_else(|e| {
            panic!(
                "psql `{sql}` failed: {e}\n--- server log ---\n{}",
                tail(&fs::read_to_string(&self.log).unwrap_or_default(), 4000)
            )
        })
    }

    pub fn pgbench(&self) -> Command {
        let mut cmd = Command::new(pg_bin("pgbench"));
        cmd.args(["-h", "127.0.0.1", "-U", "postgres"])
            .arg("-p")
            .arg(self.port.to_string());
        cmd
    }

    /// The four TPC-B sums (accounts, tellers, branches, history), which agree in any
    /// committed state: every transaction adds one delta to each.
    pub fn tpcb_sums(&self) -> Result<Vec<String>, String> {
        let sums = self.try_query(
            "SELECT (SELECT sum(abalance) FROM pgbench_accounts) || ',' || \
                    (SELECT sum(tbalance) FROM pgbench_tellers) || ',' || \
                    (SELECT sum(bbalance) FROM pgbench_branches) || ',' || \
                    (SELECT coalesce(sum(delta), 0) FROM pgbench_history)",
        )?;
        Ok(sums.split(',').map(str::to_string).collect())
    }

    /// amcheck over every permanent B-tree index (heapallindexed): how many were checked, or
    /// the first error.
    pub fn amcheck(&self) -> Result<String, String> {
        self.try_query("CREATE EXTENSION IF NOT EXISTS amcheck")?;
        self.try_query(
            "SELECT count(bt_index_check(c.oid, true)) FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam \
             WHERE a.amname = 'btree' AND c.relpersistence <> 't'",
        )
    }

    /// Whether its log says it ran crash recovery (redo) at start.
    pub fn recovered(&self) -> bool {
        let log = fs::read_to_string(&self.log).unwrap_or_default();
        log.contains("redo starts") || log.contains("was interrupted")
    }

    /// A clean stop (`pg_ctl stop -m fast`).
    pub fn stop(&mut self) {
        if !self.running {
            return;
        }
        let out = run(
            as_postgres(&pg_bin("pg_ctl"))
                .args(["stop", "-m", "fast", "-w", "-t", "120", "-D"])
                .arg(&self.data),
            Duration::from_secs(150),
        );
        assert!(out.success(), "pg_ctl stop failed: {}", out.all());
        self.running = false;
    }

    /// Stop it at once, as a crash would (`pg_ctl stop -m immediate`, then SIGKILL of the
    /// postmaster if that did not work).
    pub fn crash(&mut self) {
        if !self.running {
            return;
        }
        self.running = false;
        let _ = run(
            as_postgres(&pg_bin("pg_ctl"))
                .args(["stop", "-m", "immediate", "-w", "-t", "20", "-D"])
                .arg(&self.data),
            Duration::from_secs(30),
        );
        let pid = fs::read_to_string(self.data.join("postmaster.pid"))
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()));
        if let Some(pid) = pid {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        self.crash();
    }
}
