//! Turns command-line arguments into a validated [`Plan`]: the list of points a mode runs, and
//! the region of the target they use. All argument checks happen here, before any I/O, and fail
//! with [`BenchError::Usage`] (exit code 2).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::args::{parse_region, Mode, RegionBound, RunArgs};
use crate::datagen::DataPattern;
use crate::size::human;
use crate::target::TargetInfo;
use crate::BenchError;

/// Largest I/O we generate. Bounds per-queue buffers (depth x size) and NBD payloads.
const IO_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// Most outstanding I/Os per point; bounds threads (files) and buffers.
const QUEUE_DEPTH_MAX: u32 = 4096;
/// Most points a run may have, so a typo in a list cannot plan a week of work.
const POINTS_MAX: usize = 10_000;
const DEFAULT_SMALL_QDS: [u32; 6] = [1, 2, 4, 8, 16, 32];
const DEFAULT_LARGE_QDS: [u32; 4] = [1, 2, 4, 8];
/// ORION users compare read-only, 10%, 40% and all-write mixes.
const DEFAULT_MIXED_WRITE_PCTS: [u8; 4] = [0, 10, 40, 100];

/// One measured point: how many small random and large sequential I/Os are kept outstanding,
/// and the share of them that are writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PointSpec {
    pub(crate) index: usize,
    pub(crate) small_qd: u32,
    pub(crate) large_qd: u32,
    pub(crate) write_pct: u8,
}

impl PointSpec {
    pub(crate) fn kind(&self) -> &'static str {
        match (self.small_qd > 0, self.large_qd > 0) {
            (true, false) => "small_random",
            (false, true) => "large_sequential",
            _ => "mixed",
        }
    }

    pub(crate) fn name(&self) -> String {
        match (self.small_qd > 0, self.large_qd > 0) {
            (true, false) => format!("small qd{} w{}%", self.small_qd, self.write_pct),
            (false, true) => format!("large qd{} w{}%", self.large_qd, self.write_pct),
            _ => format!(
                "small qd{} + large qd{} w{}%",
                self.small_qd, self.large_qd, self.write_pct
            ),
        }
    }
}

/// The byte range of the target that I/O stays within: `start_bytes..end_bytes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Region {
    pub(crate) start_bytes: u64,
    pub(crate) end_bytes: u64,
}

/// A validated run.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) mode: Mode,
    pub(crate) small_io_bytes: u32,
    pub(crate) large_io_bytes: u32,
    pub(crate) small_qds: Vec<u32>,
    pub(crate) large_qds: Vec<u32>,
    pub(crate) write_pcts: Vec<u8>,
    pub(crate) region_spec: String,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) workers: u32,
    pub(crate) latency_threshold: Duration,
    pub(crate) seed: u64,
    pub(crate) data_pattern: DataPattern,
    pub(crate) server_pid: Option<u32>,
    pub(crate) points: Vec<PointSpec>,
}

