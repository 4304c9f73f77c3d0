//! The c.node daemon: front ends (NBD), the management API, and the glue that drives the engine.

pub mod backend;
pub mod nbd_listener;
