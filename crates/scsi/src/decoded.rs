//! The decoded command the transport carries from the PDU to execution: [`DecodedCdb`], made
//! once from the CDB bytes ([`DecodedCdb::decode`]) and never rewritten. Also what a decoded
//! command implies for the transport, so that no transport looks at operation codes: its
//! data-out length, the most data-in it may return, its transfer limits against the LU's
//! geometry, how its data-out meets the initiator's expected transfer length
//! ([`DecodedCdb::transfer`]: residuals, WRITEs cut to what the initiator sends, refusals),
//! and the few questions a transport asks before it runs it (REPORT LUNS? answered before a
//! unit attention? plain block I/O?).
//!
//! No I/O and no panics here; decoding itself is [`crate::cdb`].

use crate::cdb::{decode, Blocks, ByteCheck, Command};
use crate::limits::{max_transfer_blocks, max_write_same_blocks, MAX_COMPARE_AND_WRITE_BLOCKS};
use crate::medium::Geometry;
use crate::opcode;
use crate::sense::{Response, Sense};

/// ASC/ASCQ of INVALID FIELD IN INFORMATION UNIT: the transport's lengths disagree with the
/// CDB's.
const INVALID_FIELD_IN_INFORMATION_UNIT: (u8, u8) = (0x0e, 0x03);
/// COMPARE AND WRITE's NUMBER OF LOGICAL BLOCKS: the field a refused transfer points at.
const COMPARE_AND_WRITE_COUNT_AT: u16 = 13;

/// A CDB decoded once: the transport asks it how much data-out the command carries and how
/// that meets what the initiator sends ([`DecodedCdb::transfer`]), then
/// [`crate::execute_decoded`] runs it without decoding the bytes again.
#[derive(Debug, Clone)]
pub struct DecodedCdb {
    /// The operation code, kept for the CDBs that do not decode: INQUIRY, REPORT LUNS and
    /// REQUEST SENSE skip unit attentions even when their fields are invalid, and a LUN with
    /// no logical unit answers an invalid INQUIRY with its own sense.
    opcode: u8,
    /// The command, or the sense that refuses its CDB.
    pub(crate) command: Result<Command, Sense>,
}

/// How a command's data-out length (from its CDB) meets the initiator's expected length.
#[derive(Debug)]
pub enum DataOutTransfer {
    /// As the CDB says (it asks for no more than the initiator sends).
    AsIs,
    /// A WRITE asking for more blocks than the initiator sends: done for the blocks it sends
    /// (FCP-4 and libiscsi's residual tests: "process the command normally except that data
    /// beyond the expected length shall not be transferred"), as this command.
    Truncated(DecodedCdb),
    /// Anything else asking for more than it sends, a COMPARE AND WRITE not carrying exactly
    /// its two halves, or a WRITE SAME not carrying exactly its one block.
    Refused(Response),
}

impl DecodedCdb {
    /// Decode `cdb`. Trailing bytes past the opcode's CDB length are ignored (iSCSI's CDB
    /// field is always 16 bytes).
    pub fn decode(cdb: &[u8]) -> DecodedCdb {
        DecodedCdb {
            opcode: cdb.first().copied().unwrap_or(0),
            command: decode(cdb),
        }
    }

    /// The command checked against the LU's transfer limits, or the sense refusing it.
    pub(crate) fn checked(&self, geometry: &Geometry) -> Result<Command, Sense> {
        let command = self.command.clone()?;
        command.check_limits(geometry)?;
        Ok(command)
    }

    /// How many data-out bytes the command carries, from the CDB alone, so the transport can
    /// check it against the initiator's expected transfer length. `None` when the CDB is
    /// unknown or invalid for this geometry: then [`crate::execute_decoded`] answers with the
    /// right sense without reading any data-out.
    pub fn data_out_len(&self, geometry: &Geometry) -> Option<u64> {
        self.checked(geometry)
            .ok()
            .map(|c| c.data_out_len_bytes(geometry))
    }