impl Plan {
    /// Checks everything that does not need the target.
    pub(crate) fn from_args(a: &RunArgs) -> Result<Plan, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        let small_io_bytes = io_size("--small", a.small_io)?;
        let large_io_bytes = io_size("--large", a.large_io)?;
        if a.duration.is_zero() {
            return usage("--duration must be above zero".into());
        }
        parse_region(&a.region).map_err(BenchError::Usage)?;
        let small_qds = or_default(&a.qd, &DEFAULT_SMALL_QDS);
        let large_qds = or_default(&a.large_qd, &DEFAULT_LARGE_QDS);
        if let Some(q) = small_qds
            .iter()
            .chain(&large_qds)
            .find(|&&q| q > QUEUE_DEPTH_MAX)
        {
            return usage(format!(
                "queue depth {q} is above the limit of {QUEUE_DEPTH_MAX}"
            ));
        }
        let write_pcts = match (a.write_pct.is_empty(), a.mode) {
            (false, _) => a.write_pct.clone(),
            (true, Mode::Oltp | Mode::Matrix) => DEFAULT_MIXED_WRITE_PCTS.to_vec(),
            (true, _) => vec![0],
        };
        let points = build_points(a.mode, &small_qds, &large_qds, &write_pcts);
        if points.len() > POINTS_MAX {
            return usage(format!(
                "{} points planned, the limit is {POINTS_MAX}",
                points.len()
            ));
        }
        if let Some(pid) = a.server_pid {
            crate::cpu::check_pid(pid).map_err(BenchError::Usage)?;
        }
        Ok(Plan {
            mode: a.mode,
            small_io_bytes,
            large_io_bytes,
            small_qds,
            large_qds,
            write_pcts,
            region_spec: a.region.clone(),
            duration: a.duration,
            warmup: a.warmup,
            workers: a.workers,
            latency_threshold: a.latency_threshold,
            seed: a.seed.unwrap_or_else(rand::random),
            data_pattern: DataPattern {
                compressible_pct: a.compressible_pct,
                dedupable_pct: a.dedupable_pct,
            },
            server_pid: a.server_pid,
            points,
        })
    }

    pub(crate) fn writes(&self) -> bool {
        self.points.iter().any(|p| p.write_pct > 0)
    }

    pub(crate) fn uses_large(&self) -> bool {
        self.points.iter().any(|p| p.large_qd > 0)
    }

    pub(crate) fn uses_small(&self) -> bool {
        self.points.iter().any(|p| p.small_qd > 0)
    }

    /// Total wall time of all points, for the progress bar and the up-front estimate.
    pub(crate) fn estimated(&self) -> Duration {
        (self.duration + self.warmup) * u32::try_from(self.points.len()).unwrap_or(u32::MAX)
    }

    /// Checks the plan against the opened target and resolves the region to bytes.
    pub(crate) fn resolve_region(&self, t: &TargetInfo) -> Result<Region, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        let align = u64::from(t.block_size_min_bytes.max(1));
        for (flag, size) in [
            ("--small", self.small_io_bytes),
            ("--large", self.large_io_bytes),
        ] {
            if u64::from(size) % align != 0 {
                return usage(format!(
                    "{flag} {size} is not a multiple of the target's block size {align}"
                ));
            }
            if size > t.block_size_max_bytes {
                return usage(format!(
                    "{flag} {} is above the target's largest I/O of {}",
                    human(u64::from(size)),
                    human(u64::from(t.block_size_max_bytes))
                ));
            }
        }
        let (a, b) = parse_region(&self.region_spec).map_err(BenchError::Usage)?;
        let at = |bound: RegionBound| -> Result<u64, BenchError> {
            match bound {
                RegionBound::Bytes(n) => Ok(n),
                RegionBound::Percent(p) if (0.0..=100.0).contains(&p) => {
                    #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
                    #[allow(clippy::cast_sign_loss)] // p is within 0..=100
                    let v = (t.size_bytes as f64 * p / 100.0).round() as u64;
                    Ok(v.min(t.size_bytes))
                }
                RegionBound::Percent(p) => Err(BenchError::Usage(format!(
                    "region '{}': {p}% is outside the device (0% to 100%)",
                    self.region_spec
                ))),
            }
        };
        let (start, end) = (at(a)?, at(b)?);
        if end > t.size_bytes {
            return usage(format!(
                "region '{}' ends at {}, beyond the end of the target ({})",
                self.region_spec,
                human(end),
                human(t.size_bytes)
            ));
        }
        if start >= end {
            return usage(format!(
                "region '{}' is empty (start {start} >= end {end})",
                self.region_spec
            ));
        }
        // Small random I/O is aligned to its own size, as a database block would be.
        let step = u64::from(self.small_io_bytes).max(align);
        let region = Region {
            start_bytes: start.next_multiple_of(step),
            end_bytes: end / step * step,
        };
        let len = region.end_bytes.saturating_sub(region.start_bytes);
        let need = if self.uses_large() {
            u64::from(self.large_io_bytes)
        } else {
            0
        }
        .max(if self.uses_small() {
            u64::from(self.small_io_bytes)
        } else {
            0
        });
        if len < need || len == 0 {
            return usage(format!(
                "region '{}' of the target ({}) holds {} of aligned I/O, less than one {} I/O",
                self.region_spec,
                human(t.size_bytes),
                human(len),
                human(need)
            ));
        }
        Ok(region)
    }
}

