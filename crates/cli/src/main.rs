//! `weft`: the one binary. `serve` runs the single-process datastore; the other commands talk
//! to its management API (volumes, snapshots, clones, stats); `bench` runs the ORION-style load
//! generator. Every client command prints JSON with `--json`, and fails with one of the exit
//! codes in `exit_code`.

mod bench_cmd;
mod client;
mod cluster_cmd;
mod config_file;
mod confirm;
mod exit_code;
mod generate;
mod group_cmd;
mod host_cmd;
mod logging;
mod pipe_exit;
mod pool_cmd;
mod print;
mod qos_cmd;
mod schedule_cmd;
mod size;
mod status_cmd;
mod tier_cmd;
mod top;
mod volume_cmd;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use weft_engine::EngineConfig;
use weft_server::serve::{Backend, ClusterConfig, ServeConfig};

use crate::client::ApiClient;
use crate::size::parse_size;

#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    about = "weft: block storage for databases, served over NBD and iSCSI",
    after_help = exit_code::HELP_TABLE
)]
struct Cli {
    #[command(flatten)]
    global: GlobalArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Args)]
struct GlobalArgs {
    /// Data directory of the server (where the CLI finds serve.json and api-token).
    #[arg(
        long,
        global = true,
        env = "WEFT_DATA_DIR",
        default_value = "./weft-data"
    )]
    data_dir: PathBuf,
    /// Management API base URL, e.g. http://127.0.0.1:10810 (default: from DATA_DIR/serve.json).
    #[arg(long, global = true, env = "WEFT_API")]
    api: Option<String>,
    /// API bearer token (default: DATA_DIR/api-token).
    #[arg(long, global = true, env = "WEFT_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Client commands: print the API's answer as JSON (a small JSON object when the API
    /// answers nothing, e.g. a delete), for scripts.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)] // parsed once per run: its size costs nothing
