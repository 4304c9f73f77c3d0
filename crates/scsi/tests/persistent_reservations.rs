//! Persistent reservations and RESERVE(6) through the public API, as a transport drives them:
//! two or three I_T nexuses sharing one `LunState` over a `MemLun`, each command through
//! `execute`, unit attentions through `LunState::unit_attention`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use weft_scsi::build;
use weft_scsi::opcode;
use weft_scsi::sense::{asc, key};
use weft_scsi::{
    execute, LunState, MemLun, MemReservationStore, Nexus, RecordNews, RecordVersion,
    ReservationRecord, ReservationStore, Response, Status, StoreError,
};

const WE: u8 = 0x1;
const EA: u8 = 0x3;
const WE_RO: u8 = 0x5;
const EA_RO: u8 = 0x6;
const WE_AR: u8 = 0x7;
const EA_AR: u8 = 0x8;
const ALL_TYPES: [u8; 6] = [WE, EA, WE_RO, EA_RO, WE_AR, EA_AR];

/// One logical unit and the nexuses that reach it.
struct Lu {
    state: LunState,
    lu: MemLun,
}

fn host(name: &str, port: u16) -> Nexus {
    Nexus::iscsi(
        &format!("iqn.2024-01.test:{name}"),
        [0x80, 0, 0, 0, 0, 1],
        port,
    )
}

impl Lu {
    fn new() -> Lu {
        Lu {
            state: LunState::new(),
            lu: MemLun::with_blocks(512, 64),
        }
    }

    /// The LU as another process serving it sees it: its own state over `store`.
    fn over(store: Arc<dyn ReservationStore>) -> Lu {
        Lu {
            state: LunState::with_reservation_store(store),
            lu: MemLun::with_blocks(512, 64),
        }
    }

    /// The same, for a process that serves the LU through the target ports `ports` only.
    fn through(store: Arc<dyn ReservationStore>, ports: &[u16]) -> Lu {
        Lu {
            state: LunState::with_reservation_store(store).with_local_ports(ports.to_vec()),
            lu: MemLun::with_blocks(512, 64),
        }
    }

    fn run(&self, nexus: &Nexus, cdb: &[u8], data_out: &[u8]) -> Response {
        execute(&self.state, &self.lu, nexus, cdb, data_out)
    }

    /// A command as a transport sends it: a pending unit attention first.
    fn send(&self, nexus: &Nexus, cdb: &[u8], data_out: &[u8]) -> Response {
        self.state
            .unit_attention(nexus, cdb)
            .unwrap_or_else(|| self.run(nexus, cdb, data_out))
    }

    fn prout(&self, nexus: &Nexus, sa: u16, kind: u8, key: u64, sark: u64) -> Response {
        self.prout_flags(nexus, sa, kind, key, sark, 0)
    }

    fn prout_flags(
        &self,
        nexus: &Nexus,
        sa: u16,
        kind: u8,
        key: u64,
        sark: u64,
        flags: u8,
    ) -> Response {
        let cdb = build::persistent_reserve_out(sa, kind, 24);
        self.run(nexus, &cdb, &build::prout_parameters(key, sark, flags))
    }

    fn register(&self, nexus: &Nexus, key: u64) {
        good(&self.prout(nexus, opcode::SA_REGISTER, 0, 0, key));
    }

    fn reserve(&self, nexus: &Nexus, key: u64, kind: u8) -> Response {
        self.prout(nexus, opcode::SA_RESERVE, kind, key, 0)
    }

    fn prin(&self, nexus: &Nexus, sa: u16) -> Vec<u8> {
        let r = self.run(nexus, &build::persistent_reserve_in(sa, 0x4000), &[]);
        good(&r);
        r.data_in
    }

    /// PRgeneration and the keys READ KEYS lists.
    fn keys(&self, nexus: &Nexus) -> (u32, Vec<u64>) {
        let d = self.prin(nexus, opcode::SA_READ_KEYS);
        let keys = d[8..]
            .chunks(8)
            .map(|k| u64::from_be_bytes(k.try_into().expect("8 bytes")))
            .collect();
        (be32(&d[0..4]), keys)
    }

    /// The key and type READ RESERVATION reports, if reserved.
    fn reservation(&self, nexus: &Nexus) -> Option<(u64, u8)> {
        let d = self.prin(nexus, opcode::SA_READ_RESERVATION);
        (be32(&d[4..8]) == 16).then(|| {
            (
                u64::from_be_bytes(d[8..16].try_into().expect("8 bytes")),
                d[21] & 0x0f,
            )
        })
    }

    fn read(&self, nexus: &Nexus) -> Response {
        self.run(nexus, &build::rw10(opcode::READ_10, 0, 1, 1), &[])
    }

    fn write(&self, nexus: &Nexus) -> Response {
        self.run(nexus, &build::rw10(opcode::WRITE_10, 0, 1, 1), &[7; 512])
    }

