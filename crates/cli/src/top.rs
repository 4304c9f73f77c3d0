//! `weft top`: per-volume I/O like iostat, one line per volume, refreshed every second from
//! the live statistics (`GET /api/v1/stats/volumes`). On a terminal the screen is redrawn in
//! place and cut to its height; elsewhere each refresh is a block of lines, as iostat does.
//!
//! In a cluster the answering c.node merges every c.node's answer (a host's I/O is counted
//! by the c.node it came in through): every volume of every shard, with its OWNER and SHARD.
//! A c.node that did not answer is named under the title, and the rates of the volumes it
//! owns show `?` (unknown, not zero). `--cnode` shows the answering c.node's front ends only.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use weft_server::api::stats::{VolumeRate, VolumesStats};

use crate::client::ApiClient;
use crate::print::plural;

/// What the columns mean, under `weft top --help` (on a terminal the header's legend is cut
/// to its width).
pub const COLUMNS_HELP: &str = "\
Columns:
  r/s, w/s        reads and writes per second, over the last second
  rMB/s, wMB/s    megabytes (10^6) read and written per second
  r_p50 ... w_p99 latency percentiles, weft's own: from the request's arrival to its reply,
                  without the network or the client's queue (fio reports more)
  QD              reads and writes in flight in weft, on average over the second
  await           QD / IOPS: the mean time a request spends in weft, as iostat's await
  %util           of the second, the time the volume had a request in flight
  thr/s           I/Os per second the volume's QoS made wait (limits, or the latency
                  controller's cap for another volume's target; `weft volume qos`)
  IOPS/GB         IOPS per GB (10^9 bytes) of provisioned size (IO intensity, for tiering)
  SIZE            provisioned size, in binary units (10.0G is 10 GiB)
  OWNER, SHARD    in a cluster: the c.node that owns the volume's shard, and the shard; with
                  --cnode, OWNER is `here` for a volume served by this c.node's engines
  In a cluster the rates are summed over every c.node's front ends; latency percentiles are
  the worst c.node's; `?`: the owner did not answer (its front ends' I/O is unknown).";

#[derive(Debug, Args)]
pub struct TopArgs {
    /// Seconds between refreshes (the rates are averaged over the last second).
    #[arg(long, short = 'i', default_value = "1s", value_parser = crate::cluster_cmd::parse_duration)]
    interval: Duration,
    /// Stop after this many refreshes (default: until Ctrl-C).
    #[arg(long, short = 'n')]
    count: Option<u64>,
    /// Order of the lines.
    #[arg(long, short = 's', value_enum, default_value_t = SortBy::Iops)]
    sort: SortBy,
    /// Also show volumes and snapshots without I/O.
    #[arg(long, short = 'a')]
    all: bool,
    /// In a cluster, only the I/O that came in through the answering c.node (by default
    /// every c.node's, merged).
    #[arg(long)]
    cnode: bool,
}

/// The statistics `args` ask for.
pub fn stats_path(args: &TopArgs) -> &'static str {
    if args.cnode {
        "/stats/volumes?scope=cnode"
    } else {
        "/stats/volumes"
    }
}

/// What `weft top` sorts by (highest first, except the name).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortBy {
    /// Read plus write IOPS.
    Iops,
    /// Read plus write MB/s.
    Throughput,
    /// The worse of the read and write p99 latency.
    Latency,
    /// IOPS per GB of provisioned size (IO intensity, for tiering).
    Intensity,
    Name,
}