enum Command {
    /// Run the single-process datastore (c.node + local d.node) and serve volumes over NBD and iSCSI.
    Serve(ServeArgs),
    /// Run a c.node of a cluster (--cluster): NBD, iSCSI and the API over the d.nodes
    /// registered in etcd; or list and drain c.nodes through the API.
    Cnode(CnodeArgs),
    /// Run a d.node (--cluster, --listen, --data), or list|info|out|in through the API.
    Dnode(cluster_cmd::DnodeCommand),
    /// Manage pools (redundancy: none, copies or erasure coding).
    #[command(subcommand)]
    Pool(pool_cmd::PoolCommand),
    /// Tiers and their prices, and the advisor: which extents earn flash (IOPS/GB).
    #[command(subcommand)]
    Tier(tier_cmd::TierCommand),
    /// Cluster status and rebuild.
    #[command(subcommand)]
    Cluster(cluster_cmd::ClusterCommand),
    /// Manage volumes.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Manage hosts: the database servers that see volumes mapped to them (iSCSI, NBD).
    #[command(subcommand)]
    Host(host_cmd::HostCommand),
    /// Manage snapshots: read-only, crash-consistent images of a volume, exported over NBD.
    #[command(subcommand)]
    Snapshot(SnapshotCommand),
    /// Create clones: writable thin volumes that start as a snapshot.
    #[command(subcommand)]
    Clone(CloneCommand),
    /// Manage consistency groups: volumes snapshotted, cloned, refreshed and rolled back at
    /// one crash-consistent point (a database's data and WAL volumes).
    #[command(subcommand)]
    Group(group_cmd::GroupCommand),
    /// One screen: server, addresses, volumes, space, data reduction, backlog, cluster.
    Status,
    /// Datastore statistics: data reduction, space, disk bytes written per host byte, GC
    /// amplification and the GC's runs, segments reclaimed, bytes moved and freed.
    Stats,
    /// Per-volume IOPS, MB/s and latency, refreshed every second (like iostat); with
    /// --json, one sample of the per-volume statistics.
    #[command(after_help = top::COLUMNS_HELP)]
    Top(top::TopArgs),
    /// Wait until every acknowledged write is destaged into sealed segments.
    Sync,
    /// Run garbage collection now.
    Gc,
    /// Write a metadata checkpoint now.
    Checkpoint,
    /// ORION-style I/O benchmark against an NBD export, an iSCSI LUN, a file or a block
    /// device, or a volume of its own (--create-volume SIZE).
    Bench(weft_bench::BenchArgs),
    /// Print a shell completion script (e.g. `weft completions bash > /etc/bash_completion.d/weft`).
    Completions(generate::CompletionsArgs),
    /// Write man pages, one per command (weft.1, weft-volume-create.1, ...).
    Man(generate::ManArgs),
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
struct CnodeArgs {
    #[command(subcommand)]
    action: Option<cluster_cmd::CnodeAction>,
    #[command(flatten)]
    daemon: config_file::DaemonArgs,
    #[command(flatten)]
    cluster: cluster_cmd::CnodeClusterArgs,
    #[command(flatten)]
    engine: EngineArgs,
}

#[derive(Debug, Args)]
struct ServeArgs {
    #[command(flatten)]
    daemon: config_file::DaemonArgs,
    #[command(flatten)]
    engine: EngineArgs,
    /// Limit the bytes the local chunk store may use (default: the file system's free space).
    #[arg(long, value_parser = parse_size)]
    capacity: Option<u64>,
    /// Read chunks through the page cache instead of O_DIRECT.
    #[arg(long)]
    buffered_reads: bool,
}

/// Settings of the c.node engine and its listeners.
#[derive(Debug, Args)]
struct EngineArgs {
    /// NBD listen address.
    #[arg(long, default_value = "127.0.0.1:10809")]
    nbd_listen: SocketAddr,
    /// iSCSI portal addresses, comma-separated: each is a path to every target (multipath);
    /// `off`: no iSCSI. Hosts log in to the array target and see the volumes mapped to them;
    /// every volume and snapshot is also a target of its own, `iqn.2026-11.dev.weft:<name>`
    /// (LUN 0), for its hosts, and while it is mapped to none, for local initiators.
    #[arg(long, default_value = "127.0.0.1:3260", value_parser = parse_listen)]
    iscsi_listen: Listen,
    /// Off loopback, serve volumes mapped to no host to every initiator that reaches a
    /// portal (without it, initiators there see only what is mapped to their host).
    #[arg(long)]
    iscsi_open_network: bool,
    /// Ping an idle iSCSI session with a NOP-In after this long; a session that then stays
    /// silent twice as long is closed (a vanished host frees its tasks).
    #[arg(long, default_value = "15s", value_parser = cluster_cmd::parse_duration)]
    iscsi_nop_interval: std::time::Duration,
    /// Off loopback, serve volumes mapped to no host to every NBD client that reaches the
    /// listener (without it, clients there see only what is mapped to their host's
    /// addresses).
    #[arg(long)]
    nbd_open_network: bool,
    /// NBD over TLS: the server's certificate chain (PEM). Clients must then switch to TLS
    /// (STARTTLS; `nbds://` URIs) before choosing an export, unless --nbd-tls-optional.
    #[arg(long, value_name = "PEM", requires = "nbd_tls_key")]
    nbd_tls_cert: Option<PathBuf>,
    /// The private key of --nbd-tls-cert (PEM).
    #[arg(long, value_name = "PEM", requires = "nbd_tls_cert")]
    nbd_tls_key: Option<PathBuf>,
    /// CA certificates (PEM) that sign client certificates: every TLS client must present
    /// one, and its CN or DNS names identify the host (weft host create --tls-name).
    #[arg(long, value_name = "PEM", requires = "nbd_tls_cert")]
    nbd_tls_client_ca: Option<PathBuf>,
    /// Offer TLS without requiring it.
    #[arg(long, requires = "nbd_tls_cert")]
    nbd_tls_optional: bool,
    /// Management API listen address.
    #[arg(long, default_value = "127.0.0.1:10810")]
    api_listen: SocketAddr,
    /// Prometheus `/metrics` listen address, served without a token (keep it on loopback or
    /// a monitoring network); `off`: no metrics listener.
    #[arg(long, default_value = "127.0.0.1:10811", value_parser = parse_listen)]
    metrics_listen: Listen,
    /// Do not count and time I/O per volume (no live statistics, no per-volume metrics): only
    /// to measure what they cost.
    #[arg(long)]
    no_io_stats: bool,
    /// Name of the volume created at first start.
    #[arg(long, default_value = "vol0")]
    default_volume: String,
    /// Size of the default volume (K, M, G, T suffixes, binary units).
    #[arg(long, default_value = "10G", value_parser = parse_size)]
    default_volume_size: u64,
    /// Seal a log segment when its data reaches this size.
    #[arg(long, default_value = "8M", value_parser = parse_size)]
    segment_size: u64,
    /// Writers wait when this much acknowledged data awaits destage.
    #[arg(long, default_value = "512M", value_parser = parse_size)]
    write_buffer_size: u64,
    /// Take a checkpoint after this many bytes of sealed segments.
    #[arg(long, default_value = "4G", value_parser = parse_size)]
    checkpoint_every: u64,
    /// Size of each (zero-filled, preallocated) journal file.
    #[arg(long, default_value = "64M", value_parser = parse_size)]
    journal_file_size: u64,
    /// Writes of at least this size skip the journal's data: they are written once, into a
    /// stripe, and acknowledged once it is written (durable with FUA or at the next FLUSH;
    /// 0 = journal every write).
    #[arg(long, default_value = "256K", value_parser = parse_size)]
    write_through_min_size: u64,
    /// Threads that reduce destaged blocks (zero check, BLAKE3 fingerprint, lz4, checksum),
    /// the destager included (0 = one per core).
    #[arg(long, default_value_t = 0)]
    reduction_threads: usize,
    /// Tests only: the snapshot scheduler's clock runs this many times as fast as the wall
    /// clock (3600: a scheduled hour passes in a second; snapshot names carry its time).
    #[arg(long, default_value_t = 1, hide = true)]
    test_clock_scale: u64,
    #[command(flatten)]
    tiering: tier_cmd::TierServeArgs,
}

#[derive(Debug, Subcommand)]
enum VolumeCommand {
    /// Create a thin volume.
    Create {
        /// The new volume's name (also its NBD export name).
        name: String,
        /// Size (K, M, G, T suffixes, binary units); thin: nothing is allocated.
        #[arg(long, value_parser = parse_size)]
        size: u64,
        /// Pool of a cluster (default: the c.node's pool).
        #[arg(long)]
        pool: Option<String>,
        /// Logical block (sector) size hosts see: 512 (512e, the default) or 4096 (4Kn).
        /// Writes smaller than 4 KiB are read-modify-writes.
        #[arg(long, value_parser = parse_block_size)]
        block_size: Option<u32>,
        /// The shard to create it in, in a cluster of several (default: the shard of the
        /// c.node asked); the request goes to that shard's owner.
        #[arg(long)]
        shard: Option<u16>,
        #[command(flatten)]
        qos: qos_cmd::QosFlags,
    },
    /// Show or change a volume's quality of service, live: IOPS and MB/s limits with a
    /// burst, a minimum share, a p99 latency target, or a class (gold, silver, bronze).
    Qos(qos_cmd::QosArgs),
    /// List volumes.
    #[command(visible_alias = "ls")]
    List,
    /// Show one volume, with the clients that have it open.
    Info {
        /// The volume's name.
        name: String,
    },
    /// List the clients that have a volume (or a snapshot, VOLUME@SNAPSHOT) open now: NBD
    /// connections and iSCSI sessions, with their host, since when, and their reads and
    /// writes (as `rbd status` lists watchers).
    Sessions {
        /// The volume's (or snapshot's) name.
        name: String,
    },
    /// Rename a volume: its snapshots (OLD@x become NEW@x), host LUN maps, clones' origins
    /// and snapshot schedule follow. Refused while clients have it open, unless --force.
    Rename {
        /// The volume's name.
        name: String,
        /// Its new name.
        new_name: String,
        /// Go on while clients have the volume or its snapshots open: they are disconnected
        /// and reconnect by the new name.
        #[arg(long)]
        force: bool,
    },
    /// Grow a volume.
    Resize {
        /// The volume's name.
        name: String,
        /// The new size, larger than the current one (K, M, G, T suffixes).
        #[arg(long, value_parser = parse_size)]
        size: u64,
    },
    /// Delete a volume and its data (asks on a terminal; --yes in scripts). Refused while
    /// clients have it open, unless --force.
    #[command(visible_alias = "rm")]
    Delete {
        /// The volume's name.
        name: String,
        /// Also delete its snapshots (those clones use stay hidden until the clones go).
        #[arg(long)]
        with_snapshots: bool,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
        /// Go on while clients have the volume (or a snapshot deleted with it) open: they are
        /// disconnected.
        #[arg(long)]
        force: bool,
    },
    /// Discard a volume's contents and make it read as a snapshot of its family (asks on a
    /// terminal; --yes in scripts). Refused while clients have it open, unless --force.
    Refresh {
        /// The volume's name.
        name: String,
        /// Any snapshot of the volume's family (its origin's volume, sibling clones).
        #[arg(long = "to", value_name = "SNAPSHOT")]
        snapshot: String,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
        /// Go on while clients have the volume open: they are disconnected.
        #[arg(long)]
        force: bool,
    },
    /// Discard a volume's changes since one of its own snapshots (asks on a terminal; --yes
    /// in scripts). Refused while clients have it open, unless --force.
    Rollback {
        /// The volume's name.
        name: String,
        /// A snapshot taken of this volume.
        #[arg(long = "to", value_name = "SNAPSHOT")]
        snapshot: String,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
        /// Go on while clients have the volume open: they are disconnected.
        #[arg(long)]
        force: bool,
    },
    /// Let a host see a volume or snapshot, as a LUN of the array target (and over NBD from
    /// its addresses). A mapped volume is served to its hosts only.
    Map(host_cmd::MapArgs),
    /// Take a volume or snapshot away from a host.
    Unmap(host_cmd::UnmapArgs),
}

#[derive(Debug, Subcommand)]
enum SnapshotCommand {
    /// Snapshot a volume (every write acknowledged before this command is in it):
    /// `snapshot create pgdata monday`, or in one argument as zfs and rbd take it,
    /// `snapshot create pgdata@monday`.
    Create {
        /// The volume to snapshot, or VOLUME@SNAPSHOT.
        #[arg(value_name = "VOLUME[@SNAPSHOT]")]
        volume: String,
        /// The new snapshot's name (also its read-only NBD export name); not with VOLUME@SNAPSHOT.
        name: Option<String>,
    },
    /// List snapshots, of all volumes or of one.
    #[command(visible_alias = "ls")]
    List {
        /// Only the snapshots of this volume.
        volume: Option<String>,
    },
    /// Show one snapshot.
    Info {
        /// The snapshot's name.
        name: String,
    },
    /// Snapshot a volume on a schedule and keep a number of them (as sanoid does):
    /// `--every 1h --keep 24 --daily 7` keeps a day of hourly snapshots and the first one of
    /// each of the last seven days. Snapshots are named VOLUME@auto-YYYYMMDD-HHMMSS (UTC).
    Schedule(schedule_cmd::ScheduleArgs),
    /// List snapshot schedules with their next run.
    Schedules,
    /// Delete a snapshot (asks on a terminal; --yes in scripts).
    #[command(visible_alias = "rm")]
    Delete {
        /// The snapshot's name.
        name: String,
        /// Delete it even if clones use it: it is hidden and its data stays until they go.
        #[arg(long)]
        keep_hidden: bool,
        /// Do not ask (required off a terminal).
        #[arg(short, long)]
        yes: bool,
    },
}

#[derive(Debug, Subcommand)]
enum CloneCommand {
    /// Create a writable volume from a snapshot (metadata only: no data is copied).
    Create {
        /// The snapshot the clone starts as.
        snapshot: String,
        /// The new volume's name (of a group snapshot GROUP@SNAPSHOT: the clone group's).
        #[arg(value_name = "NEWVOLUME")]
        name: String,
        /// Of a group snapshot: MEMBER=NAME names a member's clone (default NEWGROUP-MEMBER).
        #[arg(long, value_delimiter = ',')]
        map: Vec<String>,
    },
}

fn main() -> ExitCode {
    // `Cli::parse()`, completed with the values of a daemon's --config file (config_file.rs).
    let cli: Cli = config_file::parse();
    let result = match cli.command {
        Command::Serve(args) => serve(&cli.global, args),
        Command::Cnode(args) if args.action.is_none() => cnode(&cli.global, args),
        Command::Dnode(cluster_cmd::DnodeCommand {
            action: None,
            run: Some(args),
            daemon,
        }) => {
            logging::init_logging(daemon.log_format);
            cluster_cmd::run_dnode(args)
        }
        Command::Bench(args) if args.command.is_none() && args.run.create_volume.is_some() => {
            let g = &cli.global;
            let client = ApiClient::discover(&g.data_dir, g.api.as_deref(), g.token.as_deref());
            return ExitCode::from(clamp_exit(bench_cmd::on_new_volume(client, args)));
        }
        Command::Bench(args) => {
            return ExitCode::from(clamp_exit(weft_bench::main_exit_code(args)))
        }
        Command::Completions(args) => {
            pipe_exit::end_on_closed_stdout();
            generate::completions(&args)
        }
        Command::Man(args) => generate::man(&args),
        command => client_command(&cli.global, command),
    };
    match result {
        Ok(()) => ExitCode::from(exit_code::OK),
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(exit_code::of(&e))
        }
    }
}

