//! QoS per consistency group through the real `weft` binary and fio's nbd engine: a group
//! limited with `weft group qos` holds its two members' sum at the limit (within 5%) while
//! fio drives both at once; the group's throttled count shows in the API; the settings are
//! in the group's record (`weft group info`) and survive kill -9 and a restart; the route
//! needs the token, an unknown group is 404, `--clear` removes them.
//!
//! Needs fio.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// The group's limit, in 4 KiB IOPS.
const GROUP_IOPS: f64 = 1000.0;

/// fio 4 KiB random writes at QD16 on every export of `exports` at once (one job each, one
/// fio, so their windows line up), after a 1 s ramp that spends the burst; each job's IOPS.
fn fio_together(srv: &Server, exports: &[&str], seconds: u32) -> Vec<f64> {
    let dir = srv.scratch.join("fio-group");
    std::fs::create_dir_all(&dir).unwrap();
    let out_path = dir.join("together.json");
    let mut cmd = Command::new(require_tool("fio"));
    cmd.current_dir(&dir).args([
        "--ioengine=nbd",
        "--rw=randwrite",
        "--bs=4k",
        "--size=16M",
        "--iodepth=16",
        "--time_based",
        &format!("--runtime={seconds}"),
        "--ramp_time=1",
        "--output-format=json",
        &format!("--output={}", out_path.display()),
    ]);
    for e in exports {
        cmd.arg(format!("--name={e}"))
            .arg(format!("--uri={}", srv.nbd_uri(e)));
    }
    let out = Bg::spawn_group(&mut cmd).wait(Duration::from_secs(u64::from(seconds) + 60));
    assert_fio_ok(&out, "randwrite QD16 on the members");
    let text = std::fs::read_to_string(&out_path).unwrap();
    let v: Value = serde_json::from_str(&text[text.find('{').unwrap()..]).unwrap();
    v["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["write"]["iops"].as_f64().unwrap())
        .collect()
}

#[test]
fn a_group_limit_holds_the_sum_of_its_members() {
    const TEST: &str = "a_group_limit_holds_the_sum_of_its_members";
    require_tools(&["fio"]);
    let mut srv = Server::start_with(TEST, ServeOpts::default().volume_size("16M"));
    if srv.skip_without_api(TEST) {
        return;
    }
    for v in ["pgdata", "pgwal"] {
        srv.cli_ok(&["volume", "create", v, "--size", "16M"]);
    }
    srv.cli_ok(&["group", "create", "pg", "--volumes", "pgdata,pgwal"]);

    // The route needs the token; an unknown group is 404.
    for (method, body) in [
        ("GET", None),
        ("PUT", Some(json!({"iops_max": 1}))),
        ("DELETE", None),
    ] {
        let (status, _) = api_request(&srv.api, method, "/api/v1/groups/pg/qos", body, None);
        assert_eq!(status, 401, "{method} without a token");
    }
    assert_eq!(srv.api("GET", "/api/v1/groups/nope/qos", None).0, 404);
    let out = srv.cli(&["group", "qos", "nope", "--iops-max", "10"]);
    assert!(!out.success(), "{}", out.all());

    let set = srv.cli_json(&[
        "--json",
        "group",
        "qos",
        "pg",
        "--iops-max",
        &format!("{GROUP_IOPS}"),
    ]);
    assert_eq!(set["settings"], json!({"iops_max": 1000}), "{set}");
    assert_eq!(set["effective"]["iops_max"], 1000, "{set}");
    let info = srv.cli_json(&["--json", "group", "info", "pg"]);
    assert_eq!(info["qos"], json!({"iops_max": 1000}), "{info}");
    assert!(srv
        .cli_ok(&["group", "info", "pg"])
        .contains("IOPS <= 1000"));

    let iops = fio_together(&srv, &["pgdata", "pgwal"], 5);
    let sum: f64 = iops.iter().sum();
    eprintln!("members {iops:?}, sum {sum:.0} under a group limit of {GROUP_IOPS}");
    assert!(
        (sum - GROUP_IOPS).abs() <= GROUP_IOPS * 0.05,
        "the members' sum {sum:.0} is not within 5% of {GROUP_IOPS}: {iops:?}"
    );
    for (v, i) in ["pgdata", "pgwal"].iter().zip(&iops) {
        assert!(*i >= GROUP_IOPS * 0.2, "{v} starved: {i:.0} IOPS");
    }
    let shown = srv.cli_json(&["--json", "group", "qos", "pg"]);
    assert!(shown["throttled_ios"].as_u64().unwrap() > 0, "{shown}");
    assert!(srv.cli_ok(&["group", "qos", "pg"]).contains("throttled:"));
    // The members' own counts include the waits for the group's buckets.
    let member = srv.api_json("GET", "/api/v1/volumes/pgdata/qos", None);
    assert!(member["throttled_ios"].as_u64().unwrap() > 0, "{member}");

    // In the catalog: kept over kill -9 and a restart.
    srv.kill9_and_restart();
    let again = srv.cli_json(&["--json", "group", "qos", "pg"]);
    assert_eq!(again["settings"], json!({"iops_max": 1000}), "{again}");

    // Changed (other fields kept), then cleared.
    let changed = srv.cli_json(&["--json", "group", "qos", "pg", "--iops-burst", "50"]);
    assert_eq!(
        changed["settings"],
        json!({"iops_max": 1000, "iops_burst": 50}),
        "{changed}"
    );
    let cleared = srv.cli_json(&["--json", "group", "qos", "pg", "--clear"]);
    assert!(cleared.get("settings").is_none(), "{cleared}");
    assert!(srv
        .cli_json(&["--json", "group", "info", "pg"])
        .get("qos")
        .is_none());
}
