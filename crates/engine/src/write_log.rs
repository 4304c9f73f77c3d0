//! The write log seam: where acknowledged writes become durable before destage. Today the
//! [`crate::journal::Journal`] (a local file, single node); the RAM mirror of a partner c.node
//! is the second implementation to come (DESIGN §3). The engine only uses this trait.
//!
//! Records are appended with the log locked, so a caller can publish a record (to the write
//! buffer) in seq order and switch layers (snapshot, refresh) between two records.

use crate::error::IoFailure;
use crate::journal::RecordHeader;

/// Appends records while the write log is locked (see [`WriteLog::with_lock`]).
pub trait LogAppender {
    /// Append one record; returns its seq. Durable against a process crash on return.
    fn append(&mut self, header: RecordHeader, payload: &[u8]) -> Result<u64, IoFailure>;
}

/// A durable, ordered log of acknowledged records.
pub trait WriteLog: Send + Sync + std::fmt::Debug {
    /// Run `f` with the log locked: no record is appended meanwhile except through the
    /// appender it gets.
    fn with_lock(&self, f: &mut dyn FnMut(&mut dyn LogAppender));
    /// Make every record with seq <= `upto` durable against power loss (group commit).
    fn sync(&self, upto: u64) -> Result<(), IoFailure>;
    /// The seq of the newest record appended.
    fn written_seq(&self) -> u64;
    /// Forget records with seq <= `hwm` (reflected in durable stripes).
    fn release_upto(&self, hwm: u64) -> Result<(), IoFailure>;
    /// Units of storage in use (journal files), for stats.
    fn pieces_in_use(&self) -> usize;
}

impl dyn WriteLog {
    /// Run `f` with the log locked and return what it returns.
    pub fn locked<R>(&self, f: impl FnOnce(&mut dyn LogAppender) -> R) -> R {
        let mut f = Some(f);
        let mut out = None;
        self.with_lock(&mut |appender| {
            let f = f.take().expect("with_lock calls its closure once");
            out = Some(f(appender));
        });
        out.expect("with_lock calls its closure")
    }

    /// Append one record whose header `resolve` decides with the log locked (a layer switch
    /// cannot fall between choosing the layer and publishing the record); `resolve` may
    /// refuse (nothing written). `on_written` runs still locked.
    pub fn append_resolved<R, E: From<IoFailure>>(
        &self,
        payload: &[u8],
        resolve: impl FnOnce() -> Result<RecordHeader, E>,
        on_written: impl FnOnce(u64, RecordHeader) -> R,
    ) -> Result<R, E> {
        self.locked(|appender| {
            let header = resolve()?;
            let seq = appender.append(header, payload)?;
            Ok(on_written(seq, header))
        })
    }
}
