//! Sub-block I/O: byte-addressed reads, writes, trims and zeroings at the granularity of an
//! export's logical block (512 bytes on a "512e" volume) over a handle that takes whole 4 KiB
//! blocks only (the engine's unit of mapping, dedup and compression).
//!
//! A request aligned to 4 KiB goes straight through, its buffer untouched. An unaligned one is
//! widened to whole blocks: each partial edge block is read, the request's bytes are merged
//! into it, and the widened range is written back in one call (a trim or zeroing writes zeroes
//! into the partial part and trims or zeroes the whole blocks in between).
//!
//! The invariant: a read-modify-write (RMW) of block B never interleaves with another write to
//! B, aligned or not; otherwise the RMW's write-back could carry B's content from before that
//! write and revert an update that was already acknowledged. [`BlockLocks`] enforces it with
//! readers-writer locks over regions of [`REGION_BLOCKS`] blocks: every write-class call takes
//! each region it touches, exclusively where it read-modify-writes a block and shared
//! elsewhere, and holds them until its last call into the inner handle has returned. So from
//! the moment an RMW reads B until its write-back is applied nothing else writes B, and two
//! writers of different sectors of B both survive. Reads take no lock: the inner handle
//! replaces a 4 KiB block atomically for readers, and an RMW leaves the bytes outside its
//! request as they were.
//!
//! Aligned I/O stays as cheap as before: on a 512e export a write takes one uncontended shared
//! lock per 64 KiB region it touches (one for 4 KiB), never one per block, and copies nothing;
//! on a 4Kn export nothing can be unaligned, so nothing is locked at all. Regions are striped
//! over a fixed table shared by every export of a backend, so memory stays constant; a
//! collision of two regions on one stripe only makes them wait for each other.
//!
//! Locks are taken in ascending stripe order and a caller holds none while it waits, so there
//! is no deadlock among writers; the inner handle never calls back into this module. FUA and
//! flush mean what they meant: every inner write of a request carries the request's FUA.
//!
//! No I/O here beyond calls into the inner handle.

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::backend::{
    ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone, EXPORT_BLOCK_SIZE_BYTES,
    LOGICAL_BLOCK_SIZE_MIN_BYTES,
};

/// The inner handle's block, as the u64 of byte arithmetic.
const BLOCK_BYTES: u64 = EXPORT_BLOCK_SIZE_BYTES as u64;
/// Blocks under one lock: 16 (64 KiB). A write takes one lock per region, so a 1 MiB write
/// takes 16 or 17; an RMW holds its whole region exclusively for one block read plus one
/// write, delaying writes to the other 15 blocks meanwhile. Sub-4 KiB writes are rare next to
/// aligned ones (file systems and databases align to 4 KiB), so fewer locks per aligned
/// write wins over finer RMW exclusion.
pub const REGION_BLOCKS: u64 = 16;
/// Stripes of the lock table: a power of two, 64 bytes each (256 KiB per backend). A request
/// touches at most 32 MiB / 64 KiB = 512 regions (an NBD or iSCSI write; trims can be larger
/// and then take every stripe), and consecutive regions of an export use distinct stripes.
pub const LOCK_STRIPES: usize = 4096;
/// Spreads the lock keys of different exports over the table (an odd 64-bit constant, the
/// golden ratio's fraction, so distinct keys land on distinct offsets modulo the table).
const KEY_SPREAD: u64 = 0x9e37_79b9_7f4a_7c15;

const _: () = assert!(LOCK_STRIPES.is_power_of_two());
const _: () = assert!(REGION_BLOCKS > 0);
const _: () = assert!(BLOCK_BYTES.is_multiple_of(LOGICAL_BLOCK_SIZE_MIN_BYTES as u64));

/// The lock table shared by every export of a backend (so NBD and iSCSI clients of one
/// volume, on any connection, serialize against each other).
#[derive(Debug)]
pub struct BlockLocks {
    stripes: Box<[Stripe]>,
}

/// One lock on its own cache line, so shared lockers of neighbouring regions do not bounce a
/// line between cores.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Stripe(RwLock<()>);

