//! What a command returns: [`Status`], [`Sense`] data (fixed and descriptor formats, SPC-4
//! 4.5) and the [`Response`] that carries them with the data-in buffer; plus the named sense
//! keys and additional sense codes used by this crate, and the one function that maps a
//! [`MediumError`] to sense data. For an initiator (weft's benchmark) it also reads sense data
//! back ([`Sense::decode`]) and names keys and codes for error messages.
//!
//! Invariant kept by the constructors: a [`Response`] with `CheckCondition` carries sense and no
//! data; every other status carries no sense (RESERVATION CONFLICT carries nothing).

use crate::medium::MediumError;

/// Sense keys (SPC-4 table 27).
pub mod key {
    pub const NO_SENSE: u8 = 0x00;
    pub const NOT_READY: u8 = 0x02;
    pub const MEDIUM_ERROR: u8 = 0x03;
    pub const HARDWARE_ERROR: u8 = 0x04;
    pub const ILLEGAL_REQUEST: u8 = 0x05;
    pub const UNIT_ATTENTION: u8 = 0x06;
    pub const DATA_PROTECT: u8 = 0x07;
    pub const ABORTED_COMMAND: u8 = 0x0b;
    pub const MISCOMPARE: u8 = 0x0e;

    /// The sense key's name as SPC-4 writes it.
    pub fn name(key: u8) -> &'static str {
        match key & 0x0f {
            NO_SENSE => "NO SENSE",
            0x01 => "RECOVERED ERROR",
            NOT_READY => "NOT READY",
            MEDIUM_ERROR => "MEDIUM ERROR",
            HARDWARE_ERROR => "HARDWARE ERROR",
            ILLEGAL_REQUEST => "ILLEGAL REQUEST",
            UNIT_ATTENTION => "UNIT ATTENTION",
            DATA_PROTECT => "DATA PROTECT",
            0x08 => "BLANK CHECK",
            0x09 => "VENDOR SPECIFIC",
            0x0a => "COPY ABORTED",
            ABORTED_COMMAND => "ABORTED COMMAND",
            0x0d => "VOLUME OVERFLOW",
            MISCOMPARE => "MISCOMPARE",
            _ => "RESERVED",
        }
    }
}

/// Additional sense code and qualifier pairs (SPC-4 table 28) this crate reports.
pub mod asc {
    pub const NO_ADDITIONAL_SENSE: (u8, u8) = (0x00, 0x00);
    pub const ASYMMETRIC_ACCESS_STATE_TRANSITION: (u8, u8) = (0x04, 0x0a);
    pub const TARGET_PORT_IN_STANDBY_STATE: (u8, u8) = (0x04, 0x0b);
    pub const TARGET_PORT_IN_UNAVAILABLE_STATE: (u8, u8) = (0x04, 0x0c);
    pub const WRITE_ERROR: (u8, u8) = (0x0c, 0x00);
    pub const UNRECOVERED_READ_ERROR: (u8, u8) = (0x11, 0x00);
    pub const PARAMETER_LIST_LENGTH_ERROR: (u8, u8) = (0x1a, 0x00);
    pub const MISCOMPARE_DURING_VERIFY: (u8, u8) = (0x1d, 0x00);
    pub const INVALID_COMMAND_OPERATION_CODE: (u8, u8) = (0x20, 0x00);
    pub const LBA_OUT_OF_RANGE: (u8, u8) = (0x21, 0x00);
    pub const INVALID_FIELD_IN_CDB: (u8, u8) = (0x24, 0x00);
    pub const LOGICAL_UNIT_NOT_SUPPORTED: (u8, u8) = (0x25, 0x00);
    pub const INVALID_FIELD_IN_PARAMETER_LIST: (u8, u8) = (0x26, 0x00);
    pub const INVALID_RELEASE_OF_PERSISTENT_RESERVATION: (u8, u8) = (0x26, 0x04);
    pub const WRITE_PROTECTED: (u8, u8) = (0x27, 0x00);
    pub const SPACE_ALLOCATION_FAILED_WRITE_PROTECT: (u8, u8) = (0x27, 0x07);
    pub const RESERVATIONS_PREEMPTED: (u8, u8) = (0x2a, 0x03);
    pub const RESERVATIONS_RELEASED: (u8, u8) = (0x2a, 0x04);
    pub const REGISTRATIONS_PREEMPTED: (u8, u8) = (0x2a, 0x05);
    pub const ASYMMETRIC_ACCESS_STATE_CHANGED: (u8, u8) = (0x2a, 0x06);
    pub const SAVING_PARAMETERS_NOT_SUPPORTED: (u8, u8) = (0x39, 0x00);
    pub const INTERNAL_TARGET_FAILURE: (u8, u8) = (0x44, 0x00);
    pub const INSUFFICIENT_REGISTRATION_RESOURCES: (u8, u8) = (0x55, 0x04);

