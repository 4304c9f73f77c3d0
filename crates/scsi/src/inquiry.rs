//! INQUIRY: the standard inquiry data and the vital product data pages (SPC-4 6.6, 7.8; SBC-3
//! 6.6): supported pages (00h), unit serial number (80h), device identification (83h), block
//! limits (B0h), block device characteristics (B1h) and logical block provisioning (B2h).
//!
//! What we claim here is what the rest of the crate implements: a disk (SPC-4, SBC-3) with
//! command queuing and implicit ALUA, thin provisioned, unmapped blocks reading as zeroes, the
//! limits of [`crate::limits`], WSNZ=1. Every builder returns the whole page; [`inquiry`] cuts
//! it to the allocation length.

use crate::limits::{
    max_transfer_blocks, max_unmap_blocks, max_write_same_blocks, optimal_transfer_blocks,
    MAX_COMPARE_AND_WRITE_BLOCKS, MAX_UNMAP_DESCRIPTORS,
};
use crate::lun::{Geometry, Identity};
use crate::sense::{Response, Sense};

/// Byte 0: peripheral qualifier 000b (connected), device type 00h (direct access block).
const PERIPHERAL_DISK: u8 = 0x00;
/// Byte 0 for a LUN with no logical unit behind it: qualifier 011b, device type 1Fh.
pub(crate) const PERIPHERAL_NO_LUN: u8 = 0x7f;
/// VERSION: SPC-4.
const VERSION_SPC4: u8 = 0x06;
/// Byte 3: HISUP (hierarchical LUN addressing) and RESPONSE DATA FORMAT 2.
const HISUP_AND_FORMAT_2: u8 = 0x12;
/// Byte 5: TPGS 01b, implicit asymmetric access only.
const TPGS_IMPLICIT: u8 = 0x10;
/// Byte 7: CMDQUE.
const CMDQUE: u8 = 0x02;
/// Standard data: 58 bytes up to the version descriptors, then four of them.
const VERSION_DESCRIPTORS_AT: usize = 58;
/// Version descriptors: SAM-5, iSCSI, SPC-4, SBC-3 (no version claimed).
const VERSION_DESCRIPTORS: [u16; 4] = [0x00a0, 0x0960, 0x0460, 0x04c0];
const STANDARD_LEN_BYTES: usize = VERSION_DESCRIPTORS_AT + 2 * VERSION_DESCRIPTORS.len();
/// Field widths of the standard data's identification strings.
const VENDOR_LEN_BYTES: usize = 8;
const PRODUCT_LEN_BYTES: usize = 16;
const REVISION_LEN_BYTES: usize = 4;
/// Longest unit serial number we report (the page then fits a 255-byte buffer).
const SERIAL_MAX_LEN_BYTES: usize = 251;

/// VPD page codes.
pub(crate) const PAGE_SUPPORTED: u8 = 0x00;
pub(crate) const PAGE_UNIT_SERIAL: u8 = 0x80;
pub(crate) const PAGE_DEVICE_ID: u8 = 0x83;
pub(crate) const PAGE_BLOCK_LIMITS: u8 = 0xb0;
pub(crate) const PAGE_BLOCK_CHARACTERISTICS: u8 = 0xb1;
pub(crate) const PAGE_PROVISIONING: u8 = 0xb2;
const SUPPORTED_PAGES: [u8; 6] = [
    PAGE_SUPPORTED,
    PAGE_UNIT_SERIAL,
    PAGE_DEVICE_ID,
    PAGE_BLOCK_LIMITS,
    PAGE_BLOCK_CHARACTERISTICS,
    PAGE_PROVISIONING,
];

