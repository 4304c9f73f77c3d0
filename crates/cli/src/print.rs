//! How the CLI shows API answers to a person: human sizes, aligned tables, and the detail
//! views of a volume, a snapshot and a family. Everything reads the API's JSON loosely (a
//! missing field prints as `-`), so an older or newer server still prints.

use serde_json::Value;

/// Bytes in binary units: `512 B`, `1.5 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// A byte count field as a human size, `-` when absent.
fn size(v: &Value) -> String {
    v.as_u64().map_or("-".into(), human)
}

/// A string field, `-` when absent or null.
fn text(v: &Value) -> String {
    v.as_str().unwrap_or("-").to_string()
}

/// A list of names, comma separated, `-` when empty.
fn names(v: &Value) -> String {
    let list: Vec<&str> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if list.is_empty() {
        "-".into()
    } else {
        list.join(",")
    }
}

/// `1 volume`, `2 volumes`.
fn count(n: &Value, noun: &str) -> String {
    match n.as_u64() {
        Some(1) => format!("1 {noun}"),
        Some(n) => format!("{n} {noun}s"),
        None => format!("- {noun}s"),
    }
}

/// A ratio rounded to two decimals, like `3.21x` (data reduction, write amplification), `-`
/// when there is none (nothing stored yet).
pub fn ratio(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |x| format!("{x:.2}x"))
}

/// Unix seconds as an RFC 3339 date and time in UTC, `2026-05-01T12:34:56Z` (the zone is
/// always said: a bare time is ambiguous in a team spread over zones).
pub fn date(v: &Value) -> String {
    let Some(secs) = v.as_u64() else {
        return "-".into();
    };
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Days since 1970-01-01 to a civil date (H. Hinnant's algorithm), in unsigned arithmetic.
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Print rows under headers, columns as wide as their widest cell. Headers ending in `>` are
/// right-aligned (sizes); the last column is not padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) {
    let widths: Vec<usize> = headers
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let cells = rows.iter().map(|r| r[i].chars().count());
            cells.fold(h.trim_end_matches('>').len(), usize::max)
        })
        .collect();
    let line = |cells: Vec<&str>| {
        let mut out = String::new();
        for (i, (cell, h)) in cells.iter().zip(headers).enumerate() {
            let w = widths[i];
            let last = i + 1 == headers.len();
            match (h.ends_with('>'), last) {
                (true, _) => out.push_str(&format!("{cell:>w$}")),
                (false, true) => out.push_str(cell),
                (false, false) => out.push_str(&format!("{cell:<w$}")),
            }
            if !last {
                out.push_str("  ");
            }
        }
        println!("{}", out.trim_end());
    };
    line(headers.iter().map(|h| h.trim_end_matches('>')).collect());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}

/// The ALLOCATED, OWN, SHARED and UNIQUE cells of a volume or snapshot row.
fn space_cells(space: &Value) -> [String; 4] {
    [
        size(&space["mapped_bytes"]),
        size(&space["own_bytes"]),
        size(&space["shared_bytes"]),
        size(&space["unique_stored_bytes"]),
    ]
}

/// `weft volume list`; a SHARD column in a cluster of several shards.
pub fn volume_table(list: &Value) {
    let entries = list.as_array().map_or(&[][..], Vec::as_slice);
    let sharded = entries.iter().any(|v| v["shard"].as_u64() > Some(0));
    let rows: Vec<Vec<String>> = entries
        .iter()
        .map(|v| {
            let mut row = vec![text(&v["name"])];
            if sharded {
                row.push(v["shard"].as_u64().map_or("-".into(), |s| s.to_string()));
            }
            row.extend([size(&v["size_bytes"]), origin_cell(v)]);
            row.extend(space_cells(&v["space"]));
            row.push(host_names(&v["hosts"]));
            row.push(text(&v["nbd_uri"]));
            row
        })
        .collect();
    let mut headers = vec![
        "NAME",
        "SIZE>",
        "ORIGIN",
        "ALLOCATED>",
        "OWN>",
        "SHARED>",
        "UNIQUE>",
        "HOSTS",
        "NBD URI",
    ];
    if sharded {
        headers.insert(1, "SHARD>");
    }
    table(&headers, &rows);
}

/// `weft snapshot list`.
pub fn snapshot_table(list: &Value) {
    let rows: Vec<Vec<String>> = list
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| {
            let mut row = vec![text(&v["name"]), text(&v["volume"]), size(&v["size_bytes"])];
            row.extend(space_cells(&v["space"]));
            row.extend([names(&v["clones"]), date(&v["created_unix_s"])]);
            row
        })
        .collect();
    let headers = [
        "NAME",
        "VOLUME",
        "SIZE>",
        "ALLOCATED>",
        "OWN>",
        "SHARED>",
        "UNIQUE>",
        "CLONES",
        "CREATED",
    ];
    table(&headers, &rows);
}

