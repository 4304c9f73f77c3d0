//! MODE SENSE(6/10) and MODE SELECT(6/10) (SPC-4 6.11-6.14, 7.5; SBC-3 6.4): the mode
//! parameter header and block descriptor, and the three pages we keep:
//!
//! - Caching (08h): WCE=1 at power-on, RCD=0. WCE is the only changeable bit; it lives in
//!   [`LunState`] and, when cleared, makes every write go to the LU with `fua`.
//! - Control (0Ah): TST=000b (one task set), QUEUE ALGORITHM MODIFIER=1 (unrestricted
//!   reordering), QErr=00b, D_SENSE=0 (fixed-format sense), GLTSD=1 (no log parameters saved),
//!   TAS=0. Nothing changeable.
//! - Informational Exceptions (1Ch): DEXCPT=1, MRIE=0: we report no failure predictions.
//!
//! Saved values are not supported (PC=11b gets SAVING PARAMETERS NOT SUPPORTED, SP=1 is
//! refused). MODE SELECT validates the whole parameter list before it changes anything.

use crate::lun::{Geometry, LunState};
use crate::sense::{asc, Response, Sense};

const PAGE_CACHING: u8 = 0x08;
const PAGE_CONTROL: u8 = 0x0a;
const PAGE_INFORMATIONAL_EXCEPTIONS: u8 = 0x1c;
/// Page code 3Fh: every page.
const PAGE_ALL: u8 = 0x3f;
/// Subpage code FFh: the page and all its subpages; we have no subpages.
const SUBPAGE_ALL: u8 = 0xff;
/// The pages MODE SENSE returns for page code 3Fh, in ascending order as SPC requires.
const PAGES: [u8; 3] = [PAGE_CACHING, PAGE_CONTROL, PAGE_INFORMATIONAL_EXCEPTIONS];

/// PAGE CONTROL field values.
const PC_CURRENT: u8 = 0;
const PC_CHANGEABLE: u8 = 1;
const PC_DEFAULT: u8 = 2;

/// Page byte 0: page code bits; SPF (subpage format) bit.
const PAGE_CODE_MASK: u8 = 0x3f;
const PAGE_SPF: u8 = 0x40;
/// Page lengths (the PAGE LENGTH field: bytes after byte 1).
const CACHING_PAGE_LEN: u8 = 0x12;
const CONTROL_PAGE_LEN: u8 = 0x0a;
const INFORMATIONAL_EXCEPTIONS_PAGE_LEN: u8 = 0x0a;
/// Caching page byte 2: write cache enable.
const CACHING_WCE: u8 = 0x04;
/// Control page byte 2: GLTSD; byte 3: QUEUE ALGORITHM MODIFIER 1h.
const CONTROL_GLTSD: u8 = 0x02;
const CONTROL_QAM_UNRESTRICTED: u8 = 0x10;
/// Informational exceptions page byte 2: DEXCPT.
const IE_DEXCPT: u8 = 0x08;

/// Device-specific parameter: WP (write protected) and DPOFUA (DPO and FUA supported).
const DSP_WP: u8 = 0x80;
const DSP_DPOFUA: u8 = 0x10;
/// MODE SENSE(10)/SELECT(10) header byte 4: LONGLBA.
const LONGLBA: u8 = 0x01;
const HEADER_6_LEN_BYTES: usize = 4;
const HEADER_10_LEN_BYTES: usize = 8;
const SHORT_BLOCK_DESCRIPTOR_LEN_BYTES: usize = 8;
const LONG_BLOCK_DESCRIPTOR_LEN_BYTES: usize = 16;

/// MODE SENSE's CDB fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SenseRequest {
    pub ten: bool,
    pub disable_block_descriptors: bool,
    pub long_lba: bool,
    pub page_control: u8,
    pub page_code: u8,
    pub subpage_code: u8,
    pub allocation_len: u32,
}

/// MODE SELECT's CDB fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SelectRequest {
    pub ten: bool,
    pub page_format: bool,
    pub save_pages: bool,
    pub parameter_len: u32,
}