    /// The name of an additional sense code and qualifier: this crate's, and the ones an
    /// initiator commonly meets from other targets. `None` for the rest.
    pub fn name(code: (u8, u8)) -> Option<&'static str> {
        Some(match code {
            NO_ADDITIONAL_SENSE => "NO ADDITIONAL SENSE INFORMATION",
            (0x04, 0x00) => "LOGICAL UNIT NOT READY, CAUSE NOT REPORTABLE",
            (0x04, 0x01) => "LOGICAL UNIT IS IN PROCESS OF BECOMING READY",
            (0x04, 0x02) => "LOGICAL UNIT NOT READY, INITIALIZING COMMAND REQUIRED",
            (0x04, 0x03) => "LOGICAL UNIT NOT READY, MANUAL INTERVENTION REQUIRED",
            WRITE_ERROR => "WRITE ERROR",
            (0x0e, 0x03) => "INVALID FIELD IN INFORMATION UNIT",
            UNRECOVERED_READ_ERROR => "UNRECOVERED READ ERROR",
            PARAMETER_LIST_LENGTH_ERROR => "PARAMETER LIST LENGTH ERROR",
            MISCOMPARE_DURING_VERIFY => "MISCOMPARE DURING VERIFY OPERATION",
            INVALID_COMMAND_OPERATION_CODE => "INVALID COMMAND OPERATION CODE",
            LBA_OUT_OF_RANGE => "LOGICAL BLOCK ADDRESS OUT OF RANGE",
            INVALID_FIELD_IN_CDB => "INVALID FIELD IN CDB",
            LOGICAL_UNIT_NOT_SUPPORTED => "LOGICAL UNIT NOT SUPPORTED",
            INVALID_FIELD_IN_PARAMETER_LIST => "INVALID FIELD IN PARAMETER LIST",
            WRITE_PROTECTED => "WRITE PROTECTED",
            SPACE_ALLOCATION_FAILED_WRITE_PROTECT => "SPACE ALLOCATION FAILED WRITE PROTECT",
            (0x29, 0x00) => "POWER ON, RESET, OR BUS DEVICE RESET OCCURRED",
            (0x2a, 0x01) => "MODE PARAMETERS CHANGED",
            (0x2a, 0x09) => "CAPACITY DATA HAS CHANGED",
            SAVING_PARAMETERS_NOT_SUPPORTED => "SAVING PARAMETERS NOT SUPPORTED",
            (0x3f, 0x0e) => "REPORTED LUNS DATA HAS CHANGED",
            INTERNAL_TARGET_FAILURE => "INTERNAL TARGET FAILURE",
            ASYMMETRIC_ACCESS_STATE_TRANSITION => {
                "LOGICAL UNIT NOT ACCESSIBLE, ASYMMETRIC ACCESS STATE TRANSITION"
            }
            TARGET_PORT_IN_STANDBY_STATE => {
                "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN STANDBY STATE"
            }
            TARGET_PORT_IN_UNAVAILABLE_STATE => {
                "LOGICAL UNIT NOT ACCESSIBLE, TARGET PORT IN UNAVAILABLE STATE"
            }
            ASYMMETRIC_ACCESS_STATE_CHANGED => "ASYMMETRIC ACCESS STATE CHANGED",
            (0x47, 0x00) => "SCSI PARITY ERROR",
            (0x4b, 0x00) => "DATA PHASE ERROR",
            (0x4b, 0x05) => "DATA OFFSET ERROR",
            (0x55, 0x03) => "INSUFFICIENT RESOURCES",
            _ => return None,
        })
    }
}