fn io_size(flag: &str, bytes: u64) -> Result<u32, BenchError> {
    if bytes == 0 || bytes > IO_BYTES_MAX {
        return Err(BenchError::Usage(format!(
            "{flag} {} must be between 1 B and {}",
            human(bytes),
            human(IO_BYTES_MAX)
        )));
    }
    Ok(u32::try_from(bytes).expect("bounded by IO_BYTES_MAX"))
}

fn or_default(given: &[u32], default: &[u32]) -> Vec<u32> {
    if given.is_empty() {
        default.to_vec()
    } else {
        given.to_vec()
    }
}

/// The points each mode runs, in the order they run.
pub(crate) fn build_points(
    mode: Mode,
    small: &[u32],
    large: &[u32],
    writes: &[u8],
) -> Vec<PointSpec> {
    let mut out = Vec::new();
    let mut push = |small_qd, large_qd, write_pct| {
        let index = out.len();
        out.push(PointSpec {
            index,
            small_qd,
            large_qd,
            write_pct,
        });
    };
    match mode {
        Mode::Simple => {
            for &w in writes {
                small.iter().for_each(|&q| push(q, 0, w));
                large.iter().for_each(|&q| push(0, q, w));
            }
        }
        Mode::Oltp => {
            for &w in writes {
                small.iter().for_each(|&q| push(q, 0, w));
            }
        }
        Mode::Dss => {
            for &w in writes {
                large.iter().for_each(|&q| push(0, q, w));
            }
        }
        Mode::Matrix => {
            for &w in writes {
                for &l in std::iter::once(&0).chain(large) {
                    for &s in std::iter::once(&0).chain(small) {
                        if s > 0 || l > 0 {
                            push(s, l, w);
                        }
                    }
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(size_bytes: u64) -> TargetInfo {
        TargetInfo {
            uri: "t".into(),
            kind: "file".into(),
            size_bytes,
            block_size_min_bytes: 512,
            block_size_preferred_bytes: 4096,
            block_size_max_bytes: 32 << 20,
            read_only: false,
            direct_io: Some(true),
        }
    }

    fn plan(region: &str) -> Plan {
        Plan {
            mode: Mode::Simple,
            small_io_bytes: 8192,
            large_io_bytes: 1 << 20,
            small_qds: vec![1],
            large_qds: vec![1],
            write_pcts: vec![0],
            region_spec: region.into(),
            duration: Duration::from_secs(1),
            warmup: Duration::ZERO,
            workers: 1,
            latency_threshold: Duration::from_millis(1),
            seed: 1,
            data_pattern: DataPattern::default(),
            server_pid: None,
            points: build_points(Mode::Simple, &[1], &[1], &[0]),
        }
    }

    #[test]
    fn outer_40_and_inner_60_split_the_device() {
        let t = target(100 << 20);
        let outer = plan("0-40%").resolve_region(&t).unwrap();
        let inner = plan("40%-100%").resolve_region(&t).unwrap();
        assert_eq!(outer.start_bytes, 0);
        assert!(outer.end_bytes <= inner.start_bytes);
        assert_eq!(inner.end_bytes, 100 << 20);
        assert_eq!(outer.end_bytes % 8192, 0);
    }

    #[test]
    fn region_beyond_the_device_is_a_usage_error() {
        let t = target(100 << 20);
        for bad in ["0-200%", "50%-10%", "1g-2g", "0-1k"] {
            assert!(
                matches!(plan(bad).resolve_region(&t), Err(BenchError::Usage(_))),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn modes_plan_orion_points() {
        let p = build_points(Mode::Oltp, &[1, 4], &[1], &[0, 100]);
        assert_eq!(p.len(), 4);
        assert!(p.iter().all(|p| p.kind() == "small_random"));
        let p = build_points(Mode::Simple, &[1, 4], &[1, 2], &[0]);
        assert_eq!(
            p.iter().map(|p| p.kind()).collect::<Vec<_>>(),
            [
                "small_random",
                "small_random",
                "large_sequential",
                "large_sequential"
            ]
        );
        let p = build_points(Mode::Matrix, &[1, 4], &[1], &[0, 40]);
        assert_eq!(p.len(), 2 * (3 * 2 - 1));
        assert!(p.iter().any(|p| p.kind() == "mixed"));
        assert!(build_points(Mode::Dss, &[1], &[1, 2, 4], &[0])
            .iter()
            .all(|p| p.small_qd == 0));
    }
}
