//! The load generator: runs each point of a [`Plan`] against a [`Target`] and gathers results.
//!
//! Model: closed loop, like ORION and fio. Each point keeps exactly `small_qd` small random and
//! `large_qd` large sequential I/Os outstanding, spread over queues (NBD connections, iSCSI
//! sessions, or one thread per outstanding I/O for files). Each queue is driven by one thread
//! that owns its recorders, so the hot path has no locks and no allocation.
//!
//! Latency is measured per I/O from the moment the batch carrying it is handed to the transport
//! to the moment its completion is seen, with the monotonic clock (`Instant`, CLOCK_MONOTONIC).
//! Only I/Os submitted after the warm-up and completed before the end of the window count.
//! Because the loop is closed, a slow I/O delays the next submission on its slot: this is the
//! service time at a fixed concurrency, not response time under an open arrival rate, so
//! coordinated omission does not arise as it would in a rate-driven test; it is stated here and
//! in docs/BENCH.md rather than corrected.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::args::RunArgs;
use crate::cpu::{CpuMeter, CpuPct, CpuSample};
use crate::datagen::{DataGen, Rng};
use crate::machine::{utc_now, Machine};
use crate::plan::{Plan, PointSpec, Region};
use crate::results::{
    self, ClassStats, Config, PointCpu, PointResult, Results, Sample, Tool, SCHEMA_VERSION,
};
use crate::size::human;
use crate::stats::{Recorder, SeriesRecorder};
use crate::target::{open_target, IoQueue, IoRequest, Op, Target, TargetError, TargetInfo};
use crate::{report, unwritten, BenchError};

/// How often the progress bar refreshes while a point runs.
const PROGRESS_TICK: Duration = Duration::from_millis(100);
/// The time series samples once a second...
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);
/// ...but a window shorter than this many seconds gets this many samples, so that a short point
/// still has a shape.
const SAMPLES_MIN: u32 = 10;
/// Most samples per point: a window longer than 20 minutes samples less often than once a
/// second. Bounds each worker's series (32 bytes a sample) before the clock starts.
const SAMPLES_MAX: u32 = 1200;

const LATENCY_METHOD: &str = "closed loop at fixed outstanding I/O; per-I/O latency from \
handing the request to the transport to seeing its completion, CLOCK_MONOTONIC; only I/Os \
submitted after warm-up and completed within the window count";

/// The two I/O classes of ORION: small random and large sequential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Small = 0,
    Large = 1,
}

/// Recorders of one worker: [class][direction].
type Recorders = [[Recorder; 2]; 2];

/// Shared, read-only description of what a worker does during one point.
#[derive(Debug)]
struct PointCtx<'a> {
    spec: &'a PointSpec,
    region: Region,
    small_io_bytes: u32,
    large_io_bytes: u32,
    /// Set once all workers are ready; the point's time zero.
    start: OnceLock<Instant>,
    warmup: Duration,
    duration: Duration,
    seed: u64,
    /// Length and number of the time series' sampling intervals.
    sample_interval: Duration,
    samples: u32,
    abort: AtomicBool,
    completed_ios: AtomicU64,
    finished_workers: AtomicUsize,
}

