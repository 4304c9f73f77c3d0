//! Thin-provisioning commands (SBC-3 4.7, 5.20, 5.28, 5.41-5.43): UNMAP, WRITE SAME(10/16)
//! and GET LBA STATUS.
//!
//! UNMAP validates every block descriptor (count, range, per-descriptor limit) before it
//! deallocates anything. WRITE SAME with an all-zero block (or NDOB) becomes one
//! `write_zeroes` call, passing the UNMAP bit through so the LU may deallocate; a non-zero
//! pattern is replicated into a bounded buffer and written piece by piece. GET LBA STATUS
//! turns the LU's allocation extents into LBA status descriptors, merging runs of the same
//! state and never describing past the end of the LU.

use crate::block_io::{byte_range, data_out_prefix, write_through};
use crate::cdb::Blocks;
use crate::limits::{
    max_unmap_blocks, LBA_STATUS_DESCRIPTORS_MAX, LBA_STATUS_QUERY_MAX_BYTES,
    MAX_UNMAP_DESCRIPTORS, WRITE_SAME_CHUNK_BYTES,
};
use crate::lun::{Geometry, LogicalUnit, LunState};
use crate::sense::{asc, medium_error_sense, IoKind, Response, Sense};

/// UNMAP parameter list: 8-byte header, then 16-byte block descriptors.
const UNMAP_HEADER_LEN_BYTES: usize = 8;
const UNMAP_DESCRIPTOR_LEN_BYTES: usize = 16;
/// GET LBA STATUS parameter data: 8-byte header, then 16-byte LBA status descriptors.
const LBA_STATUS_HEADER_LEN_BYTES: usize = 8;
/// PROVISIONING STATUS values.
const PROVISIONING_MAPPED: u8 = 0x00;
const PROVISIONING_DEALLOCATED: u8 = 0x01;

/// UNMAP (SBC-3 5.28).
pub(crate) fn unmap(
    state: &LunState,
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    parameter_len: u32,
    data_out: &[u8],
) -> Result<Response, Sense> {
    if geometry.read_only {
        return Err(Sense::write_protected());
    }
    if parameter_len == 0 {
        return Ok(Response::good(Vec::new()));
    }
    let length_error = || Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR);
    let list = usize::try_from(parameter_len)
        .ok()
        .and_then(|len| data_out.get(..len))
        .ok_or_else(length_error)?;
    if list.len() < UNMAP_HEADER_LEN_BYTES {
        return Err(length_error());
    }
    // Descriptors are what the header says, cut to what the list holds; a trailing partial
    // descriptor is ignored (SBC-3 5.28.2).
    let declared = usize::from(u16::from_be_bytes([list[2], list[3]]));
    let available = declared.min(list.len() - UNMAP_HEADER_LEN_BYTES);
    let count = available / UNMAP_DESCRIPTOR_LEN_BYTES;
    if count > MAX_UNMAP_DESCRIPTORS as usize {
        return Err(Sense::invalid_parameter_field(2));
    }
    let max_blocks = max_unmap_blocks(geometry);
    let mut ranges = Vec::with_capacity(count);
    for (i, d) in list[UNMAP_HEADER_LEN_BYTES..]
        .chunks_exact(UNMAP_DESCRIPTOR_LEN_BYTES)
        .take(count)
        .enumerate()
    {
        let mut lba = [0u8; 8];
        lba.copy_from_slice(&d[0..8]);
        let lba = u64::from_be_bytes(lba);
        let blocks = u32::from_be_bytes([d[8], d[9], d[10], d[11]]);
        if blocks > max_blocks {
            let at = UNMAP_HEADER_LEN_BYTES + i * UNMAP_DESCRIPTOR_LEN_BYTES + 8;
            return Err(Sense::invalid_parameter_field(
                u16::try_from(at).unwrap_or(u16::MAX),
            ));
        }
        let (offset, len) = byte_range(geometry, lba, u64::from(blocks))?;
        if len > 0 {
            ranges.push((offset, len));
        }
    }
    let _io = state.shared_io();
    for (offset, len) in ranges {
        lu.unmap(offset, len)
            .map_err(|e| medium_error_sense(&e, IoKind::Other))?;
    }
    Ok(Response::good(Vec::new()))
}

