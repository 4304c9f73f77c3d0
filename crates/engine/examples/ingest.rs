//! In-process ingest benchmark of the engine (issue 19): no NBD, no fio. For every data kind,
//! data dir and CPU count asked for, it opens a fresh engine (`Engine::open_local`, the
//! `weft serve` defaults), creates a volume, writes `--size` bytes of pre-generated data in
//! `--write-size` writes from `--writers` threads (sequential offsets, like fio's 1M QD8 job),
//! then calls `Engine::sync` (what `weft sync` does: destage everything and wait until every
//! open segment is sealed into a durable stripe). The measured window is from the first write
//! to the return of `sync`; data generation, engine open and shutdown are outside it.
//!
//! Reported per cell: GB/s (10^9 bytes over the window), CPU-seconds per GB (the process's
//! utime+stime from `getrusage` over the window), the CPU other processes used meanwhile
//! (`/proc/stat` less ours: this machine is shared) and how our CPU splits over the engine's
//! threads (`/proc/self/task/*/stat`, 10 ms ticks; threads that exited during the window,
//! such as the scoped reduce helper of engines before the reduction pool, are the remainder).
//!
//! `--api owned` (the default) hands each write's buffer to the engine (`Engine::write_owned`:
//! a slice of the pre-generated data, kept by the write buffer without a copy, as a front end
//! that owns its request buffer would); `--api copy` lends it (`Engine::write`, which copies it
//! into the write buffer; the only way before `write_owned`).
//!
//! `--threads 1,2` sets the engine's reduction threads (`EngineConfig::reduction_threads`: the
//! destager plus `N - 1` `weft-reduce` helpers; 0 = one per core, the default); `--cpus 1,2`
//! pins the whole process to that many cores (`sched_setaffinity`, inherited by every thread
//! the engine starts; 0 = all). Every combination asked for is a cell.
//!
//! `--locks N` prints, after each cell, the N call sites that held the engine's state lock
//! longest over the window (`weft_engine::lock_timing`): holds, total, share of the window,
//! mean, p50/p99 (histogram bucket bounds) and the longest.
//!
//! ```sh
//! cargo run --release -p weft-engine --example ingest -- \
//!     --size 1G --dirs /dev/shm,target --kinds incompressible,database --threads 1,2
//! mkfifo /tmp/ctl && perf record -g -D -1 --control fifo:/tmp/ctl -- \
//!     target/release/examples/ingest --perf-ctl /tmp/ctl ...   # profile the windows only
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use weft_engine::lock_timing::SiteHolds;
use weft_engine::{Engine, EngineConfig, LocalStoreConfig};

/// Database-like data: each 4 KiB block holds this many random bytes, then zeroes (fio
/// `buffer_compress_percentage=60 buffer_compress_chunk=4k`).
const DB_RANDOM_BYTES_PER_BLOCK: usize = 4096 * 40 / 100;
/// Database-like data: one block in this many repeats an earlier one (`dedupe_percentage=10`).
const DB_DUPLICATE_EVERY_BLOCKS: u64 = 10;
const BLOCK_BYTES: usize = 4096;

#[derive(Debug)]
struct Args {
    size_bytes: u64,
    write_size_bytes: usize,
    writers: usize,
    dirs: Vec<String>,
    kinds: Vec<String>,
    cpus: Vec<usize>,
    /// Reduction threads (`EngineConfig::reduction_threads`).
    threads: Vec<usize>,
    /// How writes reach the engine: `owned` hands each write's buffer over
    /// (`Engine::write_owned`, what a front end that owns its request buffer does), `copy`
    /// lends it (`Engine::write`: the engine copies it into its write buffer).
    apis: Vec<String>,
    /// `perf record -D -1 --control fifo:PATH`: sampling is enabled over each window only.
    perf_ctl: Option<String>,
    /// Print the state lock's busiest call sites over each window (`--locks N`; 0: none).
    locks: usize,
}

/// CPU seconds of one thread (by name) or the process.
type Ticks = Vec<(String, u64)>;

fn main() {
    let args = parse_args();
    println!("load before: {}", loadavg());
    println!(
        "| kind | data dir | cpus | threads | api | GB | ack GB/s | ingest GB/s | CPU-s/GB | cores busy | stored/host | others (cores) | CPU split (cores) |"
    );
    println!("|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for kind in &args.kinds {
        let data = generate(kind, args.size_bytes);
        for dir in &args.dirs {
            for &cpus in &args.cpus {
                for &threads in &args.threads {
                    for api in &args.apis {
                        run_cell(&args, kind, dir, cpus, threads, api, &data);
                    }
                }
            }
        }
    }
    println!("load after: {}", loadavg());
}

