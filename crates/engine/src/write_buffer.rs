//! The write buffer: acknowledged writes not yet destaged, in RAM.
//!
//! Two views of the same records: a FIFO in journal order, which the destager consumes, and a
//! per-layer index from LBA to the newest buffered data, which reads consult first
//! (read-your-writes) for each layer of their chain. A buffered block is *current* while the index still points at its
//! record; the destager skips blocks that a newer write, trim or zeroing has superseded.
//! No I/O here.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;

use crate::layers::LayerOp;
use crate::units::{BlockId, FamilyId, LayerId, BLOCK_SIZE_BYTES};

/// A record waiting for destage.
#[derive(Debug, Clone)]
pub enum Pending {
    /// Data for `count` blocks from `lba` of `layer`, `data.len() == count * 4096`. `Bytes`:
    /// the front end's buffer itself when it handed it over ([`crate::Engine::write_owned`]),
    /// shared by the FIFO and the index without a copy.
    Write {
        seq: u64,
        family: FamilyId,
        layer: LayerId,
        lba: u64,
        data: Bytes,
    },
    /// A trim or zeroing (see [`RangeRecord`]).
    Range(RangeRecord),
    /// A layer operation, applied by the destager at this point of the sequence.
    Layer {
        seq: u64,
        family: FamilyId,
        op: LayerOp,
    },
}

/// Unmap (or, with `zero`, make read as zeroes) `count` blocks from `lba`. Already applied to
/// the map when buffered (reads see it at once); the references it dropped, `released`, are
/// released when it is destaged, so that block ids are freed in the same order live and in
/// replay.
#[derive(Debug, Clone)]
pub struct RangeRecord {
    pub seq: u64,
    pub family: FamilyId,
    pub layer: LayerId,
    pub lba: u64,
    pub count: u64,
    pub released: Vec<BlockId>,
    /// Zeroing (blocks stay allocated as zeroes) rather than trim.
    pub zero: bool,
    /// The map already reflects it (the normal case). When false (a record replayed after a
    /// queued merge into its layer) the destager changes the map when it logs it.
    pub applied: bool,
}

impl Pending {
    pub fn seq(&self) -> u64 {
        match self {
            Pending::Write { seq, .. }
            | Pending::Range(RangeRecord { seq, .. })
            | Pending::Layer { seq, .. } => *seq,
        }
    }
}

#[derive(Debug, Clone)]
struct Buffered {
    seq: u64,
    data: Bytes,
    /// Index of the block inside `data`.
    block: u32,
}

/// The write buffer of one c.node.
#[derive(Debug, Default)]
pub struct WriteBuffer {
    fifo: VecDeque<Pending>,
    index: HashMap<LayerId, HashMap<u64, Buffered>>,
    data_bytes: u64,
    /// Trims and zeroings in the FIFO (a checkpoint waits until there are none).
    pending_ranges: usize,
}

impl WriteBuffer {
    pub fn new() -> WriteBuffer {
        WriteBuffer::default()
    }

    /// Buffer a write (records arrive in seq order).
    pub fn push_write(
        &mut self,
        seq: u64,
        family: FamilyId,
        layer: LayerId,
        lba: u64,
        data: Bytes,
    ) {
        assert_eq!(data.len() % BLOCK_SIZE_BYTES, 0, "writes are whole blocks");
        let blocks = data.len() / BLOCK_SIZE_BYTES;
        let index = self.index.entry(layer).or_default();
        for i in 0..blocks {
            let block = u32::try_from(i).expect("request size is bounded");
            index.insert(
                lba + i as u64,
                Buffered {
                    seq,
                    data: data.clone(),
                    block,
                },
            );
        }
        self.data_bytes += data.len() as u64;
        self.fifo.push_back(Pending::Write {
            seq,
            family,
            layer,
            lba,
            data,
        });
    }

    /// Queue a layer operation behind every record before it.
    pub fn push_layer_op(&mut self, seq: u64, family: FamilyId, op: LayerOp) {
        if let LayerOp::Drop { layer } = op {
            // Its buffered writes will never be read: the destager skips them.
            self.index.remove(&layer);
        }
        self.fifo.push_back(Pending::Layer { seq, family, op });
    }