/// A held lock of one stripe.
enum Held<'a> {
    Shared { _guard: RwLockReadGuard<'a, ()> },
    Exclusive { _guard: RwLockWriteGuard<'a, ()> },
}

/// The locks one request holds; released on drop. `One` keeps the common case (a write
/// inside one region) free of allocation.
#[must_use = "the locks are released when this is dropped"]
enum RegionGuard<'a> {
    None,
    One { _held: Held<'a> },
    Many { _held: Vec<Held<'a>> },
}

impl Default for BlockLocks {
    fn default() -> Self {
        Self::new()
    }
}

impl BlockLocks {
    pub fn new() -> BlockLocks {
        BlockLocks {
            stripes: (0..LOCK_STRIPES).map(|_| Stripe::default()).collect(),
        }
    }

    /// Lock the regions of blocks `[first_block, end_block)` of the export `key`: exclusively
    /// the regions of the blocks in `rmw`, shared the others. Blocks until all are held.
    fn lock(&self, key: u64, first_block: u64, end_block: u64, rmw: &[u64]) -> RegionGuard<'_> {
        if end_block <= first_block {
            return RegionGuard::None;
        }
        let first_region = first_block / REGION_BLOCKS;
        let last_region = (end_block - 1) / REGION_BLOCKS;
        let exclusive_stripes: Vec<usize> = rmw
            .iter()
            .map(|b| self.stripe_of(key, b / REGION_BLOCKS))
            .collect();
        if first_region == last_region {
            let stripe = self.stripe_of(key, first_region);
            return RegionGuard::One {
                _held: self.take(stripe, exclusive_stripes.contains(&stripe)),
            };
        }
        let mut wanted: Vec<usize> = if last_region - first_region >= LOCK_STRIPES as u64 {
            (0..LOCK_STRIPES).collect()
        } else {
            (first_region..=last_region)
                .map(|r| self.stripe_of(key, r))
                .collect()
        };
        // Ascending order is what makes concurrent lockers deadlock-free.
        wanted.sort_unstable();
        wanted.dedup();
        RegionGuard::Many {
            _held: wanted
                .into_iter()
                .map(|s| self.take(s, exclusive_stripes.contains(&s)))
                .collect(),
        }
    }

    /// Consecutive regions of one export map to consecutive stripes (mod the table).
    fn stripe_of(&self, key: u64, region: u64) -> usize {
        let slot = key.wrapping_mul(KEY_SPREAD).wrapping_add(region) % LOCK_STRIPES as u64;
        usize::try_from(slot).expect("below LOCK_STRIPES")
    }

    fn take(&self, stripe: usize, exclusive: bool) -> Held<'_> {
        let lock = &self.stripes[stripe].0;
        if exclusive {
            Held::Exclusive {
                _guard: lock.write(),
            }
        } else {
            Held::Shared {
                _guard: lock.read(),
            }
        }
    }
}

/// An export handle that accepts I/O at the export's logical block size (512 or 4096) over
/// `inner`, which takes whole 4 KiB blocks only.
pub struct SubBlockExport<E: ExportHandle + ?Sized> {
    inner: Arc<E>,
    locks: Arc<BlockLocks>,
    /// Names the image in the lock table: equal for every handle of one image, so all of its
    /// clients serialize on the same locks.
    lock_key: u64,
    logical_block_bytes: u64,
    read_only: bool,
}

impl<E: ExportHandle + ?Sized> std::fmt::Debug for SubBlockExport<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubBlockExport")
            .field("lock_key", &self.lock_key)
            .field("logical_block_bytes", &self.logical_block_bytes)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// How a trim or zeroing treats the whole blocks of its range.
#[derive(Debug, Clone, Copy)]
enum Zeroing {
    Trim,
    WriteZeroes { may_trim: bool },
}

/// A request widened to whole blocks.
#[derive(Debug, Clone, Copy)]
struct Span {
    /// First byte of the first block.
    start_bytes: u64,
    /// End of the last block.
    end_bytes: u64,
    /// The first block, when the request starts inside it.
    head_partial: Option<u64>,
    /// The last block, when the request ends inside it (may equal `head_partial`).
    tail_partial: Option<u64>,
}

impl Span {
    fn of(offset_bytes: u64, length_bytes: u64) -> Result<Span, ExportIoError> {
        let outside = ExportIoError::Invalid {
            reason: "outside the export",
        };
        let end = offset_bytes
            .checked_add(length_bytes)
            .ok_or(outside.clone())?;
        let start_bytes = offset_bytes - offset_bytes % BLOCK_BYTES;
        let end_bytes = end.checked_next_multiple_of(BLOCK_BYTES).ok_or(outside)?;
        Ok(Span {
            start_bytes,
            end_bytes,
            head_partial: (start_bytes != offset_bytes).then_some(start_bytes / BLOCK_BYTES),
            tail_partial: (end_bytes != end).then_some(end_bytes / BLOCK_BYTES - 1),
        })
    }

    fn first_block(&self) -> u64 {
        self.start_bytes / BLOCK_BYTES
    }

    fn end_block(&self) -> u64 {
        self.end_bytes / BLOCK_BYTES
    }

    fn len_bytes(&self) -> u64 {
        self.end_bytes - self.start_bytes
    }

