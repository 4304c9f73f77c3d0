//! The layer graph of a family: which layer sits on which. A volume reads through its chain,
//! top (writable) layer first, then each frozen layer below it; a snapshot reads through the
//! chain that starts at its own frozen layer. Snapshot and clone add layers; refresh, rollback
//! and delete remove them with a [`LayerOp`] that the destager applies in journal order.
//! No I/O here.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::units::LayerId;

/// Deepest chain a volume may have (layers read through, its own included). Each layer costs a
/// map lookup per block read; deleting snapshots merges their layers and shortens chains.
pub const CHAIN_LAYERS_MAX: usize = 128;

/// A change to a family's layers that releases or moves block references.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum LayerOp {
    /// Release every reference of the layer and forget it.
    Drop { layer: LayerId },
    /// Move the layer's entries into `into` where `into` has none, release the rest, and
    /// forget the layer. `into` sits directly on `from`.
    Merge { from: LayerId, into: LayerId },
}

impl LayerOp {
    /// The layer this operation removes.
    pub fn removed(self) -> LayerId {
        match self {
            LayerOp::Drop { layer } | LayerOp::Merge { from: layer, .. } => layer,
        }
    }
}

/// Which layer each layer of a family sits on (`None`: the bottom of its chain).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerGraph {
    parent: HashMap<LayerId, Option<LayerId>>,
}

impl LayerGraph {
    pub fn new() -> LayerGraph {
        LayerGraph::default()
    }

    /// Add (or move) `layer` so that it sits on `parent`.
    pub fn set_parent(&mut self, layer: LayerId, parent: Option<LayerId>) {
        self.parent.insert(layer, parent);
    }

    pub fn parent(&self, layer: LayerId) -> Option<LayerId> {
        self.parent.get(&layer).copied().flatten()
    }

    pub fn contains(&self, layer: LayerId) -> bool {
        self.parent.contains_key(&layer)
    }

    pub fn remove(&mut self, layer: LayerId) {
        self.parent.remove(&layer);
    }

    /// The chain read through from `top`, top first.
    pub fn chain(&self, top: LayerId) -> Vec<LayerId> {
        let mut chain = vec![top];
        let mut at = top;
        while let Some(below) = self.parent(at) {
            if chain.len() > CHAIN_LAYERS_MAX * 2 {
                // A cycle is a bug; never loop forever on it.
                tracing::error!(layer = top.0, "layer chain does not end; truncated");
                break;
            }
            chain.push(below);
            at = below;
        }
        chain
    }

    /// Apply an operation to the graph: the removed layer leaves its chain, and whatever sat
    /// on it sits on its parent instead. (Splicing rather than assuming the merge target sits
    /// on it keeps this right when recovery replays an operation twice.)
    pub fn apply(&mut self, op: LayerOp) {
        let removed = op.removed();
        let below = self.parent(removed);
        for parent in self.parent.values_mut() {
            if *parent == Some(removed) {
                *parent = below;
            }
        }
        self.parent.remove(&removed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chains_follow_parents_and_merges_splice_them() {
        let mut g = LayerGraph::new();
        g.set_parent(LayerId(1), None);
        g.set_parent(LayerId(2), Some(LayerId(1)));
        g.set_parent(LayerId(3), Some(LayerId(2)));
        g.set_parent(LayerId(4), Some(LayerId(2)));
        assert_eq!(
            g.chain(LayerId(3)),
            vec![LayerId(3), LayerId(2), LayerId(1)]
        );
        g.apply(LayerOp::Drop { layer: LayerId(4) });
        g.apply(LayerOp::Merge {
            from: LayerId(2),
            into: LayerId(3),
        });
        assert_eq!(g.chain(LayerId(3)), vec![LayerId(3), LayerId(1)]);
        assert!(!g.contains(LayerId(2)));
    }

    #[test]
    fn replayed_merges_splice_in_any_order() {
        // 10 sits on 5. Merges 17→10 then 16→10 were applied; recovery spliced both empty
        // layers back (10 → 17 → 16 → 5) and replays them in another order.
        let mut g = LayerGraph::new();
        g.set_parent(LayerId(5), None);
        g.set_parent(LayerId(16), Some(LayerId(5)));
        g.set_parent(LayerId(17), Some(LayerId(16)));
        g.set_parent(LayerId(10), Some(LayerId(17)));
        g.apply(LayerOp::Merge {
            from: LayerId(16),
            into: LayerId(10),
        });
        g.apply(LayerOp::Merge {
            from: LayerId(17),
            into: LayerId(10),
        });
        assert_eq!(g.chain(LayerId(10)), vec![LayerId(10), LayerId(5)]);
    }
}