pub fn top(client: &ApiClient, args: TopArgs) -> anyhow::Result<()> {
    let terminal = std::io::stdout().is_terminal();
    let mut done = 0u64;
    let mut throttle = ThrottleRates::default();
    loop {
        let stats: VolumesStats =
            serde_json::from_value(client.call("GET", stats_path(&args), None)?)?;
        // A server without QoS (older) has no `/qos`: the column shows `-`.
        let throttled = throttle.update(client.call("GET", "/qos", None).ok().as_ref());
        let (height, width) = if terminal {
            terminal_size()
        } else {
            (usize::MAX, usize::MAX)
        };
        let screen = cut_to_width(&render(&stats, &throttled, &args, height), width);
        let mut out = std::io::stdout().lock();
        if terminal {
            // Home, clear to the end: redraw in place.
            write!(out, "\x1b[H\x1b[2J")?;
        }
        write!(out, "{screen}")?;
        if !terminal {
            writeln!(out)?;
        }
        out.flush()?;
        done += 1;
        if args.count.is_some_and(|n| done >= n) {
            return Ok(());
        }
        std::thread::sleep(args.interval);
    }
}

/// One refresh: a title line, a header and one line per volume (at most `height` lines).
pub fn render(
    stats: &VolumesStats,
    throttled: &HashMap<String, f64>,
    args: &TopArgs,
    height: usize,
) -> String {
    let mut rows: Vec<&VolumeRate> = stats
        .volumes
        .iter()
        .filter(|v| args.all || iops(v) > 0.0 || v.owner_unreachable)
        .collect();
    sort(&mut rows, args.sort);
    let total_iops: f64 = stats.volumes.iter().map(iops).sum();
    let total_mbps: f64 = stats.volumes.iter().map(mbps).sum();
    let snapshots = stats.volumes.iter().filter(|v| v.read_only).count();
    let sorted_by = args
        .sort
        .to_possible_value()
        .map_or_else(|| format!("{:?}", args.sort), |v| v.get_name().to_string());
    let cluster = stats.volumes.iter().any(|v| v.shard.is_some());
    let mut s = format!(
        "weft top  {}  {}, {}, {} busy, {:.0} IOPS, {:.1} MB/s  (sorted by \
         {sorted_by}; latency is weft's own, request to reply, without network or client queue; \
         QD: reads and writes in flight in weft, on average; await: QD / IOPS, the mean time \
         a request spends in weft, as iostat's; %util: of the second, the time with a request \
         in flight)\n",
        clock(stats.time_ms),
        plural(stats.volumes.len() - snapshots, "volume"),
        plural(snapshots, "snapshot"),
        stats.volumes.iter().filter(|v| iops(v) > 0.0).count(),
        total_iops,
        total_mbps,
    );
    for c in stats.cnodes.iter().filter(|c| !c.answered) {
        s.push_str(&format!(
            "c.node {} ({}) gave no answer of its own: {}\n",
            c.id,
            c.api,
            c.error.as_deref().unwrap_or("no answer")
        ));
    }
    s.push_str(&format!(
        "{:<24} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>6} {:>8} {:>6} {:>7} {:>9} {:>10}",
        "VOLUME",
        "r/s",
        "w/s",
        "rMB/s",
        "wMB/s",
        "r_p50",
        "r_p99",
        "w_p50",
        "w_p99",
        "QD",
        "await",
        "%util",
        "thr/s",
        "IOPS/GB",
        "SIZE"
    ));
    if cluster {
        s.push_str(&format!(" {:<16} {:>5}", "OWNER", "SHARD"));
    }
    s.push('\n');
    for v in rows.iter().take(height.saturating_sub(3)) {
        if v.owner_unreachable {
            s.push_str(&unknown_line(v));
            continue;
        }
        s.push_str(&format!(
            "{:<24} {:>9.0} {:>9.0} {:>8.1} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>6.1} {:>8} {:>6.0} {:>7} {:>9.1} {:>10}",
            shorten(&v.name, 24),
            v.read.iops,
            v.write.iops,
            f64::from(v.read.bytes_per_s) / 1e6,
            f64::from(v.write.bytes_per_s) / 1e6,
            latency(v.read.p50_us),
            latency(v.read.p99_us),
            latency(v.write.p50_us),
            latency(v.write.p99_us),
            v.read.queue_depth + v.write.queue_depth,
            latency(await_us(v)),
            v.util_pct,
            throttled
                .get(&v.name)
                .map_or_else(|| "-".to_string(), |r| format!("{r:.0}")),
            v.iops_per_gb,
            size(v.size_bytes),
        ));
        if cluster {
            s.push_str(&owner_columns(v));
        }
        s.push('\n');
    }
    if rows.is_empty() {
        s.push_str("(no volume did I/O in the last second; --all lists them all)\n");
    }
    s
}

