//! `weft volume qos NAME [limits]` (change a volume's QoS live; `--clear` removes it),
//! `weft group qos GROUP [limits]` (the same on limits a consistency group's members share),
//! and the QoS flags `weft volume create` shares: `--qos-class`, `--iops-max`,
//! `--latency-target`... The fields given change; the others keep their values unless
//! `--replace`.

use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::client::{seg, show, ApiClient};

/// Limits as flags. IOPS count 4 KiB units (a 64 KiB I/O is 16); MB/s are 10^6 bytes.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct QosFlags {
    /// A class whose values apply where no field is given: gold, silver or bronze (README.md,
    /// "Quality of service", lists them).
    #[arg(long = "qos-class", value_name = "CLASS")]
    pub class: Option<String>,
    /// IOPS limit, reads and writes together (4 KiB units per second).
    #[arg(long)]
    pub iops_max: Option<u64>,
    /// IOPS limit of reads alone.
    #[arg(long)]
    pub read_iops_max: Option<u64>,
    /// IOPS limit of writes alone.
    #[arg(long)]
    pub write_iops_max: Option<u64>,
    /// I/O units an idle volume may run above its IOPS limit at once (default: 0.1 s worth).
    #[arg(long)]
    pub iops_burst: Option<u64>,
    /// Throughput limit, reads and writes together, in MB/s.
    #[arg(long)]
    pub mbps_max: Option<u64>,
    /// Read throughput limit in MB/s (with or instead of --mbps-max).
    #[arg(long)]
    pub read_mbps_max: Option<u64>,
    /// Write throughput limit in MB/s (with or instead of --mbps-max).
    #[arg(long)]
    pub write_mbps_max: Option<u64>,
    /// MB an idle volume may move above its throughput limit at once (default: 0.1 s worth).
    #[arg(long)]
    pub mb_burst: Option<u64>,
    /// The minimum share: another volume's latency target never throttles this one below
    /// this many IOPS.
    #[arg(long)]
    pub iops_min: Option<u64>,
    /// The p99 latency to hold (`2ms`, `500us`): when missed, volumes with no target or a
    /// looser one are throttled.
    #[arg(long, value_parser = parse_latency)]
    pub latency_target: Option<Duration>,
}

impl QosFlags {
    /// The API's settings object of the flags given (`None`: no flag given).
    pub fn settings(&self) -> Option<Value> {
        let mut m = Map::new();
        let mut put = |key: &str, v: Option<Value>| {
            if let Some(v) = v {
                m.insert(key.into(), v);
            }
        };
        let mb = |v: Option<u64>| v.map(|v| json!(v.saturating_mul(1_000_000)));
        put("class", self.class.clone().map(Value::from));
        put("iops_max", self.iops_max.map(Value::from));
        put("read_iops_max", self.read_iops_max.map(Value::from));
        put("write_iops_max", self.write_iops_max.map(Value::from));
        put("iops_burst", self.iops_burst.map(Value::from));
        put("bytes_per_s_max", mb(self.mbps_max));
        put("read_bytes_per_s_max", mb(self.read_mbps_max));
        put("write_bytes_per_s_max", mb(self.write_mbps_max));
        put("bytes_burst", mb(self.mb_burst));
        put("iops_min", self.iops_min.map(Value::from));
        put(
            "latency_target_us",
            self.latency_target
                .map(|d| json!(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))),
        );
        (!m.is_empty()).then_some(Value::Object(m))
    }
}

/// `weft volume qos`.
#[derive(Debug, Clone, clap::Args)]
pub struct QosArgs {
    /// The volume's name.
    pub name: String,
    #[command(flatten)]
    pub change: QosChange,
}

/// `weft group qos`.
#[derive(Debug, Clone, clap::Args)]
pub struct GroupQosArgs {
    /// The consistency group's name.
    pub name: String,
    #[command(flatten)]
    pub change: QosChange,
}

/// What to change: the flags given, `--clear` or `--replace`; nothing: show.
#[derive(Debug, Clone, clap::Args)]
pub struct QosChange {
    #[command(flatten)]
    pub flags: QosFlags,
    /// Remove every limit and target.
    #[arg(long, conflicts_with = "replace")]
    pub clear: bool,
    /// Set exactly the fields given (the others are removed) instead of changing only them.
    #[arg(long)]
    pub replace: bool,
}

pub fn run(client: &ApiClient, args: QosArgs, json: bool) -> anyhow::Result<()> {
    let path = format!("/volumes/{}/qos", seg(&args.name));
    let v = change(client, &path, &args.change)?;
    show(json, &v, details)
}

/// `weft group qos`: the same settings, on limits the group's members share.
pub fn run_group(client: &ApiClient, args: GroupQosArgs, json: bool) -> anyhow::Result<()> {
    let path = format!("/groups/{}/qos", seg(&args.name));
    let v = change(client, &path, &args.change)?;
    show(json, &v, group_details)
}

