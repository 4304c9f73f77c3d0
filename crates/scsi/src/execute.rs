//! Command execution: [`execute_decoded`] checks a decoded CDB ([`DecodedCdb`]) against the
//! LU's geometry and the reservations, and dispatches it ([`execute`] decodes the bytes
//! first); this file also runs the block data commands (READ, WRITE, WRITE AND VERIFY,
//! SYNCHRONIZE CACHE). VERIFY and COMPARE AND WRITE live in [`crate::compare`], provisioning
//! commands in [`crate::provisioning`], INQUIRY in [`crate::inquiry`], mode pages in [`crate::mode`],
//! reservations in [`crate::reservations`] and the `persistent_reserve_*` modules.
//!
//! Order of checks, as SBC-3 4.2 and the Linux and libiscsi test suites expect: CDB fields and
//! transfer limits (INVALID FIELD IN CDB), then reservations (RESERVATION CONFLICT), then
//! write protection (DATA PROTECT), then the LBA range (LOGICAL BLOCK ADDRESS OUT OF RANGE),
//! then the data-out buffer's length, then I/O. A zero-length transfer that passes those
//! checks is GOOD without touching the LU. (Pending unit attentions come before all of these:
//! the transport asks [`LunState::unit_attention`] first.)
//!
//! Every block read and write holds [`LunState`]'s I/O lock shared; COMPARE AND WRITE holds it
//! exclusive. Data-out longer than the CDB implies is ignored past what the CDB names (the
//! transport reports the residual); shorter is INVALID FIELD IN CDB, as Linux LIO answers.

use crate::alua;
use crate::block_io::{buffer, byte_range, data_out_prefix, write_through};
use crate::capacity;
use crate::cdb::{Blocks, Command};
use crate::compare::{compare_and_write, verify};
use crate::decoded::DecodedCdb;
use crate::inquiry;
use crate::lun::{Geometry, LogicalUnit, LunState};
use crate::maintenance_in::{self, RsocRequest};
use crate::mode::{self, SelectRequest, SenseRequest};
use crate::nexus::Nexus;
use crate::persistent_reserve_in::persistent_reserve_in;
use crate::persistent_reserve_out::{persistent_reserve_out, reserve_release_6, ProutRequest};
use crate::provisioning;
use crate::reservations::Access;
use crate::sense::{asc, key, medium_error_sense, IoKind, Response, Sense};

/// Execute one command from `nexus` against a logical unit. `data_out` is the whole data-out
/// buffer the transport gathered. The response's data-in is already cut to the CDB's
/// allocation length. Status is GOOD, CHECK CONDITION (with sense) or RESERVATION CONFLICT.
///
/// REPORT LUNS is not answered here (the transport knows which LUNs the initiator sees; see
/// [`crate::report_luns`]): it gets INVALID COMMAND OPERATION CODE. Unit attentions are the
/// transport's to report first ([`LunState::unit_attention`]); REQUEST SENSE returns the next
/// one pending for `nexus` as its parameter data.
pub fn execute(
    state: &LunState,
    lu: &dyn LogicalUnit,
    nexus: &Nexus,
    cdb: &[u8],
    data_out: &[u8],
) -> Response {
    execute_decoded(state, lu, nexus, &DecodedCdb::decode(cdb), data_out)
}

