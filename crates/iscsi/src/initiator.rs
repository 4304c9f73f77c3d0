//! Initiator PDUs, encoded: what tests, fuzz seeds and weft's own benchmark initiator
//! (`weft bench iscsi://...`) send. The target never uses these; [`crate::request`] decodes
//! them, and the tests below prove the two agree.

use crate::pdu::{encode_pdu, Digests};
use crate::wire::*;

/// A Login Request with `text`; stages as in the BHS (CSG, NSG, T).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequestPdu<'a> {
    pub transit: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub isid: [u8; 6],
    pub itt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub text: &'a [u8],
}

pub fn login_request(r: &LoginRequestPdu<'_>, out: &mut Vec<u8>) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_LOGIN_REQUEST | FLAG_IMMEDIATE;
    b[1] = (r.current_stage << 2) | r.next_stage | if r.transit { FLAG_TRANSIT } else { 0 };
    b[8..14].copy_from_slice(&r.isid);
    b[16..20].copy_from_slice(&r.itt.to_be_bytes());
    b[24..28].copy_from_slice(&r.cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&r.exp_stat_sn.to_be_bytes());
    encode_pdu(b, r.text, Digests::default(), out);
}

/// A SCSI Command with immediate `data`, simple task attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPdu<'a> {
    /// No unsolicited Data-Out follows (F). Set for every command but a write whose first
    /// burst goes on in Data-Out PDUs without waiting for an R2T (InitialR2T=No).
    pub final_: bool,
    pub lun: u64,
    pub itt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub read: bool,
    pub write: bool,
    pub expected_len: u32,
    pub cdb: [u8; 16],
    pub data: &'a [u8],
}

pub fn scsi_command(c: &CommandPdu<'_>, digests: Digests, out: &mut Vec<u8>) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_SCSI_COMMAND;
    b[1] = TASK_ATTRIBUTE_SIMPLE
        | if c.final_ { FLAG_FINAL } else { 0 }
        | if c.read { FLAG_READ } else { 0 }
        | if c.write { FLAG_WRITE } else { 0 };
    b[8..16].copy_from_slice(&c.lun.to_be_bytes());
    b[16..20].copy_from_slice(&c.itt.to_be_bytes());
    b[20..24].copy_from_slice(&c.expected_len.to_be_bytes());
    b[24..28].copy_from_slice(&c.cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&c.exp_stat_sn.to_be_bytes());
    b[32..48].copy_from_slice(&c.cdb);
    encode_pdu(b, c.data, digests, out);
}

/// A Data-Out answering an R2T (`ttt`) or unsolicited (`TAG_NONE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataOutPdu<'a> {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    /// Counted from 0 in each R2T's sequence (and in the unsolicited one).
    pub data_sn: u32,
    pub offset: u32,
    pub final_: bool,
    pub data: &'a [u8],
}

pub fn data_out(d: &DataOutPdu<'_>, digests: Digests, out: &mut Vec<u8>) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_DATA_OUT;
    b[1] = if d.final_ { FLAG_FINAL } else { 0 };
    b[8..16].copy_from_slice(&d.lun.to_be_bytes());
    b[16..20].copy_from_slice(&d.itt.to_be_bytes());
    b[20..24].copy_from_slice(&d.ttt.to_be_bytes());
    b[28..32].copy_from_slice(&d.exp_stat_sn.to_be_bytes());
    b[36..40].copy_from_slice(&d.data_sn.to_be_bytes());
    b[40..44].copy_from_slice(&d.offset.to_be_bytes());
    encode_pdu(b, d.data, digests, out);
}

/// A NOP-Out: a ping of ours (`itt` ours, `ttt` none), or the answer to the target's
/// NOP-In (`itt` none, `ttt` and `data` echoed). Both go as immediate PDUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopOutPdu<'a> {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub data: &'a [u8],
}

pub fn nop_out(n: &NopOutPdu<'_>, digests: Digests, out: &mut Vec<u8>) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_NOP_OUT | FLAG_IMMEDIATE;
    b[1] = FLAG_FINAL;
    b[8..16].copy_from_slice(&n.lun.to_be_bytes());
    b[16..20].copy_from_slice(&n.itt.to_be_bytes());
    b[20..24].copy_from_slice(&n.ttt.to_be_bytes());
    b[24..28].copy_from_slice(&n.cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&n.exp_stat_sn.to_be_bytes());
    encode_pdu(b, n.data, digests, out);
}

