//! The snapshot schedule records of the cluster state and the pure rules over them: when a
//! schedule fires next, what its snapshots are named (`auto-YYYYMMDD-HHMMSS`, UTC, the time
//! they were taken), and which of them retention keeps. Plain data and functions, no I/O; the
//! operations on the records are in [`crate::schedules`].

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use crate::error::EngineError;
use crate::layers::CHAIN_LAYERS_MAX;

/// Short names of scheduled snapshots start with this.
pub const AUTO_PREFIX: &str = "auto-";
/// A schedule fires at most once a minute: more would crowd the snapshot list and the layer
/// chain for no recovery point anyone uses.
pub const EVERY_MIN_S: u64 = 60;
/// At most this many snapshots kept per schedule (recent and daily together): each is a layer
/// in the volume's chain, which [`CHAIN_LAYERS_MAX`] bounds, and manual snapshots and clones
/// need room too.
pub const RETAINED_MAX: u32 = 100;
const _: () = assert!((RETAINED_MAX as usize) < CHAIN_LAYERS_MAX);
const DAY_S: u64 = 86_400;

/// One volume's schedule, as the cluster state holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleRecord {
    pub volume: String,
    /// Seconds between snapshots.
    pub every_s: u64,
    /// The newest snapshots kept.
    pub keep: u32,
    /// The first snapshot of each of this many newest days is kept too.
    #[serde(default)]
    pub daily: u32,
    /// When it was set (seconds since the Unix epoch, by the scheduler's clock).
    pub created_unix_s: u64,
    /// When it last fired (`None`: never).
    #[serde(default)]
    pub last_run_unix_s: Option<u64>,
}

impl ScheduleRecord {
    /// When it fires next: one interval after its last run (or after it was set).
    pub fn next_run_unix_s(&self) -> u64 {
        self.last_run_unix_s
            .unwrap_or(self.created_unix_s)
            .saturating_add(self.every_s)
    }
}

pub(crate) fn check(every_s: u64, keep: u32, daily: u32) -> Result<(), EngineError> {
    let invalid = |reason: String| EngineError::InvalidSchedule { reason };
    if every_s < EVERY_MIN_S {
        return Err(invalid(format!(
            "every {every_s} s: a schedule fires at most once a minute"
        )));
    }
    if keep == 0 {
        return Err(invalid("keep 0: keep at least the newest snapshot".into()));
    }
    if keep.saturating_add(daily) > RETAINED_MAX {
        return Err(invalid(format!(
            "keep {keep} and daily {daily}: at most {RETAINED_MAX} snapshots together (each is a layer volume reads go through)"
        )));
    }
    Ok(())
}

