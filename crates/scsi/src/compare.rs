//! The commands that compare data-out with the medium: VERIFY with BYTCHK (01b: block by
//! block, 11b: one block against every block) and COMPARE AND WRITE (SBC-3 5.2), which writes
//! only when the compare matches, atomically against every other command on the LU through
//! this crate. A miscompare is MISCOMPARE sense carrying the offset of the first differing
//! byte. Called by [`crate::execute`] after the CDB, reservation and write-protect checks.

use crate::block_io::{buffer, byte_range, data_out_prefix, write_through};
use crate::cdb::{Blocks, ByteCheck};
use crate::lun::{Geometry, LogicalUnit, LunState};
use crate::sense::{medium_error_sense, IoKind, Response, Sense};

pub(crate) fn verify(
    state: &LunState,
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    range: Blocks,
    byte_check: ByteCheck,
    data_out: &[u8],
) -> Result<Response, Sense> {
    let (offset, len) = byte_range(geometry, range.lba, u64::from(range.count))?;
    if byte_check == ByteCheck::None || len == 0 {
        return Ok(Response::good(Vec::new()));
    }
    let block = u64::from(geometry.block_size_bytes);
    let expected = match byte_check {
        ByteCheck::OneBlock => data_out_prefix(data_out, block, None)?,
        _ => data_out_prefix(data_out, len, Some(range.count_at))?,
    };
    let mut medium = buffer(len)?;
    {
        let _io = state.shared_io();
        lu.read(offset, &mut medium)
            .map_err(|e| medium_error_sense(&e, IoKind::Read))?;
    }
    // With BYTCHK=11b the one block stands for every block, as WRITE SAME's does; the offset
    // reported is into that replicated buffer.
    let block_len = expected.len().max(1);
    let difference = match byte_check {
        ByteCheck::OneBlock => medium
            .chunks(block_len)
            .enumerate()
            .find_map(|(i, chunk)| first_difference(chunk, expected).map(|at| i * block_len + at)),
        _ => first_difference(&medium, expected),
    };
    match difference {
        Some(at) => Err(Sense::miscompare(at as u64)),
        None => Ok(Response::good(Vec::new())),
    }
}

/// COMPARE AND WRITE (SBC-3 5.2): data-out is `count` blocks to compare then `count` blocks to
/// write. The exclusive I/O lock is held from the read to the write, so no other command
/// through this crate on the same `LunState` reads or writes in between.
pub(crate) fn compare_and_write(
    state: &LunState,
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    range: Blocks,
    fua: bool,
    data_out: &[u8],
) -> Result<Response, Sense> {
    if geometry.read_only {
        return Err(Sense::write_protected());
    }
    let (offset, len) = byte_range(geometry, range.lba, u64::from(range.count))?;
    if len == 0 {
        return Ok(Response::good(Vec::new()));
    }
    let data = data_out_prefix(data_out, 2 * len, Some(range.count_at))?;
    let (compare, new) = data.split_at(data.len() / 2);
    let _io = state.exclusive_io();
    match lu
        .compare_and_write(offset, compare, new, write_through(state, fua))
        .map_err(|e| medium_error_sense(&e, IoKind::Write))?
    {
        Some(at) => Err(Sense::miscompare(at)),
        None => Ok(Response::good(Vec::new())),
    }
}