    fn tur(&self, nexus: &Nexus) -> Response {
        self.send(nexus, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0], &[])
    }
}

fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b.try_into().expect("4 bytes"))
}

#[track_caller]
fn good(r: &Response) {
    assert_eq!((r.status, &r.sense), (Status::Good, &None), "{r:?}");
}

#[track_caller]
fn conflict(r: &Response) {
    assert_eq!(r.status, Status::ReservationConflict, "{r:?}");
    assert!(r.sense.is_none() && r.data_in.is_empty());
}

#[track_caller]
fn check(r: &Response, sense_key: u8, code: (u8, u8)) {
    assert_eq!(r.status, Status::CheckCondition, "{r:?}");
    let s = r.sense.as_ref().expect("sense");
    assert_eq!((s.key, (s.asc, s.ascq)), (sense_key, code), "{s:?}");
}

#[test]
fn register_read_keys_and_generation() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 1));
    assert_eq!(lu.keys(&a), (0, vec![]));
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    assert_eq!(lu.keys(&a), (2, vec![0xa, 0xb]));
    // Re-registering with the wrong key conflicts (libiscsi ProutRegister.Simple).
    conflict(&lu.prout(&a, opcode::SA_REGISTER, 0, 0, 0xc));
    good(&lu.prout(&a, opcode::SA_REGISTER, 0, 0xa, 0xc));
    good(&lu.prout(
        &b,
        opcode::SA_REGISTER_AND_IGNORE_EXISTING_KEY,
        0,
        0x999,
        0xd,
    ));
    assert_eq!(lu.keys(&b), (4, vec![0xc, 0xd]));
    good(&lu.prout(&a, opcode::SA_REGISTER, 0, 0xc, 0));
    assert_eq!(lu.keys(&b), (5, vec![0xd]));
    // READ KEYS cut to 8 bytes keeps the full ADDITIONAL LENGTH.
    let r = lu.run(
        &a,
        &build::persistent_reserve_in(opcode::SA_READ_KEYS, 8),
        &[],
    );
    assert_eq!((r.data_in.len(), be32(&r.data_in[4..8])), (8, 8));
}

#[test]
fn reserve_and_release_every_type() {
    let lu = Lu::new();
    let a = host("a", 1);
    lu.register(&a, 0xa);
    for kind in ALL_TYPES {
        good(&lu.reserve(&a, 0xa, kind));
        let key = if kind == WE_AR || kind == EA_AR {
            0
        } else {
            0xa
        };
        assert_eq!(lu.reservation(&a), Some((key, kind)));
        good(&lu.prout(&a, opcode::SA_RELEASE, kind, 0xa, 0));
        assert_eq!(lu.reservation(&a), None);
    }
    assert_eq!(
        lu.keys(&a).0,
        1,
        "RESERVE and RELEASE leave PRgeneration alone"
    );
}

#[test]
fn report_capabilities_and_full_status() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 2));
    let caps = lu.prin(&a, opcode::SA_REPORT_CAPABILITIES);
    assert_eq!(caps, vec![0, 8, 0x05, 0xb0, 0xea, 0x01, 0, 0]);
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    good(&lu.reserve(&b, 0xb, WE_RO));
    let d = lu.prin(&a, opcode::SA_READ_FULL_STATUS);
    assert_eq!(be32(&d[4..8]) as usize, d.len() - 8);
    let first = &d[8..];
    let id_len = be32(&first[20..24]) as usize;
    assert_eq!((first[12], first[13]), (0, 0), "a does not hold it");
    assert_eq!(first[24], 0x45, "iSCSI TransportID, format 01b");
    let name = &first[28..28 + a.initiator_port.len()];
    assert_eq!(name, a.initiator_port.as_bytes());
    let second = &first[24 + id_len..];
    assert_eq!(&second[0..8], &0xbu64.to_be_bytes());
    assert_eq!((second[12], second[13]), (0x01, WE_RO), "R_HOLDER, type");
    assert_eq!(u16::from_be_bytes([second[18], second[19]]), 2);
}