/// A volume whose owner did not answer: its rates are unknown.
fn unknown_line(v: &VolumeRate) -> String {
    let q = "?";
    format!(
        "{:<24} {q:>9} {q:>9} {q:>8} {q:>8} {q:>8} {q:>8} {q:>8} {q:>8} {q:>6} {q:>8} {q:>6} {q:>7} {q:>9} {:>10}{}\n",
        shorten(&v.name, 24),
        size(v.size_bytes),
        owner_columns(v),
    )
}

/// ` OWNER SHARD`: the owner's id (`here` for the answering c.node's own with --cnode, `-`
/// while the shard has none, `ID?` when it did not answer).
fn owner_columns(v: &VolumeRate) -> String {
    let owner = match (&v.owner, v.route.as_deref(), v.owner_unreachable) {
        (_, Some("local"), _) => "here".to_string(),
        (Some(o), _, true) => format!("{o}?"),
        (Some(o), _, false) => o.clone(),
        (None, _, _) => "-".to_string(),
    };
    let shard = v.shard.map_or_else(|| "-".to_string(), |s| s.to_string());
    format!(" {:<16} {:>5}", shorten(&owner, 16), shard)
}

/// Throttled I/Os per second per volume, from the counts of `GET /api/v1/qos` at two
/// refreshes.
#[derive(Debug, Default)]
struct ThrottleRates {
    last: Option<(Instant, HashMap<String, u64>)>,
}

impl ThrottleRates {
    fn update(&mut self, qos: Option<&serde_json::Value>) -> HashMap<String, f64> {
        let now = Instant::now();
        let counts: HashMap<String, u64> = qos
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
            .filter_map(|q| {
                Some((
                    q["volume"].as_str()?.to_string(),
                    q["throttled_ios"].as_u64()?,
                ))
            })
            .collect();
        let rates = match &self.last {
            Some((then, before)) => {
                let seconds = now.duration_since(*then).as_secs_f64().max(1e-3);
                counts
                    .iter()
                    .map(|(name, n)| {
                        let was = before.get(name).copied().unwrap_or(0);
                        (name.clone(), n.saturating_sub(was) as f64 / seconds)
                    })
                    .collect()
            }
            None => counts.keys().map(|n| (n.clone(), 0.0)).collect(),
        };
        self.last = Some((now, counts));
        rates
    }
}

/// The mean time a read or write spends in weft, by Little's law (requests in flight over
/// requests per second), in µs; 0 without I/O. iostat's `await`.
fn await_us(v: &VolumeRate) -> f32 {
    let iops = v.read.iops + v.write.iops;
    if iops > 0.0 {
        (v.read.queue_depth + v.write.queue_depth) / iops * 1e6
    } else {
        0.0
    }
}

fn iops(v: &VolumeRate) -> f64 {
    f64::from(v.read.iops) + f64::from(v.write.iops)
}

fn mbps(v: &VolumeRate) -> f64 {
    (f64::from(v.read.bytes_per_s) + f64::from(v.write.bytes_per_s)) / 1e6
}

fn sort(rows: &mut [&VolumeRate], by: SortBy) {
    let key = |v: &VolumeRate| -> f64 {
        match by {
            SortBy::Iops => iops(v),
            SortBy::Throughput => mbps(v),
            SortBy::Latency => f64::from(v.read.p99_us.max(v.write.p99_us)),
            SortBy::Intensity => v.iops_per_gb,
            SortBy::Name => 0.0,
        }
    };
    rows.sort_by(|a, b| key(b).total_cmp(&key(a)).then_with(|| a.name.cmp(&b.name)));
}

