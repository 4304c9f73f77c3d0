//! What a LUN is, asked once when the target is opened: INQUIRY (is there a disk at this
//! LUN), READ CAPACITY(16) (size and block sizes, READ CAPACITY(10) for targets without it),
//! the Block Limits VPD page (largest transfer) and MODE SENSE(6) (write protect). Parsing
//! is kept apart from asking, so the parsers are tested on bytes.

use weft_scsi::build;
use weft_scsi::opcode::{READ_CAPACITY_10, SA_READ_CAPACITY_16};

use super::queue::IscsiQueue;
use crate::target::{ScsiFailure, TargetError};

/// Standard INQUIRY data we read: the fixed part is 36 bytes.
const INQUIRY_LEN_BYTES: u16 = 96;
/// READ CAPACITY(16) and (10) parameter data.
const READ_CAPACITY_16_LEN_BYTES: u32 = 32;
const READ_CAPACITY_10_LEN_BYTES: usize = 8;
/// Block Limits VPD page: 64 bytes (SBC-3).
const VPD_BLOCK_LIMITS: u8 = 0xb0;
const BLOCK_LIMITS_LEN_BYTES: u16 = 64;
/// MODE SENSE(6) of every page, without block descriptors: the header is what we need.
const MODE_PAGE_ALL: u8 = 0x3f;
const MODE_SENSE_LEN_BYTES: u8 = 255;
/// Mode parameter header byte 2 (device-specific parameter): WP.
const MODE_WRITE_PROTECT: u8 = 0x80;
/// Peripheral device type 00h: a direct-access block device.
const DEVICE_TYPE_DISK: u8 = 0x00;
/// Peripheral qualifier 3: no logical unit at this LUN.
const QUALIFIER_NO_LUN: u8 = 3;

/// The facts about a LUN the benchmark needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LunFacts {
    pub(super) size_bytes: u64,
    pub(super) block_bytes: u32,
    pub(super) physical_block_bytes: u32,
    /// The Block Limits page's MAXIMUM TRANSFER LENGTH, in bytes, when the target gives one.
    pub(super) transfer_max_bytes: Option<u32>,
    pub(super) read_only: bool,
}

/// Why a LUN cannot be benchmarked (said in [`TargetError::UnusableLun`]).
type Unusable = String;

/// Ask the LUN behind `queue` what it is.
pub(super) fn probe(queue: &mut IscsiQueue) -> Result<Result<LunFacts, Unusable>, TargetError> {
    let inquiry = match queue.execute(
        &build::inquiry(false, 0, INQUIRY_LEN_BYTES),
        u32::from(INQUIRY_LEN_BYTES),
    )? {
        Ok(data) => data,
        Err(failure) => return Ok(Err(format!("INQUIRY failed with {failure}"))),
    };
    if let Err(reason) = check_inquiry(&inquiry) {
        return Ok(Err(reason));
    }
    let capacity = match queue.execute(
        &build::service_action_in(read_capacity_16_action(), 0, READ_CAPACITY_16_LEN_BYTES),
        READ_CAPACITY_16_LEN_BYTES,
    )? {
        Ok(data) => parse_read_capacity_16(&data),
        Err(failure) => read_capacity_10(queue, &failure)?,
    };
    let (size_bytes, block_bytes, physical_block_bytes) = match capacity {
        Ok(c) => c,
        Err(reason) => return Ok(Err(reason)),
    };
    // Both pages are optional: a target without them gets the defaults.
    let transfer_max_bytes = queue
        .execute(
            &build::inquiry(true, VPD_BLOCK_LIMITS, BLOCK_LIMITS_LEN_BYTES),
            u32::from(BLOCK_LIMITS_LEN_BYTES),
        )?
        .ok()
        .and_then(|page| parse_max_transfer_bytes(&page, block_bytes));
    let read_only = queue
        .execute(
            &build::mode_sense6(true, 0, MODE_PAGE_ALL, 0, MODE_SENSE_LEN_BYTES),
            u32::from(MODE_SENSE_LEN_BYTES),
        )?
        .ok()
        .is_some_and(|header| {
            header
                .get(2)
                .is_some_and(|&dsp| dsp & MODE_WRITE_PROTECT != 0)
        });
    Ok(Ok(LunFacts {
        size_bytes,
        block_bytes,
        physical_block_bytes,
        transfer_max_bytes,
        read_only,
    }))
}

/// READ CAPACITY(10), for a target that refused READ CAPACITY(16) with `failure16`.
fn read_capacity_10(
    queue: &mut IscsiQueue,
    failure16: &ScsiFailure,
) -> Result<Result<(u64, u32, u32), Unusable>, TargetError> {
    let cdb = build::rw10(READ_CAPACITY_10, 0, 0, 0);
    Ok(
        match queue.execute(&cdb, READ_CAPACITY_10_LEN_BYTES as u32)? {
            Ok(data) => parse_read_capacity_10(&data),
            Err(failure) => Err(format!(
                "READ CAPACITY(16) failed with {failure16} and READ CAPACITY(10) with {failure}"
            )),
        },
    )
}

/// The service action of READ CAPACITY(16), as SERVICE ACTION IN(16) takes it.
fn read_capacity_16_action() -> u8 {
    u8::try_from(SA_READ_CAPACITY_16).expect("service actions are 5 bits")
}

/// A disk is there (peripheral qualifier 0, device type 00h).
fn check_inquiry(data: &[u8]) -> Result<(), Unusable> {
    let Some(&first) = data.first() else {
        return Err("INQUIRY returned no data".into());
    };
    let qualifier = first >> 5;
    let device_type = first & 0x1f;
    if qualifier == QUALIFIER_NO_LUN {
        return Err("there is no logical unit at this LUN (INQUIRY peripheral qualifier 3)".into());
    }
    if qualifier != 0 || device_type != DEVICE_TYPE_DISK {
        return Err(format!(
            "it is not a disk (INQUIRY peripheral qualifier {qualifier}, device type {device_type:02x}h)"
        ));
    }
    Ok(())
}