/// The commands that talk to the management API.
fn client_command(global: &GlobalArgs, command: Command) -> anyhow::Result<()> {
    pipe_exit::end_on_closed_stdout();
    let json = global.json;
    if let Command::Dnode(cluster_cmd::DnodeCommand { action: None, .. }) = command {
        return Err(exit_code::Failure::Usage(
            "weft dnode: give --cluster, --listen and --data to run one, or list|info|out|in"
                .into(),
        )
        .into());
    }
    let discovered = ApiClient::discover(
        &global.data_dir,
        global.api.as_deref(),
        global.token.as_deref(),
    );
    if let Command::Status = command {
        return status_cmd::status(&global.data_dir, discovered, json);
    }
    let client = discovered?;
    match command {
        Command::Dnode(cluster_cmd::DnodeCommand {
            action: Some(action),
            ..
        }) => cluster_cmd::dnode_admin(&client, action, json),
        Command::Cnode(CnodeArgs {
            action: Some(action),
            ..
        }) => cluster_cmd::cnode_admin(&client, action, json),
        Command::Pool(c) => pool_cmd::pool(&client, c, json),
        Command::Tier(c) => tier_cmd::tier(&client, c, json),
        Command::Host(c) => host_cmd::host(&client, c, json),
        Command::Volume(VolumeCommand::Map(a)) => host_cmd::map(&client, a, json),
        Command::Volume(VolumeCommand::Qos(a)) => qos_cmd::run(&client, a, json),
        Command::Snapshot(SnapshotCommand::Schedule(a)) => schedule_cmd::set(&client, a, json),
        Command::Snapshot(SnapshotCommand::Schedules) => schedule_cmd::list(&client, json),
        Command::Volume(VolumeCommand::Unmap(a)) => host_cmd::unmap(&client, a, json),
        Command::Cluster(c) => cluster_cmd::cluster(&client, c, json),
        Command::Top(args) if json => {
            client::print_json(&client.call("GET", top::stats_path(&args), None)?)
        }
        Command::Top(args) => top::top(&client, args),
        Command::Group(c) => group_cmd::group(&client, c, json),
        // The snapshot and clone commands act on a consistency group when they name one.
        Command::Snapshot(SnapshotCommand::Create { volume, name })
            if group_cmd::names_group(&client, &volume) =>
        {
            let (group, short) = volume_cmd::snapshot_names(volume, name)?;
            group_cmd::create_snapshot(&client, &group, &short, json)
        }
        Command::Snapshot(SnapshotCommand::Info { name })
            if name.contains('@') && group_cmd::names_group(&client, &name) =>
        {
            group_cmd::snapshot_info(&client, &name, json)
        }
        Command::Snapshot(SnapshotCommand::Delete {
            name,
            keep_hidden,
            yes,
        }) if name.contains('@') && group_cmd::names_group(&client, &name) => {
            group_cmd::delete_snapshot(&client, &name, keep_hidden, yes, json)
        }
        Command::Clone(CloneCommand::Create {
            snapshot,
            name,
            map,
        }) if snapshot.contains('@') && group_cmd::names_group(&client, &snapshot) => {
            group_cmd::clone(&client, &snapshot, &name, &map, json)
        }
        Command::Clone(CloneCommand::Create { map, .. }) if !map.is_empty() => {
            Err(exit_code::Failure::Usage(
                "--map is for clones of a group snapshot (GROUP@SNAPSHOT)".into(),
            )
            .into())
        }
        command => volume_cmd::run(&client, command_to_request(command), json),
    }
}

