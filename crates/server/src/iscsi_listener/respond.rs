//! A finished command on its way out: its Data-In and status PDUs with the residual (what the
//! command moved against what the initiator expected), numbered under the session's sequence
//! lock. How its data-out meets the expected length is decided before it runs, by
//! [`weft_scsi::DecodedCdb::transfer`].
//!
//! A read's data is not copied: the headers and trailers (padding, data digest) of its
//! Data-In PDUs are encoded into one small buffer, and the queued [`Frames`] interleave
//! slices of it with slices of the command's data buffer, which the writer task sends with
//! one vectored write.

use std::ops::Range;

use bytes::Bytes;
use weft_iscsi::request::ScsiCommand;
use weft_iscsi::response::{self, DataIn, Status};

use super::shared::{Frames, Shared};

/// Where one part of a response's frames comes from.
enum Part {
    /// Bytes of the small buffer of headers, trailers and the SCSI Response.
    Head(Range<usize>),
    /// Bytes of the command's data-in.
    Data(Range<usize>),
}

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
    let data_in = if c.read {
        Bytes::from(result.data_in)
    } else {
        Bytes::new()
    };
    let sent = data_in.len().min(expected as usize);
    // What the command moves, against what the initiator expected: the residual.
    let actual = if c.read {
        data_in.len() as u64
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
    let mut head = Vec::new();
    let mut parts = Vec::new();
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
        let d = DataIn {
            lun: c.lun,
            itt: c.itt,
            data_sn,
            offset: offset as u32,
            data: &data_in[offset..offset + len],
            final_: last || (offset + len).is_multiple_of(burst),
            status: carries_status.then_some((status, expected, actual)),
        };
        let at = head.len();
        response::data_in_header(&d, numbers, digests, &mut head);
        parts.push(Part::Head(at..head.len()));
        parts.push(Part::Data(offset..offset + len));
        let at = head.len();
        weft_iscsi::encode_trailer(d.data, digests, &mut head);
        parts.push(Part::Head(at..head.len()));
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
        let at = head.len();
        response::scsi_response(&s, sequence.next_status(), digests, &mut head);
        parts.push(Part::Head(at..head.len()));
    }
    let _ = shared.tx.send(frames(&Bytes::from(head), &data_in, parts));
}

