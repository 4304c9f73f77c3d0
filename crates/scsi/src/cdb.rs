//! CDB decoding: bytes from the initiator become a [`Command`], a plain value that execution
//! consumes, or the sense data that rejects them. What a command implies about the data phase
//! and its transfer limits against the LU's geometry is [`crate::decoded`]'s.
//!
//! Checked here, from the CDB alone: the opcode and service action are known, the CDB is as
//! long as its opcode group says, the control byte asks for nothing we lack (NACA, LINK),
//! protection-information fields are zero (we report PROTECT=0), reserved code values are not
//! used. Range checks against the LU's size happen at execution, after the write-protect
//! check, as SBC orders them. No I/O here, and no panics: every byte index is below the fixed
//! 16-byte copy the CDB is read through.

use crate::opcode;
use crate::reservations::Access;
use crate::sense::{asc, Sense};

/// Bytes of the longest CDB this crate decodes.
const CDB_MAX_LEN_BYTES: usize = 16;
/// Control byte (the CDB's last): NACA and LINK, neither of which we support.
const CONTROL_NACA: u8 = 0x04;
const CONTROL_LINK: u8 = 0x01;
/// Byte 1 of READ/WRITE/VERIFY-class CDBs: RDPROTECT, WRPROTECT or VRPROTECT (bits 7..5).
const PROTECT_MASK: u8 = 0xe0;
/// Byte 1 of WRITE-class CDBs: force unit access.
const FUA: u8 = 0x08;
/// Byte 1 of VERIFY and WRITE AND VERIFY: BYTCHK (bits 2..1).
const BYTCHK_SHIFT: u8 = 1;
/// Byte 1 of WRITE SAME: ANCHOR, UNMAP, the obsolete PBDATA/LBDATA bits, and NDOB (16 only).
const WRITE_SAME_ANCHOR: u8 = 0x10;
const WRITE_SAME_UNMAP: u8 = 0x08;
const WRITE_SAME_OBSOLETE: u8 = 0x06;
const WRITE_SAME_NDOB: u8 = 0x01;
/// READ(6)/WRITE(6): a transfer length of 0 means 256 blocks.
const SIX_BYTE_ZERO_LENGTH_BLOCKS: u32 = 256;
/// REPORT LUNS allocation length below which SPC-4 says to reject the command.
pub(crate) const REPORT_LUNS_ALLOCATION_MIN_BYTES: u32 = 16;

/// A block range named by a CDB, and where its length field sits (for the field pointer).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Blocks {
    pub lba: u64,
    pub count: u32,
    /// Byte index of the transfer length field in the CDB.
    pub count_at: u16,
}

/// VERIFY's BYTCHK: what the data-out buffer holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ByteCheck {
    /// 00b: no data-out; only the range is checked.
    None,
    /// 01b: one block of data-out per block verified.
    All,
    /// 11b: one block of data-out compared with every block verified.
    OneBlock,
}

/// A decoded command. Each variant carries the CDB fields its execution needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Command {
    TestUnitReady,
    RequestSense {
        descriptor: bool,
        allocation_len: u32,
    },
    Inquiry {
        evpd: bool,
        page_code: u8,
        allocation_len: u32,
    },
    ModeSense {
        ten: bool,
        disable_block_descriptors: bool,
        long_lba: bool,
        page_control: u8,
        page_code: u8,
        subpage_code: u8,
        allocation_len: u32,
    },
    ModeSelect {
        ten: bool,
        page_format: bool,
        save_pages: bool,
        parameter_len: u32,
    },
    /// `starts`: START=1 with POWER CONDITION 0, which every reservation allows.
    StartStopUnit {
        starts: bool,
    },
    PreventAllowMediumRemoval {
        prevent: bool,
    },
    ReadCapacity10,
    ReadCapacity16 {
        allocation_len: u32,
    },
    GetLbaStatus {
        lba: u64,
        allocation_len: u32,
    },
    Read(Blocks),
    Write {
        range: Blocks,
        fua: bool,
    },
    WriteAndVerify(Blocks),
    Verify {
        range: Blocks,
        byte_check: ByteCheck,
    },
    /// `count` 0 means to the end of the LU.
    SynchronizeCache {
        lba: u64,
        count: u32,
    },
    Unmap {
        parameter_len: u32,
    },
    WriteSame {
        range: Blocks,
        unmap: bool,
        no_data_out: bool,
    },
    CompareAndWrite {
        range: Blocks,
        fua: bool,
    },
    ReportSupportedOperationCodes {
        timeouts: bool,
        options: u8,
        opcode: u8,
        service_action: u16,
        allocation_len: u32,
    },
    ReportTargetPortGroups {
        extended_header: bool,
        allocation_len: u32,
    },
    ReportLuns {
        select_report: u8,
        allocation_len: u32,
    },
    /// `service_action` is one of READ KEYS .. READ FULL STATUS.
    PersistentReserveIn {
        service_action: u16,
        allocation_len: u32,
    },
    /// `service_action` is one of REGISTER .. REGISTER AND MOVE; `scope` and `kind` are the
    /// raw SCOPE and TYPE fields, checked by the service actions that use them.
    PersistentReserveOut {
        service_action: u16,
        scope: u8,
        kind: u8,
        parameter_len: u32,
    },
    Reserve6,
    Release6,
}