/// Runs a benchmark from command-line arguments and writes its result files.
pub(crate) fn run_bench(a: &RunArgs) -> Result<(), BenchError> {
    let plan = Plan::from_args(a)?;
    let Some(uri) = a.target.as_deref() else {
        return Err(BenchError::Usage(
            "--create-volume needs the management API: run it as `weft bench`, which creates \
             the volume and names it as the target"
                .into(),
        ));
    };
    let target = open_target(uri, plan.writes())?;
    let info = target.info().clone();
    // From here on the URI is shown and recorded without any secret it holds.
    let uri = info.uri.clone();
    if plan.writes() && info.read_only {
        return Err(BenchError::Usage(format!(
            "target {uri} is read-only but the plan writes (write percentages {:?})",
            plan.write_pcts
        )));
    }
    let holds_data = holds_data(a, &info, target.held_data());
    if let (true, Some(what)) = (plan.writes(), &holds_data) {
        return Err(BenchError::Usage(format!(
            "the plan writes (write percentages {:?}) to {what}, which destroys what it holds: \
             pass --allow-destructive, or bench a volume of its own with `weft bench \
             --create-volume SIZE`",
            plan.write_pcts
        )));
    }
    let region = plan.resolve_region(&info)?;
    let started_at = utc_now();
    eprintln!(
        "weft bench: {} mode, {} points, about {:.0} s, against {uri} ({}, region {} to {})",
        plan.mode.name(),
        plan.points.len(),
        plan.estimated().as_secs_f64(),
        human(info.size_bytes),
        human(region.start_bytes),
        human(region.end_bytes)
    );
    let policy = unwritten::Policy {
        reads: plan.points.iter().any(|p| p.write_pct < 100),
        no_prefill: a.no_prefill,
        write_refused: if info.read_only {
            Some("the target is read-only".into())
        } else {
            holds_data.map(|what| {
                format!(
                    "it would write to {what}: pass --allow-destructive to allow it, or bench a \
                     volume of its own with `weft bench --create-volume SIZE`"
                )
            })
        },
    };
    let unwritten = unwritten::check(target.as_ref(), &plan, region, &policy)?;
    let bar = progress_bar(a.no_progress, plan.estimated());
    let mut points = Vec::with_capacity(plan.points.len());
    let meter = CpuMeter::new(plan.server_pid);
    let run_start = Instant::now();
    for spec in &plan.points {
        let r = run_point(
            target.as_ref(),
            &plan,
            region,
            spec,
            &bar,
            &meter,
            run_start,
        )?;
        if crate::stop_requested() {
            bar.finish_and_clear();
            return Err(BenchError::Interrupted);
        }
        let server = r
            .cpu
            .server_pct
            .map_or(String::new(), |v| format!(", server {v:.0}%"));
        let line = format!(
            "point {:>3}/{} {:<28} {:>10.0} IOPS {:>9.1} MB/s {:>9.1} µs mean {:>9.1} µs p99, CPU client {:.0}%{server}",
            spec.index + 1,
            plan.points.len(),
            r.name,
            r.total.iops,
            r.total.mb_per_s,
            r.total.latency_us.mean,
            r.total.latency_us.p99,
            r.cpu.client_pct,
        );
        if bar.is_hidden() {
            eprintln!("{line}");
        } else {
            bar.println(line);
        }
        points.push(r);
    }
    bar.finish_and_clear();
    let threshold_us = plan.latency_threshold.as_secs_f64() * 1e6;
    let knees = results::find_knees(&points, threshold_us);
    let res = Results {
        schema_version: SCHEMA_VERSION,
        label: a.label.clone().unwrap_or_else(|| uri.clone()),
        tool: Tool {
            name: "weft-bench".into(),
            version: env!("CARGO_PKG_VERSION").into(),
        },
        started_at,
        finished_at: utc_now(),
        machine: Machine::current(),
        target: info,
        config: config_record(&plan, region),
        points,
        knees,
        unwritten: Some(unwritten),
    };
    print!("{}", results::summary_table(&res));
    let json = serde_json::to_string_pretty(&res).expect("results serialise");
    let paths = [".json", ".csv", ".html"].map(|ext| PathBuf::from(format!("{}{ext}", a.output)));
    results::write_file(&paths[0], &json)?;
    results::write_file(&paths[1], &results::to_csv(&res))?;
    results::write_file(&paths[2], &report::render(&[res], None))?;
    println!(
        "wrote {}, {}, {}",
        paths[0].display(),
        paths[1].display(),
        paths[2].display()
    );
    Ok(())
}

/// The target (`NBD export nbd://...`) when writing to it needs `--allow-destructive` and the
/// run does not have it: NBD exports, iSCSI LUNs and block devices hold someone's data unless
/// the bench made the volume itself (`--create-volume`); a regular file does when it has
/// anything but holes (`held_data`: a database file, or a file an earlier run filled), and is
/// a scratch file when it has none (`truncate -s 10G bench.img`).
fn holds_data(a: &RunArgs, info: &TargetInfo, held_data: Option<bool>) -> Option<String> {
    let what = match (info.kind.as_str(), held_data) {
        ("nbd", _) => "NBD export",
        ("iscsi", _) => "iSCSI LUN",
        ("block", _) => "block device",
        ("file", Some(true)) => "file",
        _ => return None,
    };
    (!a.allow_destructive && !a.target_is_scratch).then(|| format!("{what} {}", info.uri))
}

