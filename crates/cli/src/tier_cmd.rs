//! `weft tier list|set|advise`: the tiers and their prices, and the advisor (per volume and
//! extent: IOPS/GB over the last hour, day and week, the tier now, the tier the cost model
//! picks, the monthly cost now and after), through `/api/v1/tiers`. Also the flags of
//! `weft serve` and `weft cnode` that say which tier the store is and how heat is counted.

use std::time::Duration;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::client::{self, seg, ApiClient};
use crate::size::parse_size;

#[derive(Debug, Subcommand)]
pub enum TierCommand {
    /// List the tiers, their prices per GB-month and IOPS-month, and the heat's memory.
    #[command(visible_alias = "ls")]
    List,
    /// Set a tier's prices (the store's own, or one the advisor may move data to).
    Set {
        /// The tier: performance, capacity or a name of your own.
        name: String,
        /// Dollars per GB-month (GB: 2^30 bytes).
        #[arg(long)]
        price_gb: f64,
        /// Dollars per IOPS-month (one I/O per second, sustained over the month).
        #[arg(long)]
        price_iops: f64,
    },
    /// Per volume and extent: IOPS/GB over the last hour, day and week, the tier now, the
    /// tier the cost model max(IOPS x $/IOPS, GB x $/GB) picks, and $/month now and after.
    /// Consecutive extents with the same advice share a row (--json: every extent).
    Advise {
        /// One volume (default: every volume).
        volume: Option<String>,
        /// The window the advice is computed on.
        #[arg(long, default_value = "day", value_parser = ["hour", "day", "week"])]
        window: String,
        /// A move must save this share of the cost now (hysteresis).
        #[arg(long, default_value_t = 0.2)]
        margin: f64,
    },
}

/// The store's tier and the heat, for `weft serve` and `weft cnode`.
#[derive(Debug, Args)]
pub struct TierServeArgs {
    /// The tier of this server's store (performance, capacity or a name).
    #[arg(long, default_value = "performance")]
    pub tier: String,
    /// Its price in dollars per GB-month (default: the tier book's, see `weft tier list`).
    #[arg(long, requires = "price_iops")]
    pub price_gb: Option<f64>,
    /// Its price in dollars per IOPS-month.
    #[arg(long, requires = "price_gb")]
    pub price_iops: Option<f64>,
    /// Heat (reads and writes over the last hour, day, week) is counted per extent of this
    /// size: 432 bytes of memory each (6.75 MiB per TiB of volume at 64M).
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    pub heat_extent_size: u64,
    /// Write the heat to the data dir this often (and at shutdown): a kill -9 loses at most
    /// this much of it.
    #[arg(long, default_value = "60s", value_parser = crate::cluster_cmd::parse_duration)]
    pub heat_persist_interval: Duration,
}

impl TierServeArgs {
    pub fn config(&self) -> weft_server::tiering::TieringConfig {
        weft_server::tiering::TieringConfig {
            tier: self.tier.clone(),
            prices: self
                .price_gb
                .zip(self.price_iops)
                .map(|(price_gb, price_iops)| weft_server::tiering::TierPrices {
                    price_gb,
                    price_iops,
                }),
            extent_bytes: self.heat_extent_size,
            persist_interval: self.heat_persist_interval,
        }
    }
}

pub fn tier(client: &ApiClient, command: TierCommand, json: bool) -> anyhow::Result<()> {
    match command {
        TierCommand::List => {
            let v = client.call("GET", "/tiers", None)?;
            client::show(json, &v, print_tiers)
        }
        TierCommand::Set {
            name,
            price_gb,
            price_iops,
        } => {
            let body = json!({"price_gb": price_gb, "price_iops": price_iops});
            let v = client.call("PUT", &format!("/tiers/{}", seg(&name)), Some(body))?;
            client::show(json, &v, print_tiers)
        }
        TierCommand::Advise {
            volume,
            window,
            margin,
        } => {
            let mut path = format!("/tiers/advice?window={window}&margin={margin}");
            if let Some(v) = volume {
                path.push_str(&format!("&volume={}", seg(&v)));
            }
            let v = client.call("GET", &path, None)?;
            client::show(json, &v, print_advice)
        }
    }
}

/// `weft stats`: the bytes stored on each tier that holds any (`GET /api/v1/tiers`).
pub fn print_stored_by_tier(v: &Value) {
    let on: Vec<String> = v["tiers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let bytes = t["stored_bytes"].as_u64().filter(|b| *b > 0)?;
            Some(format!("{} {}", t["name"].as_str()?, binary(bytes)))
        })
        .collect();
    let text = if on.is_empty() {
        "nothing stored".to_string()
    } else {
        on.join(", ")
    };
    println!("{:<18}{text}", "stored by tier");
}

