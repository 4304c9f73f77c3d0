//! Unwritten ranges of the measured region. A thin volume reads its never-written blocks as
//! zeroes without touching a disk, so random reads over a mostly empty volume report figures
//! no disk gives (96.5k IOPS on a volume 87% unwritten). Before the points run, [`check`]
//! asks the target which ranges of the region hold data ([`AllocationProbe`]: NBD block
//! status, iSCSI GET LBA STATUS) and, when the plan reads, fills the unwritten ranges with the
//! run's data pattern (the prefill, as ORION and fio users expect) unless `--no-prefill` or
//! writing is not allowed. What it found goes into the results ([`Unwritten`]), with a
//! warning when reads measured unwritten ranges.
//!
//! The prefill writes only what is unwritten, aligned outward to the target's block, in large
//! sequential writes on one queue of a few outstanding I/Os.

use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::datagen::DataGen;
use crate::plan::{Plan, Region};
use crate::size::human;
use crate::target::{Allocation, AllocationProbe, IoQueue, IoRequest, Op, Target, TargetError};
use crate::BenchError;

/// Most bytes one allocation query covers; a target answers less when the map is fragmented.
const SURVEY_STEP_BYTES: u64 = 1 << 30;
/// The prefill's write size (smaller when the target's largest I/O is).
const PREFILL_IO_BYTES_MAX: u32 = 1 << 20;
/// The prefill's outstanding writes (fewer when the target's command window is smaller).
const PREFILL_QUEUE_DEPTH: u32 = 8;
/// Unwritten share of the region, in percent, above which reads are said to measure holes.
const WARN_UNWRITTEN_PCT: f64 = 1.0;
/// The seed purpose of the prefill's data (the runner's points use 0 to 2).
const PREFILL_SEED_PURPOSE: u64 = 3;

/// What the run found of unwritten ranges in the measured region, recorded in the results.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub(crate) struct Unwritten {
    /// How it was checked (`nbd base:allocation`, `iscsi GET LBA STATUS`); null when it could
    /// not be.
    pub(crate) method: Option<String>,
    /// Why it could not be checked.
    pub(crate) not_checked: Option<String>,
    /// Bytes of the measured region.
    pub(crate) region_bytes: u64,
    /// Unwritten bytes of the region before the run.
    pub(crate) before_bytes: Option<u64>,
    /// Bytes the prefill wrote.
    pub(crate) prefilled_bytes: u64,
    /// How long the prefill took, in seconds.
    pub(crate) prefill_s: f64,
    /// Why there was no prefill although the region had unwritten ranges.
    pub(crate) prefill_skipped: Option<String>,
    /// Unwritten bytes of the region when the points ran.
    pub(crate) measured_bytes: Option<u64>,
    /// Set when reads measured unwritten ranges: what the read figures are worth.
    pub(crate) warning: Option<String>,
}

/// What the run may do about unwritten ranges.
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    /// Some point reads (writes below 100%).
    pub(crate) reads: bool,
    /// `--no-prefill`.
    pub(crate) no_prefill: bool,
    /// Why the run may not write (a read-only target, no `--allow-destructive`); `None` when
    /// it may.
    pub(crate) write_refused: Option<String>,
}

