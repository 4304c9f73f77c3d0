//! PERSISTENT RESERVE OUT (SPC-4 6.17), RESERVE(6) and RELEASE(6) (SPC-2 7.21, 7.17): the
//! CDB's scope and type and the parameter list are checked here, then the service action runs
//! on the LU's reservations as a read-modify-write of its stored record, under the exclusive
//! reservation lock, and the unit attentions it establishes are queued before that lock is
//! released.
//!
//! Order of checks: a RESERVE(6) reservation held by anyone (RESERVATION CONFLICT, SPC-2
//! 5.5.1), the parameter list (PARAMETER LIST LENGTH ERROR, INVALID FIELD IN PARAMETER LIST),
//! the CDB's SCOPE and TYPE (INVALID FIELD IN CDB), then the service action's own rules
//! (RESERVATION CONFLICT for an unregistered nexus or a wrong key).
//!
//! APTPL is taken from REGISTER, REGISTER AND IGNORE EXISTING KEY and REGISTER AND MOVE and
//! kept in the record (PTPL_C=1); whoever owns the store drops a record without it at
//! power-on. Not supported, and refused as SPC-4 says when a capability bit is zero: SPEC_I_PT
//! (SIP_C=0), REPLACE LOST RESERVATION.
//! PREEMPT AND ABORT preempts like PREEMPT; aborting the preempted nexuses' tasks is left to
//! the transport, which today does not (their commands still running finish; every later one
//! meets RESERVATION CONFLICT).

use crate::block_io::data_out_prefix;
use crate::lun::{Identity, LunState};
use crate::nexus::{parse_transport_id, Nexus, TRANSPORT_ID_MAX_BYTES};
use crate::opcode;
use crate::reservations::{Access, Refusal, ReservationType, MOVE_DESTINATION_AT};
use crate::sense::{asc, Response, Sense};

/// Every parameter list but REGISTER AND MOVE's is exactly this long without SPEC_I_PT.
const BASIC_PARAMETER_LIST_LEN_BYTES: u32 = 24;
/// Byte 20 of the basic parameter list: SPEC_I_PT, ALL_TG_PT, APTPL.
const FLAGS_AT: usize = 20;
const SPEC_I_PT: u8 = 0x08;
const ALL_TG_PT: u8 = 0x04;
const APTPL: u8 = 0x01;
/// REGISTER AND MOVE parameter list: byte 17 UNREG and APTPL, bytes 18..20 the relative
/// target port, 20..24 the TransportID's length, the TransportID from 24.
const MOVE_FLAGS_AT: usize = 17;
const MOVE_UNREGISTER: u8 = 0x02;
const MOVE_TARGET_PORT_AT: u16 = 18;
const MOVE_TRANSPORT_ID_LEN_AT: u16 = 20;
/// CDB byte 2: SCOPE (bits 7..4) and TYPE (bits 3..0); LU_SCOPE is the only scope.
const SCOPE_TYPE_AT: u16 = 2;
const SCOPE_LU: u8 = 0x0;
/// CDB bytes 5..9: PARAMETER LIST LENGTH.
const PARAMETER_LIST_LENGTH_AT: u16 = 5;

/// PERSISTENT RESERVE OUT's CDB fields.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ProutRequest {
    pub service_action: u16,
    pub scope: u8,
    pub kind: u8,
    pub parameter_len: u32,
}

/// The parameter list: RESERVATION KEY, SERVICE ACTION RESERVATION KEY, and for REGISTER AND
/// MOVE where the reservation goes.
#[derive(Debug)]
struct Parameters {
    key: u64,
    service_action_key: u64,
    all_target_ports: bool,
    /// The APTPL bit of the service actions it is valid for (the REGISTER family and
    /// REGISTER AND MOVE); `None` for the others, which ignore it.
    aptpl: Option<bool>,
    destination: Option<Move>,
}

#[derive(Debug)]
struct Move {
    nexus: Nexus,
    unregister_source: bool,
}