/// `--block-size`: 512 or 4096, nothing else.
fn parse_block_size(text: &str) -> Result<u32, String> {
    match text.trim() {
        "512" => Ok(512),
        "4096" | "4K" | "4k" => Ok(4096),
        _ => Err(format!("{text:?}: the block size is 512 or 4096")),
    }
}

fn clamp_exit(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(1)
}

fn command_to_request(command: Command) -> volume_cmd::Request {
    use volume_cmd::Request as R;
    match command {
        Command::Volume(VolumeCommand::Create {
            name,
            size,
            pool,
            block_size,
            shard,
            qos,
        }) => R::Create {
            name,
            size_bytes: size,
            pool,
            logical_block_size: block_size,
            shard,
            qos: qos.settings(),
        },
        Command::Volume(VolumeCommand::List) => R::List,
        Command::Volume(VolumeCommand::Info { name }) => R::Info { name },
        Command::Volume(VolumeCommand::Sessions { name }) => R::Sessions { name },
        Command::Volume(VolumeCommand::Rename {
            name,
            new_name,
            force,
        }) => R::Rename {
            name,
            new_name,
            force,
        },
        Command::Volume(VolumeCommand::Resize { name, size }) => R::Resize {
            name,
            size_bytes: size,
        },
        Command::Volume(VolumeCommand::Delete {
            name,
            with_snapshots,
            yes,
            force,
        }) => R::Delete {
            name,
            with_snapshots,
            yes,
            force,
        },
        Command::Volume(VolumeCommand::Refresh {
            name,
            snapshot,
            yes,
            force,
        }) => R::Refresh {
            volume: name,
            snapshot,
            yes,
            force,
        },
        Command::Volume(VolumeCommand::Rollback {
            name,
            snapshot,
            yes,
            force,
        }) => R::Rollback {
            volume: name,
            snapshot,
            yes,
            force,
        },
        Command::Snapshot(SnapshotCommand::Create { volume, name }) => {
            R::SnapshotCreate { volume, name }
        }
        Command::Snapshot(SnapshotCommand::List { volume }) => R::SnapshotList { volume },
        Command::Snapshot(SnapshotCommand::Info { name }) => R::SnapshotInfo { name },
        Command::Snapshot(SnapshotCommand::Delete {
            name,
            keep_hidden,
            yes,
        }) => R::SnapshotDelete {
            name,
            keep_hidden,
            yes,
        },
        Command::Clone(CloneCommand::Create { snapshot, name, .. }) => {
            R::CloneCreate { snapshot, name }
        }
        Command::Stats => R::Stats,
        Command::Sync => R::Sync,
        Command::Gc => R::Gc,
        Command::Checkpoint => R::Checkpoint,
        Command::Serve(_)
        | Command::Cnode(_)
        | Command::Dnode(_)
        | Command::Host(_)
        | Command::Group(_)
        | Command::Volume(
            VolumeCommand::Map(_) | VolumeCommand::Unmap(_) | VolumeCommand::Qos(_),
        )
        | Command::Snapshot(SnapshotCommand::Schedule(_) | SnapshotCommand::Schedules)
        | Command::Pool(_)
        | Command::Tier(_)
        | Command::Cluster(_)
        | Command::Status
        | Command::Completions(_)
        | Command::Man(_)
        | Command::Top(_)
        | Command::Bench(_) => unreachable!("handled before"),
    }
}

