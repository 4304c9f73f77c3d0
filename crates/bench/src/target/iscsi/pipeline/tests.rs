//! The pipeline against target PDUs made by `weft-iscsi`'s own target encoders, with what it
//! sends read back by the target's decoder.

use weft_iscsi::request::{decode, Request};
use weft_iscsi::response::{self, DataIn as DataInOut, Status};
use weft_iscsi::wire::{REJECT_PROTOCOL_ERROR, TAG_NONE};
use weft_iscsi::{parse_pdu, parse_pdu_ref, Parse};

use super::*;

const LUN_FIELD: u64 = 0;

fn login(params: SessionParams, window: u32) -> LoginOutcome {
    LoginOutcome {
        params,
        tsih: 1,
        cmd_sn: 10,
        exp_stat_sn: 100,
        exp_cmd_sn: 10,
        max_cmd_sn: 10 + window - 1,
    }
}

fn params(immediate_data: bool, initial_r2t: bool) -> SessionParams {
    SessionParams {
        header_digest: false,
        data_digest: false,
        initial_r2t,
        immediate_data,
        max_burst: 64 << 10,
        first_burst: 16 << 10,
        initiator_max_recv: 256 << 10,
        target_max_recv: 8 << 10,
        max_outstanding_r2t: 1,
    }
}

/// Every initiator PDU in `wire`, decoded as the target would.
fn sent(wire: &[u8]) -> Vec<Request> {
    let mut at = 0;
    let mut out = Vec::new();
    while at < wire.len() {
        let Parse::Complete(pdu, used) = parse_pdu(&wire[at..], Digests::default(), 1 << 20) else {
            panic!("whole PDUs only");
        };
        out.push(decode(pdu).expect("an initiator PDU"));
        at += used;
    }
    out
}

/// Feeds every target PDU in `wire` to the pipeline.
fn feed(
    p: &mut Pipeline,
    wire: &[u8],
    out: &mut Vec<u8>,
    done: &mut Vec<u32>,
) -> Result<Received, PipelineError> {
    let mut at = 0;
    let mut last = Received::Progress;
    while at < wire.len() {
        let Parse::Complete(pdu, used) = parse_pdu_ref(&wire[at..], Digests::default(), 1 << 20)
        else {
            panic!("whole PDUs only");
        };
        last = p.receive(&pdu, out, done)?;
        at += used;
    }
    Ok(last)
}

fn numbers(stat_sn: u32, exp_cmd_sn: u32, window: u32) -> Numbers {
    Numbers {
        stat_sn,
        exp_cmd_sn,
        max_cmd_sn: exp_cmd_sn + window - 1,
    }
}

fn good(itt: u32, n: Numbers) -> Vec<u8> {
    let mut wire = Vec::new();
    response::scsi_response(
        &Status {
            itt,
            status: 0,
            sense: None,
            expected_len: 0,
            actual_len: 0,
            data_pdus: 0,
        },
        n,
        Digests::default(),
        &mut wire,
    );
    wire
}

fn read16(blocks: u32) -> [u8; 16] {
    let mut cdb = [0u8; 16];
    cdb[0] = 0x88;
    cdb[10..14].copy_from_slice(&blocks.to_be_bytes());
    cdb
}