/// The parts as slices of `head` and `data`, empty ones left out.
fn frames(head: &Bytes, data: &Bytes, parts: Vec<Part>) -> Frames {
    parts
        .into_iter()
        .filter_map(|part| {
            let bytes = match part {
                Part::Head(r) => head.slice(r),
                Part::Data(r) => data.slice(r),
            };
            (!bytes.is_empty()).then_some(bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use parking_lot::Mutex;
    use tokio::sync::{mpsc, Notify};
    use tokio_util::sync::CancellationToken;
    use weft_iscsi::session::Sequence;
    use weft_iscsi::target_pdu::{decode_target_pdu, Residual, TargetPdu};
    use weft_iscsi::{parse_pdu_ref, Digests, LoggedIn, Parse, SessionParams, TargetLimits};
    use weft_scsi::Sense;

    use super::*;

    const DIGESTS: Digests = Digests {
        header: true,
        data: true,
    };

    /// A session with both digests, 4 KiB Data-In segments and 8 KiB bursts, and the
    /// receiving end of its response queue.
    fn session() -> (Shared, mpsc::UnboundedReceiver<Frames>) {
        let mut params = SessionParams::new(&TargetLimits::default());
        params.header_digest = true;
        params.data_digest = true;
        params.initiator_max_recv = 4096;
        params.max_burst = 8192;
        let login = LoggedIn {
            initiator: "iqn.2026-11.test:i".into(),
            target: Some("iqn.2026-11.test:t".into()),
            params,
            isid: [0x80, 0, 0, 0, 0, 1],
            tsih: 1,
            next_stat_sn: 100,
            exp_cmd_sn: 7,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let mut sequence = Sequence::new(&login);
        sequence.task_started();
        let shared = Shared {
            sequence: Mutex::new(sequence),
            tx,
            digests: DIGESTS,
            params,
            closing: CancellationToken::new(),
            executing: Mutex::new(HashSet::new()),
            answered: Notify::new(),
        };
        (shared, rx)
    }

    fn read(expected_len: u32) -> ScsiCommand {
        ScsiCommand {
            immediate: false,
            final_: true,
            read: true,
            write: false,
            lun: 0,
            itt: 0x55,
            expected_len,
            cmd_sn: 7,
            exp_stat_sn: 100,
            cdb: [0; weft_iscsi::request::CDB_BYTES],
            data: Vec::new(),
        }
    }

    /// The bytes the writer would send: the queued frames back to back.
    fn wire(rx: &mut mpsc::UnboundedReceiver<Frames>) -> Vec<u8> {
        let frames = rx.try_recv().expect("one response queued");
        assert!(rx.try_recv().is_err(), "one send per command");
        frames.iter().flat_map(|b| b.iter().copied()).collect()
    }

    /// Every PDU in `wire`, decoded (digests checked).
    fn pdus(wire: &[u8]) -> Vec<TargetPdu<'_>> {
        let mut at = 0;
        let mut out = Vec::new();
        while at < wire.len() {
            let Parse::Complete(pdu, used) = parse_pdu_ref(&wire[at..], DIGESTS, 1 << 20) else {
                panic!("whole PDUs with good digests");
            };
            out.push(decode_target_pdu(&pdu).expect("a target PDU"));
            at += used;
        }
        out
    }

    #[test]
    fn a_read_goes_out_in_segments_with_digests_padding_and_status_in_the_last() {
        let data: Vec<u8> = (0..10_003u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let (shared, mut rx) = session();
        respond(
            &shared,
            &read(12_288),
            None,
            weft_scsi::Response::good(data.clone()),
        );
        let wire = wire(&mut rx);
        let pdus = pdus(&wire);
        assert_eq!(pdus.len(), 3);
        let mut got = Vec::new();
        for (i, pdu) in pdus.iter().enumerate() {
            let TargetPdu::DataIn(d) = pdu else {
                panic!("Data-In only: status rides in the last");
            };
            assert_eq!(
                (d.itt, d.data_sn, d.offset),
                (0x55, i as u32, i as u32 * 4096)
            );
            // F at the end of each 8 KiB burst and on the last PDU.
            assert_eq!(d.final_, i >= 1);
            let status = (i == 2).then_some((0, Residual::Underflow(12_288 - 10_003)));
            assert_eq!(d.status, status);
            if i == 2 {
                assert_eq!(d.numbers.stat_sn, 100);
            }
            got.extend_from_slice(d.data);
        }
        assert_eq!(got, data);
        // Byte for byte what the whole-PDU encoder gives (a Data-In without status has
        // StatSN 0 on the wire, so the decoded numbers are the ones encoded).
        let mut whole = Vec::new();
        for (i, pdu) in pdus.iter().enumerate() {
            let TargetPdu::DataIn(d) = pdu else {
                unreachable!("checked above")
            };
            let again = DataIn {
                lun: d.lun,
                itt: d.itt,
                data_sn: d.data_sn,
                offset: d.offset,
                data: d.data,
                final_: d.final_,
                status: (i == 2).then_some((0, 12_288, 10_003)),
            };
            response::data_in(&again, d.numbers, DIGESTS, &mut whole);
        }
        assert_eq!(wire, whole);
    }

    #[test]
    fn a_failed_read_sends_its_data_then_a_scsi_response_with_sense() {
        let (shared, mut rx) = session();
        let mut result = weft_scsi::Response::check(Sense::lba_out_of_range());
        result.data_in = vec![9; 5];
        respond(&shared, &read(512), None, result);
        let wire = wire(&mut rx);
        let pdus = pdus(&wire);
        let [TargetPdu::DataIn(d), TargetPdu::ScsiResponse(r)] = &pdus[..] else {
            panic!("a Data-In and a SCSI Response, got {pdus:?}");
        };
        assert_eq!((d.data, d.status, d.final_), (&[9u8; 5][..], None, true));
        assert_eq!((r.status, r.exp_data_sn, r.numbers.stat_sn), (2, 1, 100));
        assert_eq!(r.sense, &Sense::lba_out_of_range().encode_fixed()[..]);
    }
}