/// libiscsi's ProutReserve.Access* matrix: what a registered and an unregistered second
/// initiator may do under each type.
#[test]
fn access_under_each_reservation_type() {
    // (type, registered reads, registered writes, unregistered reads, unregistered writes)
    let matrix = [
        (WE, true, false, true, false),
        (EA, false, false, false, false),
        (WE_RO, true, true, true, false),
        (EA_RO, true, true, false, false),
        (WE_AR, true, true, true, false),
        (EA_AR, true, true, false, false),
    ];
    for (kind, reg_read, reg_write, unreg_read, unreg_write) in matrix {
        let lu = Lu::new();
        let (a, b, c) = (host("a", 1), host("b", 1), host("c", 2));
        lu.register(&a, 0xa);
        lu.register(&b, 0xb);
        good(&lu.reserve(&a, 0xa, kind));
        good(&lu.read(&a));
        good(&lu.write(&a));
        let expect = |r: Response, allowed: bool| {
            if allowed {
                good(&r);
            } else {
                conflict(&r);
            }
        };
        expect(lu.read(&b), reg_read);
        expect(lu.write(&b), reg_write);
        expect(lu.read(&c), unreg_read);
        expect(lu.write(&c), unreg_write);
        // Always allowed: status and identity.
        good(&lu.run(&c, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0], &[]));
        good(&lu.run(&c, &build::inquiry(false, 0, 96), &[]));
        good(&lu.run(&c, &build::service_action_in(0x10, 0, 32), &[]));
        good(&lu.run(&c, &[opcode::REQUEST_SENSE, 0, 0, 0, 18, 0], &[]));
        good(&lu.run(&c, &build::maintenance_in(0x0a, 0, 256), &[]));
        good(&lu.run(&c, &build::persistent_reserve_in(0, 64), &[]));
        // Reads of state pass where reads do; writes of state where writes do.
        let mode_sense = [opcode::MODE_SENSE_6, 0, 0x3f, 0, 255, 0];
        expect(lu.run(&c, &mode_sense, &[]), unreg_read);
        expect(lu.run(&c, &build::sync_cache10(0, 0), &[]), unreg_write);
        expect(
            lu.run(&c, &[opcode::START_STOP_UNIT, 0, 0, 0, 0, 0], &[]),
            unreg_write,
        );
        good(&lu.run(&c, &[opcode::START_STOP_UNIT, 0, 0, 0, 1, 0], &[]));
        let unmap = build::unmap(&[(0, 1)]);
        expect(
            lu.run(&b, &build::unmap_cdb(unmap.len()), &unmap),
            reg_write,
        );
        // RESERVE from anyone else conflicts, but every registrant holds an all-registrants
        // reservation already.
        if kind == WE_AR || kind == EA_AR {
            good(&lu.reserve(&b, 0xb, kind));
        } else {
            conflict(&lu.reserve(&b, 0xb, kind));
        }
    }
}

/// libiscsi's ProutReserve.Ownership*: the holder unregistering releases a single-holder
/// reservation; an all-registrants one stays with the remaining registrant.
#[test]
fn holder_unregistering() {
    for kind in ALL_TYPES {
        let lu = Lu::new();
        let (a, b) = (host("a", 1), host("b", 1));
        lu.register(&a, 0xa);
        lu.register(&b, 0xb);
        good(&lu.reserve(&a, 0xa, kind));
        good(&lu.prout(&a, opcode::SA_REGISTER, 0, 0xa, 0));
        let shared = kind == WE_AR || kind == EA_AR;
        if shared {
            assert_eq!(lu.reservation(&a), Some((0, kind)));
            good(&lu.write(&b));
            good(&lu.prout(&b, opcode::SA_RELEASE, kind, 0xb, 0));
        } else {
            assert_eq!(lu.reservation(&a), None);
        }
        // Registrants-only: b hears the reservation went.
        let told = lu.tur(&b);
        if kind == WE_RO || kind == EA_RO {
            check(&told, key::UNIT_ATTENTION, asc::RESERVATIONS_RELEASED);
            good(&lu.tur(&b));
        } else {
            good(&told);
        }
    }
}

#[test]
fn release_rules() {
    let lu = Lu::new();
    let (a, b, c) = (host("a", 1), host("b", 1), host("c", 1));
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    good(&lu.prout(&a, opcode::SA_RELEASE, EA, 0xa, 0)); // nothing reserved: GOOD
    good(&lu.reserve(&a, 0xa, EA_RO));
    good(&lu.prout(&b, opcode::SA_RELEASE, EA_RO, 0xb, 0)); // not the holder: GOOD, no-op
    assert!(lu.reservation(&a).is_some());
    conflict(&lu.prout(&c, opcode::SA_RELEASE, EA_RO, 0, 0));
    conflict(&lu.prout(&a, opcode::SA_RELEASE, EA_RO, 0xb, 0));
    check(
        &lu.prout(&a, opcode::SA_RELEASE, WE_RO, 0xa, 0),
        key::ILLEGAL_REQUEST,
        asc::INVALID_RELEASE_OF_PERSISTENT_RESERVATION,
    );
    good(&lu.prout(&a, opcode::SA_RELEASE, EA_RO, 0xa, 0));
    check(&lu.tur(&b), key::UNIT_ATTENTION, asc::RESERVATIONS_RELEASED);
    good(&lu.tur(&a));
    good(&lu.tur(&c));
}

/// libiscsi's ProutClear.Simple: CLEAR removes everything and counts once.
#[test]
fn clear_removes_everything() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 1));
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    good(&lu.reserve(&a, 0xa, EA));
    let before = lu.keys(&a).0;
    conflict(&lu.prout(&host("c", 1), opcode::SA_CLEAR, 0, 0, 0));
    good(&lu.prout(&b, opcode::SA_CLEAR, 0, 0xb, 0));
    assert_eq!(lu.keys(&a), (before + 1, vec![]));
    assert_eq!(lu.reservation(&a), None);
    check(
        &lu.tur(&a),
        key::UNIT_ATTENTION,
        asc::RESERVATIONS_PREEMPTED,
    );
    good(&lu.tur(&b));
}

