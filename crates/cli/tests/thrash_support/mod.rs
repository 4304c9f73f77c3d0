//! The thrasher (`tests/thrash.rs`): verified load on a real cluster while random faults are
//! injected, like Ceph's thrashosds or Jepsen's nemesis.
//!
//! - `block`: the versioned 4 KiB block (image tag, lba, version, derived content);
//! - `model`: what each block of each volume, clone and snapshot may read, and the verdict;
//! - `writer`: one writer thread per writable image over NBD, reconnecting across c.node
//!   restarts, pausable for checks;
//! - `verify`: read everything and judge it against the model;
//! - `proxy`: a TCP proxy between the c.node and a d.node for latency, partitions and resets;
//! - `thrasher`: the cluster and the steps (kill, restart, check, heal);
//! - `faults`, `faults_io`, `faults_fio`: the faults; `schedule`: which comes next;
//! - `log`: the event log.
//!
//! It reuses `cluster_support` (processes as `Bg`, killed by pid on drop; free ports; bounded
//! waits) and `common` (the NBD client).
#![allow(dead_code)]

pub mod block;
pub mod faults;
pub mod faults_fio;
pub mod faults_io;
pub mod log;
pub mod model;
pub mod proxy;
pub mod schedule;
pub mod thrasher;
pub mod verify;
pub mod writer;