/// Checks the region, prefills it when the policy says so, and says what it did on stderr.
pub(crate) fn check(
    target: &dyn Target,
    plan: &Plan,
    region: Region,
    policy: &Policy,
) -> Result<Unwritten, BenchError> {
    let region_bytes = region.end_bytes - region.start_bytes;
    let mut found = Unwritten {
        region_bytes,
        ..Unwritten::default()
    };
    // The check is advice: a target that fails it is benchmarked all the same.
    let mut probe = match target.allocation() {
        Ok(Allocation::Known(probe)) => probe,
        Ok(Allocation::Unknown(why)) => {
            found.not_checked = Some(why);
            return Ok(found);
        }
        Err(e) => {
            found.not_checked = Some(format!("the check failed: {e}"));
            return Ok(found);
        }
    };
    found.method = Some(probe.method().to_string());
    let before = match survey(probe.as_mut(), region) {
        Ok(bytes) => bytes,
        Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
        Err(e) => {
            found.method = None;
            found.not_checked = Some(format!("the check failed: {e}"));
            return Ok(found);
        }
    };
    found.before_bytes = Some(before);
    found.measured_bytes = Some(before);
    if before == 0 {
        return Ok(found);
    }
    eprintln!(
        "weft bench: {} of the {} measured ({}) has never been written ({})",
        human(before),
        human(region_bytes),
        pct_text(before, region_bytes),
        probe.method()
    );
    let skipped = if !policy.reads {
        Some("the plan only writes".to_string())
    } else if policy.no_prefill {
        Some("--no-prefill".to_string())
    } else {
        policy.write_refused.clone()
    };
    match skipped {
        Some(why) => {
            if policy.reads {
                eprintln!("weft bench: not prefilled: {why}");
            }
            found.prefill_skipped = Some(why);
        }
        None => {
            eprintln!("weft bench: prefilling {} before the points", human(before));
            let started = Instant::now();
            found.prefilled_bytes = prefill(target, probe.as_mut(), plan, region)?;
            found.prefill_s = started.elapsed().as_secs_f64();
            let after = survey(probe.as_mut(), region)?;
            found.measured_bytes = Some(after);
            #[allow(clippy::cast_precision_loss)] // a rate to show
            let mb_per_s = found.prefilled_bytes as f64 / found.prefill_s.max(1e-9) / 1e6;
            eprintln!(
                "weft bench: prefilled {} in {:.1} s ({mb_per_s:.0} MB/s); {} unwritten now",
                human(found.prefilled_bytes),
                found.prefill_s,
                human(after)
            );
        }
    }
    let measured = found.measured_bytes.unwrap_or(0);
    if policy.reads && pct(measured, region_bytes) >= WARN_UNWRITTEN_PCT {
        let why = found
            .prefill_skipped
            .as_deref()
            .map_or(String::new(), |w| format!(" Not prefilled: {w}."));
        let warning = format!(
            "{} of the {} measured ({}) was never written when the points ran: reads there \
             return zeroes without touching a disk, so the read figures are better than any \
             disk gives.{why}",
            human(measured),
            human(region_bytes),
            pct_text(measured, region_bytes),
        );
        eprintln!("weft bench: warning: {warning}");
        found.warning = Some(warning);
    }
    Ok(found)
}

#[allow(clippy::cast_precision_loss)] // a percentage to show
fn pct(part: u64, whole: u64) -> f64 {
    if whole == 0 {
        0.0
    } else {
        part as f64 * 100.0 / whole as f64
    }
}

fn pct_text(part: u64, whole: u64) -> String {
    format!("{:.1}%", pct(part, whole))
}

/// Unwritten bytes of `region`.
fn survey(probe: &mut dyn AllocationProbe, region: Region) -> Result<u64, BenchError> {
    let mut unwritten = 0;
    walk(probe, region, |_, len| {
        unwritten += len;
        Ok(())
    })?;
    Ok(unwritten)
}

/// Calls `hole(offset, len)` for each unwritten run of `region`, in order.
fn walk(
    probe: &mut dyn AllocationProbe,
    region: Region,
    mut hole: impl FnMut(u64, u64) -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    let failed = |source: TargetError| BenchError::Run {
        point: "allocation check".into(),
        source,
    };
    let mut at = region.start_bytes;
    while at < region.end_bytes {
        if crate::stop_requested() {
            return Err(BenchError::Interrupted);
        }
        let want = (region.end_bytes - at).min(SURVEY_STEP_BYTES);
        let extents = probe.extents(at, want).map_err(failed)?;
        let mut covered = 0;
        for e in extents {
            let len = e.length_bytes.min(want - covered);
            if !e.allocated && len > 0 {
                hole(at + covered, len)?;
            }
            covered += len;
            if covered == want {
                break;
            }
        }
        if covered == 0 {
            return Err(failed(TargetError::Protocol {
                peer: "target",
                addr: String::new(),
                reason: format!("the allocation answer at byte {at} covered nothing"),
            }));
        }
        at += covered;
    }
    Ok(())
}

