//! [`MeteredBackend`]: wraps an export backend so every I/O a front end makes through it is
//! counted and timed for its export and protocol. Each listener gets its own wrapper (its
//! protocol label); the wrappers share one [`IoStats`].

use std::sync::Arc;

use bytes::Bytes;

use crate::backend::{
    AccessTable, ExportBackend, ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone,
    OpenError,
};

use super::counters::{clock_us, ExportCounters, Op, ProtocolCounters};
use super::{IoStats, Protocol};

/// An export backend whose opened exports record their I/O.
pub struct MeteredBackend {
    inner: Arc<dyn ExportBackend>,
    stats: Arc<IoStats>,
    protocol: Protocol,
}

impl MeteredBackend {
    pub fn new(
        inner: Arc<dyn ExportBackend>,
        stats: Arc<IoStats>,
        protocol: Protocol,
    ) -> MeteredBackend {
        MeteredBackend {
            inner,
            stats,
            protocol,
        }
    }
}

impl ExportBackend for MeteredBackend {
    fn list_exports(&self) -> Vec<ExportInfo> {
        self.inner.list_exports()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError> {
        let inner = self.inner.open(name)?;
        let counters = self.stats.export(&inner.info().name);
        Ok(Arc::new(MeteredExport {
            inner,
            counters,
            protocol: self.protocol,
        }))
    }

    fn access(&self) -> Arc<AccessTable> {
        self.inner.access()
    }

    fn access_generation(&self) -> u64 {
        self.inner.access_generation()
    }
}

struct MeteredExport {
    inner: Arc<dyn ExportHandle>,
    counters: Arc<ExportCounters>,
    protocol: Protocol,
}

impl MeteredExport {
    fn counters(&self) -> &ProtocolCounters {
        self.counters.protocol(self.protocol)
    }

    fn timed<T>(
        &self,
        op: Op,
        bytes: u64,
        io: impl FnOnce() -> Result<T, ExportIoError>,
    ) -> Result<T, ExportIoError> {
        let start_us = clock_us();
        self.counters.busy.start(start_us);
        let result = io();
        let end_us = clock_us();
        self.counters.busy.end(end_us);
        self.counters()
            .op(op)
            .record(bytes, end_us.saturating_sub(start_us), result.is_ok());
        result
    }
}

impl MeteredExport {
    /// [`MeteredExport::timed`] for a call that hands its result on: timed from now until
    /// the returned callback runs.
    fn timed_then(&self, op: Op, bytes: u64, done: IoDone) -> IoDone {
        let start_us = clock_us();
        self.counters.busy.start(start_us);
        let counters = Arc::clone(&self.counters);
        let protocol = self.protocol;
        Box::new(move |result| {
            let end_us = clock_us();
            counters.busy.end(end_us);
            counters.protocol(protocol).op(op).record(
                bytes,
                end_us.saturating_sub(start_us),
                result.is_ok(),
            );
            done(result);
        })
    }
}

impl ExportHandle for MeteredExport {
    fn info(&self) -> ExportInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        let bytes = buf.len() as u64;
        self.timed(Op::Read, bytes, || self.inner.read(offset_bytes, buf))
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        self.timed(Op::Write, data.len() as u64, || {
            self.inner.write(offset_bytes, data, fua)
        })
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        self.timed(Op::Write, data.len() as u64, || {
            self.inner.write_owned(offset_bytes, data, fua)
        })
    }

    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        let bytes = data.len() as u64;
        let done = self.timed_then(Op::Write, bytes, done);
        self.inner.write_then(offset_bytes, data, fua, done);
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.timed(Op::Flush, 0, || self.inner.flush())
    }

    fn flush_then(&self, done: IoDone) {
        let done = self.timed_then(Op::Flush, 0, done);
        self.inner.flush_then(done);
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.timed(Op::Discard, length_bytes, || {
            self.inner.trim(offset_bytes, length_bytes, fua)
        })
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        self.timed(Op::Discard, length_bytes, || {
            self.inner
                .write_zeroes(offset_bytes, length_bytes, may_trim, fua)
        })
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
        self.timed(Op::Write, new.len() as u64, || {
            self.inner
                .compare_and_write(offset_bytes, compare, new, fua)
        })
    }
}