/// `weft volume sessions NAME`: one row per client that has the export open.
pub fn session_table(name: &str, list: &Value) {
    let sessions = list.as_array().map_or(&[][..], Vec::as_slice);
    if sessions.is_empty() {
        println!("no client has {name} open");
        return;
    }
    let count = |v: &Value| v.as_u64().map_or("-".into(), |n| n.to_string());
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                text(&s["protocol"]),
                text(&s["client"]),
                // An NBD client is its address: said once.
                if s["address"] == s["client"] {
                    "-".into()
                } else {
                    text(&s["address"])
                },
                text(&s["host"]),
                text(&s["export"]),
                text(&s["since"]),
                count(&s["reads"]),
                count(&s["writes"]),
                size(&s["read_bytes"]),
                size(&s["written_bytes"]),
            ]
        })
        .collect();
    let headers = [
        "PROTOCOL", "CLIENT", "ADDRESS", "HOST", "EXPORT", "SINCE", "READS>", "WRITES>", "READ>",
        "WRITTEN>",
    ];
    table(&headers, &rows);
}

/// The `sessions` lines of volume and snapshot details: how many, then one line each.
fn sessions(v: &Value) {
    let list = v["sessions"].as_array().map_or(&[][..], Vec::as_slice);
    if list.is_empty() {
        field("sessions", "none");
        return;
    }
    field("sessions", count(&Value::from(list.len()), "client"));
    for s in list {
        println!(
            "  {}: {} reads, {} writes",
            session_text(s),
            s["reads"].as_u64().unwrap_or(0),
            s["writes"].as_u64().unwrap_or(0)
        );
    }
}

fn field(key: &str, value: impl std::fmt::Display) {
    println!("{key:<12} {value}");
}

/// The space lines shared by volume and snapshot details.
fn space(v: &Value) {
    let s = &v["space"];
    // "Mapped" is what `volume map` does (a host sees it); blocks that read as written are
    // "allocated" (the API's `mapped_bytes`, kept for compatibility).
    field("allocated", size(&s["mapped_bytes"]));
    field("  own", size(&s["own_bytes"]));
    field("  zero", size(&s["zero_bytes"]));
    field("  shared", size(&s["shared_bytes"]));
    field(
        "unique",
        format!(
            "{} stored (freed by delete)",
            size(&s["unique_stored_bytes"])
        ),
    );
}

/// One line: the family's members and its data reduction.
fn family(v: &Value) {
    let f = &v["family"];
    let r = &f["reduction"];
    let hidden = match f["hidden_snapshots"].as_u64() {
        Some(n) if n > 0 => format!(" ({n} hidden)"),
        _ => String::new(),
    };
    field(
        "family",
        format!(
            "{}: {}, {}{hidden}, stored {}, reduction {} \
             (zero {}, dedup saved {}, compression saved {})",
            f["id"],
            count(&f["volumes"], "volume"),
            count(&f["snapshots"], "snapshot"),
            size(&r["stored_bytes"]),
            ratio(&r["ratio"]),
            size(&r["zero_bytes"]),
            size(&r["dedup_saved_bytes"]),
            size(&r["compression_saved_bytes"]),
        ),
    );
}

/// The sector size a host sees, and what it means.
fn block_size(v: &Value) -> String {
    match v.as_u64() {
        Some(512) => "512 (512e: 4 KiB physical)".into(),
        Some(4096) => "4096 (4Kn)".into(),
        Some(other) => other.to_string(),
        None => "-".into(),
    }
}

/// `weft volume info`.
pub fn volume_details(v: &Value) {
    field("name", text(&v["name"]));
    field("size", size(&v["size_bytes"]));
    field("block size", block_size(&v["logical_block_size"]));
    field("origin", origin(v));
    field("snapshots", names(&v["snapshots"]));
    field("chain", count(&v["chain_layers"], "layer"));
    space(v);
    field("created", date(&v["created_unix_s"]));
    field("qos", crate::qos_cmd::describe(&v["qos"]));
    family(v);
    field("nbd uri", text(&v["nbd_uri"]));
    field("iscsi uri", iscsi_uri(v));
    served_by(v);
    hosts(v);
    sessions(v);
}

/// Cluster mode: the owner c.node and the partner holding its write-buffer mirror.
fn served_by(v: &Value) {
    let s = &v["served_by"];
    let Some(owner) = s["owner"].as_str() else {
        return;
    };
    field("owner c.node", owner.to_string());
    let partner = match (s["partner"].as_str(), s["write_buffer"].as_str()) {
        (None, _) => "none: acknowledged writes not yet in stripes are on the owner alone".into(),
        (Some(p), Some("mirrored")) => format!("{p} (write buffer mirrored)"),
        (Some(p), _) => format!("{p} (DEGRADED: the mirror is not in sync)"),
    };
    field("partner", partner);
}

