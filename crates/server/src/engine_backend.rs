//! The engine as an export backend: volumes become read-write exports, snapshots read-only
//! ones. The engine takes whole 4 KiB blocks; each opened export is wrapped in
//! [`SubBlockExport`] so hosts may use the volume's logical block size (512 on a 512e volume),
//! with one lock table for the whole backend (every connection of every front end), and,
//! when the backend has a QoS registry, in the volume's throttle ([`QosExport`]): every I/O
//! this c.node's engine serves passes here, whichever front end or c.node it came through.
//! With heat on ([`EngineBackend::with_heat`]), every read and write of a volume is counted in
//! its extent's heat ([`crate::tiering`]), here for the same reason: forwarded I/O included.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use weft_engine::engine::VolumeHandle;
use weft_engine::{Engine, EngineError};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::backend::{
    AccessTable, ExportBackend, ExportHandle, ExportInfo, ExportIoError, ExtentStatus, IoDone,
    OpenError,
};
use crate::qos::{QosExport, QosRegistry};
use crate::sub_block::{BlockLocks, SubBlockExport};

/// Serves every volume of an engine.
#[derive(Debug, Clone)]
pub struct EngineBackend {
    engine: Arc<Engine>,
    /// The hosts as last read, rebuilt when the engine's hosts generation moves.
    access: Arc<Mutex<Arc<AccessTable>>>,
    /// Serializes read-modify-writes of a 4 KiB block against other writes to it.
    locks: Arc<BlockLocks>,
    /// Heat per volume and extent (`None`: not counted).
    tiering: Option<Arc<crate::tiering::Tiering>>,
    /// The volumes' throttles (`None`: no QoS, for tests of other layers).
    qos: Option<Arc<QosRegistry>>,
}

impl EngineBackend {
    pub fn new(engine: Arc<Engine>) -> EngineBackend {
        EngineBackend {
            engine,
            access: Arc::new(Mutex::new(Arc::new(AccessTable::default()))),
            locks: Arc::new(BlockLocks::new()),
            tiering: None,
            qos: None,
        }
    }

    /// Serves every volume behind its throttle in `qos`.
    pub fn with_qos(engine: Arc<Engine>, qos: Arc<QosRegistry>) -> EngineBackend {
        EngineBackend {
            qos: Some(qos),
            ..EngineBackend::new(engine)
        }
    }

    /// Counts every volume's reads and writes in `tiering`'s heat.
    pub fn with_heat(mut self, tiering: Arc<crate::tiering::Tiering>) -> EngineBackend {
        self.tiering = Some(tiering);
        self
    }
}

impl ExportBackend for EngineBackend {
    fn list_exports(&self) -> Vec<ExportInfo> {
        self.engine
            .list_images()
            .into_iter()
            .map(export_info)
            .collect()
    }

    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError> {
        let handle = self
            .engine
            .open_volume(name)
            .map_err(|_| OpenError::UnknownExport {
                name: name.to_string(),
            })?;
        // The image key: the same for every open of one image, new after a refresh.
        let lock_key = handle.id.0;
        let heat = match &self.tiering {
            Some(t) if !handle.read_only => {
                let size = self.engine.volume_size(handle.id).unwrap_or(0);
                Some(t.volume(&handle.name, size))
            }
            _ => None,
        };
        let export = Arc::new(VolumeExport {
            engine: self.engine.clone(),
            handle,
            heat,
        });
        let export = Arc::new(SubBlockExport::new(
            export,
            Arc::clone(&self.locks),
            lock_key,
        ));
        // Above the sub-block layer: an I/O is charged as the client sent it, not as the
        // read-modify-write it may become.
        Ok(match &self.qos {
            Some(qos) => Arc::new(QosExport::new(export, qos.volume(name))),
            None => export,
        })
    }

    fn access(&self) -> Arc<AccessTable> {
        // Read the generation before the records: a change in between makes the next call
        // read them again.
        let generation = self.engine.hosts_generation();
        let mut cached = self.access.lock();
        if cached.generation != generation {
            *cached = Arc::new(AccessTable::new(generation, self.engine.host_records()));
        }
        Arc::clone(&cached)
    }

    fn access_generation(&self) -> u64 {
        self.engine.hosts_generation()
    }
}

/// How a front end lists an image.
pub(crate) fn export_info(i: weft_engine::ImageSummary) -> ExportInfo {
    let kind = if i.read_only {
        "snapshot (read-only)"
    } else {
        "volume"
    };
    ExportInfo {
        description: format!(
            "weft {kind} {} ({})",
            i.name,
            weft_engine::units::binary_size(i.size_bytes)
        ),
        name: i.name,
        size_bytes: i.size_bytes,
        read_only: i.read_only,
        logical_block_size_bytes: i.logical_block_size.bytes(),
    }
}