/// Listen addresses (comma-separated), or none (`off`).
#[derive(Debug, Clone)]
struct Listen(Vec<SocketAddr>);

fn parse_listen(s: &str) -> Result<Listen, String> {
    if s == "off" {
        return Ok(Listen(Vec::new()));
    }
    s.split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|e| format!("{a:?} is neither host:port nor `off`: {e}"))
        })
        .collect::<Result<_, _>>()
        .map(Listen)
}

fn nbd_tls_files(args: &EngineArgs) -> Option<weft_server::nbd_listener::NbdTlsFiles> {
    Some(weft_server::nbd_listener::NbdTlsFiles {
        cert: args.nbd_tls_cert.clone()?,
        key: args.nbd_tls_key.clone()?,
        client_ca: args.nbd_tls_client_ca.clone(),
        optional: args.nbd_tls_optional,
    })
}

fn engine_config(global: &GlobalArgs, args: &EngineArgs) -> anyhow::Result<EngineConfig> {
    anyhow::ensure!(
        (64 << 10..=1 << 30).contains(&args.segment_size),
        "--segment-size must be between 64K and 1G"
    );
    let mut engine = EngineConfig::new(global.data_dir.clone());
    engine.segment_size_bytes = usize::try_from(args.segment_size)?;
    engine.write_buffer_max_bytes = args.write_buffer_size;
    engine.checkpoint_every_bytes = args.checkpoint_every;
    engine.journal.file_bytes = args.journal_file_size;
    engine.write_through_min_bytes = args.write_through_min_size;
    engine.reduction_threads = args.reduction_threads;
    Ok(engine)
}