/// The short name of a scheduled snapshot taken at `unix_s`: `auto-20261127-110000`.
pub fn auto_snapshot_name(unix_s: u64) -> String {
    let (year, month, day) = civil_date(unix_s / DAY_S);
    let rem = unix_s % DAY_S;
    format!(
        "{AUTO_PREFIX}{year:04}{month:02}{day:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// When a scheduled snapshot was taken, from its short name (`None`: not a scheduled one).
pub fn auto_snapshot_time(short_name: &str) -> Option<u64> {
    let stamp = short_name.strip_prefix(AUTO_PREFIX)?;
    let (date, time) = stamp.split_once('-')?;
    if date.len() != 8
        || time.len() != 6
        || !(date.bytes().chain(time.bytes())).all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let num = |s: &str| s.parse::<u64>().ok();
    let (year, month, day) = (num(&date[..4])?, num(&date[4..6])?, num(&date[6..])?);
    let (h, m, s) = (num(&time[..2])?, num(&time[2..4])?, num(&time[4..])?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || h > 23 || m > 59 || s > 59 {
        return None;
    }
    let days = days_from_civil(year, month, day)?;
    let unix_s = days * DAY_S + h * 3600 + m * 60 + s;
    // Round trip: 20260231 is not a date.
    (auto_snapshot_name(unix_s) == short_name).then_some(unix_s)
}

/// Of scheduled snapshots taken at `stamps` (seconds), the ones retention keeps: the newest
/// `keep`, and the earliest of each of the newest `daily` days that have one.
pub fn retained(stamps: &[u64], keep: u32, daily: u32) -> BTreeSet<u64> {
    let mut newest_first: Vec<u64> = stamps.to_vec();
    newest_first.sort_unstable_by(|a, b| b.cmp(a));
    newest_first.dedup();
    let mut kept: BTreeSet<u64> = newest_first.iter().take(keep as usize).copied().collect();
    let mut days_seen = 0u32;
    let mut i = 0;
    while i < newest_first.len() && days_seen < daily {
        let day = newest_first[i] / DAY_S;
        // The last in newest-first order of this day is its earliest.
        let mut earliest = newest_first[i];
        while i < newest_first.len() && newest_first[i] / DAY_S == day {
            earliest = newest_first[i];
            i += 1;
        }
        kept.insert(earliest);
        days_seen += 1;
    }
    kept
}

/// Days since 1970-01-01 to (year, month, day) (H. Hinnant's algorithm, unsigned).
fn civil_date(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + u64::from(month <= 2), month, day)
}

/// (year, month, day) to days since 1970-01-01; `None` before 1970.
fn days_from_civil(year: u64, month: u64, day: u64) -> Option<u64> {
    let y = if month <= 2 {
        year.checked_sub(1)?
    } else {
        year
    };
    let era = y / 400;
    let yoe = y - era * 400;
    let mp = if month > 2 { month - 3 } else { month + 9 };
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    (era * 146_097 + doe).checked_sub(719_468)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_names_carry_the_utc_time_and_parse_back() {
        // 2026-11-27T11:00:00Z
        let t = 1_795_777_200;
        assert_eq!(auto_snapshot_name(t), "auto-20261127-110000");
        assert_eq!(auto_snapshot_time("auto-20261127-110000"), Some(t));
        assert_eq!(auto_snapshot_name(0), "auto-19700101-000000");
        assert_eq!(
            auto_snapshot_time("auto-20240229-235959")
                .map(auto_snapshot_name)
                .as_deref(),
            Some("auto-20240229-235959")
        );
        for bad in [
            "monday",
            "auto-2026112-110000",
            "auto-20260231-000000",
            "auto-20261127-250000",
            "auto-x",
        ] {
            assert_eq!(auto_snapshot_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn retention_keeps_the_newest_and_the_first_of_each_recent_day() {
        // Hourly for three days from midnight of day 10.
        let day0 = 10 * DAY_S;
        let stamps: Vec<u64> = (0..72).map(|h| day0 + h * 3600).collect();
        let kept = retained(&stamps, 24, 7);
        // The newest 24 (the whole third day) plus the first of days 1 and 2 (day 3's first
        // is among the newest already).
        let mut want: BTreeSet<u64> = stamps[48..].iter().copied().collect();
        want.insert(day0);
        want.insert(day0 + DAY_S);
        assert_eq!(kept, want);
        // Only two days of dailies: day 3 and day 2.
        let kept = retained(&stamps, 3, 2);
        let want: BTreeSet<u64> = [day0 + DAY_S, stamps[48], stamps[69], stamps[70], stamps[71]]
            .into_iter()
            .collect();
        assert_eq!(kept, want);
        assert_eq!(retained(&stamps, 5, 0).len(), 5);
        assert!(retained(&[], 5, 5).is_empty());
    }

    #[test]
    fn limits_are_checked() {
        assert!(check(59, 1, 0).is_err());
        assert!(check(60, 0, 0).is_err());
        assert!(check(3600, RETAINED_MAX + 1, 0).is_err());
        assert!(check(3600, 24, RETAINED_MAX - 23).is_err());
        assert!(check(3600, 24, 7).is_ok());
    }
}