/// Fixed-format sense data length: response code through the sense-key-specific bytes.
pub const FIXED_SENSE_LEN_BYTES: usize = 18;
/// Fixed format, current error (and, when reading sense back, 71h: deferred).
const RESPONSE_CODE_FIXED: u8 = 0x70;
const RESPONSE_CODE_FIXED_DEFERRED: u8 = 0x71;
/// Descriptor format, current error (and 73h: deferred).
const RESPONSE_CODE_DESCRIPTOR: u8 = 0x72;
const RESPONSE_CODE_DESCRIPTOR_DEFERRED: u8 = 0x73;
/// Byte 0 of sense data: the response code, without fixed format's VALID bit.
const RESPONSE_CODE_MASK: u8 = 0x7f;
/// Fixed format: bytes up to and including the ASC and ASCQ.
const FIXED_THROUGH_ASCQ_BYTES: usize = 14;
/// Fixed format byte 0: the INFORMATION field is valid.
const FIXED_VALID: u8 = 0x80;
/// Bytes after the ADDITIONAL SENSE LENGTH field in fixed format.
const FIXED_ADDITIONAL_LEN_BYTES: u8 = 10;
/// Descriptor format header length.
const DESCRIPTOR_HEADER_LEN_BYTES: usize = 8;
/// Information descriptor (type 00h): 12 bytes, additional length 0Ah.
const DESC_INFORMATION: u8 = 0x00;
const DESC_INFORMATION_ADDITIONAL_LEN: u8 = 0x0a;
/// Sense key specific descriptor (type 02h): 8 bytes, additional length 06h.
const DESC_SENSE_KEY_SPECIFIC: u8 = 0x02;
const DESC_SENSE_KEY_SPECIFIC_ADDITIONAL_LEN: u8 = 0x06;
/// Sense-key-specific byte 0: SKSV, C/D and BPV bits of a field pointer.
const SKSV: u8 = 0x80;
const FIELD_IN_CDB: u8 = 0x40;
const BIT_POINTER_VALID: u8 = 0x08;

/// SAM-5 status codes this crate returns (the transport adds its own, such as BUSY).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Good = 0x00,
    CheckCondition = 0x02,
    ConditionMet = 0x04,
    Busy = 0x08,
    ReservationConflict = 0x18,
    TaskSetFull = 0x28,
}

impl Status {
    /// The status byte on the wire.
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Where in the CDB or parameter list the offending field is (sense-key-specific field
/// pointer, SPC-4 4.5.2.4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldPointer {
    /// The field is in the CDB (else in the parameter list).
    pub in_cdb: bool,
    /// Byte index of the field.
    pub byte: u16,
    /// Bit index (0..=7) of the field's most significant bit, when known.
    pub bit: Option<u8>,
}

/// Sense data for one failed command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sense {
    pub key: u8,
    pub asc: u8,
    pub ascq: u8,
    /// INFORMATION field: the LBA or byte offset the error is about.
    pub information: Option<u64>,
    /// Sense-key-specific field pointer for ILLEGAL REQUEST.
    pub field: Option<FieldPointer>,
}

impl Sense {
    /// Sense with a key and an (ASC, ASCQ) pair and nothing else.
    pub fn new(key: u8, (asc, ascq): (u8, u8)) -> Self {
        Sense {
            key,
            asc,
            ascq,
            information: None,
            field: None,
        }
    }

    /// ILLEGAL REQUEST with the given code.
    pub fn illegal_request(code: (u8, u8)) -> Self {
        Sense::new(key::ILLEGAL_REQUEST, code)
    }

