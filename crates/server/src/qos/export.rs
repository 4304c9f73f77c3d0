//! [`QosExport`]: an open volume behind its throttle. The engine backend wraps every export
//! it opens in one, so every I/O that reaches this c.node's engine passes here: NBD, iSCSI,
//! and requests other c.nodes forward to this one, the volume's owner.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::volume::{Direction, VolumeQos};
use crate::backend::{ExportHandle, ExportInfo, ExportIoError, ExtentStatus};

/// An export whose reads and writes take from the volume's buckets first.
#[derive(Debug)]
pub struct QosExport<H: ?Sized> {
    inner: Arc<H>,
    qos: Arc<VolumeQos>,
}

impl<H: ExportHandle + ?Sized> QosExport<H> {
    pub fn new(inner: Arc<H>, qos: Arc<VolumeQos>) -> QosExport<H> {
        QosExport { inner, qos }
    }

    /// Pay (unless prepaid), wait, run, and record the time the call took.
    fn run<T>(&self, dir: Direction, bytes: u64, call: impl FnOnce() -> T) -> T {
        let wait = self.qos.admit(dir, bytes);
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let start = Instant::now();
        let out = call();
        self.qos.completed(bytes, start.elapsed());
        out
    }
}

impl<H: ExportHandle + ?Sized> ExportHandle for QosExport<H> {
    fn info(&self) -> ExportInfo {
        self.inner.info()
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        let len = buf.len() as u64;
        self.run(Direction::Read, len, || self.inner.read(offset_bytes, buf))
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        self.run(Direction::Write, data.len() as u64, || {
            self.inner.write(offset_bytes, data, fua)
        })
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        self.run(Direction::Write, data.len() as u64, || {
            self.inner.write_owned(offset_bytes, data, fua)
        })
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.inner.flush()
    }

    /// One I/O unit and no bytes: a trim moves no data.
    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.run(Direction::Write, 0, || {
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
        self.run(Direction::Write, 0, || {
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

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        self.run(Direction::Write, new.len() as u64, || {
            self.inner
                .compare_and_write(offset_bytes, compare, new, fua)
        })
    }

    fn qos(&self) -> Option<Arc<VolumeQos>> {
        Some(Arc::clone(&self.qos))
    }
}
