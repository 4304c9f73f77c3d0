//! What every block of every image (volume, clone, snapshot) may read, and the check of one
//! block read back against it. No I/O here: the writers and the verifier feed it.
//!
//! Per block of a writable image the model keeps the highest version *issued* (sent, maybe in
//! flight or failed), *acked* (its write was acknowledged, with the c.node incarnation that
//! acknowledged it) and *flushed* (acknowledged and followed by an acknowledged flush on a
//! connection to that same incarnation). A read must give a version between a floor and
//! `issued`: the floor is `acked` while the c.node that acknowledged it still runs (read your
//! writes), else `flushed` (a c.node kill -9 may lose acknowledged writes that were never
//! flushed, nothing else).
//!
//! A snapshot taken at T0 (call sent) .. T1 (call returned) holds, per block, a version between
//! the floor at T0 and the highest version issued by T1; once read, it must read the same
//! again while the c.node runs (a snapshot never changes).
//!
//! A clone starts as its snapshot: "version 0" of a clone block is the snapshot's content.

use crate::thrash_support::block::Decoded;

/// One block of a writable image.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockModel {
    pub issued: u64,
    pub acked: u64,
    /// The c.node incarnation that acknowledged `acked` (or served it to the verifier).
    pub acked_inc: u64,
    pub flushed: u64,
}

impl BlockModel {
    /// The lowest version a read may return now, with incarnation `cur` serving.
    pub fn floor(&self, cur: u64) -> u64 {
        if self.acked_inc == cur {
            self.acked
        } else {
            self.flushed
        }
    }
}

/// What a writable image starts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base {
    Zero,
    /// Index into [`Models::snaps`].
    Snapshot(usize),
}

#[derive(Clone, Debug)]
pub struct ImageModel {
    /// NBD export name.
    pub export: String,
    pub tag: u64,
    pub base: Base,
    pub blocks: Vec<BlockModel>,
}

/// One block of a snapshot.
#[derive(Clone, Copy, Debug, Default)]
pub struct SnapBlock {
    pub lo_flushed: u64,
    pub lo_acked: u64,
    pub lo_inc: u64,
    /// Highest version issued when the snapshot call returned.
    pub hi: u64,
    /// The version read last, and by which incarnation.
    pub pinned: Option<(u64, u64)>,
}

#[derive(Clone, Debug)]
pub struct SnapModel {
    /// NBD export name, `VOLUME@SNAPSHOT`.
    pub export: String,
    /// The tag of the volume it was taken of.
    pub tag: u64,
    pub blocks: Vec<SnapBlock>,
    pub deleted: bool,
    /// A clone starts from it: it is never deleted.
    pub in_use: bool,
}

/// Every image's model.
#[derive(Debug, Default)]
pub struct Models {
    pub images: Vec<ImageModel>,
    pub snaps: Vec<SnapModel>,
}

/// The verdict on one block read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A version the model allows (0: the base).
    Ok(u64),
    /// Bytes that are no version this block could hold: torn, corrupt, another image's or
    /// another block's, or a version never written (or written after a snapshot).
    Wrong(String),
    /// An older version than the floor: an acknowledged (and, across c.node restarts, flushed)
    /// write is gone.
    Lost(String),
}

impl Models {
    /// Checks block `lba` of image `i` as read (`decoded`), with incarnation `cur` serving.
    pub fn check_image(&self, i: usize, lba: u64, decoded: &Decoded, cur: u64) -> Verdict {
        let img = &self.images[i];
        let b = img.blocks[lba as usize];
        let floor = b.floor(cur);
        let version = match *decoded {
            Decoded::Version {
                tag,
                lba: l,
                version,
            } if tag == img.tag => {
                if l != lba {
                    return Verdict::Wrong(format!("holds block {l}'s data (version {version})"));
                }
                if version > b.issued {
                    return Verdict::Wrong(format!(
                        "version {version} was never written (highest issued {})",
                        b.issued
                    ));
                }
                version
            }
            _ => {
                // The base: zeroes, or the clone's snapshot's content.
                let base_ok = match img.base {
                    Base::Zero => match decoded {
                        Decoded::Zero => Ok(()),
                        Decoded::Version {
                            tag,
                            lba: l,
                            version,
                        } => Err(format!(
                            "holds image {tag}'s block {l} version {version} (foreign)"
                        )),
                    },
                    Base::Snapshot(s) => match self.check_snap_content(s, lba, decoded, cur) {
                        Verdict::Ok(_) => Ok(()),
                        Verdict::Wrong(w) | Verdict::Lost(w) => {
                            Err(format!("neither a clone version nor its snapshot's: {w}"))
                        }
                    },
                };
                if let Err(w) = base_ok {
                    return Verdict::Wrong(w);
                }
                0
            }
        };
        if version < floor {
            return Verdict::Lost(format!(
                "version {version} < floor {floor} (acked {} by incarnation {}, flushed {}, issued {}; serving incarnation {cur})",
                b.acked, b.acked_inc, b.flushed, b.issued
            ));
        }
        Verdict::Ok(version)
    }