    /// ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE, pointing at the operation code.
    pub fn invalid_opcode() -> Self {
        Sense::illegal_request(asc::INVALID_COMMAND_OPERATION_CODE).at_field(true, 0, None)
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN CDB, pointing at `byte` (and `bit`).
    pub fn invalid_cdb_field(byte: u16, bit: Option<u8>) -> Self {
        Sense::illegal_request(asc::INVALID_FIELD_IN_CDB).at_field(true, byte, bit)
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST, pointing at `byte`.
    pub fn invalid_parameter_field(byte: u16) -> Self {
        Sense::illegal_request(asc::INVALID_FIELD_IN_PARAMETER_LIST).at_field(false, byte, None)
    }

    /// ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE.
    pub fn lba_out_of_range() -> Self {
        Sense::illegal_request(asc::LBA_OUT_OF_RANGE)
    }

    /// DATA PROTECT, WRITE PROTECTED.
    pub fn write_protected() -> Self {
        Sense::new(key::DATA_PROTECT, asc::WRITE_PROTECTED)
    }

    /// MISCOMPARE, MISCOMPARE DURING VERIFY OPERATION, with the byte offset into the data-out
    /// buffer of the first byte that differed.
    pub fn miscompare(offset_bytes: u64) -> Self {
        Sense {
            information: Some(offset_bytes),
            ..Sense::new(key::MISCOMPARE, asc::MISCOMPARE_DURING_VERIFY)
        }
    }

    /// The same sense with a field pointer.
    pub fn at_field(self, in_cdb: bool, byte: u16, bit: Option<u8>) -> Self {
        Sense {
            field: Some(FieldPointer {
                in_cdb,
                byte,
                bit: bit.map(|b| b & 7),
            }),
            ..self
        }
    }

    /// 18-byte fixed-format sense data, response code 70h. An INFORMATION value wider than the
    /// 4-byte field is left out (VALID=0); use [`Sense::encode_descriptor`] for those.
    pub fn encode_fixed(&self) -> Vec<u8> {
        let mut out = vec![0u8; FIXED_SENSE_LEN_BYTES];
        out[0] = RESPONSE_CODE_FIXED;
        out[2] = self.key & 0x0f;
        if let Some(info) = self.information.and_then(|i| u32::try_from(i).ok()) {
            out[0] |= FIXED_VALID;
            out[3..7].copy_from_slice(&info.to_be_bytes());
        }
        out[7] = FIXED_ADDITIONAL_LEN_BYTES;
        out[12] = self.asc;
        out[13] = self.ascq;
        if let Some(field) = self.field {
            out[15..18].copy_from_slice(&field.encode());
        }
        out
    }

    /// Descriptor-format sense data, response code 72h, with an information descriptor and a
    /// sense-key-specific descriptor when those are set.
    pub fn encode_descriptor(&self) -> Vec<u8> {
        let mut out = vec![0u8; DESCRIPTOR_HEADER_LEN_BYTES];
        out[0] = RESPONSE_CODE_DESCRIPTOR;
        out[1] = self.key & 0x0f;
        out[2] = self.asc;
        out[3] = self.ascq;
        if let Some(info) = self.information {
            out.extend([
                DESC_INFORMATION,
                DESC_INFORMATION_ADDITIONAL_LEN,
                FIXED_VALID,
                0,
            ]);
            out.extend(info.to_be_bytes());
        }
        if let Some(field) = self.field {
            out.extend([
                DESC_SENSE_KEY_SPECIFIC,
                DESC_SENSE_KEY_SPECIFIC_ADDITIONAL_LEN,
                0,
                0,
            ]);
            out.extend(field.encode());
            out.push(0);
        }
        // At most 8 + 12 + 8 bytes, so the additional length fits a byte.
        out[7] = u8::try_from(out.len() - DESCRIPTOR_HEADER_LEN_BYTES).expect("short sense");
        out
    }
}

impl Sense {
    /// Read sense data from a target, fixed or descriptor format: the key, the codes, the
    /// INFORMATION field and, for ILLEGAL REQUEST, the field pointer. `None` when the bytes are
    /// not sense data (too short, or an unknown response code).
    pub fn decode(bytes: &[u8]) -> Option<Sense> {
        let code = *bytes.first()? & RESPONSE_CODE_MASK;
        match code {
            RESPONSE_CODE_FIXED | RESPONSE_CODE_FIXED_DEFERRED => {
                // Short fixed sense (fewer additional bytes) still names its key.
                let key = bytes.get(2)? & 0x0f;
                let asc = bytes.get(12).copied().unwrap_or(0);
                let ascq = bytes.get(13).copied().unwrap_or(0);
                let information = (bytes[0] & FIXED_VALID != 0 && bytes.len() >= 7).then(|| {
                    u64::from(u32::from_be_bytes([bytes[3], bytes[4], bytes[5], bytes[6]]))
                });
                let field = if key == key::ILLEGAL_REQUEST {
                    bytes
                        .get(FIXED_THROUGH_ASCQ_BYTES + 1..FIXED_SENSE_LEN_BYTES)
                        .and_then(FieldPointer::decode)
                } else {
                    None
                };
                Some(Sense {
                    key,
                    asc,
                    ascq,
                    information,
                    field,
                })
            }
            RESPONSE_CODE_DESCRIPTOR | RESPONSE_CODE_DESCRIPTOR_DEFERRED => {
                let header = bytes.get(..DESCRIPTOR_HEADER_LEN_BYTES)?;
                let key = header[1] & 0x0f;
                let end = (DESCRIPTOR_HEADER_LEN_BYTES + usize::from(header[7])).min(bytes.len());
                let mut sense = Sense::new(key, (header[2], header[3]));
                let mut at = DESCRIPTOR_HEADER_LEN_BYTES;
                while at + 2 <= end {
                    let len = 2 + usize::from(bytes[at + 1]);
                    let Some(d) = bytes.get(at..(at + len).min(end)) else {
                        break;
                    };
                    match d[0] {
                        DESC_INFORMATION if d.len() >= 12 && d[2] & FIXED_VALID != 0 => {
                            let mut info = [0u8; 8];
                            info.copy_from_slice(&d[4..12]);
                            sense.information = Some(u64::from_be_bytes(info));
                        }
                        DESC_SENSE_KEY_SPECIFIC if key == key::ILLEGAL_REQUEST && d.len() >= 7 => {
                            sense.field = FieldPointer::decode(&d[4..7]);
                        }
                        _ => {}
                    }
                    at += len;
                }
                Some(sense)
            }
            _ => None,
        }
    }
}

impl std::fmt::Display for Sense {
    /// `ILLEGAL REQUEST, ASC/ASCQ 21h/00h (LOGICAL BLOCK ADDRESS OUT OF RANGE)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}, ASC/ASCQ {:02x}h/{:02x}h",
            key::name(self.key),
            self.asc,
            self.ascq
        )?;
        if let Some(name) = asc::name((self.asc, self.ascq)) {
            write!(f, " ({name})")?;
        }
        Ok(())
    }
}

