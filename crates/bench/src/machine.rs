//! Facts about the machine a run happened on, and UTC timestamps, for the result files. Reads
//! /proc and /etc on Linux; anything missing is recorded as empty rather than failing the run.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Machine {
    pub(crate) hostname: String,
    pub(crate) os: String,
    pub(crate) kernel: String,
    pub(crate) arch: String,
    pub(crate) cpu_model: String,
    pub(crate) cpus: u32,
    pub(crate) memory_bytes: u64,
}

impl Machine {
    pub(crate) fn current() -> Machine {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let os = read("/etc/os-release")
            .lines()
            .find_map(|l| l.strip_prefix("PRETTY_NAME="))
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| std::env::consts::OS.to_string());
        let cpu_model = read("/proc/cpuinfo")
            .lines()
            .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find_map(|l| l.strip_prefix("MemTotal:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kib| kib * 1024);
        Machine {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            os,
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            arch: std::env::consts::ARCH.to_string(),
            cpu_model,
            cpus: std::thread::available_parallelism()
                .map_or(0, |n| u32::try_from(n.get()).unwrap_or(u32::MAX)),
            memory_bytes,
        }
    }
}

/// The current time as RFC 3339 UTC, e.g. "2026-11-22T01:24:01Z".
pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats seconds since the epoch (civil-from-days, Howard Hinnant's algorithm).
fn format_utc(secs: u64) -> String {
    let days = i64::try_from(secs / 86_400).expect("u64 seconds / 86400 fits i64");
    let rem = secs % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_formatting_matches_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }

    #[test]
    fn machine_facts_are_collected() {
        let m = Machine::current();
        assert!(m.cpus >= 1);
        assert!(!m.arch.is_empty());
    }
}
