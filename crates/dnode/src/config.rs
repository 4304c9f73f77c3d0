//! [`DnodeConfig`]: everything a d.node is started with, its defaults and its validation (done
//! once, in [`crate::Dnode::start`]). Plain data, no I/O.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use weft_proto::{DISKS_MAX, NAME_MAX_BYTES};

use crate::error::DnodeError;
use crate::server::CONNECTIONS_MAX;

/// Default lease of the registration: a d.node that dies disappears from the cluster this long
/// after its last keep-alive. Short enough for quick failover, long enough to ride out an etcd
/// leader election (~1-2 s).
pub const LEASE_TTL_DEFAULT: Duration = Duration::from_millis(10_000);
/// Shortest lease accepted: etcd's own minimum with default settings is 2 s (weft-meta).
pub const LEASE_TTL_MIN: Duration = Duration::from_millis(1_000);
/// Default interval between refreshes of the disk usage in the registration record: placement
/// needs fresh-ish numbers, etcd should not see a write per second per d.node.
pub const STAT_INTERVAL_DEFAULT: Duration = Duration::from_millis(30_000);
/// Default worker threads executing requests: requests block on fsync and reads, so more than
/// the cores; 16 keeps several disks and pipelined clients busy.
pub const WORKERS_DEFAULT: usize = 16;
/// Most worker threads: beyond this, threads cost more than the disks can give back.
pub const WORKERS_MAX: usize = 256;

/// How to run a d.node.
#[derive(Debug, Clone)]
pub struct DnodeConfig {
    /// The cluster this d.node belongs to; clients of another cluster are refused. At most 255
    /// bytes, not empty.
    pub cluster_id: String,
    /// Where to listen; port 0 picks a free port (see [`crate::Dnode::local_addr`]).
    pub listen: SocketAddr,
    /// The address c.nodes are told to connect to (in the registration record). Default: the
    /// bound address, which is useless to others when `listen` is a wildcard (0.0.0.0).
    pub advertise: Option<SocketAddr>,
    /// One per disk; the first also holds the node id file. At least one, at most 256.
    pub data_dirs: Vec<PathBuf>,
    /// Failure domain (rack, room), for placement. Free text, at most 255 bytes.
    pub zone: String,
    /// Storage tier (`performance`, `capacity`, a name), for placement of tiered pools; empty:
    /// none said. At most 255 bytes.
    pub tier: String,
    /// Most bytes of chunk files per data dir; `None`: until the file system is full.
    pub capacity_bytes: Option<u64>,
    /// Read chunks with O_DIRECT (bypass the page cache).
    pub direct_io: bool,
    /// Lease of the registration record. Default [`LEASE_TTL_DEFAULT`], at least
    /// [`LEASE_TTL_MIN`].
    pub lease_ttl: Duration,
    /// Interval between refreshes of disk usage in the registration record. Default
    /// [`STAT_INTERVAL_DEFAULT`].
    pub stat_interval: Duration,
    /// Interval between background scrubs of every chunk; `None`: only on request.
    pub scrub_interval: Option<Duration>,
    /// Worker threads executing requests. Default [`WORKERS_DEFAULT`], at most [`WORKERS_MAX`].
    pub workers: usize,
    /// Connections served at once; more are refused with `Unavailable`. Default and maximum
    /// [`CONNECTIONS_MAX`] (tests lower it to reach the limit).
    pub connections_max: usize,
}

impl DnodeConfig {
    /// A config with every optional field at its default.
    pub fn new(cluster_id: impl Into<String>, listen: SocketAddr, data_dirs: Vec<PathBuf>) -> Self {
        DnodeConfig {
            cluster_id: cluster_id.into(),
            listen,
            advertise: None,
            data_dirs,
            zone: String::new(),
            tier: String::new(),
            capacity_bytes: None,
            direct_io: false,
            lease_ttl: LEASE_TTL_DEFAULT,
            stat_interval: STAT_INTERVAL_DEFAULT,
            scrub_interval: None,
            workers: WORKERS_DEFAULT,
            connections_max: CONNECTIONS_MAX,
        }
    }

    pub(crate) fn validate(&self) -> Result<(), DnodeError> {
        let bad = |field, reason: String| Err(DnodeError::Config { field, reason });
        if self.cluster_id.is_empty() || self.cluster_id.len() > NAME_MAX_BYTES {
            return bad(
                "cluster_id",
                format!(
                    "must be 1 to {NAME_MAX_BYTES} bytes, is {}",
                    self.cluster_id.len()
                ),
            );
        }
        if self.data_dirs.is_empty() || self.data_dirs.len() > DISKS_MAX {
            return bad(
                "data_dirs",
                format!("need 1 to {DISKS_MAX}, got {}", self.data_dirs.len()),
            );
        }
        if self.zone.len() > NAME_MAX_BYTES {
            return bad("zone", format!("longer than {NAME_MAX_BYTES} bytes"));
        }
        if self.tier.len() > NAME_MAX_BYTES {
            return bad("tier", format!("longer than {NAME_MAX_BYTES} bytes"));
        }
        if self.lease_ttl < LEASE_TTL_MIN {
            return bad(
                "lease_ttl",
                format!(
                    "{} ms is under the {} ms minimum",
                    self.lease_ttl.as_millis(),
                    LEASE_TTL_MIN.as_millis()
                ),
            );
        }
        if self.stat_interval.is_zero() {
            return bad("stat_interval", "must be positive".into());
        }
        if self.scrub_interval.is_some_and(|i| i.is_zero()) {
            return bad("scrub_interval", "must be positive".into());
        }
        if self.workers == 0 || self.workers > WORKERS_MAX {
            return bad(
                "workers",
                format!("must be 1 to {WORKERS_MAX}, is {}", self.workers),
            );
        }
        if self.connections_max == 0 || self.connections_max > CONNECTIONS_MAX {
            return bad(
                "connections_max",
                format!(
                    "must be 1 to {CONNECTIONS_MAX}, is {}",
                    self.connections_max
                ),
            );
        }
        if self.capacity_bytes == Some(0) {
            return bad("capacity_bytes", "must be positive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate_and_bad_fields_are_named() {
        let ok = DnodeConfig::new(
            "c1",
            "127.0.0.1:0".parse().expect("addr"),
            vec!["/tmp/x".into()],
        );
        ok.validate().expect("defaults are valid");
        type Breaker = fn(&mut DnodeConfig);
        let cases: [(&str, Breaker); 4] = [
            ("cluster_id", |c| c.cluster_id.clear()),
            ("data_dirs", |c| c.data_dirs.clear()),
            ("lease_ttl", |c| c.lease_ttl = Duration::from_millis(10)),
            ("workers", |c| c.workers = 0),
        ];
        for (field, break_it) in cases {
            let mut c = ok.clone();
            break_it(&mut c);
            match c.validate() {
                Err(DnodeError::Config { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }
}
