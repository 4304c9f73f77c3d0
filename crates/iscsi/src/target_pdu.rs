//! Target PDUs, decoded: what each field of a PDU from a target means, for an initiator (weft's
//! benchmark). The mirror of [`crate::request`] (initiator PDUs, decoded by the target) and of
//! [`crate::response`] (target PDUs, encoded); the tests below run every encoder of
//! `response` through this decoder.
//!
//! Decoding borrows the data segment ([`PduRef`]) so an initiator's read path copies read data
//! once, into its own buffer. Like `request`, it checks only what one PDU can tell: tags,
//! offsets and sequence numbers are the initiator's business.

use crate::pdu::PduRef;
use crate::response::{Numbers, ReadyToTransfer};
use crate::wire::*;

/// Bytes of the SenseLength field that starts a SCSI Response's data segment.
const SENSE_LENGTH_BYTES: usize = 2;

/// One target PDU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetPdu<'a> {
    Login(LoginResponse<'a>),
    ScsiResponse(ScsiResponse<'a>),
    DataIn(DataIn<'a>),
    ReadyToTransfer(ReadyToTransfer, Numbers),
    NopIn(NopIn<'a>),
    Text(TextResponse<'a>),
    Logout(LogoutResponse),
    TaskManagement(TaskManagementResponse),
    AsyncMessage(AsyncMessage<'a>),
    Reject(Reject<'a>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginResponse<'a> {
    pub transit: bool,
    pub continue_: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub version_max: u8,
    pub version_active: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    /// Status class << 8 | detail (`LOGIN_*` in [`crate::wire`]).
    pub status: u16,
    pub numbers: Numbers,
    pub text: &'a [u8],
}

/// How much less (underflow) or more (overflow) the command moved than the initiator
/// expected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Residual {
    None,
    Underflow(u32),
    Overflow(u32),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiResponse<'a> {
    pub itt: u32,
    /// `RESPONSE_COMPLETED`, or a target failure (then `status` means nothing).
    pub response: u8,
    /// The SCSI status byte (GOOD 00h, CHECK CONDITION 02h, ...).
    pub status: u8,
    pub residual: Residual,
    /// Data-In PDUs the target sent for the command.
    pub exp_data_sn: u32,
    pub numbers: Numbers,
    /// Sense data, without its length field; empty when there is none.
    pub sense: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataIn<'a> {
    pub final_: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub data_sn: u32,
    pub offset: u32,
    pub data: &'a [u8],
    /// The command's status and residual when the PDU carries them (S); `numbers.stat_sn`
    /// means something only then.
    pub status: Option<(u8, Residual)>,
    pub numbers: Numbers,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopIn<'a> {
    pub lun: u64,
    /// Ours when this answers our NOP-Out, `TAG_NONE` when it is the target's ping.
    pub itt: u32,
    /// The target's when it wants an answer, else `TAG_NONE`.
    pub ttt: u32,
    pub numbers: Numbers,
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextResponse<'a> {
    pub final_: bool,
    pub continue_: bool,
    pub itt: u32,
    pub ttt: u32,
    pub numbers: Numbers,
    pub text: &'a [u8],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogoutResponse {
    pub itt: u32,
    /// `LOGOUT_SUCCESS`, or why not.
    pub response: u8,
    pub numbers: Numbers,
    pub time2wait: u16,
    pub time2retain: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaskManagementResponse {
    pub itt: u32,
    pub response: u8,
    pub numbers: Numbers,
}

/// An event the target tells of unasked (RFC 7143 §11.9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncMessage<'a> {
    pub lun: u64,
    /// 0 SCSI event, 1 logout requested, 2 connection drop, 3 session drop, 4 renegotiate.
    pub event: u8,
    pub vendor_code: u8,
    pub parameters: [u16; 3],
    pub numbers: Numbers,
    pub data: &'a [u8],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reject<'a> {
    /// `REJECT_*` in [`crate::wire`].
    pub reason: u8,
    pub numbers: Numbers,
    /// The header of the PDU refused.
    pub rejected_bhs: &'a [u8],
}

/// Why a PDU from a target cannot be understood; the connection cannot go on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetPduError {
    #[error("opcode {0:#04x} is not a target opcode")]
    UnknownOpcode(u8),
    #[error("SCSI Response sense length {len} exceeds its {available}-byte data segment")]
    SenseBeyondData { len: usize, available: usize },
}

/// What the PDU is.
pub fn decode_target_pdu<'a>(pdu: &PduRef<'a>) -> Result<TargetPdu<'a>, TargetPduError> {
    let flags = pdu.flags();
    let final_ = flags & FLAG_FINAL != 0;
    let numbers = Numbers {
        stat_sn: pdu.u32_at(24),
        exp_cmd_sn: pdu.u32_at(28),
        max_cmd_sn: pdu.u32_at(32),
    };
    Ok(match pdu.opcode() {
        OP_LOGIN_RESPONSE => {
            let mut isid = [0u8; 6];
            isid.copy_from_slice(&pdu.bhs[8..14]);
            TargetPdu::Login(LoginResponse {
                transit: flags & FLAG_TRANSIT != 0,
                continue_: flags & FLAG_CONTINUE != 0,
                current_stage: (flags >> 2) & 0x3,
                next_stage: flags & 0x3,
                version_max: pdu.bhs[2],
                version_active: pdu.bhs[3],
                isid,
                tsih: pdu.u16_at(14),
                itt: pdu.itt(),
                status: pdu.u16_at(36),
                numbers,
                text: pdu.data,
            })
        }
        OP_SCSI_RESPONSE => TargetPdu::ScsiResponse(ScsiResponse {
            itt: pdu.itt(),
            response: pdu.bhs[2],
            status: pdu.bhs[3],
            residual: residual(flags, pdu.u32_at(44)),
            exp_data_sn: pdu.u32_at(36),
            numbers,
            sense: sense_of(pdu.data)?,
        }),
        OP_DATA_IN => TargetPdu::DataIn(DataIn {
            final_,
            lun: pdu.u64_at(8),
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            data_sn: pdu.u32_at(36),
            offset: pdu.u32_at(40),
            data: pdu.data,
            status: (flags & FLAG_STATUS != 0)
                .then(|| (pdu.bhs[3], residual(flags, pdu.u32_at(44)))),
            numbers,
        }),
        OP_R2T => TargetPdu::ReadyToTransfer(
            ReadyToTransfer {
                lun: pdu.u64_at(8),
                itt: pdu.itt(),
                ttt: pdu.u32_at(20),
                r2t_sn: pdu.u32_at(36),
                offset: pdu.u32_at(40),
                len: pdu.u32_at(44),
            },
            numbers,
        ),
        OP_NOP_IN => TargetPdu::NopIn(NopIn {
            lun: pdu.u64_at(8),
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            numbers,
            data: pdu.data,
        }),
        OP_TEXT_RESPONSE => TargetPdu::Text(TextResponse {
            final_,
            continue_: flags & FLAG_CONTINUE != 0,
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            numbers,
            text: pdu.data,
        }),
        OP_LOGOUT_RESPONSE => TargetPdu::Logout(LogoutResponse {
            itt: pdu.itt(),
            response: pdu.bhs[2],
            numbers,
            time2wait: pdu.u16_at(40),
            time2retain: pdu.u16_at(42),
        }),
        OP_TASK_MGMT_RESPONSE => TargetPdu::TaskManagement(TaskManagementResponse {
            itt: pdu.itt(),
            response: pdu.bhs[2],
            numbers,
        }),
        OP_ASYNC_MESSAGE => TargetPdu::AsyncMessage(AsyncMessage {
            lun: pdu.u64_at(8),
            event: pdu.bhs[36],
            vendor_code: pdu.bhs[37],
            parameters: [pdu.u16_at(38), pdu.u16_at(40), pdu.u16_at(42)],
            numbers,
            data: pdu.data,
        }),
        OP_REJECT => TargetPdu::Reject(Reject {
            reason: pdu.bhs[2],
            numbers,
            rejected_bhs: pdu.data,
        }),
        other => return Err(TargetPduError::UnknownOpcode(other)),
    })
}

fn residual(flags: u8, count: u32) -> Residual {
    if flags & FLAG_RESIDUAL_OVERFLOW != 0 {
        Residual::Overflow(count)
    } else if flags & FLAG_RESIDUAL_UNDERFLOW != 0 {
        Residual::Underflow(count)
    } else {
        Residual::None
    }
}

/// The sense data in a SCSI Response's data segment (SenseLength, then the sense; any
/// response data after it is ignored).
fn sense_of(data: &[u8]) -> Result<&[u8], TargetPduError> {
    if data.len() < SENSE_LENGTH_BYTES {
        return Ok(&[]);
    }
    let len = usize::from(u16::from_be_bytes([data[0], data[1]]));
    data.get(SENSE_LENGTH_BYTES..SENSE_LENGTH_BYTES + len)
        .ok_or(TargetPduError::SenseBeyondData {
            len,
            available: data.len() - SENSE_LENGTH_BYTES,
        })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::pdu::{encode_pdu, parse_pdu_ref, Digests};
    use crate::response::{self, LoginReply, Status};
    use crate::Parse;

    const NUMBERS: Numbers = Numbers {
        stat_sn: 0xffff_fffe,
        exp_cmd_sn: 77,
        max_cmd_sn: 140,
    };
    const DIGESTS: Digests = Digests {
        header: true,
        data: true,
    };

    /// Decodes the one PDU in `wire`, which must be used whole.
    fn decoded(wire: &[u8], digests: Digests) -> TargetPdu<'_> {
        let Parse::Complete(pdu, used) = parse_pdu_ref(wire, digests, 1 << 20) else {
            panic!("one whole PDU");
        };
        assert_eq!(used, wire.len());
        decode_target_pdu(&pdu).expect("a target PDU")
    }

    #[test]
    fn login_responses_round_trip() {
        let reply = LoginReply {
            transit: true,
            current_stage: STAGE_OPERATIONAL,
            next_stage: STAGE_FULL_FEATURE,
            isid: [0x80, 1, 2, 3, 4, 5],
            tsih: 9,
            itt: 0x1234,
            status: LOGIN_AUTH_FAILED,
            text: b"MaxBurstLength=262144\0".to_vec(),
        };
        let mut wire = Vec::new();
        response::login_response(&reply, NUMBERS, &mut wire);
        let TargetPdu::Login(l) = decoded(&wire, Digests::default()) else {
            panic!("a login response");
        };
        assert!(l.transit && !l.continue_);
        assert_eq!((l.current_stage, l.next_stage), (1, 3));
        assert_eq!(
            (l.isid, l.tsih, l.itt, l.status),
            (reply.isid, 9, 0x1234, 0x0201)
        );
        assert_eq!((l.version_max, l.version_active), (0, 0));
        assert_eq!(l.numbers, NUMBERS);
        assert_eq!(l.text, reply.text.as_slice());
    }

    #[test]
    fn scsi_responses_round_trip_with_sense_and_residuals() {
        for (expected, actual, want) in [
            (4096, 4096, Residual::None),
            (4096, 1024, Residual::Underflow(3072)),
            (512, 4096, Residual::Overflow(3584)),
        ] {
            let status = Status {
                itt: 5,
                status: 2,
                sense: Some(vec![
                    0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x21, 0, 0, 0, 0, 0,
                ]),
                expected_len: expected,
                actual_len: actual,
                data_pdus: 3,
            };
            let mut wire = Vec::new();
            response::scsi_response(&status, NUMBERS, DIGESTS, &mut wire);
            let TargetPdu::ScsiResponse(r) = decoded(&wire, DIGESTS) else {
                panic!("a SCSI response");
            };
            assert_eq!((r.itt, r.response, r.status), (5, RESPONSE_COMPLETED, 2));
            assert_eq!((r.residual, r.exp_data_sn, r.numbers), (want, 3, NUMBERS));
            assert_eq!(r.sense, status.sense.as_deref().unwrap());
        }
        let good = Status {
            itt: 6,
            status: 0,
            sense: None,
            expected_len: 0,
            actual_len: 0,
            data_pdus: 0,
        };
        let mut wire = Vec::new();
        response::scsi_response(&good, NUMBERS, Digests::default(), &mut wire);
        let TargetPdu::ScsiResponse(r) = decoded(&wire, Digests::default()) else {
            panic!("a SCSI response");
        };
        assert_eq!(
            (r.status, r.sense, r.residual),
            (0, &[][..], Residual::None)
        );
    }

    #[test]
    fn data_in_round_trips_with_and_without_status() {
        let data = [7u8; 1000];
        for status in [None, Some((0u8, 2048u32, 1000u64))] {
            let d = response::DataIn {
                lun: 1 << 48,
                itt: 11,
                data_sn: 4,
                offset: 8192,
                data: &data,
                final_: status.is_some(),
                status,
            };
            let mut wire = Vec::new();
            response::data_in(&d, NUMBERS, DIGESTS, &mut wire);
            let TargetPdu::DataIn(got) = decoded(&wire, DIGESTS) else {
                panic!("a Data-In");
            };
            assert_eq!((got.lun, got.itt, got.ttt), (1 << 48, 11, TAG_NONE));
            assert_eq!((got.data_sn, got.offset, got.data), (4, 8192, &data[..]));
            assert_eq!(got.final_, status.is_some());
            assert_eq!(got.status, status.map(|_| (0, Residual::Underflow(1048))));
            assert_eq!(got.numbers.exp_cmd_sn, NUMBERS.exp_cmd_sn);
            assert_eq!(got.numbers.max_cmd_sn, NUMBERS.max_cmd_sn);
        }
    }

    #[test]
    fn r2t_nop_in_logout_task_management_and_reject_round_trip() {
        let r = ReadyToTransfer {
            lun: 3 << 48,
            itt: 21,
            ttt: 0x99,
            r2t_sn: 2,
            offset: 262144,
            len: 65536,
        };
        let mut wire = Vec::new();
        response::r2t(&r, NUMBERS, DIGESTS, &mut wire);
        assert_eq!(
            decoded(&wire, DIGESTS),
            TargetPdu::ReadyToTransfer(r, NUMBERS)
        );

        wire.clear();
        response::nop_in(0, TAG_NONE, 0x42, b"hi", NUMBERS, DIGESTS, &mut wire);
        let TargetPdu::NopIn(n) = decoded(&wire, DIGESTS) else {
            panic!("a NOP-In");
        };
        assert_eq!(
            (n.itt, n.ttt, n.data, n.numbers),
            (TAG_NONE, 0x42, &b"hi"[..], NUMBERS)
        );

        wire.clear();
        response::logout_response(8, LOGOUT_SUCCESS, NUMBERS, DIGESTS, &mut wire);
        let TargetPdu::Logout(l) = decoded(&wire, DIGESTS) else {
            panic!("a logout response");
        };
        assert_eq!((l.itt, l.response, l.numbers), (8, LOGOUT_SUCCESS, NUMBERS));

        wire.clear();
        response::task_management_response(9, TMF_RESPONSE_NO_TASK, NUMBERS, DIGESTS, &mut wire);
        assert_eq!(
            decoded(&wire, DIGESTS),
            TargetPdu::TaskManagement(TaskManagementResponse {
                itt: 9,
                response: TMF_RESPONSE_NO_TASK,
                numbers: NUMBERS
            })
        );

        wire.clear();
        let refused = [0x3cu8; BHS_BYTES];
        response::reject(REJECT_PROTOCOL_ERROR, &refused, NUMBERS, DIGESTS, &mut wire);
        let TargetPdu::Reject(j) = decoded(&wire, DIGESTS) else {
            panic!("a reject");
        };
        assert_eq!(
            (j.reason, j.rejected_bhs),
            (REJECT_PROTOCOL_ERROR, &refused[..])
        );

        wire.clear();
        response::text_response(10, b"TargetName=x\0", NUMBERS, DIGESTS, &mut wire);
        let TargetPdu::Text(t) = decoded(&wire, DIGESTS) else {
            panic!("a text response");
        };
        assert_eq!(
            (t.itt, t.final_, t.text),
            (10, true, &b"TargetName=x\0"[..])
        );
    }

    #[test]
    fn initiator_opcodes_and_a_sense_length_past_the_data_are_refused() {
        let mut wire = Vec::new();
        crate::initiator::logout_request(1, 1, 1, Digests::default(), &mut wire);
        let Parse::Complete(pdu, _) = parse_pdu_ref(&wire, Digests::default(), 1024) else {
            panic!("a PDU");
        };
        assert_eq!(
            decode_target_pdu(&pdu),
            Err(TargetPduError::UnknownOpcode(OP_LOGOUT_REQUEST))
        );
        let mut bhs = [0u8; BHS_BYTES];
        bhs[0] = OP_SCSI_RESPONSE;
        wire.clear();
        encode_pdu(bhs, &[0, 40, 1, 2], Digests::default(), &mut wire);
        let Parse::Complete(pdu, _) = parse_pdu_ref(&wire, Digests::default(), 1024) else {
            panic!("a PDU");
        };
        assert_eq!(
            decode_target_pdu(&pdu),
            Err(TargetPduError::SenseBeyondData {
                len: 40,
                available: 2
            })
        );
    }

    proptest! {
        #[test]
        fn random_bytes_never_panic_the_target_pdu_decoder(
            data in proptest::collection::vec(any::<u8>(), 0..600)
        ) {
            let mut at = 0;
            while let Parse::Complete(pdu, used) = parse_pdu_ref(&data[at..], Digests::default(), 512) {
                let _ = decode_target_pdu(&pdu);
                at += used;
            }
        }
    }
}
