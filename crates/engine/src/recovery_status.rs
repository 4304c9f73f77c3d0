//! What recovery is waiting for, readable by the server while the engine is not open yet:
//! stripes recovery can neither read nor prove torn (see `recovery` and
//! `docs/design/on-disk.md`, "What may delete what, and on which proof"), and the d.nodes
//! whose return would settle them.

use std::sync::Arc;

use parking_lot::Mutex;
use serde::Serialize;

/// One stripe recovery may neither replay nor discard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct BlockedStripe {
    pub family: u64,
    pub segment: u64,
    /// Distinct chunks the stores that answered hold, and how many a read needs.
    pub chunks_found: u8,
    pub chunks_needed: u8,
    /// Why it may not be discarded.
    pub why: String,
}

/// Why recovery cannot finish yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct RecoveryWait {
    /// The first blocked stripe of every family that has one.
    pub stripes: Vec<BlockedStripe>,
    /// Chunk stores (d.nodes) that did not answer the listings: recovery completes when
    /// enough of them are back.
    pub waiting_for: Vec<String>,
    /// When recovery started waiting, in seconds since the Unix epoch.
    pub since_unix_s: u64,
    /// Listing rounds so far.
    pub attempts: u64,
}

impl std::fmt::Display for RecoveryWait {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} stripe(s) can be neither read nor proven torn (",
            self.stripes.len()
        )?;
        for (i, s) in self.stripes.iter().take(4).enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(
                f,
                "family {} segment {}: {} of {} chunks",
                s.family, s.segment, s.chunks_found, s.chunks_needed
            )?;
        }
        write!(f, "); waiting for d.nodes: ")?;
        if self.waiting_for.is_empty() {
            write!(
                f,
                "none listed (a d.node answered the listing but not the read)"
            )
        } else {
            write!(f, "{}", self.waiting_for.join(", "))
        }
    }
}

/// Shared between recovery (which writes it) and whoever reports on it.
#[derive(Debug, Clone, Default)]
pub struct RecoveryStatus(Arc<Mutex<Option<RecoveryWait>>>);

impl RecoveryStatus {
    /// What recovery waits for now; `None` when it is not waiting (not started, running,
    /// or done).
    pub fn waiting(&self) -> Option<RecoveryWait> {
        self.0.lock().clone()
    }

    pub(crate) fn set(&self, wait: Option<RecoveryWait>) {
        *self.0.lock() = wait;
    }
}
