//! The cluster commands: `weft cnode` (a c.node over etcd and d.nodes), `weft dnode` (run a
//! d.node, or `list|info|out|in` through the API) and `weft cluster status|repair` (`weft pool`
//! is `pool_cmd`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Subcommand};
use serde_json::{json, Value};
use weft_ec::Redundancy;

use crate::client::{print_json, seg, show, ApiClient};
use crate::confirm;
use crate::exit_code::Failure;
use crate::pool_cmd::{parse_redundancy, parse_tier, pool_line};
use crate::print::human;
use crate::size::parse_size;

/// Default cluster id: d.nodes and c.nodes of one cluster must agree on it.
pub const CLUSTER_ID_DEFAULT: &str = "weft";

/// How a c.node joins its cluster.
#[derive(Debug, Args)]
pub struct CnodeClusterArgs {
    /// The metadata store: etcd://host:port[,host:port...] (required to run a c.node).
    #[arg(long, env = "WEFT_CLUSTER")]
    pub cluster: Option<String>,
    /// Cluster id; d.nodes of another cluster are refused.
    #[arg(long, default_value = CLUSTER_ID_DEFAULT)]
    pub cluster_id: String,
    /// Pool for volumes created without --pool (created with --redundancy if missing).
    #[arg(long, default_value = "default")]
    pub pool: String,
    /// Redundancy of the pool when it is created: none, xN (copies) or k+m (erasure coding).
    #[arg(long, default_value = "4+2", value_parser = parse_redundancy)]
    pub redundancy: Redundancy,
    /// Placement groups of the pool when it is created.
    #[arg(long, default_value_t = 64)]
    pub pg_count: u32,
    /// A d.node down this long is marked out and its chunks are rebuilt on others.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub out_grace: Duration,
    /// At start, wait this long for k+m d.nodes to register.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub wait_for_dnodes: Duration,
    /// Rebuild at most this many bytes per second.
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub rebuild_rate: u64,
    /// RAM for blocks read from d.nodes, kept by what they are (content fingerprint), so one
    /// cached block serves every volume, snapshot and clone that shares it (0 = no cache).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    pub read_cache_size: u64,
    /// The partner c.node's mirror address (its --mirror-listen): writes are acknowledged
    /// once they are in its memory too, and FLUSH once both journals synced them.
    #[arg(long)]
    pub partner: Option<String>,
    /// Listen here for an owner's write-buffer mirror: when another c.node owns the cluster,
    /// this one waits as its standby and takes over when the owner's lease expires.
    #[arg(long)]
    pub mirror_listen: Option<SocketAddr>,
    /// Listen here for other c.nodes' forwarded requests while this one owns the cluster (a
    /// c.node that does not own it serves its clients through the owner). Default: the NBD
    /// listener's address, a free port.
    #[arg(long)]
    pub forward_listen: Option<SocketAddr>,
    /// The ownership lease: a dead owner's standby takes over this long after its last
    /// renewal (etcd rounds it up to whole seconds, 2 s at least).
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// Take the cluster over even when the last owner stopped with acknowledged writes that
    /// only its own journal holds (they are given up; say so to whoever wrote them).
    #[arg(long)]
    pub force_takeover: bool,
    /// The shard this c.node serves: a set of volumes (with their snapshots and clones) with
    /// its own catalog, journal, ownership lease and partner, on the same d.nodes and etcd as
    /// the others. Each shard has one owner at a time, so several c.nodes own volumes at once;
    /// a volume is served by the c.nodes of its shard. Volume names are unique across shards.
    /// `--shard 0,2`: this c.node's own shard is the first (its partner and standby are that
    /// shard's); it owns the others too, each with an engine of its own whose write buffer
    /// is mirrored to another running c.node (which takes it over should this one die),
    /// unless another live c.node owns them. A c.node also takes back at start the shards
    /// it owned besides its own when it stopped, and adopts shards a drained c.node hands it.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub shard: Vec<u16>,
}