/// Designation descriptor byte 0: protocol identifier iSCSI (5h) in bits 7..4, code set in
/// bits 3..0 (1h binary, 3h UTF-8). Byte 1: PIV, association (bits 5..4), designator type.
const CODE_SET_BINARY: u8 = 0x01;
const CODE_SET_UTF8: u8 = 0x03;
const PROTOCOL_ISCSI: u8 = 0x50;
const PIV: u8 = 0x80;
const ASSOCIATION_LU: u8 = 0x00;
const ASSOCIATION_TARGET_PORT: u8 = 0x10;
const ASSOCIATION_TARGET_DEVICE: u8 = 0x20;
const DESIGNATOR_NAA: u8 = 0x03;
const DESIGNATOR_RELATIVE_PORT: u8 = 0x04;
const DESIGNATOR_PORT_GROUP: u8 = 0x05;
const DESIGNATOR_SCSI_NAME: u8 = 0x08;
/// SCSI name string designators are null-terminated and padded to a multiple of 4 bytes, and
/// their length must fit the one-byte designator length.
const SCSI_NAME_ALIGN_BYTES: usize = 4;
const SCSI_NAME_MAX_LEN_BYTES: usize = 252;

/// Page length of the Block Limits and Block Device Characteristics pages (SBC-3).
const PAGE_B0_B1_LEN_BYTES: usize = 0x3c;
/// Block Limits byte 4: WSNZ, zero-length WRITE SAME refused.
const WSNZ: u8 = 0x01;
/// Block Limits byte 32: UGAVALID, the unmap granularity alignment field is valid.
const UGAVALID: u8 = 0x80;
/// Block Device Characteristics: medium rotation rate 0001h, non-rotating medium.
const NON_ROTATING: u16 = 0x0001;
/// Logical Block Provisioning byte 5: LBPU, LBPWS, LBPWS10, LBPRZ (SBC-4's 001b, SBC-3's
/// bit 2). ANC_SUP and DP are clear.
const LBPU: u8 = 0x80;
const LBPWS: u8 = 0x40;
const LBPWS10: u8 = 0x20;
const LBPRZ: u8 = 0x04;
/// Logical Block Provisioning byte 6: provisioning type 010b, thin.
const PROVISIONING_THIN: u8 = 0x02;
const PAGE_B2_LEN_BYTES: usize = 4;

/// Answer INQUIRY for a logical unit.
pub(crate) fn inquiry(
    identity: &Identity,
    target_port_group: u16,
    geometry: &Geometry,
    evpd: bool,
    page_code: u8,
    allocation_len: u32,
) -> Response {
    let data = if !evpd {
        standard(identity)
    } else {
        match page_code {
            PAGE_SUPPORTED => vpd_page(PAGE_SUPPORTED, SUPPORTED_PAGES.to_vec()),
            PAGE_UNIT_SERIAL => vpd_page(
                PAGE_UNIT_SERIAL,
                ascii_field(&identity.serial, None, SERIAL_MAX_LEN_BYTES),
            ),
            PAGE_DEVICE_ID => vpd_page(
                PAGE_DEVICE_ID,
                device_identification(identity, target_port_group),
            ),
            PAGE_BLOCK_LIMITS => vpd_page(PAGE_BLOCK_LIMITS, block_limits(geometry)),
            PAGE_BLOCK_CHARACTERISTICS => {
                let mut body = vec![0u8; PAGE_B0_B1_LEN_BYTES];
                body[0..2].copy_from_slice(&NON_ROTATING.to_be_bytes());
                vpd_page(PAGE_BLOCK_CHARACTERISTICS, body)
            }
            PAGE_PROVISIONING => {
                let mut body = vec![0u8; PAGE_B2_LEN_BYTES];
                body[1] = LBPU | LBPWS | LBPWS10 | LBPRZ;
                body[2] = PROVISIONING_THIN;
                vpd_page(PAGE_PROVISIONING, body)
            }
            _ => return Response::check(Sense::invalid_cdb_field(2, Some(7))),
        }
    };
    Response::good_cut(data, allocation_len)
}

/// Standard inquiry data for a LUN with no logical unit (qualifier 011b, type 1Fh).
pub(crate) fn standard_no_lun() -> Vec<u8> {
    let mut data = standard_header();
    data[0] = PERIPHERAL_NO_LUN;
    data
}