fn run_cell(
    args: &Args,
    kind: &str,
    dir: &str,
    cpus: usize,
    threads: usize,
    api: &str,
    data: &Bytes,
) {
    let owned = match api {
        "owned" => true,
        "copy" => false,
        other => panic!("unknown api {other}: owned or copy"),
    };
    pin_to_cpus(cpus);
    let path = std::path::Path::new(dir).join(format!("weft-ingest-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&path);
    let engine = Arc::new(
        Engine::open_local(
            EngineConfig {
                reduction_threads: threads,
                ..EngineConfig::new(&path)
            },
            LocalStoreConfig::default(),
        )
        .expect("open the engine"),
    );
    let threads = engine.reduction_threads();
    let volume = engine
        .create_volume("ingest", args.size_bytes)
        .expect("create the volume");
    let id = engine
        .open_volume(&volume.name)
        .expect("open the volume")
        .id;

    perf_ctl(args, "enable");
    let holds0 = engine.lock_holds();
    let (start, cpu0, threads0) = (Instant::now(), process_cpu_s(), thread_ticks());
    let machine0 = machine_busy_s();
    let next = Arc::new(AtomicU64::new(0));
    let writers_cpu_us = Arc::new(AtomicU64::new(0));
    let writes = args.size_bytes / args.write_size_bytes as u64;
    let handles: Vec<_> = (0..args.writers)
        .map(|_| {
            let (engine, data, next) = (engine.clone(), data.clone(), next.clone());
            let cpu_us = writers_cpu_us.clone();
            let size = args.write_size_bytes;
            std::thread::Builder::new()
                .name("ingest-writer".into())
                .spawn(move || loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= writes {
                        // Gone before the window ends: counted here, not from procfs.
                        cpu_us.fetch_add(thread_cpu_us(), Ordering::Relaxed);
                        return;
                    }
                    let at = usize::try_from(i).expect("fits") * size;
                    if owned {
                        // A slice of the pre-generated data: shares it, copies nothing.
                        engine
                            .write_owned(id, at as u64, data.slice(at..at + size), false)
                            .expect("write");
                    } else {
                        engine
                            .write(id, at as u64, &data[at..at + size], false)
                            .expect("write");
                    }
                })
                .expect("spawn a writer")
        })
        .collect();
    for h in handles {
        h.join().expect("writer does not panic");
    }
    let acked = start.elapsed().as_secs_f64();
    engine.sync().expect("sync");
    let secs = start.elapsed().as_secs_f64();
    let cpu = process_cpu_s() - cpu0;
    perf_ctl(args, "disable");
    let others = (machine_busy_s() - machine0 - cpu).max(0.0) / secs;
    let writers_s = writers_cpu_us.load(Ordering::Relaxed) as f64 / 1e6;
    let split = split_cpu(&threads0, &thread_ticks(), writers_s, cpu, secs);
    let stats = engine.stats();

    let gb = (writes * args.write_size_bytes as u64) as f64 / 1e9;
    let stored = stats.chunk_written_bytes as f64 / (gb * 1e9);
    println!(
        "| {kind} | {dir} | {cpus} | {threads} | {api} | {gb:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {stored:.2} | {others:.2} | {split} |",
        gb / acked,
        gb / secs,
        cpu / gb,
        cpu / secs
    );
    if args.locks > 0 {
        print_lock_holds(&holds0, &engine.lock_holds(), secs, args.locks);
    }
    engine.shutdown();
    drop(engine);
    let _ = std::fs::remove_dir_all(&path);
    pin_to_cpus(0);
}

/// The state lock's holds over the window (`after` less `before`), the `top` call sites by
/// total time held: how often, how long in all (and as a share of the window: the lock's
/// busy share bounds how far the engine scales with cores), typical and longest.
fn print_lock_holds(before: &[SiteHolds], after: &[SiteHolds], window_s: f64, top: usize) {
    let mut rows: Vec<SiteHolds> = after
        .iter()
        .map(|a| {
            let mut d = a.clone();
            if let Some(b) = before.iter().find(|b| b.site == a.site) {
                d.count -= b.count;
                d.total = d.total.saturating_sub(b.total);
                for (x, y) in d.buckets.iter_mut().zip(b.buckets) {
                    *x -= y;
                }
            }
            d
        })
        .filter(|d| d.count > 0)
        .collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.total));
    let busy: f64 = rows.iter().map(|r| r.total.as_secs_f64()).sum::<f64>() / window_s;
    println!("  locks: state lock held {:.1}% of the window; busiest call sites (max is since the engine opened):", busy * 100.0);
    println!("  locks: | site | holds | held ms | % of window | mean µs | p50 ≤ µs | p99 ≤ µs | max µs |");
    for r in rows.iter().take(top) {
        let site = r.site.rsplit("src/").next().unwrap_or(&r.site);
        println!(
            "  locks: | {site} | {} | {:.1} | {:.2} | {:.1} | {:.0} | {:.0} | {:.0} |",
            r.count,
            r.total.as_secs_f64() * 1e3,
            r.total.as_secs_f64() / window_s * 100.0,
            r.total.as_secs_f64() * 1e6 / r.count as f64,
            r.quantile(0.5).as_secs_f64() * 1e6,
            r.quantile(0.99).as_secs_f64() * 1e6,
            r.max.as_secs_f64() * 1e6,
        );
    }
}

