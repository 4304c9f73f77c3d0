//! Executes one classified NBD command against an export, on a blocking-pool thread, and maps
//! backend errors to NBD errnos in one place ([`nbd_status`]). [`execute_then`] hands a
//! write's or a FLUSH's outcome on instead of waiting for it (for the partner c.node's answer).
//!
//! Nothing here touches sockets; the connection module moves the results to the writer.

use bytes::Bytes;
use tracing::debug;
use weft_nbd::wire::{BLOCK_STATUS_EXTENTS_MAX, STATE_HOLE, STATE_ZERO};
use weft_nbd::{Command, Errno, Extent};

use crate::backend::{ExportHandle, ExportIoError, ExtentStatus, IoDone};

/// Write payloads from this size on are handed to the engine without a copy.
const OWNED_PAYLOAD_MIN_BYTES: usize = 128 << 10;

/// The result of executing one command.
#[derive(Debug)]
pub(super) enum Outcome {
    Done,
    /// Read data, exactly the requested length.
    Data(Vec<u8>),
    Extents(Vec<Extent>),
    Failed(Errno),
}

/// What the connection does after a failed request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Disposition {
    /// Reply with the errno; the connection stays usable.
    Continue,
    /// Reply with the errno, then drain and disconnect.
    Disconnect,
}

/// The one mapping from backend errors to NBD errnos.
pub(super) fn nbd_status(error: &ExportIoError) -> (Errno, Disposition) {
    match error {
        ExportIoError::Invalid { .. } => (Errno::Invalid, Disposition::Continue),
        ExportIoError::ReadOnly => (Errno::NotPermitted, Disposition::Continue),
        ExportIoError::NoSpace => (Errno::NoSpace, Disposition::Continue),
        ExportIoError::Io { .. } => (Errno::Io, Disposition::Continue),
        ExportIoError::Gone => (Errno::Shutdown, Disposition::Disconnect),
    }
}

/// What `command` costs the volume's QoS buckets: the figures [`crate::qos::QosExport`]
/// charges for the call [`execute`] makes (trims and zeroes: one unit, no bytes).
pub(super) fn qos_cost(command: &Command) -> Option<(crate::qos::Direction, u64)> {
    use crate::qos::Direction;
    match *command {
        Command::Read { length_bytes, .. } => Some((Direction::Read, u64::from(length_bytes))),
        Command::Write { length_bytes, .. } => Some((Direction::Write, u64::from(length_bytes))),
        Command::Trim { .. } | Command::WriteZeroes { .. } => Some((Direction::Write, 0)),
        Command::Flush | Command::BlockStatus { .. } | Command::Disconnect => None,
    }
}

/// Run `command` (already validated by `Session::classify`) against `export`. `payload` is the
/// write data (empty for other commands). Returns the outcome and what to do next.
pub(super) fn execute(
    export: &dyn ExportHandle,
    command: Command,
    payload: Bytes,
) -> (Outcome, Disposition) {
    let result = match command {
        Command::Read {
            offset_bytes,
            length_bytes,
        } => {
            let mut buf = vec![0u8; usize::try_from(length_bytes).expect("u32 fits usize")];
            export
                .read(offset_bytes, &mut buf)
                .map(|()| Outcome::Data(buf))
        }
        Command::Write {
            offset_bytes,
            length_bytes,
            fua,
        } => {
            assert_eq!(
                payload.len(),
                usize::try_from(length_bytes).expect("u32 fits usize")
            );
            // A large payload is handed over: the engine buffers the request's own bytes, not
            // a copy. A small one is copied: it is a slice of the connection's read buffer,
            // and holding it until destage would keep the whole read (up to many requests)
            // alive for a few KiB, memory the write buffer's bound does not count.
            if payload.len() >= OWNED_PAYLOAD_MIN_BYTES {
                export.write_owned(offset_bytes, payload, fua)
            } else {
                export.write(offset_bytes, &payload, fua)
            }
            .map(|()| Outcome::Done)
        }
        Command::Flush => export.flush().map(|()| Outcome::Done),
        Command::Trim {
            offset_bytes,
            length_bytes,
            fua,
        } => export
            .trim(offset_bytes, u64::from(length_bytes), fua)
            .map(|()| Outcome::Done),
        Command::WriteZeroes {
            offset_bytes,
            length_bytes,
            may_trim,
            fua,
        } => export
            .write_zeroes(offset_bytes, u64::from(length_bytes), may_trim, fua)
            .map(|()| Outcome::Done),
        Command::BlockStatus {
            offset_bytes,
            length_bytes,
            req_one,
        } => export
            .block_status(offset_bytes, u64::from(length_bytes))
            .and_then(|statuses| {
                let extents = to_nbd_extents(&statuses, length_bytes, req_one);
                if extents.is_empty() {
                    Err(ExportIoError::Io {
                        detail: "block status returned no extents".into(),
                    })
                } else {
                    Ok(Outcome::Extents(extents))
                }
            }),
        Command::Disconnect => unreachable!("disconnect is handled by the reader"),
    };
    completed(result)
}

