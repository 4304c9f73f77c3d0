//! Thrashing: a real cluster (etcd, 7 `weft dnode`, one `weft cnode`, all on 127.0.0.1) under
//! verified load while faults picked by a seeded rng hit it, like Ceph's thrashosds or Jepsen's
//! nemesis. See `thrash_support/` for the pieces and docs/TESTING.md for how to run it.
//!
//! The load: a writer of versioned 4 KiB blocks on vol0, vol1 and a clone k1 of a snapshot of
//! vol0, each over its own NBD connection, and snapshots taken under load. After each fault
//! (and while it holds) every block of every image is read and must be:
//! - its last acknowledged-and-flushed version or a later acknowledged one (or the one write
//!   that was in flight), never an older, torn or foreign one; while the c.node that acked a
//!   write runs, at least that write (read your writes);
//! - for a snapshot, a version between what was acknowledged before it was taken and what was
//!   issued when it returned, and the same on every read;
//! - readable while at most m (2) d.nodes are down; EIO or the right bytes while more are.
//! A client (writer) must see no error while at most m d.nodes are down and the c.node is up.
//!
//! The faults (each undone and healed before the next): kill -9 of 1-2 d.nodes (with GC, a
//! checkpoint, a snapshot or a c.node restart meanwhile), of 3 d.nodes, of 3 d.nodes and then
//! the c.node (restarted while they are down), of the c.node; SIGSTOP of a d.node; etcd killed
//! and restarted; bytes flipped in chunk files, then scrub and repair; `weft dnode out`/`in`;
//! GC, checkpoint, sync, scrub, repair; a d.node's disk full (`--capacity`); latency, a
//! partition or resets between the c.node and a d.node (a proxy); snapshots (and deletes).
//!
//! Knobs: `WEFT_THRASH_SEED` (replay a run: the same faults in the same order with the same
//! targets; the timing, so what the writers had written when a fault hit, differs),
//! `WEFT_THRASH_SECS` (default 240: faults start until then, then a last heal and check),
//! `WEFT_THRASH_EVENTS` (stop after that many faults).

mod cluster_support;
mod common;
mod thrash_support;

use cluster_support::serial;
use thrash_support::thrasher::{Config, Thrasher};

#[test]
fn thrash_cluster_with_random_faults() {
    let _serial = serial();
    let mut t = Thrasher::start(Config::from_env());
    t.run();
    t.finish();
}
