//! SCSI persistent reservations of `weft serve` across restarts: a reservation made with
//! APTPL survives a kill -9 and still refuses another initiator's writes; one made without
//! APTPL is gone after the restart (SPC-4: a power loss clears it); a deleted volume's record
//! goes with it. Driven by a bare initiator on a socket (weft-iscsi's initiator-side PDU
//! encoders), since no PR tool runs against a target without a kernel initiator here;
//! libiscsi's PR families run in `iscsi_conformance`.

mod common;
mod iscsi_support;

use std::net::SocketAddr;
use std::time::Duration;

use common::*;
use iscsi_support::*;

fn portal(srv: &Server) -> SocketAddr {
    srv.iscsi.expect("serve.json names an iSCSI portal")
}

const HOST_A: &str = "iqn.2026-01.test:host-a";
const HOST_B: &str = "iqn.2026-01.test:host-b";

#[test]
fn an_aptpl_reservation_survives_a_restart_and_still_conflicts() {
    let mut srv = Server::start_with("iscsi-pr-restart", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("an_aptpl_reservation_survives_a_restart_and_still_conflicts") {
        return;
    }
    let target = format!("{TARGET_PREFIX}vol0");
    {
        let mut a = Session::login(portal(&srv), HOST_A, &target);
        let r = a.prout(REGISTER, 0, 0, 0xa, APTPL);
        assert_eq!(r.status, GOOD, "{r:?}");
        let r = a.prout(RESERVE, EXCLUSIVE_ACCESS, 0xa, 0, 0);
        assert_eq!(r.status, GOOD, "{r:?}");
        let mut b = Session::login(portal(&srv), HOST_B, &target);
        assert_eq!(b.write_block(), RESERVATION_CONFLICT);
    }

    srv.kill9_and_restart();
    let mut b = Session::login(portal(&srv), HOST_B, &target);
    assert_eq!(
        b.write_block(),
        RESERVATION_CONFLICT,
        "the reservation came back"
    );
    assert_eq!(b.reservation(), Some((0xa, EXCLUSIVE_ACCESS)));
    assert_eq!(b.keys(), vec![0xa]);
    let mut a = Session::login(portal(&srv), HOST_A, &target);
    assert_eq!(a.write_block(), GOOD, "the holder still writes");

    // The last APTPL received is zero: the next restart clears everything.
    let r = a.prout(REGISTER_AND_IGNORE_EXISTING_KEY, 0, 0, 0xaa, 0);
    assert_eq!(r.status, GOOD, "{r:?}");
    drop((a, b));
    srv.kill9_and_restart();
    let mut b = Session::login(portal(&srv), HOST_B, &target);
    assert_eq!(b.write_block(), GOOD, "a restart without APTPL clears it");
    assert_eq!(b.keys(), Vec::<u64>::new());
    assert_eq!(b.reservation(), None);
}

#[test]
fn a_deleted_volume_takes_its_reservations_with_it() {
    let srv = Server::start_with("iscsi-pr-delete", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("a_deleted_volume_takes_its_reservations_with_it") {
        return;
    }
    srv.cli_ok(&["volume", "create", "shared", "--size", "16M"]);
    let target = format!("{TARGET_PREFIX}shared");
    {
        let mut a = Session::login(portal(&srv), HOST_A, &target);
        assert_eq!(a.prout(REGISTER, 0, 0, 0xa, APTPL).status, GOOD);
        assert_eq!(a.prout(RESERVE, EXCLUSIVE_ACCESS, 0xa, 0, 0).status, GOOD);
    }
    let record = srv.data_dir.join("scsi-reservations").join("meta.json");
    let stored = std::fs::read_to_string(&record).expect("the records file");
    assert!(stored.contains("weft/scsi/reservations/shared"), "{stored}");
    // The session is gone once the target has seen the connection close.
    poll_until(Duration::from_secs(20), "the volume deleted", || {
        srv.cli(&["volume", "delete", "shared", "--yes"])
            .success()
            .then_some(())
    });
    let stored = std::fs::read_to_string(&record).expect("the records file");
    assert!(
        !stored.contains("weft/scsi/reservations/shared"),
        "{stored}"
    );
    srv.cli_ok(&["volume", "create", "shared", "--size", "16M"]);
    let mut b = Session::login(portal(&srv), HOST_B, &target);
    assert_eq!(b.keys(), Vec::<u64>::new(), "a new volume of the same name");
    assert_eq!(b.write_block(), GOOD);
}
