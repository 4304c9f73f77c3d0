//! `weft status`: one screen on the datastore: is the server there, where it listens (from
//! its serve.json), what it holds, how full it is, its data reduction and destage backlog,
//! and, in a cluster, its d.nodes and rebuild. Built from existing endpoints only
//! (`/stats`, `/volumes`, `/cluster`, `/capacity`: the real free space of the file systems,
//! overcommit, days to full and the 80/90 % warnings). An unreachable server is said on stdout too (also as
//! JSON with `--json`) and exits with the unreachable code.
//!
//! The server's version comes from `GET /api/v1/version` (shown beside the CLI's own).

use std::path::Path;

use serde_json::{json, Value};

use crate::client::{print_json, ApiClient};
use crate::exit_code::Failure;
use crate::print::{human, ratio};

pub fn status(
    data_dir: &Path,
    client: anyhow::Result<ApiClient>,
    json: bool,
) -> anyhow::Result<()> {
    let serve_file = read_serve_file(data_dir);
    let client = match client {
        Ok(c) => c,
        Err(e) => return unreachable(json, None, e),
    };
    let stats = match client.call("GET", "/stats", None) {
        Ok(v) => v,
        Err(e) if is_unreachable(&e) => return unreachable(json, Some(client.base()), e),
        Err(e) => return Err(e),
    };
    let volumes = client.call("GET", "/volumes", None)?;
    // Servers before /version answer 404: the status says "not reported".
    let server_version = client
        .call("GET", "/version", None)
        .ok()
        .and_then(|v| v["version"].as_str().map(str::to_string));
    // Optional: a server without the route (or refusing it) still gets a status.
    let cluster = client.call("GET", "/cluster", None).ok();
    // Optional too: a server from before the capacity report answers 404.
    let capacity = client.call("GET", "/capacity", None).ok();
    // serve.json describes the server of this data dir: only trust it for the same API.
    let serve_file = serve_file.filter(|v| v["api"].as_str() == Some(client.base()));
    let report = report(
        client.base(),
        serve_file.as_ref(),
        &stats,
        &volumes,
        cluster,
        capacity,
        server_version.as_deref(),
    );
    if json {
        print_json(&report)
    } else {
        print_report(&report);
        Ok(())
    }
}

