//! What the transport answers itself because it knows the LUN map: REPORT LUNS
//! ([`report_luns`]), commands to a LUN with no logical unit ([`execute_no_lun`]), and the
//! 8-byte LUN encoding ([`encode_lun`], [`decode_lun`]; SAM-5 4.7): single-level peripheral
//! device addressing below 256, flat space addressing up to 16383.

use crate::cdb::Command;
use crate::decoded::DecodedCdb;
use crate::execute::request_sense;
use crate::inquiry::{standard_no_lun, supported_pages_no_lun, PAGE_SUPPORTED};
use crate::sense::{asc, Response, Sense};

/// REPORT LUNS parameter data header: LUN LIST LENGTH and 4 reserved bytes.
const REPORT_LUNS_HEADER_LEN_BYTES: usize = 8;
/// SELECT REPORT values we answer: 00h (all but well-known LUs), 01h (well-known LUs only:
/// we have none), 02h (all).
const SELECT_ALL_BUT_WELL_KNOWN: u8 = 0x00;
const SELECT_WELL_KNOWN: u8 = 0x01;
const SELECT_ALL: u8 = 0x02;
/// Address method in bits 7..6 of the first LUN byte.
const ADDRESS_PERIPHERAL: u8 = 0x00;
const ADDRESS_FLAT: u8 = 0x40;
const ADDRESS_METHOD_MASK: u8 = 0xc0;
/// Largest LUN of each address method.
const PERIPHERAL_LUN_MAX: u64 = 0xff;
/// Flat space addressing carries 14 bits.
pub const LUN_MAX: u64 = 0x3fff;

/// The 8-byte LUN for `lun`, or `None` above [`LUN_MAX`].
pub fn encode_lun(lun: u64) -> Option<[u8; 8]> {
    let mut out = [0u8; 8];
    let [.., high, low] = lun.to_be_bytes();
    if lun <= PERIPHERAL_LUN_MAX {
        out[0] = ADDRESS_PERIPHERAL;
        out[1] = low;
    } else if lun <= LUN_MAX {
        out[0] = ADDRESS_FLAT | high;
        out[1] = low;
    } else {
        return None;
    }
    Some(out)
}

/// The LUN an initiator addressed, from the 8-byte LUN field: peripheral device addressing with
/// bus 0 or flat space addressing, single level (bytes 2..8 zero). `None` for anything else.
pub fn decode_lun(bytes: [u8; 8]) -> Option<u64> {
    if bytes[2..].iter().any(|&b| b != 0) {
        return None;
    }
    let low = u64::from(bytes[1]);
    match bytes[0] & ADDRESS_METHOD_MASK {
        ADDRESS_PERIPHERAL if bytes[0] == 0 => Some(low),
        ADDRESS_FLAT => Some((u64::from(bytes[0] & !ADDRESS_METHOD_MASK) << 8) | low),
        _ => None,
    }
}

/// REPORT LUNS parameter data for the LUNs the initiator may see (8-byte header, 8 bytes per
/// LUN, in the order given), cut to the CDB's allocation length. LUNs above [`LUN_MAX`] cannot
/// be addressed and are left out. A CDB that is not a valid REPORT LUNS gets the sense that says why.
pub fn report_luns(command: &DecodedCdb, luns: &[u64]) -> Response {
    let (select_report, allocation_len) = match &command.command {
        Ok(Command::ReportLuns {
            select_report,
            allocation_len,
        }) => (*select_report, *allocation_len),
        Ok(_) => return Response::check(Sense::invalid_opcode()),
        Err(sense) => return Response::check(sense.clone()),
    };
    let listed: &[u64] = match select_report {
        SELECT_ALL_BUT_WELL_KNOWN | SELECT_ALL => luns,
        SELECT_WELL_KNOWN => &[],
        _ => return Response::check(Sense::invalid_cdb_field(2, Some(7))),
    };
    let mut data = vec![0u8; REPORT_LUNS_HEADER_LEN_BYTES];
    for lun in listed.iter().filter_map(|&lun| encode_lun(lun)) {
        data.extend(lun);
    }
    let list_len = u32::try_from(data.len() - REPORT_LUNS_HEADER_LEN_BYTES).unwrap_or(u32::MAX);
    data[0..4].copy_from_slice(&list_len.to_be_bytes());
    Response::good_cut(data, allocation_len)
}