fn config_record(plan: &Plan, region: Region) -> Config {
    Config {
        mode: plan.mode.name().into(),
        small_io_bytes: plan.small_io_bytes,
        large_io_bytes: plan.large_io_bytes,
        small_queue_depths: plan.small_qds.clone(),
        large_queue_depths: plan.large_qds.clone(),
        write_pcts: plan.write_pcts.clone(),
        region_spec: plan.region_spec.clone(),
        region,
        duration_s: plan.duration.as_secs_f64(),
        warmup_s: plan.warmup.as_secs_f64(),
        workers: plan.workers,
        latency_threshold_us: plan.latency_threshold.as_secs_f64() * 1e6,
        seed: plan.seed,
        latency_method: LATENCY_METHOD.into(),
        data_pattern: plan.data_pattern,
        server_pid: plan.server_pid,
    }
}

fn progress_bar(disabled: bool, total: Duration) -> ProgressBar {
    if disabled {
        return ProgressBar::hidden();
    }
    let total_ms = u64::try_from(total.as_millis()).unwrap_or(u64::MAX);
    let bar = ProgressBar::new(total_ms);
    bar.set_style(
        ProgressStyle::with_template(
            "[{elapsed_precise}] {bar:30.cyan/blue} {percent:>3}% eta {eta} {msg}",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}

/// Splits a point's outstanding I/Os over queues: per queue, the class of each slot.
fn assign_slots(spec: &PointSpec, workers: u32, queue_depth_max: u32) -> Vec<Vec<Class>> {
    let total = spec.small_qd + spec.large_qd;
    let queues = if queue_depth_max <= 1 {
        total
    } else {
        workers.min(total).max(total.div_ceil(queue_depth_max))
    };
    let mut out = vec![Vec::new(); queues as usize];
    let classes = std::iter::repeat_n(Class::Small, spec.small_qd as usize)
        .chain(std::iter::repeat_n(Class::Large, spec.large_qd as usize));
    for (i, c) in classes.enumerate() {
        out[i % queues as usize].push(c);
    }
    out
}

/// How a window of `duration` is cut into samples: their length and number.
fn sampling(duration: Duration) -> (Duration, u32) {
    let per_second = duration.as_secs_f64() / SAMPLE_INTERVAL.as_secs_f64();
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // clamped to u32 range
    let n = (per_second.round() as u32).clamp(SAMPLES_MIN, SAMPLES_MAX);
    (duration / n, n)
}

/// The workers' outcome: latency recorders and the time series.
type WorkerOutcome = Result<(Recorders, SeriesRecorder), TargetError>;

fn run_point(
    target: &dyn Target,
    plan: &Plan,
    region: Region,
    spec: &PointSpec,
    bar: &ProgressBar,
    meter: &CpuMeter,
    run_start: Instant,
) -> Result<PointResult, BenchError> {
    let run_err = |source: TargetError| BenchError::Run {
        point: spec.name(),
        source,
    };
    let slots = assign_slots(spec, plan.workers, target.queue_depth_max());
    let nqueues = slots.len();
    // Open every queue before the clock starts: connection set-up is not part of the load.
    let mut queues = Vec::with_capacity(nqueues);
    for (qi, classes) in slots.iter().enumerate() {
        let io_max = classes
            .iter()
            .map(|c| {
                if *c == Class::Small {
                    plan.small_io_bytes
                } else {
                    plan.large_io_bytes
                }
            })
            .max()
            .expect("every queue has a slot");
        let depth = u32::try_from(classes.len()).expect("depth bounded by QUEUE_DEPTH_MAX");
        // Every queue writes its own data; duplicates come from one pool for the whole run.
        let data = DataGen::new(
            mix_seed(plan.seed, spec.index, qi, 0),
            plan.data_pattern,
            mix_seed(plan.seed, 0, 0, 2),
        );
        queues.push(target.open_queue(depth, io_max, data).map_err(run_err)?);
    }
    let (sample_interval, samples) = sampling(plan.duration);
    let ctx = PointCtx {
        spec,
        region,
        small_io_bytes: plan.small_io_bytes,
        large_io_bytes: plan.large_io_bytes,
        start: OnceLock::new(),
        warmup: plan.warmup,
        duration: plan.duration,
        seed: plan.seed,
        sample_interval,
        samples,
        abort: AtomicBool::new(false),
        completed_ios: AtomicU64::new(0),
        finished_workers: AtomicUsize::new(0),
    };
    let barrier = Barrier::new(nqueues + 1);
    let bar_base = bar.position();
    bar.set_message(spec.name());
    let mut cpu_samples = Vec::with_capacity(samples as usize + 1);
    let outcomes: Vec<WorkerOutcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = queues
            .into_iter()
            .zip(slots.iter())
            .enumerate()
            .map(|(qi, (queue, classes))| {
                let (ctx, barrier) = (&ctx, &barrier);
                std::thread::Builder::new()
                    .name(format!("bench-q{qi}"))
                    .spawn_scoped(scope, move || {
                        barrier.wait();
                        let seq_start = stream_start(ctx, qi, nqueues);
                        let r = drive(
                            ctx,
                            queue,
                            classes,
                            seq_start,
                            mix_seed(ctx.seed, ctx.spec.index, qi, 1),
                        );
                        if r.is_err() {
                            ctx.abort.store(true, Ordering::Relaxed);
                        }
                        ctx.finished_workers.fetch_add(1, Ordering::Relaxed);
                        r
                    })
                    .expect("spawn worker thread")
            })
            .collect();
        let start = Instant::now();
        ctx.start.set(start).expect("start is set once");
        barrier.wait();
        watch_progress(&ctx, start, nqueues, bar, bar_base, meter, &mut cpu_samples);
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .collect()
    });
    let total_ms = u64::try_from((plan.warmup + plan.duration).as_millis()).unwrap_or(u64::MAX);
    bar.set_position(bar_base + total_ms);
    let mut merged: Recorders = Default::default();
    let mut series = SeriesRecorder::new(nanos(sample_interval), samples as usize);
    for outcome in outcomes {
        let (recs, s) = outcome.map_err(run_err)?;
        for (m, r) in merged.iter_mut().flatten().zip(recs.iter().flatten()) {
            m.merge(r);
        }
        series.merge(&s);
    }
    let mut r = point_result(spec, plan, &merged, nqueues);
    r.cpu = point_cpu(&cpu_samples, r.total.ios);
    let window_start_s = ctx.start.get().map_or(0.0, |s| {
        (*s + plan.warmup).duration_since(run_start).as_secs_f64()
    });
    r.series = samples_of(&series, &cpu_samples, sample_interval, window_start_s);
    Ok(r)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// CPU over the measured window: from the first sample (window open) to the last.
fn point_cpu(cpu: &[CpuSample], ios: u64) -> PointCpu {
    let (Some(first), Some(last)) = (cpu.first(), cpu.last()) else {
        return PointCpu::default();
    };
    let pct = CpuPct::between(first, last);
    let wall_s = last.at.duration_since(first.at).as_secs_f64();
    #[allow(clippy::cast_precision_loss)] // I/O counts far below 2^52
    let per_io = |pct: f64| {
        if ios == 0 {
            0.0
        } else {
            pct / 100.0 * wall_s * 1e6 / ios as f64
        }
    };
    PointCpu {
        client_pct: pct.client,
        client_us_per_io: per_io(pct.client),
        server_pct: pct.server,
        server_us_per_io: pct.server.map(per_io),
    }
}

/// The time series of a point: I/O counts per interval with the CPU sampled at its ends.
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn samples_of(
    series: &SeriesRecorder,
    cpu: &[CpuSample],
    interval: Duration,
    window_start_s: f64,
) -> Vec<Sample> {
    let interval_s = interval.as_secs_f64();
    series
        .intervals()
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let cpu_pct = match (cpu.get(i), cpu.get(i + 1)) {
                (Some(a), Some(b)) => CpuPct::between(a, b),
                _ => CpuPct::default(),
            };
            let mean_us = if c.ios == 0 {
                0.0
            } else {
                c.latency_ns_sum as f64 / c.ios as f64 / 1000.0
            };
            Sample {
                t_s: window_start_s + interval_s * (i + 1) as f64,
                interval_s,
                ios: c.ios,
                iops: c.ios as f64 / interval_s,
                mb_per_s: c.bytes as f64 / interval_s / 1e6,
                latency_us_mean: mean_us,
                latency_us_max: c.latency_ns_max as f64 / 1000.0,
                client_cpu_pct: cpu_pct.client,
                server_cpu_pct: cpu_pct.server,
            }
        })
        .collect()
}

