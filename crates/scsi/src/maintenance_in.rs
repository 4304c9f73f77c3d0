//! MAINTENANCE IN service actions: REPORT SUPPORTED OPERATION CODES (SPC-4 6.35) from the
//! table of every command this target answers. REPORT TARGET PORT GROUPS' parameter data is
//! built in `alua`.
//!
//! [`SUPPORTED`] is the single list of supported commands with their CDB usage maps; a unit
//! test checks it against the decoder so the two cannot drift apart.

use crate::opcode;
use crate::sense::{Response, Sense};

/// A supported command: operation code, service action when it has one, and its CDB usage
/// data (byte 0 the opcode, the service action in its field, then one bit per CDB bit the
/// device server looks at). The usage data's length is the CDB length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Supported {
    pub opcode: u8,
    pub service_action: Option<u16>,
    pub usage: &'static [u8],
}

const fn row(opcode: u8, usage: &'static [u8]) -> Supported {
    Supported {
        opcode,
        service_action: None,
        usage,
    }
}

const fn row_sa(opcode: u8, service_action: u16, usage: &'static [u8]) -> Supported {
    Supported {
        opcode,
        service_action: Some(service_action),
        usage,
    }
}

/// Every command [`crate::execute`] (or the transport, for REPORT LUNS) answers. Control bytes
/// are 00h: NACA and LINK are refused.
pub(crate) const SUPPORTED: &[Supported] = &[
    row(opcode::TEST_UNIT_READY, &[0x00, 0, 0, 0, 0, 0]),
    row(opcode::REQUEST_SENSE, &[0x03, 0x01, 0, 0, 0xff, 0]),
    row(opcode::READ_6, &[0x08, 0x1f, 0xff, 0xff, 0xff, 0]),
    row(opcode::WRITE_6, &[0x0a, 0x1f, 0xff, 0xff, 0xff, 0]),
    row(opcode::INQUIRY, &[0x12, 0x01, 0xff, 0xff, 0xff, 0]),
    row(opcode::MODE_SELECT_6, &[0x15, 0x11, 0, 0, 0xff, 0]),
    row(opcode::RESERVE_6, &[0x16, 0x11, 0, 0, 0, 0]),
    row(opcode::RELEASE_6, &[0x17, 0x11, 0, 0, 0, 0]),
    row(opcode::MODE_SENSE_6, &[0x1a, 0x08, 0xff, 0xff, 0xff, 0]),
    row(opcode::START_STOP_UNIT, &[0x1b, 0x01, 0, 0x0f, 0xf7, 0]),
    row(
        opcode::PREVENT_ALLOW_MEDIUM_REMOVAL,
        &[0x1e, 0, 0, 0, 0x03, 0],
    ),
    row(
        opcode::READ_CAPACITY_10,
        &[0x25, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0x01, 0],
    ),
    row(
        opcode::READ_10,
        &[0x28, 0x18, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::WRITE_10,
        &[0x2a, 0x18, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::WRITE_AND_VERIFY_10,
        &[0x2e, 0x12, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::VERIFY_10,
        &[0x2f, 0x16, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::SYNCHRONIZE_CACHE_10,
        &[0x35, 0x02, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::WRITE_SAME_10,
        &[0x41, 0x08, 0xff, 0xff, 0xff, 0xff, 0, 0xff, 0xff, 0],
    ),
    row(opcode::UNMAP, &[0x42, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0]),
    row(
        opcode::MODE_SELECT_10,
        &[0x55, 0x11, 0, 0, 0, 0, 0, 0xff, 0xff, 0],
    ),
    row(
        opcode::MODE_SENSE_10,
        &[0x5a, 0x18, 0xff, 0xff, 0, 0, 0, 0xff, 0xff, 0],
    ),
    // PERSISTENT RESERVE IN: service action, allocation length.
    row_sa(
        opcode::PERSISTENT_RESERVE_IN,
        opcode::SA_READ_KEYS,
        &[0x5e, 0x00, 0, 0, 0, 0, 0, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_IN,
        opcode::SA_READ_RESERVATION,
        &[0x5e, 0x01, 0, 0, 0, 0, 0, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_IN,
        opcode::SA_REPORT_CAPABILITIES,
        &[0x5e, 0x02, 0, 0, 0, 0, 0, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_IN,
        opcode::SA_READ_FULL_STATUS,
        &[0x5e, 0x03, 0, 0, 0, 0, 0, 0xff, 0xff, 0],
    ),
    // PERSISTENT RESERVE OUT: service action, SCOPE and TYPE for the service actions that
    // use them, parameter list length.
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_REGISTER,
        &[0x5f, 0x00, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_RESERVE,
        &[0x5f, 0x01, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_RELEASE,
        &[0x5f, 0x02, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_CLEAR,
        &[0x5f, 0x03, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_PREEMPT,
        &[0x5f, 0x04, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_PREEMPT_AND_ABORT,
        &[0x5f, 0x05, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY,
        &[0x5f, 0x06, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row_sa(
        opcode::PERSISTENT_RESERVE_OUT,
        opcode::SA_REGISTER_AND_MOVE,
        &[0x5f, 0x07, 0xff, 0, 0, 0xff, 0xff, 0xff, 0xff, 0],
    ),
    row(opcode::READ_16, &LBA16_USAGE_READ),
    row(
        opcode::COMPARE_AND_WRITE,
        &[
            0x89, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0xff, 0, 0,
        ],
    ),
    row(opcode::WRITE_16, &LBA16_USAGE_WRITE),
    row(
        opcode::WRITE_AND_VERIFY_16,
        &[
            0x8e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0,
            0,
        ],
    ),
    row(
        opcode::VERIFY_16,
        &[
            0x8f, 0x16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0,
            0,
        ],
    ),
    row(
        opcode::SYNCHRONIZE_CACHE_16,
        &[
            0x91, 0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0,
            0,
        ],
    ),
    row(
        opcode::WRITE_SAME_16,
        &[
            0x93, 0x09, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0,
            0,
        ],
    ),
    row_sa(
        opcode::SERVICE_ACTION_IN_16,
        opcode::SA_READ_CAPACITY_16,
        &[
            0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
    row_sa(
        opcode::SERVICE_ACTION_IN_16,
        opcode::SA_GET_LBA_STATUS,
        &[
            0x9e, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0,
            0,
        ],
    ),
    row(
        opcode::REPORT_LUNS,
        &[0xa0, 0, 0xff, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0],
    ),
    row_sa(
        opcode::MAINTENANCE_IN,
        opcode::SA_REPORT_TARGET_PORT_GROUPS,
        &[0xa3, 0xea, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0],
    ),
    row_sa(
        opcode::MAINTENANCE_IN,
        opcode::SA_REPORT_SUPPORTED_OPERATION_CODES,
        &[
            0xa3, 0x0c, 0x87, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
    row(
        opcode::READ_12,
        &[
            0xa8, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
    row(
        opcode::WRITE_12,
        &[
            0xaa, 0x18, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
    row(
        opcode::WRITE_AND_VERIFY_12,
        &[
            0xae, 0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
    row(
        opcode::VERIFY_12,
        &[
            0xaf, 0x16, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0, 0,
        ],
    ),
];

const LBA16_USAGE_READ: [u8; 16] = lba16_usage(opcode::READ_16);
const LBA16_USAGE_WRITE: [u8; 16] = lba16_usage(opcode::WRITE_16);

/// READ(16)/WRITE(16): DPO, FUA, LBA, transfer length.
const fn lba16_usage(op: u8) -> [u8; 16] {
    let mut u = [0xffu8; 16];
    u[0] = op;
    u[1] = 0x18;
    u[14] = 0;
    u[15] = 0;
    u
}

/// REPORTING OPTIONS values.
const OPTIONS_ALL: u8 = 0;
const OPTIONS_OPCODE: u8 = 1;
const OPTIONS_OPCODE_AND_SA: u8 = 2;
const OPTIONS_OPCODE_MAYBE_SA: u8 = 3;
/// Command descriptor byte 5: CTDP (timeouts descriptor present), SERVACTV.
const DESCRIPTOR_CTDP: u8 = 0x02;
const DESCRIPTOR_SERVACTV: u8 = 0x01;
/// One-command parameter data byte 1: CTDP, and SUPPORT 011b / 001b.
const ONE_CTDP: u8 = 0x80;
const SUPPORT_YES: u8 = 0x03;
const SUPPORT_NO: u8 = 0x01;
/// Command timeouts descriptor: 12 bytes, DESCRIPTOR LENGTH 0Ah, timeouts 0 ("not
/// specified": we make no promise about command time).
const TIMEOUTS_DESCRIPTOR: [u8; 12] = [0, 0x0a, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];

/// REPORT SUPPORTED OPERATION CODES' CDB fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RsocRequest {
    pub timeouts: bool,
    pub options: u8,
    pub opcode: u8,
    pub service_action: u16,
    pub allocation_len: u32,
}

pub(crate) fn report_supported_operation_codes(req: RsocRequest) -> Response {
    let data = match req.options {
        OPTIONS_ALL => all_commands(req.timeouts),
        OPTIONS_OPCODE | OPTIONS_OPCODE_AND_SA | OPTIONS_OPCODE_MAYBE_SA => {
            let has_service_actions = SUPPORTED
                .iter()
                .any(|s| s.opcode == req.opcode && s.service_action.is_some());
            let known = SUPPORTED.iter().any(|s| s.opcode == req.opcode);
            let wanted_sa = match req.options {
                OPTIONS_OPCODE if has_service_actions => {
                    return Response::check(Sense::invalid_cdb_field(2, Some(2)));
                }
                OPTIONS_OPCODE_AND_SA if known && !has_service_actions => {
                    return Response::check(Sense::invalid_cdb_field(2, Some(2)));
                }
                OPTIONS_OPCODE => None,
                _ if has_service_actions => Some(req.service_action),
                _ => None,
            };
            let found = SUPPORTED
                .iter()
                .find(|s| s.opcode == req.opcode && s.service_action == wanted_sa);
            one_command(found, req.timeouts)
        }
        _ => return Response::check(Sense::invalid_cdb_field(2, Some(2))),
    };
    Response::good_cut(data, req.allocation_len)
}

fn all_commands(timeouts: bool) -> Vec<u8> {
    let mut data = vec![0u8; 4];
    for s in SUPPORTED {
        let mut flags = 0;
        if timeouts {
            flags |= DESCRIPTOR_CTDP;
        }
        if s.service_action.is_some() {
            flags |= DESCRIPTOR_SERVACTV;
        }
        data.push(s.opcode);
        data.push(0);
        data.extend(s.service_action.unwrap_or(0).to_be_bytes());
        data.push(0);
        data.push(flags);
        data.extend(cdb_len(s).to_be_bytes());
        if timeouts {
            data.extend(TIMEOUTS_DESCRIPTOR);
        }
    }
    set_be32_length(&mut data);
    data
}

fn one_command(found: Option<&Supported>, timeouts: bool) -> Vec<u8> {
    let mut data = vec![0u8; 4];
    if timeouts {
        data[1] = ONE_CTDP;
    }
    match found {
        Some(s) => {
            data[1] |= SUPPORT_YES;
            data[2..4].copy_from_slice(&cdb_len(s).to_be_bytes());
            data.extend_from_slice(s.usage);
        }
        None => data[1] |= SUPPORT_NO,
    }
    if timeouts {
        data.extend(TIMEOUTS_DESCRIPTOR);
    }
    data
}

fn cdb_len(s: &Supported) -> u16 {
    // Usage maps are CDB-sized: at most 16 bytes.
    u16::try_from(s.usage.len()).unwrap_or(u16::MAX)
}

/// Bytes 0..4 := the number of bytes after them.
fn set_be32_length(data: &mut [u8]) {
    let len = u32::try_from(data.len().saturating_sub(4)).unwrap_or(u32::MAX);
    data[0..4].copy_from_slice(&len.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdb::decode;

    fn rsoc(options: u8, opcode: u8, service_action: u16, timeouts: bool) -> Response {
        report_supported_operation_codes(RsocRequest {
            timeouts,
            options,
            opcode,
            service_action,
            allocation_len: 0xffff,
        })
    }

    /// A CDB for a table row: its opcode and service action, every other byte zero.
    fn cdb_for(s: &Supported) -> Vec<u8> {
        let mut cdb = vec![0u8; s.usage.len()];
        cdb[0] = s.opcode;
        if let Some(sa) = s.service_action {
            cdb[1] = u8::try_from(sa).expect("5-bit service action");
        }
        cdb
    }

    #[test]
    fn table_matches_the_decoder() {
        for s in SUPPORTED {
            assert_eq!(s.usage[0], s.opcode);
            assert_eq!(Some(s.usage.len()), opcode::cdb_len_bytes(s.opcode));
            if let Some(sa) = s.service_action {
                assert_eq!(u16::from(s.usage[1] & opcode::SERVICE_ACTION_MASK), sa);
            }
            // Decodes to something other than "unknown opcode" (it may still refuse a zero
            // field, as WRITE SAME refuses length 0).
            match decode(&cdb_for(s)) {
                Ok(_) => {}
                Err(sense) => assert_ne!(sense.asc, 0x20, "{:#x} unknown to decode", s.opcode),
            }
        }
        // And every opcode the decoder accepts is in the table.
        for op in 0..=u8::MAX {
            let mut cdb = [0u8; 16];
            cdb[0] = op;
            for sa in 0..32u8 {
                cdb[1] = sa;
                // Refused for the opcode (20h) or for the service action (a field pointer at
                // byte 1 bit 4, as PERSISTENT RESERVE IN/OUT answer): not a command.
                let known = decode(&cdb).map_or_else(
                    |s| s.asc != 0x20 && s.field.is_none_or(|f| (f.byte, f.bit) != (1, Some(4))),
                    |_| true,
                );
                if known {
                    assert!(
                        SUPPORTED.iter().any(|s| s.opcode == op
                            && s.service_action.is_none_or(|x| x == u16::from(sa))),
                        "{op:#x}/{sa:#x} decodes but is not listed"
                    );
                }
            }
        }
    }

    #[test]
    fn all_commands_list_lengths_and_service_actions() {
        let d = rsoc(0, 0, 0, false).data_in;
        let len = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        assert_eq!(len as usize + 4, d.len());
        assert_eq!(d.len(), 4 + 8 * SUPPORTED.len());
        let gls = d[4..]
            .chunks(8)
            .find(|c| c[0] == 0x9e && c[3] == 0x12)
            .expect("GET LBA STATUS listed");
        assert_eq!((gls[5], u16::from_be_bytes([gls[6], gls[7]])), (1, 16));
        let with_timeouts = rsoc(0, 0, 0, true).data_in;
        assert_eq!(with_timeouts.len(), 4 + 20 * SUPPORTED.len());
        assert_eq!(with_timeouts[4 + 5] & DESCRIPTOR_CTDP, DESCRIPTOR_CTDP);
    }

    #[test]
    fn one_command_reports_usage_or_not_supported() {
        let d = rsoc(1, opcode::READ_10, 0, false).data_in;
        assert_eq!(d[1] & 7, SUPPORT_YES);
        assert_eq!(u16::from_be_bytes([d[2], d[3]]), 10);
        assert_eq!(d[4], opcode::READ_10);
        let d = rsoc(1, 0x7e, 0, false).data_in;
        assert_eq!((d[1] & 7, d.len()), (SUPPORT_NO, 4));
        let d = rsoc(2, opcode::SERVICE_ACTION_IN_16, 0x10, true).data_in;
        assert_eq!(d[1], ONE_CTDP | SUPPORT_YES);
        assert_eq!(d.len(), 4 + 16 + 12);
        let d = rsoc(2, opcode::SERVICE_ACTION_IN_16, 0x11, false).data_in;
        assert_eq!(d[1] & 7, SUPPORT_NO);
        let d = rsoc(3, opcode::INQUIRY, 0x55, false).data_in;
        assert_eq!(
            d[1] & 7,
            SUPPORT_YES,
            "option 3 ignores the SA of a plain opcode"
        );
    }

    #[test]
    fn one_command_options_refuse_the_wrong_kind_of_opcode() {
        assert!(rsoc(1, opcode::MAINTENANCE_IN, 0x0c, false).sense.is_some());
        assert!(rsoc(2, opcode::READ_10, 0, false).sense.is_some());
        assert!(rsoc(4, opcode::READ_10, 0, false).sense.is_some());
    }
}