/// WRITE SAME(10) and (16) (SBC-3 5.41, 5.42). Zero-length was refused at decode (WSNZ=1).
pub(crate) fn write_same(
    state: &LunState,
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    range: Blocks,
    unmap: bool,
    no_data_out: bool,
    data_out: &[u8],
) -> Result<Response, Sense> {
    if geometry.read_only {
        return Err(Sense::write_protected());
    }
    let (offset, len) = byte_range(geometry, range.lba, u64::from(range.count))?;
    let block = u64::from(geometry.block_size_bytes);
    let pattern: &[u8] = if no_data_out {
        &[]
    } else {
        data_out_prefix(data_out, block, None)?
    };
    let _io = state.shared_io();
    if pattern.iter().all(|&b| b == 0) {
        lu.write_zeroes(offset, len, unmap)
            .map_err(|e| medium_error_sense(&e, IoKind::Write))?;
        return Ok(Response::good(Vec::new()));
    }
    let chunk_blocks = (u64::from(WRITE_SAME_CHUNK_BYTES) / block).clamp(1, u64::from(range.count));
    // At most WRITE_SAME_CHUNK_BYTES (or one block), so it fits usize.
    let chunk = pattern.repeat(usize::try_from(chunk_blocks).unwrap_or(1));
    let fua = write_through(state, false);
    let mut done = 0u64;
    while done < len {
        let n = (len - done).min(chunk.len() as u64);
        let piece = &chunk[..usize::try_from(n).unwrap_or(chunk.len())];
        lu.write(offset + done, piece, fua)
            .map_err(|e| medium_error_sense(&e, IoKind::Write))?;
        done += n;
    }
    Ok(Response::good(Vec::new()))
}