/// Run PERSISTENT RESERVE OUT for `nexus`: a read-modify-write of the LU's reservation
/// record ([`LunState::update_reservations`]); every check runs again on each try, against
/// the record as loaded.
pub(crate) fn persistent_reserve_out(
    state: &LunState,
    identity: &Identity,
    nexus: &Nexus,
    request: ProutRequest,
    data_out: &[u8],
) -> Response {
    let result = state.update_reservations(|reservations, attentions| {
        if reservations.conflicts(nexus, Access::PersistentReserve) {
            return Err(Refusal::Conflict);
        }
        let parameters = parse_parameters(request, identity, nexus, data_out)?;
        let kind = check_scope_and_type(request)?;
        let key = parameters.key;
        let new_key = parameters.service_action_key;
        match (request.service_action, kind, parameters.destination) {
            (opcode::SA_REGISTER | opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY, _, _) => {
                let ports = target_ports(identity, nexus);
                reservations.register(
                    nexus,
                    key,
                    new_key,
                    request.service_action == opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY,
                    parameters.all_target_ports.then_some(ports.as_slice()),
                    attentions,
                )?;
            }
            (opcode::SA_RESERVE, Some(kind), _) => reservations.reserve(nexus, key, kind)?,
            (opcode::SA_RELEASE, _, _) => {
                reservations.release(nexus, key, request.kind, attentions)?;
            }
            (opcode::SA_CLEAR, _, _) => reservations.clear(nexus, key, attentions)?,
            (opcode::SA_PREEMPT | opcode::SA_PREEMPT_AND_ABORT, Some(kind), _) => {
                let _preempted = reservations.preempt(nexus, key, new_key, kind, attentions)?;
            }
            (opcode::SA_REGISTER_AND_MOVE, Some(_), Some(destination)) => reservations
                .register_and_move(
                    nexus,
                    key,
                    new_key,
                    destination.nexus,
                    destination.unregister_source,
                )?,
            // `check_scope_and_type` gives a type to every service action that uses one, and
            // `parse_parameters` a destination to REGISTER AND MOVE.
            _ => {
                return Err(Refusal::Check(Sense::illegal_request(
                    asc::INVALID_FIELD_IN_CDB,
                )))
            }
        }
        // The last valid APTPL bit received is the one that counts: a service action that
        // carries one and succeeded sets it.
        if let Some(aptpl) = parameters.aptpl {
            reservations.set_aptpl(aptpl);
        }
        Ok(())
    });
    match result {
        Ok(()) => Response::good(Vec::new()),
        Err(refusal) => refusal.into(),
    }
}

/// RESERVE(6) and RELEASE(6) for `nexus`: a read-modify-write of the LU's record, like
/// PERSISTENT RESERVE OUT, so every process serving the LU enforces the reservation.
pub(crate) fn reserve_release_6(state: &LunState, nexus: &Nexus, reserve: bool) -> Response {
    let result = state.update_reservations(|reservations, _| {
        if reserve {
            reservations.reserve6(nexus)
        } else {
            reservations.release6(nexus)
        }
    });
    match result {
        Ok(()) => Response::good(Vec::new()),
        Err(refusal) => refusal.into(),
    }
}

