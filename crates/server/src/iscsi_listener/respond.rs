//! A finished command on its way out: how its data-out length meets what the initiator said
//! it would send (residuals, truncated writes, refusals), and its Data-In and status PDUs,
//! numbered under the session's sequence lock.

use weft_iscsi::request::ScsiCommand;
use weft_iscsi::response::{self, DataIn, Status};

use super::shared::Shared;

/// Sense key ABORTED COMMAND, and the ASC/ASCQ of a Data-Out out of sequence or offset.
pub(super) const ABORTED_COMMAND: u8 = 0x0b;
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
    /// beyond the expected length shall not be transferred"), with this CDB.
    Truncated([u8; 16]),
    /// Anything else asking for more than it sends, a COMPARE AND WRITE not carrying exactly
    /// its two halves, or a WRITE SAME not carrying exactly its one block.
    Refused(weft_scsi::Response),
}

pub(super) fn transfer(c: &ScsiCommand, data_out_len: Option<u64>, block_bytes: u32) -> Transfer {
    let Some(needed) = data_out_len else {
        return Transfer::AsIs;
    };
    let expected = u64::from(c.expected_len);
    if c.cdb[0] == weft_scsi::opcode::COMPARE_AND_WRITE && needed != expected {
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
    let write_same = matches!(
        c.cdb[0],
        weft_scsi::opcode::WRITE_SAME_10 | weft_scsi::opcode::WRITE_SAME_16
    );
    if write_same && needed > 0 && needed != expected {
        return refuse();
    }
    if needed <= expected {
        return Transfer::AsIs;
    }
    if !expected.is_multiple_of(u64::from(block_bytes)) {
        return refuse();
    }
    let blocks = expected / u64::from(block_bytes);
    let mut cdb = c.cdb;
    // The transfer length field of each WRITE and WRITE AND VERIFY.
    match cdb[0] {
        0x2a | 0x2e => cdb[7..9].copy_from_slice(&(blocks as u16).to_be_bytes()),
        0xaa | 0xae => cdb[6..10].copy_from_slice(&(blocks as u32).to_be_bytes()),
        0x8a | 0x8e => cdb[10..14].copy_from_slice(&(blocks as u32).to_be_bytes()),
        _ => return refuse(),
    }
    Transfer::Truncated(cdb)
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

    fn command(opcode: u8, expected_len: u32) -> ScsiCommand {
        let mut cdb = [0u8; 16];
        cdb[0] = opcode;
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
            cdb,
            data: Vec::new(),
        }
    }

    #[test]
    fn write_same_takes_exactly_one_block_of_data() {
        use weft_scsi::opcode::{WRITE_10, WRITE_SAME_10, WRITE_SAME_16};
        for opcode in [WRITE_SAME_10, WRITE_SAME_16] {
            for sent in [256, 1024] {
                assert!(
                    matches!(
                        transfer(&command(opcode, sent), Some(512), 512),
                        Transfer::Refused(_)
                    ),
                    "{opcode:#x} with {sent} bytes for a 512-byte block"
                );
            }
            assert!(matches!(
                transfer(&command(opcode, 512), Some(512), 512),
                Transfer::AsIs
            ));
            // NDOB: no data at all, whatever the initiator announced.
            assert!(matches!(
                transfer(&command(opcode, 0), Some(0), 512),
                Transfer::AsIs
            ));
        }
        // A WRITE sending more than it asks for is still fine (residual overflow).
        assert!(matches!(
            transfer(&command(WRITE_10, 8192), Some(4096), 512),
            Transfer::AsIs
        ));
    }
}
