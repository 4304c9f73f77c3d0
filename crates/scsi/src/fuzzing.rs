//! Fuzz entry point and its seed corpus, shared by `fuzz/` (cargo-fuzz, nightly), the proptest
//! below, and the stable-toolchain corpus replay in `tests/corpus_replay.rs`.
//!
//! [`fuzz_cdb`] runs arbitrary bytes as one command against a small [`MemLun`] and asserts
//! what must hold for any input: no panic; CHECK CONDITION always with sense and no data, GOOD
//! and RESERVATION CONFLICT never with sense; data-in never longer than the CDB allows (its
//! allocation length, its transfer length for reads); a read-only LU never receives a write;
//! the LU is never touched while another nexus holds an Exclusive Access reservation;
//! [`data_out_len`] agrees with [`execute`] about which CDBs are valid. The same CDB also goes
//! through [`report_luns`] and [`execute_no_lun`].

use crate::build;
use crate::decoded::DecodedCdb;
use crate::execute::execute;
use crate::lun::{LogicalUnit, LunState, MediumError};
use crate::luns::{execute_no_lun, report_luns};
use crate::mem_lun::{Call, MemLun};
use crate::nexus::Nexus;
use crate::opcode;
use crate::sense::{Response, Status};

/// Target name; also the directory name under `fuzz/corpus/`.
pub const CDB_TARGET: &str = "scsi_cdb";

/// Blocks of the fuzzed LU: small, so that in-range commands are easy to hit.
const FUZZ_LUN_BLOCKS: u64 = 64;
/// The LUN map REPORT LUNS is answered for: both address methods and one unaddressable LUN.
const FUZZ_LUNS: [u64; 5] = [0, 1, 255, 4000, 20_000];
/// Longest CDB the input format carries (the iSCSI CDB field plus an extended CDB's worth).
const FUZZ_CDB_MAX_LEN_BYTES: u8 = 32;

/// Shape byte bits.
const SHAPE_4K_BLOCKS: u8 = 0x01;
const SHAPE_READ_ONLY: u8 = 0x02;
const SHAPE_WRITE_CACHE_OFF: u8 = 0x04;
const SHAPE_FAULT: u8 = 0x08;
const SHAPE_REGISTERED: u8 = 0x40;
const SHAPE_RESERVED_BY_OTHER: u8 = 0x80;
/// Reservation keys of the fuzzed nexus (when registered) and of the other one.
const FUZZ_OWN_KEY: u64 = 1;
const FUZZ_OTHER_KEY: u64 = 2;
/// Reservation type code of Exclusive Access.
const EXCLUSIVE_ACCESS: u8 = 0x3;