/// The ORIGIN cell of `volume ls`: `pgdata@mon (rollback)` for the volume's own snapshot,
/// the snapshot alone for a clone or a refresh (its own snapshot is not where it came from).
fn origin_cell(v: &Value) -> String {
    if rolled_back(v) {
        format!("{} (rollback)", text(&v["origin"]))
    } else {
        text(&v["origin"])
    }
}

/// Its origin is one of its own snapshots: it was rolled back to it.
fn rolled_back(v: &Value) -> bool {
    match (v["origin"].as_str(), v["name"].as_str()) {
        (Some(o), Some(name)) => o.strip_prefix(name).is_some_and(|r| r.starts_with('@')),
        _ => false,
    }
}

/// A volume's origin and what made it: its own snapshot after a rollback, another volume's
/// for a clone or after a refresh.
fn origin(v: &Value) -> String {
    match (v["origin"].as_str(), v["name"].as_str()) {
        (None, _) => "-".into(),
        (Some(o), _) if rolled_back(v) => format!("{o} (rolled back to it)"),
        (Some(o), _) => format!("{o} (a clone of it, or refreshed to it)"),
    }
}

/// `weft snapshot info`.
pub fn snapshot_details(v: &Value) {
    field("name", text(&v["name"]));
    field("volume", text(&v["volume"]));
    field("size", size(&v["size_bytes"]));
    field("block size", block_size(&v["logical_block_size"]));
    field("clones", names(&v["clones"]));
    field("chain", count(&v["chain_layers"], "layer"));
    space(v);
    field("created", date(&v["created_unix_s"]));
    family(v);
    field("nbd uri", format!("{} (read-only)", text(&v["nbd_uri"])));
    field("iscsi uri", iscsi_uri(v));
    served_by(v);
    hosts(v);
    sessions(v);
}

/// The export's own iSCSI target (LUN 0), for initiators on loopback or an open portal.
fn iscsi_uri(v: &Value) -> String {
    match v["iscsi_uri"].as_str() {
        Some(uri) => format!("{uri} (its own target)"),
        None => "- (iSCSI off)".into(),
    }
}

/// The hosts an export is mapped to: one line each, with the LUN and its URI on the array
/// target.
fn hosts(v: &Value) {
    let list = v["hosts"].as_array().map_or(&[][..], Vec::as_slice);
    if list.is_empty() {
        field(
            "hosts",
            "none (not mapped: weft volume map NAME --host HOST)",
        );
        return;
    }
    field("hosts", count(&Value::from(list.len()), "host"));
    for m in list {
        println!(
            "  {}: LUN {}{}",
            text(&m["host"]),
            m["lun"],
            m["iscsi_uri"]
                .as_str()
                .map_or(String::new(), |u| format!(", {u}"))
        );
    }
}

/// `db1:0,db2:3` (host:LUN), `-` when mapped to none.
fn host_names(v: &Value) -> String {
    let list: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| format!("{}:{}", text(&m["host"]), m["lun"]))
        .collect();
    if list.is_empty() {
        "-".into()
    } else {
        list.join(",")
    }
}

/// Bytes written to chunks per byte of new data (what GC moved is written twice); `null`
/// before anything is written.
fn gc_amplification(chunk_written: u64, gc_moved: u64) -> Value {
    let new_data = chunk_written.saturating_sub(gc_moved);
    if new_data == 0 {
        return Value::Null;
    }
    #[allow(clippy::cast_precision_loss)]
    Value::from(chunk_written as f64 / new_data as f64)
}

/// A count from the API, 0 when absent.
pub fn count_of(v: &Value) -> usize {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0)
}

