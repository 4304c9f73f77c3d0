//! Edits in place through the real `weft` binary, as an array's admin makes them: `weft volume
//! rename` (snapshots, host LUN maps, clone origins, schedules and data follow; refused while a
//! client has it open unless --force; refused onto a taken name; kept across kill -9), and a
//! host's initiators and CHAP changed without deleting it (`host add-initiator`,
//! `remove-initiator`, `set-chap`), checked by logging in with libiscsi's `iscsi-ls`.

mod common;
mod iscsi_support;

use std::net::SocketAddr;

use common::*;

const DB1: &str = "iqn.1994-05.com.redhat:db1";
const DB1B: &str = "iqn.1994-05.com.redhat:db1-second-port";
const SECRET_A: &str = "first-chap-secret-0451";
const SECRET_B: &str = "second-chap-secret-9923";

fn exit_code(out: &CmdOut) -> Option<i32> {
    out.status.and_then(|s| s.code())
}

#[test]
fn rename_carries_snapshots_mappings_origins_schedules_and_data() {
    const TEST: &str = "rename_carries_snapshots_mappings_origins_schedules_and_data";
    let (mut rng, _) = test_rng(TEST);
    let mut srv = Server::start_with("rename", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    srv.cli_ok(&["volume", "create", "pg", "--size", "16M"]);
    let data = random_bytes(&mut rng, 1 << 20);
    let mut c = srv.nbd_client("pg");
    c.write(4 << 20, &data).unwrap();
    c.flush().unwrap();
    c.disconnect();
    srv.cli_ok(&["snapshot", "create", "pg@mon"]);
    srv.cli_ok(&["clone", "create", "pg@mon", "dev"]);
    // NBD clients here are db1's: mapped exports are served to their hosts only.
    srv.cli_ok(&[
        "host",
        "create",
        "db1",
        "--iqn",
        DB1,
        "--nbd-address",
        "127.0.0.1",
    ]);
    srv.cli_ok(&["volume", "map", "pg", "--host", "db1", "--lun", "2"]);
    srv.cli_ok(&["volume", "map", "pg@mon", "--host", "db1", "--lun", "5"]);
    srv.cli_ok(&["snapshot", "schedule", "pg", "--every", "1d", "--keep", "3"]);

    // A client has it open: refused, exit 5, naming the client and the way out.
    let mut open = srv.nbd_client("pg");
    let refused = srv.cli(&["volume", "rename", "pg", "pg2"]);
    assert_eq!(exit_code(&refused), Some(5), "{}", refused.all());
    assert!(
        refused.stderr.contains("refusing to rename volume pg")
            && refused.stderr.contains("nbd 127.0.0.1"),
        "{}",
        refused.all()
    );
    // The client was not cut off.
    assert_eq!(open.read(4 << 20, 4096).unwrap(), &data[..4096]);
    open.disconnect();

    // Taken names and bad names are refused, changing nothing.
    let taken = srv.cli(&["volume", "rename", "pg", "vol0"]);
    assert_eq!(exit_code(&taken), Some(5), "{}", taken.all());
    let bad = srv.cli(&["volume", "rename", "pg", "no/slash"]);
    assert_eq!(exit_code(&bad), Some(2), "{}", bad.all());
    let missing = srv.cli(&["volume", "rename", "nothing", "x"]);
    assert_eq!(exit_code(&missing), Some(4), "{}", missing.all());

    let out = srv.cli_ok(&["volume", "rename", "pg", "pg2"]);
    assert!(out.contains("renamed pg to pg2 (with 1 snapshot)"), "{out}");
    let check = |srv: &Server| {
        let gone = srv.cli(&["volume", "info", "pg"]);
        assert_eq!(exit_code(&gone), Some(4), "{}", gone.all());
        let v = srv.cli_json(&["volume", "info", "pg2", "--json"]);
        assert_eq!(v["snapshots"], serde_json::json!(["pg2@mon"]), "{v}");
        let dev = srv.cli_json(&["volume", "info", "dev", "--json"]);
        assert_eq!(dev["origin"], "pg2@mon", "{dev}");
        // The host keeps its LUN numbers under the new names.
        let host = srv.cli_json(&["host", "info", "db1", "--json"]);
        let luns: Vec<(u64, String)> = host["luns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["lun"].as_u64().unwrap(),
                    l["export"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            luns,
            [(2, "pg2".to_string()), (5, "pg2@mon".to_string())],
            "{host}"
        );
        let schedules = srv.cli_json(&["snapshot", "schedules", "--json"]);
        assert_eq!(schedules[0]["volume"], "pg2", "{schedules}");
        // The data is where it was, in the volume and its snapshot, by their new names.
        for export in ["pg2", "pg2@mon"] {
            let mut c = srv.nbd_client(export);
            assert!(
                c.read(4 << 20, 1 << 20).unwrap() == data,
                "{export}: data differs"
            );
            c.disconnect();
        }
    };
    check(&srv);
    srv.kill9_and_restart();
    check(&srv);

    // --force goes ahead with a client connected: it is cut off and reconnects by the new name.
    let mut open = srv.nbd_client("pg2");
    let out = srv.cli_ok(&["volume", "rename", "pg2", "pg3", "--force"]);
    assert!(out.contains("disconnected"), "{out}");
    assert!(
        open.read(0, 4096).is_err(),
        "a client of the old name kept reading"
    );
    let mut c = srv.nbd_client("pg3");
    assert!(c.read(4 << 20, 1 << 20).unwrap() == data);
    c.disconnect();
}

fn portal(srv: &Server) -> SocketAddr {
    srv.iscsi.expect("serve.json names an iSCSI portal")
}

/// The LUN numbers `iscsi-ls -s` reports on the array target for `initiator` with an optional
/// `user%secret@`, or the tool's output when the login fails.
fn array_luns(srv: &Server, initiator: &str, auth: &str) -> Result<Vec<u64>, String> {
    let target = srv.cli_json(&["host", "info", "db1", "--json"])["iscsi_target"]
        .as_str()
        .expect("iscsi_target")
        .to_string();
    iscsi_support::array_luns::array_luns(portal(srv), &target, initiator, auth)
}

#[test]
fn a_host_gains_and_loses_initiators_and_changes_chap_without_being_deleted() {
    const TEST: &str = "a_host_gains_and_loses_initiators_and_changes_chap_without_being_deleted";
    let srv = Server::start_with("host-edits", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    require_tool("iscsi-ls");
    srv.cli_ok(&["volume", "create", "pgdata", "--size", "16M"]);
    srv.cli_ok(&["host", "create", "db1", "--iqn", DB1]);
    srv.cli_ok(&["volume", "map", "pgdata", "--host", "db1", "--lun", "4"]);
    assert_eq!(array_luns(&srv, DB1, ""), Ok(vec![4]));
    // The second port is nobody's yet: the array target does not list it a LUN.
    assert_ne!(array_luns(&srv, DB1B, ""), Ok(vec![4]));

    let out = srv.cli_ok(&["host", "add-initiator", "db1", DB1B]);
    assert!(out.contains(DB1B), "{out}");
    assert_eq!(array_luns(&srv, DB1B, ""), Ok(vec![4]));
    // An initiator belongs to one host.
    srv.cli_ok(&["host", "create", "db2", "--nbd-address", "10.9.9.9"]);
    let twice = srv.cli(&["host", "add-initiator", "db2", DB1B]);
    assert_eq!(exit_code(&twice), Some(5), "{}", twice.all());
    let bad = srv.cli(&["host", "add-initiator", "db2", "not-an-iqn"]);
    assert_eq!(exit_code(&bad), Some(2), "{}", bad.all());

    srv.cli_ok(&["host", "remove-initiator", "db1", DB1]);
    assert_ne!(array_luns(&srv, DB1, ""), Ok(vec![4]));
    assert_eq!(array_luns(&srv, DB1B, ""), Ok(vec![4]));
    // The last thing that identifies a host stays.
    let last = srv.cli(&["host", "remove-initiator", "db1", DB1B]);
    assert_eq!(exit_code(&last), Some(2), "{}", last.all());
    assert!(
        last.stderr.contains("all that identifies"),
        "{}",
        last.all()
    );
    srv.cli_ok(&["host", "add-initiator", "db1", DB1]);

    // CHAP set on a host that had none: logins without it, or with a wrong secret, fail.
    let secret_file = srv.data_dir.with_extension("chap-a");
    std::fs::write(&secret_file, format!("{SECRET_A}\n")).unwrap();
    let out = srv.cli_ok(&[
        "host",
        "set-chap",
        "db1",
        "--chap-user",
        "db1",
        "--chap-secret-file",
        secret_file.to_str().unwrap(),
    ]);
    assert!(out.contains("chap: user db1"), "{out}");
    assert!(array_luns(&srv, DB1, "").is_err());
    assert_eq!(
        array_luns(&srv, DB1, &format!("db1%{SECRET_A}@")),
        Ok(vec![4])
    );
    // Changed: the old secret no longer logs in, the new one does; the LUN map is untouched.
    srv.cli_ok(&[
        "host",
        "set-chap",
        "db1",
        "--chap-user",
        "db1",
        "--chap-secret",
        SECRET_B,
    ]);
    let old = array_luns(&srv, DB1, &format!("db1%{SECRET_A}@"));
    assert!(
        old.as_ref()
            .is_err_and(|e| e.contains("Authentication failure")),
        "{old:?}"
    );
    assert_eq!(
        array_luns(&srv, DB1B, &format!("db1%{SECRET_B}@")),
        Ok(vec![4])
    );
    // Too short a secret is refused and changes nothing.
    let short = srv.cli(&[
        "host",
        "set-chap",
        "db1",
        "--chap-user",
        "db1",
        "--chap-secret",
        "short",
    ]);
    assert_eq!(exit_code(&short), Some(2), "{}", short.all());
    assert_eq!(
        array_luns(&srv, DB1, &format!("db1%{SECRET_B}@")),
        Ok(vec![4])
    );
    // Secrets never come back out.
    let info = srv.cli_ok(&["host", "info", "db1", "--json"]);
    for s in [SECRET_A, SECRET_B] {
        assert!(!info.contains(s), "{info}");
        assert!(!srv.server_output().contains(s), "a secret in the log");
    }
    // Removed: logins without CHAP work again.
    let out = srv.cli_ok(&["host", "set-chap", "db1", "--none"]);
    assert!(out.contains("chap: none"), "{out}");
    assert_eq!(array_luns(&srv, DB1, ""), Ok(vec![4]));
    let _ = std::fs::remove_file(secret_file);
}

#[test]
fn size_refusals_speak_binary_units_not_byte_counts() {
    const TEST: &str = "size_refusals_speak_binary_units_not_byte_counts";
    let srv = Server::start_with("sizes", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    let big = srv.cli(&["volume", "create", "big", "--size", "5P"]);
    assert_eq!(exit_code(&big), Some(2), "{}", big.all());
    assert!(
        big.stderr
            .contains("5 PiB: a volume is a non-zero multiple of 4 KiB and at most 4 PiB"),
        "{}",
        big.all()
    );
    // E and EiB are taken as they are printed.
    for size in ["1E", "1EiB"] {
        let huge = srv.cli(&["volume", "create", "huge", "--size", size]);
        assert_eq!(exit_code(&huge), Some(2), "{}", huge.all());
        assert!(
            huge.stderr
                .contains("1 EiB: a volume is a non-zero multiple"),
            "{}",
            huge.all()
        );
    }
    srv.cli_ok(&["volume", "create", "pg", "--size", "16M"]);
    let shrink = srv.cli(&["volume", "resize", "pg", "--size", "8M"]);
    assert_eq!(exit_code(&shrink), Some(2), "{}", shrink.all());
    assert!(
        shrink
            .stderr
            .contains("volumes only grow: pg is 16 MiB, more than 8 MiB"),
        "{}",
        shrink.all()
    );
    for out in [&big, &shrink] {
        assert!(
            !out.stderr.contains(" bytes"),
            "a byte count: {}",
            out.all()
        );
    }
}
