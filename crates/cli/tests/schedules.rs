//! Snapshot schedules through the real `weft` binary, on a fast test clock (the hidden
//! `--test-clock-scale 14400` of `weft serve`: a scheduled hour passes in 0.25 s, a day in 6 s):
//! `weft snapshot schedule pg --every 1h --keep 4 --daily 2` fires, names its snapshots by the
//! scheduler's time, prunes them to exactly what its retention keeps, survives kill -9 (and
//! goes on firing after it), and goes with its volume.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::*;
use serde_json::Value;

const SCALE: &str = "--test-clock-scale=14400";
const HOUR_S: u64 = 3600;
const DAY_S: u64 = 86_400;
const KEEP: usize = 4;
const DAILY: usize = 2;

/// `auto-YYYYMMDD-HHMMSS` to Unix seconds (UTC).
fn stamp(short: &str) -> u64 {
    let s = short.strip_prefix("auto-").expect("an auto- name");
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().expect("digits");
    let (y, m, d) = (n(0, 4), n(4, 6), n(6, 8));
    // Days from civil (H. Hinnant), signed.
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + n(9, 11) * 3600 + n(11, 13) * 60 + n(13, 15);
    u64::try_from(secs).expect("after 1970")
}

/// The scheduled snapshots of `pg`, as taken times, oldest first.
fn auto_snapshots(srv: &Server) -> Vec<u64> {
    let list = srv.cli_json(&["snapshot", "list", "pg", "--json"]);
    let mut stamps: Vec<u64> = list
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|s| {
            s["name"]
                .as_str()?
                .strip_prefix("pg@auto-")
                .map(str::to_string)
        })
        .map(|rest| stamp(&format!("auto-{rest}")))
        .collect();
    stamps.sort_unstable();
    stamps
}

/// What retention keeps, written again here from its definition: the newest KEEP, and the
/// earliest of each of the newest DAILY days that have one.
fn retained(stamps: &[u64]) -> BTreeSet<u64> {
    let mut kept: BTreeSet<u64> = stamps.iter().rev().take(KEEP).copied().collect();
    let days: BTreeSet<u64> = stamps.iter().map(|s| s / DAY_S).collect();
    for day in days.iter().rev().take(DAILY) {
        kept.insert(
            *stamps
                .iter()
                .find(|s| *s / DAY_S == *day)
                .expect("a day's first"),
        );
    }
    kept
}

fn schedule(srv: &Server) -> Value {
    let list = srv.cli_json(&["snapshot", "schedules", "--json"]);
    list.as_array()
        .and_then(|l| l.iter().find(|s| s["volume"] == "pg"))
        .cloned()
        .unwrap_or(Value::Null)
}