/// libiscsi's ProutPreempt.RemoveRegistration, then preempting a holder.
#[test]
fn preempt_removes_registrations_and_takes_the_reservation() {
    let lu = Lu::new();
    let (a, b, c) = (host("a", 1), host("b", 2), host("c", 1));
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    let gen = lu.keys(&a).0;
    good(&lu.prout(&b, opcode::SA_PREEMPT, EA, 0xb, 0xa));
    check(
        &lu.tur(&a),
        key::UNIT_ATTENTION,
        asc::REGISTRATIONS_PREEMPTED,
    );
    good(&lu.tur(&a));
    good(&lu.tur(&b));
    assert_eq!(lu.keys(&a), (gen + 1, vec![0xb]));
    assert_eq!(lu.reservation(&a), None, "nothing was reserved");

    // A fence: c holds Write Exclusive, b preempts c's key and takes Exclusive Access.
    lu.register(&c, 0xc);
    good(&lu.reserve(&c, 0xc, WE));
    good(&lu.write(&c));
    conflict(&lu.prout(&b, opcode::SA_PREEMPT, EA, 0xb, 0x77)); // nobody has 0x77
    check(
        &lu.prout(&b, opcode::SA_PREEMPT, EA, 0xb, 0),
        key::ILLEGAL_REQUEST,
        asc::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    good(&lu.prout(&b, opcode::SA_PREEMPT_AND_ABORT, EA, 0xb, 0xc));
    assert_eq!(lu.reservation(&a), Some((0xb, EA)));
    // INQUIRY passes a pending unit attention by; the next other command reports it.
    let inquiry = build::inquiry(false, 0, 36);
    good(&lu.send(&c, &inquiry, &[]));
    let write = build::rw10(opcode::WRITE_10, 0, 1, 1);
    check(
        &lu.send(&c, &write, &[1; 512]),
        key::UNIT_ATTENTION,
        asc::REGISTRATIONS_PREEMPTED,
    );
    conflict(&lu.send(&c, &write, &[1; 512]));
    good(&lu.write(&b));
    // An unregistered nexus may not preempt.
    conflict(&lu.prout(&c, opcode::SA_PREEMPT, EA, 0, 0xb));
}

#[test]
fn request_sense_reports_and_clears_a_pending_unit_attention() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 1));
    lu.register(&a, 0xa);
    lu.register(&b, 0xb);
    good(&lu.prout(&b, opcode::SA_CLEAR, 0, 0xb, 0));
    let request_sense = [opcode::REQUEST_SENSE, 0, 0, 0, 18, 0];
    let r = lu.send(&a, &request_sense, &[]);
    good(&r);
    assert_eq!(
        (r.data_in[2], r.data_in[12], r.data_in[13]),
        (key::UNIT_ATTENTION, 0x2a, 0x03)
    );
    good(&lu.tur(&a));
    let r = lu.send(&a, &request_sense, &[]);
    assert_eq!(r.data_in[2], key::NO_SENSE);
}

#[test]
fn all_target_ports_registers_the_initiator_on_every_path() {
    let lu = Lu::new();
    // MemLun's identity has ports 1 and 2.
    let (a1, a2, b) = (host("a", 1), host("a", 2), host("b", 1));
    good(&lu.prout_flags(&a1, opcode::SA_REGISTER, 0, 0, 0xa, 0x04));
    assert_eq!(
        lu.keys(&b).1,
        vec![0xa, 0xa],
        "one registration per I_T nexus"
    );
    good(&lu.reserve(&a1, 0xa, EA));
    good(&lu.write(&a2));
    conflict(&lu.write(&b));
    let d = lu.prin(&b, opcode::SA_READ_FULL_STATUS);
    assert_eq!(d[8 + 12], 0x02 | 0x01, "ALL_TG_PT, R_HOLDER");
}

#[test]
fn register_and_move_hands_over_the_reservation() {
    let lu = Lu::new();
    let (a, c) = (host("a", 1), host("c", 2));
    lu.register(&a, 0xa);
    good(&lu.reserve(&a, 0xa, EA));
    let list = build::register_and_move_parameters(0xa, 0xc, true, 2, &c.initiator_port);
    let cdb = build::persistent_reserve_out(
        opcode::SA_REGISTER_AND_MOVE,
        EA,
        u32::try_from(list.len()).expect("short"),
    );
    good(&lu.run(&a, &cdb, &list));
    assert_eq!(lu.reservation(&a), Some((0xc, EA)));
    assert_eq!(lu.keys(&a).1, vec![0xc], "a unregistered itself");
    good(&lu.write(&c));
    conflict(&lu.write(&a));
    // Only the holder may move it, to somebody else, through a port the LU has.
    lu.register(&a, 0xa);
    conflict(&lu.run(&a, &cdb, &list));
    let to_self = build::register_and_move_parameters(0xc, 0xd, false, 2, &c.initiator_port);
    check(
        &lu.run(&c, &cdb, &to_self),
        key::ILLEGAL_REQUEST,
        asc::INVALID_FIELD_IN_PARAMETER_LIST,
    );
    let bad_port = build::register_and_move_parameters(0xc, 0xa, false, 9, &a.initiator_port);
    check(
        &lu.run(&c, &cdb, &bad_port),
        key::ILLEGAL_REQUEST,
        asc::INVALID_FIELD_IN_PARAMETER_LIST,
    );
}