/// A Text Request (discovery: `SendTargets=All`).
pub fn text_request(
    itt: u32,
    cmd_sn: u32,
    exp_stat_sn: u32,
    text: &[u8],
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_TEXT_REQUEST | FLAG_IMMEDIATE;
    b[1] = FLAG_FINAL;
    b[16..20].copy_from_slice(&itt.to_be_bytes());
    b[20..24].copy_from_slice(&TAG_NONE.to_be_bytes());
    b[24..28].copy_from_slice(&cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&exp_stat_sn.to_be_bytes());
    encode_pdu(b, text, digests, out);
}

/// A Logout Request closing the session.
pub fn logout_request(
    itt: u32,
    cmd_sn: u32,
    exp_stat_sn: u32,
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let mut b = [0u8; BHS_BYTES];
    b[0] = OP_LOGOUT_REQUEST | FLAG_IMMEDIATE;
    b[1] = FLAG_FINAL | LOGOUT_CLOSE_SESSION;
    b[16..20].copy_from_slice(&itt.to_be_bytes());
    b[24..28].copy_from_slice(&cmd_sn.to_be_bytes());
    b[28..32].copy_from_slice(&exp_stat_sn.to_be_bytes());
    encode_pdu(b, &[], digests, out);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pdu::parse_pdu;
    use crate::request::{decode, Request};
    use crate::Parse;

    fn decoded(wire: &[u8], digests: Digests) -> Request {
        let Parse::Complete(pdu, used) = parse_pdu(wire, digests, 1 << 20) else {
            panic!("one whole PDU");
        };
        assert_eq!(used, wire.len());
        decode(pdu).expect("an initiator PDU")
    }

    #[test]
    fn scsi_commands_round_trip_through_the_target_decoder() {
        let digests = Digests {
            header: true,
            data: true,
        };
        for final_ in [true, false] {
            let mut cdb = [0u8; 16];
            cdb[0] = 0x8a;
            cdb[13] = 2;
            let mut wire = Vec::new();
            scsi_command(
                &CommandPdu {
                    final_,
                    lun: 0x0001_0000_0000_0000,
                    itt: 7,
                    cmd_sn: 41,
                    exp_stat_sn: 9,
                    read: false,
                    write: true,
                    expected_len: 8192,
                    cdb,
                    data: b"abcde",
                },
                digests,
                &mut wire,
            );
            let Request::ScsiCommand(c) = decoded(&wire, digests) else {
                panic!("a SCSI command");
            };
            assert_eq!(
                (c.final_, c.read, c.write, c.immediate),
                (final_, false, true, false)
            );
            assert_eq!((c.lun, c.itt, c.cmd_sn, c.exp_stat_sn), (1 << 48, 7, 41, 9));
            assert_eq!(
                (c.expected_len, c.cdb, c.data.as_slice()),
                (8192, cdb, &b"abcde"[..])
            );
        }
    }

    #[test]
    fn data_out_nop_out_and_logout_round_trip_through_the_target_decoder() {
        let digests = Digests::default();
        let mut wire = Vec::new();
        data_out(
            &DataOutPdu {
                lun: 0,
                itt: 3,
                ttt: 0x55,
                exp_stat_sn: 12,
                data_sn: 2,
                offset: 65536,
                final_: true,
                data: &[9; 100],
            },
            digests,
            &mut wire,
        );
        let Request::DataOut(d) = decoded(&wire, digests) else {
            panic!("a Data-Out");
        };
        assert_eq!(
            (d.final_, d.itt, d.ttt, d.exp_stat_sn, d.data_sn, d.offset),
            (true, 3, 0x55, 12, 2, 65536)
        );
        assert_eq!(d.data, vec![9; 100]);

        wire.clear();
        nop_out(
            &NopOutPdu {
                lun: 0,
                itt: TAG_NONE,
                ttt: 17,
                cmd_sn: 5,
                exp_stat_sn: 6,
                data: b"ping",
            },
            digests,
            &mut wire,
        );
        let Request::NopOut(n) = decoded(&wire, digests) else {
            panic!("a NOP-Out");
        };
        assert!(n.immediate);
        assert_eq!(
            (n.itt, n.ttt, n.cmd_sn, n.exp_stat_sn),
            (TAG_NONE, 17, 5, 6)
        );
        assert_eq!(n.data, b"ping");

        wire.clear();
        logout_request(4, 5, 6, digests, &mut wire);
        let Request::Logout(l) = decoded(&wire, digests) else {
            panic!("a Logout");
        };
        assert!(l.immediate);
        assert_eq!(
            (l.reason, l.itt, l.cmd_sn, l.exp_stat_sn),
            (LOGOUT_CLOSE_SESSION, 4, 5, 6)
        );
    }
}