impl FieldPointer {
    /// Three sense-key-specific bytes, if SKSV says they hold a field pointer.
    fn decode(bytes: &[u8]) -> Option<FieldPointer> {
        let (&first, rest) = bytes.split_first()?;
        if first & SKSV == 0 || rest.len() < 2 {
            return None;
        }
        Some(FieldPointer {
            in_cdb: first & FIELD_IN_CDB != 0,
            byte: u16::from_be_bytes([rest[0], rest[1]]),
            bit: (first & BIT_POINTER_VALID != 0).then_some(first & 7),
        })
    }

    /// The three sense-key-specific bytes, SKSV set.
    fn encode(self) -> [u8; 3] {
        let mut first = SKSV;
        if self.in_cdb {
            first |= FIELD_IN_CDB;
        }
        if let Some(bit) = self.bit {
            first |= BIT_POINTER_VALID | (bit & 7);
        }
        let [hi, lo] = self.byte.to_be_bytes();
        [first, hi, lo]
    }
}

/// The outcome of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: Status,
    /// Data-in, already cut to the CDB's allocation length.
    pub data_in: Vec<u8>,
    /// Present exactly when `status` is `CheckCondition`.
    pub sense: Option<Sense>,
}

impl Response {
    /// GOOD with data-in.
    pub fn good(data_in: Vec<u8>) -> Self {
        Response {
            status: Status::Good,
            data_in,
            sense: None,
        }
    }