#[test]
fn commands_wait_for_the_window_and_go_when_it_opens() {
    let mut p = Pipeline::new(&login(params(true, true), 2), LUN_FIELD, 4, 4096);
    for tag in 0..4 {
        p.submit(tag, read16(1), Direction::Read, 4096);
    }
    let mut out = Vec::new();
    p.issue(&mut out);
    let cmds = sent(&out);
    assert_eq!(cmds.len(), 2, "a window of two");
    let sns: Vec<u32> = cmds
        .iter()
        .map(|r| match r {
            Request::ScsiCommand(c) => c.cmd_sn,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(sns, [10, 11]);
    // Tag 0 completes with its data; the window moves by one.
    let mut wire = Vec::new();
    response::data_in(
        &DataInOut {
            lun: 0,
            itt: 0,
            data_sn: 0,
            offset: 0,
            data: &[5; 4096],
            final_: true,
            status: Some((0, 4096, 4096)),
        },
        numbers(100, 12, 1),
        Digests::default(),
        &mut wire,
    );
    out.clear();
    let mut done = Vec::new();
    feed(&mut p, &wire, &mut out, &mut done).unwrap();
    assert_eq!(done, [0]);
    assert_eq!(p.data_in(0), &[5; 4096][..]);
    p.issue(&mut out);
    let cmds = sent(&out);
    assert_eq!(cmds.len(), 1);
    let Request::ScsiCommand(c) = &cmds[0] else {
        panic!("a command");
    };
    assert_eq!((c.itt, c.cmd_sn, c.exp_stat_sn), (2, 12, 101));
    // A stale, smaller window in a later PDU does not shrink ours.
    out.clear();
    feed(&mut p, &good(1, numbers(101, 11, 1)), &mut out, &mut done).unwrap();
    p.issue(&mut out);
    assert!(out.is_empty(), "MaxCmdSN 12 is used: tag 3 waits");
    assert_eq!(p.window(), 1);
}

#[test]
fn writes_send_immediate_then_unsolicited_data_then_what_r2ts_ask() {
    // FirstBurstLength 16 KiB, segments of 8 KiB, InitialR2T=No: 8 KiB immediate, 8 KiB
    // unsolicited Data-Out, the remaining 32 KiB on R2Ts.
    let mut p = Pipeline::new(&login(params(true, false), 8), LUN_FIELD, 1, 48 << 10);
    let data: Vec<u8> = (0..48 << 10).map(|i: u32| (i % 251) as u8).collect();
    p.buffer_mut(0, 48 << 10).copy_from_slice(&data);
    p.submit(0, [0x8a; 16], Direction::Write, 48 << 10);
    let mut out = Vec::new();
    p.issue(&mut out);
    let reqs = sent(&out);
    let Request::ScsiCommand(c) = &reqs[0] else {
        panic!("a command");
    };
    assert!(
        !c.final_ && c.write && !c.read,
        "unsolicited Data-Out follows"
    );
    assert_eq!(c.data, &data[..8 << 10]);
    let Request::DataOut(d) = &reqs[1] else {
        panic!("a Data-Out");
    };
    assert_eq!(
        (d.ttt, d.offset, d.data_sn, d.final_),
        (TAG_NONE, 8 << 10, 0, true)
    );
    assert_eq!(d.data, &data[8 << 10..16 << 10]);
    assert_eq!(reqs.len(), 2);
    // An R2T for 24 KiB from 16 KiB: three Data-Out of 8 KiB with its tag.
    let mut wire = Vec::new();
    let r2t = ReadyToTransfer {
        lun: 0,
        itt: 0,
        ttt: 0x77,
        r2t_sn: 0,
        offset: 16 << 10,
        len: 24 << 10,
    };
    response::r2t(&r2t, numbers(100, 11, 8), Digests::default(), &mut wire);
    out.clear();
    let mut done = Vec::new();
    feed(&mut p, &wire, &mut out, &mut done).unwrap();
    let reqs = sent(&out);
    assert_eq!(reqs.len(), 3);
    for (i, r) in reqs.iter().enumerate() {
        let Request::DataOut(d) = r else {
            panic!("Data-Out");
        };
        let offset = (16 << 10) + i * (8 << 10);
        assert_eq!(
            (d.ttt, d.data_sn, d.offset as usize),
            (0x77, i as u32, offset)
        );
        assert_eq!(d.final_, i == 2);
        assert_eq!(d.data, &data[offset..offset + (8 << 10)]);
    }
    // An R2T past the end of the write is the target's error.
    let mut wire = Vec::new();
    response::r2t(
        &ReadyToTransfer {
            offset: 40 << 10,
            len: 16 << 10,
            ..r2t
        },
        numbers(100, 11, 8),
        Digests::default(),
        &mut wire,
    );
    let err = feed(&mut p, &wire, &mut out, &mut done).unwrap_err();
    assert!(
        matches!(err, PipelineError::Protocol(ref r) if r.contains("R2T for bytes")),
        "{err:?}"
    );
}

#[test]
fn without_immediate_data_and_with_initial_r2t_a_write_waits_for_r2t() {
    let mut p = Pipeline::new(&login(params(false, true), 8), LUN_FIELD, 1, 4096);
    p.submit(0, [0x8a; 16], Direction::Write, 4096);
    let mut out = Vec::new();
    p.issue(&mut out);
    let reqs = sent(&out);
    assert_eq!(reqs.len(), 1);
    let Request::ScsiCommand(c) = &reqs[0] else {
        panic!("a command");
    };
    assert!(c.final_ && c.data.is_empty());
}

#[test]
fn data_in_out_of_order_is_reassembled_and_overruns_are_refused() {
    let mut p = Pipeline::new(&login(params(true, true), 8), LUN_FIELD, 1, 12 << 10);
    p.submit(0, read16(3), Direction::Read, 12 << 10);
    let mut out = Vec::new();
    p.issue(&mut out);
    let mut wire = Vec::new();
    for (sn, offset) in [(1u32, 4096u32), (0, 0), (2, 8192)] {
        response::data_in(
            &DataInOut {
                lun: 0,
                itt: 0,
                data_sn: sn,
                offset,
                data: &[sn as u8 + 1; 4096],
                final_: sn == 2,
                status: (sn == 2).then_some((0, 12 << 10, 12 << 10)),
            },
            numbers(100, 11, 8),
            Digests::default(),
            &mut wire,
        );
    }
    let mut done = Vec::new();
    feed(&mut p, &wire, &mut out, &mut done).unwrap();
    assert_eq!(done, [0]);
    let got = p.data_in(0);
    assert_eq!(
        (got[0], got[4096], got[8192], got.len()),
        (1, 2, 3, 12 << 10)
    );

    p.submit(0, read16(3), Direction::Read, 12 << 10);
    p.issue(&mut out);
    wire.clear();
    response::data_in(
        &DataInOut {
            lun: 0,
            itt: 0,
            data_sn: 0,
            offset: 10 << 10,
            data: &[0; 4096],
            final_: false,
            status: None,
        },
        numbers(100, 12, 8),
        Digests::default(),
        &mut wire,
    );
    let err = feed(&mut p, &wire, &mut out, &mut done).unwrap_err();
    assert_eq!(
        err,
        PipelineError::Protocol("Data-In for bytes 10240..14336 of a 12288-byte read".into())
    );
}

fn check_condition(itt: u32, sense: weft_scsi::Sense, n: Numbers) -> Vec<u8> {
    let mut wire = Vec::new();
    response::scsi_response(
        &Status {
            itt,
            status: 2,
            sense: Some(sense.encode_fixed()),
            expected_len: 4096,
            actual_len: 0,
            data_pdus: 0,
        },
        n,
        Digests::default(),
        &mut wire,
    );
    wire
}

#[test]
fn check_condition_fails_the_command_with_its_sense_and_unit_attention_is_retried() {
    let mut p = Pipeline::new(&login(params(true, true), 8), LUN_FIELD, 1, 4096);
    p.submit(0, read16(1), Direction::Read, 4096);
    let mut out = Vec::new();
    p.issue(&mut out);
    let mut done = Vec::new();
    // A unit attention: the command goes again with the next CmdSN.
    let ua = weft_scsi::Sense::new(weft_scsi::sense::key::UNIT_ATTENTION, (0x29, 0));
    out.clear();
    feed(
        &mut p,
        &check_condition(0, ua, numbers(100, 11, 8)),
        &mut out,
        &mut done,
    )
    .unwrap();
    assert!(done.is_empty());
    p.issue(&mut out);
    let reqs = sent(&out);
    let Request::ScsiCommand(c) = &reqs[0] else {
        panic!("the command again");
    };
    assert_eq!((c.itt, c.cmd_sn, c.exp_stat_sn), (0, 11, 101));
    // Out of range: the run's error names the sense.
    let err = feed(
        &mut p,
        &check_condition(0, weft_scsi::Sense::lba_out_of_range(), numbers(101, 12, 8)),
        &mut out,
        &mut done,
    )
    .unwrap_err();
    let PipelineError::Command { tag, failure } = err else {
        panic!("a command failure: {err:?}");
    };
    assert_eq!(tag, 0);
    assert_eq!(
        failure.to_string(),
        "SCSI status CHECK CONDITION (02h), sense ILLEGAL REQUEST, ASC/ASCQ 21h/00h \
         (LOGICAL BLOCK ADDRESS OUT OF RANGE)"
    );
}

#[test]
fn pings_are_answered_and_rejects_and_strangers_end_the_session() {
    let mut p = Pipeline::new(&login(params(true, true), 8), LUN_FIELD, 2, 4096);
    let mut wire = Vec::new();
    response::nop_in(
        0,
        TAG_NONE,
        0x1234,
        b"are you there",
        numbers(100, 10, 8),
        Digests::default(),
        &mut wire,
    );
    let mut out = Vec::new();
    let mut done = Vec::new();
    feed(&mut p, &wire, &mut out, &mut done).unwrap();
    let reqs = sent(&out);
    let Request::NopOut(n) = &reqs[0] else {
        panic!("a NOP-Out");
    };
    assert!(n.immediate);
    assert_eq!(
        (n.itt, n.ttt, n.cmd_sn, n.data.as_slice()),
        (TAG_NONE, 0x1234, 10, &b"are you there"[..])
    );

    let err = feed(&mut p, &good(1, numbers(100, 10, 8)), &mut out, &mut done).unwrap_err();
    assert_eq!(
        err,
        PipelineError::Protocol("SCSI Response for task tag 1, which is not outstanding".into())
    );
    wire.clear();
    response::reject(
        REJECT_PROTOCOL_ERROR,
        &[0; 48],
        numbers(100, 10, 8),
        Digests::default(),
        &mut wire,
    );
    let err = feed(&mut p, &wire, &mut out, &mut done).unwrap_err();
    assert_eq!(
        err,
        PipelineError::Protocol("the target rejected a PDU (reason 0x04: protocol error)".into())
    );
}

#[test]
fn logout_is_answered() {
    let mut p = Pipeline::new(&login(params(true, true), 8), LUN_FIELD, 1, 4096);
    let mut out = Vec::new();
    p.logout(&mut out);
    let reqs = sent(&out);
    let Request::Logout(l) = &reqs[0] else {
        panic!("a logout");
    };
    assert_eq!((l.itt, l.cmd_sn, l.exp_stat_sn), (LOGOUT_ITT, 10, 100));
    let mut wire = Vec::new();
    response::logout_response(
        LOGOUT_ITT,
        LOGOUT_SUCCESS,
        numbers(100, 10, 8),
        Digests::default(),
        &mut wire,
    );
    let mut done = Vec::new();
    assert_eq!(
        feed(&mut p, &wire, &mut out, &mut done),
        Ok(Received::LoggedOut)
    );
}
