//! A finished command on its way out: how its data-out length meets what the initiator said
//! it would send (residuals, truncated writes, refusals), and its Data-In and status PDUs,
//! numbered under the session's sequence lock.

use weft_iscsi::request::ScsiCommand;
use weft_iscsi::response::{self, DataIn, Status};
use weft_scsi::opcode::{COMPARE_AND_WRITE, WRITE_SAME_10, WRITE_SAME_16};
use weft_scsi::DecodedCdb;

use super::shared::Shared;

/// The ASC/ASCQ of a Data-Out out of sequence or offset (sense key ABORTED COMMAND).
pub(super) const DATA_PHASE_ERROR: (u8, u8) = (0x4b, 0x00);
pub(super) const DATA_OFFSET_ERROR: (u8, u8) = (0x4b, 0x05);

/// ASC/ASCQ of INVALID FIELD IN INFORMATION UNIT: the transport's lengths disagree.
const INVALID_FIELD_IN_INFORMATION_UNIT: (u8, u8) = (0x0e, 0x03);

/// How a command's data-out length (from its CDB) meets the initiator's expected length.
pub(super) enum Transfer {
    /// As the CDB says (it asks for no more than the initiator sends).
    AsIs,
    /// A WRITE asking for more blocks than the initiator sends: done for the blocks it sends
    /// (FCP-4 and libiscsi's residual tests: "process the command normally except that data
    /// beyond the expected length shall not be transferred"), as this command.
    Truncated(DecodedCdb),
    /// Anything else asking for more than it sends, a COMPARE AND WRITE not carrying exactly
    /// its two halves, or a WRITE SAME not carrying exactly its one block.
    Refused(weft_scsi::Response),
}

pub(super) fn transfer(c: &ScsiCommand, decoded: &DecodedCdb, block_bytes: u32) -> Transfer {
    let Some(needed) = decoded.data_out_len() else {
        return Transfer::AsIs;
    };
    let expected = u64::from(c.expected_len);
    if decoded.opcode() == COMPARE_AND_WRITE && needed != expected {
        return Transfer::Refused(weft_scsi::Response::check(
            weft_scsi::Sense::invalid_cdb_field(13, None),
        ));
    }
    let refuse = || {
        Transfer::Refused(weft_scsi::Response::check(
            weft_scsi::Sense::illegal_request(INVALID_FIELD_IN_INFORMATION_UNIT),
        ))
    };
    // WRITE SAME's data is one block, the pattern: more than that is not a longer pattern but
    // a malformed command (libiscsi's InvalidDataOutSize tests, run on LUNs of more than one
    // logical block per physical block).
    let write_same = matches!(decoded.opcode(), WRITE_SAME_10 | WRITE_SAME_16);
    if write_same && needed > 0 && needed != expected {
        return refuse();
    }
    if needed <= expected {
        return Transfer::AsIs;
    }
    if !expected.is_multiple_of(u64::from(block_bytes)) {
        return refuse();
    }
    // Fewer blocks than the CDB names (needed > expected), so it fits the CDB's field.
    let blocks = u32::try_from(expected / u64::from(block_bytes)).unwrap_or(u32::MAX);
    match decoded.truncated(blocks) {
        Some(write) => Transfer::Truncated(write),
        None => refuse(),
    }
}

