//! Live sessions per export through the real `weft` binary: while fio writes (and later
//! verifies) a volume over NBD and an initiator holds an iSCSI session on it, `weft volume
//! sessions` (table and JSON), `weft volume info` and the API list both clients with their
//! protocol, address or initiator name, host and I/O counts; delete, refresh and rollback are
//! refused with exit 5 / HTTP 409 naming the clients, and fio keeps running and verifies;
//! on a terminal the question names the clients (`--force`) or the command is refused before
//! asking; `--force` goes ahead and cuts the clients off.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

const CONFLICT: i32 = 5;
/// The initiator name the silent iSCSI session logs in with (host `db1` has it).
const INITIATOR: &str = "iqn.2026-01.test:db1";

fn code(out: &CmdOut) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

/// An iSCSI session logged in to `export`'s own target, straight to full feature phase, and
/// then silent: the target opens the LUN (a session of the export) and keeps it until the
/// connection goes.
fn iscsi_session(srv: &Server, export: &str) -> TcpStream {
    let mut stream = TcpStream::connect(srv.iscsi.expect("an iSCSI portal")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let text = format!(
        "InitiatorName={INITIATOR}\0TargetName=iqn.2026-11.dev.weft:{export}\0\
         SessionType=Normal\0AuthMethod=None\0"
    );
    let mut out = Vec::new();
    weft_iscsi::initiator::login_request(
        &weft_iscsi::initiator::LoginRequestPdu {
            transit: true,
            current_stage: 0,
            next_stage: 3,
            isid: [0x80, 0, 0, 0, 0, 7],
            itt: 1,
            cmd_sn: 1,
            exp_stat_sn: 0,
            text: text.as_bytes(),
        },
        &mut out,
    );
    stream.write_all(&out).unwrap();
    stream
}

fn sessions_of(srv: &Server, volume: &str) -> Vec<Value> {
    srv.cli_json(&["volume", "sessions", volume, "--json"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn by_protocol<'a>(sessions: &'a [Value], protocol: &str) -> &'a Value {
    sessions
        .iter()
        .find(|s| s["protocol"] == protocol)
        .unwrap_or_else(|| panic!("no {protocol} session in {sessions:#?}"))
}

#[test]
fn a_busy_volume_lists_its_clients_and_is_refused_until_forced() {
    const TEST: &str = "a_busy_volume_lists_its_clients_and_is_refused_until_forced";
    require_tools(&["fio"]);
    let srv = Server::start_with(
        TEST,
        ServeOpts::default()
            .volume_size("64M")
            .arg("--iscsi-nop-interval")
            .arg("60s"),
    );
    if srv.skip_without_api(TEST) {
        return;
    }
    let (_, seed) = test_rng(TEST);
    srv.cli_ok(&["volume", "create", "busy", "--size", "64M"]);
    srv.cli_ok(&["snapshot", "create", "busy", "s1"]);
    // Hosts recognise the clients: NBD by address, iSCSI by initiator name (neither maps
    // anything, so the volume stays served to loopback).
    srv.cli_ok(&["host", "create", "app1", "--nbd-address", "127.0.0.1/32"]);
    srv.cli_ok(&["host", "create", "db1", "--iqn", INITIATOR]);
    assert_eq!(
        srv.cli_ok(&["volume", "sessions", "busy"]).trim(),
        "no client has busy open"
    );

    // fio writes 24 MiB at 4 MiB/s (6 s), then reads it all back at that rate and verifies
    // (6 s more): the refusals below, each waiting out the server's grace for ending
    // sessions, all happen while it is connected.
    let fio_dir = srv.scratch.join("fio");
    std::fs::create_dir_all(&fio_dir).unwrap();
    let mut fio = Bg::spawn_group(&mut fio_cmd(
        &fio_dir,
        &srv.nbd_uri("busy"),
        &[
            "--name=verified".into(),
            "--rw=randwrite".into(),
            "--bs=4k".into(),
            "--size=24M".into(),
            "--iodepth=4".into(),
            "--rate=4m".into(),
            "--verify=crc32c".into(),
            "--do_verify=1".into(),
            format!("--randseed={}", seed % 1_000_000_007),
        ],
    ));
    let _iscsi = iscsi_session(&srv, "busy");
    let sessions = poll_until(Duration::from_secs(30), "fio and the initiator", || {
        assert!(
            fio.try_wait().is_none(),
            "fio ended early:\n{}",
            fio.all_so_far()
        );
        let s = sessions_of(&srv, "busy");
        let nbd_wrote = s
            .iter()
            .any(|x| x["protocol"] == "nbd" && x["writes"].as_u64() > Some(0));
        (s.len() == 2 && nbd_wrote).then_some(s)
    });

    // What each session says of its client.
    let nbd = by_protocol(&sessions, "nbd");
    assert!(
        nbd["client"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{nbd}"
    );
    assert_eq!(nbd["client"], nbd["address"], "{nbd}");
    assert_eq!(nbd["host"], "app1", "{nbd}");
    assert_eq!(nbd["export"], "busy", "{nbd}");
    assert!(nbd["written_bytes"].as_u64().unwrap() >= 4096, "{nbd}");
    let since = nbd["since"].as_str().unwrap();
    assert!(
        since.len() == 20 && since.ends_with('Z') && since.contains('T'),
        "RFC 3339 in UTC: {since}"
    );
    let iscsi = by_protocol(&sessions, "iscsi");
    assert_eq!(iscsi["client"], INITIATOR, "{iscsi}");
    assert!(
        iscsi["address"].as_str().unwrap().starts_with("127.0.0.1:"),
        "{iscsi}"
    );
    assert_eq!(iscsi["host"], "db1", "{iscsi}");

    // The same through the API, in the volume's own body, and for a person.
    let by_api = srv.api_json("GET", "/api/v1/volumes/busy/sessions", None);
    assert_eq!(by_api.as_array().map(Vec::len), Some(2), "{by_api}");
    let info = srv.cli_json(&["volume", "info", "busy", "--json"]);
    assert_eq!(info["sessions"].as_array().map(Vec::len), Some(2), "{info}");
    let all = srv.api_json("GET", "/api/v1/sessions", None);
    assert_eq!(all.as_array().map(Vec::len), Some(2), "{all}");
    let snap = srv.api_json("GET", "/api/v1/snapshots/busy@s1/sessions", None);
    assert_eq!(snap, json!([]), "nobody reads the snapshot");
    let table = srv.cli_ok(&["volume", "sessions", "busy"]);
    for word in [
        "PROTOCOL", "CLIENT", "HOST", "SINCE", "READS", "WRITES", "nbd", "iscsi", INITIATOR,
        "app1", "db1",
    ] {
        assert!(table.contains(word), "the table lacks {word:?}:\n{table}");
    }
    // An NBD client is its address: the row says it once.
    let nbd_row = table
        .lines()
        .find(|l| l.starts_with("nbd "))
        .unwrap_or_else(|| panic!("no nbd row:\n{table}"));
    let address = nbd_row.split_whitespace().nth(1).unwrap();
    assert_eq!(nbd_row.matches(address).count(), 1, "{table}");
    let human = srv.cli_ok(&["volume", "info", "busy"]);
    assert!(human.contains("sessions     2 clients"), "{human}");
    assert!(
        human.contains(&format!("iscsi {INITIATOR} from 127.0.0.1:")),
        "{human}"
    );

    // While they are connected: refused, exit 5 / 409, naming the clients.
    for args in [
        &["volume", "delete", "busy", "--yes"][..],
        &["volume", "delete", "busy", "--with-snapshots", "--yes"],
        &["volume", "refresh", "busy", "--to", "busy@s1", "--yes"],
        &["volume", "rollback", "busy", "--to", "s1", "--yes"],
    ] {
        let out = srv.cli(args);
        assert_eq!(code(&out), Some(CONFLICT), "`weft {args:?}`: {}", out.all());
        for word in [
            "2 clients have it open",
            "nbd 127.0.0.1:",
            INITIATOR,
            "--force",
        ] {
            assert!(out.stderr.contains(word), "lacks {word:?}: {}", out.all());
        }
    }
    let (status, body) = srv.api("DELETE", "/api/v1/volumes/busy", None);
    assert_eq!(status, 409, "{body}");
    let (status, body) = srv.api(
        "POST",
        "/api/v1/volumes/busy/rollback",
        Some(json!({"snapshot": "s1"})),
    );
    assert_eq!(status, 409, "{body}");

    // On a terminal: without --force refused before any question; with it, the question
    // names the clients (answered no here).
    if let Some((code, text)) = on_terminal(&srv, &["volume", "delete", "busy"], "y\n") {
        assert_eq!(code, Some(CONFLICT), "{text}");
        assert!(!text.contains("[y/N]"), "asked although refused: {text}");
        assert!(text.contains("pass --force"), "{text}");
        let args = ["volume", "delete", "busy", "--force"];
        let (code, text) = on_terminal(&srv, &args, "n\n").expect("script");
        assert_eq!(code, Some(1), "answered no: {text}");
        assert!(
            text.contains(
                "Delete volume busy (64.0 MiB, 1 snapshot)? 2 clients have it open and will be \
                 disconnected: "
            ),
            "{text}"
        );
        assert!(text.contains("nbd 127.0.0.1:"), "{text}");
        assert!(text.contains("(host app1)"), "{text}");
        assert!(
            text.contains(&format!("iscsi {INITIATOR} from 127.0.0.1:")),
            "{text}"
        );
    } else {
        eprintln!("[{TEST}] terminal part SKIPPED: util-linux `script` is not installed");
    }

    // Nothing was cut: fio goes on, writes everything and verifies it.
    assert!(
        fio.try_wait().is_none(),
        "fio ended while the volume was refused:\n{}",
        fio.all_so_far()
    );
    let out = fio.wait(Duration::from_secs(120));
    assert_fio_ok(&out, "writing and verifying through the refusals");
    assert!(
        out.all().contains("verify") || out.all().contains("READ:"),
        "fio did not read back: {}",
        out.all()
    );
    assert!(
        srv.cli_json(&["volume", "info", "busy", "--json"])["name"] == "busy",
        "the volume is still there"
    );

    // --force: a forced rollback cuts an idle NBD client off (and ends the export under the
    // iSCSI session, which learns it at its next command), then a forced delete.
    let mut idle = srv.nbd_client("busy");
    idle.read(0, 4096).expect("a read before the rollback");
    let out = srv.cli_ok(&[
        "volume", "rollback", "busy", "--to", "s1", "--yes", "--force",
    ]);
    assert!(out.contains("were disconnected"), "{out}");
    poll_until(Duration::from_secs(5), "the clients to be cut off", || {
        sessions_of(&srv, "busy").is_empty().then_some(())
    });
    assert!(
        idle.read(0, 4096).is_err(),
        "the idle client still reads after the forced rollback"
    );
    let mut again = srv.nbd_client("busy");
    again.read(0, 4096).expect("a read on a new connection");
    assert_eq!(sessions_of(&srv, "busy").len(), 1);
    let out = srv.cli(&["volume", "delete", "busy", "--with-snapshots", "--yes"]);
    assert_eq!(code(&out), Some(CONFLICT), "{}", out.all());
    srv.cli_ok(&[
        "volume",
        "delete",
        "busy",
        "--with-snapshots",
        "--yes",
        "--force",
    ]);
    assert!(
        again.read(0, 4096).is_err(),
        "the client still reads a deleted volume"
    );
    let (status, _) = srv.api("GET", "/api/v1/volumes/busy/sessions", None);
    assert_eq!(status, 404);
}