/// Show, clear, or change (read, overlay, write) the settings at `path`.
fn change(client: &ApiClient, path: &str, args: &QosChange) -> anyhow::Result<Value> {
    Ok(match (args.clear, args.flags.settings()) {
        (true, _) => client.call("DELETE", path, None)?,
        (false, None) => client.call("GET", path, None)?,
        (false, Some(given)) => {
            let mut settings = if args.replace {
                Map::new()
            } else {
                client.call("GET", path, None)?["settings"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            };
            settings.extend(given.as_object().cloned().unwrap_or_default());
            client.call("PUT", path, Some(Value::Object(settings)))?
        }
    })
}

/// `2ms`, `500us`, `1.5ms`, `0.002s`.
pub fn parse_latency(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a latency (examples: 2ms, 500us, 1.5ms)");
    let (number, unit_us) = if let Some(n) = t.strip_suffix("us").or(t.strip_suffix("µs")) {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1_000.0)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1_000_000.0)
    } else {
        return Err(bad());
    };
    let n: f64 = number.trim().parse().map_err(|_| bad())?;
    let us = n * unit_us;
    if !(1.0..=60_000_000.0).contains(&us) {
        return Err(format!("{text:?}: a latency target is between 1us and 60s"));
    }
    Ok(Duration::from_micros(us.round() as u64))
}

/// One line of a volume's QoS settings (`-` for none), for `volume info` and `volume qos`.
pub fn describe(settings: &Value) -> String {
    let Some(m) = settings.as_object().filter(|m| !m.is_empty()) else {
        return "-".into();
    };
    let n = |k: &str| m.get(k).and_then(Value::as_u64);
    let mut parts = Vec::new();
    if let Some(c) = m.get("class").and_then(Value::as_str) {
        parts.push(format!("class {c}"));
    }
    for (key, label) in [
        ("iops_max", "IOPS"),
        ("read_iops_max", "read IOPS"),
        ("write_iops_max", "write IOPS"),
    ] {
        if let Some(v) = n(key) {
            parts.push(format!("{label} <= {v}"));
        }
    }
    if let Some(v) = n("iops_burst") {
        parts.push(format!("burst {v}"));
    }
    for (key, label) in [
        ("bytes_per_s_max", "MB/s"),
        ("read_bytes_per_s_max", "read MB/s"),
        ("write_bytes_per_s_max", "write MB/s"),
    ] {
        if let Some(v) = n(key) {
            parts.push(format!("{label} <= {}", v as f64 / 1e6));
        }
    }
    if let Some(v) = n("iops_min") {
        parts.push(format!("min IOPS {v}"));
    }
    if let Some(v) = n("latency_target_us") {
        parts.push(format!("p99 target {}", latency(v)));
    }
    parts.join(", ")
}

fn latency(us: u64) -> String {
    if us >= 1000 && us.is_multiple_of(1000) {
        format!("{}ms", us / 1000)
    } else if us >= 1000 {
        format!("{:.1}ms", us as f64 / 1000.0)
    } else {
        format!("{us}us")
    }
}

fn group_details(v: &Value) {
    println!("group:      {}", v["group"].as_str().unwrap_or(""));
    println!("set:        {}", describe(&v["settings"]));
    println!("in force:   {}", describe(&v["effective"]));
    println!(
        "throttled:  {} member I/Os by the group's limits, {:.3} s waited",
        v["throttled_ios"].as_u64().unwrap_or(0),
        v["throttled_wait_seconds"].as_f64().unwrap_or(0.0)
    );
}

fn details(v: &Value) {
    println!("volume:     {}", v["volume"].as_str().unwrap_or(""));
    println!("set:        {}", describe(&v["settings"]));
    println!("in force:   {}", describe(&v["effective"]));
    println!(
        "throttled:  {} I/Os, {:.3} s waited",
        v["throttled_ios"].as_u64().unwrap_or(0),
        v["throttled_wait_seconds"].as_f64().unwrap_or(0.0)
    );
    if let Some(p99) = v["latency_p99_us"].as_f64() {
        println!("p99:        {p99:.0} us (last 100 ms window, as the target counts it)");
    }
    if let Some(cap) = v["latency_cap_iops"].as_f64() {
        println!("capped:     {cap:.0} IOPS now, for another volume's latency target");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_parse() {
        assert_eq!(parse_latency("2ms"), Ok(Duration::from_millis(2)));
        assert_eq!(parse_latency("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(parse_latency("1.5ms"), Ok(Duration::from_micros(1500)));
        assert!(parse_latency("2").is_err());
        assert!(parse_latency("0ms").is_err());
    }

    #[test]
    fn flags_become_settings() {
        let flags = QosFlags {
            iops_max: Some(20_000),
            mbps_max: Some(100),
            latency_target: Some(Duration::from_millis(1)),
            ..QosFlags::default()
        };
        assert_eq!(
            flags.settings(),
            Some(
                json!({"iops_max": 20000, "bytes_per_s_max": 100_000_000u64, "latency_target_us": 1000})
            )
        );
        assert_eq!(QosFlags::default().settings(), None);
        assert_eq!(
            describe(&flags.settings().unwrap()),
            "IOPS <= 20000, MB/s <= 100, p99 target 1ms"
        );
    }
}
