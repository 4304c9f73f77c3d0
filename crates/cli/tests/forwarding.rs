//! Every c.node serves every volume: a standby c.node serves NBD and iSCSI clients from its
//! start by forwarding their requests to the owner, and goes on serving them from its own
//! engine when it takes over, so a client connected to it sees a pause, not an error, when the
//! owner's machine is lost. Real etcd, d.nodes, c.nodes and clients on loopback.

mod cluster_support;
mod common;
mod failover_support;
mod iscsi_support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use cluster_support::*;
use common::*;
use failover_support::*;
use iscsi_support::*;

const TARGET: &str = "iqn.2026-11.dev.weft:vol0";
const HOST_A: &str = "iqn.2026-01.test:host-a";
const HOST_B: &str = "iqn.2026-01.test:host-b";
/// PERSISTENT RESERVE OUT CLEAR and PREEMPT.
const CLEAR: u8 = 0x03;
const PREEMPT: u8 = 0x04;
/// RESERVE(6), RELEASE(6), TEST UNIT READY.
const RESERVE6: [u8; 6] = [0x16, 0, 0, 0, 0, 0];
const RELEASE6: [u8; 6] = [0x17, 0, 0, 0, 0, 0];
const TEST_UNIT_READY: [u8; 6] = [0; 6];
/// Sense key UNIT ATTENTION and REGISTRATIONS PREEMPTED.
const UNIT_ATTENTION: u8 = 0x06;
const REGISTRATIONS_PREEMPTED: (u8, u8) = (0x2a, 0x05);

/// A c.node's ALUA target port group, from its data dir.
fn port_group(cnode: &Cnode) -> u16 {
    std::fs::read_to_string(cnode.data_dir.join("port-group"))
        .expect("a c.node of a cluster has a port group")
        .trim()
        .parse()
        .unwrap()
}

/// A c.node's `serve.json`, once it names its NBD listener (the standby writes it while it
/// forwards, before it owns anything).
fn serving(cnode: &Cnode) -> serde_json::Value {
    poll_until(
        Duration::from_secs(30),
        "serve.json with an NBD address",
        || {
            let text = std::fs::read_to_string(cnode.data_dir.join("serve.json")).ok()?;
            let v: serde_json::Value = serde_json::from_str(&text).ok()?;
            (v["pid"].as_u64() == Some(u64::from(cnode.pid())) && v["nbd"].is_string()).then_some(v)
        },
    )
}

