//! The c.node daemon: front ends (NBD, iSCSI), the management API, and the glue that drives the engine.

mod accept;
pub mod access;
pub mod api;
pub mod backend;
pub mod capacity;
pub mod cluster;
pub mod engine_backend;
pub mod io_stats;
pub mod iscsi_listener;
pub mod metrics;
pub mod nbd_listener;
pub mod recovering;
pub mod serve;
pub mod sessions;
pub mod sub_block;
pub mod web_ui;
mod workers;