/// `weft dnode`: run a d.node, or manage d.nodes through the API.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct DnodeCommand {
    #[command(subcommand)]
    pub action: Option<DnodeAction>,
    #[command(flatten)]
    pub run: Option<DnodeRunArgs>,
    /// Beside `run`, not in it: clap gives a struct that flattens another an empty group, and
    /// `Option<DnodeRunArgs>` would then always be `None`.
    #[command(flatten)]
    pub daemon: crate::config_file::DaemonArgs,
}

#[derive(Debug, Args)]
pub struct DnodeRunArgs {
    /// The metadata store: etcd://host:port[,host:port...]
    #[arg(long, env = "WEFT_CLUSTER", required = false)]
    pub cluster: String,
    /// Where c.nodes connect (chunk protocol).
    #[arg(long, default_value = "127.0.0.1:10811")]
    pub listen: SocketAddr,
    /// The address c.nodes are told (default: --listen).
    #[arg(long)]
    pub advertise: Option<SocketAddr>,
    /// A data directory per disk (repeat for several).
    #[arg(long = "data", required = true)]
    pub data: Vec<PathBuf>,
    /// Failure domain (rack, room, host): a stripe's chunks go to distinct zones if it can.
    #[arg(long, default_value = "")]
    pub zone: String,
    /// Storage tier of its disks (performance, capacity or a name): a pool created with
    /// --tier is placed only on d.nodes of its tier.
    #[arg(long, default_value = "", value_parser = parse_tier_or_none)]
    pub tier: String,
    /// Cluster id; c.nodes of another cluster are refused.
    #[arg(long, default_value = CLUSTER_ID_DEFAULT)]
    pub cluster_id: String,
    /// Most bytes of chunks per data dir (default: the file system's free space).
    #[arg(long, value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// Registration lease: a d.node silent this long is down.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub lease_ttl: Duration,
    /// Verify every chunk's checksums this often (corrupt chunks are dropped and rebuilt).
    #[arg(long, default_value = "24h", value_parser = parse_duration)]
    pub scrub_interval: Duration,
    /// Read chunks through the page cache instead of O_DIRECT.
    #[arg(long)]
    pub buffered_reads: bool,
}

#[derive(Debug, Subcommand)]
pub enum DnodeAction {
    /// List d.nodes with their state (up, down, out) and space.
    #[command(visible_alias = "ls")]
    List,
    /// Show one d.node.
    Info {
        /// The d.node's id (weft dnode list).
        id: String,
    },
    /// Mark a d.node out: its chunks are rebuilt on others (drain before removing it).
    Out {
        /// The d.node's id (weft dnode list).
        id: String,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
    },
    /// Take a d.node back in.
    In {
        /// The d.node's id (weft dnode list).
        id: String,
    },
}

/// `weft cnode list|ls`: the c.nodes, through the API.
#[derive(Debug, Subcommand)]
pub enum CnodeAction {
    /// List the c.nodes registered in etcd: which one owns each shard (and how many
    /// families), the shards each owns besides its own, its partner, how its write buffer
    /// is protected, their addresses.
    #[command(visible_alias = "ls")]
    List,
    /// Empty a c.node for maintenance (planned switchover): it destages, releases its leases
    /// and exits; its standby takes its own shard over at once, and every shard no standby
    /// mirrors is handed to another running c.node, which adopts it while running. Clients
    /// reconnect to another c.node. Ask the c.node itself (its API). Start it again to make
    /// it a standby or forwarder.
    Drain {
        /// The c.node's id (weft cnode list).
        id: String,
        /// Drain even though some shard would have nobody to take it over (I/O to its
        /// volumes stops until a c.node takes over).
        #[arg(long)]
        force: bool,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
    },
    /// Move a shard to another running c.node while both serve: its owner stops the shard's
    /// engine clean (requests to its volumes pause, none fails) and the other adopts it.
    /// The shard stays there: the spread policy does not move it away until `--unpin`. A
    /// c.node's own shard moves to its standby by `weft cnode drain` instead.
    MoveShard {
        /// The shard (`weft cnode list`, SHARD column).
        shard: u16,
        /// The c.node that should own it.
        #[arg(long, required_unless_present = "unpin", conflicts_with = "unpin")]
        to: Option<String>,
        /// Forget the shard's placement: the spread policy may move it again.
        #[arg(long)]
        unpin: bool,
        /// Wait until the c.node named owns it (at most this long, e.g. 60s).
        #[arg(long, value_parser = parse_duration)]
        wait: Option<Duration>,
    },
}