/// Writes the unwritten runs of `region` with the plan's data pattern; the bytes written.
fn prefill(
    target: &dyn Target,
    probe: &mut dyn AllocationProbe,
    plan: &Plan,
    region: Region,
) -> Result<u64, BenchError> {
    let failed = |source: TargetError| BenchError::Run {
        point: "prefill".into(),
        source,
    };
    let info = target.info();
    let block = u64::from(info.block_size_min_bytes.max(1));
    let io_bytes = u64::from(PREFILL_IO_BYTES_MAX.min(info.block_size_max_bytes));
    let io_bytes = (io_bytes / block * block).max(block);
    let depth = PREFILL_QUEUE_DEPTH.min(target.queue_depth_max()).max(1);
    let data = DataGen::new(
        plan.seed ^ PREFILL_SEED_PURPOSE.rotate_left(62),
        plan.data_pattern,
        plan.seed ^ 2u64.rotate_left(62),
    );
    let io_max = u32::try_from(io_bytes).expect("at most PREFILL_IO_BYTES_MAX");
    let mut queue = Filler {
        queue: target.open_queue(depth, io_max, data).map_err(failed)?,
        free: (0..depth).rev().collect(),
        done: Vec::with_capacity(depth as usize),
        outstanding: 0,
    };
    let mut written = 0;
    walk(probe, region, |offset, len| {
        // Outward to whole blocks, inside the region.
        let start = (offset / block * block).max(region.start_bytes);
        let end = (offset + len).div_ceil(block).saturating_mul(block);
        let end = end.min(region.end_bytes);
        let mut at = start;
        while at < end {
            if crate::stop_requested() {
                return Err(BenchError::Interrupted);
            }
            let n = io_bytes.min(end - at);
            queue
                .write(at, u32::try_from(n).expect("at most io_bytes"))
                .map_err(failed)?;
            at += n;
            written += n;
        }
        Ok(())
    })?;
    queue.drain().map_err(failed)?;
    Ok(written)
}

/// A closed loop of writes on one queue.
struct Filler {
    queue: Box<dyn IoQueue>,
    free: Vec<u32>,
    done: Vec<u32>,
    outstanding: usize,
}

impl Filler {
    fn write(&mut self, offset_bytes: u64, len_bytes: u32) -> Result<(), TargetError> {
        while self.free.is_empty() {
            self.complete_some()?;
        }
        let tag = self.free.pop().expect("a free tag");
        self.queue.submit(IoRequest {
            tag,
            op: Op::Write,
            offset_bytes,
            len_bytes,
        });
        self.outstanding += 1;
        Ok(())
    }

    fn drain(&mut self) -> Result<(), TargetError> {
        while self.outstanding > 0 {
            self.complete_some()?;
        }
        Ok(())
    }

    fn complete_some(&mut self) -> Result<(), TargetError> {
        self.queue.wait(&mut self.done)?;
        self.outstanding -= self.done.len();
        self.free.append(&mut self.done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::Extent;

    /// A map of allocated 4 KiB blocks that answers at most `per_answer` extents at a time.
    struct Map {
        allocated: Vec<bool>,
        per_answer: usize,
    }

    impl AllocationProbe for Map {
        fn method(&self) -> &'static str {
            "test"
        }

        fn extents(&mut self, offset: u64, len: u64) -> Result<Vec<Extent>, TargetError> {
            let first = usize::try_from(offset / 4096).unwrap();
            let last = usize::try_from((offset + len).div_ceil(4096)).unwrap();
            let mut out: Vec<Extent> = Vec::new();
            for &a in &self.allocated[first..last.min(self.allocated.len())] {
                if let Some(e) = out.last_mut().filter(|e| e.allocated == a) {
                    e.length_bytes += 4096;
                    continue;
                }
                if out.len() == self.per_answer {
                    break;
                }
                out.push(Extent {
                    length_bytes: 4096,
                    allocated: a,
                });
            }
            Ok(out)
        }
    }

    #[test]
    fn the_walk_finds_every_hole_of_the_region_once() {
        // 16 blocks: written 2..4 and 9; the region is blocks 1..13.
        let mut map = Map {
            allocated: (0..16).map(|b| (2..4).contains(&b) || b == 9).collect(),
            per_answer: 2,
        };
        let region = Region {
            start_bytes: 4096,
            end_bytes: 13 * 4096,
        };
        let mut holes = Vec::new();
        walk(&mut map, region, |o, l| {
            holes.push((o / 4096, l / 4096));
            Ok(())
        })
        .unwrap();
        assert_eq!(holes, [(1, 1), (4, 5), (10, 3)]);
        assert_eq!(survey(&mut map, region).unwrap(), 9 * 4096);
    }
}
