//! `weft snapshot schedule VOLUME --every 1h --keep 24 [--daily 7]` (set or replace a
//! volume's schedule; `--remove` removes it, its snapshots stay) and `weft snapshot
//! schedules` (each with its retention, last and next run and how many snapshots it holds).
//! The server fires them (see the server's `snapshot_scheduler`).

use std::time::Duration;

use clap::Args;
use serde_json::{json, Value};

use crate::client::{seg, show, ApiClient};
use crate::exit_code::Failure;
use crate::print::{date, table};

#[derive(Debug, Args)]
pub struct ScheduleArgs {
    /// The volume to snapshot.
    volume: String,
    /// Time between snapshots (at least 1m): 15m, 1h, 1d.
    #[arg(long, value_parser = crate::cluster_cmd::parse_duration, required_unless_present = "remove")]
    every: Option<Duration>,
    /// Keep this many of the newest scheduled snapshots.
    #[arg(long, required_unless_present = "remove")]
    keep: Option<u32>,
    /// Also keep the first scheduled snapshot of each of this many newest days.
    #[arg(long, default_value_t = 0)]
    daily: u32,
    /// Remove the volume's schedule (its snapshots stay).
    #[arg(long, conflicts_with_all = ["every", "keep", "daily"])]
    remove: bool,
}

pub fn set(client: &ApiClient, a: ScheduleArgs, json: bool) -> anyhow::Result<()> {
    let path = format!("/volumes/{}/snapshot-schedule", seg(&a.volume));
    if a.remove {
        client.call("DELETE", &path, None)?;
        let v = json!({ "removed": "snapshot schedule", "volume": a.volume });
        return show(json, &v, |_| {
            println!(
                "removed the snapshot schedule of {} (its snapshots stay)",
                a.volume
            );
        });
    }
    let (Some(every), Some(keep)) = (a.every, a.keep) else {
        return Err(Failure::Usage("give --every and --keep, or --remove".into()).into());
    };
    let body = json!({ "every_s": every.as_secs(), "keep": keep, "daily": a.daily });
    let v = client.call("PUT", &path, Some(body))?;
    show(json, &v, |v| {
        println!(
            "snapshot schedule of {}: {}, next run {}",
            a.volume,
            policy(v),
            date(&v["next_run_unix_s"])
        );
    })
}

pub fn list(client: &ApiClient, json: bool) -> anyhow::Result<()> {
    let v = client.call("GET", "/snapshot-schedules", None)?;
    show(json, &v, |v| {
        let schedules = v.as_array().cloned().unwrap_or_default();
        if schedules.is_empty() {
            println!("no snapshot schedules (weft snapshot schedule VOLUME --every 1h --keep 24)");
            return;
        }
        let rows: Vec<Vec<String>> = schedules
            .iter()
            .map(|s| {
                vec![
                    s["volume"].as_str().unwrap_or("").to_string(),
                    policy(s),
                    s["snapshots"].as_array().map_or(0, Vec::len).to_string(),
                    date(&s["last_run_unix_s"]),
                    date(&s["next_run_unix_s"]),
                ]
            })
            .collect();
        table(
            &["VOLUME", "POLICY", "SNAPSHOTS>", "LAST RUN", "NEXT RUN"],
            &rows,
        );
    })
}

/// `every 1h, keep 24, daily 7`.
fn policy(v: &Value) -> String {
    let mut text = format!(
        "every {}, keep {}",
        interval(v["every_s"].as_u64().unwrap_or(0)),
        v["keep"]
    );
    if let Some(d) = v["daily"].as_u64().filter(|d| *d > 0) {
        text.push_str(&format!(", daily {d}"));
    }
    text
}

/// Seconds in the largest unit that divides them: `1h`, `90m`, `1d`.
fn interval(secs: u64) -> String {
    match secs {
        0 => "0s".into(),
        s if s % 86_400 == 0 => format!("{}d", s / 86_400),
        s if s % 3600 == 0 => format!("{}h", s / 3600),
        s if s % 60 == 0 => format!("{}m", s / 60),
        s => format!("{s}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_print_in_their_largest_whole_unit() {
        assert_eq!(interval(3600), "1h");
        assert_eq!(interval(5400), "90m");
        assert_eq!(interval(86_400 * 2), "2d");
        assert_eq!(interval(61), "61s");
        let v = json!({ "every_s": 3600, "keep": 24, "daily": 7 });
        assert_eq!(policy(&v), "every 1h, keep 24, daily 7");
    }
}