/// `87µs`, `1.2ms`, `3.4s`; `-` without I/O.
fn latency(us: f32) -> String {
    let us = f64::from(us);
    if us <= 0.0 {
        "-".into()
    } else if us < 1000.0 {
        format!("{us:.0}µs")
    } else if us < 1e6 {
        format!("{:.1}ms", us / 1000.0)
    } else {
        format!("{:.1}s", us / 1e6)
    }
}

/// Binary units: `10.0G`, `512M`.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "K", "M", "G", "T", "P"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if value >= 100.0 || unit == 0 {
        format!("{value:.0}{}", UNITS[unit])
    } else {
        format!("{value:.1}{}", UNITS[unit])
    }
}

fn shorten(name: &str, width: usize) -> String {
    if name.chars().count() <= width {
        return name.to_string();
    }
    let head: String = name.chars().take(width - 1).collect();
    format!("{head}…")
}

/// `HH:MM:SS UTC` of a unix time in ms.
fn clock(unix_ms: u64) -> String {
    let s = unix_ms / 1000 % 86_400;
    format!("{:02}:{:02}:{:02} UTC", s / 3600, s / 60 % 60, s % 60)
}

/// Each line cut to `width` characters, as top(1) does: a line that wrapped would push the
/// header off a screen cut to its height (the header's legend runs past any terminal).
fn cut_to_width(screen: &str, width: usize) -> String {
    screen
        .lines()
        .map(|l| l.chars().take(width).collect::<String>() + "\n")
        .collect()
}

/// The terminal's height and width from `LINES` and `COLUMNS` or the tty, else 24 x 80.
fn terminal_size() -> (usize, usize) {
    let env = |name: &str| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
    };
    // SAFETY: TIOCGWINSZ fills a winsize struct we own; stdout is a terminal here.
    #[allow(unsafe_code)]
    let tty = unsafe {
        let mut size: libc::winsize = std::mem::zeroed();
        (libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut size) == 0)
            .then_some((size.ws_row, size.ws_col))
    };
    let rows = env("LINES").or_else(|| tty.map(|(r, _)| usize::from(r)).filter(|r| *r > 3));
    let cols = env("COLUMNS").or_else(|| tty.map(|(_, c)| usize::from(c)).filter(|c| *c > 0));
    (rows.unwrap_or(24), cols.unwrap_or(80))
}

#[cfg(test)]
mod tests {
    use super::*;
    use weft_server::io_stats::OpRate;

    fn volume(name: &str, read_iops: f32, write_p99: f32) -> VolumeRate {
        VolumeRate {
            name: name.into(),
            size_bytes: 10 << 30,
            read_only: false,
            read: OpRate {
                iops: read_iops,
                bytes_per_s: read_iops * 4096.0,
                p50_us: 80.0,
                p99_us: 200.0,
                max_us: 900.0,
                queue_depth: 1.5,
            },
            write: OpRate {
                iops: 10.0,
                p99_us: write_p99,
                ..OpRate::default()
            },
            iops_per_gb: f64::from(read_iops + 10.0) / 10.737,
            spark_iops: Vec::new(),
            util_pct: 73.0,
            shard: None,
            owner: None,
            route: None,
            served_by: Vec::new(),
            owner_unreachable: false,
        }
    }

    fn args(sort: SortBy, all: bool) -> TopArgs {
        TopArgs {
            interval: Duration::from_secs(1),
            count: None,
            sort,
            all,
            cnode: false,
        }
    }

