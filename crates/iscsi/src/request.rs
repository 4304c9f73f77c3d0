//! Initiator PDUs: what each field of a framed [`Pdu`] means, decoded into one
//! [`Request`] per opcode. Decoding checks only what the PDU itself can tell; sequence
//! numbers and tags are the session's business.

use crate::pdu::Pdu;
use crate::wire::*;

/// The CDB of a SCSI Command PDU (extended CDBs in an AHS are refused).
pub const CDB_BYTES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScsiCommand {
    pub immediate: bool,
    /// No unsolicited Data-Out follows (F).
    pub final_: bool,
    pub read: bool,
    pub write: bool,
    pub lun: u64,
    pub itt: u32,
    pub expected_len: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub cdb: [u8; CDB_BYTES],
    /// Immediate data.
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataOut {
    pub final_: bool,
    pub lun: u64,
    pub itt: u32,
    pub ttt: u32,
    pub exp_stat_sn: u32,
    pub data_sn: u32,
    pub offset: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginRequest {
    pub transit: bool,
    pub continue_: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub version_max: u8,
    pub version_min: u8,
    pub isid: [u8; 6],
    pub tsih: u16,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub text: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextRequest {
    pub immediate: bool,
    pub final_: bool,
    pub continue_: bool,
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub text: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NopOut {
    pub immediate: bool,
    pub lun: u64,
    /// `TAG_NONE` when this answers our NOP-In.
    pub itt: u32,
    pub ttt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub data: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskManagement {
    pub immediate: bool,
    pub function: u8,
    pub lun: u64,
    pub itt: u32,
    pub referenced_itt: u32,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Logout {
    pub immediate: bool,
    pub reason: u8,
    pub itt: u32,
    pub cid: u16,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    ScsiCommand(ScsiCommand),
    DataOut(DataOut),
    Login(LoginRequest),
    Text(TextRequest),
    NopOut(NopOut),
    TaskManagement(TaskManagement),
    Logout(Logout),
    /// SNACK (error recovery level above 0: not negotiated, so refused with a Reject).
    Snack {
        itt: u32,
    },
}

/// Why a PDU is refused; answered with a Reject carrying its header.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    #[error("opcode {0:#04x} is not an initiator opcode")]
    UnknownOpcode(u8),
    #[error("a SCSI command with an AHS (extended CDB or bidirectional length) is not supported")]
    AhsNotSupported,
}

impl RequestError {
    /// The Reject reason code for this error.
    pub fn reject_reason(&self) -> u8 {
        match self {
            RequestError::UnknownOpcode(_) => REJECT_COMMAND_NOT_SUPPORTED,
            RequestError::AhsNotSupported => REJECT_INVALID_PDU_FIELD,
        }
    }
}

/// What the PDU is.
pub fn decode(pdu: Pdu) -> Result<Request, RequestError> {
    let flags = pdu.flags();
    let immediate = pdu.immediate();
    Ok(match pdu.opcode() {
        OP_SCSI_COMMAND => {
            if !pdu.ahs.is_empty() {
                return Err(RequestError::AhsNotSupported);
            }
            let mut cdb = [0u8; CDB_BYTES];
            cdb.copy_from_slice(&pdu.bhs[32..48]);
            Request::ScsiCommand(ScsiCommand {
                immediate,
                final_: flags & FLAG_FINAL != 0,
                read: flags & FLAG_READ != 0,
                write: flags & FLAG_WRITE != 0,
                lun: pdu.u64_at(8),
                itt: pdu.itt(),
                expected_len: pdu.u32_at(20),
                cmd_sn: pdu.u32_at(24),
                exp_stat_sn: pdu.u32_at(28),
                cdb,
                data: pdu.data,
            })
        }
        OP_DATA_OUT => Request::DataOut(DataOut {
            final_: flags & FLAG_FINAL != 0,
            lun: pdu.u64_at(8),
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            exp_stat_sn: pdu.u32_at(28),
            data_sn: pdu.u32_at(36),
            offset: pdu.u32_at(40),
            data: pdu.data,
        }),
        OP_LOGIN_REQUEST => {
            let mut isid = [0u8; 6];
            isid.copy_from_slice(&pdu.bhs[8..14]);
            Request::Login(LoginRequest {
                transit: flags & FLAG_TRANSIT != 0,
                continue_: flags & FLAG_CONTINUE != 0,
                current_stage: (flags >> 2) & 0x3,
                next_stage: flags & 0x3,
                version_max: pdu.bhs[2],
                version_min: pdu.bhs[3],
                isid,
                tsih: pdu.u16_at(14),
                itt: pdu.itt(),
                cid: pdu.u16_at(20),
                cmd_sn: pdu.u32_at(24),
                exp_stat_sn: pdu.u32_at(28),
                text: pdu.data,
            })
        }
        OP_TEXT_REQUEST => Request::Text(TextRequest {
            immediate,
            final_: flags & FLAG_FINAL != 0,
            continue_: flags & FLAG_CONTINUE != 0,
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            cmd_sn: pdu.u32_at(24),
            exp_stat_sn: pdu.u32_at(28),
            text: pdu.data,
        }),
        OP_NOP_OUT => Request::NopOut(NopOut {
            immediate,
            lun: pdu.u64_at(8),
            itt: pdu.itt(),
            ttt: pdu.u32_at(20),
            cmd_sn: pdu.u32_at(24),
            exp_stat_sn: pdu.u32_at(28),
            data: pdu.data,
        }),
        OP_TASK_MGMT_REQUEST => Request::TaskManagement(TaskManagement {
            immediate,
            function: flags & 0x7f,
            lun: pdu.u64_at(8),
            itt: pdu.itt(),
            referenced_itt: pdu.u32_at(20),
            cmd_sn: pdu.u32_at(24),
            exp_stat_sn: pdu.u32_at(28),
        }),
        OP_LOGOUT_REQUEST => Request::Logout(Logout {
            immediate,
            reason: flags & 0x7f,
            itt: pdu.itt(),
            cid: pdu.u16_at(20),
            cmd_sn: pdu.u32_at(24),
            exp_stat_sn: pdu.u32_at(28),
        }),
        OP_SNACK_REQUEST => Request::Snack { itt: pdu.itt() },
        other => return Err(RequestError::UnknownOpcode(other)),
    })
}