/// GET LBA STATUS (SBC-3 5.20): descriptors from `lba` on, from the LU's allocation.
pub(crate) fn get_lba_status(
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    lba: u64,
    allocation_len: u32,
) -> Result<Response, Sense> {
    if lba >= geometry.block_count {
        return Err(Sense::lba_out_of_range());
    }
    let block = u64::from(geometry.block_size_bytes);
    let remaining_blocks = geometry.block_count - lba;
    let query_blocks = remaining_blocks
        .min(LBA_STATUS_QUERY_MAX_BYTES / block)
        .max(1);
    let (offset, query_len) = byte_range(geometry, lba, query_blocks)?;
    let extents = lu
        .allocation(offset, query_len)
        .map_err(|e| medium_error_sense(&e, IoKind::Other))?;

    // Merge the extents into whole-block runs of one state, clipped to the query.
    let mut runs: Vec<(u64, u64, bool)> = Vec::new();
    let mut next = lba;
    let end = lba + query_blocks;
    for (length_bytes, mapped) in extents {
        let blocks = (length_bytes / block).min(end - next);
        if blocks == 0 {
            break;
        }
        match runs.last_mut() {
            Some(last) if last.2 == mapped => last.1 += blocks,
            _ => runs.push((next, blocks, mapped)),
        }
        next += blocks;
        if next == end {
            break;
        }
    }
    if runs.is_empty() {
        // The LU described nothing usable. Report the first block mapped: claiming it
        // deallocated could let an initiator skip data.
        runs.push((lba, 1, true));
    }

    let mut data = vec![0u8; LBA_STATUS_HEADER_LEN_BYTES];
    let mut descriptors = 0;
    'runs: for (start, blocks, mapped) in runs {
        let mut at = start;
        let mut left = blocks;
        while left > 0 {
            if descriptors == LBA_STATUS_DESCRIPTORS_MAX {
                break 'runs;
            }
            let n = u32::try_from(left).unwrap_or(u32::MAX);
            data.extend(at.to_be_bytes());
            data.extend(n.to_be_bytes());
            data.push(if mapped {
                PROVISIONING_MAPPED
            } else {
                PROVISIONING_DEALLOCATED
            });
            data.extend([0u8; 3]);
            at += u64::from(n);
            left -= u64::from(n);
            descriptors += 1;
        }
    }
    // PARAMETER DATA LENGTH: bytes after the field itself; at most 4 + 16 * 1024.
    let len = u32::try_from(data.len() - 4).unwrap_or(u32::MAX);
    data[0..4].copy_from_slice(&len.to_be_bytes());
    Ok(Response::good_cut(data, allocation_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::execute::execute;
    use crate::mem_lun::{Call, MemLun};
    use crate::nexus::Nexus;
    use crate::opcode;
    use crate::sense::{key, Status};

    fn run(lu: &MemLun, cdb: &[u8], data_out: &[u8]) -> Response {
        execute(&LunState::new(), lu, &Nexus::new("test", 1), cdb, data_out)
    }

    fn asc_of(r: &Response) -> Option<(u8, u8, u8)> {
        r.sense.as_ref().map(|s| (s.key, s.asc, s.ascq))
    }

    fn lba_status(lu: &MemLun, lba: u64) -> Vec<(u64, u32, u8)> {
        let r = run(lu, &build::service_action_in(0x12, lba, 0xffff), &[]);
        assert_eq!(r.status, Status::Good, "{r:?}");
        let d = r.data_in;
        assert_eq!(
            u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize + 4,
            d.len()
        );
        d[8..]
            .chunks(16)
            .map(|c| {
                let mut lba = [0u8; 8];
                lba.copy_from_slice(&c[0..8]);
                (
                    u64::from_be_bytes(lba),
                    u32::from_be_bytes([c[8], c[9], c[10], c[11]]),
                    c[12],
                )
            })
            .collect()
    }

    #[test]
    fn unmap_deallocates_every_descriptor_and_reads_zero() {
        let lu = MemLun::with_blocks(512, 64);
        assert_eq!(
            run(
                &lu,
                &build::rw10(opcode::WRITE_10, 0, 0, 64),
                &[0xaa; 64 * 512]
            )
            .status,
            Status::Good
        );
        let list = build::unmap(&[(2, 3), (40, 8), (63, 0)]);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list);
        assert_eq!(r.status, Status::Good, "{r:?}");
        assert_eq!(lu.bytes(2 * 512, 3 * 512), vec![0; 3 * 512]);
        assert_eq!(lu.bytes(5 * 512, 1), vec![0xaa]);
        assert_eq!(
            lba_status(&lu, 0),
            vec![(0, 2, 0), (2, 3, 1), (5, 35, 0), (40, 8, 1), (48, 16, 0)]
        );
        assert_eq!(lba_status(&lu, 41), vec![(41, 7, 1), (48, 16, 0)]);
    }

    #[test]
    fn unmap_checks_lengths_ranges_and_limits_before_unmapping() {
        let lu = MemLun::with_blocks(512, 64);
        // Header only, and no parameter list at all: fine.
        let empty = build::unmap(&[]);
        assert_eq!(run(&lu, &build::unmap_cdb(8), &empty).status, Status::Good);
        assert_eq!(run(&lu, &build::unmap_cdb(0), &[]).status, Status::Good);
        // A list shorter than its header.
        let r = run(&lu, &build::unmap_cdb(4), &[0; 4]);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x1a, 0)));
        // Data-out shorter than the parameter list length.
        let list = build::unmap(&[(0, 1)]);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list[..10]);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x1a, 0)));
        // One bad descriptor stops all of them.
        let list = build::unmap(&[(0, 1), (60, 5)]);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x21, 0)));
        assert!(lu.take_calls().is_empty());
        // More descriptors than the Block Limits page allows.
        let many: Vec<(u64, u32)> = (0..257).map(|i| (i % 64, 0)).collect();
        let list = build::unmap(&many);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x26, 0)));
        // A header claiming more descriptors than sent: only whole ones sent count.
        let mut list = build::unmap(&[(1, 1)]);
        list[3] = 0xf0;
        list.extend([0u8; 5]);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list);
        assert_eq!(r.status, Status::Good);
        assert_eq!(
            lu.take_calls(),
            vec![Call::Unmap {
                offset_bytes: 512,
                len_bytes: 512
            }]
        );
        // ANCHOR is refused.
        let mut cdb = build::unmap_cdb(list.len());
        cdb[1] = 1;
        assert_eq!(
            asc_of(&run(&lu, &cdb, &list)),
            Some((key::ILLEGAL_REQUEST, 0x24, 0))
        );
    }

    #[test]
    fn unmap_limit_per_descriptor() {
        let lu = MemLun::with_blocks(4096, 64);
        let too_many = max_unmap_blocks(&lu.geometry()) + 1;
        let list = build::unmap(&[(0, too_many)]);
        let r = run(&lu, &build::unmap_cdb(list.len()), &list);
        let s = r.sense.expect("refused");
        assert_eq!((s.asc, s.field.map(|f| f.byte)), (0x26, Some(16)));
    }

    #[test]
    fn write_same_zero_block_becomes_write_zeroes_with_the_unmap_bit() {
        let lu = MemLun::with_blocks(512, 64);
        let ws16_unmap = build::rw16(opcode::WRITE_SAME_16, 0x08, 8, 16);
        assert_eq!(run(&lu, &ws16_unmap, &[0; 512]).status, Status::Good);
        let ws10 = build::rw10(opcode::WRITE_SAME_10, 0, 30, 2);
        assert_eq!(run(&lu, &ws10, &[0; 512]).status, Status::Good);
        let ndob = build::rw16(opcode::WRITE_SAME_16, 0x09, 0, 1);
        assert_eq!(run(&lu, &ndob, &[]).status, Status::Good);
        assert_eq!(
            lu.take_calls(),
            vec![
                Call::WriteZeroes {
                    offset_bytes: 8 * 512,
                    len_bytes: 16 * 512,
                    unmap: true
                },
                Call::WriteZeroes {
                    offset_bytes: 30 * 512,
                    len_bytes: 1024,
                    unmap: false
                },
                Call::WriteZeroes {
                    offset_bytes: 0,
                    len_bytes: 512,
                    unmap: true
                },
            ]
        );
    }

    #[test]
    fn write_same_pattern_is_replicated() {
        let lu = MemLun::with_blocks(4096, 600);
        let block: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
        // 300 blocks of 4 KiB: more than one 1 MiB chunk.
        let cdb = build::rw16(opcode::WRITE_SAME_16, 0x08, 10, 300);
        assert_eq!(run(&lu, &cdb, &block).status, Status::Good);
        for b in [10u64, 265, 309] {
            assert_eq!(lu.bytes(b * 4096, 4096), block, "block {b}");
        }
        assert_eq!(lu.bytes(9 * 4096, 4096), vec![0; 4096]);
        assert_eq!(lu.bytes(310 * 4096, 4096), vec![0; 4096]);
        let writes = lu
            .take_calls()
            .into_iter()
            .filter(|c| matches!(c, Call::Write { .. }))
            .count();
        assert_eq!(writes, 2);
    }

    #[test]
    fn write_same_refusals() {
        let lu = MemLun::with_blocks(512, 64);
        let r = run(&lu, &build::rw16(opcode::WRITE_SAME_16, 0, 0, 0), &[1; 512]);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x24, 0)), "WSNZ");
        let r = run(
            &lu,
            &build::rw16(opcode::WRITE_SAME_16, 0, 60, 5),
            &[1; 512],
        );
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x21, 0)));
        let r = run(&lu, &build::rw16(opcode::WRITE_SAME_16, 0, 0, 5), &[1; 100]);
        assert_eq!(
            asc_of(&r),
            Some((key::ILLEGAL_REQUEST, 0x24, 0)),
            "short data-out"
        );
        let over = crate::limits::max_write_same_blocks(&lu.geometry()) + 1;
        let r = run(
            &lu,
            &build::rw16(opcode::WRITE_SAME_16, 0, 0, over),
            &[1; 512],
        );
        assert_eq!(
            asc_of(&r),
            Some((key::ILLEGAL_REQUEST, 0x24, 0)),
            "over the limit"
        );
        assert!(lu.take_calls().is_empty());
    }

    #[test]
    fn get_lba_status_on_a_fresh_lu_and_at_the_edges() {
        let lu = MemLun::with_blocks(512, 64);
        assert_eq!(lba_status(&lu, 0), vec![(0, 64, 1)]);
        assert_eq!(lba_status(&lu, 63), vec![(63, 1, 1)]);
        let r = run(&lu, &build::service_action_in(0x12, 64, 0xffff), &[]);
        assert_eq!(asc_of(&r), Some((key::ILLEGAL_REQUEST, 0x21, 0)));
        let r = run(&lu, &build::service_action_in(0x12, 0, 20), &[]);
        assert_eq!(r.data_in.len(), 20, "cut to the allocation length");
        assert_eq!(
            &r.data_in[0..4],
            &20u32.to_be_bytes(),
            "length of the whole data"
        );
    }

    #[test]
    fn get_lba_status_falls_back_to_mapped_when_the_lu_says_nothing() {
        struct Silent(MemLun);
        impl LogicalUnit for Silent {
            fn geometry(&self) -> Geometry {
                self.0.geometry()
            }
            fn identity(&self) -> &crate::Identity {
                self.0.identity()
            }
            fn read(&self, o: u64, b: &mut [u8]) -> Result<(), crate::MediumError> {
                self.0.read(o, b)
            }
            fn write(&self, o: u64, d: &[u8], f: bool) -> Result<(), crate::MediumError> {
                self.0.write(o, d, f)
            }
            fn flush(&self) -> Result<(), crate::MediumError> {
                self.0.flush()
            }
            fn unmap(&self, o: u64, l: u64) -> Result<(), crate::MediumError> {
                self.0.unmap(o, l)
            }
            fn write_zeroes(&self, o: u64, l: u64, u: bool) -> Result<(), crate::MediumError> {
                self.0.write_zeroes(o, l, u)
            }
            fn allocation(&self, _: u64, _: u64) -> Result<Vec<(u64, bool)>, crate::MediumError> {
                Ok(vec![(100, false)])
            }
        }
        let lu = Silent(MemLun::with_blocks(512, 8));
        let r = execute(
            &LunState::new(),
            &lu,
            &Nexus::new("test", 1),
            &build::service_action_in(0x12, 3, 64),
            &[],
        );
        assert_eq!(r.data_in.len(), 24);
        assert_eq!(&r.data_in[8..16], &3u64.to_be_bytes());
        assert_eq!(&r.data_in[16..21], &[0, 0, 0, 1, 0]);
    }
}