/// [`execute`] of a CDB the transport decoded already: its transfer limits are checked
/// against the LU's geometry of now.
pub fn execute_decoded(
    state: &LunState,
    lu: &dyn LogicalUnit,
    nexus: &Nexus,
    decoded: &DecodedCdb,
    data_out: &[u8],
) -> Response {
    let geometry = lu.geometry();
    if !geometry.is_valid() {
        return Response::check(Sense::new(
            key::HARDWARE_ERROR,
            asc::INTERNAL_TARGET_FAILURE,
        ));
    }
    let command = match decoded.checked(&geometry) {
        Ok(command) => command,
        Err(sense) => return Response::check(sense),
    };
    let access = command.access();
    // A target port in a state that serves only the commands every reservation allows
    // (transitioning during a handover, standby, unavailable) refuses the rest.
    if access != Access::Always {
        if let Some(sense) = state.access_state(nexus.relative_target_port).refusal() {
            return Response::check(sense);
        }
    }
    match command {
        Command::PersistentReserveOut {
            service_action,
            scope,
            kind,
            parameter_len,
        } => {
            let request = ProutRequest {
                service_action,
                scope,
                kind,
                parameter_len,
            };
            return persistent_reserve_out(state, lu.identity(), nexus, request, data_out);
        }
        Command::Reserve6 => return reserve_release_6(state, nexus, true),
        Command::Release6 => return reserve_release_6(state, nexus, false),
        _ => {}
    }
    // Held to the end of the command: a PERSISTENT RESERVE OUT waits for it. PERSISTENT
    // RESERVE IN reports what the store holds now; the commands no reservation refuses use
    // the cache, so they answer even while the store is unreachable.
    let reservations = match (&command, access) {
        (Command::PersistentReserveIn { .. }, _) => state.fresh_reservations(),
        (_, Access::Always) => Ok(state.cached_reservations()),
        _ => state.reservations(),
    };
    let reservations = match reservations {
        Ok(reservations) => reservations,
        Err(sense) => return Response::check(sense),
    };
    if reservations.conflicts(nexus, access) {
        return Response::reservation_conflict();
    }
    if let Command::PersistentReserveIn {
        service_action,
        allocation_len,
    } = command
    {
        return persistent_reserve_in(&reservations, service_action, allocation_len);
    }
    run(state, lu, nexus, &geometry, command, data_out).unwrap_or_else(Response::check)
}

fn run(
    state: &LunState,
    lu: &dyn LogicalUnit,
    nexus: &Nexus,
    geometry: &Geometry,
    command: Command,
    data_out: &[u8],
) -> Result<Response, Sense> {
    let response = match command {
        Command::TestUnitReady
        | Command::StartStopUnit { .. }
        | Command::PreventAllowMediumRemoval { .. } => Response::good(Vec::new()),
        Command::RequestSense {
            descriptor,
            allocation_len,
        } => {
            let pending = state
                .take_attention(nexus)
                .map(|code| Sense::new(key::UNIT_ATTENTION, code));
            request_sense(
                &pending.unwrap_or_else(|| Sense::new(key::NO_SENSE, asc::NO_ADDITIONAL_SENSE)),
                descriptor,
                allocation_len,
            )
        }
        Command::Inquiry {
            evpd,
            page_code,
            allocation_len,
        } => {
            let identity = lu.identity();
            let group = state
                .port_groups(identity)
                .group_of(identity.relative_target_port)
                .map_or(identity.target_port_group, |g| g.id);
            inquiry::inquiry(identity, group, geometry, evpd, page_code, allocation_len)
        }
        Command::ModeSense {
            ten,
            disable_block_descriptors,
            long_lba,
            page_control,
            page_code,
            subpage_code,
            allocation_len,
        } => mode::mode_sense(
            state,
            geometry,
            SenseRequest {
                ten,
                disable_block_descriptors,
                long_lba,
                page_control,
                page_code,
                subpage_code,
                allocation_len,
            },
        ),
        Command::ModeSelect {
            ten,
            page_format,
            save_pages,
            parameter_len,
        } => mode::mode_select(
            state,
            geometry,
            SelectRequest {
                ten,
                page_format,
                save_pages,
                parameter_len,
            },
            data_out,
        ),
        Command::ReadCapacity10 => capacity::read_capacity_10(geometry),
        Command::ReadCapacity16 { allocation_len } => {
            capacity::read_capacity_16(geometry, allocation_len)
        }
        Command::GetLbaStatus {
            lba,
            allocation_len,
        } => provisioning::get_lba_status(lu, geometry, lba, allocation_len)?,
        Command::Read(range) => read(state, lu, geometry, range)?,
        Command::Write { range, fua } => write(state, lu, geometry, range, fua, data_out)?,
        // The write is made durable before GOOD: that is the verification we can offer.
        Command::WriteAndVerify(range) => write(state, lu, geometry, range, true, data_out)?,
        Command::Verify { range, byte_check } => {
            verify(state, lu, geometry, range, byte_check, data_out)?
        }
        Command::SynchronizeCache { lba, count } => synchronize_cache(lu, geometry, lba, count)?,
        Command::Unmap { parameter_len } => {
            provisioning::unmap(state, lu, geometry, parameter_len, data_out)?
        }
        Command::WriteSame {
            range,
            unmap,
            no_data_out,
        } => provisioning::write_same(state, lu, geometry, range, unmap, no_data_out, data_out)?,
        Command::CompareAndWrite { range, fua } => {
            compare_and_write(state, lu, geometry, range, fua, data_out)?
        }
        Command::ReportSupportedOperationCodes {
            timeouts,
            options,
            opcode,
            service_action,
            allocation_len,
        } => maintenance_in::report_supported_operation_codes(RsocRequest {
            timeouts,
            options,
            opcode,
            service_action,
            allocation_len,
        }),
        Command::ReportTargetPortGroups {
            extended_header,
            allocation_len,
        } => Response::good_cut(
            alua::encode_port_groups(&state.port_groups(lu.identity()), extended_header),
            allocation_len,
        ),
        Command::ReportLuns { .. } => return Err(Sense::invalid_opcode()),
        // Answered by `execute` before `run`.
        Command::PersistentReserveIn { .. }
        | Command::PersistentReserveOut { .. }
        | Command::Reserve6
        | Command::Release6 => return Err(Sense::invalid_opcode()),
    };
    Ok(response)
}