/// `weft cnode list|drain|move-shard`.
pub fn cnode_admin(client: &ApiClient, action: CnodeAction, json: bool) -> anyhow::Result<()> {
    match action {
        CnodeAction::List => {
            let v = client.call("GET", "/cnodes", None)?;
            if json {
                return print_json(&v);
            }
            println!(
                "{:<18} {:>7} {:<8} {:<6} {:>8}  {:<10} {:<22} {:<22} {:<16} PARTNER / MIRROR OF",
                "ID", "SHARD", "ROLE", "OWNER", "FAMILIES", "BUFFER", "NBD", "ISCSI", "ALUA GROUP"
            );
            for c in v.as_array().into_iter().flatten() {
                let text = |k: &str| c[k].as_str().unwrap_or("-").to_string();
                let id = if c["this"].as_bool() == Some(true) {
                    format!("{} *", text("id"))
                } else {
                    text("id")
                };
                let link = match (c["mirror_of"].as_str(), c["partner"].as_str()) {
                    (Some(of), _) => format!("holds the mirror of {of}"),
                    (None, Some(p)) => format!("mirrors to {p}"),
                    (None, None) => "-".to_string(),
                };
                let alua = match (c["port_group"].as_u64(), c["alua_state"].as_str()) {
                    (Some(g), Some(state)) => {
                        // "2 optimized", "3 non-optimized"
                        format!("{g} {}", state.strip_prefix("active/").unwrap_or(state))
                    }
                    _ => "-".to_string(),
                };
                println!(
                    "{:<18} {:>7} {:<8} {:<6} {:>8}  {:<10} {:<22} {:<22} {:<16} {}",
                    id,
                    shard_column(c),
                    text("role"),
                    if c["owner"].as_bool() == Some(true) {
                        "yes"
                    } else {
                        "no"
                    },
                    c["families"]
                        .as_u64()
                        .map_or_else(|| "-".to_string(), |n| n.to_string()),
                    text("write_buffer"),
                    text("nbd"),
                    text("iscsi"),
                    alua,
                    link
                );
            }
            println!("(* the c.node that answered)");
            Ok(())
        }
        CnodeAction::Drain { id, force, yes } => {
            confirm::confirm(yes, &format!("drain c.node {id}"), || {
                confirm::cnode_drain(client, &id)
            })?;
            let path = format!(
                "/cnodes/{}/drain{}",
                seg(&id),
                if force { "?force=true" } else { "" }
            );
            let v = client.call("POST", &path, None)?;
            show(json, &v, |v| {
                println!("{id}: {}", v["message"].as_str().unwrap_or(""));
            })
        }
        CnodeAction::MoveShard {
            shard, unpin: true, ..
        } => {
            client.call("DELETE", &format!("/shards/{shard}/move"), None)?;
            if !json {
                println!("shard {shard}: unpinned (the spread policy may move it)");
            }
            Ok(())
        }
        CnodeAction::MoveShard {
            shard, to, wait, ..
        } => {
            let to = to.context("--to names the c.node")?;
            let body = json!({ "to": to });
            let v = client.call("POST", &format!("/shards/{shard}/move"), Some(body))?;
            if let Some(limit) = wait {
                wait_for_owner(client, shard, &to, limit)?;
            }
            show(json, &v, |v| {
                println!("shard {shard}: {}", v["message"].as_str().unwrap_or(""));
                if wait.is_some() {
                    println!("shard {shard}: owned by c.node {to} now");
                }
            })
        }
    }
}