/// Send a finished command's data and status.
pub(super) fn respond(
    shared: &Shared,
    c: &ScsiCommand,
    data_out_len: Option<u64>,
    result: weft_scsi::Response,
) {
    let digests = shared.digests;
    let status = result.status as u8;
    let expected = c.expected_len;
    let data_in: &[u8] = if c.read { &result.data_in } else { &[] };
    let sent = data_in.len().min(expected as usize);
    // What the command moves, against what the initiator expected: the residual.
    let actual = if c.read {
        result.data_in.len() as u64
    } else if c.write {
        data_out_len.unwrap_or(c.data.len() as u64)
    } else {
        0
    };
    let chunk = shared.params.initiator_max_recv as usize;
    let burst = shared.params.max_burst as usize;
    let good = result.sense.is_none() && status == 0;
    let mut sequence = shared.sequence.lock();
    sequence.task_finished();
    let mut out = Vec::new();
    let mut data_sn = 0u32;
    let mut offset = 0usize;
    while offset < sent {
        let len = chunk.min(sent - offset);
        let last = offset + len == sent;
        let carries_status = last && good;
        let numbers = if carries_status {
            sequence.next_status()
        } else {
            sequence.current()
        };
        response::data_in(
            &DataIn {
                lun: c.lun,
                itt: c.itt,
                data_sn,
                offset: offset as u32,
                data: &data_in[offset..offset + len],
                final_: last || (offset + len).is_multiple_of(burst),
                status: carries_status.then_some((status, expected, actual)),
            },
            numbers,
            digests,
            &mut out,
        );
        data_sn += 1;
        offset += len;
    }
    if sent == 0 || !good {
        let s = Status {
            itt: c.itt,
            status,
            sense: result.sense.map(|s| s.encode_fixed()),
            expected_len: expected,
            actual_len: actual,
            data_pdus: data_sn,
        };
        response::scsi_response(&s, sequence.next_status(), digests, &mut out);
    }
    let _ = shared.tx.send(out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_scsi::opcode::WRITE_10;

    const GEOMETRY: weft_scsi::Geometry = weft_scsi::Geometry {
        block_size_bytes: 512,
        block_count: 1 << 20,
        physical_block_size_bytes: 4096,
        read_only: false,
    };

    /// A command with `cdb`, the initiator expecting to send `expected_len` bytes.
    fn command(cdb: &[u8], expected_len: u32) -> ScsiCommand {
        let mut bytes = [0u8; 16];
        bytes[..cdb.len()].copy_from_slice(cdb);
        ScsiCommand {
            immediate: false,
            final_: true,
            read: false,
            write: true,
            lun: 0,
            itt: 1,
            expected_len,
            cmd_sn: 1,
            exp_stat_sn: 1,
            cdb: bytes,
            data: Vec::new(),
        }
    }

    fn transfer_of(cdb: &[u8], expected_len: u32) -> Transfer {
        let c = command(cdb, expected_len);
        transfer(&c, &DecodedCdb::new(&c.cdb, &GEOMETRY), 512)
    }

    /// WRITE SAME(10) and (16) of one block at LBA 0, with NDOB (no data-out) or not.
    fn write_same(opcode: u8, ndob: bool) -> Vec<u8> {
        let mut cdb = vec![0u8; if opcode == WRITE_SAME_10 { 10 } else { 16 }];
        cdb[0] = opcode;
        if opcode == WRITE_SAME_10 {
            cdb[8] = 1;
        } else {
            cdb[1] = u8::from(ndob);
            cdb[13] = 1;
        }
        cdb
    }

    #[test]
    fn write_same_takes_exactly_one_block_of_data() {
        for opcode in [WRITE_SAME_10, WRITE_SAME_16] {
            for sent in [256, 1024] {
                assert!(
                    matches!(
                        transfer_of(&write_same(opcode, false), sent),
                        Transfer::Refused(_)
                    ),
                    "{opcode:#x} with {sent} bytes for a 512-byte block"
                );
            }
            assert!(matches!(
                transfer_of(&write_same(opcode, false), 512),
                Transfer::AsIs
            ));
        }
        // NDOB: no data at all, whatever the initiator announced.
        assert!(matches!(
            transfer_of(&write_same(WRITE_SAME_16, true), 0),
            Transfer::AsIs
        ));
        // A WRITE sending more than it asks for is still fine (residual overflow).
        let write_8 = [WRITE_10, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        assert!(matches!(transfer_of(&write_8, 8192), Transfer::AsIs));
    }

    #[test]
    fn a_write_asking_for_more_than_it_sends_is_cut_to_what_it_sends() {
        // WRITE(10) of 8 blocks, the initiator sends 4: done for 4 blocks.
        let write_8 = [WRITE_10, 0, 0, 0, 0, 0, 0, 0, 8, 0];
        match transfer_of(&write_8, 2048) {
            Transfer::Truncated(d) => assert_eq!(d.data_out_len(), Some(2048)),
            _ => panic!("not truncated"),
        }
        // Not a whole number of blocks: refused.
        assert!(matches!(transfer_of(&write_8, 1000), Transfer::Refused(_)));
        // Anything but a WRITE asking for more than it sends: refused.
        let mut unmap = [0u8; 10];
        unmap[0] = weft_scsi::opcode::UNMAP;
        unmap[8] = 24;
        assert!(matches!(transfer_of(&unmap, 8), Transfer::Refused(_)));
    }
}
