//! `weft pool create|list|info`: a cluster's pools, their redundancy, tier and prices, and the
//! health of their placement groups, through `/api/v1/pools`.

use clap::Subcommand;
use serde_json::{json, Value};
use weft_ec::Redundancy;

use crate::client::{print_json, seg, show, ApiClient};
use crate::exit_code::Failure;

pub fn parse_redundancy(text: &str) -> Result<Redundancy, String> {
    Redundancy::parse(text).map_err(|e| e.to_string())
}

/// A tier name: 1 to 32 of lowercase letters, digits, - and _.
pub fn parse_tier(text: &str) -> Result<String, String> {
    weft_server::tiering::prices::check_tier_name(text).map(|()| text.to_string())
}

#[derive(Debug, Subcommand)]
pub enum PoolCommand {
    /// Create a pool.
    Create {
        /// The pool's name (volume create --pool names it).
        name: String,
        /// Erasure coding k+m (e.g. 4+2; k up to 21, m up to 3).
        #[arg(long, value_parser = parse_redundancy, conflicts_with_all = ["replicas", "none"])]
        ec: Option<Redundancy>,
        /// Copies (2..4).
        #[arg(long, conflicts_with = "none")]
        replicas: Option<u8>,
        /// No redundancy (one chunk per stripe).
        #[arg(long)]
        none: bool,
        /// Placement groups: stripes are spread over this many d.node sets.
        #[arg(long, default_value_t = 64)]
        pg_count: u32,
        /// Chunks that must be durable before a stripe is (default min(k+1, k+m)); more is
        /// safer, and writes wait while fewer d.nodes of a placement group are up.
        #[arg(long)]
        min_size: Option<u8>,
        /// Storage tier (performance, capacity or a name): the advisor counts its volumes on
        /// it, and once d.nodes say their tier (weft dnode --tier) it is placed on those only.
        #[arg(long, value_parser = parse_tier)]
        tier: Option<String>,
        /// The tier's price in dollars per GB-month (default: the tier book's, weft tier list).
        #[arg(long, requires_all = ["tier", "price_iops"])]
        price_gb: Option<f64>,
        /// The tier's price in dollars per IOPS-month.
        #[arg(long, requires_all = ["tier", "price_gb"])]
        price_iops: Option<f64>,
    },
    /// List pools with the health of their placement groups.
    #[command(visible_alias = "ls")]
    List,
    /// Show one pool.
    Info {
        /// The pool's name.
        name: String,
    },
}

/// One pool on a line: redundancy, tier and prices, PG health.
pub(crate) fn pool_line(p: &Value) -> String {
    let tier = match (
        p["tier"].as_str(),
        p["price_gb"].as_f64(),
        p["price_iops"].as_f64(),
    ) {
        (Some(t), Some(gb), Some(iops)) => format!(" tier {t} (${gb}/GB-mo, ${iops}/IOPS-mo),"),
        (Some(t), _, _) => format!(" tier {t},"),
        (None, _, _) => String::new(),
    };
    format!(
        "{:<12} {:<6}{tier} min_size {}, {:>4} PGs: {} healthy, {} degraded, {} incomplete (map epoch {})",
        p["name"].as_str().unwrap_or("?"),
        p["redundancy"].as_str().unwrap_or("?"),
        p["min_size"],
        p["pg_count"],
        p["pgs_healthy"],
        p["pgs_degraded"],
        p["pgs_incomplete"],
        p["pgmap_epoch"],
    )
}

pub fn pool(client: &ApiClient, command: PoolCommand, json: bool) -> anyhow::Result<()> {
    match command {
        PoolCommand::Create {
            name,
            ec,
            replicas,
            none,
            pg_count,
            min_size,
            tier,
            price_gb,
            price_iops,
        } => {
            let redundancy = match (ec, replicas, none) {
                (Some(r), _, _) => r,
                (None, Some(n), _) => {
                    Redundancy::replicated(n).map_err(|e| anyhow::anyhow!("{e}"))?
                }
                (None, None, true) => Redundancy::None,
                (None, None, false) => {
                    return Err(
                        Failure::Usage("say --ec K+M, --replicas N or --none".into()).into(),
                    )
                }
            };
            let mut body =
                json!({ "name": name, "redundancy": redundancy.to_string(), "pg_count": pg_count });
            if let Some(m) = min_size {
                body["min_size"] = m.into();
            }
            if let Some(t) = &tier {
                body["tier"] = t.as_str().into();
            }
            if let Some((gb, iops)) = price_gb.zip(price_iops) {
                body["price_gb"] = gb.into();
                body["price_iops"] = iops.into();
            }
            let v = client.call("POST", "/pools", Some(body))?;
            show(json, &v, |_| {
                let on = tier
                    .as_ref()
                    .map_or(String::new(), |t| format!(", tier {t}"));
                println!("created pool {name} ({redundancy}, {pg_count} placement groups{on})");
            })?;
        }
        PoolCommand::List => {
            let v = client.call("GET", "/pools", None)?;
            if json {
                return print_json(&v);
            }
            for p in v.as_array().into_iter().flatten() {
                println!("{}", pool_line(p));
            }
        }
        PoolCommand::Info { name } => {
            let v = client.call("GET", &format!("/pools/{}", seg(&name)), None)?;
            if json {
                return print_json(&v);
            }
            println!("{}", pool_line(&v));
        }
    }
    Ok(())
}