    /// The partial blocks, each once.
    fn partial_blocks(&self) -> Vec<u64> {
        let mut out: Vec<u64> = self.head_partial.into_iter().collect();
        if let Some(t) = self.tail_partial {
            if self.head_partial != Some(t) {
                out.push(t);
            }
        }
        out
    }
}

impl<E: ExportHandle + ?Sized> SubBlockExport<E> {
    /// Wrap `inner`; its `info()` gives the logical block size and whether it is read-only,
    /// which stay fixed for an open handle.
    pub fn new(inner: Arc<E>, locks: Arc<BlockLocks>, lock_key: u64) -> SubBlockExport<E> {
        let info = inner.info();
        let logical = u64::from(info.logical_block_size_bytes);
        assert!(
            logical.is_power_of_two()
                && logical >= u64::from(LOGICAL_BLOCK_SIZE_MIN_BYTES)
                && logical <= BLOCK_BYTES,
            "logical block size {logical} of export {} is not 512..=4096",
            info.name
        );
        SubBlockExport {
            inner,
            locks,
            lock_key,
            logical_block_bytes: logical,
            read_only: info.read_only,
        }
    }

    /// Logical-block aligned; range and overflow are checked by [`Span::of`] and the inner
    /// handle (the export's size is a multiple of 4 KiB, so a widened range is inside it
    /// exactly when the request is).
    fn check_alignment(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportIoError> {
        if !(offset_bytes | length_bytes).is_multiple_of(self.logical_block_bytes) {
            return Err(ExportIoError::Invalid {
                reason: "not a multiple of the export's logical block size",
            });
        }
        Ok(())
    }

    fn check_write(&self, offset_bytes: u64, length_bytes: u64) -> Result<(), ExportIoError> {
        self.check_alignment(offset_bytes, length_bytes)?;
        if self.read_only {
            return Err(ExportIoError::ReadOnly);
        }
        Ok(())
    }

    /// The locks a write of `span` needs. On a 4Kn export every request is aligned, so none.
    fn lock(&self, span: &Span) -> RegionGuard<'_> {
        if self.logical_block_bytes == BLOCK_BYTES {
            return RegionGuard::None;
        }
        self.locks.lock(
            self.lock_key,
            span.first_block(),
            span.end_block(),
            &span.partial_blocks(),
        )
    }

    /// Read the whole blocks of `span` that are partial into `buf` (which covers the span).
    fn read_partials(&self, span: &Span, buf: &mut [u8]) -> Result<(), ExportIoError> {
        for block in span.partial_blocks() {
            let at = usize::try_from(block * BLOCK_BYTES - span.start_bytes).expect("in buffer");
            self.inner
                .read(block * BLOCK_BYTES, &mut buf[at..at + BLOCK_BYTES as usize])?;
        }
        Ok(())
    }