fn read_serve_file(data_dir: &Path) -> Option<Value> {
    let text = std::fs::read_to_string(data_dir.join(weft_server::serve::SERVE_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

fn is_unreachable(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|c| matches!(c.downcast_ref::<Failure>(), Some(Failure::Unreachable(_))))
}

/// Say so on stdout, then fail with the unreachable exit code.
fn unreachable(json: bool, api: Option<&str>, e: anyhow::Error) -> anyhow::Result<()> {
    let message = format!("{e:#}");
    if json {
        print_json(&json!({ "reachable": false, "api": api, "error": message }))?;
    } else {
        line("server", format!("{}: NOT reachable", api.unwrap_or("-")));
    }
    Err(Failure::Unreachable(message).into())
}

/// The status as JSON: what `--json` prints and the screen shows.
fn report(
    api: &str,
    serve_file: Option<&Value>,
    stats: &Value,
    volumes: &Value,
    cluster: Option<Value>,
    capacity: Option<Value>,
    server_version: Option<&str>,
) -> Value {
    let list = volumes.as_array().map(Vec::as_slice).unwrap_or_default();
    let provisioned: u64 = list.iter().filter_map(|v| v["size_bytes"].as_u64()).sum();
    let r = &stats["reduction"];
    json!({
        "reachable": true,
        "api": api,
        "server_version": server_version,
        "cli_version": env!("CARGO_PKG_VERSION"),
        "pid": serve_file.map(|s| s["pid"].clone()),
        "nbd": serve_file.map(|s| s["nbd"].clone()),
        "iscsi_portals": serve_file.map(|s| s["iscsi_portals"].clone()),
        "iscsi_array_target": serve_file.map(|s| s["iscsi_array_target"].clone()),
        "volumes": list.len(),
        "snapshots": stats["snapshots"],
        "provisioned_bytes": provisioned,
        "capacity_bytes": stats["capacity_bytes"],
        "used_bytes": stats["used_bytes"],
        "out_of_space": stats["out_of_space"],
        "capacity": capacity,
        "reduction": {
            "ratio": r["ratio"],
            "logical_bytes": r["logical_bytes"],
            "stored_bytes": r["stored_bytes"],
        },
        "write_buffer": {
            "bytes": stats["buffer_bytes"],
            "records": stats["buffer_records"],
        },
        "cluster": cluster,
    })
}

fn line(key: &str, value: impl std::fmt::Display) {
    println!("{key:<13} {value}");
}

fn size(v: &Value) -> String {
    v.as_u64().map_or("-".into(), human)
}

fn print_report(r: &Value) {
    let pid = r["pid"]
        .as_u64()
        .map_or(String::new(), |p| format!(", pid {p}"));
    let version = match (r["server_version"].as_str(), r["cli_version"].as_str()) {
        (Some(server), Some(cli)) if server == cli => format!("weft {server}"),
        (Some(server), cli) => format!("weft {server} (this CLI: weft {})", cli.unwrap_or("-")),
        (None, cli) => format!(
            "version not reported (this CLI: weft {})",
            cli.unwrap_or("-")
        ),
    };
    line(
        "server",
        format!(
            "{}: reachable{pid}; {version}",
            r["api"].as_str().unwrap_or("-")
        ),
    );
    match r["nbd"].as_str() {
        Some(nbd) => line("nbd", nbd),
        None => line("nbd", "- (no serve.json of this server in the data dir)"),
    }
    let portals: Vec<&str> = r["iscsi_portals"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    match (portals.is_empty(), r["iscsi_array_target"].as_str()) {
        (false, Some(target)) => line("iscsi", format!("{} ({target})", portals.join(", "))),
        (false, None) => line("iscsi", portals.join(", ")),
        (true, _) if r["nbd"].is_string() => line("iscsi", "off"),
        (true, _) => line("iscsi", "-"),
    }
    line(
        "volumes",
        format!(
            "{} ({} provisioned), {} snapshots",
            r["volumes"],
            size(&r["provisioned_bytes"]),
            r["snapshots"]
        ),
    );
    let full = if r["out_of_space"].as_bool() == Some(true) {
        "; OUT OF SPACE: writers get ENOSPC"
    } else {
        ""
    };
    if r["capacity"].is_object() {
        print_capacity(&r["capacity"], full);
    } else {
        // A server from before the capacity report: its engine's figures.
        let used = r["used_bytes"].as_u64().unwrap_or(0);
        let space = match r["capacity_bytes"].as_u64() {
            Some(cap) if cap > 0 => format!("{} used of {}", human(used), human(cap)),
            _ => format!("{} used, no capacity limit", human(used)),
        };
        line("space", format!("{space}{full}"));
    }
    let red = &r["reduction"];
    line(
        "reduction",
        format!(
            "{} ({} logical, {} stored)",
            ratio(&red["ratio"]),
            size(&red["logical_bytes"]),
            size(&red["stored_bytes"])
        ),
    );
    let wb = &r["write_buffer"];
    line(
        "write buffer",
        format!(
            "{} in {} records awaiting destage",
            size(&wb["bytes"]),
            wb["records"]
        ),
    );
    print_cluster(&r["cluster"]);
}

/// The capacity report (`GET /api/v1/capacity`): space, overcommit, growth, each file
/// system, and its warnings last, where the eye ends.
fn print_capacity(c: &Value, full: &str) {
    line(
        "space",
        format!(
            "{} used, {} free of {} ({:.1} % used; {} more kept for GC){full}",
            size(&c["used_bytes"]),
            size(&c["free_bytes"]),
            size(&c["raw_bytes"]),
            c["used_percent"].as_f64().unwrap_or(0.0),
            size(&c["reserved_bytes"])
        ),
    );
    line(
        "usable",
        format!(
            "{} for host data after redundancy {} ({} of it free)",
            size(&c["usable_bytes"]),
            c["redundancy"].as_str().unwrap_or("-"),
            size(&c["usable_free_bytes"])
        ),
    );
    let overcommit = c["overcommit"]
        .as_f64()
        .map_or("-".to_string(), |o| format!("{o:.2}x"));
    line(
        "overcommit",
        format!(
            "{overcommit} ({} provisioned / {} usable)",
            size(&c["provisioned_bytes"]),
            size(&c["usable_bytes"])
        ),
    );
    let growth = match (
        c["growth_bytes_per_day"].as_f64(),
        c["days_to_full"].as_f64(),
    ) {
        (None, _) => "not measured yet (two samples a second apart are needed)".to_string(),
        (Some(g), Some(days)) => format!(
            "{}/day over the last {}: full in {}",
            signed(g),
            duration(c["growth_window_s"].as_u64().unwrap_or(0)),
            full_in(days)
        ),
        (Some(g), None) => format!(
            "{}/day over the last {}: not growing",
            signed(g),
            duration(c["growth_window_s"].as_u64().unwrap_or(0))
        ),
    };
    line("growth", growth);
    for fs in c["filesystems"].as_array().into_iter().flatten() {
        let paths: Vec<&str> = fs["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        line(
            "file system",
            format!(
                "{:.0} % full, {} free of {}, weft {}: {}",
                fs["used_percent"].as_f64().unwrap_or(0.0),
                size(&fs["free_bytes"]),
                size(&fs["size_bytes"]),
                size(&fs["weft_used_bytes"]),
                paths.join(", ")
            ),
        );
    }
    let level = match c["level"].as_str() {
        Some("critical") => "CRITICAL",
        _ => "WARNING",
    };
    for w in c["warnings"].as_array().into_iter().flatten() {
        line(level, w.as_str().unwrap_or("-"));
    }
}

/// `3.2 days`, or `5.0 hours` under a day.
fn full_in(days: f64) -> String {
    if days >= 1.0 {
        format!("{days:.1} days")
    } else {
        format!("{:.1} hours", days * 24.0)
    }
}

/// `+1.5 GiB` or `-200.0 MiB`.
fn signed(bytes: f64) -> String {
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let magnitude = human(bytes.abs() as u64);
    if bytes < 0.0 {
        format!("-{magnitude}")
    } else {
        format!("+{magnitude}")
    }
}

/// `45 s`, `12 min`, `5.5 h`.
fn duration(seconds: u64) -> String {
    match seconds {
        0..120 => format!("{seconds} s"),
        120..7200 => format!("{} min", seconds / 60),
        #[allow(clippy::cast_precision_loss)]
        _ => format!("{:.1} h", seconds as f64 / 3600.0),
    }
}

fn print_cluster(c: &Value) {
    match c["mode"].as_str() {
        Some("cluster") => {}
        Some(mode) => return line("mode", mode),
        None => return line("mode", "- (the cluster status did not answer)"),
    }
    let health = match c["healthy"].as_bool() {
        Some(true) => "healthy",
        Some(false) => "NOT healthy",
        None => "health unknown",
    };
    line("mode", format!("cluster, {health}"));
    let nodes = c["nodes"].as_array().map(Vec::as_slice).unwrap_or_default();
    let count = |state: &str| nodes.iter().filter(|n| n["state"] == state).count();
    line(
        "d.nodes",
        format!(
            "{}: {} up, {} down, {} out",
            nodes.len(),
            count("up"),
            count("down"),
            count("out")
        ),
    );
    let r = &c["repair"];
    if r["running"].as_bool() == Some(true) {
        line(
            "rebuild",
            format!(
                "{}/{} chunks, ETA {}",
                r["chunks_rebuilt"],
                r["chunks_to_rebuild"],
                r["eta_s"].as_u64().map_or("?".into(), |s| format!("{s} s"))
            ),
        );
    } else {
        line(
            "rebuild",
            format!(
                "idle; {} chunks rebuilt since start",
                r["chunks_rebuilt_total"]
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_counts_and_sums_from_the_api() {
        let stats = json!({
            "snapshots": 2, "capacity_bytes": 100u64 << 30, "used_bytes": 1u64 << 30,
            "out_of_space": false, "buffer_bytes": 4096, "buffer_records": 1,
            "reduction": { "ratio": 3.214, "logical_bytes": 10u64 << 30, "stored_bytes": 3u64 << 30 },
        });
        let volumes = json!([{ "size_bytes": 1u64 << 30 }, { "size_bytes": 2u64 << 30 }]);
        let serve = json!({ "api": "http://a", "nbd": "127.0.0.1:1", "pid": 7 });
        let r = report(
            "http://a",
            Some(&serve),
            &stats,
            &volumes,
            None,
            None,
            Some("9.9.9"),
        );
        assert_eq!(r["volumes"], 2);
        assert_eq!(r["provisioned_bytes"], 3u64 << 30);
        assert_eq!(r["nbd"], "127.0.0.1:1");
        assert_eq!(r["write_buffer"]["records"], 1);
        assert_eq!(r["server_version"], "9.9.9");
        assert_eq!(ratio(&r["reduction"]["ratio"]), "3.21x");
    }
}