type Decoder = fn(&Cdb) -> Result<Command, Sense>;

/// Decode a CDB. Trailing bytes past the opcode's CDB length (the iSCSI CDB field is always 16
/// bytes) are ignored.
pub(crate) fn decode(cdb: &[u8]) -> Result<Command, Sense> {
    let Some(&op) = cdb.first() else {
        return Err(Sense::invalid_opcode());
    };
    let decoder: Decoder = match op {
        opcode::TEST_UNIT_READY => |_| Ok(Command::TestUnitReady),
        opcode::REQUEST_SENSE => request_sense,
        opcode::INQUIRY => inquiry,
        opcode::MODE_SENSE_6 | opcode::MODE_SENSE_10 => mode_sense,
        opcode::MODE_SELECT_6 | opcode::MODE_SELECT_10 => mode_select,
        opcode::START_STOP_UNIT => start_stop_unit,
        opcode::PREVENT_ALLOW_MEDIUM_REMOVAL => prevent_allow_medium_removal,
        opcode::READ_CAPACITY_10 => read_capacity_10,
        opcode::SERVICE_ACTION_IN_16 => service_action_in,
        opcode::READ_6 | opcode::READ_10 | opcode::READ_12 | opcode::READ_16 => read,
        opcode::WRITE_6 | opcode::WRITE_10 | opcode::WRITE_12 | opcode::WRITE_16 => write,
        opcode::WRITE_AND_VERIFY_10 | opcode::WRITE_AND_VERIFY_12 | opcode::WRITE_AND_VERIFY_16 => {
            write_and_verify
        }
        opcode::VERIFY_10 | opcode::VERIFY_12 | opcode::VERIFY_16 => verify,
        opcode::SYNCHRONIZE_CACHE_10 | opcode::SYNCHRONIZE_CACHE_16 => synchronize_cache,
        opcode::UNMAP => unmap,
        opcode::WRITE_SAME_10 | opcode::WRITE_SAME_16 => write_same,
        opcode::COMPARE_AND_WRITE => compare_and_write,
        opcode::MAINTENANCE_IN => maintenance_in,
        opcode::REPORT_LUNS => report_luns,
        opcode::PERSISTENT_RESERVE_IN => persistent_reserve_in,
        opcode::PERSISTENT_RESERVE_OUT => persistent_reserve_out,
        opcode::RESERVE_6 | opcode::RELEASE_6 => reserve_release_6,
        // New decoders need a row in `maintenance_in::SUPPORTED` and an access class in
        // `Command::access`.
        _ => return Err(Sense::invalid_opcode()),
    };
    decoder(&Cdb::new(cdb)?)
}

impl Command {
    /// The access class of a decoded command (SPC-4 table 66, SBC-3 table 13).
    pub(crate) fn access(&self) -> Access {
        match self {
            Command::Inquiry { .. }
            | Command::RequestSense { .. }
            | Command::ReportLuns { .. }
            | Command::ReportTargetPortGroups { .. } => Access::Always,
            Command::TestUnitReady
            | Command::ReadCapacity10
            | Command::ReadCapacity16 { .. }
            | Command::StartStopUnit { starts: true }
            | Command::PreventAllowMediumRemoval { prevent: false } => Access::Status,
            Command::Read(_)
            | Command::Verify { .. }
            | Command::GetLbaStatus { .. }
            | Command::ModeSense { .. }
            | Command::ReportSupportedOperationCodes { .. } => Access::Read,
            Command::Write { .. }
            | Command::WriteAndVerify(_)
            | Command::WriteSame { .. }
            | Command::CompareAndWrite { .. }
            | Command::Unmap { .. }
            | Command::SynchronizeCache { .. }
            | Command::ModeSelect { .. }
            | Command::StartStopUnit { starts: false }
            | Command::PreventAllowMediumRemoval { prevent: true } => Access::Write,
            Command::PersistentReserveIn { .. } | Command::PersistentReserveOut { .. } => {
                Access::PersistentReserve
            }
            Command::Reserve6 | Command::Release6 => Access::Reserve6,
        }
    }
}