/// Every target port of the logical unit, for ALL_TG_PT: the group's and the nexus's own.
fn target_ports(identity: &Identity, nexus: &Nexus) -> Vec<u16> {
    let mut ports = identity.group_ports.clone();
    for port in [identity.relative_target_port, nexus.relative_target_port] {
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
    ports
}

/// The reservation type of the service actions that take one (RESERVE, PREEMPT, PREEMPT AND
/// ABORT, REGISTER AND MOVE), after checking SCOPE for those and RELEASE. REGISTER, REGISTER
/// AND IGNORE EXISTING KEY and CLEAR ignore both fields; RELEASE compares TYPE with the
/// reservation's itself.
fn check_scope_and_type(request: ProutRequest) -> Result<Option<ReservationType>, Sense> {
    let uses_type = matches!(
        request.service_action,
        opcode::SA_RESERVE
            | opcode::SA_PREEMPT
            | opcode::SA_PREEMPT_AND_ABORT
            | opcode::SA_REGISTER_AND_MOVE
    );
    if !uses_type && request.service_action != opcode::SA_RELEASE {
        return Ok(None);
    }
    if request.scope != SCOPE_LU {
        return Err(Sense::invalid_cdb_field(SCOPE_TYPE_AT, Some(7)));
    }
    if !uses_type {
        return Ok(None);
    }
    ReservationType::from_code(request.kind)
        .map(Some)
        .ok_or_else(|| Sense::invalid_cdb_field(SCOPE_TYPE_AT, Some(3)))
}

fn parse_parameters(
    request: ProutRequest,
    identity: &Identity,
    nexus: &Nexus,
    data_out: &[u8],
) -> Result<Parameters, Sense> {
    if request.parameter_len < BASIC_PARAMETER_LIST_LEN_BYTES {
        return Err(Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR));
    }
    let head = data_out_prefix(
        data_out,
        u64::from(BASIC_PARAMETER_LIST_LEN_BYTES),
        Some(PARAMETER_LIST_LENGTH_AT),
    )?;
    let key = be64(head, 0);
    let service_action_key = be64(head, 8);
    if request.service_action == opcode::SA_REGISTER_AND_MOVE {
        let destination = parse_move(request, identity, nexus, head, data_out)?;
        return Ok(Parameters {
            key,
            service_action_key,
            all_target_ports: false,
            aptpl: Some(head[MOVE_FLAGS_AT] & APTPL != 0),
            destination: Some(destination),
        });
    }
    let flags = head[FLAGS_AT];
    if flags & SPEC_I_PT != 0 {
        return Err(parameter_bit(FLAGS_AT, 3));
    }
    if request.parameter_len != BASIC_PARAMETER_LIST_LEN_BYTES {
        return Err(Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR));
    }
    let registers = matches!(
        request.service_action,
        opcode::SA_REGISTER | opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY
    );
    // ALL_TG_PT and APTPL mean something to the register service actions only; the others
    // ignore them (SPC-4 6.17.3).
    Ok(Parameters {
        key,
        service_action_key,
        all_target_ports: registers && flags & ALL_TG_PT != 0,
        aptpl: registers.then_some(flags & APTPL != 0),
        destination: None,
    })
}

/// REGISTER AND MOVE's destination: an iSCSI initiator port (TransportID format 01b) through
/// one of the logical unit's target ports.
fn parse_move(
    request: ProutRequest,
    identity: &Identity,
    nexus: &Nexus,
    head: &[u8],
    data_out: &[u8],
) -> Result<Move, Sense> {
    let flags = head[MOVE_FLAGS_AT];
    let port = u16::from_be_bytes([head[18], head[19]]);
    if !target_ports(identity, nexus).contains(&port) {
        return Err(Sense::invalid_parameter_field(MOVE_TARGET_PORT_AT));
    }
    let id_len = u32::from_be_bytes([head[20], head[21], head[22], head[23]]);
    if u64::from(id_len) > TRANSPORT_ID_MAX_BYTES as u64 {
        return Err(Sense::invalid_parameter_field(MOVE_TRANSPORT_ID_LEN_AT));
    }
    let end = BASIC_PARAMETER_LIST_LEN_BYTES + id_len;
    if request.parameter_len < end {
        return Err(Sense::illegal_request(asc::PARAMETER_LIST_LENGTH_ERROR));
    }
    let list = data_out_prefix(data_out, u64::from(end), Some(PARAMETER_LIST_LENGTH_AT))?;
    let at = BASIC_PARAMETER_LIST_LEN_BYTES as usize;
    let initiator_port = parse_transport_id(&list[at..])
        .map_err(|offset| Sense::invalid_parameter_field(MOVE_DESTINATION_AT + offset))?;
    Ok(Move {
        nexus: Nexus::new(initiator_port, port),
        unregister_source: flags & MOVE_UNREGISTER != 0,
    })
}

fn be64(bytes: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&bytes[at..at + 8]);
    u64::from_be_bytes(b)
}

/// INVALID FIELD IN PARAMETER LIST pointing at one bit.
fn parameter_bit(byte: usize, bit: u8) -> Sense {
    // Parameter list offsets here are below 24.
    let byte = u16::try_from(byte).unwrap_or(u16::MAX);
    Sense::illegal_request(asc::INVALID_FIELD_IN_PARAMETER_LIST).at_field(false, byte, Some(bit))
}

impl From<Refusal> for Response {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Conflict => Response::reservation_conflict(),
            Refusal::Check(sense) => Response::check(sense),
        }
    }
}