/// Pre-generate the whole run's data, so the measured window holds no generation.
fn generate(kind: &str, size_bytes: u64) -> Bytes {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ size_bytes;
    let mut next = move || {
        // xorshift64*: every byte of every word random (the engine samples all 8 positions).
        rng ^= rng >> 12;
        rng ^= rng << 25;
        rng ^= rng >> 27;
        rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    };
    let len = usize::try_from(size_bytes).expect("fits in memory");
    let mut data = vec![0u8; len];
    let random_bytes = match kind {
        "incompressible" => BLOCK_BYTES,
        "database" => DB_RANDOM_BYTES_PER_BLOCK,
        other => panic!("unknown kind {other}: incompressible or database"),
    };
    for i in 0..len / BLOCK_BYTES {
        let here = i * BLOCK_BYTES;
        if kind == "database" && i > 0 && next() % DB_DUPLICATE_EVERY_BLOCKS == 0 {
            // A copy of an earlier block (so it dedups against data already written).
            let earlier = usize::try_from(next() % i as u64).expect("fits") * BLOCK_BYTES;
            data.copy_within(earlier..earlier + BLOCK_BYTES, here);
            continue;
        }
        for w in data[here..here + random_bytes].chunks_mut(8) {
            let v = next().to_le_bytes();
            w.copy_from_slice(&v[..w.len()]);
        }
    }
    Bytes::from(data)
}

/// Pin the calling thread (and every thread it starts later) to CPUs 0..n; 0: all CPUs.
#[allow(unsafe_code)]
fn pin_to_cpus(n: usize) {
    // Not available_parallelism: that reads this thread's affinity, which we change.
    // SAFETY: sysconf has no preconditions.
    let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    let all = usize::try_from(online).unwrap_or(1).max(1);
    let n = if n == 0 { all } else { n.min(all) };
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it and
    // sched_setaffinity reads it for the calling thread only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        for cpu in 0..n {
            libc::CPU_SET(cpu, &mut set);
        }
        let rc = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity");
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0
        );
        assert_eq!(
            usize::try_from(libc::CPU_COUNT(&set)).ok(),
            Some(n),
            "pinned to {n} cpus"
        );
    }
}

/// utime + stime of the whole process (all threads, including exited ones).
#[allow(unsafe_code)]
fn process_cpu_s() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// utime + stime ticks of every live thread, keyed by "name/tid".
fn thread_ticks() -> Ticks {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/task")
        .expect("procfs")
        .flatten()
    {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = &stat[open + 1..close];
        // After the name: state, ppid, ... utime is the 12th field, stime the 13th.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks: u64 = fields[11].parse::<u64>().unwrap_or(0) + fields[12].parse().unwrap_or(0);
        out.push((
            format!("{name}/{}", entry.file_name().to_string_lossy()),
            ticks,
        ));
    }
    out
}

/// CPU of the calling thread since it started, in microseconds.
#[allow(unsafe_code)]
fn thread_cpu_us() -> u64 {
    // SAFETY: clock_gettime writes into the zeroed timespec we own.
    let t = unsafe {
        let mut t: libc::timespec = std::mem::zeroed();
        libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t);
        t
    };
    u64::try_from(t.tv_sec).unwrap_or(0) * 1_000_000 + u64::try_from(t.tv_nsec).unwrap_or(0) / 1000
}

