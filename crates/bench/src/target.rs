//! What the load generator drives: a [`Target`] (an NBD export, an iSCSI LUN, a file, a block
//! device) hands out [`IoQueue`]s, each owned by one worker thread and carrying up to a fixed
//! number of outstanding I/Os. The runner owns timing and statistics; a queue only moves bytes.
//! Also here: the errors every target reports ([`TargetError`]), [`open_target`], which
//! picks the target from the URI's scheme, and [`AllocationProbe`], through which a target
//! that can tell says which of its ranges were never written.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::datagen::DataGen;

mod file;
mod iscsi;
mod nbd;

pub(crate) use file::FileTarget;
pub(crate) use iscsi::IscsiTarget;
pub(crate) use nbd::NbdTarget;

/// What errors call each kind of peer.
pub(crate) const NBD_SERVER: &str = "NBD server";
pub(crate) const ISCSI_TARGET: &str = "iSCSI target";
/// The URI forms, for error messages.
pub(crate) const NBD_URI_FORM: &str = "nbd://HOST[:PORT]/EXPORT";
pub(crate) const ISCSI_URI_FORM: &str =
    "iscsi://[USER[%SECRET]@]HOST[:PORT]/TARGET-IQN/LUN[?initiator=IQN]";

/// Direction of one I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Read,
    Write,
}

impl Op {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Op::Read => "read",
            Op::Write => "write",
        }
    }
}

/// One I/O handed to a queue. `tag` is the worker's slot number, below the queue's depth.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IoRequest {
    pub(crate) tag: u32,
    pub(crate) op: Op,
    pub(crate) offset_bytes: u64,
    pub(crate) len_bytes: u32,
}

/// Facts about a target, recorded in the results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct TargetInfo {
    /// As given on the command line, with any iSCSI CHAP secret replaced by `***`.
    pub(crate) uri: String,
    /// "nbd", "iscsi", "file" or "block".
    pub(crate) kind: String,
    pub(crate) size_bytes: u64,
    /// Smallest I/O size and alignment the target accepts.
    pub(crate) block_size_min_bytes: u32,
    /// Preferred I/O size reported by the target.
    pub(crate) block_size_preferred_bytes: u32,
    /// Largest single I/O the target accepts.
    pub(crate) block_size_max_bytes: u32,
    /// Whether the target refuses writes.
    pub(crate) read_only: bool,
    /// Files and devices: whether O_DIRECT (no page cache) is in use.
    pub(crate) direct_io: Option<bool>,
}

/// A storage target the benchmark can open queues on. Shared by reference across workers.
pub(crate) trait Target: Send + Sync {
    fn info(&self) -> &TargetInfo;

    /// How many outstanding I/Os one queue can carry. Synchronous backends say 1, and the runner
    /// opens one queue (and thread) per outstanding I/O.
    fn queue_depth_max(&self) -> u32;

    /// Opens a queue for up to `depth` outstanding I/Os of at most `io_bytes_max` each. `data`
    /// makes the write data (seeded per queue, so that every queue writes different bytes).
    fn open_queue(
        &self,
        depth: u32,
        io_bytes_max: u32,
        data: DataGen,
    ) -> Result<Box<dyn IoQueue>, TargetError>;

    /// Whether the target held data before the run, when only the target can tell (a
    /// regular file: whether it has anything but holes); `None` when its kind decides.
    fn held_data(&self) -> Option<bool> {
        None
    }

    /// A reader of which ranges are allocated, or why this target cannot tell.
    fn allocation(&self) -> Result<Allocation, TargetError> {
        Ok(Allocation::Unknown(
            "files and block devices are not checked (a sparse file is reported when opened)"
                .into(),
        ))
    }
}

/// Whether a target can say which of its ranges were never written.
pub(crate) enum Allocation {
    Known(Box<dyn AllocationProbe>),
    /// Why not (the protocol or the server offers no way).
    Unknown(String),
}

/// Asks a target which ranges hold data: NBD block status (`base:allocation`), iSCSI GET LBA
/// STATUS. Owns its own connection, apart from the queues.
pub(crate) trait AllocationProbe: Send {
    /// How it asks, for the results (`nbd base:allocation`, `iscsi GET LBA STATUS`).
    fn method(&self) -> &'static str;

    /// The allocation from `offset_bytes` on, within `len_bytes`: consecutive extents, at
    /// least one, covering at most `len_bytes`.
    fn extents(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<Extent>, TargetError>;
}

/// A run of bytes that share their allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Extent {
    pub(crate) length_bytes: u64,
    /// Written (or at least backed); `false`: reads return zeroes without touching a disk.
    pub(crate) allocated: bool,
}

/// A worker's private channel to the target.
pub(crate) trait IoQueue: Send {
    /// Queues one I/O. It may not reach the target before the next [`IoQueue::wait`]. The caller
    /// never has more than `depth` tags outstanding and never reuses an outstanding tag.
    fn submit(&mut self, req: IoRequest);

