//! Live client sessions per export, as `rbd status` lists an image's watchers: who has a
//! volume or snapshot open right now, over which protocol, from where, as which host, since
//! when, and how much I/O it did.
//!
//! A front end registers a session when a connection opens an export ([`Sessions::track`]
//! wraps the opened [`ExportHandle`]); the registration ends when the last reference to that
//! wrapper goes, i.e. once the connection has ended and its in-flight requests have finished.
//! An NBD connection is one session; an iSCSI session is one per LUN it opened (an array
//! target login that sees three LUNs is three sessions, one per export).
//!
//! The management API reads this to show sessions and to refuse destructive commands on a
//! volume that has some (delete, refresh, rollback) unless forced. Sessions whose export is
//! already gone (deleted, refreshed, rolled back: the front end is disconnecting them) are not
//! listed.
//!
//! Counting costs two relaxed atomic adds per read or write, beside the per-export statistics
//! of [`crate::io_stats`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::api::types::{ExportSession, SessionProtocol};
use crate::backend::{ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone};

/// Every live session of this c.node's front ends.
#[derive(Debug, Default)]
pub struct Sessions {
    next_id: AtomicU64,
    live: Mutex<BTreeMap<u64, Arc<Entry>>>,
}

/// Who opened an export: what the front end knows of the client.
#[derive(Debug, Clone)]
pub struct SessionOrigin {
    pub protocol: SessionProtocol,
    /// NBD: the client's address and port; iSCSI: the initiator name.
    pub client: String,
    /// The client's address and port.
    pub address: SocketAddr,
    /// The host the client was recognised as (by address, TLS name or initiator name).
    pub host: Option<String>,
}

#[derive(Debug)]
struct Entry {
    id: u64,
    export: String,
    origin: SessionOrigin,
    since_unix_s: u64,
    counters: Counters,
    /// To leave out sessions whose export is gone (they are being disconnected).
    handle: Weak<dyn ExportHandle>,
}

#[derive(Debug, Default)]
struct Counters {
    reads: AtomicU64,
    writes: AtomicU64,
    read_bytes: AtomicU64,
    written_bytes: AtomicU64,
}

impl Sessions {
    pub fn new() -> Arc<Sessions> {
        Arc::new(Sessions::default())
    }

    /// Registers a session of `origin` on the opened `handle`; the returned handle counts its
    /// reads and writes, and the session ends when the last clone of it is dropped.
    pub fn track(
        self: &Arc<Self>,
        handle: Arc<dyn ExportHandle>,
        origin: SessionOrigin,
    ) -> Arc<dyn ExportHandle> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        let entry = Arc::new(Entry {
            id,
            export: handle.info().name,
            origin,
            since_unix_s: unix_s(),
            counters: Counters::default(),
            handle: Arc::downgrade(&handle),
        });
        self.live.lock().insert(id, Arc::clone(&entry));
        Arc::new(TrackedExport {
            inner: handle,
            entry,
            sessions: Arc::downgrade(self),
        })
    }

    /// The live sessions of `export` (a volume or a snapshot by its full name), oldest first.
    pub fn of_export(&self, export: &str) -> Vec<ExportSession> {
        self.matching(|e| e == export)
    }

    /// The live sessions of every export named in `exports`, oldest first.
    pub fn of_exports(&self, exports: &[String]) -> Vec<ExportSession> {
        self.matching(|e| exports.iter().any(|x| x == e))
    }

    /// Every live session, oldest first.
    pub fn all(&self) -> Vec<ExportSession> {
        self.matching(|_| true)
    }

    fn matching(&self, wanted: impl Fn(&str) -> bool) -> Vec<ExportSession> {
        let live: Vec<Arc<Entry>> = self
            .live
            .lock()
            .values()
            .filter(|e| wanted(&e.export))
            .cloned()
            .collect();
        live.iter()
            .filter(|e| e.handle.upgrade().is_some_and(|h| !h.is_gone()))
            .map(|e| e.view())
            .collect()
    }
}

impl Entry {
    fn view(&self) -> ExportSession {
        let c = &self.counters;
        ExportSession {
            id: self.id,
            export: self.export.clone(),
            protocol: self.origin.protocol,
            client: self.origin.client.clone(),
            address: self.origin.address.to_string(),
            host: self.origin.host.clone(),
            since: rfc3339_utc(self.since_unix_s),
            since_unix_s: self.since_unix_s,
            reads: c.reads.load(Ordering::Relaxed),
            writes: c.writes.load(Ordering::Relaxed),
            read_bytes: c.read_bytes.load(Ordering::Relaxed),
            written_bytes: c.written_bytes.load(Ordering::Relaxed),
        }
    }
}

/// An opened export that counts into its session and ends it when dropped.
struct TrackedExport {
    inner: Arc<dyn ExportHandle>,
    entry: Arc<Entry>,
    sessions: Weak<Sessions>,
}

impl Drop for TrackedExport {
    fn drop(&mut self) {
        if let Some(sessions) = self.sessions.upgrade() {
            sessions.live.lock().remove(&self.entry.id);
        }
    }
}