    /// Buffer a trim or zeroing: buffered data in the range is superseded at once.
    pub fn push_range(&mut self, range: RangeRecord) {
        let (layer, lba, count) = (range.layer, range.lba, range.count);
        self.pending_ranges += 1;
        if let Some(index) = self.index.get_mut(&layer) {
            let end = lba.saturating_add(count);
            if count < index.len() as u64 {
                for l in lba..end {
                    index.remove(&l);
                }
            } else {
                index.retain(|&l, _| l < lba || l >= end);
            }
        }
        self.fifo.push_back(Pending::Range(range));
    }

    /// The newest buffered data of a block of a layer, if any.
    pub fn lookup(&self, layer: LayerId, lba: u64) -> Option<&[u8]> {
        let b = self.index.get(&layer)?.get(&lba)?;
        let start = b.block as usize * BLOCK_SIZE_BYTES;
        Some(&b.data[start..start + BLOCK_SIZE_BYTES])
    }

    /// Is the block `lba` of the write `seq` still the newest data for it?
    pub fn is_current(&self, layer: LayerId, lba: u64, seq: u64) -> bool {
        self.index
            .get(&layer)
            .and_then(|i| i.get(&lba))
            .is_some_and(|b| b.seq == seq)
    }

    /// The block was destaged: drop it from the index unless something newer replaced it.
    pub fn retire(&mut self, layer: LayerId, lba: u64, seq: u64) {
        if let Some(index) = self.index.get_mut(&layer) {
            if index.get(&lba).is_some_and(|b| b.seq == seq) {
                index.remove(&lba);
            }
        }
    }

    /// Take up to `max` records from the front for destage.
    pub fn pop_front(&mut self, max: usize) -> Vec<Pending> {
        let n = max.min(self.fifo.len());
        let out: Vec<Pending> = self.fifo.drain(..n).collect();
        for p in &out {
            match p {
                Pending::Write { data, .. } => self.data_bytes -= data.len() as u64,
                Pending::Range(_) => self.pending_ranges -= 1,
                Pending::Layer { .. } => {}
            }
        }
        out
    }

    /// Forget the buffered data of a layer (its family was deleted).
    pub fn drop_layer(&mut self, layer: LayerId) {
        self.index.remove(&layer);
    }

    /// LBAs of `layer` with buffered (not yet destaged) data.
    pub fn buffered_lbas(&self, layer: LayerId) -> impl Iterator<Item = u64> + '_ {
        self.index
            .get(&layer)
            .into_iter()
            .flat_map(|i| i.keys().copied())
    }

    /// Trims and zeroings not yet destaged.
    pub fn pending_ranges(&self) -> usize {
        self.pending_ranges
    }

    pub fn is_empty(&self) -> bool {
        self.fifo.is_empty()
    }

    pub fn len(&self) -> usize {
        self.fifo.len()
    }

    /// Bytes of write data waiting in the FIFO.
    pub fn data_bytes(&self) -> u64 {
        self.data_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(v: u8, n: usize) -> Bytes {
        vec![v; n * BLOCK_SIZE_BYTES].into()
    }

    #[test]
    fn newest_write_wins_and_trims_supersede() {
        let vol = LayerId(1);
        let fam = FamilyId(1);
        let mut wb = WriteBuffer::new();
        wb.push_write(1, fam, vol, 10, block(1, 2));
        wb.push_write(2, fam, vol, 11, block(2, 1));
        assert_eq!(wb.lookup(vol, 10).unwrap()[0], 1);
        assert_eq!(wb.lookup(vol, 11).unwrap()[0], 2);
        assert!(!wb.is_current(vol, 11, 1));
        wb.push_range(RangeRecord {
            seq: 3,
            family: fam,
            layer: vol,
            lba: 11,
            count: 5,
            released: vec![],
            zero: false,
            applied: true,
        });
        assert!(wb.lookup(vol, 11).is_none());
        assert!(wb.is_current(vol, 10, 1));
        let popped = wb.pop_front(10);
        assert_eq!(
            popped.iter().map(Pending::seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
        assert_eq!(wb.data_bytes(), 0);
        assert_eq!(wb.pending_ranges(), 0);
        wb.retire(vol, 10, 1);
        assert!(wb.lookup(vol, 10).is_none());
    }
}