/// Supported VPD pages list for a LUN with no logical unit: only page 00h itself.
pub(crate) fn supported_pages_no_lun() -> Vec<u8> {
    let mut data = vpd_page(PAGE_SUPPORTED, vec![PAGE_SUPPORTED]);
    data[0] = PERIPHERAL_NO_LUN;
    data
}

fn standard_header() -> Vec<u8> {
    let mut data = vec![0u8; STANDARD_LEN_BYTES];
    data[0] = PERIPHERAL_DISK;
    data[2] = VERSION_SPC4;
    data[3] = HISUP_AND_FORMAT_2;
    // ADDITIONAL LENGTH: bytes after byte 4; the page is far below 255 bytes.
    data[4] = u8::try_from(STANDARD_LEN_BYTES - 5).expect("short standard inquiry data");
    data[5] = TPGS_IMPLICIT;
    data[7] = CMDQUE;
    data[8..36].fill(b' ');
    for (i, code) in VERSION_DESCRIPTORS.iter().enumerate() {
        let at = VERSION_DESCRIPTORS_AT + 2 * i;
        data[at..at + 2].copy_from_slice(&code.to_be_bytes());
    }
    data
}

fn standard(identity: &Identity) -> Vec<u8> {
    let mut data = standard_header();
    let fields = [
        (&identity.vendor, 8, VENDOR_LEN_BYTES),
        (&identity.product, 16, PRODUCT_LEN_BYTES),
        (&identity.revision, 32, REVISION_LEN_BYTES),
    ];
    for (text, at, width) in fields {
        data[at..at + width].copy_from_slice(&ascii_field(text, Some(width), width));
    }
    data
}

/// `text` as printable ASCII (anything else becomes a space), cut to `max` bytes, padded with
/// spaces to `pad_to` when given.
fn ascii_field(text: &str, pad_to: Option<usize>, max: usize) -> Vec<u8> {
    let mut out: Vec<u8> = text
        .bytes()
        .map(|b| if (0x20..0x7f).contains(&b) { b } else { b' ' })
        .take(max)
        .collect();
    if let Some(width) = pad_to {
        out.resize(width, b' ');
    }
    out
}

/// A VPD page: qualifier and device type, page code, 16-bit page length, body.
fn vpd_page(page_code: u8, body: Vec<u8>) -> Vec<u8> {
    let mut page = vec![PERIPHERAL_DISK, page_code];
    // Every body built here is below 1 KiB.
    let len = u16::try_from(body.len()).expect("vpd page under 64 KiB");
    page.extend(len.to_be_bytes());
    page.extend(body);
    page
}

fn designator(code_set_and_protocol: u8, piv_association_type: u8, value: &[u8]) -> Vec<u8> {
    // Callers pass at most SCSI_NAME_MAX_LEN_BYTES.
    let len = u8::try_from(value.len()).expect("designator under 256 bytes");
    let mut d = vec![code_set_and_protocol, piv_association_type, 0, len];
    d.extend_from_slice(value);
    d
}

/// The LU's NAA name, the session's relative target port, `target_port_group` (the group that
/// port is in, as REPORT TARGET PORT GROUPS reports it) and the target's SCSI name.
fn device_identification(identity: &Identity, target_port_group: u16) -> Vec<u8> {
    let mut body = designator(
        CODE_SET_BINARY,
        ASSOCIATION_LU | DESIGNATOR_NAA,
        &identity.naa_id,
    );
    let mut port = [0u8; 4];
    port[2..4].copy_from_slice(&identity.relative_target_port.to_be_bytes());
    body.extend(designator(
        PROTOCOL_ISCSI | CODE_SET_BINARY,
        PIV | ASSOCIATION_TARGET_PORT | DESIGNATOR_RELATIVE_PORT,
        &port,
    ));
    let mut group = [0u8; 4];
    group[2..4].copy_from_slice(&target_port_group.to_be_bytes());
    body.extend(designator(
        PROTOCOL_ISCSI | CODE_SET_BINARY,
        PIV | ASSOCIATION_TARGET_PORT | DESIGNATOR_PORT_GROUP,
        &group,
    ));
    body.extend(designator(
        PROTOCOL_ISCSI | CODE_SET_UTF8,
        PIV | ASSOCIATION_TARGET_DEVICE | DESIGNATOR_SCSI_NAME,
        &scsi_name_string(&identity.target_name),
    ));
    body
}