    /// Checks block `lba` of snapshot `s` as read; does not pin.
    pub fn check_snap_content(&self, s: usize, lba: u64, decoded: &Decoded, cur: u64) -> Verdict {
        let snap = &self.snaps[s];
        let b = snap.blocks[lba as usize];
        let version = match *decoded {
            Decoded::Zero => 0,
            Decoded::Version {
                tag,
                lba: l,
                version,
            } if tag == snap.tag && l == lba => version,
            Decoded::Version {
                tag,
                lba: l,
                version,
            } => {
                return Verdict::Wrong(format!(
                    "snapshot {} holds image {tag}'s block {l} version {version}",
                    snap.export
                ))
            }
        };
        if version > b.hi {
            return Verdict::Wrong(format!(
                "snapshot {} holds version {version}, issued after it was taken (highest issued by then {})",
                snap.export, b.hi
            ));
        }
        let floor = if b.lo_inc == cur {
            b.lo_acked
        } else {
            b.lo_flushed
        };
        if version < floor {
            return Verdict::Lost(format!(
                "snapshot {} holds version {version} < floor {floor} (acked before it {} by incarnation {}, flushed {})",
                snap.export, b.lo_acked, b.lo_inc, b.lo_flushed
            ));
        }
        if let Some((p, pinc)) = b.pinned {
            if pinc == cur && p != version {
                return Verdict::Wrong(format!(
                    "snapshot {} changed: version {p} read before, {version} now (same c.node run)",
                    snap.export
                ));
            }
        }
        Verdict::Ok(version)
    }

    /// After a good read of image block: the c.node serves `version` now, so later reads
    /// under it must not go back (an in-flight write that landed, or an unflushed one that a
    /// restart lost, is settled).
    pub fn settle_image(&mut self, i: usize, lba: u64, version: u64, cur: u64) {
        let b = &mut self.images[i].blocks[lba as usize];
        b.acked = version;
        b.acked_inc = cur;
        b.flushed = b.flushed.min(version);
    }

    pub fn pin_snap(&mut self, s: usize, lba: u64, version: u64, cur: u64) {
        self.snaps[s].blocks[lba as usize].pinned = Some((version, cur));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn models() -> Models {
        let mut m = Models::default();
        m.images.push(ImageModel {
            export: "vol0".into(),
            tag: 1,
            base: Base::Zero,
            blocks: vec![BlockModel::default(); 4],
        });
        m
    }

    #[test]
    fn floor_is_acked_in_the_same_run_flushed_after_a_restart() {
        let mut m = models();
        m.images[0].blocks[0] = BlockModel {
            issued: 5,
            acked: 4,
            acked_inc: 1,
            flushed: 2,
        };
        let v = |version| Decoded::Version {
            tag: 1,
            lba: 0,
            version,
        };
        assert!(matches!(m.check_image(0, 0, &v(3), 1), Verdict::Lost(_)));
        assert_eq!(m.check_image(0, 0, &v(3), 2), Verdict::Ok(3));
        assert!(matches!(m.check_image(0, 0, &v(1), 2), Verdict::Lost(_)));
        assert_eq!(m.check_image(0, 0, &v(5), 1), Verdict::Ok(5));
        assert!(matches!(m.check_image(0, 0, &v(6), 1), Verdict::Wrong(_)));
        assert!(matches!(
            m.check_image(0, 0, &Decoded::Zero, 2),
            Verdict::Lost(_)
        ));
        let foreign = Decoded::Version {
            tag: 2,
            lba: 0,
            version: 1,
        };
        assert!(matches!(
            m.check_image(0, 0, &foreign, 1),
            Verdict::Wrong(_)
        ));
        m.settle_image(0, 0, 3, 2);
        assert!(matches!(m.check_image(0, 0, &v(2), 2), Verdict::Lost(_)));
    }
}
