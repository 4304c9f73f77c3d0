//! The write log seam: where acknowledged writes become durable before destage. Today the
//! [`crate::journal::Journal`] (a local file, single node); the RAM mirror of a partner c.node
//! is the second implementation to come (DESIGN §3). The engine only uses this trait.
//!
//! Records are appended with the log locked, so a caller can publish a record (to the write
//! buffer) in seq order and switch layers (snapshot, refresh) between two records.

use crate::error::IoFailure;
use crate::units::LayerId;

/// What a record does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// `count` blocks of data from `lba`; the payload holds them.
    Write,
    /// Unmap `count` blocks from `lba`.
    Trim,
    /// Make `count` blocks from `lba` read as zeroes, staying allocated.
    Zero,
    /// Drop the layer: release every block it references (refresh, rollback, delete).
    DropLayer,
    /// Merge the layer into the layer whose id is in the `lba` field (snapshot delete).
    MergeLayer,
    /// `count` blocks of data from `lba` written through to a stripe, no payload: the write
    /// is acknowledged only once a *written* segment reflects the record (its chunks are in
    /// the d.nodes' page cache: it survives a kill of any process; FLUSH and FUA wait until
    /// it is durable), so replay (which starts after the replayed segments' high-water mark)
    /// skips it: a segment that reflects an acknowledged one was replayed, or was lost with
    /// power before any FLUSH or FUA covered it.
    WriteThrough,
    /// A marker for the stripe of segment `lba` of the family whose id is in the `layer`
    /// field (no payload): `count` is [`SEGMENT_WRITTEN`] once its chunks are written (before
    /// a write-through is acknowledged from it), [`SEGMENT_DURABLE`] once they are synced
    /// (before the journal releases its records or GC deletes what it moved). Recovery uses
    /// them as proof: a segment it cannot read with either marker is waited for, never
    /// discarded (a durable one always; a written one until every d.node answers, since a
    /// power cut may have torn it); one without a marker while the journal still holds every
    /// record after the family's high-water mark was never written (see `recovery`, and
    /// `docs/design/on-disk.md`, "What may delete what"). Replay skips it otherwise. Builds
    /// before the written marker read every marker as durable: more waiting, never less.
    SegmentDurable,
}

/// `count` of a [`RecordKind::SegmentDurable`] marker: the stripe is durable.
pub const SEGMENT_DURABLE: u64 = 0;
/// `count` of a [`RecordKind::SegmentDurable`] marker: the stripe is written, not yet durable.
pub const SEGMENT_WRITTEN: u64 = 1;

impl RecordKind {
    pub fn code(self) -> u8 {
        match self {
            RecordKind::Write => 1,
            RecordKind::Trim => 2,
            RecordKind::Zero => 3,
            RecordKind::DropLayer => 4,
            RecordKind::MergeLayer => 5,
            RecordKind::WriteThrough => 6,
            RecordKind::SegmentDurable => 7,
        }
    }

    pub fn from_code(code: u8) -> Option<RecordKind> {
        match code {
            1 => Some(RecordKind::Write),
            2 => Some(RecordKind::Trim),
            3 => Some(RecordKind::Zero),
            4 => Some(RecordKind::DropLayer),
            5 => Some(RecordKind::MergeLayer),
            6 => Some(RecordKind::WriteThrough),
            7 => Some(RecordKind::SegmentDurable),
            _ => None,
        }
    }
}

/// A replayed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRecord {
    pub seq: u64,
    pub header: RecordHeader,
    pub payload: Vec<u8>,
}

/// What a record does and where: everything but its seq and payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordHeader {
    pub kind: RecordKind,
    pub layer: LayerId,
    pub lba: u64,
    pub count: u64,
}

/// Gets the result of [`WriteLog::replicated_then`] or [`WriteLog::sync_then`], once.
pub type Acked = Box<dyn FnOnce(Result<(), IoFailure>) + Send>;

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
    /// Wait until the record `seq` may be acknowledged to a client: a log that keeps a second
    /// copy elsewhere (a partner c.node's RAM) returns once that copy exists, and fails when
    /// this process may no longer acknowledge writes (it lost its ownership lease). A local
    /// log has nothing to wait for.
    fn replicated(&self, seq: u64) -> Result<(), IoFailure> {
        let _ = seq;
        Ok(())
    }
    /// [`WriteLog::replicated`] without waiting on this thread: `done` gets its result,
    /// possibly on another thread (the one that learns the second copy exists), possibly
    /// before this returns. `done` must not block for long: it may run on the thread that
    /// reads the partner's answers. A log with nothing to wait for calls it at once.
    fn replicated_then(&self, seq: u64, done: Acked) {
        done(self.replicated(seq));
    }
    /// [`WriteLog::sync`] whose wait for a second copy's sync, if any, does not hold this
    /// thread (the local sync does): `done` as in [`WriteLog::replicated_then`].
    fn sync_then(&self, upto: u64, done: Acked) {
        done(self.sync(upto));
    }
    /// Whether this process may still answer reads: not once it may have lost the ownership
    /// of its volumes (a successor may have changed them since).
    fn may_serve(&self) -> Result<(), IoFailure> {
        Ok(())
    }
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

