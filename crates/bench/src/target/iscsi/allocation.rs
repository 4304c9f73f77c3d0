//! GET LBA STATUS (SBC-3 5.20) for the check of unwritten ranges: a session of its own whose
//! one slot asks the LUN, range by range, which blocks are mapped. A LUN that refuses the
//! command (not thin-provisioned, or a target without it) cannot tell, and the check is
//! reported as not done. Parsing is kept apart from asking, so it is tested on bytes.

use weft_scsi::build;
use weft_scsi::opcode::SA_GET_LBA_STATUS;

use super::queue::IscsiQueue;
use crate::target::{AllocationProbe, Extent, TargetError, ISCSI_TARGET};

/// Parameter data we ask for: the 8-byte header and 1024 descriptors of 16 bytes (weft
/// answers at most 1024 per command).
pub(super) const LBA_STATUS_LEN_BYTES: u32 = 8 + 1024 * 16;
const HEADER_BYTES: usize = 8;
const DESCRIPTOR_BYTES: usize = 16;
/// Provisioning status of a descriptor: 0 mapped; 1 deallocated and 2 anchored read as
/// the LUN's initial contents without data behind them.
const PROVISIONING_MAPPED: u8 = 0;

/// GET LBA STATUS on a session of its own.
pub(super) struct IscsiAllocation {
    pub(super) queue: IscsiQueue,
    pub(super) block_bytes: u32,
    /// `host:port` of the portal, for errors.
    pub(super) addr: String,
}

impl IscsiAllocation {
    /// The descriptors from `offset_bytes` on, as extents; the LUN's failure as text.
    pub(super) fn ask(
        &mut self,
        offset_bytes: u64,
    ) -> Result<Result<Vec<Extent>, String>, TargetError> {
        let block = u64::from(self.block_bytes);
        let lba = offset_bytes / block;
        let action = u8::try_from(SA_GET_LBA_STATUS).expect("service actions are 5 bits");
        let cdb = build::service_action_in(action, lba, LBA_STATUS_LEN_BYTES);
        Ok(match self.queue.execute(&cdb, LBA_STATUS_LEN_BYTES)? {
            Ok(data) => parse_lba_status(&data, lba, self.block_bytes),
            Err(failure) => Err(format!("GET LBA STATUS failed with {failure}")),
        })
    }
}

impl AllocationProbe for IscsiAllocation {
    fn method(&self) -> &'static str {
        "iscsi GET LBA STATUS"
    }

    fn extents(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<Extent>, TargetError> {
        let extents = self
            .ask(offset_bytes)?
            .map_err(|reason| TargetError::Protocol {
                peer: ISCSI_TARGET,
                addr: self.addr.clone(),
                reason,
            })?;
        let mut left = len_bytes;
        let mut out = Vec::with_capacity(extents.len());
        for mut e in extents {
            if left == 0 {
                break;
            }
            e.length_bytes = e.length_bytes.min(left);
            left -= e.length_bytes;
            out.push(e);
        }
        Ok(out)
    }
}

/// The descriptors of GET LBA STATUS parameter data that continue from `lba` without a gap,
/// as extents in bytes.
fn parse_lba_status(data: &[u8], lba: u64, block_bytes: u32) -> Result<Vec<Extent>, String> {
    if data.len() < HEADER_BYTES {
        return Err(format!("GET LBA STATUS returned {} bytes", data.len()));
    }
    let mut next = lba;
    let mut out: Vec<Extent> = Vec::new();
    for d in data[HEADER_BYTES..].chunks_exact(DESCRIPTOR_BYTES) {
        let start = u64::from_be_bytes(d[0..8].try_into().expect("8 bytes"));
        let blocks = u64::from(u32::from_be_bytes(d[8..12].try_into().expect("4 bytes")));
        if start != next || blocks == 0 {
            break;
        }
        let extent = Extent {
            length_bytes: blocks * u64::from(block_bytes),
            allocated: d[12] & 0x0f == PROVISIONING_MAPPED,
        };
        match out.last_mut() {
            Some(last) if last.allocated == extent.allocated => {
                last.length_bytes += extent.length_bytes;
            }
            _ => out.push(extent),
        }
        next += blocks;
    }
    if out.is_empty() {
        return Err(format!("GET LBA STATUS described nothing from LBA {lba}"));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use weft_scsi::{execute, LogicalUnit, LunState, MemLun, Nexus};

    use super::*;

    #[test]
    fn weft_scsi_answers_parse_into_extents() {
        // 64 blocks of 4 KiB; blocks 8..16 and 40..41 written.
        let lu = MemLun::with_blocks(4096, 64);
        lu.write(8 * 4096, &[1u8; 8 * 4096], false).unwrap();
        lu.write(40 * 4096, &[1u8; 4096], false).unwrap();
        let action = u8::try_from(SA_GET_LBA_STATUS).unwrap();
        let nexus = Nexus::new("iqn.2026-11.dev.weft:allocation-test,i,0x000000000001", 1);
        let r = execute(
            &LunState::new(),
            &lu,
            &nexus,
            &build::service_action_in(action, 4, LBA_STATUS_LEN_BYTES),
            &[],
        );
        assert!(r.sense.is_none(), "{:?}", r.sense);
        let e = |blocks: u64, allocated| Extent {
            length_bytes: blocks * 4096,
            allocated,
        };
        assert_eq!(
            parse_lba_status(&r.data_in, 4, 4096).unwrap(),
            [
                e(4, false),
                e(8, true),
                e(24, false),
                e(1, true),
                e(23, false)
            ]
        );
        assert!(parse_lba_status(&r.data_in, 5, 4096).is_err(), "a gap");
        assert!(parse_lba_status(&[0; 4], 0, 512).is_err());
    }
}
