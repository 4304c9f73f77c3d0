//! Implicit ALUA through the public API, as a transport drives it: a provider with one target
//! port group per c.node, REPORT TARGET PORT GROUPS, the Device Identification page's group
//! designator, what a transitioning port refuses, and the unit attention a change of states
//! raises on every I_T nexus.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use weft_scsi::build;
use weft_scsi::opcode;
use weft_scsi::sense::{asc, key};
use weft_scsi::{
    execute, AccessState, AluaProvider, LunState, MemLun, Nexus, PortGroup, PortGroups, Response,
    Status,
};

/// A provider the test sets states on.
#[derive(Debug)]
struct Groups {
    generation: AtomicU64,
    groups: Mutex<PortGroups>,
}

impl Groups {
    /// Two c.nodes: this one (group 1, ports 1 and 2) and another (group 2, port 257).
    fn two_cnodes(local: AccessState, other: AccessState) -> Arc<Groups> {
        Arc::new(Groups {
            generation: AtomicU64::new(1),
            groups: Mutex::new(PortGroups {
                groups: vec![
                    PortGroup {
                        id: 1,
                        state: local,
                        ports: vec![1, 2],
                    },
                    PortGroup {
                        id: 2,
                        state: other,
                        ports: vec![257],
                    },
                ],
                implicit_transition_time_secs: 10,
            }),
        })
    }