/// (size, logical block, physical block) in bytes from READ CAPACITY(16) data.
fn parse_read_capacity_16(data: &[u8]) -> Result<(u64, u32, u32), Unusable> {
    if data.len() < 14 {
        return Err(format!("READ CAPACITY(16) returned {} bytes", data.len()));
    }
    let last_lba = u64::from_be_bytes(data[0..8].try_into().expect("8 bytes"));
    let block = u32::from_be_bytes(data[8..12].try_into().expect("4 bytes"));
    let exponent = u32::from(data[13] & 0x0f);
    capacity(last_lba, block, exponent)
}

fn parse_read_capacity_10(data: &[u8]) -> Result<(u64, u32, u32), Unusable> {
    if data.len() < READ_CAPACITY_10_LEN_BYTES {
        return Err(format!("READ CAPACITY(10) returned {} bytes", data.len()));
    }
    let last_lba = u32::from_be_bytes(data[0..4].try_into().expect("4 bytes"));
    let block = u32::from_be_bytes(data[4..8].try_into().expect("4 bytes"));
    capacity(u64::from(last_lba), block, 0)
}

fn capacity(last_lba: u64, block: u32, exponent: u32) -> Result<(u64, u32, u32), Unusable> {
    if block < 512 || !block.is_power_of_two() {
        return Err(format!("the LUN reports a block size of {block} bytes"));
    }
    let size = last_lba
        .checked_add(1)
        .and_then(|blocks| blocks.checked_mul(u64::from(block)))
        .ok_or_else(|| format!("the LUN reports a last LBA of {last_lba}"))?;
    let physical = block.checked_shl(exponent).unwrap_or(block).max(block);
    Ok((size, block, physical))
}

/// MAXIMUM TRANSFER LENGTH of the Block Limits page, in bytes (`None`: no limit given).
fn parse_max_transfer_bytes(page: &[u8], block_bytes: u32) -> Option<u32> {
    if page.get(1) != Some(&VPD_BLOCK_LIMITS) {
        return None;
    }
    let blocks = u32::from_be_bytes(page.get(8..12)?.try_into().ok()?);
    (blocks > 0).then(|| blocks.saturating_mul(block_bytes))
}

#[cfg(test)]
mod tests {
    use weft_scsi::{execute, LunState, MemLun, Nexus};

    use super::*;

    /// Runs a CDB against weft's own SCSI layer, over a LUN of 4 KiB blocks.
    fn ask(lu: &MemLun, cdb: &[u8]) -> Vec<u8> {
        let nexus = Nexus::new("iqn.2026-11.dev.weft:probe-test,i,0x000000000001", 1);
        let r = execute(&LunState::new(), lu, &nexus, cdb, &[]);
        assert!(r.sense.is_none(), "{cdb:02x?}: {:?}", r.sense);
        r.data_in
    }

    #[test]
    fn weft_scsi_answers_parse_into_lun_facts() {
        let lu = MemLun::with_blocks(4096, 2048);
        let inquiry = ask(&lu, &build::inquiry(false, 0, INQUIRY_LEN_BYTES));
        assert_eq!(check_inquiry(&inquiry), Ok(()));
        let rc16 = ask(
            &lu,
            &build::service_action_in(read_capacity_16_action(), 0, READ_CAPACITY_16_LEN_BYTES),
        );
        let (size, block, physical) = parse_read_capacity_16(&rc16).unwrap();
        assert_eq!((size, block), (2048 * 4096, 4096));
        assert!(physical >= block);
        let rc10 = ask(&lu, &build::rw10(READ_CAPACITY_10, 0, 0, 0));
        assert_eq!(parse_read_capacity_10(&rc10), Ok((2048 * 4096, 4096, 4096)));
        let limits = ask(
            &lu,
            &build::inquiry(true, VPD_BLOCK_LIMITS, BLOCK_LIMITS_LEN_BYTES),
        );
        assert_eq!(
            parse_max_transfer_bytes(&limits, 4096),
            Some(weft_scsi::limits::MAX_TRANSFER_BYTES)
        );
        let mode = ask(
            &lu,
            &build::mode_sense6(true, 0, MODE_PAGE_ALL, 0, MODE_SENSE_LEN_BYTES),
        );
        assert_eq!(mode[2] & MODE_WRITE_PROTECT, 0);
        let ro = MemLun::with_blocks(4096, 16).with_read_only(true);
        let mode = ask(
            &ro,
            &build::mode_sense6(true, 0, MODE_PAGE_ALL, 0, MODE_SENSE_LEN_BYTES),
        );
        assert_ne!(mode[2] & MODE_WRITE_PROTECT, 0);
    }

    #[test]
    fn odd_answers_are_clear_reasons() {
        assert!(check_inquiry(&[0x7f])
            .unwrap_err()
            .contains("no logical unit"));
        assert!(check_inquiry(&[0x05])
            .unwrap_err()
            .contains("device type 05h"));
        assert!(check_inquiry(&[]).is_err());
        assert!(parse_read_capacity_16(&[0; 8]).is_err());
        let mut zero_block = [0u8; 32];
        zero_block[7] = 9;
        assert_eq!(
            parse_read_capacity_16(&zero_block),
            Err("the LUN reports a block size of 0 bytes".into())
        );
        assert_eq!(
            parse_max_transfer_bytes(&[0, 0xb0, 0, 60, 0, 0, 0, 0, 0, 0, 0, 0], 512),
            None
        );
    }
}
