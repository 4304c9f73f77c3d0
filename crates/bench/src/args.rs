//! Command-line surface of `weft bench` and the parsers for its value syntax (sizes, durations,
//! lists, regions). Parsing only: turning arguments into a validated plan is `plan`'s job.

use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};

use crate::size::parse_size;

/// `weft bench`: an ORION-style I/O benchmark against an NBD export, an iSCSI LUN, a file or a
/// block device.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub command: Option<BenchCommand>,

    #[command(flatten)]
    pub run: RunArgs,
}

/// Subcommands besides running a benchmark.
#[derive(Subcommand, Debug)]
pub enum BenchCommand {
    /// Build one self-contained HTML report overlaying several result files.
    Report(ReportArgs),
}

/// `weft bench report a.json b.json -o cmp.html`
#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Result files written by `weft bench` (JSON).
    #[arg(required = true)]
    pub inputs: Vec<std::path::PathBuf>,

    /// Output HTML file.
    #[arg(short = 'o', long = "output", default_value = "weft-bench-report.html")]
    pub output: std::path::PathBuf,

    /// Mean latency threshold for the knee (e.g. 1ms, 500us); default: the one in each file.
    #[arg(long = "latency-threshold", value_parser = parse_duration)]
    pub latency_threshold: Option<Duration>,
}

/// Benchmark modes, in ORION's spirit.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Small random reads at rising queue depth, then large sequential reads.
    Simple,
    /// Small random I/O at rising queue depth for each write percentage (default 0,10,40,100).
    Oltp,
    /// Large sequential I/O at rising queue depth.
    Dss,
    /// Every combination of small queue depth x large queue depth x write percentage.
    Matrix,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Simple => "simple",
            Mode::Oltp => "oltp",
            Mode::Dss => "dss",
            Mode::Matrix => "matrix",
        }
    }
}

/// Arguments of a benchmark run.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// What to measure: nbd://HOST[:PORT]/EXPORT,
    /// iscsi://[USER[%SECRET]@]HOST[:PORT]/TARGET-IQN/LUN[?initiator=IQN], a file, or a block
    /// device. Not with --create-volume.
    #[arg(
        value_name = "TARGET",
        required_unless_present = "create_volume",
        conflicts_with = "create_volume"
    )]
    pub target: Option<String>,

    /// Bench a volume of its own instead of TARGET: `weft bench` creates a thin volume of this
    /// size through the management API (the global --data-dir, --api, --token find it),
    /// benches it over --protocol and deletes it afterwards, also when the run fails or is
    /// interrupted. Writes need no --allow-destructive then.
    #[arg(long = "create-volume", value_name = "SIZE", value_parser = parse_size)]
    pub create_volume: Option<u64>,

    /// With --create-volume: bench the volume over NBD or iSCSI.
    #[arg(
        long = "protocol",
        value_enum,
        default_value = "nbd",
        requires = "create_volume"
    )]
    pub protocol: Protocol,

    /// Workload mode.
    #[arg(short = 'm', long = "mode", value_enum, default_value = "simple")]
    pub mode: Mode,

    /// Small (random) I/O size, e.g. 8k, 4k.
    #[arg(long = "small", value_parser = parse_size, default_value = "8k")]
    pub small_io: u64,

    /// Large (sequential) I/O size, e.g. 1m, 128k.
    #[arg(long = "large", value_parser = parse_size, default_value = "1m")]
    pub large_io: u64,

    /// Outstanding small I/Os per point, comma separated [default: 1,2,4,8,16,32].
    #[arg(long = "qd", value_delimiter = ',', value_parser = parse_count)]
    pub qd: Vec<u32>,

    /// Outstanding large I/Os per point, comma separated [default: 1,2,4,8].
    #[arg(long = "large-qd", value_delimiter = ',', value_parser = parse_count)]
    pub large_qd: Vec<u32>,

    /// Write percentages, comma separated [default: oltp and matrix 0,10,40,100; else 0].
    #[arg(short = 'w', long = "write", value_delimiter = ',', value_parser = parse_percent)]
    pub write_pct: Vec<u8>,

    /// Part of the device to use: START-END, each a percentage or a size (0-40%, 40%-100%, 1g-2g).
    #[arg(long = "region", default_value = "0-100%")]
    pub region: String,

    /// Measured time per point (e.g. 10s, 500ms).
    #[arg(short = 'd', long = "duration", value_parser = parse_duration, default_value = "10s")]
    pub duration: Duration,

    /// Warm-up time per point before measuring (e.g. 2s, 0s).
    #[arg(long = "warmup", value_parser = parse_duration, default_value = "2s")]
    pub warmup: Duration,

    /// Connections (NBD) or sessions (iSCSI) over which each point's outstanding I/Os are
    /// spread. Files and block devices use one thread per outstanding I/O regardless.
    #[arg(long = "workers", default_value_t = 1, value_parser = parse_count)]
    pub workers: u32,

    /// Mean latency under which a load counts as usable; the knee is the highest such load
    /// (e.g. 10ms for disks, 1ms for flash).
    #[arg(long = "latency-threshold", value_parser = parse_duration, default_value = "1ms")]
    pub latency_threshold: Duration,

    /// Output prefix: writes PREFIX.json, PREFIX.csv and PREFIX.html.
    #[arg(short = 'o', long = "output", default_value = "weft-bench")]
    pub output: String,

    /// A name for this run in reports (default: the target).
    #[arg(long = "label")]
    pub label: Option<String>,

    /// Percentage of each 4 KiB block written that compresses away (a repeated filler), as a
    /// database's blocks would; 0 writes incompressible data.
    #[arg(long = "compressible", value_parser = parse_percent, default_value = "0", value_name = "PCT")]
    pub compressible_pct: u8,

    /// Percentage of 4 KiB blocks written that duplicate another block (copies of a pool of
    /// 1024 blocks shared by the run); 0 writes unique blocks.
    #[arg(long = "dedupable", value_parser = parse_percent, default_value = "0", value_name = "PCT")]
    pub dedupable_pct: u8,

    /// Also sample the CPU of this local process (the server under test) per point and per
    /// second, from /proc/PID/stat.
    #[arg(long = "server-pid", value_name = "PID")]
    pub server_pid: Option<u32>,

    /// Seed for offsets and write data (default: random).
    #[arg(long = "seed")]
    pub seed: Option<u64>,

    /// Allow writes to a target that holds data: an NBD export, an iSCSI LUN, a block device
    /// or a file with data in it (they destroy its contents). Modes that write, and the
    /// prefill, need it; a volume of its own (--create-volume) and a file of holes
    /// (`truncate -s 10G bench.img`) do not.
    #[arg(long = "allow-destructive")]
    pub allow_destructive: bool,

    /// Do not fill the unwritten ranges of the measured region before the points that read
    /// (reads of never-written blocks return zeroes without touching a disk, and measure
    /// nothing real). The report still says how much was unwritten.
    #[arg(long = "no-prefill")]
    pub no_prefill: bool,

    /// Set by `weft bench --create-volume`: TARGET is a volume made for this run, so writing
    /// destroys nothing.
    #[arg(skip)]
    pub target_is_scratch: bool,

    /// Do not draw a progress bar.
    #[arg(long = "no-progress")]
    pub no_progress: bool,
}