fn run_server(config: ServeConfig) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("weft-io")
        .build()?;
    runtime.block_on(weft_server::serve::run(config))
}

fn serve(global: &GlobalArgs, args: ServeArgs) -> anyhow::Result<()> {
    logging::init_logging(args.daemon.log_format);
    let config = ServeConfig {
        engine: engine_config(global, &args.engine)?,
        backend: Backend::Local(weft_engine::LocalStoreConfig {
            capacity_bytes: args.capacity,
            direct_io: !args.buffered_reads,
        }),
        nbd_listen: args.engine.nbd_listen,
        iscsi_listen: args.engine.iscsi_listen.0.clone(),
        iscsi_open_network: args.engine.iscsi_open_network,
        iscsi_nop_interval: args.engine.iscsi_nop_interval,
        nbd_open_network: args.engine.nbd_open_network,
        nbd_tls: nbd_tls_files(&args.engine),
        api_listen: args.engine.api_listen,
        metrics_listen: args.engine.metrics_listen.0.first().copied(),
        io_stats: !args.engine.no_io_stats,
        default_volume: args.engine.default_volume,
        default_volume_size_bytes: args.engine.default_volume_size,
        schedule_clock_scale: args.engine.test_clock_scale,
        tiering: args.engine.tiering.config(),
    };
    run_server(config)
}

