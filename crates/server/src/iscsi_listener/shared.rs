//! What the tasks of one connection share, below [`super::connection`], [`super::session`]
//! and [`super::respond`], which all use it and none of which it uses: the session's
//! [`Shared`] sequence numbers and response queue (of [`Frames`]), the [`ConnError`] a
//! connection ends with, and the read buffer step.

use std::collections::HashSet;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use weft_iscsi::session::Sequence;
use weft_iscsi::{Digests, Numbers, SessionParams};

/// Read buffer growth step.
pub(super) const READ_BUFFER_BYTES: usize = 256 * 1024;

/// What one send queues for the writer task: byte strings written back to back, in order.
/// A read's data segments are slices of the command's own buffer between their headers and
/// trailers, so the writer sends them with one vectored write and nothing copies them.
pub(super) type Frames = Vec<Bytes>;

/// Why a connection ended early; logged, never propagated.
#[derive(Debug, thiserror::Error)]
pub(super) enum ConnError {
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("framing: {0}")]
    Frame(#[from] weft_iscsi::FrameError),
    #[error("login timed out")]
    LoginTimeout,
    #[error("login refused with status {status:#06x}")]
    LoginRefused {
        status: u16,
        /// The initiator's name, when its first request said it.
        initiator: Option<String>,
    },
    #[error("a PDU other than Login Request during login")]
    NotLogin,
    #[error("protocol: {0}")]
    Protocol(&'static str),
}

/// What the reader and the command jobs share.
pub(super) struct Shared {
    pub(super) sequence: Mutex<Sequence>,
    pub(super) tx: mpsc::UnboundedSender<Frames>,
    pub(super) digests: Digests,
    pub(super) params: SessionParams,
    /// Cancelled when the session must end (export gone, logout).
    pub(super) closing: CancellationToken,
    /// Tags of commands handed to the pool and not yet answered, and a wake-up when one is:
    /// task management waits for them so no response follows its own.
    pub(super) executing: Mutex<HashSet<u32>>,
    pub(super) answered: Notify,
}

impl Shared {
    /// Encode a PDU that carries status (takes the next StatSN) and queue it.
    pub(super) fn send_status(&self, encode: impl FnOnce(Numbers, &mut Vec<u8>)) {
        let mut sequence = self.sequence.lock();
        let mut out = Vec::new();
        encode(sequence.next_status(), &mut out);
        let _ = self.tx.send(vec![Bytes::from(out)]);
    }

    /// Encode a PDU that carries no status (R2T) and queue it.
    pub(super) fn send_plain(&self, encode: impl FnOnce(Numbers, &mut Vec<u8>)) {
        let sequence = self.sequence.lock();
        let mut out = Vec::new();
        encode(sequence.current(), &mut out);
        let _ = self.tx.send(vec![Bytes::from(out)]);
    }
}