    /// CHECK CONDITION with sense and no data.
    pub fn check(sense: Sense) -> Self {
        Response {
            status: Status::CheckCondition,
            data_in: Vec::new(),
            sense: Some(sense),
        }
    }

    /// RESERVATION CONFLICT: no sense, no data.
    pub fn reservation_conflict() -> Self {
        Response {
            status: Status::ReservationConflict,
            data_in: Vec::new(),
            sense: None,
        }
    }

    /// Fixed-format sense bytes for the SCSI Response PDU (empty without sense). We report
    /// D_SENSE=0 in the control mode page, so fixed format is what initiators expect.
    pub fn sense_bytes(&self) -> Vec<u8> {
        self.sense
            .as_ref()
            .map(Sense::encode_fixed)
            .unwrap_or_default()
    }

    /// GOOD with `data` cut to `allocation_len` bytes.
    pub(crate) fn good_cut(mut data: Vec<u8>, allocation_len: u32) -> Self {
        data.truncate(usize::try_from(allocation_len).unwrap_or(usize::MAX));
        Response::good(data)
    }
}

impl From<Sense> for Response {
    fn from(sense: Sense) -> Self {
        Response::check(sense)
    }
}

/// Which kind of storage call failed, to pick MEDIUM ERROR's code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IoKind {
    Read,
    Write,
    Other,
}