/// Answer MODE SENSE(6) or (10).
pub(crate) fn mode_sense(state: &LunState, geometry: &Geometry, req: SenseRequest) -> Response {
    if req.page_control == 3 {
        return Response::check(
            Sense::illegal_request(asc::SAVING_PARAMETERS_NOT_SUPPORTED).at_field(true, 2, Some(7)),
        );
    }
    if req.subpage_code != 0 && req.subpage_code != SUBPAGE_ALL {
        return Response::check(Sense::invalid_cdb_field(3, Some(7)));
    }
    let codes = match req.page_code {
        PAGE_ALL => PAGES.to_vec(),
        code if PAGES.contains(&code) => vec![code],
        _ => return Response::check(Sense::invalid_cdb_field(2, Some(5))),
    };
    let mut pages = Vec::new();
    for code in codes {
        pages.extend(page(code, req.page_control, state.write_cache_enabled()));
    }

    let descriptor = if req.disable_block_descriptors {
        Vec::new()
    } else {
        block_descriptor(geometry, req.ten && req.long_lba, req.page_control)
    };
    let mut dsp = DSP_DPOFUA;
    if geometry.read_only {
        dsp |= DSP_WP;
    }
    // Header, descriptor and all pages are under 100 bytes, so the length fields fit.
    let mut data = if req.ten {
        let total = HEADER_10_LEN_BYTES + descriptor.len() + pages.len();
        let mut h = vec![0u8; HEADER_10_LEN_BYTES];
        h[0..2].copy_from_slice(&short_len(total - 2).to_be_bytes());
        h[3] = dsp;
        if descriptor.len() == LONG_BLOCK_DESCRIPTOR_LEN_BYTES {
            h[4] = LONGLBA;
        }
        h[6..8].copy_from_slice(&short_len(descriptor.len()).to_be_bytes());
        h
    } else {
        let total = HEADER_6_LEN_BYTES + descriptor.len() + pages.len();
        vec![byte_len(total - 1), 0, dsp, byte_len(descriptor.len())]
    };
    data.extend(descriptor);
    data.extend(pages);
    Response::good_cut(data, req.allocation_len)
}

/// Apply MODE SELECT(6) or (10). Only the caching page's WCE bit may change; every other
/// difference from the current values is refused before anything is applied.
pub(crate) fn mode_select(
    state: &LunState,
    geometry: &Geometry,
    req: SelectRequest,
    data_out: &[u8],
) -> Response {
    if req.parameter_len == 0 {
        return Response::good(Vec::new());
    }
    if req.save_pages {
        return Response::check(Sense::invalid_cdb_field(1, Some(0)));
    }
    if !req.page_format {
        // PF=0 means vendor-specific page formats; we have none.
        return Response::check(Sense::invalid_cdb_field(1, Some(4)));
    }
    let Some(list) = usize::try_from(req.parameter_len)
        .ok()
        .and_then(|len| data_out.get(..len))
    else {
        return Response::check(Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR));
    };
    match parse_select(state, geometry, req.ten, list) {
        Ok(wce) => {
            if let Some(wce) = wce {
                state.set_write_cache_enabled(wce);
            }
            Response::good(Vec::new())
        }
        Err(sense) => Response::check(sense),
    }
}

/// Validate a MODE SELECT parameter list; the new WCE value if it carries a caching page.
fn parse_select(
    state: &LunState,
    geometry: &Geometry,
    ten: bool,
    list: &[u8],
) -> Result<Option<bool>, Sense> {
    let length_error = || Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR);
    let header_len = if ten {
        HEADER_10_LEN_BYTES
    } else {
        HEADER_6_LEN_BYTES
    };
    let header = list.get(..header_len).ok_or_else(length_error)?;
    let (medium_type_at, descriptor_len, long_lba) = if ten {
        let len = usize::from(u16::from_be_bytes([header[6], header[7]]));
        (2, len, header[4] & LONGLBA != 0)
    } else {
        (1, usize::from(header[3]), false)
    };
    if header[medium_type_at] != 0 {
        return Err(Sense::invalid_parameter_field(short_len(medium_type_at)));
    }
    let descriptor_len_at = if ten { 6 } else { 3 };
    let expected = if long_lba {
        LONG_BLOCK_DESCRIPTOR_LEN_BYTES
    } else {
        SHORT_BLOCK_DESCRIPTOR_LEN_BYTES
    };
    if descriptor_len != 0 && descriptor_len != expected {
        return Err(Sense::invalid_parameter_field(descriptor_len_at));
    }
    let pages_at = header_len + descriptor_len;
    let descriptor = list.get(header_len..pages_at).ok_or_else(length_error)?;
    if !descriptor.is_empty() {
        check_block_descriptor(geometry, descriptor, header_len)?;
    }

    let mut wce = None;
    let mut at = pages_at;
    while at < list.len() {
        let head = list.get(at..at + 2).ok_or_else(length_error)?;
        let page_at = short_len(at);
        if head[0] & PAGE_SPF != 0 {
            return Err(Sense::invalid_parameter_field(page_at));
        }
        let code = head[0] & PAGE_CODE_MASK;
        let end = at + 2 + usize::from(head[1]);
        let page_bytes = list.get(at..end).ok_or_else(length_error)?;
        if !PAGES.contains(&code) {
            return Err(Sense::invalid_parameter_field(page_at));
        }
        let current = page(code, PC_CURRENT, state.write_cache_enabled());
        let changeable = page(code, PC_CHANGEABLE, false);
        if page_bytes.len() != current.len() {
            return Err(Sense::invalid_parameter_field(page_at + 1));
        }
        for i in 2..current.len() {
            if (page_bytes[i] ^ current[i]) & !changeable[i] != 0 {
                return Err(Sense::invalid_parameter_field(short_len(at + i)));
            }
        }
        if code == PAGE_CACHING {
            wce = Some(page_bytes[2] & CACHING_WCE != 0);
        }
        at = end;
    }
    Ok(wce)
}

