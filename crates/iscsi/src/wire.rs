//! Numbers of the iSCSI wire format (RFC 7143): opcodes, flag bits, login status codes, and
//! the limits this target enforces on what an initiator may send.

/// Basic Header Segment length: every PDU starts with one.
pub const BHS_BYTES: usize = 48;
/// A header or data digest (CRC32C, sent least significant byte first).
pub const DIGEST_BYTES: usize = 4;

// Initiator opcodes (BHS byte 0, low 6 bits).
pub const OP_NOP_OUT: u8 = 0x00;
pub const OP_SCSI_COMMAND: u8 = 0x01;
pub const OP_TASK_MGMT_REQUEST: u8 = 0x02;
pub const OP_LOGIN_REQUEST: u8 = 0x03;
pub const OP_TEXT_REQUEST: u8 = 0x04;
pub const OP_DATA_OUT: u8 = 0x05;
pub const OP_LOGOUT_REQUEST: u8 = 0x06;
pub const OP_SNACK_REQUEST: u8 = 0x10;

// Target opcodes.
pub const OP_NOP_IN: u8 = 0x20;
pub const OP_SCSI_RESPONSE: u8 = 0x21;
pub const OP_TASK_MGMT_RESPONSE: u8 = 0x22;
pub const OP_LOGIN_RESPONSE: u8 = 0x23;
pub const OP_TEXT_RESPONSE: u8 = 0x24;
pub const OP_DATA_IN: u8 = 0x25;
pub const OP_LOGOUT_RESPONSE: u8 = 0x26;
pub const OP_R2T: u8 = 0x31;
pub const OP_ASYNC_MESSAGE: u8 = 0x32;
pub const OP_REJECT: u8 = 0x3f;

/// BHS byte 0: the PDU is for immediate delivery (does not advance CmdSN).
pub const FLAG_IMMEDIATE: u8 = 0x40;
/// BHS byte 1: the last PDU of a sequence (F).
pub const FLAG_FINAL: u8 = 0x80;
/// Login and Text: more text follows in the next PDU (C).
pub const FLAG_CONTINUE: u8 = 0x40;
/// Login: transit to the next stage (T).
pub const FLAG_TRANSIT: u8 = 0x80;
/// SCSI Command: data flows to the initiator (R) / from it (W).
pub const FLAG_READ: u8 = 0x40;
pub const FLAG_WRITE: u8 = 0x20;
/// SCSI Response and Data-In: residual overflow (O) / underflow (U).
pub const FLAG_RESIDUAL_OVERFLOW: u8 = 0x04;
pub const FLAG_RESIDUAL_UNDERFLOW: u8 = 0x02;
/// Data-In: the PDU carries the command's status (S).
pub const FLAG_STATUS: u8 = 0x01;
/// SCSI Command byte 1, ATTR field: a simple task.
pub const TASK_ATTRIBUTE_SIMPLE: u8 = 0x01;

/// The target transfer tag / initiator task tag that means "none".
pub const TAG_NONE: u32 = 0xffff_ffff;

/// Login stages (CSG/NSG).
pub const STAGE_SECURITY: u8 = 0;
pub const STAGE_OPERATIONAL: u8 = 1;
pub const STAGE_FULL_FEATURE: u8 = 3;

/// Login status (class << 8 | detail).
pub const LOGIN_SUCCESS: u16 = 0x0000;
pub const LOGIN_INITIATOR_ERROR: u16 = 0x0200;
pub const LOGIN_AUTH_FAILED: u16 = 0x0201;
pub const LOGIN_FORBIDDEN: u16 = 0x0202;
pub const LOGIN_TARGET_NOT_FOUND: u16 = 0x0203;
pub const LOGIN_MISSING_PARAMETER: u16 = 0x0207;
pub const LOGIN_UNSUPPORTED_VERSION: u16 = 0x0205;
pub const LOGIN_SESSION_TYPE_UNSUPPORTED: u16 = 0x0209;
pub const LOGIN_INVALID_REQUEST: u16 = 0x020b;
pub const LOGIN_TARGET_ERROR: u16 = 0x0300;

/// Reject reasons.
pub const REJECT_DATA_DIGEST: u8 = 0x02;
pub const REJECT_PROTOCOL_ERROR: u8 = 0x04;
pub const REJECT_COMMAND_NOT_SUPPORTED: u8 = 0x05;
pub const REJECT_INVALID_PDU_FIELD: u8 = 0x09;

/// Task management functions (BHS byte 1, low 7 bits) and responses.
pub const TMF_ABORT_TASK: u8 = 1;
pub const TMF_ABORT_TASK_SET: u8 = 2;
pub const TMF_CLEAR_ACA: u8 = 3;
pub const TMF_CLEAR_TASK_SET: u8 = 4;
pub const TMF_LUN_RESET: u8 = 5;
pub const TMF_TARGET_WARM_RESET: u8 = 6;
pub const TMF_TARGET_COLD_RESET: u8 = 7;
pub const TMF_RESPONSE_COMPLETE: u8 = 0;
pub const TMF_RESPONSE_NO_TASK: u8 = 1;
pub const TMF_RESPONSE_NO_LUN: u8 = 2;
pub const TMF_RESPONSE_NOT_SUPPORTED: u8 = 5;

/// Logout reasons and responses.
pub const LOGOUT_CLOSE_SESSION: u8 = 0;
pub const LOGOUT_CLOSE_CONNECTION: u8 = 1;
pub const LOGOUT_SUCCESS: u8 = 0;
pub const LOGOUT_RECOVERY_NOT_SUPPORTED: u8 = 2;

/// SCSI Response: the command completed at the target (its status says how).
pub const RESPONSE_COMPLETED: u8 = 0x00;

/// The largest data segment this target accepts in any PDU, whatever was negotiated: bounds
/// the memory a peer can make us allocate before we have checked anything else.
pub const DATA_SEGMENT_MAX_BYTES: usize = 16 << 20;
/// The largest AHS (its length field counts 4-byte words in one byte).
pub const AHS_MAX_BYTES: usize = 255 * 4;
/// Login and text: at most this many bytes of key=value text per exchange.
pub const TEXT_MAX_BYTES: usize = 64 << 10;