#[test]
fn malformed_commands_and_parameter_lists() {
    let lu = Lu::new();
    let a = host("a", 1);
    let list = build::prout_parameters(0, 0xa, 0);
    let with_len = |sa, kind, len| build::persistent_reserve_out(sa, kind, len);
    let illegal = |r: Response, code| check(&r, key::ILLEGAL_REQUEST, code);
    // Parameter list length other than 24.
    illegal(
        lu.run(&a, &with_len(opcode::SA_REGISTER, 0, 20), &list[..20]),
        asc::PARAMETER_LIST_LENGTH_ERROR,
    );
    illegal(
        lu.run(&a, &with_len(opcode::SA_REGISTER, 0, 0), &[]),
        asc::PARAMETER_LIST_LENGTH_ERROR,
    );
    let long = [list.clone(), vec![0; 8]].concat();
    illegal(
        lu.run(&a, &with_len(opcode::SA_REGISTER, 0, 32), &long),
        asc::PARAMETER_LIST_LENGTH_ERROR,
    );
    // Less data-out than the CDB promises.
    illegal(
        lu.run(&a, &with_len(opcode::SA_REGISTER, 0, 24), &list[..10]),
        asc::INVALID_FIELD_IN_CDB,
    );
    // SPEC_I_PT is not supported.
    let r = lu.prout_flags(&a, opcode::SA_REGISTER, 0, 0, 0xa, 0x08);
    illegal(r, asc::INVALID_FIELD_IN_PARAMETER_LIST);
    assert_eq!(lu.keys(&a), (0, vec![]), "nothing registered");
    lu.register(&a, 0xa);
    // Scope other than LU, reserved types.
    let mut cdb = with_len(opcode::SA_RESERVE, EA, 24);
    cdb[2] |= 0x10;
    illegal(
        lu.run(&a, &cdb, &build::prout_parameters(0xa, 0, 0)),
        asc::INVALID_FIELD_IN_CDB,
    );
    for kind in [0, 2, 4, 9, 0xf] {
        illegal(lu.reserve(&a, 0xa, kind), asc::INVALID_FIELD_IN_CDB);
    }
    // Unknown service actions: INVALID FIELD IN CDB, not INVALID OPERATION CODE.
    for sa in [4, 0x1f] {
        let r = lu.run(&a, &build::persistent_reserve_in(sa, 64), &[]);
        illegal(r, asc::INVALID_FIELD_IN_CDB);
    }
    let r = lu.run(&a, &with_len(8, 0, 24), &build::prout_parameters(0xa, 0, 0));
    illegal(r, asc::INVALID_FIELD_IN_CDB);
}

/// libiscsi's Reserve6 family: RESERVE(6)/RELEASE(6) between two initiators, and what frees
/// the reservation.
#[test]
fn reserve6_between_two_initiators() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 1));
    good(&lu.run(&a, &build::reserve6(), &[]));
    good(&lu.run(&a, &build::reserve6(), &[]));
    conflict(&lu.run(&b, &build::reserve6(), &[]));
    good(&lu.run(&b, &build::release6(), &[]));
    let mode_sense = [opcode::MODE_SENSE_6, 0, 0x3f, 0, 255, 0];
    good(&lu.run(&a, &mode_sense, &[]));
    conflict(&lu.run(&b, &mode_sense, &[]));
    conflict(&lu.run(&b, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0], &[]));
    good(&lu.run(&b, &build::inquiry(false, 0, 36), &[]));
    // Persistent reservation commands conflict for everyone while it is held.
    conflict(&lu.run(&a, &build::persistent_reserve_in(0, 64), &[]));
    conflict(&lu.prout(&a, opcode::SA_REGISTER, 0, 0, 0xa));
    good(&lu.run(&a, &build::release6(), &[]));
    good(&lu.run(&b, &build::reserve6(), &[]));
    lu.state.nexus_lost(&b).expect("nexus lost");
    good(&lu.run(&a, &build::reserve6(), &[]));
    lu.state.logical_unit_reset().expect("reset");
    good(&lu.run(&b, &build::reserve6(), &[]));
    good(&lu.run(&b, &build::release6(), &[]));
    // And RESERVE(6)/RELEASE(6) conflict while anyone is registered.
    lu.register(&a, 0xa);
    conflict(&lu.run(&b, &build::reserve6(), &[]));
    conflict(&lu.run(&a, &build::release6(), &[]));
}