/// Input: byte 0 is the shape (bit 0: 4096-byte blocks, else 512; bit 1: read-only; bit 2:
/// write cache disabled; bit 3: every storage call fails, bits 4..5 pick the error; bit 6: the
/// nexus is registered with key 1; bit 7: another nexus, registered with key 2, holds an
/// Exclusive Access reservation); byte 1 is the CDB length (mod 33); then the CDB; the rest is
/// data-out.
pub fn fuzz_cdb(data: &[u8]) {
    let Some((&shape, rest)) = data.split_first() else {
        return;
    };
    let Some((&cdb_len, rest)) = rest.split_first() else {
        return;
    };
    let cdb_len = usize::from(cdb_len % (FUZZ_CDB_MAX_LEN_BYTES + 1)).min(rest.len());
    let (cdb, data_out) = rest.split_at(cdb_len);

    let block_size = if shape & SHAPE_4K_BLOCKS != 0 {
        4096
    } else {
        512
    };
    let lu = MemLun::with_blocks(block_size, FUZZ_LUN_BLOCKS)
        .with_read_only(shape & SHAPE_READ_ONLY != 0);
    if shape & SHAPE_FAULT != 0 {
        lu.set_fault(Some(match (shape >> 4) & 3 {
            0 => MediumError::Io("fuzz".into()),
            1 => MediumError::NoSpace,
            2 => MediumError::ReadOnly,
            _ => MediumError::Gone,
        }));
    }
    let state = LunState::new();
    if shape & SHAPE_WRITE_CACHE_OFF != 0 {
        state.set_write_cache_enabled(false);
    }
    let geometry = lu.geometry();
    let nexus = Nexus::iscsi("iqn.2024-01.fuzz:initiator", [0x80, 0, 0, 0, 0, 1], 1);
    let other = Nexus::iscsi("iqn.2024-01.fuzz:other", [0x80, 0, 0, 0, 0, 2], 2);
    if shape & SHAPE_REGISTERED != 0 {
        register(&state, &lu, &nexus, FUZZ_OWN_KEY);
    }
    let reserved_by_other = shape & SHAPE_RESERVED_BY_OTHER != 0;
    if reserved_by_other {
        register(&state, &lu, &other, FUZZ_OTHER_KEY);
        let reserve = build::persistent_reserve_out(opcode::SA_RESERVE, EXCLUSIVE_ACCESS, 24);
        let list = build::prout_parameters(FUZZ_OTHER_KEY, 0, 0);
        let r = execute(&state, &lu, &other, &reserve, &list);
        assert_eq!(r.status, Status::Good, "fuzz setup: reserve");
    }

    let response = execute(&state, &lu, &nexus, cdb, data_out);
    check_status_and_sense(&response);
    let command = DecodedCdb::decode(cdb);
    let decoded = command.checked(&geometry);
    assert_eq!(
        command.data_out_len(&geometry).is_some(),
        decoded.is_ok(),
        "data_out_len is Some exactly for CDBs execute accepts"
    );
    match decoded {
        Ok(command) => {
            let limit = command.data_in_limit_bytes(&geometry);
            assert!(
                response.data_in.len() as u64 <= limit,
                "data-in {} over the CDB's limit {limit}",
                response.data_in.len()
            );
        }
        Err(_) => assert_eq!(response.status, Status::CheckCondition),
    }
    let calls = lu.take_calls();
    if geometry.read_only {
        let wrote = calls.iter().any(|c| {
            matches!(
                c,
                Call::Write { .. } | Call::Unmap { .. } | Call::WriteZeroes { .. }
            )
        });
        assert!(!wrote, "a read-only LU received a write");
    }
    if reserved_by_other {
        assert!(
            calls.is_empty(),
            "another nexus holds Exclusive Access, yet the LU saw {calls:?}"
        );
    }
    // Whatever the command did, the unit attention queue answers without panicking.
    let _ = state.unit_attention(&other, &[opcode::TEST_UNIT_READY]);

    let luns = report_luns(&command, &FUZZ_LUNS);
    check_status_and_sense(&luns);
    let no_lun = execute_no_lun(&command);
    check_status_and_sense(&no_lun);
}

/// Fuzz setup: REGISTER `nexus` with `key`; it must succeed.
fn register(state: &LunState, lu: &MemLun, nexus: &Nexus, key: u64) {
    let cdb = build::persistent_reserve_out(opcode::SA_REGISTER, 0, 24);
    let r = execute(state, lu, nexus, &cdb, &build::prout_parameters(0, key, 0));
    assert_eq!(r.status, Status::Good, "fuzz setup: register");
}

fn check_status_and_sense(response: &Response) {
    match response.status {
        Status::CheckCondition => {
            let sense = response
                .sense
                .as_ref()
                .expect("CHECK CONDITION carries sense");
            assert!(response.data_in.is_empty(), "no data with CHECK CONDITION");
            assert_eq!(sense.encode_fixed().len(), 18);
            assert!(sense.encode_descriptor().len() >= 8);
        }
        Status::ReservationConflict => {
            assert!(response.sense.is_none() && response.data_in.is_empty());
        }
        Status::Good => assert!(response.sense.is_none(), "sense only with CHECK CONDITION"),
        other => panic!("execute returned {other:?}"),
    }
}

/// One seed input: shape byte, CDB length, CDB, data-out.
fn seed(shape: u8, cdb: &[u8], data_out: &[u8]) -> Vec<u8> {
    let mut v = vec![shape, u8::try_from(cdb.len()).unwrap_or(0)];
    v.extend_from_slice(cdb);
    v.extend_from_slice(data_out);
    v
}

fn prout(service_action: u16, kind: u8, parameter_len: u32) -> Vec<u8> {
    build::persistent_reserve_out(service_action, kind, parameter_len)
}

