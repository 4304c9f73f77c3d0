//! Writes and flushes whose acknowledgement is handed to a callback instead of waited for
//! on the caller's thread ([`Engine::write_then`], [`Engine::flush_then`]): with a partner
//! c.node, the wait for its answer is most of a write's time, and a front end's worker thread
//! parked for it costs two context switches per request and serializes what follows it (see
//! docs/PERFORMANCE.md, "The mirror's cost after cutting its hand-offs").
//!
//! The acknowledgement rule is the blocking calls', step for step: the callback gets `Ok`
//! only once the record is in the journal and the write log said it is replicated
//! ([`WriteLog::replicated_then`]; a FLUSH: synced, [`WriteLog::sync_then`]). What may block
//! on a disk (the journal's append and fdatasync, a write-through's stripe) still runs on the
//! caller's thread; only the wait for the second copy is handed on.
//!
//! [`WriteLog::replicated_then`]: crate::write_log::WriteLog::replicated_then
//! [`WriteLog::sync_then`]: crate::write_log::WriteLog::sync_then

use bytes::Bytes;

use crate::engine::{Engine, Journaled};
use crate::error::EngineError;
use crate::state::map_io;
use crate::units::VolumeId;
use crate::write_waits::wait_acked_durable;

/// Gets the result of [`Engine::write_then`] or [`Engine::flush_then`], once, possibly on
/// another thread, possibly before the call returns. It must not block for long.
pub type Done = Box<dyn FnOnce(Result<(), EngineError>) + Send>;

impl Engine {
    /// [`Engine::write_owned`] that hands its result to `done` instead of returning it. A
    /// FUA write is done here, blocking (its sync runs once it is replicated; rare enough
    /// not to be worth a second hand-off).
    pub fn write_then(&self, id: VolumeId, offset_bytes: u64, data: Bytes, fua: bool, done: Done) {
        if fua {
            return done(self.write_owned(id, offset_bytes, data, fua));
        }
        match self.write_journaled(id, offset_bytes, &data, Some(&data), false) {
            Err(e) => done(Err(e)),
            Ok(Journaled::Done) => done(Ok(())),
            Ok(Journaled::Replicate(seq)) => self
                .shared
                .journal
                .replicated_then(seq, Box::new(move |r| done(r.map_err(map_io)))),
        }
    }

    /// [`Engine::flush`] that hands its result to `done`: the write-through stripes and the
    /// local journal sync are waited for here, the second copy's sync is not.
    pub fn flush_then(&self, done: Done) {
        if let Err(e) = wait_acked_durable(&self.shared) {
            return done(Err(e));
        }
        let upto = self.shared.journal.written_seq();
        self.shared
            .journal
            .sync_then(upto, Box::new(move |r| done(r.map_err(map_io))));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::config::EngineConfig;

    const WAIT: Duration = Duration::from_secs(10);

    fn to(tx: &mpsc::Sender<Result<(), EngineError>>) -> Done {
        let tx = tx.clone();
        Box::new(move |r| {
            let _ = tx.send(r);
        })
    }

    #[test]
    fn writes_and_flushes_handed_on_report_what_the_blocking_calls_return() {
        let dir = tempfile::tempdir().unwrap();
        let engine = Engine::open(EngineConfig::for_tests(dir.path())).unwrap();
        engine.create_volume("v", 1 << 20).unwrap();
        let id = engine.open_volume("v").unwrap().id;
        let (tx, rx) = mpsc::channel();
        engine.write_then(id, 8192, Bytes::from(vec![7u8; 4096]), false, to(&tx));
        rx.recv_timeout(WAIT).unwrap().unwrap();
        let mut buf = vec![0u8; 4096];
        engine.read(id, 8192, &mut buf).unwrap();
        assert_eq!(buf, vec![7u8; 4096]);
        engine.flush_then(to(&tx));
        rx.recv_timeout(WAIT).unwrap().unwrap();
        // FUA takes the blocking path, with the same result.
        engine.write_then(id, 8192, Bytes::from(vec![9u8; 4096]), true, to(&tx));
        rx.recv_timeout(WAIT).unwrap().unwrap();
        engine.read(id, 8192, &mut buf).unwrap();
        assert_eq!(buf, vec![9u8; 4096]);
        // Refused before the journal: the error reaches the callback.
        engine.write_then(id, 1 << 20, Bytes::from(vec![0u8; 4096]), false, to(&tx));
        assert!(matches!(
            rx.recv_timeout(WAIT).unwrap(),
            Err(EngineError::OutOfRange { .. })
        ));
    }
}