/// The target name, UTF-8, cut at a character boundary so that with at least one null it fits
/// [`SCSI_NAME_MAX_LEN_BYTES`], null-padded to a multiple of 4 bytes.
fn scsi_name_string(name: &str) -> Vec<u8> {
    let name = name.split('\0').next().unwrap_or_default();
    let mut end = name.len().min(SCSI_NAME_MAX_LEN_BYTES - 1);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = name.as_bytes()[..end].to_vec();
    let padded = (out.len() + 1).div_ceil(SCSI_NAME_ALIGN_BYTES) * SCSI_NAME_ALIGN_BYTES;
    out.resize(padded, 0);
    out
}

fn block_limits(geometry: &Geometry) -> Vec<u8> {
    let mut body = vec![0u8; PAGE_B0_B1_LEN_BYTES];
    // Offsets below are page offsets minus the 4-byte header.
    let granularity = geometry.blocks_per_physical();
    body[0] = WSNZ;
    body[1] = MAX_COMPARE_AND_WRITE_BLOCKS;
    let granularity_16 = u16::try_from(granularity).unwrap_or(u16::MAX);
    body[2..4].copy_from_slice(&granularity_16.to_be_bytes());
    body[4..8].copy_from_slice(&max_transfer_blocks(geometry).to_be_bytes());
    body[8..12].copy_from_slice(&optimal_transfer_blocks(geometry).to_be_bytes());
    body[16..20].copy_from_slice(&max_unmap_blocks(geometry).to_be_bytes());
    body[20..24].copy_from_slice(&MAX_UNMAP_DESCRIPTORS.to_be_bytes());
    body[24..28].copy_from_slice(&granularity.to_be_bytes());
    body[28] = UGAVALID;
    body[32..40].copy_from_slice(&u64::from(max_write_same_blocks(geometry)).to_be_bytes());
    body
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mem_lun::test_identity;

    fn geometry() -> Geometry {
        Geometry {
            block_size_bytes: 512,
            block_count: 1 << 20,
            physical_block_size_bytes: 4096,
            read_only: false,
        }
    }

    fn page(code: u8) -> Vec<u8> {
        let r = inquiry(&test_identity(), 7, &geometry(), true, code, 0xffff);
        assert!(r.sense.is_none(), "page {code:#x}: {:?}", r.sense);
        let len = usize::from(u16::from_be_bytes([r.data_in[2], r.data_in[3]]));
        assert_eq!(r.data_in.len(), 4 + len, "page length of {code:#x}");
        assert_eq!(r.data_in[1], code);
        r.data_in
    }

    #[test]
    fn standard_data_says_disk_spc4_alua_cmdque() {
        let r = inquiry(&test_identity(), 7, &geometry(), false, 0, 96);
        let d = r.data_in;
        assert_eq!(d.len(), STANDARD_LEN_BYTES);
        assert_eq!(usize::from(d[4]) + 5, d.len());
        assert_eq!((d[0], d[2], d[3] & 0x0f), (0, 6, 2));
        assert_ne!(d[3] & 0x10, 0, "HiSup");
        assert_eq!((d[5] >> 4) & 3, 1, "TPGS implicit");
        assert_ne!(d[7] & 0x02, 0, "CmdQue");
        assert_eq!(&d[8..16], b"WEFT    ");
        assert_eq!(&d[16..32], b"weft volume     ");
        assert_eq!(&d[32..36], b"0.1 ");
        assert_eq!(&d[58..60], &[0x00, 0xa0]);
    }

    #[test]
    fn allocation_length_cuts_and_page_code_without_evpd_is_refused() {
        let r = inquiry(&test_identity(), 7, &geometry(), false, 0, 5);
        assert_eq!(r.data_in.len(), 5);
        let r = inquiry(&test_identity(), 7, &geometry(), true, 0x42, 255);
        assert_eq!(r.sense.map(|s| s.asc), Some(0x24));
    }

    #[test]
    fn supported_pages_list_every_page_served() {
        let d = page(PAGE_SUPPORTED);
        assert_eq!(&d[4..], &SUPPORTED_PAGES);
        for code in SUPPORTED_PAGES {
            page(code);
        }
    }

    #[test]
    fn unit_serial_is_printable_ascii() {
        let mut id = test_identity();
        id.serial = "ab\u{e9}c".into();
        let r = inquiry(
            &id,
            id.target_port_group,
            &geometry(),
            true,
            PAGE_UNIT_SERIAL,
            255,
        );
        assert_eq!(&r.data_in[4..], b"ab  c");
    }

    #[test]
    fn device_identification_has_naa_port_group_and_name() {
        let d = page(PAGE_DEVICE_ID);
        let id = test_identity();
        let mut at = 4;
        let mut seen = Vec::new();
        while at < d.len() {
            let len = usize::from(d[at + 3]);
            seen.push((d[at], d[at + 1], d[at + 4..at + 4 + len].to_vec()));
            at += 4 + len;
        }
        assert_eq!(at, d.len());
        assert_eq!(seen[0], (0x01, 0x03, id.naa_id.to_vec()));
        assert_eq!(seen[1], (0x51, 0x94, vec![0, 0, 0, 1]));
        assert_eq!(seen[2], (0x51, 0x95, vec![0, 0, 0, 7]));
        let (code_set, kind, name) = &seen[3];
        assert_eq!((*code_set, *kind), (0x53, 0xa8));
        assert_eq!(name.len() % 4, 0);
        assert!(name.starts_with(id.target_name.as_bytes()));
        assert_eq!(name[id.target_name.len()], 0, "null terminated");
    }

    #[test]
    fn scsi_name_string_is_cut_at_a_char_boundary_and_terminated() {
        let long = "\u{e9}".repeat(200);
        let s = scsi_name_string(&long);
        assert!(s.len() <= SCSI_NAME_MAX_LEN_BYTES);
        assert_eq!(s.len() % 4, 0);
        assert_eq!(s.last(), Some(&0));
        assert_eq!(scsi_name_string("abc"), b"abc\0");
        assert_eq!(scsi_name_string("abcd"), b"abcd\0\0\0\0");
    }

    #[test]
    fn block_limits_report_the_crate_limits() {
        let d = page(PAGE_BLOCK_LIMITS);
        let be32 = |at: usize| u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]]);
        assert_eq!(d[4], WSNZ);
        assert_eq!(d[5], 1);
        assert_eq!(u16::from_be_bytes([d[6], d[7]]), 8);
        assert_eq!(be32(8), 8192);
        assert_eq!(be32(12), 2048);
        assert_eq!(be32(20), crate::limits::MAX_UNMAP_BLOCKS);
        assert_eq!(be32(24), 256);
        assert_eq!(be32(28), 8);
        assert_eq!(d[32] & 0x80, 0x80);
        assert_eq!(be32(40), crate::limits::MAX_WRITE_SAME_BLOCKS);
    }

    #[test]
    fn characteristics_and_provisioning_pages() {
        let d = page(PAGE_BLOCK_CHARACTERISTICS);
        assert_eq!(&d[4..6], &[0, 1]);
        let d = page(PAGE_PROVISIONING);
        assert_eq!(d[5], 0xe4, "LBPU LBPWS LBPWS10 LBPRZ");
        assert_eq!(d[6] & 0x07, 0x02, "thin");
    }
}