/// Seeds differ per point, queue and purpose so no two streams share data or offsets.
fn mix_seed(seed: u64, point: usize, queue: usize, purpose: u64) -> u64 {
    let p = point as u64;
    let q = queue as u64;
    seed ^ p.wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ q.wrapping_mul(0xc2b2_ae3d_27d4_eb4f)
        ^ purpose.rotate_left(62)
}

/// Where queue `qi`'s sequential stream starts: streams are spread evenly over the region.
fn stream_start(ctx: &PointCtx<'_>, qi: usize, nqueues: usize) -> u64 {
    let len = ctx.region.end_bytes - ctx.region.start_bytes;
    let large = u64::from(ctx.large_io_bytes);
    let share = len / nqueues as u64 * qi as u64;
    ctx.region.start_bytes + share / large * large
}

/// Refreshes the progress bar and samples CPU at each sampling boundary of the window (its
/// opening, the end of each interval) until the window closes or the workers stop.
fn watch_progress(
    ctx: &PointCtx<'_>,
    start: Instant,
    nqueues: usize,
    bar: &ProgressBar,
    base: u64,
    meter: &CpuMeter,
    cpu: &mut Vec<CpuSample>,
) {
    let warm_end = start + ctx.warmup;
    let end = warm_end + ctx.duration;
    let boundary = |k: u32| warm_end + ctx.sample_interval * k;
    let mut next_k = 0u32;
    let mut last_ios = 0u64;
    let mut last_t = start;
    while ctx.finished_workers.load(Ordering::Relaxed) < nqueues && next_k <= ctx.samples {
        let now = Instant::now();
        if now >= boundary(next_k) {
            cpu.push(meter.sample());
            next_k += 1;
            continue;
        }
        let wake = (now + PROGRESS_TICK).min(boundary(next_k)).min(end);
        std::thread::sleep(wake.saturating_duration_since(now));
        let now = Instant::now();
        let ios = ctx.completed_ios.load(Ordering::Relaxed);
        let dt = now.duration_since(last_t).as_secs_f64();
        if dt > 0.0 && !bar.is_hidden() {
            #[allow(clippy::cast_precision_loss)]
            let rate = (ios - last_ios) as f64 / dt;
            let phase = if now < start + ctx.warmup {
                "warm-up"
            } else {
                "measuring"
            };
            bar.set_message(format!("{} ({phase}): {:.0} IOPS", ctx.spec.name(), rate));
            bar.set_position(
                base + u64::try_from(now.duration_since(start).as_millis()).unwrap_or(0),
            );
        }
        last_ios = ios;
        last_t = now;
    }
    // The workers can all finish between the window's end and our wake-up: take the last
    // sample now (a little late) rather than lose the last interval's CPU.
    if next_k == ctx.samples {
        cpu.push(meter.sample());
    }
}