/// A MODE SELECT block descriptor may restate the geometry but not change it. A block count
/// of zero means "no change".
fn check_block_descriptor(geometry: &Geometry, d: &[u8], at: usize) -> Result<(), Sense> {
    let (blocks, blocks_current, length_at) = if d.len() == LONG_BLOCK_DESCRIPTOR_LEN_BYTES {
        let mut b = [0u8; 8];
        b.copy_from_slice(&d[0..8]);
        (u64::from_be_bytes(b), geometry.block_count, 12)
    } else {
        let blocks = u32::from_be_bytes([d[0], d[1], d[2], d[3]]);
        (u64::from(blocks), u64::from(short_block_count(geometry)), 5)
    };
    if blocks != 0 && blocks != blocks_current {
        return Err(Sense::invalid_parameter_field(short_len(at)));
    }
    let length = u32::from_be_bytes([0, d[length_at], d[length_at + 1], d[length_at + 2]]);
    if length != geometry.block_size_bytes {
        return Err(Sense::invalid_parameter_field(short_len(at + length_at)));
    }
    Ok(())
}

/// One mode page's bytes for a page control value (current, changeable mask, or default).
fn page(code: u8, page_control: u8, wce_current: bool) -> Vec<u8> {
    let changeable = page_control == PC_CHANGEABLE;
    match code {
        PAGE_CACHING => {
            let mut p = vec![0u8; 2 + usize::from(CACHING_PAGE_LEN)];
            p[0] = PAGE_CACHING;
            p[1] = CACHING_PAGE_LEN;
            let wce = match page_control {
                PC_CURRENT => wce_current,
                PC_DEFAULT => true,
                // Changeable: WCE is the one bit set in the mask.
                _ => true,
            };
            if wce {
                p[2] = CACHING_WCE;
            }
            p
        }
        PAGE_CONTROL => {
            let mut p = vec![0u8; 2 + usize::from(CONTROL_PAGE_LEN)];
            p[0] = PAGE_CONTROL;
            p[1] = CONTROL_PAGE_LEN;
            if !changeable {
                p[2] = CONTROL_GLTSD;
                p[3] = CONTROL_QAM_UNRESTRICTED;
            }
            p
        }
        _ => {
            let mut p = vec![0u8; 2 + usize::from(INFORMATIONAL_EXCEPTIONS_PAGE_LEN)];
            p[0] = PAGE_INFORMATIONAL_EXCEPTIONS;
            p[1] = INFORMATIONAL_EXCEPTIONS_PAGE_LEN;
            if !changeable {
                p[2] = IE_DEXCPT;
            }
            p
        }
    }
}

/// The block descriptor: the LU's block count and size; all zeroes as a changeable mask.
fn block_descriptor(geometry: &Geometry, long: bool, page_control: u8) -> Vec<u8> {
    let mask = page_control == PC_CHANGEABLE;
    if long {
        let mut d = vec![0u8; LONG_BLOCK_DESCRIPTOR_LEN_BYTES];
        if !mask {
            d[0..8].copy_from_slice(&geometry.block_count.to_be_bytes());
            d[12..16].copy_from_slice(&geometry.block_size_bytes.to_be_bytes());
        }
        d
    } else {
        let mut d = vec![0u8; SHORT_BLOCK_DESCRIPTOR_LEN_BYTES];
        if !mask {
            d[0..4].copy_from_slice(&short_block_count(geometry).to_be_bytes());
            // LOGICAL BLOCK LENGTH is 24 bits: bytes 5..8.
            d[4..8].copy_from_slice(&(geometry.block_size_bytes & 0x00ff_ffff).to_be_bytes());
        }
        d
    }
}