/// The one place a [`MediumError`] becomes sense data.
pub(crate) fn medium_error_sense(error: &MediumError, kind: IoKind) -> Sense {
    match (error, kind) {
        (MediumError::Io(_), IoKind::Read) => {
            Sense::new(key::MEDIUM_ERROR, asc::UNRECOVERED_READ_ERROR)
        }
        (MediumError::Io(_), IoKind::Write) => Sense::new(key::MEDIUM_ERROR, asc::WRITE_ERROR),
        (MediumError::Io(_), IoKind::Other) => {
            Sense::new(key::HARDWARE_ERROR, asc::INTERNAL_TARGET_FAILURE)
        }
        (MediumError::NoSpace, _) => Sense::new(
            key::DATA_PROTECT,
            asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
        ),
        (MediumError::ReadOnly, _) => Sense::write_protected(),
        (MediumError::Gone, _) => Sense::illegal_request(asc::LOGICAL_UNIT_NOT_SUPPORTED),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_format_layout() {
        let s = Sense::miscompare(0x1234);
        let b = s.encode_fixed();
        assert_eq!(b.len(), 18);
        assert_eq!(b[0], 0xf0, "response code 70h with VALID");
        assert_eq!(b[2], key::MISCOMPARE);
        assert_eq!(&b[3..7], &[0, 0, 0x12, 0x34]);
        assert_eq!(b[7], 10);
        assert_eq!((b[12], b[13]), (0x1d, 0x00));
        assert_eq!(&b[15..18], &[0, 0, 0]);
    }

    #[test]
    fn fixed_format_field_pointer_and_wide_information() {
        let mut s = Sense::invalid_cdb_field(2, Some(5));
        s.information = Some(u64::from(u32::MAX) + 1);
        let b = s.encode_fixed();
        assert_eq!(
            b[0], 0x70,
            "information too wide for fixed format: VALID clear"
        );
        assert_eq!(&b[3..7], &[0; 4]);
        assert_eq!(&b[15..18], &[0x80 | 0x40 | 0x08 | 5, 0, 2]);
        assert_eq!((b[12], b[13]), (0x24, 0x00));
    }

    #[test]
    fn descriptor_format_layout() {
        let b = Sense::lba_out_of_range().encode_descriptor();
        assert_eq!(b, vec![0x72, 5, 0x21, 0, 0, 0, 0, 0]);
        let mut s = Sense::invalid_parameter_field(9);
        s.information = Some(7);
        let b = s.encode_descriptor();
        assert_eq!(b.len(), 8 + 12 + 8);
        assert_eq!(b[7], 20);
        assert_eq!(&b[8..12], &[0, 0x0a, 0x80, 0]);
        assert_eq!(&b[12..20], &7u64.to_be_bytes());
        assert_eq!(&b[20..28], &[2, 6, 0, 0, 0x80, 0, 9, 0]);
    }

    #[test]
    fn medium_errors_map_to_their_sense() {
        let io = MediumError::Io("disk".into());
        let read = medium_error_sense(&io, IoKind::Read);
        assert_eq!((read.key, read.asc, read.ascq), (3, 0x11, 0));
        let write = medium_error_sense(&io, IoKind::Write);
        assert_eq!((write.key, write.asc), (3, 0x0c));
        let other = medium_error_sense(&io, IoKind::Other);
        assert_eq!((other.key, other.asc), (4, 0x44));
        let full = medium_error_sense(&MediumError::NoSpace, IoKind::Write);
        assert_eq!((full.key, full.asc, full.ascq), (7, 0x27, 7));
        let ro = medium_error_sense(&MediumError::ReadOnly, IoKind::Write);
        assert_eq!((ro.key, ro.asc, ro.ascq), (7, 0x27, 0));
        let gone = medium_error_sense(&MediumError::Gone, IoKind::Read);
        assert_eq!((gone.key, gone.asc), (5, 0x25));
    }

    #[test]
    fn sense_reads_back_from_both_formats() {
        let mut wide = Sense::invalid_parameter_field(9);
        wide.information = Some(u64::from(u32::MAX) + 7);
        for sense in [
            Sense::lba_out_of_range(),
            Sense::invalid_cdb_field(2, Some(5)),
            Sense::invalid_opcode(),
            Sense::miscompare(0x1234),
            Sense::write_protected(),
            wide.clone(),
        ] {
            assert_eq!(
                Sense::decode(&sense.encode_descriptor()),
                Some(sense.clone())
            );
            let mut fixed = sense.clone();
            if fixed.information.is_some_and(|i| u32::try_from(i).is_err()) {
                fixed.information = None; // fixed format cannot carry it
            }
            assert_eq!(Sense::decode(&sense.encode_fixed()), Some(fixed));
        }
        assert_eq!(Sense::decode(&[]), None);
        assert_eq!(Sense::decode(&[0x12, 0, 5]), None);
        assert_eq!(Sense::decode(&[0x72, 5]), None);
        let short = Sense::decode(&[0x70, 0, 6]).unwrap();
        assert_eq!((short.key, short.asc), (key::UNIT_ATTENTION, 0));
    }

    #[test]
    fn sense_displays_its_key_and_codes_by_name() {
        assert_eq!(
            Sense::lba_out_of_range().to_string(),
            "ILLEGAL REQUEST, ASC/ASCQ 21h/00h (LOGICAL BLOCK ADDRESS OUT OF RANGE)"
        );
        assert_eq!(
            Sense::new(0x0b, (0x99, 0x01)).to_string(),
            "ABORTED COMMAND, ASC/ASCQ 99h/01h"
        );
    }

    #[test]
    fn response_constructors_keep_the_status_sense_invariant() {
        let r = Response::good_cut(vec![1, 2, 3], 2);
        assert_eq!(
            (r.status, r.data_in.len(), r.sense.is_none()),
            (Status::Good, 2, true)
        );
        assert!(r.sense_bytes().is_empty());
        let r = Response::check(Sense::invalid_opcode());
        assert_eq!(r.status.code(), 0x02);
        assert_eq!(r.sense_bytes().len(), 18);
    }
}
