//! Integration tests of the d.node and its client, in one process over loopback: every request
//! round trip, pipelining, a dead and restarted d.node, hostile bytes, and registration in the
//! metadata store (embedded, and a real etcd when one is installed).

mod failures;
mod pipelining;
mod registration;
mod round_trip;
mod support;
