//! A finished command on its way out: its Data-In and status PDUs with the residual (what the
//! command moved against what the initiator expected), numbered under the session's sequence
//! lock. How its data-out meets the expected length is decided before it runs, by
//! [`weft_scsi::DecodedCdb::transfer`].

use weft_iscsi::request::ScsiCommand;
use weft_iscsi::response::{self, DataIn, Status};

use super::shared::Shared;

/// The ASC/ASCQ of a Data-Out out of sequence or offset (sense key ABORTED COMMAND).
pub(super) const DATA_PHASE_ERROR: (u8, u8) = (0x4b, 0x00);
pub(super) const DATA_OFFSET_ERROR: (u8, u8) = (0x4b, 0x05);

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