impl ExportHandle for TrackedExport {
    fn info(&self) -> ExportInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        let c = &self.entry.counters;
        c.reads.fetch_add(1, Ordering::Relaxed);
        c.read_bytes.fetch_add(buf.len() as u64, Ordering::Relaxed);
        self.inner.read(offset_bytes, buf)
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        let c = &self.entry.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write(offset_bytes, data, fua)
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        let c = &self.entry.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write_owned(offset_bytes, data, fua)
    }

    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        let c = &self.entry.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.written_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        self.inner.write_then(offset_bytes, data, fua, done);
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.inner.flush()
    }

    fn flush_then(&self, done: IoDone) {
        self.inner.flush_then(done);
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.inner.trim(offset_bytes, length_bytes, fua)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        self.inner
            .write_zeroes(offset_bytes, length_bytes, may_trim, fua)
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        self.inner.block_status(offset_bytes, length_bytes)
    }

    fn is_gone(&self) -> bool {
        self.inner.is_gone()
    }

    fn qos(&self) -> Option<std::sync::Arc<crate::qos::VolumeQos>> {
        self.inner.qos()
    }

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        let c = &self.entry.counters;
        c.writes.fetch_add(1, Ordering::Relaxed);
        c.written_bytes
            .fetch_add(new.len() as u64, Ordering::Relaxed);
        self.inner
            .compare_and_write(offset_bytes, compare, new, fua)
    }
}

fn unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Unix seconds as an RFC 3339 date and time in UTC, `2026-05-01T12:34:56Z`.
pub fn rfc3339_utc(secs: u64) -> String {
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm), in unsigned arithmetic.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;

    use super::*;

    #[derive(Debug, Default)]
    struct Fake {
        gone: AtomicBool,
    }

    impl ExportHandle for Fake {
        fn info(&self) -> ExportInfo {
            ExportInfo {
                name: "vol".into(),
                description: String::new(),
                size_bytes: 1 << 20,
                read_only: false,
                logical_block_size_bytes: 512,
            }
        }
        fn read(&self, _: u64, _: &mut [u8]) -> Result<(), ExportIoError> {
            Ok(())
        }
        fn write(&self, _: u64, _: &[u8], _: bool) -> Result<(), ExportIoError> {
            Ok(())
        }
        fn flush(&self) -> Result<(), ExportIoError> {
            Ok(())
        }
        fn trim(&self, _: u64, _: u64, _: bool) -> Result<(), ExportIoError> {
            Ok(())
        }
        fn write_zeroes(&self, _: u64, _: u64, _: bool, _: bool) -> Result<(), ExportIoError> {
            Ok(())
        }
        fn block_status(&self, _: u64, _: u64) -> Result<Vec<ExtentStatus>, ExportIoError> {
            Ok(Vec::new())
        }
        fn is_gone(&self) -> bool {
            self.gone.load(Ordering::Relaxed)
        }
        fn compare_and_write(
            &self,
            offset_bytes: u64,
            compare: &[u8],
            new: &[u8],
            fua: bool,
        ) -> Result<Option<u64>, ExportIoError> {
            crate::backend::read_compare_write(self, offset_bytes, compare, new, fua)
        }
    }

    fn origin(protocol: SessionProtocol, client: &str) -> SessionOrigin {
        SessionOrigin {
            protocol,
            client: client.into(),
            address: "127.0.0.1:4000".parse().unwrap(),
            host: None,
        }
    }

    #[test]
    fn a_session_lives_as_long_as_its_handle_and_counts_its_io() {
        let sessions = Sessions::new();
        let inner = Arc::new(Fake::default());
        let handle = sessions.track(
            inner.clone(),
            origin(SessionProtocol::Nbd, "127.0.0.1:4000"),
        );
        let other = sessions.track(
            Arc::new(Fake::default()),
            origin(SessionProtocol::Iscsi, "iqn.x:db1"),
        );
        handle.write(0, &[0; 4096], false).unwrap();
        handle.read(0, &mut [0; 512]).unwrap();
        handle.read(0, &mut [0; 512]).unwrap();
        let listed = sessions.of_export("vol");
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].client, "127.0.0.1:4000");
        assert_eq!((listed[0].reads, listed[0].writes), (2, 1));
        assert_eq!(
            (listed[0].read_bytes, listed[0].written_bytes),
            (1024, 4096)
        );
        assert_eq!(listed[1].protocol, SessionProtocol::Iscsi);
        assert!(sessions.of_export("other").is_empty());
        // Being disconnected (the export is gone): no longer listed.
        inner.gone.store(true, Ordering::Relaxed);
        assert_eq!(sessions.of_export("vol").len(), 1);
        drop(handle);
        drop(other);
        assert!(sessions.all().is_empty());
        assert!(sessions.live.lock().is_empty());
    }

    #[test]
    fn dates_are_rfc3339_in_utc() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(1_767_225_599), "2025-12-31T23:59:59Z");
    }
}