/// Wait until `weft cnode list` shows c.node `to` owning `shard`.
fn wait_for_owner(client: &ApiClient, shard: u16, to: &str, limit: Duration) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let v = client.call("GET", "/cnodes", None)?;
        let owns = v.as_array().into_iter().flatten().any(|c| {
            c["id"] == to
                && (c["shards"]
                    .as_array()
                    .is_some_and(|s| s.iter().any(|n| n.as_u64() == Some(u64::from(shard))))
                    || (c["shard"].as_u64() == Some(u64::from(shard)) && c["owner"] == true))
        });
        if owns {
            return Ok(());
        }
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "c.node {to} does not own shard {shard} after {limit:?}: see weft cnode list and the owner's log"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A c.node's shard, then those it owns besides (`0+2,3`).
fn shard_column(c: &serde_json::Value) -> String {
    let own = c["shard"].as_u64().unwrap_or(0).to_string();
    let also: Vec<String> = c["shards"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_u64)
        .map(|s| s.to_string())
        .collect();
    if also.is_empty() {
        own
    } else {
        format!("{own}+{}", also.join(","))
    }
}

#[derive(Debug, Subcommand)]
pub enum ClusterCommand {
    /// d.nodes, pools, placement-group health, rebuild progress.
    Status,
    /// Set the rebuild rate (e.g. 100M per second), or start a repair scan now.
    Repair {
        /// Rebuild at most this many bytes per second (K, M, G suffixes); without it, start
        /// a repair scan now.
        #[arg(long, value_parser = parse_size)]
        rate: Option<u64>,
    },
    /// Verify every chunk on every d.node now; corrupt chunks are rebuilt from their stripes.
    Scrub,
}

/// A tier name, or empty for none.
fn parse_tier_or_none(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Ok(String::new())
    } else {
        parse_tier(text)
    }
}

/// `90s`, `5m`, `2h`, `1d`, or milliseconds with `ms`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    let bad = || format!("{text:?} is not a duration (examples: 500ms, 30s, 5m, 2h)");
    let (number, unit_ms) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1000)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60_000)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3_600_000)
    } else if let Some(n) = t.strip_suffix('d') {
        (n, 86_400_000)
    } else {
        return Err(bad());
    };
    let n: u64 = number.parse().map_err(|_| bad())?;
    Ok(Duration::from_millis(
        n.checked_mul(unit_ms).ok_or_else(bad)?,
    ))
}

/// Run a d.node until SIGINT/SIGTERM.
pub fn run_dnode(args: DnodeRunArgs) -> anyhow::Result<()> {
    let meta = weft_meta::connect_etcd(&args.cluster)
        .with_context(|| format!("connecting to {}", args.cluster))?;
    let mut config = weft_dnode::DnodeConfig::new(args.cluster_id, args.listen, args.data);
    config.advertise = args.advertise;
    config.zone = args.zone;
    config.tier = args.tier;
    config.capacity_bytes = args.capacity;
    config.direct_io = !args.buffered_reads;
    config.lease_ttl = args.lease_ttl;
    config.scrub_interval = Some(args.scrub_interval);
    let dnode = weft_dnode::Dnode::start(config, meta).context("starting the d.node")?;
    println!(
        "dnode {} listening on {}",
        dnode.node_id(),
        dnode.local_addr()
    );
    println!("ready");
    wait_for_signal()?;
    tracing::info!("shutting down");
    dnode.shutdown();
    Ok(())
}

fn wait_for_signal() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        Ok::<_, std::io::Error>(())
    })?;
    Ok(())
}

fn node_line(n: &Value) -> String {
    let down = n["down_for_s"]
        .as_u64()
        .map_or(String::new(), |s| format!(" (for {s}s)"));
    let tier = match n["tier"].as_str() {
        Some(t) if !t.is_empty() => t,
        _ => "-",
    };
    format!(
        "{:<14} {:<5}{:<12} {:<22} {:<10} {:<12} {:>10} / {:<10} {:>5} PG positions",
        n["id"].as_str().unwrap_or("?"),
        n["state"].as_str().unwrap_or("?"),
        down,
        n["addr"].as_str().unwrap_or(""),
        n["zone"].as_str().unwrap_or(""),
        tier,
        human(n["used_bytes"].as_u64().unwrap_or(0)),
        n["capacity_bytes"].as_u64().map_or("-".into(), human),
        n["pg_positions"].as_u64().unwrap_or(0),
    )
}