    /// How the command's data-out meets `expected_len_bytes`, what the initiator said it
    /// would send.
    pub fn transfer(&self, expected_len_bytes: u32, geometry: &Geometry) -> DataOutTransfer {
        let Ok(command) = self.checked(geometry) else {
            return DataOutTransfer::AsIs;
        };
        let needed = command.data_out_len_bytes(geometry);
        let expected = u64::from(expected_len_bytes);
        let refuse = || {
            DataOutTransfer::Refused(Response::check(Sense::illegal_request(
                INVALID_FIELD_IN_INFORMATION_UNIT,
            )))
        };
        match command {
            Command::CompareAndWrite { .. } if needed != expected => {
                return DataOutTransfer::Refused(Response::check(Sense::invalid_cdb_field(
                    COMPARE_AND_WRITE_COUNT_AT,
                    None,
                )));
            }
            // WRITE SAME's data is one block, the pattern: more than that is not a longer
            // pattern but a malformed command (libiscsi's InvalidDataOutSize tests, run on LUNs
            // of more than one logical block per physical block).
            Command::WriteSame { .. } if needed > 0 && needed != expected => return refuse(),
            _ => {}
        }
        if needed <= expected {
            return DataOutTransfer::AsIs;
        }
        let block = u64::from(geometry.block_size_bytes);
        if block == 0 || !expected.is_multiple_of(block) {
            return refuse();
        }
        // Fewer blocks than the CDB names (needed > expected), so it fits the CDB's field.
        let blocks = u32::try_from(expected / block).unwrap_or(u32::MAX);
        let cut = |range: Blocks| Blocks {
            count: blocks.min(range.count),
            ..range
        };
        let command = match command {
            Command::Write { range, fua } => Command::Write {
                range: cut(range),
                fua,
            },
            Command::WriteAndVerify(range) => Command::WriteAndVerify(cut(range)),
            _ => return refuse(),
        };
        DataOutTransfer::Truncated(DecodedCdb {
            opcode: self.opcode,
            command: Ok(command),
        })
    }

    /// A REPORT LUNS (valid or not): the transport answers it from its LUN map
    /// ([`crate::report_luns`]).
    pub fn is_report_luns(&self) -> bool {
        self.opcode == opcode::REPORT_LUNS
    }

    /// INQUIRY, REPORT LUNS or REQUEST SENSE (valid or not), which SPC-4 answers without
    /// reporting a pending unit attention first.
    pub fn answered_without_unit_attention(&self) -> bool {
        matches!(
            self.opcode,
            opcode::INQUIRY | opcode::REPORT_LUNS | opcode::REQUEST_SENSE
        )
    }

    /// A READ, WRITE, SYNCHRONIZE CACHE or TEST UNIT READY: block I/O that never waits on
    /// another nexus (no reservation change, no COMPARE AND WRITE lock held exclusive), so a
    /// transport may run a small one on its connection's task.
    pub fn is_plain_io(&self) -> bool {
        matches!(
            self.command,
            Ok(Command::Read(_)
                | Command::Write { .. }
                | Command::SynchronizeCache { .. }
                | Command::TestUnitReady)
        )
    }

    /// The operation code, for [`crate::execute_no_lun`]'s INQUIRY.
    pub(crate) fn opcode(&self) -> u8 {
        self.opcode
    }
}

impl Command {
    /// Checks that need the LU's block size: transfer lengths against the Block Limits page.
    pub(crate) fn check_limits(&self, geometry: &Geometry) -> Result<(), Sense> {
        let too_long = |range: &Blocks, max: u32| {
            if range.count > max {
                Err(Sense::invalid_cdb_field(range.count_at, None))
            } else {
                Ok(())
            }
        };
        match self {
            Command::Read(range)
            | Command::Write { range, .. }
            | Command::WriteAndVerify(range)
            | Command::Verify { range, .. } => too_long(range, max_transfer_blocks(geometry)),
            Command::WriteSame { range, .. } => too_long(range, max_write_same_blocks(geometry)),
            Command::CompareAndWrite { range, .. } => {
                too_long(range, u32::from(MAX_COMPARE_AND_WRITE_BLOCKS))
            }
            _ => Ok(()),
        }
    }

    /// Data-out bytes the command carries, from the CDB alone.
    pub(crate) fn data_out_len_bytes(&self, geometry: &Geometry) -> u64 {
        let block = u64::from(geometry.block_size_bytes);
        match *self {
            Command::Write { range, .. } | Command::WriteAndVerify(range) => {
                u64::from(range.count) * block
            }
            Command::Verify { range, byte_check } => match byte_check {
                ByteCheck::None => 0,
                ByteCheck::All => u64::from(range.count) * block,
                ByteCheck::OneBlock if range.count > 0 => block,
                ByteCheck::OneBlock => 0,
            },
            Command::WriteSame { no_data_out, .. } => {
                if no_data_out {
                    0
                } else {
                    block
                }
            }
            Command::CompareAndWrite { range, .. } => 2 * u64::from(range.count) * block,
            Command::Unmap { parameter_len }
            | Command::ModeSelect { parameter_len, .. }
            | Command::PersistentReserveOut { parameter_len, .. } => u64::from(parameter_len),
            _ => 0,
        }
    }