/// REQUEST SENSE parameter data: `sense` in the format the DESC bit asks for.
pub(crate) fn request_sense(sense: &Sense, descriptor: bool, allocation_len: u32) -> Response {
    let data = if descriptor {
        sense.encode_descriptor()
    } else {
        sense.encode_fixed()
    };
    Response::good_cut(data, allocation_len)
}

fn read(
    state: &LunState,
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    range: Blocks,
) -> Result<Response, Sense> {
    let (offset, len) = byte_range(geometry, range.lba, u64::from(range.count))?;
    let mut data = buffer(len)?;
    if !data.is_empty() {
        let _io = state.shared_io();
        lu.read(offset, &mut data)
            .map_err(|e| medium_error_sense(&e, IoKind::Read))?;
    }
    Ok(Response::good(data))
}

fn write(
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
    let data = data_out_prefix(data_out, len, Some(range.count_at))?;
    if !data.is_empty() {
        let _io = state.shared_io();
        lu.write(offset, data, write_through(state, fua))
            .map_err(|e| medium_error_sense(&e, IoKind::Write))?;
    }
    Ok(Response::good(Vec::new()))
}

fn synchronize_cache(
    lu: &dyn LogicalUnit,
    geometry: &Geometry,
    lba: u64,
    count: u32,
) -> Result<Response, Sense> {
    // A count of zero means "to the end of the LU": only the LBA needs to be inside.
    if !geometry.contains(lba, u64::from(count)) {
        return Err(Sense::lba_out_of_range());
    }
    lu.flush()
        .map_err(|e| medium_error_sense(&e, IoKind::Other))?;
    Ok(Response::good(Vec::new()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::build;
    use crate::mem_lun::{Call, MemLun};
    use crate::opcode;
    use crate::MediumError;

    use crate::test_support::{assert_good, assert_sense, nexus, pattern, run};

    #[test]
    fn write_then_read_back_in_every_cdb_size() {
        for bs in [512u32, 4096] {
            let lu = MemLun::with_blocks(bs, 64);
            let b = bs as usize;
            let cases: [(Vec<u8>, Vec<u8>, usize); 4] = [
                (
                    build::rw6(opcode::WRITE_6, 1, 2),
                    build::rw6(opcode::READ_6, 1, 2),
                    2,
                ),
                (
                    build::rw10(opcode::WRITE_10, 0, 5, 3).to_vec(),
                    build::rw10(opcode::READ_10, 0, 5, 3).to_vec(),
                    3,
                ),
                (
                    build::rw12(opcode::WRITE_12, 0, 9, 1).to_vec(),
                    build::rw12(opcode::READ_12, 0, 9, 1).to_vec(),
                    1,
                ),
                (
                    build::rw16(opcode::WRITE_16, 0, 60, 4).to_vec(),
                    build::rw16(opcode::READ_16, 0, 60, 4).to_vec(),
                    4,
                ),
            ];
            for (i, (w, r, blocks)) in cases.iter().enumerate() {
                let data = pattern(blocks * b, i as u8);
                assert_good(&run(&lu, w, &data));
                let resp = run(&lu, r, &[]);
                assert_good(&resp);
                assert_eq!(resp.data_in, data);
            }
        }
    }

    #[test]
    fn six_byte_zero_length_means_256_blocks() {
        let lu = MemLun::with_blocks(512, 300);
        let r = run(&lu, &build::rw6(opcode::READ_6, 0, 0), &[]);
        assert_good(&r);
        assert_eq!(r.data_in.len(), 256 * 512);
        let lu = MemLun::with_blocks(512, 200);
        let r = run(&lu, &build::rw6(opcode::READ_6, 0, 0), &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LBA_OUT_OF_RANGE);
    }

    #[test]
    fn zero_length_transfers_are_good_and_touch_nothing() {
        let lu = MemLun::with_blocks(512, 16);
        assert_good(&run(&lu, &build::rw10(opcode::READ_10, 0, 16, 0), &[]));
        assert_good(&run(&lu, &build::rw16(opcode::WRITE_16, 0, 3, 0), &[]));
        assert!(lu.take_calls().is_empty());
        let r = run(&lu, &build::rw16(opcode::READ_16, 0, 17, 0), &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LBA_OUT_OF_RANGE);
    }

    #[test]
    fn out_of_range_and_overflowing_lbas() {
        let lu = MemLun::with_blocks(512, 16);
        for cdb in [
            build::rw16(opcode::READ_16, 0, 15, 2).to_vec(),
            build::rw16(opcode::READ_16, 0, u64::MAX, 1).to_vec(),
            build::rw16(opcode::READ_16, 0, 1 << 63, 1).to_vec(),
            build::rw10(opcode::WRITE_10, 0, 16, 1).to_vec(),
        ] {
            assert_sense(
                &run(&lu, &cdb, &[0; 512]),
                key::ILLEGAL_REQUEST,
                asc::LBA_OUT_OF_RANGE,
            );
        }
    }

    #[test]
    fn fua_and_write_cache_disabled_reach_the_lu() {
        let lu = MemLun::with_blocks(512, 16);
        let state = LunState::new();
        let cdb = build::rw10(opcode::WRITE_10, 0x08, 0, 1);
        assert_good(&execute(&state, &lu, &nexus(), &cdb, &[1; 512]));
        let plain = build::rw10(opcode::WRITE_10, 0, 0, 1);
        assert_good(&execute(&state, &lu, &nexus(), &plain, &[1; 512]));
        state.set_write_cache_enabled(false);
        assert_good(&execute(&state, &lu, &nexus(), &plain, &[1; 512]));
        let fuas: Vec<bool> = lu
            .take_calls()
            .into_iter()
            .filter_map(|c| match c {
                Call::Write { fua, .. } => Some(fua),
                _ => None,
            })
            .collect();
        assert_eq!(fuas, vec![true, false, true]);
    }

    #[test]
    fn short_data_out_is_refused_without_writing() {
        let lu = MemLun::with_blocks(512, 16);
        let r = run(&lu, &build::rw10(opcode::WRITE_10, 0, 0, 2), &[0; 700]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB);
        assert_eq!(r.sense.and_then(|s| s.field).map(|f| f.byte), Some(7));
        assert!(lu.take_calls().is_empty());
        // Longer data-out than the CDB names: the tail is ignored.
        assert_good(&run(
            &lu,
            &build::rw10(opcode::WRITE_10, 0, 0, 1),
            &[7; 1024],
        ));
        assert_eq!(lu.bytes(512, 512), vec![0; 512]);
    }

    #[test]
    fn read_only_lu_refuses_every_write_class_command() {
        let lu = MemLun::with_blocks(512, 16).with_read_only(true);
        let caw = build::compare_and_write(0, 1);
        let unmap = build::unmap(&[(0, 1)]);
        let ws = build::rw16(opcode::WRITE_SAME_16, 0x08, 0, 1);
        let cases: [(&[u8], &[u8]); 7] = [
            (&build::rw6(opcode::WRITE_6, 0, 1), &[0; 512]),
            (&build::rw10(opcode::WRITE_10, 0, 0, 1), &[0; 512]),
            (
                &build::rw16(opcode::WRITE_AND_VERIFY_16, 0, 0, 1),
                &[0; 512],
            ),
            (&caw, &[0; 1024]),
            (&build::unmap_cdb(unmap.len()), &unmap),
            (&ws, &[0; 512]),
            (&build::rw16(opcode::WRITE_16, 0, 1 << 40, 1), &[0; 512]),
        ];
        for (cdb, data) in cases {
            assert_sense(
                &run(&lu, cdb, data),
                key::DATA_PROTECT,
                asc::WRITE_PROTECTED,
            );
        }
        assert!(lu.take_calls().is_empty());
        assert_good(&run(&lu, &build::rw10(opcode::READ_10, 0, 0, 1), &[]));
        assert_good(&run(&lu, &build::sync_cache10(0, 0), &[]));
    }

    #[test]
    fn medium_errors_become_sense() {
        let lu = MemLun::with_blocks(512, 16);
        lu.set_fault(Some(MediumError::Io("boom".into())));
        let r = run(&lu, &build::rw10(opcode::READ_10, 0, 0, 1), &[]);
        assert_sense(&r, key::MEDIUM_ERROR, asc::UNRECOVERED_READ_ERROR);
        lu.set_fault(Some(MediumError::NoSpace));
        let r = run(&lu, &build::rw10(opcode::WRITE_10, 0, 0, 1), &[0; 512]);
        assert_sense(
            &r,
            key::DATA_PROTECT,
            asc::SPACE_ALLOCATION_FAILED_WRITE_PROTECT,
        );
        lu.set_fault(Some(MediumError::Gone));
        let r = run(&lu, &build::sync_cache10(0, 0), &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LOGICAL_UNIT_NOT_SUPPORTED);
    }

    #[test]
    fn write_and_verify_writes_durably() {
        let lu = MemLun::with_blocks(4096, 8);
        let data = pattern(4096, 9);
        assert_good(&run(
            &lu,
            &build::rw10(opcode::WRITE_AND_VERIFY_10, 0x02, 1, 1),
            &data,
        ));
        assert_eq!(lu.bytes(4096, 4096), data);
        assert!(lu.take_calls().contains(&Call::Write {
            offset_bytes: 4096,
            len_bytes: 4096,
            fua: true
        }));
    }

    #[test]
    fn synchronize_cache_flushes_and_checks_range() {
        let lu = MemLun::with_blocks(512, 16);
        assert_good(&run(&lu, &build::sync_cache10(0, 0), &[]));
        assert_good(&run(&lu, &build::sync_cache16(8, 8), &[]));
        let r = run(&lu, &build::sync_cache16(8, 9), &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::LBA_OUT_OF_RANGE);
        assert_eq!(lu.take_calls(), vec![Call::Flush, Call::Flush]);
    }

    #[test]
    fn simple_commands_and_request_sense() {
        let lu = MemLun::with_blocks(512, 16);
        for cdb in [
            vec![opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0],
            vec![opcode::START_STOP_UNIT, 0, 0, 0, 1, 0],
            vec![opcode::PREVENT_ALLOW_MEDIUM_REMOVAL, 0, 0, 0, 1, 0],
        ] {
            assert_good(&run(&lu, &cdb, &[]));
        }
        let r = run(&lu, &[opcode::REQUEST_SENSE, 0, 0, 0, 252, 0], &[]);
        assert_good(&r);
        assert_eq!(r.data_in.len(), 18);
        assert_eq!((r.data_in[0], r.data_in[2], r.data_in[12]), (0x70, 0, 0));
        let r = run(&lu, &[opcode::REQUEST_SENSE, 1, 0, 0, 252, 0], &[]);
        assert_eq!(r.data_in, vec![0x72, 0, 0, 0, 0, 0, 0, 0]);
        let r = run(&lu, &[opcode::REQUEST_SENSE, 0, 0, 0, 4, 0], &[]);
        assert_eq!(r.data_in.len(), 4);
    }

    #[test]
    fn unknown_opcodes_report_luns_and_broken_geometry() {
        let lu = MemLun::with_blocks(512, 16);
        let r = run(&lu, &[0x7e, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
        assert_sense(
            &r,
            key::ILLEGAL_REQUEST,
            asc::INVALID_COMMAND_OPERATION_CODE,
        );
        let r = run(&lu, &build::report_luns(64), &[]);
        assert_sense(
            &r,
            key::ILLEGAL_REQUEST,
            asc::INVALID_COMMAND_OPERATION_CODE,
        );
        // RESERVE(10): only the 6-byte SPC-2 form is supported.
        let r = run(&lu, &[0x56, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[]);
        assert_sense(
            &r,
            key::ILLEGAL_REQUEST,
            asc::INVALID_COMMAND_OPERATION_CODE,
        );
        let r = run(&lu, &[], &[]);
        assert_sense(
            &r,
            key::ILLEGAL_REQUEST,
            asc::INVALID_COMMAND_OPERATION_CODE,
        );
        let r = run(&lu, &[opcode::READ_16, 0, 0], &[]);
        assert_sense(&r, key::ILLEGAL_REQUEST, asc::INVALID_FIELD_IN_CDB);
        let broken = MemLun::with_geometry(
            Geometry {
                block_size_bytes: 0,
                block_count: 0,
                physical_block_size_bytes: 0,
                read_only: false,
            },
            crate::mem_lun::test_identity(),
        );
        let r = run(&broken, &build::rw10(opcode::READ_10, 0, 0, 1), &[]);
        assert_sense(&r, key::HARDWARE_ERROR, asc::INTERNAL_TARGET_FAILURE);
    }

    #[test]
    fn inquiry_mode_capacity_and_maintenance_dispatch() {
        let lu = MemLun::with_blocks(512, 16);
        let r = run(&lu, &build::inquiry(false, 0, 36), &[]);
        assert_eq!(r.data_in.len(), 36);
        let r = run(&lu, &build::inquiry(true, 0xb0, 0xffff), &[]);
        assert_eq!(r.data_in.len(), 64);
        let r = run(&lu, &[opcode::MODE_SENSE_6, 0, 0x3f, 0, 255, 0], &[]);
        assert_good(&r);
        let r = run(
            &lu,
            &[opcode::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            &[],
        );
        assert_eq!(r.data_in, vec![0, 0, 0, 15, 0, 0, 2, 0]);
        let r = run(&lu, &build::service_action_in(0x10, 0, 32), &[]);
        assert_eq!(r.data_in.len(), 32);
        let r = run(&lu, &build::maintenance_in(0x0a, 0, 0x1000), &[]);
        assert_eq!(r.data_in.len(), 4 + 8 + 2 * 4, "one group, two ports");
        let r = run(&lu, &build::maintenance_in(0x0c, 0, 0x1000), &[]);
        assert_good(&r);
    }
}