    #[test]
    fn lines_are_sorted_and_formatted() {
        let stats = VolumesStats {
            scope: "single".into(),
            cnode: None,
            cnodes: Vec::new(),
            time_ms: 3_723_000,
            window_ms: 1000,
            volumes: vec![
                volume("quiet", 5.0, 100.0),
                volume("busy", 5000.0, 2500.0),
                VolumeRate {
                    read_only: true,
                    ..volume("busy@mon", 0.0, 0.0)
                },
            ],
        };
        let text = render(&stats, &HashMap::new(), &args(SortBy::Iops, false), 100);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("01:02:03 UTC"), "{text}");
        // Snapshots are not counted as volumes; the sort key is named as the flag takes it;
        // the latency is said to be the server's.
        assert!(lines[0].contains(" 2 volumes, 1 snapshot, "), "{text}");
        assert!(
            lines[0].contains("(sorted by iops; latency is weft's own"),
            "{text}"
        );
        assert!(lines[1].contains(" QD "), "{text}");
        assert!(lines[2].starts_with("busy"), "{text}");
        assert!(
            lines[2].contains(" 1.5 "),
            "reads and writes in flight: {text}"
        );
        // await: 1.5 in flight at 5,010 IOPS is 299 µs each (the column after QD).
        assert!(lines[1].contains(" QD    await  %util "), "{text}");
        assert!(lines[2].contains(" 1.5    299µs     73 "), "{text}");
        assert!(
            lines[2].contains("2.5ms") && lines[2].contains("10.0G"),
            "{text}"
        );
        assert!(lines[3].starts_with("quiet"), "{text}");
        let by_name = render(&stats, &HashMap::new(), &args(SortBy::Name, false), 100);
        assert!(by_name.lines().nth(2).unwrap().starts_with("busy"));
        // A short screen keeps the header.
        assert_eq!(
            render(&stats, &HashMap::new(), &args(SortBy::Iops, false), 4)
                .lines()
                .count(),
            3
        );
    }

    #[test]
    fn lines_are_cut_to_the_terminal_width() {
        assert_eq!(cut_to_width("abcdef\nab\n", 4), "abcd\nab\n");
        assert_eq!(cut_to_width("µsµs\n", 3), "µsµ\n");
        assert_eq!(cut_to_width("x\n", usize::MAX), "x\n");
    }

    #[test]
    fn idle_volumes_only_with_all() {
        let mut idle = volume("idle", 0.0, 0.0);
        idle.write.iops = 0.0;
        let stats = VolumesStats {
            scope: "single".into(),
            cnode: None,
            cnodes: Vec::new(),
            time_ms: 0,
            window_ms: 1000,
            volumes: vec![idle],
        };
        assert!(
            render(&stats, &HashMap::new(), &args(SortBy::Iops, false), 100)
                .contains("no volume did I/O")
        );
        assert!(
            render(&stats, &HashMap::new(), &args(SortBy::Iops, true), 100).contains("\nidle ")
        );
    }

    #[test]
    fn a_cluster_shows_owner_and_shard_and_unknown_rates_of_an_unreachable_owner() {
        let stats = VolumesStats {
            scope: "cluster".into(),
            cnode: Some("c1".into()),
            cnodes: vec![
                weft_server::api::stats::CnodeAnswer {
                    id: "c1".into(),
                    api: "http://a".into(),
                    answered: true,
                    error: None,
                },
                weft_server::api::stats::CnodeAnswer {
                    id: "c2".into(),
                    api: "http://b".into(),
                    answered: false,
                    error: Some("timed out".into()),
                },
            ],
            time_ms: 0,
            window_ms: 1000,
            volumes: vec![
                VolumeRate {
                    shard: Some(2),
                    owner: Some("c1".into()),
                    ..volume("db2", 100.0, 500.0)
                },
                VolumeRate {
                    shard: Some(1),
                    owner: Some("c2".into()),
                    owner_unreachable: true,
                    ..volume("db1", 0.0, 0.0)
                },
            ],
        };
        let text = render(&stats, &HashMap::new(), &args(SortBy::Name, false), 100);
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines[1].starts_with("c.node c2 (http://b) gave no answer of its own: timed out"),
            "{text}"
        );
        assert!(lines[2].ends_with(" OWNER            SHARD"), "{text}");
        let db1 = lines.iter().find(|l| l.starts_with("db1 ")).expect(&text);
        assert!(
            db1.contains(" ? ") && db1.ends_with(" c2?                  1"),
            "{text}"
        );
        let db2 = lines.iter().find(|l| l.starts_with("db2 ")).expect(&text);
        assert!(db2.ends_with(" c1                   2"), "{text}");
    }
}