fn first_difference(a: &[u8], b: &[u8]) -> Option<usize> {
    a.iter().zip(b).position(|(x, y)| x != y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::execute::execute;
    use crate::mem_lun::MemLun;
    use crate::opcode;
    use crate::sense::{asc, key, Status};

    use crate::test_support::{assert_good, assert_sense, nexus, pattern, run};

    #[test]
    fn verify_checks_range_or_compares() {
        let lu = MemLun::with_blocks(512, 16);
        let data = pattern(1024, 3);
        assert_good(&run(&lu, &build::rw10(opcode::WRITE_10, 0, 4, 2), &data));
        // BYTCHK=0: range check only, no data-out.
        assert_good(&run(&lu, &build::rw10(opcode::VERIFY_10, 0, 4, 2), &[]));
        let r = run(&lu, &build::rw10(opcode::VERIFY_10, 0, 15, 2), &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LBA_OUT_OF_RANGE);
        // BYTCHK=01b: compare.
        let bytchk = 0x02;
        assert_good(&run(
            &lu,
            &build::rw16(opcode::VERIFY_16, bytchk, 4, 2),
            &data,
        ));
        let mut wrong = data.clone();
        wrong[700] ^= 0xff;
        let r = run(&lu, &build::rw16(opcode::VERIFY_16, bytchk, 4, 2), &wrong);
        assert_sense(&r, key::MISCOMPARE, asc::MISCOMPARE_DURING_VERIFY);
        assert_eq!(r.sense.as_ref().and_then(|s| s.information), Some(700));
        assert_eq!(&r.sense_bytes()[3..7], &700u32.to_be_bytes());
        // BYTCHK=11b: one block against each.
        assert_good(&run(
            &lu,
            &build::rw10(opcode::VERIFY_10, 0x06, 8, 3),
            &[0; 512],
        ));
        let r = run(&lu, &build::rw10(opcode::VERIFY_10, 0x06, 3, 2), &[0; 512]);
        assert_eq!(r.sense.and_then(|s| s.information), Some(512));
        // BYTCHK=10b is reserved.
        let r = run(&lu, &build::rw10(opcode::VERIFY_10, 0x04, 0, 1), &[0; 512]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB);
    }

    #[test]
    fn compare_and_write_swaps_on_match_only() {
        let lu = MemLun::with_blocks(512, 16);
        let old = pattern(512, 1);
        let new = pattern(512, 2);
        assert_good(&run(&lu, &build::rw10(opcode::WRITE_10, 0, 3, 1), &old));
        let mut data = old.clone();
        data.extend(&new);
        assert_good(&run(&lu, &build::compare_and_write(3, 1), &data));
        assert_eq!(lu.bytes(3 * 512, 512), new);
        // The medium now holds `new`: comparing against `old` fails at byte 0... or wherever.
        let r = run(&lu, &build::compare_and_write(3, 1), &data);
        assert_sense(&r, key::MISCOMPARE, asc::MISCOMPARE_DURING_VERIFY);
        let at = first_difference(&new, &old).expect("patterns differ") as u64;
        assert_eq!(r.sense.and_then(|s| s.information), Some(at));
        assert_eq!(lu.bytes(3 * 512, 512), new, "miscompare writes nothing");
    }

    #[test]
    fn compare_and_write_limits_and_zero_blocks() {
        let lu = MemLun::with_blocks(512, 16);
        assert_good(&run(&lu, &build::compare_and_write(0, 0), &[]));
        let r = run(&lu, &build::compare_and_write(0, 2), &[0; 2048]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB);
        let r = run(&lu, &build::compare_and_write(16, 1), &[0; 1024]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LBA_OUT_OF_RANGE);
        let r = run(&lu, &build::compare_and_write(0, 1), &[0; 1000]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB);
    }

    #[test]
    fn compare_and_write_is_atomic_against_concurrent_writes() {
        // Many threads race CAW "increments" of one block; with atomic CAW every successful
        // swap sees the value the previous one wrote, so successes equal the final counter.
        let lu = MemLun::with_blocks(512, 4);
        let state = LunState::new();
        let successes = std::sync::atomic::AtomicU32::new(0);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..200 {
                        let current = execute(
                            &state,
                            &lu,
                            &nexus(),
                            &build::rw10(opcode::READ_10, 0, 0, 1),
                            &[],
                        );
                        let n = u32::from_be_bytes(current.data_in[0..4].try_into().expect("4"));
                        let mut data = current.data_in.clone();
                        data.extend((n + 1).to_be_bytes());
                        data.resize(1024, 0);
                        let r = execute(
                            &state,
                            &lu,
                            &nexus(),
                            &build::compare_and_write(0, 1),
                            &data,
                        );
                        if r.status == Status::Good {
                            successes.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let final_value = u32::from_be_bytes(lu.bytes(0, 4).try_into().expect("4"));
        assert_eq!(final_value, successes.into_inner());
    }
}