/// GET an event stream: its content type, the `x-weft-served-by` header and its first event
/// (read until the blank line that ends it, within 15 s; the stream is then dropped).
fn first_stream_event(base: &str, path: &str, token: &str) -> (String, String, String) {
    use std::io::Read;
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(15)))
        .build()
        .into();
    let res = agent
        .get(format!("{base}{path}"))
        .header("Authorization", format!("Bearer {token}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {base}{path}: {e}"));
    assert_eq!(res.status(), 200, "GET {base}{path}");
    let header = |name: &str| {
        res.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string()
    };
    let (content_type, served_by) = (header("content-type"), header("x-weft-served-by"));
    let mut reader = res.into_body().into_reader();
    let mut text = String::new();
    let mut buf = [0u8; 4096];
    while !text.contains("\n\n") {
        let n = reader.read(&mut buf).expect("reading the event stream");
        assert!(n > 0, "the stream ended before its first event: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    (content_type, served_by, text)
}

fn qemu_io(uri: &str, commands: &[String]) -> CmdOut {
    let mut args = vec!["-f".to_string(), "raw".to_string()];
    for c in commands {
        args.push("-c".into());
        args.push(c.clone());
    }
    args.push(uri.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    tool("qemu-io", &args)
}

fn assert_qemu_io_ok(out: &CmdOut, what: &str) {
    let all = out.all();
    assert!(
        out.success() && !all.contains("failed") && !all.contains("error"),
        "qemu-io {what}:\n{all}"
    );
}

#[test]
fn a_standby_serves_every_volume_through_the_owner_and_its_clients_ride_through_the_owners_loss() {
    require_qemu_iscsi();
    let _serial = serial();
    let (mut c, mut standby, _seed) = pair(
        "a_standby_serves_every_volume_through_the_owner_and_its_clients_ride_through_the_owners_loss",
    );
    let standby_json = serving(&standby);
    let standby_api = standby_json["api"]
        .as_str()
        .expect("the standby's API")
        .to_string();
    assert_eq!(standby_json["forwarding"], true, "{standby_json}");
    let standby_nbd = format!("nbd://{}/vol0", standby_json["nbd"].as_str().unwrap());
    let owner_nbd = c.nbd_uri("vol0");
    let standby_lun = format!(
        "iscsi://{}/iqn.2026-11.dev.weft:vol0/0",
        standby_json["iscsi"].as_str().expect("an iSCSI portal")
    );

    // Written through one c.node, read through the other, both ways, NBD and iSCSI.
    let out = qemu_io(&standby_nbd, &["write -P 0x5a 0 4M".into()]);
    assert_qemu_io_ok(&out, "writing through the standby");
    let out = qemu_io(&owner_nbd, &["read -P 0x5a 0 4M".into()]);
    assert_qemu_io_ok(&out, "reading through the owner what the standby wrote");
    let out = qemu_io(&owner_nbd, &["write -P 0xa5 4M 4M".into()]);
    assert_qemu_io_ok(&out, "writing through the owner");
    let out = qemu_io(
        &standby_nbd,
        &["read -P 0xa5 4M 4M".into(), "read -P 0x5a 0 4M".into()],
    );
    assert_qemu_io_ok(&out, "reading through the standby");
    let out = qemu_io(
        &standby_lun,
        &["read -P 0x5a 0 4M".into(), "write -P 0x3c 8M 1M".into()],
    );
    assert_qemu_io_ok(&out, "iSCSI through the standby's portal");
    let out = qemu_io(&owner_nbd, &["read -P 0x3c 8M 1M".into()]);
    assert_qemu_io_ok(
        &out,
        "reading through the owner what the standby's portal wrote",
    );
    c.step("NBD and iSCSI through the standby reach the owner's volume, both ways");

    // The standby's management API passes every request on to the owner, which accepts the
    // standby's own tokens: the CLI works on either compute machine.
    let made = cli_in(
        &standby.data_dir,
        &["volume", "create", "via-standby", "--size", "64M"],
    );
    assert!(
        made.success(),
        "weft volume create through the standby:\n{}",
        made.all()
    );
    let listed = cli_in(&standby.data_dir, &["volume", "ls", "--json"]);
    assert!(
        listed.success() && listed.stdout.contains("via-standby"),
        "weft volume ls through the standby:\n{}",
        listed.all()
    );
    let owner_listed = c.cli_json(&["volume", "ls", "--json"]).to_string();
    assert!(owner_listed.contains("via-standby"), "{owner_listed}");
    let token = std::fs::read_to_string(standby.data_dir.join("api-token")).unwrap();
    let read_only = std::fs::read_to_string(standby.data_dir.join("api-token-read-only")).unwrap();
    let owner_api = c.cnode.as_ref().unwrap().api.clone();
    let (status, body) = api_request(
        &owner_api,
        "GET",
        "/api/v1/volumes",
        None,
        Some(token.trim()),
    );
    assert_eq!(status, 200, "the owner accepts the standby's token: {body}");
    let (status, body) = api_request(&standby_api, "GET", "/api/v1/volumes", None, Some("wrong"));
    assert_eq!(status, 401, "a wrong token through the standby: {body}");
    let (status, body) = api_request(
        &standby_api,
        "DELETE",
        "/api/v1/volumes/via-standby",
        None,
        Some(read_only.trim()),
    );
    assert_eq!(
        status, 403,
        "the standby's read-only token may not delete: {body}"
    );
    let (status, body) = api_request(
        &standby_api,
        "GET",
        "/api/v1/cluster",
        None,
        Some(token.trim()),
    );
    assert!(
        status == 200 && !body.contains("recovering"),
        "the cluster's status through the standby is the owner's: {status} {body}"
    );
    // The UI's live statistics: an endless event stream, passed on as the owner sends it.
    let (content_type, served_by, event) =
        first_stream_event(&standby_api, "/api/v1/stats/stream", token.trim());
    assert!(
        content_type.starts_with("text/event-stream"),
        "{content_type}"
    );
    assert_eq!(
        served_by,
        cnode_id(c.cnode.as_ref().unwrap()),
        "x-weft-served-by"
    );
    assert!(
        event.contains("event: volumes") && event.contains("data:"),
        "{event}"
    );
    c.step("the standby's API passes requests to the owner, which accepts the standby's tokens, and streams its live statistics");

    // ALUA: one target port group per c.node, the same answer through either; the owner's
    // group active/optimized, the standby's active/non-optimized.
    let owner_portal: SocketAddr = serving(c.cnode.as_ref().unwrap())["iscsi"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let standby_portal: SocketAddr = standby_json["iscsi"].as_str().unwrap().parse().unwrap();
    let (g1, g2) = (port_group(c.cnode.as_ref().unwrap()), port_group(&standby));
    assert_ne!(g1, g2, "each c.node has a group of its own");
    let mut want = vec![(g1, 0u8, vec![g1 * 256 + 1]), (g2, 1u8, vec![g2 * 256 + 1])];
    want.sort();
    for portal in [owner_portal, standby_portal] {
        let mut s = Session::login(portal, HOST_A, TARGET);
        let mut groups = report_target_port_groups(&mut s);
        groups.sort();
        assert_eq!(groups, want, "REPORT TARGET PORT GROUPS through {portal}");
    }
    let listed = c.cli_json(&["cnode", "list", "--json"]);
    let row = |id: &str| {
        listed
            .as_array()
            .and_then(|rows| rows.iter().find(|r| r["id"] == id).cloned())
            .unwrap_or_else(|| panic!("{id} in weft cnode list: {listed}"))
    };
    let (c1_row, c2_row) = (
        row(&cnode_id(c.cnode.as_ref().unwrap())),
        row(&cnode_id(&standby)),
    );
    assert_eq!(
        (c1_row["port_group"].as_u64(), c1_row["alua_state"].as_str()),
        (Some(u64::from(g1)), Some("active/optimized"))
    );
    assert_eq!(
        (c2_row["port_group"].as_u64(), c2_row["alua_state"].as_str()),
        (Some(u64::from(g2)), Some("active/non-optimized"))
    );
    assert!(c2_row["forward"].is_string(), "{c2_row}");
    c.step(&format!(
        "REPORT TARGET PORT GROUPS through either portal: c1's group {g1} active/optimized, c2's group {g2} active/non-optimized"
    ));

    // A reservation taken through the owner fences a host that writes through the standby, at
    // once: PERSISTENT RESERVE OUT answers only once every other c.node applied the change.
    let mut b = Session::login(standby_portal, HOST_B, TARGET);
    assert_eq!(b.write_block(), GOOD, "no reservation yet");
    let mut a = Session::login(owner_portal, HOST_A, TARGET);
    assert_eq!(a.prout(REGISTER, 0, 0, 0xa, 0).status, GOOD);
    let started = Instant::now();
    assert_eq!(a.prout(RESERVE, EXCLUSIVE_ACCESS, 0xa, 0, 0).status, GOOD);
    let reserve_took = started.elapsed();
    assert_eq!(
        b.write_block(),
        RESERVATION_CONFLICT,
        "B's very next write through c2 is fenced"
    );
    assert_eq!(b.reservation(), Some((0xa, EXCLUSIVE_ACCESS)));
    assert_eq!(a.write_block(), GOOD, "the holder writes through c1");
    assert_eq!(a.prout(CLEAR, 0, 0xa, 0, 0).status, GOOD);
    assert_eq!(
        b.write_block(),
        GOOD,
        "cleared through c1: c2 lets B write at once"
    );
    drop((a, b));
    c.step(&format!(
        "a reservation taken through c1 fences B's very next write through c2 (the RESERVE took {:.1} ms, waiting for c2 to apply it), and its clearing reaches c2 at once",
        reserve_took.as_secs_f64() * 1e3
    ));

    // fio writes through the standby, rate-limited so the owner dies in the middle, then
    // verifies everything it wrote.
    let fio_dir = c.scratch.join("fio");
    std::fs::create_dir_all(&fio_dir).unwrap();
    let args = strs(&[
        "--name=through-standby",
        "--rw=randwrite",
        "--bs=16k",
        "--size=96M",
        "--offset=16M",
        "--iodepth=8",
        "--rate=12m",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--output-format=json",
    ]);
    let fio = {
        let (dir, uri) = (fio_dir.clone(), standby_nbd.clone());
        std::thread::spawn(move || fio(&dir, &uri, &args, Duration::from_secs(240)))
    };
    let c2_id = cnode_id(&standby);
    // The owner lists the standby's client among its sessions.
    poll_until(
        Duration::from_secs(20),
        "a forwarded session on the owner",
        || {
            let v = c.cli_json(&["volume", "sessions", "vol0", "--json"]);
            v.as_array()?
                .iter()
                .any(|s| s["protocol"] == "forwarded" && s["client"] == format!("c.node {c2_id}"))
                .then_some(())
        },
    );
    c.step("the owner lists the standby's forwarded session on vol0");
    std::thread::sleep(Duration::from_millis(2500));
    let owner_dir = c.cnode().data_dir.clone();
    c.cnode().kill9();
    let killed = Instant::now();
    std::fs::remove_dir_all(&owner_dir).expect("deleting the owner's data dir");
    c.step("owner c1 killed -9 and its data dir deleted while fio writes through c2");
    standby
        .wait_ready(Duration::from_secs(90))
        .unwrap_or_else(|_| panic!("the standby did not take over"));
    c.step(&format!(
        "c2 owns the cluster {:.1} s after the kill",
        killed.elapsed().as_secs_f64()
    ));
    let out = fio.join().unwrap();
    assert_fio_ok(&out, "through the standby across the owner's loss");
    // fio's nbd engine prints a line of its own before the JSON.
    let json = &out.stdout[out.stdout.find('{').unwrap_or(0)..];
    let report: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("fio's JSON ({e}):\n{}", out.all()));
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    let written = job["write"]["io_bytes"].as_u64().unwrap_or(0);
    assert!(written >= 96 << 20, "fio wrote {written} bytes of 96 MiB");
    let pause_s = job["write"]["clat_ns"]["max"].as_f64().unwrap_or(0.0) / 1e9;
    c.step(&format!(
        "fio through c2 wrote 96 MiB and verified it; its longest write waited {pause_s:.1} s (the failover)"
    ));
    assert!(
        pause_s < 60.0,
        "a write waited {pause_s:.1} s: longer than the retry window"
    );
    // c2's group is the optimized one now (c1's goes once its registration expires).
    poll_until(
        Duration::from_secs(30),
        "c2's group active/optimized",
        || {
            let mut s = Session::login(standby_portal, HOST_A, TARGET);
            let groups = report_target_port_groups(&mut s);
            (groups == vec![(g2, 0u8, vec![g2 * 256 + 1])]).then_some(())
        },
    );
    c.step(&format!(
        "after the takeover REPORT TARGET PORT GROUPS through c2: its group {g2} alone, active/optimized"
    ));
    c.make_current(standby);
    let out = qemu_io(
        &c.nbd_uri("vol0"),
        &["read -P 0x5a 0 4M".into(), "read -P 0xa5 4M 4M".into()],
    );
    assert_qemu_io_ok(&out, "reading the first patterns after the takeover");
}

/// libiscsi's MultipathIO family with one path through each c.node: I/O on both, COMPARE AND
/// WRITE on both, and Reset: a LUN reset through one path is seen as a unit attention on the
/// very next command through the other (the reset is answered once the other c.node heard
/// of it, through the reservation record's news).
#[test]
fn multipath_io_over_the_portals_of_two_cnodes() {
    let _serial = serial();
    let (c, standby, _seed) = pair("multipath_io_over_the_portals_of_two_cnodes");
    let urls: Vec<String> = [serving(c.cnode.as_ref().unwrap()), serving(&standby)]
        .iter()
        .map(|v| format!("iscsi://{}/{TARGET}/0", v["iscsi"].as_str().unwrap()))
        .collect();
    let url_refs: Vec<&str> = urls.iter().map(String::as_str).collect();
    let results = cunit::run_cunit(&c.scratch, "multipath", "ALL.MultipathIO", &url_refs);
    for (name, (verdict, reason)) in &results {
        eprintln!("{name}: {verdict:?} {reason}");
    }
    assert_eq!(results.len(), 4, "{results:?}");
    assert!(results.contains_key("MultipathIO.Reset"), "{results:?}");
    for (name, (verdict, reason)) in &results {
        assert_eq!(*verdict, cunit::Verdict::Passed, "{name}: {reason}");
    }
    c.step("iscsi-test-cu MultipathIO with a path through each c.node: Simple, Reset (a LUN reset's unit attention on both c.nodes), CompareAndWrite, CompareAndWriteAsync pass");
}

/// The unit attentions TEST UNIT READY reports to `s` before it answers GOOD (at most 8).
fn attentions(s: &mut Session) -> Vec<(u8, u8)> {
    let mut seen = Vec::new();
    for _ in 0..8 {
        let r = s.run(&TEST_UNIT_READY, &[], 0);
        match r.sense {
            Some((UNIT_ATTENTION, asc, ascq)) if r.status == CHECK_CONDITION => {
                seen.push((asc, ascq))
            }
            _ => {
                assert_eq!(r.status, GOOD, "TEST UNIT READY: {r:?}");
                return seen;
            }
        }
    }
    panic!("unit attentions do not stop: {seen:?}");
}

/// RESERVE(6) through one c.node fences another host's writes through the other c.node, and
/// RELEASE(6) or the holder's logout lifts it there at once; a PREEMPT through one c.node
/// leaves the preempted host's nexus on the other c.node a unit attention by the time it
/// returns.
#[test]
fn reserve6_and_reservation_unit_attentions_reach_the_other_cnode() {
    let _serial = serial();
    let (c, standby, _seed) =
        pair("reserve6_and_reservation_unit_attentions_reach_the_other_cnode");
    let portal = |v: serde_json::Value| -> SocketAddr {
        v["iscsi"]
            .as_str()
            .expect("an iSCSI portal")
            .parse()
            .unwrap()
    };
    let (c1_portal, c2_portal) = (
        portal(serving(c.cnode.as_ref().unwrap())),
        portal(serving(&standby)),
    );
    let mut a = Session::login(c1_portal, HOST_A, TARGET);
    let mut b = Session::login(c2_portal, HOST_B, TARGET);
    assert_eq!(b.write_block(), GOOD, "no reservation yet");
    assert_eq!(a.write_block(), GOOD);

    assert_eq!(a.run_past_attentions(&RESERVE6, &[], 0).status, GOOD);
    assert_eq!(
        b.write_block(),
        RESERVATION_CONFLICT,
        "A's RESERVE(6) through c1 fences B's very next write through c2"
    );
    let r = b.run_past_attentions(&RESERVE6, &[], 0);
    assert_eq!(
        r.status, RESERVATION_CONFLICT,
        "B cannot reserve through c2: {r:?}"
    );
    assert_eq!(a.write_block(), GOOD, "the holder writes through c1");
    assert_eq!(a.run_past_attentions(&RELEASE6, &[], 0).status, GOOD);
    assert_eq!(
        b.write_block(),
        GOOD,
        "released through c1: B writes through c2 at once"
    );
    c.step("RESERVE(6) through c1 fences B's very next write through c2; RELEASE(6) through c1 lifts it at once");

    // The holder's nexus is lost (its connection closes): released on every c.node.
    assert_eq!(a.run_past_attentions(&RESERVE6, &[], 0).status, GOOD);
    assert_eq!(b.write_block(), RESERVATION_CONFLICT);
    drop(a);
    let dropped = Instant::now();
    poll_until(
        Duration::from_secs(15),
        "B's write through c2 after A's connection to c1 closed",
        || (b.write_block() == GOOD).then_some(()),
    );
    c.step(&format!(
        "A's connection to c1 closed while it held RESERVE(6): B writes through c2 {:.0} ms later",
        dropped.elapsed().as_secs_f64() * 1e3
    ));

    // A preempts B through c1: B's nexus on c2 has REGISTRATIONS PREEMPTED pending when the
    // PREEMPT returns, and its registration is gone.
    let mut a = Session::login(c1_portal, HOST_A, TARGET);
    assert_eq!(a.prout(REGISTER, 0, 0, 0xa, 0).status, GOOD);
    assert_eq!(b.prout(REGISTER, 0, 0, 0xb, 0).status, GOOD);
    assert_eq!(a.prout(RESERVE, EXCLUSIVE_ACCESS, 0xa, 0, 0).status, GOOD);
    assert_eq!(attentions(&mut b), Vec::new(), "nothing pending for B yet");
    assert_eq!(a.prout(PREEMPT, EXCLUSIVE_ACCESS, 0xa, 0xb, 0).status, GOOD);
    let told = attentions(&mut b);
    assert_eq!(
        told,
        vec![REGISTRATIONS_PREEMPTED],
        "B's next commands through c2 after the PREEMPT through c1"
    );
    assert_eq!(b.keys(), vec![0xa], "B's registration is gone");
    assert_eq!(b.write_block(), RESERVATION_CONFLICT);
    assert_eq!(a.prout(CLEAR, 0, 0xa, 0, 0).status, GOOD);
    assert_eq!(b.write_block(), GOOD);
    c.step("a PREEMPT through c1 leaves B's nexus on c2 REGISTRATIONS PREEMPTED (2Ah/05h) by the time it returns, once");
}

/// A rolling restart of both c.nodes under load: fio writes (and then verifies) through
/// qemu-nbd, whose NBD client reconnects (`reconnect-delay`) to c1's fixed address. c1 is
/// drained (c2 takes over) and restarted as the standby, which serves the reconnected client
/// through c2; then c2 is drained (c1 takes over) and restarted. fio sees pauses, no error.
#[test]
fn a_rolling_restart_of_both_cnodes_under_load_gives_a_reconnecting_client_no_error() {
    let _serial = serial();
    let (mut c, standby, _seed, [c1_port, _]) = pair_on_fixed_nbd_ports(
        "a_rolling_restart_of_both_cnodes_under_load_gives_a_reconnecting_client_no_error",
    );
    let (c1_id, c2_id) = (cnode_id(c.cnode()), cnode_id(&standby));
    // A UNIX socket path must be under 108 bytes: the scratch dir's name is long.
    let socket_dir = tempfile::Builder::new()
        .prefix("weft-qnbd")
        .tempdir_in("/tmp")
        .unwrap();
    let socket = socket_dir.path().join("s");
    let mut qemu_nbd = Bg::spawn(
        std::process::Command::new(require_tool("qemu-nbd"))
            .arg("--image-opts")
            .arg(format!(
                "driver=nbd,server.type=inet,server.host=127.0.0.1,server.port={c1_port},export=vol0,reconnect-delay=60"
            ))
            .arg("--persistent")
            .arg("--socket")
            .arg(&socket),
    );
    poll_until(Duration::from_secs(20), "qemu-nbd's socket", || {
        if let Some(status) = qemu_nbd.try_wait() {
            panic!("qemu-nbd exited ({status}):\n{}", qemu_nbd.all_so_far());
        }
        socket.exists().then_some(())
    });
    let fio_dir = c.scratch.join("fio");
    std::fs::create_dir_all(&fio_dir).unwrap();
    let args = strs(&[
        "--name=rolling",
        "--rw=randwrite",
        "--bs=16k",
        "--size=64M",
        "--iodepth=4",
        "--rate=2m",
        "--verify=crc32c",
        "--do_verify=1",
        "--verify_fatal=1",
        "--output-format=json",
    ]);
    let uri = format!("nbd+unix:///?socket={}", socket.display());
    let fio = {
        let dir = fio_dir.clone();
        std::thread::spawn(move || fio(&dir, &uri, &args, Duration::from_secs(300)))
    };
    std::thread::sleep(Duration::from_secs(3));

    // c1 drained: c2 owns; c1 restarted on its data dir and port: the standby, forwarding.
    let mut c2 = standby;
    c.cli_json(&["cnode", "drain", &c1_id, "--yes", "--json"]);
    c2.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c2 did not take over from the drained c1"));
    poll_until(Duration::from_secs(30), "the drained c1 to exit", || {
        (!c.cnode().is_running()).then_some(())
    });
    c.make_current(c2);
    let c1 = c.spawn_other_cnode("c1");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c1);
    serving(&c1);
    c.step("c1 drained, c2 serves; c1 restarted as c2's standby on its old address");
    std::thread::sleep(Duration::from_secs(3));

    // c2 drained: c1 owns again; c2 restarted as its standby.
    let mut c1 = c1;
    c.cli_json(&["cnode", "drain", &c2_id, "--yes", "--json"]);
    c1.wait_ready(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("c1 did not take over from the drained c2"));
    poll_until(Duration::from_secs(30), "the drained c2 to exit", || {
        (!c.cnode().is_running()).then_some(())
    });
    c.make_current(c1);
    let c2 = c.spawn_other_cnode("c2");
    wait_for_mirror(&c, c.cnode.as_ref().unwrap(), &c2);
    c.step("c2 drained, c1 serves again; c2 restarted as its standby");

    let out = fio.join().unwrap();
    assert_fio_ok(
        &out,
        "through qemu-nbd across a rolling restart of both c.nodes",
    );
    let json = &out.stdout[out.stdout.find('{').unwrap_or(0)..];
    let report: serde_json::Value =
        serde_json::from_str(json).unwrap_or_else(|e| panic!("fio's JSON ({e}):\n{}", out.all()));
    let job = &report["jobs"][0];
    assert_eq!(job["error"], 0, "{job}");
    let pause_s = job["write"]["clat_ns"]["max"].as_f64().unwrap_or(0.0) / 1e9;
    c.step(&format!(
        "fio wrote 64 MiB through both restarts and verified it; its longest write waited {pause_s:.1} s"
    ));
    qemu_nbd.sigkill();
    drop(c2);
}