/// Block count for a short descriptor: FFFFFFFFh when it does not fit (SBC-3 6.4.2).
fn short_block_count(geometry: &Geometry) -> u32 {
    u32::try_from(geometry.block_count).unwrap_or(u32::MAX)
}

fn short_len(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(u16::MAX)
}

fn byte_len(n: usize) -> u8 {
    u8::try_from(n).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn geometry(read_only: bool) -> Geometry {
        Geometry {
            block_size_bytes: 512,
            block_count: 1000,
            physical_block_size_bytes: 4096,
            read_only,
        }
    }

    fn sense_req(ten: bool, page_code: u8, page_control: u8, dbd: bool) -> SenseRequest {
        SenseRequest {
            ten,
            disable_block_descriptors: dbd,
            long_lba: false,
            page_control,
            page_code,
            subpage_code: 0,
            allocation_len: 0xffff,
        }
    }

    fn select_req(ten: bool, len: usize) -> SelectRequest {
        SelectRequest {
            ten,
            page_format: true,
            save_pages: false,
            parameter_len: u32::try_from(len).expect("small"),
        }
    }

    #[test]
    fn mode_sense_6_all_pages_with_descriptor() {
        let state = LunState::new();
        let r = mode_sense(
            &state,
            &geometry(false),
            sense_req(false, PAGE_ALL, 0, false),
        );
        let d = r.data_in;
        assert_eq!(usize::from(d[0]) + 1, d.len());
        assert_eq!(d[2], DSP_DPOFUA);
        assert_eq!(d[3], 8);
        assert_eq!(&d[4..8], &1000u32.to_be_bytes());
        assert_eq!(&d[9..12], &[0, 2, 0]);
        assert_eq!(&d[12..14], &[PAGE_CACHING, 0x12]);
        assert_eq!(d[14] & CACHING_WCE, CACHING_WCE);
        assert_eq!(&d[32..34], &[PAGE_CONTROL, 0x0a]);
        assert_eq!(d[34] & 0x04, 0, "D_SENSE=0");
        assert_eq!(&d[44..46], &[PAGE_INFORMATIONAL_EXCEPTIONS, 0x0a]);
        assert_eq!(d.len(), 56);
    }

    #[test]
    fn mode_sense_10_dbd_long_lba_and_write_protect() {
        let state = LunState::new();
        let r = mode_sense(
            &state,
            &geometry(true),
            sense_req(true, PAGE_CACHING, 0, true),
        );
        let d = r.data_in;
        assert_eq!(usize::from(u16::from_be_bytes([d[0], d[1]])) + 2, d.len());
        assert_eq!(d[3], DSP_WP | DSP_DPOFUA);
        assert_eq!(&d[6..8], &[0, 0]);
        assert_eq!(d[8], PAGE_CACHING);
        let mut req = sense_req(true, PAGE_CONTROL, 0, false);
        req.long_lba = true;
        let d = mode_sense(&state, &geometry(false), req).data_in;
        assert_eq!((d[4], d[7]), (LONGLBA, 16));
        assert_eq!(&d[8..16], &1000u64.to_be_bytes());
        assert_eq!(&d[20..24], &512u32.to_be_bytes());
    }

    #[test]
    fn changeable_mask_only_has_wce_and_saved_is_refused() {
        let state = LunState::new();
        let d = mode_sense(
            &state,
            &geometry(false),
            sense_req(false, PAGE_ALL, 1, true),
        )
        .data_in;
        let set: Vec<(usize, u8)> = d[4..]
            .iter()
            .enumerate()
            .filter(|&(i, &b)| b != 0 && !matches!(i, 0 | 1 | 20 | 21 | 32 | 33))
            .map(|(i, &b)| (i, b))
            .collect();
        assert_eq!(set, vec![(2, CACHING_WCE)]);
        let r = mode_sense(
            &state,
            &geometry(false),
            sense_req(false, PAGE_ALL, 3, true),
        );
        assert_eq!(r.sense.map(|s| (s.asc, s.ascq)), Some((0x39, 0)));
    }

    #[test]
    fn unknown_page_and_subpage_are_refused() {
        let state = LunState::new();
        let r = mode_sense(&state, &geometry(false), sense_req(false, 0x19, 0, true));
        assert_eq!(r.sense.map(|s| s.asc), Some(0x24));
        let mut req = sense_req(false, PAGE_CACHING, 0, true);
        req.subpage_code = 1;
        assert!(mode_sense(&state, &geometry(false), req).sense.is_some());
        req.subpage_code = SUBPAGE_ALL;
        assert!(mode_sense(&state, &geometry(false), req).sense.is_none());
    }

    #[test]
    fn select_clears_wce_and_sense_reports_it() {
        let state = LunState::new();
        let g = geometry(false);
        // What Linux sd sends: MODE SENSE's caching page, PS cleared, WCE cleared.
        let mut list = vec![0u8; 4];
        let mut caching = page(PAGE_CACHING, PC_CURRENT, true);
        caching[2] &= !CACHING_WCE;
        list.extend(&caching);
        let r = mode_select(&state, &g, select_req(false, list.len()), &list);
        assert_eq!(r.sense, None);
        assert!(!state.write_cache_enabled());
        let d = mode_sense(&state, &g, sense_req(false, PAGE_CACHING, 0, true)).data_in;
        assert_eq!(d[6] & CACHING_WCE, 0);
        let d = mode_sense(&state, &g, sense_req(false, PAGE_CACHING, 2, true)).data_in;
        assert_eq!(d[6] & CACHING_WCE, CACHING_WCE, "default is still WCE=1");
    }

    #[test]
    fn select_with_block_descriptor_in_ten_byte_form() {
        let state = LunState::new();
        let g = geometry(false);
        let mut list = vec![0u8; 8];
        list[7] = 8;
        list.extend(1000u32.to_be_bytes());
        list.extend([0, 0, 2, 0]);
        list.extend(page(PAGE_CONTROL, PC_CURRENT, true));
        let r = mode_select(&state, &g, select_req(true, list.len()), &list);
        assert_eq!(r.sense, None);
        // A different block size is refused, pointing at the length field.
        list[14] = 0x10;
        let r = mode_select(&state, &g, select_req(true, list.len()), &list);
        let s = r.sense.expect("refused");
        assert_eq!((s.asc, s.field.map(|f| f.byte)), (0x26, Some(13)));
    }

    #[test]
    fn select_refuses_unchangeable_bits_unknown_pages_and_short_lists() {
        let state = LunState::new();
        let g = geometry(false);
        let mut list = vec![0u8; 4];
        let mut caching = page(PAGE_CACHING, PC_CURRENT, true);
        caching[2] |= 0x01; // RCD
        list.extend(&caching);
        let r = mode_select(&state, &g, select_req(false, list.len()), &list);
        assert_eq!(
            r.sense.map(|s| (s.asc, s.field.map(|f| f.byte))),
            Some((0x26, Some(6)))
        );
        assert!(state.write_cache_enabled(), "nothing applied");

        let list = [0, 0, 0, 0, 0x19, 2, 0, 0];
        let r = mode_select(&state, &g, select_req(false, list.len()), &list);
        assert_eq!(r.sense.map(|s| s.asc), Some(0x26));

        let list = [0, 0, 0, 0, PAGE_CACHING, 0x12, 0];
        let r = mode_select(&state, &g, select_req(false, list.len()), &list);
        assert_eq!(r.sense.map(|s| s.asc), Some(0x1a));
        let r = mode_select(&state, &g, select_req(false, 20), &list);
        assert_eq!(
            r.sense.map(|s| s.asc),
            Some(0x1a),
            "data-out shorter than the list"
        );
    }

    #[test]
    fn select_refuses_save_and_pf_zero_but_accepts_empty() {
        let state = LunState::new();
        let g = geometry(false);
        let mut req = select_req(false, 4);
        req.save_pages = true;
        assert!(mode_select(&state, &g, req, &[0; 4]).sense.is_some());
        let mut req = select_req(false, 4);
        req.page_format = false;
        assert!(mode_select(&state, &g, req, &[0; 4]).sense.is_some());
        assert!(mode_select(&state, &g, select_req(false, 0), &[])
            .sense
            .is_none());
        assert!(mode_select(&state, &g, select_req(false, 4), &[0; 4])
            .sense
            .is_none());
    }
}