/// A CDB copied into a fixed 16-byte array after its length was checked, so field getters
/// index constants below 16 and cannot panic.
#[derive(Debug)]
pub(crate) struct Cdb {
    bytes: [u8; CDB_MAX_LEN_BYTES],
}

impl Cdb {
    /// Checks the length the opcode group implies and the control byte.
    fn new(cdb: &[u8]) -> Result<Cdb, Sense> {
        let len = cdb
            .first()
            .and_then(|&op| opcode::cdb_len_bytes(op))
            .ok_or_else(Sense::invalid_opcode)?;
        if cdb.len() < len {
            return Err(Sense::illegal_request(asc::INVALID_FIELD_IN_CDB));
        }
        let mut bytes = [0u8; CDB_MAX_LEN_BYTES];
        bytes[..len].copy_from_slice(&cdb[..len]);
        let control_at = len - 1;
        let control = bytes[control_at];
        // `len` is at most 16, so the index fits a u16.
        let control_at = u16::try_from(control_at).expect("cdb length <= 16");
        if control & CONTROL_NACA != 0 {
            return Err(Sense::invalid_cdb_field(control_at, Some(2)));
        }
        if control & CONTROL_LINK != 0 {
            return Err(Sense::invalid_cdb_field(control_at, Some(0)));
        }
        Ok(Cdb { bytes })
    }

    fn opcode(&self) -> u8 {
        self.bytes[0]
    }

    fn byte(&self, at: usize) -> u8 {
        self.bytes[at % CDB_MAX_LEN_BYTES]
    }

    fn bit(&self, at: usize, mask: u8) -> bool {
        self.byte(at) & mask != 0
    }

    fn be16(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.byte(at), self.byte(at + 1)])
    }

    fn be32(&self, at: usize) -> u32 {
        u32::from_be_bytes([
            self.byte(at),
            self.byte(at + 1),
            self.byte(at + 2),
            self.byte(at + 3),
        ])
    }

    fn be64(&self, at: usize) -> u64 {
        (u64::from(self.be32(at)) << 32) | u64::from(self.be32(at + 4))
    }

    fn service_action(&self) -> u16 {
        u16::from(self.byte(1) & opcode::SERVICE_ACTION_MASK)
    }

    /// LBA and transfer length in the layout of the 10-, 12- and 16-byte READ/WRITE family.
    fn blocks(&self) -> Blocks {
        let (lba, count, count_at) = match self.opcode() >> 5 {
            // 10-byte: LBA in 2..6, length in 7..9.
            1 | 2 => (u64::from(self.be32(2)), u32::from(self.be16(7)), 7),
            // 12-byte: LBA in 2..6, length in 6..10.
            5 => (u64::from(self.be32(2)), self.be32(6), 6),
            // 16-byte: LBA in 2..10, length in 10..14.
            _ => (self.be64(2), self.be32(10), 10),
        };
        Blocks {
            lba,
            count,
            count_at,
        }
    }

    /// The 6-byte READ/WRITE layout: 21-bit LBA, 8-bit length where 0 means 256.
    fn blocks_6(&self) -> Blocks {
        let lba = (u64::from(self.byte(1) & 0x1f) << 16) | u64::from(self.be16(2));
        let count = match self.byte(4) {
            0 => SIX_BYTE_ZERO_LENGTH_BLOCKS,
            n => u32::from(n),
        };
        Blocks {
            lba,
            count,
            count_at: 4,
        }
    }

    /// RDPROTECT/WRPROTECT/VRPROTECT must be zero: we have no protection information.
    fn check_no_protection(&self) -> Result<(), Sense> {
        if self.byte(1) & PROTECT_MASK != 0 {
            return Err(Sense::invalid_cdb_field(1, Some(7)));
        }
        Ok(())
    }
}