/// One worker's closed loop over its queue.
fn drive(
    ctx: &PointCtx<'_>,
    mut queue: Box<dyn IoQueue>,
    classes: &[Class],
    seq_start: u64,
    seed: u64,
) -> WorkerOutcome {
    let start = *ctx.start.get().expect("start set before the barrier");
    let warm_end = start + ctx.warmup;
    let end = warm_end + ctx.duration;
    let depth = classes.len();
    let mut rng = Rng::new(seed);
    let mut recs: Recorders = Default::default();
    let mut series = SeriesRecorder::new(nanos(ctx.sample_interval), ctx.samples as usize);
    let mut free: Vec<u32> = (0..u32::try_from(depth).expect("depth fits u32"))
        .rev()
        .collect();
    let mut submitted_at = vec![start; depth];
    let mut ops = vec![Op::Read; depth];
    let mut fresh: Vec<u32> = Vec::with_capacity(depth);
    let mut done: Vec<u32> = Vec::with_capacity(depth);
    let region = ctx.region;
    let small = u64::from(ctx.small_io_bytes);
    let large = u64::from(ctx.large_io_bytes);
    let small_blocks = (region.end_bytes - region.start_bytes) / small;
    let mut seq = seq_start;
    let mut outstanding = 0usize;
    let mut stopping = false;
    loop {
        if !stopping {
            while let Some(tag) = free.pop() {
                let op = if rng.percent(ctx.spec.write_pct) {
                    Op::Write
                } else {
                    Op::Read
                };
                let (offset_bytes, len_bytes) = match classes[tag as usize] {
                    Class::Small => (
                        region.start_bytes + rng.below(small_blocks) * small,
                        ctx.small_io_bytes,
                    ),
                    Class::Large => {
                        if seq + large > region.end_bytes {
                            seq = region.start_bytes;
                        }
                        let at = seq;
                        seq += large;
                        (at, ctx.large_io_bytes)
                    }
                };
                ops[tag as usize] = op;
                queue.submit(IoRequest {
                    tag,
                    op,
                    offset_bytes,
                    len_bytes,
                });
                fresh.push(tag);
                outstanding += 1;
            }
        }
        if outstanding == 0 {
            break;
        }
        let t_submit = Instant::now();
        for &tag in &fresh {
            submitted_at[tag as usize] = t_submit;
        }
        fresh.clear();
        queue.wait(&mut done)?;
        let t_done = Instant::now();
        let in_window = t_done <= end;
        let mut counted = 0u64;
        for &tag in &done {
            outstanding -= 1;
            let t = tag as usize;
            if in_window && submitted_at[t] >= warm_end {
                let class = classes[t] as usize;
                let dir = usize::from(ops[t] == Op::Write);
                let ns = u64::try_from(t_done.duration_since(submitted_at[t]).as_nanos())
                    .unwrap_or(u64::MAX);
                let bytes = if classes[t] == Class::Small {
                    small
                } else {
                    large
                };
                recs[class][dir].record(ns, bytes);
                let since_ns =
                    u64::try_from(t_done.duration_since(warm_end).as_nanos()).unwrap_or(u64::MAX);
                series.record(since_ns, ns, bytes);
                counted += 1;
            }
            free.push(tag);
        }
        done.clear();
        if counted > 0 {
            ctx.completed_ios.fetch_add(counted, Ordering::Relaxed);
        }
        if !in_window || ctx.abort.load(Ordering::Relaxed) || crate::stop_requested() {
            stopping = true;
        }
    }
    Ok((recs, series))
}

