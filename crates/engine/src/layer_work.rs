//! Layer operations (merge, drop) between the catalog that queues them and the checkpoint
//! that covers them: which layers have merges queued into them (trims of those layers wait),
//! big layers being dropped a slice per destage step, and the operations applied but not yet
//! covered by a durable checkpoint (they stay in the cluster state's pending list until then).

use std::collections::{HashMap, VecDeque};

use crate::metastore::PendingLayerOp;
use crate::units::{FamilyId, LayerId};

/// A big layer being dropped: the next LBA to release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Dropping {
    pub family: FamilyId,
    pub layer: LayerId,
    pub next_lba: u64,
}

#[derive(Debug, Default)]
pub(crate) struct LayerWork {
    /// Merges queued into each layer: trims of that layer wait until they are applied (a trim
    /// changes the map when it is buffered; the merge must see the map as of its turn).
    merging_into: HashMap<LayerId, usize>,
    dropping: VecDeque<Dropping>,
    /// Applied, waiting for a checkpoint to cover them.
    applied: Vec<PendingLayerOp>,
    /// Covered by a durable checkpoint: to leave the cluster state's pending list.
    covered: Vec<PendingLayerOp>,
}

impl LayerWork {
    pub fn merge_queued(&mut self, into: LayerId) {
        *self.merging_into.entry(into).or_default() += 1;
    }

    pub fn merge_dequeued(&mut self, into: LayerId) {
        if let Some(n) = self.merging_into.get_mut(&into) {
            *n -= 1;
            if *n == 0 {
                self.merging_into.remove(&into);
            }
        }
    }

    /// A merge into `layer` is queued and not yet applied.
    pub fn is_merging_into(&self, layer: LayerId) -> bool {
        self.merging_into.contains_key(&layer)
    }

    pub fn any_merge_queued(&self) -> bool {
        !self.merging_into.is_empty()
    }

    /// Queue a big layer to drop a slice at a time (once).
    pub fn drop_queued(&mut self, family: FamilyId, layer: LayerId) {
        if !self.dropping.iter().any(|d| d.layer == layer) {
            self.dropping.push_back(Dropping {
                family,
                layer,
                next_lba: 0,
            });
        }
    }

    /// The drop to advance next.
    pub fn next_drop(&self) -> Option<Dropping> {
        self.dropping.front().copied()
    }

    pub fn is_dropping(&self) -> bool {
        !self.dropping.is_empty()
    }

    /// The first drop released its slice up to `next_lba`.
    pub fn drop_advanced(&mut self, next_lba: u64) {
        if let Some(d) = self.dropping.front_mut() {
            d.next_lba = next_lba;
        }
    }

    /// The first drop is over (done, or its family is gone).
    pub fn drop_ended(&mut self) -> Option<Dropping> {
        self.dropping.pop_front()
    }

    pub fn applied(&mut self, op: PendingLayerOp) {
        self.applied.push(op);
    }

    /// The applied operations a checkpoint being taken will cover.
    pub fn take_applied(&mut self) -> Vec<PendingLayerOp> {
        std::mem::take(&mut self.applied)
    }

    pub fn covered(&mut self, ops: Vec<PendingLayerOp>) {
        self.covered.extend(ops);
    }

    pub fn take_covered(&mut self) -> Vec<PendingLayerOp> {
        std::mem::take(&mut self.covered)
    }
}