/// [`execute`] whose outcome goes to `done`: for a write or a FLUSH, possibly later and on
/// another thread (the one that read the partner c.node's answer), so the calling worker
/// does not wait for it; for the other commands, before this returns.
pub(super) fn execute_then(
    export: &dyn ExportHandle,
    command: Command,
    payload: Bytes,
    done: impl FnOnce(Outcome, Disposition) + Send + 'static,
) {
    let finish = |done: Box<dyn FnOnce(Outcome, Disposition) + Send>| -> IoDone {
        Box::new(move |result| {
            let (outcome, disposition) = completed(result.map(|()| Outcome::Done));
            done(outcome, disposition);
        })
    };
    match command {
        Command::Write {
            offset_bytes,
            length_bytes,
            fua,
        } => {
            assert_eq!(
                payload.len(),
                usize::try_from(length_bytes).expect("u32 fits usize")
            );
            // As in `execute`: a small payload is copied off the connection's read buffer.
            let payload = if payload.len() >= OWNED_PAYLOAD_MIN_BYTES {
                payload
            } else {
                Bytes::copy_from_slice(&payload)
            };
            export.write_then(offset_bytes, payload, fua, finish(Box::new(done)));
        }
        Command::Flush => export.flush_then(finish(Box::new(done))),
        other => {
            let (outcome, disposition) = execute(export, other, payload);
            done(outcome, disposition);
        }
    }
}

/// A backend call's result as the reply's outcome and what the connection does next.
fn completed(result: Result<Outcome, ExportIoError>) -> (Outcome, Disposition) {
    match result {
        Ok(outcome) => (outcome, Disposition::Continue),
        Err(error) => {
            let (errno, disposition) = nbd_status(&error);
            debug!(%error, ?errno, "nbd request failed");
            (Outcome::Failed(errno), disposition)
        }
    }
}

/// Convert backend extents to NBD descriptors: clipped to the requested length, empty ones
/// dropped, neighbours with equal flags merged, at most one with REQ_ONE, and a bounded count.
fn to_nbd_extents(statuses: &[ExtentStatus], length_bytes: u32, req_one: bool) -> Vec<Extent> {
    let mut out: Vec<Extent> = Vec::new();
    let mut left = length_bytes;
    for s in statuses {
        if left == 0 {
            break;
        }
        let len = u32::try_from(s.length_bytes.min(u64::from(left))).expect("clipped to u32");
        if len == 0 {
            continue;
        }
        left -= len;
        let flags = if s.hole { STATE_HOLE } else { 0 } | if s.zero { STATE_ZERO } else { 0 };
        match out.last_mut() {
            Some(last) if last.flags == flags => last.length_bytes += len,
            _ => out.push(Extent {
                length_bytes: len,
                flags,
            }),
        }
        if out.len() >= BLOCK_STATUS_EXTENTS_MAX {
            break;
        }
    }
    if req_one {
        out.truncate(1);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(length_bytes: u64, hole: bool, zero: bool) -> ExtentStatus {
        ExtentStatus {
            length_bytes,
            hole,
            zero,
        }
    }

    #[test]
    fn extents_are_clipped_merged_and_flagged() {
        let statuses = [
            status(4096, false, false),
            status(4096, false, false),
            status(8192, true, true),
            status(1 << 40, false, true),
        ];
        let got = to_nbd_extents(&statuses, 20480, false);
        assert_eq!(
            got,
            vec![
                Extent {
                    length_bytes: 8192,
                    flags: 0
                },
                Extent {
                    length_bytes: 8192,
                    flags: STATE_HOLE | STATE_ZERO
                },
                Extent {
                    length_bytes: 4096,
                    flags: STATE_ZERO
                },
            ]
        );
        assert_eq!(to_nbd_extents(&statuses, 20480, true).len(), 1);
        assert!(to_nbd_extents(&[status(0, true, true)], 4096, false).is_empty());
    }

    #[test]
    fn every_backend_error_has_one_errno() {
        let cases = [
            (
                ExportIoError::Invalid { reason: "x" },
                Errno::Invalid,
                Disposition::Continue,
            ),
            (
                ExportIoError::ReadOnly,
                Errno::NotPermitted,
                Disposition::Continue,
            ),
            (
                ExportIoError::NoSpace,
                Errno::NoSpace,
                Disposition::Continue,
            ),
            (
                ExportIoError::Io { detail: "x".into() },
                Errno::Io,
                Disposition::Continue,
            ),
            (
                ExportIoError::Gone,
                Errno::Shutdown,
                Disposition::Disconnect,
            ),
        ];
        for (error, errno, disposition) in cases {
            assert_eq!(nbd_status(&error), (errno, disposition));
        }
    }
}
