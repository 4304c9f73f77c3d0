//! The seam between the front ends (NBD and iSCSI) and the volume engine.
//!
//! Front ends see exports (volumes or snapshots) as byte-addressed devices whose offsets and
//! lengths are multiples of the export's logical block size: 512 ("512e") or 4096 ("4Kn").
//! Underneath, the engine works in 4 KiB blocks; [`crate::sub_block`] bridges the two by
//! read-modify-write. Front ends never see layers, block ids or segments. Every call here is
//! synchronous and may block (journal writes, chunk reads, fdatasync): front ends call it from
//! a blocking pool, never directly on the async runtime's worker threads when the call can
//! wait on a disk.

use std::sync::Arc;

use bytes::Bytes;

pub use crate::access::AccessTable;

/// The engine's block: the unit of mapping, dedup and compression, the physical block size
/// front ends report, and the alignment that needs no read-modify-write.
pub const EXPORT_BLOCK_SIZE_BYTES: u32 = 4096;
/// The smallest logical block size an export may have (512e).
pub const LOGICAL_BLOCK_SIZE_MIN_BYTES: u32 = 512;

const _: () = assert!(EXPORT_BLOCK_SIZE_BYTES.is_multiple_of(LOGICAL_BLOCK_SIZE_MIN_BYTES));

/// Gets the result of [`ExportHandle::write_then`] or [`ExportHandle::flush_then`], once:
/// possibly on another thread (the one that read the partner c.node's answer), possibly
/// before the call returns. It must not block for long.
pub type IoDone = Box<dyn FnOnce(Result<(), ExportIoError>) + Send>;

/// What a front end needs to list and describe an export.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExportInfo {
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    pub read_only: bool,
    /// The sector size clients must align to: 512 or 4096 ([`EXPORT_BLOCK_SIZE_BYTES`]).
    pub logical_block_size_bytes: u32,
}

/// Why an export could not be opened.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error("no export named {name:?}")]
    UnknownExport { name: String },
}

/// Why an I/O on an open export failed. Each front end maps these to its status codes in one
/// function (NBD errno, SCSI sense).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExportIoError {
    /// The request is outside the export, misaligned, or otherwise malformed: EINVAL.
    #[error("invalid request: {reason}")]
    Invalid { reason: &'static str },
    /// The export is read-only (a snapshot): EPERM.
    #[error("export is read-only")]
    ReadOnly,
    /// The datastore is full: ENOSPC. Reads still work.
    #[error("no space left in the datastore")]
    NoSpace,
    /// A disk error or a checksum mismatch: EIO. Never served as data.
    #[error("i/o error: {detail}")]
    Io { detail: String },
    /// The export was deleted, refreshed or rolled back under the client, or the server is
    /// shutting down: the front end disconnects the client (ESHUTDOWN where a reply is needed).
    #[error("export is gone or the server is shutting down")]
    Gone,
}

/// One run of a block-status answer: `length_bytes` bytes that share `state`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExtentStatus {
    pub length_bytes: u64,
    /// Nothing is allocated here (reads return zeroes, writes will allocate).
    pub hole: bool,
    /// Reads return zeroes.
    pub zero: bool,
}

/// Lists and opens exports, and says who may use them.
pub trait ExportBackend: Send + Sync + 'static {
    fn list_exports(&self) -> Vec<ExportInfo>;
    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError>;
    /// The hosts and their mappings. The default has none: every export is unmapped.
    fn access(&self) -> Arc<AccessTable> {
        Arc::new(AccessTable::default())
    }
    /// Changes whenever [`ExportBackend::access`] would: cheap enough to call per command.
    fn access_generation(&self) -> u64 {
        0
    }
}