/// One open volume, in whole 4 KiB blocks.
#[derive(Debug)]
struct VolumeExport {
    engine: Arc<Engine>,
    handle: VolumeHandle,
    /// The volume's heat (snapshots are not counted).
    heat: Option<Arc<crate::tiering::VolumeHeat>>,
}

impl VolumeExport {
    fn count(&self, write: bool, offset_bytes: u64, bytes: usize) {
        if let Some(h) = &self.heat {
            h.record(write, offset_bytes, bytes as u64);
        }
    }
}

/// The one place engine errors become front-end errors.
fn to_export_error(e: EngineError) -> ExportIoError {
    match e {
        EngineError::OutOfRange { .. } => ExportIoError::Invalid {
            reason: "outside the volume or not aligned to 4 KiB",
        },
        EngineError::InvalidName { .. } | EngineError::InvalidSize { .. } => {
            ExportIoError::Invalid {
                reason: "invalid request",
            }
        }
        EngineError::ReadOnly => ExportIoError::ReadOnly,
        EngineError::NoSpace => ExportIoError::NoSpace,
        EngineError::Gone
        | EngineError::UnknownVolume { .. }
        | EngineError::UnknownSnapshot { .. }
        | EngineError::VolumeExists { .. } => ExportIoError::Gone,
        e => ExportIoError::Io {
            detail: e.to_string(),
        },
    }
}

impl ExportHandle for VolumeExport {
    fn info(&self) -> ExportInfo {
        let size_bytes = self.engine.volume_size(self.handle.id).unwrap_or(0);
        let kind = if self.handle.read_only {
            "snapshot"
        } else {
            "volume"
        };
        ExportInfo {
            name: self.handle.name.clone(),
            description: format!("weft {kind} {}", self.handle.name),
            size_bytes,
            read_only: self.handle.read_only,
            logical_block_size_bytes: self.handle.logical_block_size.bytes(),
        }
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), ExportIoError> {
        self.count(false, offset_bytes, buf.len());
        self.engine
            .read(self.handle.id, offset_bytes, buf)
            .map_err(to_export_error)
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), ExportIoError> {
        self.count(true, offset_bytes, data.len());
        self.engine
            .write(self.handle.id, offset_bytes, data, fua)
            .map_err(to_export_error)
    }

    fn write_owned(&self, offset_bytes: u64, data: Bytes, fua: bool) -> Result<(), ExportIoError> {
        self.count(true, offset_bytes, data.len());
        self.engine
            .write_owned(self.handle.id, offset_bytes, data, fua)
            .map_err(to_export_error)
    }

    fn write_then(&self, offset_bytes: u64, data: Bytes, fua: bool, done: IoDone) {
        self.count(true, offset_bytes, data.len());
        self.engine.write_then(
            self.handle.id,
            offset_bytes,
            data,
            fua,
            Box::new(move |r| done(r.map_err(to_export_error))),
        );
    }

    fn flush(&self) -> Result<(), ExportIoError> {
        self.engine.flush().map_err(to_export_error)
    }

    fn flush_then(&self, done: IoDone) {
        self.engine
            .flush_then(Box::new(move |r| done(r.map_err(to_export_error))));
    }

    fn trim(&self, offset_bytes: u64, length_bytes: u64, fua: bool) -> Result<(), ExportIoError> {
        self.engine
            .trim(self.handle.id, offset_bytes, length_bytes, fua)
            .map_err(to_export_error)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
        may_trim: bool,
        fua: bool,
    ) -> Result<(), ExportIoError> {
        self.engine
            .write_zeroes(self.handle.id, offset_bytes, length_bytes, may_trim, fua)
            .map_err(to_export_error)
    }

    fn block_status(
        &self,
        offset_bytes: u64,
        length_bytes: u64,
    ) -> Result<Vec<ExtentStatus>, ExportIoError> {
        let extents = self
            .engine
            .block_status(self.handle.id, offset_bytes, length_bytes)
            .map_err(to_export_error)?;
        Ok(extents
            .into_iter()
            .map(|e| ExtentStatus {
                length_bytes: e.length_bytes,
                hole: e.hole,
                zero: e.zero,
            })
            .collect())
    }

    fn is_gone(&self) -> bool {
        self.handle.gone.load(Ordering::Acquire)
    }

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, ExportIoError> {
        // Whole blocks; the sub-block layer above holds the volume's lock.
        crate::backend::read_compare_write(self, offset_bytes, compare, new, fua)
    }
}