/// Opens a write log at start-up, returning the records to replay (seq >= what it holds).
pub trait WriteLogSource: Send + Sync + std::fmt::Debug {
    /// Open the log; new records get seqs from at least `min_next_seq` on.
    fn open(&self, min_next_seq: u64)
        -> Result<(Box<dyn WriteLog>, Vec<JournalRecord>), IoFailure>;
    /// The records `open` would return, changing nothing: recovery reads them as evidence
    /// before it knows where new records must start.
    fn scan(&self) -> Result<Vec<JournalRecord>, IoFailure>;
}

/// An in-memory write log with the fault model of a journal on a disk with a write cache:
/// at a [`SimWriteLog::power_cut`] every synced record survives, and of the records appended
/// after the last sync only a prefix does (the rest, and a torn last one, are gone). Clones
/// share the same log, so a test keeps one to cut the power while the engine holds another.
#[derive(Debug, Clone, Default)]
pub struct SimWriteLog {
    inner: std::sync::Arc<parking_lot::Mutex<SimLogState>>,
}

#[derive(Debug, Default)]
struct SimLogState {
    records: std::collections::VecDeque<JournalRecord>,
    next_seq: u64,
    synced_seq: u64,
}

struct SimAppender<'a>(&'a mut SimLogState);

impl LogAppender for SimAppender<'_> {
    fn append(&mut self, header: RecordHeader, payload: &[u8]) -> Result<u64, IoFailure> {
        let seq = self.0.next_seq.max(1);
        self.0.next_seq = seq + 1;
        self.0.records.push_back(JournalRecord {
            seq,
            header,
            payload: payload.to_vec(),
        });
        Ok(seq)
    }
}

impl SimWriteLog {
    pub fn new() -> SimWriteLog {
        SimWriteLog::default()
    }

    /// Lose power: records after the last sync survive only as a random prefix.
    pub fn power_cut(&self, seed: u64) {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        let mut st = self.inner.lock();
        let synced = st.synced_seq;
        let unsynced = st.records.iter().filter(|r| r.seq > synced).count();
        let keep = rng.random_range(0..=unsynced);
        let drop_from = st.records.len() - unsynced + keep;
        st.records.truncate(drop_from);
    }

    /// The newest record made durable by a sync.
    pub fn synced_seq(&self) -> u64 {
        self.inner.lock().synced_seq
    }
}

impl WriteLog for SimWriteLog {
    fn with_lock(&self, f: &mut dyn FnMut(&mut dyn LogAppender)) {
        let mut st = self.inner.lock();
        f(&mut SimAppender(&mut st));
    }

    fn sync(&self, upto: u64) -> Result<(), IoFailure> {
        let mut st = self.inner.lock();
        let written = st.next_seq.saturating_sub(1);
        st.synced_seq = st.synced_seq.max(upto.min(written));
        Ok(())
    }

    fn written_seq(&self) -> u64 {
        self.inner.lock().next_seq.saturating_sub(1)
    }

    fn release_upto(&self, hwm: u64) -> Result<(), IoFailure> {
        let mut st = self.inner.lock();
        while st.records.front().is_some_and(|r| r.seq <= hwm) {
            st.records.pop_front();
        }
        Ok(())
    }

    fn pieces_in_use(&self) -> usize {
        1
    }
}

impl WriteLogSource for SimWriteLog {
    fn open(
        &self,
        min_next_seq: u64,
    ) -> Result<(Box<dyn WriteLog>, Vec<JournalRecord>), IoFailure> {
        let mut st = self.inner.lock();
        let last = st.records.back().map_or(0, |r| r.seq);
        st.next_seq = (last + 1).max(min_next_seq);
        // Everything that survived the power cut is on the disk now.
        st.synced_seq = st.next_seq - 1;
        let records = st.records.iter().cloned().collect();
        Ok((Box::new(self.clone()), records))
    }

    fn scan(&self) -> Result<Vec<JournalRecord>, IoFailure> {
        Ok(self.inner.lock().records.iter().cloned().collect())
    }
}
