//! Quality of service per volume: limits (IOPS in 4 KiB units and bytes per second, reads
//! and writes together or apart, each with a burst), a minimum share, and a p99 latency
//! target held by capping the volumes with no target or a looser one.
//!
//! Enforced where every I/O of a volume meets, on the c.node that owns it: the engine
//! backend wraps each opened export in [`QosExport`], so NBD, iSCSI and requests forwarded by
//! other c.nodes all take from the same buckets. The settings live in the catalog with the
//! volume (`weft_engine::qos_settings`); [`QosRegistry`] follows them and runs the latency
//! controller. See docs/ARCHITECTURE.md, "Quality of service".

pub mod bucket;
pub mod controller;
mod export;
mod received;
mod registry;
mod volume;

pub use export::QosExport;
pub use received::serve_received;
pub use registry::{QosRegistry, TICK};
pub use volume::{Direction, QosState, VolumeQos};