#[test]
fn persistent_reservations_survive_resets_and_nexus_loss() {
    let lu = Lu::new();
    let (a, b) = (host("a", 1), host("b", 1));
    lu.register(&a, 0xa);
    good(&lu.reserve(&a, 0xa, EA));
    lu.state.logical_unit_reset().expect("reset");
    lu.state.nexus_lost(&a).expect("nexus lost");
    assert_eq!(lu.reservation(&b), Some((0xa, EA)));
    conflict(&lu.read(&b));
    good(&lu.read(&a));
}

#[test]
fn supported_operation_codes_list_the_reservation_commands() {
    let lu = Lu::new();
    let a = host("a", 1);
    for (op, sa, options) in [
        (
            opcode::PERSISTENT_RESERVE_IN,
            opcode::SA_READ_FULL_STATUS,
            2,
        ),
        (
            opcode::PERSISTENT_RESERVE_OUT,
            opcode::SA_REGISTER_AND_MOVE,
            2,
        ),
        (opcode::RESERVE_6, 0, 1),
        (opcode::RELEASE_6, 0, 1),
    ] {
        let r = lu.run(&a, &build::report_one_operation_code(options, op, sa), &[]);
        good(&r);
        assert_eq!(r.data_in[1] & 0x07, 0x03, "{op:#x}/{sa:#x} supported");
    }
}

/// A fence must not race a write already past its conflict check: PREEMPT returns only once
/// the preempted nexus's in-flight write is done.
#[test]
fn preempt_waits_for_commands_already_running() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::mpsc;
    use std::sync::Mutex;
    use std::time::Duration;

    use weft_scsi::{Geometry, Identity, LogicalUnit, MediumError};

    /// A MemLun whose writes wait for a go-ahead, after saying they started.
    struct Gated {
        inner: MemLun,
        started: Mutex<mpsc::Sender<()>>,
        go: Mutex<mpsc::Receiver<()>>,
    }

    impl LogicalUnit for Gated {
        fn geometry(&self) -> Geometry {
            self.inner.geometry()
        }
        fn identity(&self) -> &Identity {
            self.inner.identity()
        }
        fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MediumError> {
            self.inner.read(offset_bytes, buf)
        }
        fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), MediumError> {
            self.started
                .lock()
                .expect("lock")
                .send(())
                .expect("test alive");
            self.go.lock().expect("lock").recv().expect("test alive");
            self.inner.write(offset_bytes, data, fua)
        }
        fn flush(&self) -> Result<(), MediumError> {
            self.inner.flush()
        }
        fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MediumError> {
            self.inner.unmap(offset_bytes, len_bytes)
        }
        fn write_zeroes(&self, offset: u64, len: u64, unmap: bool) -> Result<(), MediumError> {
            self.inner.write_zeroes(offset, len, unmap)
        }
        fn allocation(&self, offset: u64, len: u64) -> Result<Vec<(u64, bool)>, MediumError> {
            self.inner.allocation(offset, len)
        }
    }

    let (started_tx, started) = mpsc::channel();
    let (go, go_rx) = mpsc::channel();
    let lu = Gated {
        inner: MemLun::with_blocks(512, 8),
        started: Mutex::new(started_tx),
        go: Mutex::new(go_rx),
    };
    let state = LunState::new();
    let (victim, fencer) = (host("victim", 1), host("fencer", 2));
    let prout = |nexus: &Nexus, sa, kind, key, sark| {
        let cdb = build::persistent_reserve_out(sa, kind, 24);
        execute(
            &state,
            &lu,
            nexus,
            &cdb,
            &build::prout_parameters(key, sark, 0),
        )
    };
    good(&prout(&victim, opcode::SA_REGISTER, 0, 0, 0x1));
    good(&prout(&fencer, opcode::SA_REGISTER, 0, 0, 0x2));
    good(&prout(&victim, opcode::SA_RESERVE, WE, 0x1, 0));
    let preempted = AtomicBool::new(false);
    let write = build::rw10(opcode::WRITE_10, 0, 0, 1);
    std::thread::scope(|s| {
        let writer = s.spawn(|| execute(&state, &lu, &victim, &write, &[9; 512]));
        started.recv().expect("the write reached the LU");
        let fence = s.spawn(|| {
            let r = prout(&fencer, opcode::SA_PREEMPT, EA, 0x2, 0x1);
            preempted.store(true, Ordering::SeqCst);
            r
        });
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            !preempted.load(Ordering::SeqCst),
            "PREEMPT returned while the victim's write was still running"
        );
        go.send(()).expect("writer alive");
        good(&writer.join().expect("writer"));
        good(&fence.join().expect("fence"));
    });
    conflict(&execute(&state, &lu, &victim, &write, &[9; 512]));
}

