//! A LUN over an open export: `weft-scsi`'s [`LogicalUnit`] on an [`ExportHandle`], with the
//! export's identity (serial, NAA designator) derived from its name so it is the same on
//! every portal and after a restart (multipath matches paths by it).

use std::sync::Arc;

use weft_scsi::{Geometry, Identity, LogicalUnit, MediumError};

use crate::backend::{ExportHandle, ExportIoError, EXPORT_BLOCK_SIZE_BYTES};

pub struct ExportLun {
    /// Accepts the export's logical block size (the backend's sub-block layer): a 512e
    /// volume is a LUN of 512-byte blocks over 4 KiB physical ones.
    export: Arc<dyn ExportHandle>,
    identity: Identity,
    /// Fixed for an open export.
    logical_block_size_bytes: u32,
}

/// Vendor identification in INQUIRY (8 characters).
const VENDOR: &str = "WEFT";
/// A locally assigned IEEE company id for NAA 6 designators (the U/L bit pattern of a
/// private OUI); weft has no registered one.
const COMPANY_ID: [u8; 3] = [0x02, 0x57, 0x46];

impl ExportLun {
    /// Whether the volume's QoS may make a command wait now: such a command is never run on
    /// the session's task (a wait there would hold an async worker thread).
    pub fn may_throttle(&self) -> bool {
        self.export.qos().is_some_and(|q| q.is_limited())
    }

    /// `port`: the relative target port the session came in on; `ports`: every portal's.
    pub fn new(
        export: Arc<dyn ExportHandle>,
        target: &str,
        portal_group: u16,
        port: u16,
        ports: Vec<u16>,
    ) -> ExportLun {
        let info = export.info();
        let digest = name_digest(&info.name);
        let mut naa_id = [0u8; 16];
        // NAA 6 (IEEE registered extended): 4-bit NAA, 24-bit company id, 100 bits of
        // vendor-specific id.
        naa_id[0] = 0x60 | (COMPANY_ID[0] >> 4);
        naa_id[1] = (COMPANY_ID[0] << 4) | (COMPANY_ID[1] >> 4);
        naa_id[2] = (COMPANY_ID[1] << 4) | (COMPANY_ID[2] >> 4);
        naa_id[3] = COMPANY_ID[2] << 4;
        naa_id[4..16].copy_from_slice(&digest[..12]);
        naa_id[3] |= digest[12] & 0x0f;
        let serial: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let product = if info.read_only {
            "weft snapshot"
        } else {
            "weft volume"
        };
        ExportLun {
            identity: Identity {
                vendor: VENDOR.into(),
                product: product.into(),
                revision: env!("CARGO_PKG_VERSION")
                    .chars()
                    .filter(|c| *c != '.')
                    .take(4)
                    .collect(),
                serial,
                naa_id,
                target_port_group: portal_group,
                relative_target_port: port,
                group_ports: ports,
                target_name: target.to_string(),
            },
            logical_block_size_bytes: info.logical_block_size_bytes,
            export,
        }
    }

    pub fn is_gone(&self) -> bool {
        self.export.is_gone()
    }
}

/// 16 bytes that stand for an export name (FNV-1a, twice with different offsets: stable,
/// not secret).
fn name_digest(name: &str) -> [u8; 16] {
    let fnv = |basis: u64| {
        name.bytes().fold(basis, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
    };
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&fnv(0xcbf2_9ce4_8422_2325).to_be_bytes());
    out[8..].copy_from_slice(&fnv(0x8422_2325_cbf2_9ce4).to_be_bytes());
    out
}

fn medium(e: ExportIoError) -> MediumError {
    match e {
        ExportIoError::ReadOnly => MediumError::ReadOnly,
        ExportIoError::NoSpace => MediumError::NoSpace,
        ExportIoError::Gone => MediumError::Gone,
        ExportIoError::Io { detail } => MediumError::Io(detail),
        ExportIoError::Invalid { reason } => MediumError::Io(reason.to_string()),
    }
}

impl LogicalUnit for ExportLun {
    fn geometry(&self) -> Geometry {
        let info = self.export.info();
        // READ CAPACITY(16) reports 8 logical per physical block (LBPPBE 3) on a 512e LUN and
        // the Block Limits page an unmap and transfer granularity of 8 blocks: initiators then
        // align to 4 KiB and avoid read-modify-writes.
        Geometry {
            block_size_bytes: self.logical_block_size_bytes,
            block_count: info.size_bytes / u64::from(self.logical_block_size_bytes),
            physical_block_size_bytes: EXPORT_BLOCK_SIZE_BYTES,
            read_only: info.read_only,
        }
    }

    fn identity(&self) -> &Identity {
        &self.identity
    }

    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MediumError> {
        self.export.read(offset_bytes, buf).map_err(medium)
    }

    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, MediumError> {
        self.export
            .compare_and_write(offset_bytes, compare, new, fua)
            .map_err(medium)
    }

    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), MediumError> {
        self.export.write(offset_bytes, data, fua).map_err(medium)
    }

    fn flush(&self) -> Result<(), MediumError> {
        self.export.flush().map_err(medium)
    }

    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MediumError> {
        self.export
            .trim(offset_bytes, len_bytes, false)
            .map_err(medium)
    }

    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        unmap: bool,
    ) -> Result<(), MediumError> {
        self.export
            .write_zeroes(offset_bytes, len_bytes, unmap, false)
            .map_err(medium)
    }

    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Vec<(u64, bool)>, MediumError> {
        Ok(self
            .export
            .block_status(offset_bytes, len_bytes)
            .map_err(medium)?
            .into_iter()
            .map(|e| (e.length_bytes, !e.hole))
            .collect())
    }
}