    /// The most data-in bytes the command may return: its allocation length, its transfer
    /// length for reads, the fixed size of READ CAPACITY(10)'s data, else zero.
    pub(crate) fn data_in_limit_bytes(&self, geometry: &Geometry) -> u64 {
        match *self {
            Command::RequestSense { allocation_len, .. }
            | Command::Inquiry { allocation_len, .. }
            | Command::ModeSense { allocation_len, .. }
            | Command::ReadCapacity16 { allocation_len }
            | Command::GetLbaStatus { allocation_len, .. }
            | Command::ReportSupportedOperationCodes { allocation_len, .. }
            | Command::ReportTargetPortGroups { allocation_len, .. }
            | Command::ReportLuns { allocation_len, .. }
            | Command::PersistentReserveIn { allocation_len, .. } => u64::from(allocation_len),
            Command::ReadCapacity10 => crate::capacity::READ_CAPACITY_10_LEN_BYTES as u64,
            Command::Read(range) => u64::from(range.count) * u64::from(geometry.block_size_bytes),
            _ => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;

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

    fn len(bytes: &[u8], g: &Geometry) -> Option<u64> {
        DecodedCdb::decode(bytes).data_out_len(g)
    }

    #[test]
    fn data_out_lengths_follow_the_cdb() {
        let g = geometry(512);
        assert_eq!(len(&cdb(&[(0, opcode::WRITE_6)], 6), &g), Some(256 * 512));
        assert_eq!(
            len(&cdb(&[(0, opcode::WRITE_10), (8, 4)], 10), &g),
            Some(2048)
        );
        assert_eq!(
            len(&cdb(&[(0, opcode::VERIFY_16), (13, 4)], 16), &g),
            Some(0)
        );
        let verify = |b1| cdb(&[(0, opcode::VERIFY_16), (1, b1), (13, 4)], 16);
        assert_eq!(len(&verify(2), &g), Some(2048));
        assert_eq!(len(&verify(6), &g), Some(512));
        let write_same = |b1| cdb(&[(0, opcode::WRITE_SAME_16), (1, b1), (13, 9)], 16);
        assert_eq!(len(&write_same(0), &g), Some(512));
        assert_eq!(len(&write_same(1), &g), Some(0), "NDOB");
        let caw = cdb(&[(0, opcode::COMPARE_AND_WRITE), (13, 1)], 16);
        assert_eq!(len(&caw, &g), Some(1024));
        assert_eq!(len(&cdb(&[(0, opcode::UNMAP), (8, 24)], 10), &g), Some(24));
        let mode_select = cdb(&[(0, opcode::MODE_SELECT_6), (4, 28)], 6);
        assert_eq!(len(&mode_select, &g), Some(28));
        assert_eq!(len(&cdb(&[(0, opcode::INQUIRY), (4, 96)], 6), &g), Some(0));
        let g = geometry(4096);
        assert_eq!(len(&build::compare_and_write(0, 1), &g), Some(8192));
        assert_eq!(len(&build::compare_and_write(0, 5), &g), None, "over limit");
        assert_eq!(len(&[0x7e; 10], &g), None);
        assert_eq!(len(&[opcode::WRITE_10], &g), None);
    }

    #[test]
    fn transfer_limits_depend_on_block_size() {
        let read = DecodedCdb::decode(&cdb(&[(0, opcode::READ_16), (12, 4), (13, 1)], 16));
        assert!(
            read.checked(&geometry(4096)).is_err(),
            "1025 blocks of 4 KiB"
        );
        assert!(read.checked(&geometry(512)).is_ok());
        let caw = DecodedCdb::decode(&cdb(&[(0, opcode::COMPARE_AND_WRITE), (13, 2)], 16));
        let s = caw.checked(&geometry(512)).unwrap_err();
        assert_eq!(s.field.map(|f| f.byte), Some(13));
    }

    fn transfer_of(cdb: &[u8], expected_len: u32) -> DataOutTransfer {
        DecodedCdb::decode(cdb).transfer(expected_len, &geometry(512))
    }

    /// WRITE SAME(10) and (16) of one block at LBA 0, with NDOB (no data-out) or not.
    fn write_same(op: u8, ndob: bool) -> Vec<u8> {
        if op == opcode::WRITE_SAME_10 {
            cdb(&[(0, op), (8, 1)], 10)
        } else {
            cdb(&[(0, op), (1, u8::from(ndob)), (13, 1)], 16)
        }
    }

    #[test]
    fn write_same_takes_exactly_one_block_of_data() {
        for op in [opcode::WRITE_SAME_10, opcode::WRITE_SAME_16] {
            for sent in [256, 1024] {
                assert!(
                    matches!(
                        transfer_of(&write_same(op, false), sent),
                        DataOutTransfer::Refused(_)
                    ),
                    "{op:#x} with {sent} bytes for a 512-byte block"
                );
            }
            let exact = transfer_of(&write_same(op, false), 512);
            assert!(matches!(exact, DataOutTransfer::AsIs));
        }
        // NDOB: no data at all, whatever the initiator announced.
        let ndob = transfer_of(&write_same(opcode::WRITE_SAME_16, true), 0);
        assert!(matches!(ndob, DataOutTransfer::AsIs));
        // A WRITE sending more than it asks for is still fine (residual overflow).
        let write_8 = build::rw10(opcode::WRITE_10, 0, 0, 8);
        assert!(matches!(transfer_of(&write_8, 8192), DataOutTransfer::AsIs));
    }

    #[test]
    fn a_write_asking_for_more_than_it_sends_is_cut_to_what_it_sends() {
        // WRITE(10) of 8 blocks, the initiator sends 4: done for 4 blocks.
        let write_8 = build::rw10(opcode::WRITE_10, 0, 0, 8);
        match transfer_of(&write_8, 2048) {
            DataOutTransfer::Truncated(d) => {
                assert_eq!(d.data_out_len(&geometry(512)), Some(2048));
            }
            other => panic!("not truncated: {other:?}"),
        }
        // Not a whole number of blocks: refused.
        let partial = transfer_of(&write_8, 1000);
        assert!(matches!(partial, DataOutTransfer::Refused(_)));
        // Anything but a WRITE asking for more than it sends: refused.
        let unmap = cdb(&[(0, opcode::UNMAP), (8, 24)], 10);
        assert!(matches!(
            transfer_of(&unmap, 8),
            DataOutTransfer::Refused(_)
        ));
        // COMPARE AND WRITE carries exactly its two halves, pointing at its block count.
        match transfer_of(&build::compare_and_write(0, 1), 512) {
            DataOutTransfer::Refused(r) => {
                let field = r.sense.and_then(|s| s.field).map(|f| f.byte);
                assert_eq!(field, Some(COMPARE_AND_WRITE_COUNT_AT));
            }
            other => panic!("not refused: {other:?}"),
        }
        let exact = transfer_of(&build::compare_and_write(0, 1), 1024);
        assert!(matches!(exact, DataOutTransfer::AsIs));
    }

    #[test]
    fn what_the_transport_asks_before_it_runs_a_command() {
        let report_luns = DecodedCdb::decode(&build::report_luns(64));
        assert!(report_luns.is_report_luns() && report_luns.answered_without_unit_attention());
        // Invalid (allocation length below 16) and still REPORT LUNS.
        assert!(DecodedCdb::decode(&build::report_luns(8)).is_report_luns());
        let inquiry = DecodedCdb::decode(&build::inquiry(false, 0, 36));
        assert!(inquiry.answered_without_unit_attention() && !inquiry.is_plain_io());
        for plain in [
            build::rw10(opcode::READ_10, 0, 0, 1),
            build::rw6(opcode::WRITE_6, 0, 1),
            build::sync_cache16(0, 0),
            vec![opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0],
        ] {
            let d = DecodedCdb::decode(&plain);
            assert!(
                d.is_plain_io() && !d.answered_without_unit_attention(),
                "{plain:?}"
            );
        }
        for other in [build::compare_and_write(0, 1), build::unmap_cdb(24)] {
            assert!(!DecodedCdb::decode(&other).is_plain_io(), "{other:?}");
        }
    }
}