/// An open export. Offsets and lengths are in bytes and must be multiples of the export's
/// `logical_block_size_bytes` and inside the export; implementations check this too and return
/// [`ExportIoError::Invalid`]. Those [`ExportBackend::open`] returns accept 512-byte
/// granularity on a 512e export ([`crate::sub_block::SubBlockExport`]); the engine's own
/// handle underneath takes whole 4 KiB blocks only.
pub trait ExportHandle: Send + Sync + 'static {
    fn info(&self) -> ExportInfo;
    /// Fill `buf` from `offset_bytes`.
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError>;
    /// Returns once the write is durable against a process crash (in the journal, handed to the
    /// OS); with `fua`, once it is durable against power loss.
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError>;
    /// [`ExportHandle::write`] of a buffer the caller hands over (an NBD request's payload):
    /// the engine keeps it in its write buffer as it is instead of copying it. Wrappers pass
    /// it down; one that does not (this default) still writes it, with a copy.
    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        self.write(offset_bytes, &data, fua)
    }
    /// [`ExportHandle::write_owned`] that hands its result to `done` instead of returning
    /// it, so the calling thread need not wait for what a write waits for once it is
    /// journaled (the partner c.node's answer): the front end's worker goes back to its pool
    /// and the reply leaves when `done` runs. The acknowledgement rule is `write_owned`'s.
    /// Wrappers pass it down with their own work around `done`; one that does not (this
    /// default) still writes, on the calling thread.
    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        done(self.write_owned(offset_bytes, data, fua));
    }
    /// Makes every write acknowledged so far (on any connection, any export) durable against
    /// power loss.
    fn flush(&self) -> Result<(), ExportIoError>;
    /// [`ExportHandle::flush`] that hands its result to `done`, as
    /// [`ExportHandle::write_then`] does.
    fn flush_then(&self, done: IoDone) {
        done(self.flush());
    }
    /// Deallocate the range; it reads back as zeroes.
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError>;
    /// Make the range read as zeroes. With `may_trim` (NBD without NO_HOLE) the range may be
    /// deallocated; without it, it stays allocated as written zeroes.
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError>;
    /// Allocation status of the range, as consecutive extents covering at least the first block.
    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError>;
    /// True once the export was deleted, refreshed or rolled back: connected clients are
    /// disconnected cleanly rather than served a mix of old and new data.
    fn is_gone(&self) -> bool;
    /// COMPARE AND WRITE: if the range holds `compare`, write `new` (same length) and return
    /// `None`; else write nothing and return the offset of the first differing byte. Atomic
    /// against every other compare-and-write of the volume, on any connection of any c.node:
    /// the layer that holds the volume's lock table does it under an exclusive lock, wrappers
    /// pass it down (it has no default, so none can forget to), a forwarder sends it whole to
    /// the owner.
    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError>;
    /// The volume's throttle when this handle passes through one on this c.node
    /// ([`crate::qos::QosExport`]), so a front end may pay for an I/O and wait before it
    /// takes a thread ([`crate::qos::VolumeQos::prepay`]). Wrappers pass it down; the default
    /// (and a forwarder: the owner throttles) has none.
    fn qos(&self) -> Option<Arc<crate::qos::VolumeQos>> {
        None
    }
}

/// COMPARE AND WRITE's two halves (bytes to compare, bytes to write) are of one length.
pub fn check_halves(compare: &[u8], new: &[u8]) -> Result<(), ExportIoError> {
    if compare.len() == new.len() {
        return Ok(());
    }
    Err(ExportIoError::Invalid {
        reason: "compare and write halves differ in length",
    })
}

/// COMPARE AND WRITE as a read, a compare and a write, for a handle whose caller holds the
/// lock that makes it atomic.
pub fn read_compare_write(
    handle: &dyn ExportHandle,
    offset_bytes: u64,
    compare: &[u8],
    new: &[u8],
    fua: bool,
) -> Result<Option<u64>, ExportIoError> {
    check_halves(compare, new)?;
    let mut medium = vec![0u8; compare.len()];
    handle.read(offset_bytes, &mut medium)?;
    if let Some(at) = medium.iter().zip(compare).position(|(x, y)| x != y) {
        return Ok(Some(at as u64));
    }
    handle.write(offset_bytes, new, fua)?;
    Ok(None)
}