fn pr_list(key: u64, service_action_key: u64, flags: u8) -> Vec<u8> {
    build::prout_parameters(key, service_action_key, flags)
}

/// REGISTER AND MOVE of the reservation to a third initiator through `port`.
fn pr_move(key: u64, service_action_key: u64, port: u16) -> Vec<u8> {
    build::register_and_move_parameters(
        key,
        service_action_key,
        true,
        port,
        "iqn.2024-01.fuzz:third,i,0x800000000003",
    )
}

/// A seed per supported command, plus the interesting refusals.
pub fn seed_corpus() -> Vec<Vec<u8>> {
    let b512 = |n: usize| vec![0x5a; 512 * n];
    let caching_select = [
        0, 0, 0, 0, 0x08, 0x12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];
    let mut select_10 = vec![0, 0, 0, 0, 0, 0, 0, 8, 0, 0, 0, 64, 0, 0, 2, 0];
    select_10.extend([0x0a, 0x0a, 0x02, 0x10, 0, 0, 0, 0, 0, 0, 0, 0]);
    let unmap_list = build::unmap(&[(0, 4), (32, 8)]);
    let mut miscompare = vec![1u8; 512];
    miscompare.extend(vec![2u8; 512]);
    vec![
        seed(0, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0], &[]),
        seed(0, &[opcode::REQUEST_SENSE, 1, 0, 0, 252, 0], &[]),
        seed(0, &build::inquiry(false, 0, 96), &[]),
        seed(0, &build::inquiry(true, 0x00, 255), &[]),
        seed(0, &build::inquiry(true, 0x80, 255), &[]),
        seed(0, &build::inquiry(true, 0x83, 255), &[]),
        seed(1, &build::inquiry(true, 0xb0, 64), &[]),
        seed(0, &build::inquiry(true, 0xb1, 64), &[]),
        seed(0, &build::inquiry(true, 0xb2, 8), &[]),
        seed(2, &[opcode::MODE_SENSE_6, 0, 0x3f, 0, 255, 0], &[]),
        seed(
            0,
            &[opcode::MODE_SENSE_10, 0x10, 0x48, 0, 0, 0, 0, 1, 0, 0],
            &[],
        ),
        seed(
            0,
            &[opcode::MODE_SELECT_6, 0x10, 0, 0, 24, 0],
            &caching_select,
        ),
        seed(
            0,
            &[opcode::MODE_SELECT_10, 0x10, 0, 0, 0, 0, 0, 0, 28, 0],
            &select_10,
        ),
        seed(0, &[opcode::START_STOP_UNIT, 0, 0, 0, 1, 0], &[]),
        seed(
            0,
            &[opcode::PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0, 0, 0],
            &[],
        ),
        seed(
            0,
            &[opcode::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[],
        ),
        seed(1, &build::service_action_in(0x10, 0, 32), &[]),
        seed(0, &build::service_action_in(0x12, 3, 4096), &[]),
        seed(0, &build::rw6(opcode::READ_6, 1, 2), &[]),
        seed(0, &build::rw6(opcode::WRITE_6, 1, 2), &b512(2)),
        seed(0, &build::rw10(opcode::READ_10, 0, 10, 4), &[]),
        seed(4, &build::rw10(opcode::WRITE_10, 0x08, 10, 4), &b512(4)),
        seed(1, &build::rw12(opcode::READ_12, 0, 60, 4), &[]),
        seed(0, &build::rw12(opcode::WRITE_12, 0, 2, 1), &b512(1)),
        seed(0, &build::rw16(opcode::READ_16, 0, 63, 1), &[]),
        seed(0, &build::rw16(opcode::WRITE_16, 0x08, 62, 2), &b512(2)),
        seed(
            0,
            &build::rw10(opcode::WRITE_AND_VERIFY_10, 0x02, 0, 1),
            &b512(1),
        ),
        seed(
            0,
            &build::rw12(opcode::WRITE_AND_VERIFY_12, 0, 0, 1),
            &b512(1),
        ),
        seed(
            0,
            &build::rw16(opcode::WRITE_AND_VERIFY_16, 0, 5, 1),
            &b512(1),
        ),
        seed(0, &build::rw10(opcode::VERIFY_10, 0, 0, 8), &[]),
        seed(0, &build::rw12(opcode::VERIFY_12, 0x02, 0, 1), &b512(1)),
        seed(0, &build::rw16(opcode::VERIFY_16, 0x06, 0, 4), &[0; 512]),
        seed(0, &build::sync_cache10(0, 0), &[]),
        seed(0, &build::sync_cache16(8, 8), &[]),
        seed(0, &build::unmap_cdb(unmap_list.len()), &unmap_list),
        seed(
            0,
            &build::rw10(opcode::WRITE_SAME_10, 0x08, 0, 8),
            &[0; 512],
        ),
        seed(1, &build::rw16(opcode::WRITE_SAME_16, 0x09, 4, 8), &[]),
        seed(0, &build::rw16(opcode::WRITE_SAME_16, 0, 4, 8), &b512(1)),
        seed(0, &build::compare_and_write(0, 1), &[0; 1024]),
        seed(0, &build::compare_and_write(0, 1), &miscompare),
        seed(0, &build::maintenance_in(0x0c, 0x80, 0x1_0000), &[]),
        seed(
            0,
            &build::report_one_operation_code(0x02, opcode::SERVICE_ACTION_IN_16, 0x12),
            &[],
        ),
        seed(0, &build::maintenance_in(0x0a, 0x20, 256), &[]),
        seed(0, &build::report_luns(256), &[]),
        // Persistent reservations: each service action, from unregistered, registered and
        // conflicting nexuses, with well-formed and malformed parameter lists.
        seed(0xc0, &build::persistent_reserve_in(0, 0x2000), &[]),
        seed(0xc0, &build::persistent_reserve_in(1, 0x2000), &[]),
        seed(0, &build::persistent_reserve_in(2, 0x2000), &[]),
        seed(0xc0, &build::persistent_reserve_in(3, 0x2000), &[]),
        seed(0x40, &build::persistent_reserve_in(3, 9), &[]),
        seed(0, &build::persistent_reserve_in(4, 0x2000), &[]),
        seed(0, &prout(opcode::SA_REGISTER, 0, 24), &pr_list(0, 7, 0)),
        seed(
            0x40,
            &prout(opcode::SA_REGISTER, 0, 24),
            &pr_list(1, 7, 0x04),
        ),
        seed(
            0x40,
            &prout(opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY, 0, 24),
            &pr_list(9, 0, 0),
        ),
        seed(0x40, &prout(opcode::SA_RESERVE, 5, 24), &pr_list(1, 0, 0)),
        seed(0xc0, &prout(opcode::SA_RESERVE, 3, 24), &pr_list(1, 0, 0)),
        seed(0x40, &prout(opcode::SA_RESERVE, 2, 24), &pr_list(1, 0, 0)),
        seed(
            0x40,
            &prout(opcode::SA_RESERVE, 0x11, 24),
            &pr_list(1, 0, 0),
        ),
        seed(0xc0, &prout(opcode::SA_RELEASE, 3, 24), &pr_list(1, 0, 0)),
        seed(0xc0, &prout(opcode::SA_CLEAR, 0, 24), &pr_list(1, 0, 0)),
        seed(0xc0, &prout(opcode::SA_PREEMPT, 1, 24), &pr_list(1, 2, 0)),
        seed(
            0xc0,
            &prout(opcode::SA_PREEMPT_AND_ABORT, 8, 24),
            &pr_list(1, 0, 0),
        ),
        seed(
            0xc0,
            &prout(opcode::SA_REGISTER_AND_MOVE, 3, 68),
            &pr_move(1, 5, 2),
        ),
        seed(
            0x40,
            &prout(opcode::SA_REGISTER_AND_MOVE, 3, 68),
            &pr_move(1, 5, 1),
        ),
        seed(0, &prout(opcode::SA_REGISTER, 0, 24), &pr_list(0, 7, 0x08)),
        seed(0, &prout(opcode::SA_REGISTER, 0, 24), &pr_list(0, 7, 0x01)),
        seed(0, &prout(opcode::SA_REGISTER, 0, 20), &pr_list(0, 7, 0)),
        seed(
            0,
            &prout(opcode::SA_REGISTER, 0, 28),
            &[pr_list(0, 7, 0), vec![0; 4]].concat(),
        ),
        seed(0, &prout(opcode::SA_REGISTER, 0, 24), &[0; 10]),
        seed(
            0,
            &prout(opcode::SA_REGISTER, 0, u32::MAX),
            &pr_list(0, 7, 0),
        ),
        seed(0x40, &build::reserve6(), &[]),
        seed(0, &build::reserve6(), &[]),
        seed(0x80, &build::release6(), &[]),
        seed(0x80, &build::rw10(opcode::READ_10, 0, 0, 1), &[]),
        seed(0xc0, &build::rw10(opcode::WRITE_10, 0, 0, 1), &b512(1)),
        seed(0x80, &[opcode::REQUEST_SENSE, 0, 0, 0, 252, 0], &[]),
        // Refusals: unknown opcode, short CDB, write to a read-only LU, a failing LU, NACA.
        seed(0, &[0x7e, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]),
        seed(0, &[opcode::READ_16, 0, 0, 0], &[]),
        seed(2, &build::rw10(opcode::WRITE_10, 0, 0, 1), &b512(1)),
        seed(0x18, &build::rw10(opcode::READ_10, 0, 0, 1), &[]),
        seed(0, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0x04], &[]),
    ]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::maintenance_in::SUPPORTED;

    #[test]
    fn seeds_run_clean() {
        for s in seed_corpus() {
            fuzz_cdb(&s);
        }
    }

    #[test]
    fn truncated_seeds_run_clean() {
        for s in seed_corpus() {
            for len in 0..s.len().min(40) {
                fuzz_cdb(&s[..len]);
            }
        }
    }

    /// A CDB that starts with a supported opcode (and its service action), so random fields
    /// get past the opcode check; half the time with an LBA and length small enough to land
    /// inside the LU, and a data-out buffer of whole blocks.
    fn structured_input() -> impl Strategy<Value = Vec<u8>> {
        let data_out_len = prop_oneof![
            Just(0usize),
            Just(512),
            Just(1024),
            Just(4096),
            Just(8192),
            0..9000usize,
        ];
        (
            any::<u8>(),
            0..SUPPORTED.len(),
            proptest::collection::vec(any::<u8>(), 16),
            any::<bool>(),
            (0..70u8, 0..9u8),
            (any::<u8>(), data_out_len),
        )
            .prop_map(
                |(mut shape, row, mut cdb, small, (lba, count), (fill, len))| {
                    let s = SUPPORTED[row];
                    cdb.truncate(s.usage.len());
                    if small {
                        // Only bits the device server uses, a working LU, a range inside it.
                        for (b, usage) in cdb.iter_mut().zip(s.usage) {
                            *b &= usage;
                        }
                        place_small_range(&mut cdb, lba, count);
                        shape &= !SHAPE_FAULT;
                    }
                    cdb[0] = s.opcode;
                    if let Some(sa) = s.service_action {
                        cdb[1] = (cdb[1] & 0xe0) | u8::try_from(sa).unwrap_or(0);
                    }
                    seed(shape, &cdb, &vec![fill; len])
                },
            )
    }

    /// Write `lba` and `count` where this CDB size keeps them (the READ family layouts), and
    /// clear the control byte.
    fn place_small_range(cdb: &mut [u8], lba: u8, count: u8) {
        let (lba_at, lba_len, count_at, count_len) = match cdb.len() {
            6 => (1, 3, 4, 1),
            10 => (2, 4, 7, 2),
            12 => (2, 4, 6, 4),
            _ => (2, 8, 10, 4),
        };
        cdb[lba_at..lba_at + lba_len].fill(0);
        cdb[lba_at + lba_len - 1] = lba;
        cdb[count_at..count_at + count_len].fill(0);
        cdb[count_at + count_len - 1] = count;
        if let Some(last) = cdb.last_mut() {
            *last = 0;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_hold_the_invariants(data in proptest::collection::vec(any::<u8>(), 0..600)) {
            fuzz_cdb(&data);
        }

        #[test]
        fn structured_commands_hold_the_invariants(data in structured_input()) {
            fuzz_cdb(&data);
        }
    }
}