fn request_sense(c: &Cdb) -> Result<Command, Sense> {
    Ok(Command::RequestSense {
        descriptor: c.bit(1, 0x01),
        allocation_len: u32::from(c.byte(4)),
    })
}

fn inquiry(c: &Cdb) -> Result<Command, Sense> {
    // CMDDT (obsolete) asked for command support data we do not provide.
    if c.bit(1, 0x02) {
        return Err(Sense::invalid_cdb_field(1, Some(1)));
    }
    let evpd = c.bit(1, 0x01);
    let page_code = c.byte(2);
    if !evpd && page_code != 0 {
        return Err(Sense::invalid_cdb_field(2, Some(7)));
    }
    Ok(Command::Inquiry {
        evpd,
        page_code,
        allocation_len: u32::from(c.be16(3)),
    })
}

fn mode_sense(c: &Cdb) -> Result<Command, Sense> {
    let ten = c.opcode() == opcode::MODE_SENSE_10;
    Ok(Command::ModeSense {
        ten,
        disable_block_descriptors: c.bit(1, 0x08),
        long_lba: ten && c.bit(1, 0x10),
        page_control: c.byte(2) >> 6,
        page_code: c.byte(2) & 0x3f,
        subpage_code: c.byte(3),
        allocation_len: if ten {
            u32::from(c.be16(7))
        } else {
            u32::from(c.byte(4))
        },
    })
}

fn mode_select(c: &Cdb) -> Result<Command, Sense> {
    let ten = c.opcode() == opcode::MODE_SELECT_10;
    Ok(Command::ModeSelect {
        ten,
        page_format: c.bit(1, 0x10),
        save_pages: c.bit(1, 0x01),
        parameter_len: if ten {
            u32::from(c.be16(7))
        } else {
            u32::from(c.byte(4))
        },
    })
}

fn start_stop_unit(c: &Cdb) -> Result<Command, Sense> {
    // START in byte 4 bit 0, POWER CONDITION in byte 4 bits 7..4.
    Ok(Command::StartStopUnit {
        starts: c.bit(4, 0x01) && c.byte(4) >> 4 == 0,
    })
}

fn prevent_allow_medium_removal(c: &Cdb) -> Result<Command, Sense> {
    Ok(Command::PreventAllowMediumRemoval {
        prevent: c.byte(4) & 0x03 != 0,
    })
}

fn read_capacity_10(c: &Cdb) -> Result<Command, Sense> {
    // SBC-3: with PMI clear the LBA field must be zero.
    if !c.bit(8, 0x01) && c.be32(2) != 0 {
        return Err(Sense::invalid_cdb_field(2, None));
    }
    Ok(Command::ReadCapacity10)
}

fn service_action_in(c: &Cdb) -> Result<Command, Sense> {
    match c.service_action() {
        opcode::SA_READ_CAPACITY_16 => Ok(Command::ReadCapacity16 {
            allocation_len: c.be32(10),
        }),
        opcode::SA_GET_LBA_STATUS => Ok(Command::GetLbaStatus {
            lba: c.be64(2),
            allocation_len: c.be32(10),
        }),
        _ => Err(invalid_service_action()),
    }
}

fn read(c: &Cdb) -> Result<Command, Sense> {
    if c.opcode() == opcode::READ_6 {
        return Ok(Command::Read(c.blocks_6()));
    }
    c.check_no_protection()?;
    Ok(Command::Read(c.blocks()))
}

fn write(c: &Cdb) -> Result<Command, Sense> {
    if c.opcode() == opcode::WRITE_6 {
        return Ok(Command::Write {
            range: c.blocks_6(),
            fua: false,
        });
    }
    c.check_no_protection()?;
    Ok(Command::Write {
        range: c.blocks(),
        fua: c.bit(1, FUA),
    })
}

fn write_and_verify(c: &Cdb) -> Result<Command, Sense> {
    c.check_no_protection()?;
    // 00b (verify the medium) and 01b (compare with the data-out) both end up as a write made
    // durable; 10b and 11b are reserved for WRITE AND VERIFY.
    if (c.byte(1) >> BYTCHK_SHIFT) & 0x03 > 1 {
        return Err(Sense::invalid_cdb_field(1, Some(2)));
    }
    Ok(Command::WriteAndVerify(c.blocks()))
}