/// CPU of the window per thread name, in cores: live threads from procfs, the writers (who
/// exited) as measured by themselves, the rest (threads that exited, e.g. an older engine's scoped reduce helper) as "exited".
#[allow(unsafe_code)]
fn split_cpu(before: &Ticks, after: &Ticks, writers_s: f64, cpu_s: f64, secs: f64) -> String {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let mut by_name: Vec<(String, f64)> = Vec::new();
    for (key, ticks) in after {
        let was = before.iter().find(|(k, _)| k == key).map_or(0, |(_, t)| *t);
        let name = key.rsplit_once('/').map_or(key.as_str(), |(n, _)| n);
        let s = ticks.saturating_sub(was) as f64 / hz;
        match by_name.iter_mut().find(|(n, _)| n == name) {
            Some((_, sum)) => *sum += s,
            None => by_name.push((name.to_string(), s)),
        }
    }
    by_name.push(("writers".into(), writers_s));
    let known: f64 = by_name.iter().map(|(_, s)| s).sum();
    by_name.push(("exited".into(), (cpu_s - known).max(0.0)));
    by_name.sort_by(|a, b| b.1.total_cmp(&a.1));
    by_name
        .iter()
        .filter(|(_, s)| *s / secs >= 0.01)
        .map(|(n, s)| format!("{n} {:.2}", s / secs))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Tell a `perf record --control fifo:PATH` to start or stop sampling.
fn perf_ctl(args: &Args, command: &str) {
    if let Some(path) = &args.perf_ctl {
        use std::io::Write;
        let mut fifo = std::fs::OpenOptions::new()
            .write(true)
            .open(path)
            .expect("open the perf control fifo");
        writeln!(fifo, "{command}").expect("write to the perf control fifo");
    }
}

/// CPU time every process of the machine spent (user, nice, system, irq, softirq, steal):
/// with ours subtracted, the load that competed with the window.
#[allow(unsafe_code)]
fn machine_busy_s() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let stat = std::fs::read_to_string("/proc/stat").expect("procfs");
    let cpu = stat.lines().next().expect("a cpu line");
    let f: Vec<u64> = cpu
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    // user nice system idle iowait irq softirq steal
    (f[0] + f[1] + f[2] + f[5] + f[6] + f[7]) as f64 / hz
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg").map_or_else(|_| "?".into(), |s| s.trim().into())
}

fn parse_args() -> Args {
    let mut args = Args {
        size_bytes: 1 << 30,
        write_size_bytes: 1 << 20,
        writers: 8,
        dirs: vec!["/dev/shm".into(), "target".into()],
        kinds: vec!["incompressible".into(), "database".into()],
        cpus: vec![0],
        threads: vec![1, 2],
        apis: vec!["owned".into()],
        perf_ctl: None,
        locks: 0,
    };
    let list = |v: &str| v.split(',').map(String::from).collect::<Vec<_>>();
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().unwrap_or_else(|| panic!("{flag} needs a value"));
        match flag.as_str() {
            "--size" => args.size_bytes = parse_size(&value),
            "--write-size" => args.write_size_bytes = parse_size(&value) as usize,
            "--writers" => args.writers = value.parse().expect("--writers N"),
            "--dirs" => args.dirs = list(&value),
            "--kinds" => args.kinds = list(&value),
            "--perf-ctl" => args.perf_ctl = Some(value),
            "--locks" => args.locks = value.parse().expect("--locks N"),
            "--api" => args.apis = list(&value),
            "--threads" => {
                args.threads = list(&value)
                    .iter()
                    .map(|c| c.parse().expect("--threads 1,2"))
                    .collect()
            }
            "--cpus" => {
                args.cpus = list(&value)
                    .iter()
                    .map(|c| c.parse().expect("--cpus 1,2"))
                    .collect()
            }
            _ => panic!("unknown flag {flag}: --size --write-size --writers --dirs --kinds --cpus --threads --api --perf-ctl --locks"),
        }
    }
    assert!(
        args.write_size_bytes.is_multiple_of(BLOCK_BYTES),
        "--write-size is whole 4 KiB blocks"
    );
    args.size_bytes -= args.size_bytes % args.write_size_bytes as u64;
    args
}

/// "1G", "512M", "64K" or bytes.
fn parse_size(s: &str) -> u64 {
    let (digits, shift) = match s.chars().last() {
        Some('G' | 'g') => (&s[..s.len() - 1], 30),
        Some('M' | 'm') => (&s[..s.len() - 1], 20),
        Some('K' | 'k') => (&s[..s.len() - 1], 10),
        _ => (s, 0),
    };
    digits.parse::<u64>().expect("a size like 1G") << shift
}