/// `weft cluster status` for a person.
fn print_status(v: &Value) {
    println!(
        "mode: {}{}",
        v["mode"].as_str().unwrap_or("?"),
        match v["healthy"].as_bool() {
            Some(true) => ", healthy",
            Some(false) => ", NOT healthy",
            None => "",
        }
    );
    if v["mode"].as_str() == Some("recovering") {
        print_recovery(&v["recovery"]);
    }
    if let Some(c) = v.get("compute").filter(|c| c.is_object()) {
        println!("{}", compute_line(c));
    }
    println!("d.nodes:");
    for n in v["nodes"].as_array().into_iter().flatten() {
        println!("  {}", node_line(n));
    }
    println!("pools:");
    for p in v["pools"].as_array().into_iter().flatten() {
        println!("  {}", pool_line(p));
    }
    let r = &v["repair"];
    let (done, total) = (
        r["chunks_rebuilt"].as_u64().unwrap_or(0),
        r["chunks_to_rebuild"].as_u64().unwrap_or(0),
    );
    if r["running"].as_bool() == Some(true) {
        println!(
            "rebuild: {} {done}/{total} chunks, {}/s (limit {}/s), ETA {}s",
            bar(done, total),
            human(r["rate_bytes_per_s"].as_u64().unwrap_or(0)),
            human(r["rate_limit_bytes_per_s"].as_u64().unwrap_or(0)),
            r["eta_s"].as_u64().map_or("?".into(), |s| s.to_string()),
        );
    } else {
        println!(
            "rebuild: idle; {} chunks ({}) rebuilt since start, {} failed in the last scan, limit {}/s",
            r["chunks_rebuilt_total"],
            human(r["bytes_rebuilt_total"].as_u64().unwrap_or(0)),
            r["chunks_failed"],
            human(r["rate_limit_bytes_per_s"].as_u64().unwrap_or(0)),
        );
    }
    println!("degraded reads since start: {}", v["degraded_reads"]);
    for hint in hints(v) {
        println!("hint: {hint}");
    }
}