fn print_tiers(v: &Value) {
    println!(
        "{:<16} {:>10} {:>12} {:>14}  {:<6} POOLS",
        "TIER", "$/GB-MO", "$/IOPS-MO", "CUTOFF IOPS/GB", "LOCAL"
    );
    for t in v["tiers"].as_array().into_iter().flatten() {
        let cutoff = t["intensity_cutoff"]
            .as_f64()
            .map_or_else(|| "-".to_string(), |c| format!("{c:.3}"));
        let pools: Vec<&str> = t["pools"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        println!(
            "{:<16} {:>10} {:>12} {:>14}  {:<6} {}",
            t["name"].as_str().unwrap_or(""),
            t["price_gb"].as_f64().unwrap_or(0.0),
            t["price_iops"].as_f64().unwrap_or(0.0),
            cutoff,
            if t["local"].as_bool() == Some(true) {
                "yes"
            } else {
                ""
            },
            if pools.is_empty() {
                "-".to_string()
            } else {
                pools.join(",")
            }
        );
    }
    println!(
        "heat: {} volumes, {} extents of {}, {} ({} per TiB), written every {}s",
        v["volumes"],
        v["extents"],
        binary(v["extent_bytes"].as_u64().unwrap_or(0)),
        binary(v["memory_bytes"].as_u64().unwrap_or(0)),
        binary(v["memory_bytes_per_tib"].as_u64().unwrap_or(0)),
        v["persist_interval_s"]
    );
}

/// Consecutive extents with the same tiers, summed.
struct Run {
    first: u64,
    last: u64,
    start: u64,
    end: u64,
    data: u64,
    iops: [f64; 3],
    tier_now: String,
    advised: String,
    cost_now: f64,
    cost_after: f64,
}

fn runs(extents: &[Value]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for e in extents {
        let (now, advised) = (
            e["tier_now"].as_str().unwrap_or("").to_string(),
            e["advised_tier"].as_str().unwrap_or("").to_string(),
        );
        let iops = ["hour", "day", "week"].map(|w| e["iops"][w].as_f64().unwrap_or(0.0));
        let index = e["index"].as_u64().unwrap_or(0);
        let start = e["offset_bytes"].as_u64().unwrap_or(0);
        let end = start + e["length_bytes"].as_u64().unwrap_or(0);
        let data = e["data_bytes"].as_u64().unwrap_or(0);
        let (cost_now, cost_after) = (
            e["cost_now"].as_f64().unwrap_or(0.0),
            e["cost_after"].as_f64().unwrap_or(0.0),
        );
        match out.last_mut() {
            Some(r) if r.tier_now == now && r.advised == advised && r.last + 1 == index => {
                r.last = index;
                r.end = end;
                r.data += data;
                for (a, b) in r.iops.iter_mut().zip(iops) {
                    *a += b;
                }
                r.cost_now += cost_now;
                r.cost_after += cost_after;
            }
            _ => out.push(Run {
                first: index,
                last: index,
                start,
                end,
                data,
                iops,
                tier_now: now,
                advised,
                cost_now,
                cost_after,
            }),
        }
    }
    out
}

fn print_advice(v: &Value) {
    println!(
        "advice on the last {} (a move must save {:.0}% of the cost now); $ per month",
        v["window"].as_str().unwrap_or("day"),
        v["margin"].as_f64().unwrap_or(0.0) * 100.0
    );
    println!(
        "{:<12} {:<9} {:<19} {:>9} {:>26} {:<12} {:<12} {:>10} {:>10}",
        "VOLUME",
        "EXTENTS",
        "RANGE",
        "DATA",
        "IOPS/GB HOUR/DAY/WEEK",
        "TIER",
        "ADVISED",
        "$ NOW",
        "$ AFTER"
    );
    for vol in v["volumes"].as_array().into_iter().flatten() {
        let name = vol["volume"].as_str().unwrap_or("");
        let extents = vol["extents"].as_array().cloned().unwrap_or_default();
        for r in runs(&extents) {
            let gib = r.data as f64 / (1u64 << 30) as f64;
            let intensity = r.iops.map(|i| {
                if gib > 0.0 {
                    format!("{:.1}", i / gib)
                } else {
                    "-".into()
                }
            });
            println!(
                "{:<12} {:<9} {:<19} {:>9} {:>26} {:<12} {:<12} {:>10.4} {:>10.4}",
                name,
                format!("{}-{}", r.first, r.last),
                format!("{}-{}", binary(r.start), binary(r.end)),
                binary(r.data),
                intensity.join("/"),
                r.tier_now,
                r.advised,
                r.cost_now,
                r.cost_after
            );
        }
        let by_tier: Vec<String> = vol["data_bytes_by_tier"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(t, b)| format!("{t} {}", binary(b.as_u64().unwrap_or(0))))
            .collect();
        println!(
            "{name}: ${:.4}/month now, ${:.4} after; advised data: {}",
            vol["cost_now"].as_f64().unwrap_or(0.0),
            vol["cost_after"].as_f64().unwrap_or(0.0),
            by_tier.join(", ")
        );
    }
    println!(
        "total: ${:.4}/month now, ${:.4} after",
        v["cost_now"].as_f64().unwrap_or(0.0),
        v["cost_after"].as_f64().unwrap_or(0.0)
    );
}

fn binary(bytes: u64) -> String {
    weft_engine::units::binary_size(bytes)
}