    /// Sends queued I/Os and blocks until at least one I/O completes; pushes completed tags to
    /// `done`. An I/O that the target fails is an error: the run stops.
    fn wait(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError>;
}

/// Errors from opening or driving a target. `peer` is [`NBD_SERVER`] or [`ISCSI_TARGET`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TargetError {
    #[error("target '{uri}' is not a valid {scheme} URI ({reason}); use {form}")]
    BadUri {
        uri: String,
        /// "NBD", "iSCSI", or "target" when the scheme itself is unknown.
        scheme: &'static str,
        reason: &'static str,
        form: &'static str,
    },
    #[error("target '{path}' cannot be opened")]
    Open {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("target '{path}' is neither a regular file nor a block device")]
    NotAFileOrDevice { path: String },
    #[error("cannot connect to {peer} {addr}")]
    Connect {
        peer: &'static str,
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("{peer} {addr} violated the protocol: {reason}")]
    Protocol {
        peer: &'static str,
        addr: String,
        reason: String,
    },
    #[error("NBD server {addr} refused export '{export}': {reason}")]
    ExportRefused {
        addr: String,
        export: String,
        reason: String,
    },
    #[error("iSCSI target {addr} refused the login to '{target}': {reason}")]
    LoginRefused {
        addr: String,
        target: String,
        /// RFC 7143 login status (class << 8 | detail); 0 when the login failed otherwise.
        status: u16,
        reason: String,
    },
    #[error("LUN {lun} of iSCSI target '{target}' at {addr} cannot be benchmarked: {reason}")]
    UnusableLun {
        addr: String,
        target: String,
        lun: u64,
        reason: String,
    },
    #[error("connection to {peer} {addr} failed")]
    Connection {
        peer: &'static str,
        addr: String,
        #[source]
        source: io::Error,
    },
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} failed with NBD error {errno}")]
    Remote {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u32,
        errno: u32,
    },
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} failed with {failure}")]
    ScsiFailed {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u32,
        failure: ScsiFailure,
    },
    #[error("{op} of {len_bytes} bytes at offset {offset_bytes} failed")]
    Io {
        op: &'static str,
        offset_bytes: u64,
        len_bytes: u32,
        #[source]
        source: io::Error,
    },
}

/// How a SCSI command failed at an iSCSI target: a target failure (the iSCSI response code)
/// or a SCSI status other than GOOD, with the sense data when the target sent some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiFailure {
    /// iSCSI response code: 00h means the command completed and `status` says how.
    pub response: u8,
    pub status: u8,
    pub sense: Option<weft_scsi::Sense>,
}

impl std::fmt::Display for ScsiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.response != weft_iscsi::wire::RESPONSE_COMPLETED {
            return write!(f, "iSCSI response {:02x}h (target failure)", self.response);
        }
        let name = match self.status {
            0x00 => "GOOD",
            0x02 => "CHECK CONDITION",
            0x04 => "CONDITION MET",
            0x08 => "BUSY",
            0x18 => "RESERVATION CONFLICT",
            0x28 => "TASK SET FULL",
            0x30 => "ACA ACTIVE",
            0x40 => "TASK ABORTED",
            _ => "unknown status",
        };
        write!(f, "SCSI status {name} ({:02x}h)", self.status)?;
        match &self.sense {
            Some(sense) => write!(f, ", sense {sense}"),
            None => Ok(()),
        }
    }
}

/// Opens `uri`: `nbd://...` is NBD, `iscsi://...` an iSCSI LUN, anything else a path to a file
/// or block device.
pub(crate) fn open_target(uri: &str, want_write: bool) -> Result<Box<dyn Target>, TargetError> {
    if uri.starts_with("nbd://") {
        Ok(Box::new(NbdTarget::open(uri)?))
    } else if uri.starts_with("iscsi://") {
        Ok(Box::new(IscsiTarget::open(uri)?))
    } else if uri.contains("://") {
        Err(TargetError::BadUri {
            uri: uri.to_string(),
            scheme: "target",
            reason: "unsupported scheme",
            form: "nbd://HOST[:PORT]/EXPORT, \
                   iscsi://[USER[%SECRET]@]HOST[:PORT]/TARGET-IQN/LUN or a file or device path",
        })
    } else {
        Ok(Box::new(FileTarget::open(Path::new(uri), want_write)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scsi_failures_name_status_and_sense() {
        let failure = ScsiFailure {
            response: 0,
            status: 2,
            sense: Some(weft_scsi::Sense::lba_out_of_range()),
        };
        assert_eq!(
            failure.to_string(),
            "SCSI status CHECK CONDITION (02h), sense ILLEGAL REQUEST, ASC/ASCQ 21h/00h \
             (LOGICAL BLOCK ADDRESS OUT OF RANGE)"
        );
        let busy = ScsiFailure {
            response: 0,
            status: 8,
            sense: None,
        };
        assert_eq!(busy.to_string(), "SCSI status BUSY (08h)");
        let failed = ScsiFailure {
            response: 1,
            status: 0,
            sense: None,
        };
        assert_eq!(failed.to_string(), "iSCSI response 01h (target failure)");
    }

    #[test]
    fn unknown_schemes_are_refused_with_every_form() {
        let err = open_target("ftp://x/y", false).err().expect("refused");
        let text = err.to_string();
        assert!(text.contains("unsupported scheme"), "{text}");
        assert!(text.contains("iscsi://"), "{text}");
    }
}