/// `1 snapshot`, `0 snapshots`, `3 clones`.
pub fn plural(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// `weft stats` for a person; `capacity` is the capacity report (`GET /capacity`) when the
/// server has one, for the space line.
pub fn stats(v: &Value, capacity: Option<&Value>) {
    let r = &v["reduction"];
    let line = |label: &str, value: String| println!("{label:<18}{value}");
    line("logical", human(r["logical_bytes"].as_u64().unwrap_or(0)));
    line("stored", human(r["stored_bytes"].as_u64().unwrap_or(0)));
    line("reduction ratio", ratio(&r["ratio"]));
    line("  zero", human(r["zero_bytes"].as_u64().unwrap_or(0)));
    line(
        "  dedup saved",
        human(r["dedup_saved_bytes"].as_u64().unwrap_or(0)),
    );
    line(
        "  compress saved",
        human(r["compression_saved_bytes"].as_u64().unwrap_or(0)),
    );
    line("space", space_line(v, capacity));
    let host = v["host_written_bytes"].as_u64().unwrap_or(0);
    let chunk = v["chunk_written_bytes"].as_u64().unwrap_or(0);
    let gc = &v["gc"];
    let moved = gc["bytes_moved"].as_u64().unwrap_or(0);
    line(
        "disk per host",
        format!(
            "{} ({} written to chunks for {} from hosts; reduction makes it less than 1, GC \
             and parity more)",
            ratio(&v["write_amplification"]),
            human(chunk),
            human(host)
        ),
    );
    line(
        "GC amplification",
        format!(
            "{} (chunk bytes per byte of new data; 1.00x: GC moved nothing)",
            ratio(&gc_amplification(chunk, moved))
        ),
    );
    line(
        "gc",
        format!(
            "{}, {} reclaimed, {} moved, {} freed",
            plural(count_of(&gc["runs"]), "run"),
            plural(count_of(&gc["segments_reclaimed"]), "segment"),
            human(moved),
            human(gc["bytes_reclaimed"].as_u64().unwrap_or(0))
        ),
    );
    line(
        "write buffer",
        human(v["buffer_bytes"].as_u64().unwrap_or(0)),
    );
}

/// `16.0 MiB used, 49.4 GiB free of 49.9 GiB weft can fill (weft status: the file
/// systems)`: the capacity report's figures, the ones `weft status` prints, and the
/// `--capacity` limit when there is one. Without a report (an older server), the engine's.
fn space_line(v: &Value, capacity: Option<&Value>) -> String {
    let limit = v["capacity_bytes"]
        .as_u64()
        .map_or(String::new(), |l| format!(", --capacity {}", human(l)));
    match capacity {
        Some(c) if c["raw_bytes"].is_u64() => format!(
            "{} used, {} free of {} weft can fill{limit} (weft status: the file systems)",
            human(c["used_bytes"].as_u64().unwrap_or(0)),
            human(c["free_bytes"].as_u64().unwrap_or(0)),
            human(c["raw_bytes"].as_u64().unwrap_or(0)),
        ),
        _ => format!(
            "{} used{}",
            human(v["used_bytes"].as_u64().unwrap_or(0)),
            if limit.is_empty() {
                ", no --capacity limit (weft status: the file systems' free space)".into()
            } else {
                limit
            }
        ),
    }
}

/// `nbd 127.0.0.1:53010 since 2026-11-24T06:50:54Z`, `iscsi iqn.x:db1 from 10.0.0.5:40312
/// (host db1) since ...`, with the snapshot it reads when it is one.
pub fn session_text(s: &Value) -> String {
    let mut out = format!(
        "{} {}",
        s["protocol"].as_str().unwrap_or("?"),
        s["client"].as_str().unwrap_or("?")
    );
    if s["protocol"] == "iscsi" {
        out.push_str(&format!(" from {}", s["address"].as_str().unwrap_or("?")));
    }
    if let Some(host) = s["host"].as_str() {
        out.push_str(&format!(" (host {host})"));
    }
    if let Some(export) = s["export"].as_str().filter(|e| e.contains('@')) {
        out.push_str(&format!(" on {export}"));
    }
    out.push_str(&format!(" since {}", s["since"].as_str().unwrap_or("-")));
    out
}

#[cfg(test)]
mod tests {
    use super::{date, gc_amplification, human, plural, ratio};
    use serde_json::{json, Value};

    #[test]
    fn dates_are_rfc3339_in_utc() {
        assert_eq!(date(&json!(0)), "1970-01-01T00:00:00Z");
        assert_eq!(date(&json!(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(date(&json!(1_767_225_599)), "2025-12-31T23:59:59Z");
        assert_eq!(date(&json!(null)), "-");
    }

    #[test]
    fn ratios_are_rounded() {
        assert_eq!(ratio(&json!(3.214_999)), "3.21x");
        assert_eq!(ratio(&json!(1)), "1.00x");
        assert_eq!(ratio(&json!(null)), "-");
    }

    #[test]
    fn plurals() {
        assert_eq!(plural(0, "snapshot"), "0 snapshots");
        assert_eq!(plural(1, "snapshot"), "1 snapshot");
        assert_eq!(plural(3, "clone"), "3 clones");
    }

    #[test]
    fn sizes_are_binary() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(10 << 30), "10.0 GiB");
        assert_eq!(human(3 << 39), "1.5 TiB");
        assert_eq!(human(1 << 62), "4.0 EiB");
    }

    #[test]
    fn gc_amplification_counts_moved_bytes_as_written_twice() {
        assert_eq!(gc_amplification(0, 0), Value::Null);
        assert_eq!(gc_amplification(100, 0), Value::from(1.0));
        assert_eq!(gc_amplification(150, 50), Value::from(1.5));
    }
}