    fn zero_range(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        how: Zeroing,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        self.check_write(offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(());
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        let _locks = self.lock(&span);
        let end = offset_bytes + length_bytes;
        // Partial blocks: zero just the request's part of each, by read-modify-write.
        for block in span.partial_blocks() {
            let block_start = block * BLOCK_BYTES;
            let mut buf = vec![0u8; BLOCK_BYTES as usize];
            self.inner.read(block_start, &mut buf)?;
            let from = offset_bytes.max(block_start) - block_start;
            let to = end.min(block_start + BLOCK_BYTES) - block_start;
            buf[usize::try_from(from).expect("< 4096")..usize::try_from(to).expect("<= 4096")]
                .fill(0);
            self.inner.write(block_start, &buf, fua)?;
        }
        // Whole blocks in between: the inner handle's own trim or zeroing.
        let inner_start = offset_bytes.next_multiple_of(BLOCK_BYTES);
        let inner_end = end - end % BLOCK_BYTES;
        if inner_end > inner_start {
            let len = inner_end - inner_start;
            match how {
                Zeroing::Trim => self.inner.trim(inner_start, len, fua)?,
                Zeroing::WriteZeroes { may_trim } => {
                    self.inner.write_zeroes(inner_start, len, may_trim, fua)?
                }
            }
        }
        Ok(())
    }
}

impl<E: ExportHandle + ?Sized> ExportHandle for SubBlockExport<E> {
    fn info(&self) -> ExportInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        let length_bytes = buf.len() as u64;
        self.check_alignment(offset_bytes, length_bytes)?;
        if (offset_bytes | length_bytes).is_multiple_of(BLOCK_BYTES) {
            return self.inner.read(offset_bytes, buf);
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        let mut whole = vec![0u8; usize::try_from(span.len_bytes()).expect("request fits")];
        self.inner.read(span.start_bytes, &mut whole)?;
        let at = usize::try_from(offset_bytes - span.start_bytes).expect("< 4096");
        buf.copy_from_slice(&whole[at..at + buf.len()]);
        Ok(())
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        let length_bytes = data.len() as u64;
        self.check_write(offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(());
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        let _locks = self.lock(&span);
        if span.head_partial.is_none() && span.tail_partial.is_none() {
            return self.inner.write(offset_bytes, data, fua);
        }
        let mut whole = vec![0u8; usize::try_from(span.len_bytes()).expect("request fits")];
        self.read_partials(&span, &mut whole)?;
        let at = usize::try_from(offset_bytes - span.start_bytes).expect("< 4096");
        whole[at..at + data.len()].copy_from_slice(data);
        self.inner.write(span.start_bytes, &whole, fua)
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        let length_bytes = data.len() as u64;
        self.check_write(offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(());
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        if span.head_partial.is_some() || span.tail_partial.is_some() {
            // A read-modify-write builds a new buffer anyway.
            return self.write(offset_bytes, &data, fua);
        }
        let _locks = self.lock(&span);
        self.inner.write_owned(offset_bytes, data, fua)
    }

    /// Whole blocks only are handed on; a read-modify-write is done here, blocking. The
    /// blocks' locks are held until the write is journaled (and buffered, where a
    /// read-modify-write after it reads it), not until it is acknowledged.
    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        let length_bytes = data.len() as u64;
        if let Err(e) = self.check_write(offset_bytes, length_bytes) {
            return done(Err(e));
        }
        if length_bytes == 0 {
            return done(Ok(()));
        }
        let span = match Span::of(offset_bytes, length_bytes) {
            Ok(span) => span,
            Err(e) => return done(Err(e)),
        };
        if span.head_partial.is_some() || span.tail_partial.is_some() {
            return done(self.write(offset_bytes, &data, fua));
        }
        let _locks = self.lock(&span);
        self.inner.write_then(offset_bytes, data, fua, done);
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.inner.flush()
    }

    fn flush_then(&self, done: IoDone) {
        self.inner.flush_then(done);
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.zero_range(offset_bytes, length_bytes, Zeroing::Trim, fua)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        self.zero_range(
            offset_bytes,
            length_bytes,
            Zeroing::WriteZeroes { may_trim },
            fua,
        )
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        self.check_alignment(offset_bytes, length_bytes)?;
        if (offset_bytes | length_bytes).is_multiple_of(BLOCK_BYTES) {
            return self.inner.block_status(offset_bytes, length_bytes);
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        let extents = self
            .inner
            .block_status(span.start_bytes, span.len_bytes())?;
        Ok(clip_extents(
            &extents,
            offset_bytes - span.start_bytes,
            length_bytes,
        ))
    }

    fn is_gone(&self) -> bool {
        self.inner.is_gone()
    }

    /// Under exclusive locks of every block it touches (on a 4Kn export too), so no other
    /// compare-and-write, and no write of a 512e export, of the volume on this c.node runs in
    /// between; a forwarder's ones run here too.
    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        crate::backend::check_halves(compare, new)?;
        let length_bytes = new.len() as u64;
        self.check_write(offset_bytes, length_bytes)?;
        if length_bytes == 0 {
            return Ok(None);
        }
        let span = Span::of(offset_bytes, length_bytes)?;
        let every: Vec<u64> = (span.first_block()..span.end_block()).collect();
        let _locks = self
            .locks
            .lock(self.lock_key, span.first_block(), span.end_block(), &every);
        let mut whole = vec![0u8; usize::try_from(span.len_bytes()).expect("request fits")];
        self.inner.read(span.start_bytes, &mut whole)?;
        let at = usize::try_from(offset_bytes - span.start_bytes).expect("< 4096");
        let ours = &mut whole[at..at + new.len()];
        if let Some(d) = ours.iter().zip(compare).position(|(x, y)| x != y) {
            return Ok(Some(d as u64));
        }
        ours.copy_from_slice(new);
        self.inner.write(span.start_bytes, &whole, fua)?;
        Ok(None)
    }
}

/// The extents from `skip_bytes` into `extents` on, at most `length_bytes` of them.
fn clip_extents(extents: &[ExtentStatus], skip_bytes: u64, length_bytes: u64) -> Vec<ExtentStatus> {
    let mut skip = skip_bytes;
    let mut left = length_bytes;
    let mut out = Vec::with_capacity(extents.len());
    for e in extents {
        if left == 0 {
            break;
        }
        if e.length_bytes <= skip {
            skip -= e.length_bytes;
            continue;
        }
        let len = (e.length_bytes - skip).min(left);
        skip = 0;
        left -= len;
        out.push(ExtentStatus {
            length_bytes: len,
            ..*e
        });
    }
    out
}

#[cfg(test)]
mod tests;