#[test]
fn aptpl_is_kept_in_the_record_and_reported_active() {
    let store = MemReservationStore::shared();
    let lu = Lu::over(store.clone());
    let a = host("a", 1);
    good(&lu.prout_flags(&a, opcode::SA_REGISTER, 0, 0, 0xa, 0x01));
    good(&lu.reserve(&a, 0xa, EA));
    let caps = lu.prin(&a, opcode::SA_REPORT_CAPABILITIES);
    assert_eq!((caps[2], caps[3]), (0x05, 0xb1), "PTPL_C and PTPL_A");
    let (record, _) = store.load().expect("load");
    assert!(record.aptpl);
    assert_eq!(record.registrations.len(), 1);
    assert_eq!(record.reservation.as_ref().map(|r| r.type_code), Some(EA));
    // After a power loss (every process gone) the state comes back from the record.
    let survivor = record.after_power_loss().expect("APTPL kept it");
    let restarted = MemReservationStore::shared();
    restarted.store(&survivor, 0).expect("store");
    let lu = Lu::over(restarted);
    let b = host("b", 1);
    conflict(&lu.write(&b));
    assert_eq!(lu.reservation(&b), Some((0xa, EA)));
    // A later REGISTER with APTPL clear is the last valid value: the state would not survive.
    good(&lu.prout_flags(&a, opcode::SA_REGISTER, 0, 0xa, 0xaa, 0));
    let caps = lu.prin(&a, opcode::SA_REPORT_CAPABILITIES);
    assert_eq!(caps[3], 0xb0, "PTPL_A clear");
}

#[test]
fn two_processes_sharing_a_store_see_each_others_reservations() {
    let store = MemReservationStore::shared();
    let (one, two) = (Lu::over(store.clone()), Lu::over(store.clone()));
    let (a, b) = (host("a", 1), host("b", 2));
    one.register(&a, 0xa);
    two.register(&b, 0xb);
    assert_eq!(one.keys(&a), (2, vec![0xa, 0xb]), "PR IN reads the store");
    good(&one.reserve(&a, 0xa, WE));
    // `two` checked nothing since it registered b: its cache is older than the store until
    // the server tells it so.
    good(&two.write(&b));
    two.state.invalidate_reservations();
    conflict(&two.write(&b));
    good(&two.read(&b));
    // b preempts a through the other process; `one` learns of it on its next PR command.
    good(&two.prout(&b, opcode::SA_PREEMPT, EA, 0xb, 0xa));
    assert_eq!(one.reservation(&a), Some((0xb, EA)));
    conflict(&one.write(&a));
    assert_eq!(one.keys(&a).1, vec![0xb]);
}

/// Two processes serving one LU, each through its own target port (1 and 257), over one
/// store: a RESERVE(6) through one is enforced by the other once it reloads, and released by
/// the holder's RELEASE(6), its nexus loss, or a LU reset through either.
#[test]
fn reserve6_is_shared_by_every_process_serving_the_lu() {
    let store = MemReservationStore::shared();
    let (one, two) = (
        Lu::through(store.clone(), &[1]),
        Lu::through(store.clone(), &[257]),
    );
    let (a, b) = (host("a", 1), host("b", 257));
    good(&two.write(&b));
    good(&one.run(&a, &build::reserve6(), &[]));
    two.state.invalidate_reservations();
    conflict(&two.write(&b));
    conflict(&two.run(&b, &build::reserve6(), &[]));
    // Registering is refused through the other process too (SPC-2: each refuses the other).
    conflict(&two.prout(&b, opcode::SA_REGISTER, 0, 0, 0xb));
    good(&one.run(&a, &build::release6(), &[]));
    two.state.invalidate_reservations();
    good(&two.write(&b));

    // The holder's nexus is lost: released in the store, for the other process too.
    good(&one.run(&a, &build::reserve6(), &[]));
    two.state.invalidate_reservations();
    conflict(&two.write(&b));
    one.state.nexus_lost(&a).expect("nexus lost");
    two.state.invalidate_reservations();
    good(&two.write(&b));

    // A LU reset through the other process releases it too.
    good(&one.run(&a, &build::reserve6(), &[]));
    two.state.logical_unit_reset().expect("reset");
    one.state.invalidate_reservations();
    good(&one.run(&b, &build::reserve6(), &[]));
    let (record, _) = store.load().expect("load");
    assert_eq!(record.reserved_by, Some(b.clone()));
}