fn cnode(global: &GlobalArgs, args: CnodeArgs) -> anyhow::Result<()> {
    logging::init_logging(args.daemon.log_format);
    let c = args.cluster;
    let Some(url) = c.cluster else {
        return Err(exit_code::Failure::Usage(
            "weft cnode: give --cluster etcd://host:port to run a c.node, or `weft cnode list`"
                .into(),
        )
        .into());
    };
    let mut engine = engine_config(global, &args.engine)?;
    engine.repair_rate_bytes_per_s = c.rebuild_rate;
    engine.read_cache_bytes = c.read_cache_size;
    let config = ServeConfig {
        engine,
        backend: Backend::Cluster(ClusterConfig {
            url,
            cluster_id: c.cluster_id,
            options: weft_server::cluster::ClusterOptions {
                pool: c.pool,
                redundancy: c.redundancy,
                pg_count: c.pg_count,
                out_grace: c.out_grace,
                refresh_interval: std::time::Duration::from_millis(500),
            },
            wait_for_dnodes: c.wait_for_dnodes,
            ha: weft_server::serve::HaConfig {
                partner: c.partner,
                mirror_listen: c.mirror_listen,
                forward_listen: c.forward_listen,
                lease_ttl: c.lease_ttl,
                force_takeover: c.force_takeover,
                shard: weft_engine::ShardId(c.shard.first().copied().unwrap_or(0)),
                also: c
                    .shard
                    .iter()
                    .skip(1)
                    .map(|s| weft_engine::ShardId(*s))
                    .collect(),
            },
        }),
        nbd_listen: args.engine.nbd_listen,
        iscsi_listen: args.engine.iscsi_listen.0.clone(),
        iscsi_open_network: args.engine.iscsi_open_network,
        iscsi_nop_interval: args.engine.iscsi_nop_interval,
        nbd_open_network: args.engine.nbd_open_network,
        nbd_tls: nbd_tls_files(&args.engine),
        api_listen: args.engine.api_listen,
        metrics_listen: args.engine.metrics_listen.0.first().copied(),
        io_stats: !args.engine.no_io_stats,
        default_volume: args.engine.default_volume,
        default_volume_size_bytes: args.engine.default_volume_size,
        schedule_clock_scale: args.engine.test_clock_scale,
        tiering: args.engine.tiering.config(),
    };
    run_server(config)
}
