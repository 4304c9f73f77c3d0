//! [`QosExport`]: an open volume behind its throttle. The engine backend wraps every export
//! it opens in one, so every I/O that reaches this c.node's engine passes here: NBD, iSCSI,
//! and requests other c.nodes forward to this one, the volume's owner.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::received::received;
use super::volume::{Direction, VolumeQos};
use crate::backend::{ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone};

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

    /// Pay (unless prepaid), wait, run, and record the latency the client sees: from when
    /// the front end received the request ([`received`]; else from now) to the end of the
    /// call, less the time slept here for the volume's own limit.
    fn run<T>(&self, dir: Direction, bytes: u64, call: impl FnOnce() -> T) -> T {
        let (start, slept) = self.pay(dir, bytes);
        let out = call();
        self.qos
            .completed(bytes, start.elapsed().saturating_sub(slept));
        out
    }

    /// Pay (unless prepaid) and wait: when the latency counts from, and the time slept.
    fn pay(&self, dir: Direction, bytes: u64) -> (Instant, Duration) {
        let start = received().unwrap_or_else(Instant::now);
        let wait = self.qos.admit(dir, bytes);
        let mut slept = Duration::ZERO;
        if !wait.is_zero() {
            let before = Instant::now();
            std::thread::sleep(wait);
            slept = before.elapsed();
        }
        (start, slept)
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

    /// As [`QosExport::run`], the latency recorded when `done` runs.
    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        let bytes = data.len() as u64;
        let (start, slept) = self.pay(Direction::Write, bytes);
        let qos = Arc::clone(&self.qos);
        self.inner.write_then(
            offset_bytes,
            data,
            fua,
            Box::new(move |r| {
                qos.completed(bytes, start.elapsed().saturating_sub(slept));
                done(r);
            }),
        );
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.inner.flush()
    }

    fn flush_then(&self, done: IoDone) {
        self.inner.flush_then(done);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::read_compare_write;
    use crate::ha::clock::SystemClock;
    use crate::qos::serve_received;
    use weft_engine::qos_settings::QosSettings;

    #[derive(Debug)]
    struct Noop;

    impl ExportHandle for Noop {
        fn info(&self) -> ExportInfo {
            ExportInfo {
                name: "v".into(),
                description: String::new(),
                size_bytes: 1 << 20,
                read_only: false,
                logical_block_size_bytes: 4096,
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
            false
        }
        fn compare_and_write(
            &self,
            offset_bytes: u64,
            compare: &[u8],
            new: &[u8],
            fua: bool,
        ) -> Result<Option<u64>, ExportIoError> {
            read_compare_write(self, offset_bytes, compare, new, fua)
        }
    }

    fn export(settings: &QosSettings) -> QosExport<Noop> {
        let qos = Arc::new(VolumeQos::new("v", SystemClock::shared()));
        qos.set(settings);
        QosExport::new(Arc::new(Noop), qos)
    }

    /// The latency recorded, in µs (the middle of its histogram bucket).
    fn recorded_max_us(e: &QosExport<Noop>) -> f64 {
        let b = e.qos.latency().load();
        assert_eq!(b.total(), 1);
        b.quantile_us(1.0)
    }

    #[test]
    fn the_wait_before_the_call_counts_from_the_front_ends_receipt() {
        let e = export(&QosSettings::default());
        // Received 30 ms ago (a queue for a worker thread, say): the client waited that.
        let received = Instant::now()
            .checked_sub(Duration::from_millis(30))
            .unwrap();
        serve_received(received, || e.write(0, &[0; 4096], false)).unwrap();
        assert!(recorded_max_us(&e) >= 20_000.0);
        // Unstamped: the call alone.
        let e = export(&QosSettings::default());
        e.write(0, &[0; 4096], false).unwrap();
        assert!(recorded_max_us(&e) < 10_000.0);
    }

    #[test]
    fn the_volumes_own_throttle_wait_is_not_latency() {
        let e = export(&QosSettings {
            iops_max: Some(20),
            iops_burst: Some(1),
            ..QosSettings::default()
        });
        e.write(0, &[0; 4096], false).unwrap();
        let first = e.qos.latency().load();
        // The second waits 50 ms for the limit, on this thread.
        let received = Instant::now();
        serve_received(received, || e.write(0, &[0; 4096], false)).unwrap();
        assert!(received.elapsed() >= Duration::from_millis(45));
        let second = e.qos.latency().load().since(&first);
        assert_eq!(second.total(), 1);
        assert!(second.quantile_us(1.0) < 20_000.0, "{second:?}");
    }
}
