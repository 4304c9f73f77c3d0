//! CPU use per point and per sample: the client (this process, from getrusage) and optionally a
//! local server (`--server-pid`, from /proc/PID/stat). Both count every thread of the process,
//! user and system time, and are reported as a percentage of one core (200% = two cores busy),
//! as `top` shows them.

use std::time::Instant;

use crate::sys;

/// CPU time of the client and the server at one instant.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuSample {
    pub(crate) at: Instant,
    pub(crate) client_us: u64,
    /// None when no server is watched or it could not be read (it exited).
    pub(crate) server_us: Option<u64>,
}

/// Reads CPU times: this process's, and the watched server's when there is one.
#[derive(Debug, Clone)]
pub(crate) struct CpuMeter {
    server_pid: Option<u32>,
    ticks_per_s: u64,
}

impl CpuMeter {
    pub(crate) fn new(server_pid: Option<u32>) -> Self {
        CpuMeter {
            server_pid,
            ticks_per_s: sys::clock_ticks_per_s(),
        }
    }

    pub(crate) fn sample(&self) -> CpuSample {
        let at = Instant::now();
        let (user, system) = sys::self_cpu_us();
        let server_us = self
            .server_pid
            .and_then(|pid| process_cpu_ticks(pid).ok())
            .map(|ticks| ticks * 1_000_000 / self.ticks_per_s);
        CpuSample {
            at,
            client_us: user + system,
            server_us,
        }
    }
}

/// CPU use between two samples, in percent of one core.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CpuPct {
    pub(crate) client: f64,
    pub(crate) server: Option<f64>,
}

impl CpuPct {
    #[allow(clippy::cast_precision_loss)] // CPU microseconds far below 2^52
    pub(crate) fn between(a: &CpuSample, b: &CpuSample) -> CpuPct {
        let wall_us = b.at.duration_since(a.at).as_secs_f64() * 1e6;
        if wall_us <= 0.0 {
            return CpuPct::default();
        }
        let pct = |x: u64, y: u64| y.saturating_sub(x) as f64 / wall_us * 100.0;
        CpuPct {
            client: pct(a.client_us, b.client_us),
            server: match (a.server_us, b.server_us) {
                (Some(x), Some(y)) => Some(pct(x, y)),
                _ => None,
            },
        }
    }
}

/// Checks that `pid` can be watched: its /proc/PID/stat exists and parses.
pub(crate) fn check_pid(pid: u32) -> Result<(), String> {
    process_cpu_ticks(pid)
        .map(|_| ())
        .map_err(|e| format!("--server-pid {pid}: cannot read /proc/{pid}/stat: {e}"))
}

/// utime + stime of process `pid`, in clock ticks.
fn process_cpu_ticks(pid: u32) -> Result<u64, String> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    parse_stat_cpu_ticks(&text).ok_or_else(|| "unexpected format".to_string())
}

/// utime (field 14) + stime (field 15) of a /proc/PID/stat line. The command name (field 2) is
/// in parentheses and may hold spaces and parentheses itself, so fields are counted after the
/// last ')'.
fn parse_stat_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state): utime is field 14, the 12th from there.
    let mut fields = rest.split_whitespace().skip(11);
    let utime: u64 = fields.next()?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_with_odd_command_names_parse() {
        let line = "4242 (weft (serve) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 \
                    700 55 0 0 20 0 17 0 123456 1000000 2000 18446744073709551615";
        assert_eq!(parse_stat_cpu_ticks(line), Some(755));
        assert_eq!(parse_stat_cpu_ticks("1 (x) S 1 2"), None);
        assert_eq!(parse_stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_process_is_readable_and_a_missing_one_is_not() {
        assert!(check_pid(std::process::id()).is_ok());
        assert!(check_pid(u32::MAX).is_err());
        let meter = CpuMeter::new(Some(std::process::id()));
        let a = meter.sample();
        let t = Instant::now();
        let mut x = 1u64;
        while t.elapsed() < std::time::Duration::from_millis(50) {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let pct = CpuPct::between(&a, &meter.sample());
        assert!(pct.client > 10.0 && pct.client < 250.0, "{pct:?}");
        assert!(pct.server.is_some());
    }
}
