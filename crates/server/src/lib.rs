//! The c.node daemon: front ends (NBD, iSCSI), the management API, and the glue that drives the engine.

mod accept;
pub mod access;
pub mod api;
pub mod api_proxy;
pub mod backend;
pub mod capacity;
pub mod cluster;
pub mod cluster_tokens;
mod data_files;
pub mod engine_backend;
mod front_ends;
pub mod ha;
pub mod io_stats;
pub mod iscsi_listener;
pub mod metrics;
pub mod nbd_listener;
pub mod qos;
pub mod recovering;
pub mod reservation_records;
pub mod serve;
pub mod sessions;
pub mod snapshot_scheduler;
pub mod sub_block;
pub mod target_port_groups;
pub mod tiering;
pub mod web_ui;
mod workers;
