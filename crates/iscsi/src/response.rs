//! Target PDUs: one encoder per opcode, each appending the framed PDU (with the negotiated
//! digests) to a caller-owned buffer. Data-In also has a header-only encoder
//! ([`data_in_header`]) so a read's data goes out from its own buffer.

use crate::pdu::{encode_header, encode_pdu, encode_trailer, Digests};
use crate::wire::*;

/// The session's sequence numbers every target PDU reports (RFC 7143 §4.2.2): the status
/// number of this response, and the command window the initiator may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Numbers {
    pub stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

fn bhs(opcode: u8, flags: u8) -> [u8; BHS_BYTES] {
    let mut b = [0u8; BHS_BYTES];
    b[0] = opcode;
    b[1] = flags;
    b
}

fn put_u16(b: &mut [u8; BHS_BYTES], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn put_u32(b: &mut [u8; BHS_BYTES], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

fn put_u64(b: &mut [u8; BHS_BYTES], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

fn put_numbers(b: &mut [u8; BHS_BYTES], n: Numbers) {
    put_u32(b, 24, n.stat_sn);
    put_u32(b, 28, n.exp_cmd_sn);
    put_u32(b, 32, n.max_cmd_sn);
}

/// Residual flags and count: `expected` by the initiator, `actual` what the command moved.
fn residual(expected: u32, actual: u64) -> (u8, u32) {
    let expected = u64::from(expected);
    if actual > expected {
        (
            FLAG_RESIDUAL_OVERFLOW,
            u32::try_from(actual - expected).unwrap_or(u32::MAX),
        )
    } else if actual < expected {
        (
            FLAG_RESIDUAL_UNDERFLOW,
            u32::try_from(expected - actual).unwrap_or(u32::MAX),
        )
    } else {
        (0, 0)
    }
}

/// The fields of a Login Response that vary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginReply {
    pub transit: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub status: u16,
    pub text: Vec<u8>,
}

pub fn login_response(r: &LoginReply, n: Numbers, out: &mut Vec<u8>) {
    let mut flags = (r.current_stage << 2) | r.next_stage;
    if r.transit {
        flags |= FLAG_TRANSIT;
    }
    let mut b = bhs(OP_LOGIN_RESPONSE, flags);
    // Version-max and version-active: 0, the only version there is.
    b[8..14].copy_from_slice(&r.isid);
    put_u16(&mut b, 14, r.tsih);
    put_u32(&mut b, 16, r.itt);
    put_numbers(&mut b, n);
    b[36..38].copy_from_slice(&r.status.to_be_bytes());
    encode_pdu(b, &r.text, Digests::default(), out);
}

pub fn text_response(itt: u32, text: &[u8], n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    let mut b = bhs(OP_TEXT_RESPONSE, FLAG_FINAL);
    put_u32(&mut b, 16, itt);
    put_u32(&mut b, 20, TAG_NONE);
    put_numbers(&mut b, n);
    encode_pdu(b, text, digests, out);
}

/// A SCSI Response PDU: the command's status, with sense data when there is some.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    pub itt: u32,
    pub status: u8,
    pub sense: Option<Vec<u8>>,
    /// What the initiator expected to move and what the command moved (bytes).
    pub expected_len: u32,
    pub actual_len: u64,
    /// Data-In PDUs sent for the command (ExpDataSN).
    pub data_pdus: u32,
}

pub fn scsi_response(s: &Status, n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    let (flags, count) = residual(s.expected_len, s.actual_len);
    let mut b = bhs(OP_SCSI_RESPONSE, FLAG_FINAL | flags);
    b[2] = RESPONSE_COMPLETED;
    b[3] = s.status;
    put_u32(&mut b, 16, s.itt);
    put_numbers(&mut b, n);
    put_u32(&mut b, 36, s.data_pdus);
    put_u32(&mut b, 44, count);
    let data = match &s.sense {
        Some(sense) => {
            let len = u16::try_from(sense.len()).expect("sense data is short");
            let mut d = Vec::with_capacity(2 + sense.len());
            d.extend_from_slice(&len.to_be_bytes());
            d.extend_from_slice(sense);
            d
        }
        None => Vec::new(),
    };
    encode_pdu(b, &data, digests, out);
}

/// One Data-In PDU. With `status`, it is the last and carries the command's GOOD status
/// (no separate SCSI Response follows).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn<'a> {
    pub lun: u64,
    pub itt: u32,
    pub data_sn: u32,
    pub offset: u32,
    pub data: &'a [u8],
    pub final_: bool,
    /// (status, expected length, actual length) when this PDU carries the status.
    pub status: Option<(u8, u32, u64)>,
}

