//! Initiator PDUs, encoded: what tests, fuzz seeds and weft's own benchmark initiator send.
//! The target never uses these.

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

/// A SCSI Command with immediate `data` (F set: no unsolicited Data-Out follows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandPdu<'a> {
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
    b[1] =
        FLAG_FINAL | if c.read { FLAG_READ } else { 0 } | if c.write { FLAG_WRITE } else { 0 } | 1; // simple task attribute
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
    b[36..40].copy_from_slice(&d.data_sn.to_be_bytes());
    b[40..44].copy_from_slice(&d.offset.to_be_bytes());
    encode_pdu(b, d.data, digests, out);
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