#[test]
fn schedules_fire_prune_to_retention_and_survive_a_restart() {
    const TEST: &str = "schedules_fire_prune_to_retention_and_survive_a_restart";
    let mut srv = Server::start_with(
        "schedules",
        ServeOpts::default().volume_size("64M").arg(SCALE),
    );
    if srv.skip_without_api(TEST) {
        return;
    }
    srv.cli_ok(&["volume", "create", "pg", "--size", "16M"]);
    // The scheduler's names are its own: retention prunes by name, so a user may not take one.
    let theirs = srv.cli(&["snapshot", "create", "pg@auto-20260101-000000"]);
    assert!(
        !theirs.success() && theirs.all().contains("belong to the snapshot scheduler"),
        "{}",
        theirs.all()
    );
    let too_often = srv.cli(&[
        "snapshot", "schedule", "pg", "--every", "10s", "--keep", "3",
    ]);
    assert_eq!(
        too_often.status.and_then(|s| s.code()),
        Some(2),
        "{}",
        too_often.all()
    );
    let out = srv.cli_ok(&[
        "snapshot", "schedule", "pg", "--every", "1h", "--keep", "4", "--daily", "2",
    ]);
    assert!(
        out.contains("every 1h, keep 4, daily 2, next run 2"),
        "{out}"
    );
    let table = srv.cli_ok(&["snapshot", "schedules"]);
    assert!(
        table.contains("NEXT RUN") && table.contains("every 1h, keep 4, daily 2"),
        "{table}"
    );

    // It fires: snapshots an hour apart appear.
    poll_until(Duration::from_secs(60), "two scheduled snapshots", || {
        (auto_snapshots(&srv).len() >= 2).then_some(())
    });
    let first = auto_snapshots(&srv)[0];
    let before = schedule(&srv);
    assert!(before["last_run_unix_s"].is_u64(), "{before}");
    assert!(
        before["next_run_unix_s"].as_u64() > before["last_run_unix_s"].as_u64(),
        "{before}"
    );

    // kill -9: the schedule is kept with its last run, and goes on firing after the restart.
    srv.kill9_and_restart();
    let after = schedule(&srv);
    for key in ["every_s", "keep", "daily", "created_unix_s"] {
        assert_eq!(after[key], before[key], "{key}: {before} vs {after}");
    }
    assert!(
        after["last_run_unix_s"].as_u64() >= before["last_run_unix_s"].as_u64(),
        "{before} vs {after}"
    );
    let newest_before = *auto_snapshots(&srv).last().expect("snapshots kept");
    // Until the schedule has run for two and a half days of its clock (about 15 s here): by
    // then it took some 60 snapshots and pruned all but a few.
    poll_until(Duration::from_secs(120), "2.5 days of runs", || {
        let last = schedule(&srv)["last_run_unix_s"].as_u64()?;
        (last >= first + 5 * DAY_S / 2 && *auto_snapshots(&srv).last()? > newest_before)
            .then_some(())
    });

    // Stop it, let a run under way finish, then the set is exactly what retention keeps.
    srv.cli_ok(&["snapshot", "schedule", "pg", "--remove"]);
    assert!(schedule(&srv).is_null());
    std::thread::sleep(Duration::from_millis(300));
    let stamps = auto_snapshots(&srv);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        auto_snapshots(&srv),
        stamps,
        "it fired after it was removed"
    );
    let kept: Vec<u64> = retained(&stamps).into_iter().collect();
    assert_eq!(stamps, kept, "not what retention keeps");
    assert!(stamps.len() <= KEEP + DAILY, "{stamps:?}");
    // The newest KEEP are an hour apart: a run fires an interval after the last one, late by
    // the scheduler's tick and its own work (a busy machine stretches that: at this clock
    // 100 ms of work is 24 scheduled minutes), never early, never an hour skipped.
    let newest = &stamps[stamps.len() - KEEP..];
    for w in newest.windows(2) {
        let gap = w[1] - w[0];
        assert!(
            (HOUR_S..2 * HOUR_S).contains(&gap),
            "{gap} s between hourly snapshots: {stamps:?}"
        );
    }
    // Older ones are dailies: each the first of its day, one per day.
    let older = &stamps[..stamps.len() - KEEP];
    assert!(!older.is_empty(), "no daily kept: {stamps:?}");
    // It fired many more times than it kept: three days of hourlies.
    assert!(
        (stamps[stamps.len() - 1] - stamps[0]) / HOUR_S + 1 > (KEEP + DAILY) as u64,
        "{stamps:?}"
    );
    assert!(
        srv.server_output().contains("scheduled snapshot pruned"),
        "no prune logged"
    );

    // A schedule goes with its volume.
    srv.cli_ok(&["snapshot", "schedule", "pg", "--every", "1h", "--keep", "1"]);
    srv.cli_ok(&["volume", "delete", "pg", "--with-snapshots", "--yes"]);
    let list = srv.cli_json(&["snapshot", "schedules", "--json"]);
    assert_eq!(list, serde_json::json!([]));
    let gone = srv.cli(&["snapshot", "schedule", "pg", "--remove"]);
    assert_eq!(
        gone.status.and_then(|s| s.code()),
        Some(4),
        "{}",
        gone.all()
    );
}