/// Answer a command addressed to a LUN with no logical unit behind it (SPC-4 4.5.5, 6.6.2):
/// INQUIRY returns peripheral qualifier 011b / device type 1Fh with GOOD, REQUEST SENSE returns
/// LOGICAL UNIT NOT SUPPORTED as parameter data with GOOD, anything else is CHECK CONDITION,
/// ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED. (REPORT LUNS goes to [`report_luns`].)
pub fn execute_no_lun(command: &DecodedCdb) -> Response {
    let not_supported = Sense::illegal_request(asc::LOGICAL_UNIT_NOT_SUPPORTED);
    match command.command.clone() {
        Ok(Command::Inquiry {
            evpd: false,
            allocation_len,
            ..
        }) => Response::good_cut(standard_no_lun(), allocation_len),
        Ok(Command::Inquiry {
            evpd: true,
            page_code: PAGE_SUPPORTED,
            allocation_len,
        }) => Response::good_cut(supported_pages_no_lun(), allocation_len),
        Ok(Command::Inquiry { .. }) => Response::check(Sense::invalid_cdb_field(2, Some(7))),
        Err(sense) if command.opcode() == crate::opcode::INQUIRY => Response::check(sense),
        Ok(Command::RequestSense {
            descriptor,
            allocation_len,
        }) => request_sense(&not_supported, descriptor, allocation_len),
        _ => Response::check(not_supported),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::sense::Status;

    #[test]
    fn lun_encoding_round_trips_and_stops_at_16383() {
        assert_eq!(encode_lun(5), Some([0, 5, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(256), Some([0x41, 0, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(16383), Some([0x7f, 0xff, 0, 0, 0, 0, 0, 0]));
        assert_eq!(encode_lun(16384), None);
        for lun in [0, 1, 255, 256, 1000, 16383] {
            assert_eq!(encode_lun(lun).and_then(decode_lun), Some(lun));
        }
        // Flat addressing of a small LUN is accepted too, as Linux sends it for LUN >= 256.
        assert_eq!(decode_lun([0x40, 7, 0, 0, 0, 0, 0, 0]), Some(7));
        assert_eq!(decode_lun([0x01, 7, 0, 0, 0, 0, 0, 0]), None, "bus 1");
        assert_eq!(decode_lun([0, 7, 0, 1, 0, 0, 0, 0]), None, "second level");
        assert_eq!(
            decode_lun([0x80, 7, 0, 0, 0, 0, 0, 0]),
            None,
            "logical unit addressing"
        );
    }

    #[test]
    fn report_luns_lists_and_cuts() {
        let r = report_luns(
            &DecodedCdb::decode(&build::report_luns(1024)),
            &[0, 3, 300, 20_000],
        );
        assert_eq!(r.status, Status::Good);
        let d = r.data_in;
        assert_eq!(&d[0..4], &24u32.to_be_bytes());
        assert_eq!(d.len(), 8 + 24);
        assert_eq!(&d[8..10], &[0, 0]);
        assert_eq!(&d[16..18], &[0, 3]);
        assert_eq!(&d[24..26], &[0x41, 0x2c]);
        let r = report_luns(&DecodedCdb::decode(&build::report_luns(16)), &[0, 1, 2]);
        assert_eq!(r.data_in.len(), 16);
        assert_eq!(&r.data_in[0..4], &24u32.to_be_bytes());
    }

    #[test]
    fn report_luns_select_report_and_bad_cdbs() {
        let mut cdb = build::report_luns(64);
        cdb[2] = SELECT_WELL_KNOWN;
        assert_eq!(
            report_luns(&DecodedCdb::decode(&cdb), &[0]).data_in,
            vec![0; 8]
        );
        cdb[2] = 0x10;
        assert_eq!(
            report_luns(&DecodedCdb::decode(&cdb), &[0])
                .sense
                .map(|s| s.asc),
            Some(0x24)
        );
        let r = report_luns(&DecodedCdb::decode(&build::report_luns(15)), &[0]);
        assert_eq!(
            r.sense.map(|s| s.asc),
            Some(0x24),
            "allocation length below 16"
        );
        let r = report_luns(&DecodedCdb::decode(&build::inquiry(false, 0, 36)), &[0]);
        assert_eq!(r.sense.map(|s| s.asc), Some(0x20));
    }

    #[test]
    fn no_lun_inquiry_request_sense_and_the_rest() {
        let r = execute_no_lun(&DecodedCdb::decode(&build::inquiry(false, 0, 36)));
        assert_eq!(
            (r.status, r.data_in.len(), r.data_in[0]),
            (Status::Good, 36, 0x7f)
        );
        let r = execute_no_lun(&DecodedCdb::decode(&build::inquiry(true, 0, 36)));
        assert_eq!(r.data_in, vec![0x7f, 0, 0, 1, 0]);
        let r = execute_no_lun(&DecodedCdb::decode(&build::inquiry(true, 0x83, 255)));
        assert_eq!(r.sense.map(|s| s.asc), Some(0x24));
        let r = execute_no_lun(&DecodedCdb::decode(&[
            crate::opcode::REQUEST_SENSE,
            0,
            0,
            0,
            18,
            0,
        ]));
        assert_eq!(r.status, Status::Good);
        assert_eq!((r.data_in[2], r.data_in[12]), (5, 0x25));
        let r = execute_no_lun(&DecodedCdb::decode(&build::rw10(
            crate::opcode::READ_10,
            0,
            0,
            1,
        )));
        assert_eq!(r.status, Status::CheckCondition);
        assert_eq!(r.sense.map(|s| (s.key, s.asc)), Some((5, 0x25)));
        let r = execute_no_lun(&DecodedCdb::decode(&[0x7e; 10]));
        assert_eq!(r.sense.map(|s| s.asc), Some(0x25));
    }
}
