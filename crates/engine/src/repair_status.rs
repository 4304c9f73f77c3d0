//! What the repairer reports ([`RepairStatus`]) and how API calls reach it
//! ([`RepairControl`]); the repairer itself is in [`crate::repair`].

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// What the repairer has done and is doing.
#[derive(Debug, Clone, Serialize, Deserialize, Default, utoipa::ToSchema)]
pub struct RepairStatus {
    /// A scan is rebuilding chunks now.
    pub running: bool,
    pub scans: u64,
    /// Stripes the last (or current) scan looked at.
    pub stripes_checked: u64,
    /// Chunks the current scan found missing or corrupt, and how many of them are done.
    pub chunks_to_rebuild: u64,
    pub chunks_rebuilt: u64,
    pub chunks_failed: u64,
    /// Since start.
    pub chunks_rebuilt_total: u64,
    pub bytes_rebuilt_total: u64,
    /// Rebuild rate limit.
    pub rate_limit_bytes_per_s: u64,
    /// Measured over the current scan.
    pub rate_bytes_per_s: u64,
    /// Estimated seconds until the current scan finishes.
    pub eta_s: Option<u64>,
    /// The placement generation the last finished scan started at.
    pub scanned_generation: u64,
    /// d.nodes (in use, not out) the last scan could not list: whatever they miss is not
    /// known, so the repairer has not caught up until a scan lists them all.
    #[serde(default)]
    pub unlisted: Vec<String>,
    /// A scan started after the placement's last change has finished, listed every d.node in
    /// use and rebuilt everything it found missing.
    pub caught_up: bool,
}

/// Shared between the repairer thread and API calls.
#[derive(Debug, Default)]
pub(crate) struct RepairControl {
    pub status: Mutex<RepairStatus>,
    /// Run a scan now (an operator asked, or a read found a corrupt chunk).
    pub kick: std::sync::atomic::AtomicBool,
    /// The stripe store's count of chunks missed at write when the last scan started: a
    /// stripe written degraded after that is not in the scan's listings, so the repairer has
    /// not caught up until a later scan starts.
    pub missed_at_write_seen: std::sync::atomic::AtomicU64,
}