fn verify(c: &Cdb) -> Result<Command, Sense> {
    c.check_no_protection()?;
    let byte_check = match (c.byte(1) >> BYTCHK_SHIFT) & 0x03 {
        0 => ByteCheck::None,
        1 => ByteCheck::All,
        3 => ByteCheck::OneBlock,
        _ => return Err(Sense::invalid_cdb_field(1, Some(2))),
    };
    Ok(Command::Verify {
        range: c.blocks(),
        byte_check,
    })
}

fn synchronize_cache(c: &Cdb) -> Result<Command, Sense> {
    let Blocks { lba, count, .. } = c.blocks();
    Ok(Command::SynchronizeCache { lba, count })
}

fn unmap(c: &Cdb) -> Result<Command, Sense> {
    // ANCHOR with ANC_SUP=0 in the Logical Block Provisioning page (SBC-3 5.28).
    if c.bit(1, 0x01) {
        return Err(Sense::invalid_cdb_field(1, Some(0)));
    }
    Ok(Command::Unmap {
        parameter_len: u32::from(c.be16(7)),
    })
}

fn write_same(c: &Cdb) -> Result<Command, Sense> {
    c.check_no_protection()?;
    if c.bit(1, WRITE_SAME_ANCHOR) {
        return Err(Sense::invalid_cdb_field(1, Some(4)));
    }
    if c.bit(1, WRITE_SAME_OBSOLETE) {
        return Err(Sense::invalid_cdb_field(1, Some(2)));
    }
    let sixteen = c.opcode() == opcode::WRITE_SAME_16;
    if !sixteen && c.bit(1, WRITE_SAME_NDOB) {
        return Err(Sense::invalid_cdb_field(1, Some(0)));
    }
    let range = c.blocks();
    // We report WSNZ=1: a zero length ("to the end of the LU") is refused.
    if range.count == 0 {
        return Err(Sense::invalid_cdb_field(range.count_at, None));
    }
    Ok(Command::WriteSame {
        range,
        unmap: c.bit(1, WRITE_SAME_UNMAP),
        no_data_out: sixteen && c.bit(1, WRITE_SAME_NDOB),
    })
}

fn compare_and_write(c: &Cdb) -> Result<Command, Sense> {
    c.check_no_protection()?;
    Ok(Command::CompareAndWrite {
        range: Blocks {
            lba: c.be64(2),
            count: u32::from(c.byte(13)),
            count_at: 13,
        },
        fua: c.bit(1, FUA),
    })
}

fn maintenance_in(c: &Cdb) -> Result<Command, Sense> {
    match c.service_action() {
        opcode::SA_REPORT_TARGET_PORT_GROUPS => {
            let extended_header = match c.byte(1) >> 5 {
                0 => false,
                1 => true,
                _ => return Err(Sense::invalid_cdb_field(1, Some(7))),
            };
            Ok(Command::ReportTargetPortGroups {
                extended_header,
                allocation_len: c.be32(6),
            })
        }
        opcode::SA_REPORT_SUPPORTED_OPERATION_CODES => Ok(Command::ReportSupportedOperationCodes {
            timeouts: c.bit(2, 0x80),
            options: c.byte(2) & 0x07,
            opcode: c.byte(3),
            service_action: c.be16(4),
            allocation_len: c.be32(6),
        }),
        _ => Err(invalid_service_action()),
    }
}

fn report_luns(c: &Cdb) -> Result<Command, Sense> {
    let allocation_len = c.be32(6);
    if allocation_len < REPORT_LUNS_ALLOCATION_MIN_BYTES {
        return Err(Sense::invalid_cdb_field(6, None));
    }
    Ok(Command::ReportLuns {
        select_report: c.byte(2),
        allocation_len,
    })
}

fn persistent_reserve_in(c: &Cdb) -> Result<Command, Sense> {
    let service_action = c.service_action();
    if service_action > opcode::SA_READ_FULL_STATUS {
        return Err(invalid_pr_service_action());
    }
    Ok(Command::PersistentReserveIn {
        service_action,
        allocation_len: u32::from(c.be16(7)),
    })
}

fn persistent_reserve_out(c: &Cdb) -> Result<Command, Sense> {
    let service_action = c.service_action();
    if service_action > opcode::SA_REGISTER_AND_MOVE {
        return Err(invalid_pr_service_action());
    }
    Ok(Command::PersistentReserveOut {
        service_action,
        scope: c.byte(2) >> 4,
        kind: c.byte(2) & 0x0f,
        parameter_len: c.be32(5),
    })
}