    fn set(&self, local: AccessState, other: AccessState) {
        let mut groups = self.groups.lock();
        groups.groups[0].state = local;
        groups.groups[1].state = other;
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl AluaProvider for Groups {
    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn port_groups(&self) -> PortGroups {
        self.groups.lock().clone()
    }
}

struct Lu {
    state: LunState,
    lu: MemLun,
}

impl Lu {
    fn new(groups: Arc<Groups>) -> Lu {
        Lu {
            state: LunState::new().with_alua(groups),
            lu: MemLun::with_blocks(512, 64),
        }
    }

    /// A command as a transport sends it: a pending unit attention first.
    fn send(&self, nexus: &Nexus, cdb: &[u8], data_out: &[u8]) -> Response {
        self.state
            .unit_attention(nexus, cdb)
            .unwrap_or_else(|| execute(&self.state, &self.lu, nexus, cdb, data_out))
    }

    fn rtpg(&self, nexus: &Nexus) -> Vec<u8> {
        let cdb = [
            opcode::MAINTENANCE_IN,
            0x0a,
            0,
            0,
            0,
            0,
            0,
            0,
            0x10,
            0,
            0,
            0,
        ];
        let r = self.send(nexus, &cdb, &[]);
        assert_eq!(r.status, Status::Good, "{r:?}");
        r.data_in
    }

    fn read(&self, nexus: &Nexus) -> Response {
        self.send(nexus, &build::rw10(opcode::READ_10, 0, 1, 1), &[])
    }
}

fn host(name: &str, port: u16) -> Nexus {
    Nexus::iscsi(
        &format!("iqn.2024-01.test:{name}"),
        [0x80, 0, 0, 0, 0, 1],
        port,
    )
}

#[track_caller]
fn check(r: &Response, sense_key: u8, code: (u8, u8)) {
    assert_eq!(r.status, Status::CheckCondition, "{r:?}");
    let s = r.sense.as_ref().expect("sense");
    assert_eq!((s.key, (s.asc, s.ascq)), (sense_key, code), "{s:?}");
}

#[test]
fn report_target_port_groups_lists_one_group_per_cnode() {
    use AccessState::*;
    let lu = Lu::new(Groups::two_cnodes(ActiveOptimized, ActiveNonOptimized));
    let d = lu.rtpg(&host("a", 1));
    assert_eq!(
        u32::from_be_bytes([d[0], d[1], d[2], d[3]]) as usize,
        d.len() - 4
    );
    assert_eq!((d[4], &d[6..8], d[11]), (0x00, &[0u8, 1][..], 2));
    let second = &d[4 + 8 + 8..];
    assert_eq!(
        (second[0], &second[2..4], second[7]),
        (0x01, &[0u8, 2][..], 1)
    );
    assert_eq!(&second[8..12], &[0, 0, 1, 1]);
}

#[test]
fn device_identification_names_the_group_of_the_sessions_port() {
    use AccessState::*;
    let lu = Lu::new(Groups::two_cnodes(ActiveOptimized, ActiveNonOptimized));
    let r = lu.send(&host("a", 1), &[opcode::INQUIRY, 1, 0x83, 0x01, 0, 0], &[]);
    assert_eq!(r.status, Status::Good);
    // Walk the designators for the target port group one (type 5).
    let page = &r.data_in[4..];
    let mut at = 0;
    let mut group = None;
    while at + 4 <= page.len() {
        let len = usize::from(page[at + 3]);
        if page[at + 1] & 0x0f == 0x5 {
            group = Some(u16::from_be_bytes([page[at + 6], page[at + 7]]));
        }
        at += 4 + len;
    }
    // MemLun's identity says group 7; the provider puts port 1 in group 1.
    assert_eq!(group, Some(1));
    let std = lu.send(&host("a", 1), &[opcode::INQUIRY, 0, 0, 0, 96, 0], &[]);
    assert_eq!((std.data_in[5] >> 4) & 0x3, 0x1, "TPGS: implicit ALUA");
}

#[test]
fn a_transitioning_port_answers_only_what_path_checkers_need() {
    use AccessState::*;
    let groups = Groups::two_cnodes(Transitioning, Transitioning);
    let lu = Lu::new(groups.clone());
    let a = host("a", 1);
    check(
        &lu.read(&a),
        key::NOT_READY,
        asc::ASYMMETRIC_ACCESS_STATE_TRANSITION,
    );
    let tur = lu.send(&a, &[opcode::TEST_UNIT_READY, 0, 0, 0, 0, 0], &[]);
    check(
        &tur,
        key::NOT_READY,
        asc::ASYMMETRIC_ACCESS_STATE_TRANSITION,
    );
    assert_eq!(lu.rtpg(&a)[4] & 0x0f, 0x0f, "RTPG still answers");
    let inquiry = lu.send(&a, &[opcode::INQUIRY, 0, 0, 0, 96, 0], &[]);
    assert_eq!(inquiry.status, Status::Good);
    // The handover ends with this c.node non-optimized: everything is served again.
    groups.set(ActiveNonOptimized, ActiveOptimized);
    assert_eq!(lu.read(&a).status, Status::Good);
}

#[test]
fn a_change_of_states_is_announced_once_on_every_nexus() {
    use AccessState::*;
    let groups = Groups::two_cnodes(ActiveOptimized, ActiveNonOptimized);
    let lu = Lu::new(groups.clone());
    let (a, b, late) = (host("a", 1), host("b", 2), host("late", 1));
    lu.state.nexus_joined(&a);
    lu.state.nexus_joined(&b);
    assert_eq!(lu.read(&a).status, Status::Good, "nothing changed yet");
    groups.set(ActiveNonOptimized, ActiveOptimized);
    lu.state.nexus_joined(&late);
    for nexus in [&a, &b] {
        check(
            &lu.read(nexus),
            key::UNIT_ATTENTION,
            asc::ASYMMETRIC_ACCESS_STATE_CHANGED,
        );
        assert_eq!(lu.read(nexus).status, Status::Good, "reported once");
    }
    assert_eq!(
        lu.read(&late).status,
        Status::Good,
        "a nexus that joined after the change has nothing to hear"
    );
    // A nexus that is gone is not told; REQUEST SENSE returns the condition as its data.
    lu.state.nexus_lost(&b).expect("nexus lost");
    groups.set(ActiveOptimized, ActiveNonOptimized);
    let sense = lu.send(&a, &[opcode::REQUEST_SENSE, 0, 0, 0, 18, 0], &[]);
    assert_eq!(sense.status, Status::Good);
    assert_eq!(
        (
            sense.data_in[2] & 0x0f,
            sense.data_in[12],
            sense.data_in[13]
        ),
        (key::UNIT_ATTENTION, 0x2a, 0x06)
    );
    assert_eq!(lu.read(&b).status, Status::Good);
}