pub fn data_in(d: &DataIn<'_>, n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    data_in_header(d, n, digests, out);
    out.extend_from_slice(d.data);
    encode_trailer(d.data, digests, out);
}

/// A Data-In's BHS and header digest only, for `d.data.len()` bytes of data: the sender
/// writes `d.data` from its own buffer and then [`encode_trailer`]'s padding and data digest,
/// so a read's data is never copied into a response buffer.
pub fn data_in_header(d: &DataIn<'_>, n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    let mut flags = if d.final_ { FLAG_FINAL } else { 0 };
    let mut b = bhs(OP_DATA_IN, 0);
    if let Some((status, expected, actual)) = d.status {
        let (res_flags, count) = residual(expected, actual);
        flags |= FLAG_STATUS | FLAG_FINAL | res_flags;
        b[3] = status;
        put_u32(&mut b, 44, count);
        put_u32(&mut b, 24, n.stat_sn);
    }
    b[1] = flags;
    put_u64(&mut b, 8, d.lun);
    put_u32(&mut b, 16, d.itt);
    put_u32(&mut b, 20, TAG_NONE);
    put_u32(&mut b, 28, n.exp_cmd_sn);
    put_u32(&mut b, 32, n.max_cmd_sn);
    put_u32(&mut b, 36, d.data_sn);
    put_u32(&mut b, 40, d.offset);
    encode_header(b, d.data.len(), digests, out);
}

/// Ask for `len` bytes of a write's data from `offset`. R2Ts carry the current StatSN but do
/// not advance it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadyToTransfer {
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub r2t_sn: u32,
    pub offset: u32,
    pub len: u32,
}

pub fn r2t(r: &ReadyToTransfer, n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    let mut b = bhs(OP_R2T, FLAG_FINAL);
    put_u64(&mut b, 8, r.lun);
    put_u32(&mut b, 16, r.itt);
    put_u32(&mut b, 20, r.ttt);
    put_numbers(&mut b, n);
    put_u32(&mut b, 36, r.r2t_sn);
    put_u32(&mut b, 40, r.offset);
    put_u32(&mut b, 44, r.len);
    encode_pdu(b, &[], digests, out);
}

/// A NOP-In: the answer to a NOP-Out (`itt` echoed, `ttt` none), or our own ping (`itt` none,
/// `ttt` ours, StatSN not advanced).
pub fn nop_in(
    lun: u64,
    itt: u32,
    ttt: u32,
    data: &[u8],
    n: Numbers,
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let mut b = bhs(OP_NOP_IN, FLAG_FINAL);
    put_u64(&mut b, 8, lun);
    put_u32(&mut b, 16, itt);
    put_u32(&mut b, 20, ttt);
    put_numbers(&mut b, n);
    encode_pdu(b, data, digests, out);
}

pub fn task_management_response(
    itt: u32,
    response: u8,
    n: Numbers,
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let mut b = bhs(OP_TASK_MGMT_RESPONSE, FLAG_FINAL);
    b[2] = response;
    put_u32(&mut b, 16, itt);
    put_numbers(&mut b, n);
    encode_pdu(b, &[], digests, out);
}

pub fn logout_response(itt: u32, response: u8, n: Numbers, digests: Digests, out: &mut Vec<u8>) {
    let mut b = bhs(OP_LOGOUT_RESPONSE, FLAG_FINAL);
    b[2] = response;
    put_u32(&mut b, 16, itt);
    put_numbers(&mut b, n);
    // Time2Wait and Time2Retain: 0 (no connection recovery at error recovery level 0).
    encode_pdu(b, &[], digests, out);
}

/// Refuse a PDU: its header goes back as the data.
pub fn reject(
    reason: u8,
    rejected_bhs: &[u8; BHS_BYTES],
    n: Numbers,
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let mut b = bhs(OP_REJECT, FLAG_FINAL);
    b[2] = reason;
    put_u32(&mut b, 16, TAG_NONE);
    put_numbers(&mut b, n);
    encode_pdu(b, rejected_bhs, digests, out);
}