/// RESERVE(6) and RELEASE(6) of the whole logical unit: the SPC-2 third-party (byte 1 bit
/// 4) and extent (bit 0) forms are not supported.
fn reserve_release_6(c: &Cdb) -> Result<Command, Sense> {
    if c.bit(1, 0x10) {
        return Err(Sense::invalid_cdb_field(1, Some(4)));
    }
    if c.bit(1, 0x01) {
        return Err(Sense::invalid_cdb_field(1, Some(0)));
    }
    Ok(if c.opcode() == opcode::RESERVE_6 {
        Command::Reserve6
    } else {
        Command::Release6
    })
}

/// A service action PERSISTENT RESERVE IN/OUT do not have: INVALID FIELD IN CDB pointing at
/// it (SPC-4 6.16.1; libiscsi's PrinServiceactionRange wants anything but INVALID COMMAND
/// OPERATION CODE, which would mean the command is not supported at all).
pub(crate) fn invalid_pr_service_action() -> Sense {
    Sense::invalid_cdb_field(1, Some(4))
}

/// An unknown service action of a known opcode: INVALID COMMAND OPERATION CODE, as for an
/// unknown opcode, pointing at the service action field.
fn invalid_service_action() -> Sense {
    Sense::illegal_request(asc::INVALID_COMMAND_OPERATION_CODE).at_field(true, 1, Some(4))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::medium::Geometry;

    fn geometry(block_size_bytes: u32) -> Geometry {
        Geometry {
            block_size_bytes,
            block_count: 1 << 20,
            physical_block_size_bytes: 4096,
            read_only: false,
        }
    }

    fn cdb(bytes: &[(usize, u8)], len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        for &(at, b) in bytes {
            v[at] = b;
        }
        v
    }

    #[test]
    fn every_read_write_layout_decodes_lba_and_length() {
        let r6 = cdb(&[(0, opcode::READ_6), (1, 0x1f), (2, 0xff), (3, 0xfe)], 6);
        let Ok(Command::Read(b)) = decode(&r6) else {
            panic!("read6")
        };
        assert_eq!((b.lba, b.count), (0x1f_fffe, 256));
        let w10 = cdb(&[(0, opcode::WRITE_10), (1, FUA), (5, 9), (8, 3)], 10);
        assert_eq!(
            decode(&w10),
            Ok(Command::Write {
                range: Blocks {
                    lba: 9,
                    count: 3,
                    count_at: 7
                },
                fua: true
            })
        );
        let r12 = cdb(&[(0, opcode::READ_12), (5, 1), (9, 2)], 12);
        assert!(matches!(
            decode(&r12),
            Ok(Command::Read(Blocks {
                lba: 1,
                count: 2,
                ..
            }))
        ));
        let r16 = cdb(&[(0, opcode::READ_16), (2, 1), (13, 5)], 16);
        let Ok(Command::Read(b)) = decode(&r16) else {
            panic!("read16")
        };
        assert_eq!((b.lba, b.count), (1 << 56, 5));
    }

    #[test]
    fn short_cdb_is_invalid_field_and_unknown_opcode_is_invalid_opcode() {
        let s = decode(&[opcode::READ_10, 0, 0]).unwrap_err();
        assert_eq!((s.key, s.asc), (5, 0x24));
        let s = decode(&[]).unwrap_err();
        assert_eq!((s.key, s.asc), (5, 0x20));
        let s = decode(&[0xff; 16]).unwrap_err();
        assert_eq!(s.asc, 0x20);
        let s = decode(&[0x7e; 10]).unwrap_err();
        assert_eq!(s.asc, 0x20);
        // A 16-byte buffer for a 6-byte CDB: the tail is not the control byte.
        assert_eq!(
            decode(&cdb(&[(0, opcode::TEST_UNIT_READY), (15, 0xff)], 16)),
            Ok(Command::TestUnitReady)
        );
    }

    #[test]
    fn persistent_reserve_cdbs_decode_and_refuse_unknown_service_actions() {
        let prin = cdb(
            &[(0, opcode::PERSISTENT_RESERVE_IN), (1, 3), (7, 1), (8, 2)],
            10,
        );
        assert_eq!(
            decode(&prin),
            Ok(Command::PersistentReserveIn {
                service_action: 3,
                allocation_len: 0x102
            })
        );
        let bad = cdb(&[(0, opcode::PERSISTENT_RESERVE_IN), (1, 4)], 10);
        let s = decode(&bad).unwrap_err();
        assert_eq!(
            (s.asc, s.field.map(|f| (f.byte, f.bit))),
            (0x24, Some((1, Some(4))))
        );
        let prout = cdb(
            &[
                (0, opcode::PERSISTENT_RESERVE_OUT),
                (1, 7),
                (2, 0x15),
                (8, 24),
            ],
            10,
        );
        assert_eq!(
            decode(&prout),
            Ok(Command::PersistentReserveOut {
                service_action: 7,
                scope: 1,
                kind: 5,
                parameter_len: 24
            })
        );
        let g = geometry(512);
        assert_eq!(decode(&prout).map(|c| c.data_out_len_bytes(&g)), Ok(24));
        let bad = cdb(&[(0, opcode::PERSISTENT_RESERVE_OUT), (1, 8)], 10);
        assert_eq!(decode(&bad).unwrap_err().asc, 0x24);
        assert_eq!(
            decode(&[opcode::RESERVE_6, 0, 0, 0, 0, 0]),
            Ok(Command::Reserve6)
        );
        assert_eq!(
            decode(&[opcode::RELEASE_6, 0, 0, 0, 0, 0]),
            Ok(Command::Release6)
        );
        let s = decode(&[opcode::RESERVE_6, 0x10, 0, 0, 0, 0]).unwrap_err();
        assert_eq!(s.field.map(|f| f.bit), Some(Some(4)), "third party");
        assert!(
            decode(&[opcode::RELEASE_6, 0x01, 0, 0, 0, 0]).is_err(),
            "extent"
        );
    }

    #[test]
    fn start_stop_and_prevent_allow_fields() {
        let ssu = |b4| decode(&[opcode::START_STOP_UNIT, 0, 0, 0, b4, 0]);
        assert_eq!(ssu(0x01), Ok(Command::StartStopUnit { starts: true }));
        assert_eq!(ssu(0x00), Ok(Command::StartStopUnit { starts: false }));
        assert_eq!(ssu(0x11), Ok(Command::StartStopUnit { starts: false }));
        let pamr = |b4| decode(&[opcode::PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0, b4, 0]);
        assert_eq!(
            pamr(0),
            Ok(Command::PreventAllowMediumRemoval { prevent: false })
        );
        assert_eq!(
            pamr(1),
            Ok(Command::PreventAllowMediumRemoval { prevent: true })
        );
    }

    #[test]
    fn control_byte_naca_and_protection_fields_are_refused() {
        let s = decode(&cdb(&[(0, opcode::TEST_UNIT_READY), (5, CONTROL_NACA)], 6)).unwrap_err();
        assert_eq!(s.field.map(|f| (f.byte, f.bit)), Some((5, Some(2))));
        let s = decode(&cdb(&[(0, opcode::READ_10), (1, 0x20)], 10)).unwrap_err();
        assert_eq!((s.asc, s.field.map(|f| f.byte)), (0x24, Some(1)));
    }

    #[test]
    fn unknown_service_action_is_invalid_opcode() {
        let s = decode(&cdb(&[(0, opcode::SERVICE_ACTION_IN_16), (1, 0x11)], 16)).unwrap_err();
        assert_eq!((s.asc, s.field.map(|f| f.byte)), (0x20, Some(1)));
        let s = decode(&cdb(&[(0, opcode::MAINTENANCE_IN), (1, 0x05)], 12)).unwrap_err();
        assert_eq!(s.asc, 0x20);
    }

    #[test]
    fn write_same_refuses_zero_length_anchor_and_ndob_in_ten() {
        for bytes in [
            cdb(&[(0, opcode::WRITE_SAME_10)], 10),
            cdb(
                &[(0, opcode::WRITE_SAME_16), (1, WRITE_SAME_ANCHOR), (13, 1)],
                16,
            ),
            cdb(
                &[(0, opcode::WRITE_SAME_10), (1, WRITE_SAME_NDOB), (8, 1)],
                10,
            ),
            cdb(&[(0, opcode::WRITE_SAME_10), (1, 0x02), (8, 1)], 10),
        ] {
            assert_eq!(decode(&bytes).unwrap_err().asc, 0x24, "{bytes:?}");
        }
    }
}