/// What a change stores beside the record: the unit attentions it established, for the
/// other processes to queue for their own nexuses, and nothing for a process whose ports
/// the nexus does not come through.
#[test]
fn the_news_of_a_change_reach_the_nexuses_of_another_process_once() {
    let store = MemReservationStore::shared();
    let (one, two) = (
        Lu::through(store.clone(), &[1]),
        Lu::through(store.clone(), &[257]),
    );
    let (a, b) = (host("a", 1), host("b", 257));
    one.register(&a, 0xa);
    two.register(&b, 0xb);
    good(&one.reserve(&a, 0xa, EA));
    // a preempts b through process one: b, served by two, is told.
    good(&one.prout(&a, opcode::SA_PREEMPT, EA, 0xa, 0xb));
    let (record, _) = store.load().expect("load");
    assert_eq!(
        record.news,
        RecordNews {
            reset: false,
            attentions: vec![(b.clone(), asc::REGISTRATIONS_PREEMPTED)],
        }
    );
    // Process one queued nothing for b: b is not its nexus.
    assert!(one.state.unit_attention(&b, &[0, 0, 0, 0, 0, 0]).is_none());
    // Before two hears of it, b has nothing pending; after, exactly one unit attention.
    good(&two.tur(&b));
    two.state.heard(&record.news);
    check(
        &two.tur(&b),
        key::UNIT_ATTENTION,
        asc::REGISTRATIONS_PREEMPTED,
    );
    good(&two.tur(&b));
    // News for a nexus of its own that another process heard mean nothing to one.
    one.state.heard(&RecordNews {
        reset: false,
        attentions: vec![(b.clone(), asc::RESERVATIONS_RELEASED)],
    });
    assert!(one.state.unit_attention(&b, &[0, 0, 0, 0, 0, 0]).is_none());

    // A reset is stored even though it changes nothing else, so every process hears of it.
    let (_, before) = store.load().expect("load");
    one.state.logical_unit_reset().expect("reset");
    let (record, after) = store.load().expect("load");
    assert!(after > before, "stored");
    assert_eq!(
        record.news,
        RecordNews {
            reset: true,
            attentions: Vec::new(),
        }
    );
    assert_eq!(
        record.registrations.len(),
        1,
        "registrations survive a reset"
    );
    // A change without news (a new registration) stores none.
    two.register(&host("c", 257), 0xc);
    assert!(store.load().expect("load").0.news.is_empty());
}

/// A store another process writes to between each of our loads and stores, a few times.
#[derive(Debug)]
struct Contended {
    inner: Arc<MemReservationStore>,
    races_left: std::sync::atomic::AtomicUsize,
    raced: AtomicBool,
}

impl ReservationStore for Contended {
    fn load(&self) -> Result<(ReservationRecord, RecordVersion), StoreError> {
        self.inner.load()
    }

    fn store(
        &self,
        record: &ReservationRecord,
        expected: RecordVersion,
    ) -> Result<RecordVersion, StoreError> {
        if self.races_left.load(Ordering::SeqCst) > 0 {
            self.races_left.fetch_sub(1, Ordering::SeqCst);
            self.raced.store(true, Ordering::SeqCst);
            // The other process registers one more nexus meanwhile.
            let (mut theirs, version) = self.inner.load()?;
            let n = theirs.registrations.len();
            theirs.generation += 1;
            theirs.registrations.push(weft_scsi::RegistrationRecord {
                nexus: host(&format!("other{n}"), 1),
                key: 0x100 + n as u64,
                all_target_ports: false,
            });
            self.inner.store(&theirs, version)?;
        }
        self.inner.store(record, expected)
    }
}

#[test]
fn a_register_racing_another_process_retries_and_keeps_both() {
    let inner = MemReservationStore::shared();
    let store = Arc::new(Contended {
        inner: inner.clone(),
        races_left: 3.into(),
        raced: AtomicBool::new(false),
    });
    let lu = Lu::over(store.clone());
    let a = host("a", 1);
    lu.register(&a, 0xa);
    assert!(store.raced.load(Ordering::SeqCst));
    let (generation, keys) = lu.keys(&a);
    assert_eq!(
        keys,
        vec![0x100, 0x101, 0x102, 0xa],
        "nothing lost either way"
    );
    assert_eq!(generation, 4);
}

/// A store that cannot be reached.
#[derive(Debug)]
struct Unreachable;

impl ReservationStore for Unreachable {
    fn load(&self) -> Result<(ReservationRecord, RecordVersion), StoreError> {
        Err(StoreError::Unavailable("etcd is down".into()))
    }

    fn store(&self, _: &ReservationRecord, _: RecordVersion) -> Result<RecordVersion, StoreError> {
        Err(StoreError::Unavailable("etcd is down".into()))
    }
}

#[test]
fn an_unreachable_store_fails_the_commands_that_need_it_only() {
    let lu = Lu::over(Arc::new(Unreachable));
    let a = host("a", 1);
    let failed = |r: Response| check(&r, key::HARDWARE_ERROR, (0x44, 0));
    failed(lu.prout(&a, opcode::SA_REGISTER, 0, 0, 0xa));
    failed(lu.run(
        &a,
        &build::persistent_reserve_in(opcode::SA_READ_KEYS, 64),
        &[],
    ));
    failed(lu.write(&a));
    let inquiry = lu.run(&a, &[opcode::INQUIRY, 0, 0, 0, 96, 0], &[]);
    good(&inquiry);
}