/// How `--create-volume` reaches its volume.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Nbd,
    Iscsi,
}

/// Parses "10s", "500ms", "250us", "2m", or a bare number of seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let num_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let n: f64 = t[..num_end]
        .parse()
        .map_err(|_| format!("'{s}' is not a duration (use e.g. 10s, 500ms, 1ms)"))?;
    let scale_s = match &t[num_end..] {
        "" | "s" => 1.0,
        "ms" => 1e-3,
        "us" | "µs" => 1e-6,
        "m" | "min" => 60.0,
        other => return Err(format!("unknown duration unit '{other}' in '{s}'")),
    };
    let secs = n * scale_s;
    if !secs.is_finite() || !(0.0..=86_400.0).contains(&secs) {
        return Err(format!("duration '{s}' is out of range (0 to 24h)"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn parse_count(s: &str) -> Result<u32, String> {
    match s.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("'{s}' is not a positive whole number")),
    }
}

fn parse_percent(s: &str) -> Result<u8, String> {
    match s.trim().trim_end_matches('%').parse::<u8>() {
        Ok(n) if n <= 100 => Ok(n),
        _ => Err(format!("'{s}' is not a percentage from 0 to 100")),
    }
}

/// One end of a `--region`: a share of the device or an absolute byte offset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum RegionBound {
    Percent(f64),
    Bytes(u64),
}

/// Parses "0-40%", "40%-100%", "1g-2g", "0-50%" into two bounds. A trailing '%' on the end bound
/// applies to a bare start number too ("0-40%" means 0% to 40%).
pub(crate) fn parse_region(s: &str) -> Result<(RegionBound, RegionBound), String> {
    let (a, b) = s
        .split_once('-')
        .ok_or_else(|| format!("region '{s}' must be START-END, e.g. 0-40% or 1g-2g"))?;
    let end_is_pct = b.trim().ends_with('%');
    let bound = |x: &str, pct_default: bool| -> Result<RegionBound, String> {
        let x = x.trim();
        if let Some(p) = x.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| format!("bad percentage '{x}'"))?;
            return Ok(RegionBound::Percent(v));
        }
        if pct_default && x.chars().all(|c| c.is_ascii_digit() || c == '.') && !x.is_empty() {
            let v: f64 = x.parse().map_err(|_| format!("bad percentage '{x}'"))?;
            return Ok(RegionBound::Percent(v));
        }
        parse_size(x).map(RegionBound::Bytes)
    };
    Ok((bound(a, end_is_pct)?, bound(b, false)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_accept_common_units() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn regions_parse_percent_and_bytes() {
        assert_eq!(
            parse_region("0-40%"),
            Ok((RegionBound::Percent(0.0), RegionBound::Percent(40.0)))
        );
        assert_eq!(
            parse_region("40%-100%"),
            Ok((RegionBound::Percent(40.0), RegionBound::Percent(100.0)))
        );
        assert_eq!(
            parse_region("1g-2g"),
            Ok((RegionBound::Bytes(1 << 30), RegionBound::Bytes(2 << 30)))
        );
        assert!(parse_region("40%").is_err());
    }

    #[test]
    fn percents_are_bounded() {
        assert_eq!(parse_percent("40"), Ok(40));
        assert_eq!(parse_percent("100%"), Ok(100));
        assert!(parse_percent("101").is_err());
    }
}