fn point_result(spec: &PointSpec, plan: &Plan, recs: &Recorders, queues: usize) -> PointResult {
    let secs = plan.duration.as_secs_f64();
    let sum = |rs: &[&Recorder]| {
        let mut m = Recorder::default();
        rs.iter().for_each(|r| m.merge(r));
        m
    };
    let [[sr, sw], [lr, lw]] = recs;
    let class = |r: &Recorder, w: &Recorder, io_bytes: u32| ClassStats {
        io_bytes,
        total: sum(&[r, w]).summarize(secs),
        read: r.summarize(secs),
        write: w.summarize(secs),
    };
    let r = PointResult {
        index: spec.index,
        name: spec.name(),
        kind: spec.kind().into(),
        small_qd: spec.small_qd,
        large_qd: spec.large_qd,
        write_pct: spec.write_pct,
        duration_s: secs,
        queues: u32::try_from(queues).unwrap_or(u32::MAX),
        total: sum(&[sr, sw, lr, lw]).summarize(secs),
        read: sum(&[sr, lr]).summarize(secs),
        write: sum(&[sw, lw]).summarize(secs),
        small: (spec.small_qd > 0).then(|| class(sr, sw, plan.small_io_bytes)),
        large: (spec.large_qd > 0).then(|| class(lr, lw, plan.large_io_bytes)),
        cpu: PointCpu::default(),
        series: Vec::new(),
    };
    let n: u64 = recs.iter().flatten().map(Recorder::ios).sum();
    assert_eq!(r.total.ios, n, "merging lost I/Os");
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_sample_each_second_or_ten_times() {
        assert_eq!(
            sampling(Duration::from_secs(30)),
            (Duration::from_secs(1), 30)
        );
        assert_eq!(sampling(Duration::from_millis(200)).1, 10);
        assert_eq!(
            sampling(Duration::from_secs(5)),
            (Duration::from_millis(500), 10)
        );
        assert_eq!(sampling(Duration::from_secs(7200)).1, SAMPLES_MAX);
    }

    #[test]
    fn slots_spread_over_workers_and_files_get_one_per_io() {
        let spec = PointSpec {
            index: 0,
            small_qd: 5,
            large_qd: 2,
            write_pct: 0,
        };
        let q = assign_slots(&spec, 2, u32::MAX);
        assert_eq!(q.len(), 2);
        assert_eq!(q[0].len() + q[1].len(), 7);
        assert_eq!(
            q.iter().flatten().filter(|c| **c == Class::Large).count(),
            2
        );
        let q = assign_slots(&spec, 1, 1);
        assert_eq!(q.len(), 7);
        assert!(q.iter().all(|s| s.len() == 1));
        let spec = PointSpec {
            index: 0,
            small_qd: 1,
            large_qd: 0,
            write_pct: 0,
        };
        assert_eq!(assign_slots(&spec, 8, u32::MAX).len(), 1);
    }
}
