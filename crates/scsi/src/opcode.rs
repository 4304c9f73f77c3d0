//! Operation codes and service actions of the commands this crate knows (SPC-4, SBC-3), named
//! once so the decoder, the supported-operations table and the tests agree.

pub const TEST_UNIT_READY: u8 = 0x00;
pub const REQUEST_SENSE: u8 = 0x03;
pub const READ_6: u8 = 0x08;
pub const WRITE_6: u8 = 0x0a;
pub const INQUIRY: u8 = 0x12;
pub const MODE_SELECT_6: u8 = 0x15;
pub const RESERVE_6: u8 = 0x16;
pub const RELEASE_6: u8 = 0x17;
pub const MODE_SENSE_6: u8 = 0x1a;
pub const START_STOP_UNIT: u8 = 0x1b;
pub const PREVENT_ALLOW_MEDIUM_REMOVAL: u8 = 0x1e;
pub const READ_CAPACITY_10: u8 = 0x25;
pub const READ_10: u8 = 0x28;
pub const WRITE_10: u8 = 0x2a;
pub const WRITE_AND_VERIFY_10: u8 = 0x2e;
pub const VERIFY_10: u8 = 0x2f;
pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
pub const WRITE_SAME_10: u8 = 0x41;
pub const UNMAP: u8 = 0x42;
pub const MODE_SELECT_10: u8 = 0x55;
pub const MODE_SENSE_10: u8 = 0x5a;
pub const PERSISTENT_RESERVE_IN: u8 = 0x5e;
pub const PERSISTENT_RESERVE_OUT: u8 = 0x5f;
pub const READ_16: u8 = 0x88;
pub const COMPARE_AND_WRITE: u8 = 0x89;
pub const WRITE_16: u8 = 0x8a;
pub const WRITE_AND_VERIFY_16: u8 = 0x8e;
pub const VERIFY_16: u8 = 0x8f;
pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
pub const WRITE_SAME_16: u8 = 0x93;
pub const SERVICE_ACTION_IN_16: u8 = 0x9e;
pub const REPORT_LUNS: u8 = 0xa0;
pub const MAINTENANCE_IN: u8 = 0xa3;
pub const READ_12: u8 = 0xa8;
pub const WRITE_12: u8 = 0xaa;
pub const WRITE_AND_VERIFY_12: u8 = 0xae;
pub const VERIFY_12: u8 = 0xaf;

/// SERVICE ACTION IN(16) service actions.
pub const SA_READ_CAPACITY_16: u16 = 0x10;
pub const SA_GET_LBA_STATUS: u16 = 0x12;

/// MAINTENANCE IN service actions.
pub const SA_REPORT_TARGET_PORT_GROUPS: u16 = 0x0a;
pub const SA_REPORT_SUPPORTED_OPERATION_CODES: u16 = 0x0c;

/// PERSISTENT RESERVE IN service actions.
pub const SA_READ_KEYS: u16 = 0x00;
pub const SA_READ_RESERVATION: u16 = 0x01;
pub const SA_REPORT_CAPABILITIES: u16 = 0x02;
pub const SA_READ_FULL_STATUS: u16 = 0x03;

/// PERSISTENT RESERVE OUT service actions (08h, REPLACE LOST RESERVATION, is not supported).
pub const SA_REGISTER: u16 = 0x00;
pub const SA_RESERVE: u16 = 0x01;
pub const SA_RELEASE: u16 = 0x02;
pub const SA_CLEAR: u16 = 0x03;
pub const SA_PREEMPT: u16 = 0x04;
pub const SA_PREEMPT_AND_ABORT: u16 = 0x05;
pub const SA_REGISTER_AND_IGNORE_EXISTING_KEY: u16 = 0x06;
pub const SA_REGISTER_AND_MOVE: u16 = 0x07;

/// The service action field of SERVICE ACTION IN(16), MAINTENANCE IN and PERSISTENT RESERVE
/// IN/OUT: byte 1, bits 4..0.
pub const SERVICE_ACTION_MASK: u8 = 0x1f;

/// CDB length implied by the operation code's group (SPC-4 4.2.5.1), or `None` for groups
/// with no fixed length (3: reserved and variable length; 6 and 7: vendor specific).
pub fn cdb_len_bytes(opcode: u8) -> Option<usize> {
    match opcode >> 5 {
        0 => Some(6),
        1 | 2 => Some(10),
        4 => Some(16),
        5 => Some(12),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lengths() {
        assert_eq!(cdb_len_bytes(INQUIRY), Some(6));
        assert_eq!(cdb_len_bytes(READ_10), Some(10));
        assert_eq!(cdb_len_bytes(MODE_SENSE_10), Some(10));
        assert_eq!(cdb_len_bytes(READ_16), Some(16));
        assert_eq!(cdb_len_bytes(REPORT_LUNS), Some(12));
        assert_eq!(cdb_len_bytes(0x7f), None);
        assert_eq!(cdb_len_bytes(0xc0), None);
    }
}