/// Why the cluster is not healthy, `None` when it is (or is a single process, which has
/// nothing to be degraded).
fn unhealthy(v: &Value) -> Option<String> {
    match v["mode"].as_str() {
        Some("recovering") => return Some("the c.node is still recovering".into()),
        Some("cluster") => {}
        _ => return None,
    }
    if v["healthy"].as_bool() == Some(true) {
        return None;
    }
    let nodes = v["nodes"].as_array().map_or(&[][..], Vec::as_slice);
    let mut why: Vec<String> = ["down", "out"]
        .iter()
        .filter_map(|state| {
            let ids: Vec<&str> = nodes
                .iter()
                .filter(|n| n["state"] == *state)
                .filter_map(|n| n["id"].as_str())
                .collect();
            (!ids.is_empty()).then(|| format!("d.nodes {state}: {}", ids.join(", ")))
        })
        .collect();
    for p in v["pools"].as_array().into_iter().flatten() {
        for (key, what) in [
            ("pgs_degraded", "degraded"),
            ("pgs_incomplete", "incomplete"),
        ] {
            match p[key].as_u64() {
                Some(n) if n > 0 => why.push(format!(
                    "pool {}: {n} PGs {what}",
                    p["name"].as_str().unwrap_or("?")
                )),
                _ => {}
            }
        }
    }
    let unlisted: Vec<&str> = v["repair"]["unlisted"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    if why.is_empty() && !unlisted.is_empty() {
        why.push(format!(
            "the rebuild could not list {} yet (their missing chunks are not known)",
            unlisted.join(", ")
        ));
    }
    if why.is_empty() {
        why.push("the rebuild has not caught up with the last change".into());
    }
    Some(format!("the cluster is NOT healthy: {}", why.join("; ")))
}

/// What to do about what `cluster status` shows: incomplete PGs need more d.nodes in more
/// zones, down d.nodes come back or are marked out.
fn hints(v: &Value) -> Vec<String> {
    let nodes = v["nodes"].as_array().map_or(&[][..], Vec::as_slice);
    let up: Vec<&Value> = nodes.iter().filter(|n| n["state"] == "up").collect();
    let zones: std::collections::BTreeSet<&str> =
        up.iter().filter_map(|n| n["zone"].as_str()).collect();
    let mut out = Vec::new();
    for p in v["pools"].as_array().into_iter().flatten() {
        if p["pgs_incomplete"].as_u64().unwrap_or(0) == 0 {
            continue;
        }
        let redundancy = p["redundancy"].as_str().unwrap_or("?");
        let needed = Redundancy::parse(redundancy).map_or(0, |r| r.total_chunks());
        let missing = usize::from(needed).saturating_sub(up.len());
        out.push(format!(
            "pool {}: {redundancy} puts each PG on {needed} d.nodes (in different zones when \
             it can); {} are up, in {} zone{}: {}",
            p["name"].as_str().unwrap_or("?"),
            up.len(),
            zones.len(),
            if zones.len() == 1 { "" } else { "s" },
            if missing > 0 {
                format!(
                    "add {missing} d.node{} (weft dnode run ... --zone ZONE), in zones of their \
                     own so a zone's loss costs one chunk per stripe",
                    if missing == 1 { "" } else { "s" }
                )
            } else {
                "bring the down or out d.nodes back, or add d.nodes".to_string()
            }
        ));
    }
    for n in nodes.iter().filter(|n| n["state"] == "down") {
        out.push(format!(
            "d.node {} is down: start it again, or `weft dnode out {}` to rebuild its chunks elsewhere",
            n["id"].as_str().unwrap_or("?"),
            n["id"].as_str().unwrap_or("?"),
        ));
    }
    out
}

/// A 30-character progress bar.
fn bar(done: u64, total: u64) -> String {
    let width = 30u64;
    let filled = (done.min(total) * width)
        .checked_div(total)
        .unwrap_or(width);
    format!(
        "[{}{}]",
        "#".repeat(filled as usize),
        ".".repeat((width - filled) as usize)
    )
}

pub fn dnode_admin(client: &ApiClient, action: DnodeAction, json: bool) -> anyhow::Result<()> {
    match action {
        DnodeAction::List => {
            let v = client.call("GET", "/dnodes", None)?;
            if json {
                return print_json(&v);
            }
            for n in v.as_array().into_iter().flatten() {
                println!("{}", node_line(n));
            }
        }
        DnodeAction::Info { id } => {
            let v = client.call("GET", &format!("/dnodes/{}", seg(&id)), None)?;
            if json {
                return print_json(&v);
            }
            println!("{}", node_line(&v));
        }
        DnodeAction::Out { id, yes } => {
            confirm::confirm(yes, &format!("mark d.node {id} out"), || {
                confirm::dnode_out(client, &id)
            })?;
            let v = client.call("POST", &format!("/dnodes/{}/out", seg(&id)), None)?;
            show(json, &v, |_| {
                println!(
                    "{id} is out: its chunks are being rebuilt on other d.nodes (weft cluster status)"
                );
            })?;
        }
        DnodeAction::In { id } => {
            let v = client.call("POST", &format!("/dnodes/{}/in", seg(&id)), None)?;
            show(json, &v, |_| println!("{id} is in"))?;
        }
    }
    Ok(())
}

/// What a recovering c.node waits for (`"mode": "recovering"`).
fn print_recovery(r: &serde_json::Value) {
    if r.is_null() {
        println!("recovery: reading checkpoints and segments");
        return;
    }
    let waiting: Vec<&str> = r["waiting_for"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v.as_str())
        .collect();
    println!(
        "recovery: WAITING for d.nodes {} (attempt {}): nothing is discarded or served until they answer",
        if waiting.is_empty() { "(none listed)".to_string() } else { waiting.join(", ") },
        r["attempts"],
    );
    for s in r["stripes"].as_array().into_iter().flatten() {
        println!(
            "  family {} segment {}: {} of {} chunks readable: {}",
            s["family"],
            s["segment"],
            s["chunks_found"],
            s["chunks_needed"],
            s["why"].as_str().unwrap_or("")
        );
    }
}

pub fn cluster(client: &ApiClient, command: ClusterCommand, json: bool) -> anyhow::Result<()> {
    match command {
        ClusterCommand::Status => {
            let v = client.call("GET", "/cluster", None)?;
            if json {
                print_json(&v)?;
            } else {
                print_status(&v);
            }
            // Scripts and monitoring read the verdict from the exit code (see `unhealthy`).
            if let Some(why) = unhealthy(&v) {
                return Err(Failure::Unhealthy(why).into());
            }
        }
        ClusterCommand::Scrub => {
            let v = client.call("POST", "/cluster/scrub", None)?;
            if json {
                return print_json(&v);
            }
            let corrupt = v["corrupt"].as_array().map_or(0, Vec::len);
            println!(
                "scrubbed {} chunks: {corrupt} corrupt (being rebuilt){}",
                v["checked"],
                match v["failed_stores"].as_array() {
                    Some(f) if !f.is_empty() => format!("; not scrubbed: {f:?}"),
                    _ => String::new(),
                }
            );
        }
        ClusterCommand::Repair { rate } => match rate {
            Some(rate) => {
                let v = client.call(
                    "PUT",
                    "/cluster/repair",
                    Some(json!({ "rate_bytes_per_s": rate })),
                )?;
                show(json, &v, |_| {
                    println!("rebuild rate limit set to {}/s", human(rate));
                })?;
            }
            None => {
                let v = client.call("POST", "/cluster/repair", None)?;
                show(json, &v, |_| {
                    println!("repair scan started (weft cluster status)");
                })?;
            }
        },
    }
    Ok(())
}

/// `c.node OWNER: write buffer mirrored to partner P` and what losing it costs.
fn compute_line(c: &Value) -> String {
    let owner = c["owner"].as_str().unwrap_or("?");
    let buffered = human(c["write_buffer_bytes"].as_u64().unwrap_or(0));
    match c["write_buffer"].as_str() {
        Some("mirrored") => format!(
            "c.node {owner} (owner): write buffer mirrored to partner {} ({buffered} not yet in stripes); losing one c.node loses nothing",
            c["partner"].as_str().unwrap_or("?")
        ),
        _ => format!(
            "c.node {owner} (owner): {}; losing this machine now loses what its journal holds: {buffered} in the write buffer, plus its open segments",
            c["detail"].as_str().unwrap_or("one copy")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(healthy: bool, states: &[(&str, &str)], incomplete: u64) -> Value {
        json!({
            "mode": "cluster",
            "healthy": healthy,
            "nodes": states.iter().map(|(id, state)| json!({
                "id": id, "state": state, "zone": format!("z-{id}"),
            })).collect::<Vec<_>>(),
            "pools": [{ "name": "default", "redundancy": "4+2", "pgs_degraded": 0,
                        "pgs_incomplete": incomplete }],
        })
    }

    #[test]
    fn a_single_process_or_healthy_cluster_is_healthy() {
        assert_eq!(unhealthy(&json!({ "mode": "single-process" })), None);
        assert_eq!(unhealthy(&status(true, &[("a", "up")], 0)), None);
        assert!(unhealthy(&json!({ "mode": "recovering" })).is_some());
    }

    #[test]
    fn an_unhealthy_cluster_says_what_is_missing_and_what_to_do() {
        let v = status(false, &[("a", "up"), ("b", "up"), ("c", "down")], 64);
        assert_eq!(
            unhealthy(&v).unwrap(),
            "the cluster is NOT healthy: d.nodes down: c; pool default: 64 PGs incomplete"
        );
        let hints = hints(&v);
        assert!(
            hints[0].starts_with(
                "pool default: 4+2 puts each PG on 6 d.nodes (in different zones when it can); \
                 2 are up, in 2 zones: add 4 d.nodes"
            ),
            "{hints:?}"
        );
        assert!(
            hints[1].starts_with("d.node c is down: start it again"),
            "{hints:?}"
        );
        // Healthy by its PGs but the rebuild still has work: still not healthy.
        let v = status(false, &[("a", "up")], 0);
        assert!(unhealthy(&v).unwrap().contains("rebuild has not caught up"));
    }
}
