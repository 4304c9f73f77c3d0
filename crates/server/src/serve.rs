//! `weft serve` and `weft cnode`: a c.node serving NBD and the management API.
//!
//! - single-process mode (`serve`): the c.node and its local d.node in one process, with the
//!   embedded metadata store;
//! - cluster mode (`cnode`): the cluster state in etcd, the chunks on the d.nodes registered
//!   there, erasure-coded by pool. At start the c.node takes a new epoch (one above the last
//!   c.node's), fences every family at that epoch on every d.node (so an older c.node still
//!   running can no longer write or delete chunks), then recovers from the d.nodes.
//!
//! Opens (or creates) the data dir (journal, API token, lock; the SCSI reservation records of
//! a single-process server), creates the default volume when the datastore is new (never
//! again, so a deleted default volume stays deleted), binds the NBD, iSCSI and API
//! listeners, says how to connect, and runs until SIGINT/SIGTERM.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_engine::EngineConfig;

use crate::cluster::ClusterOptions;

use crate::api::{self, ApiState};
use crate::backend::ExportBackend;
use crate::data_files::{load_or_create_id, write_atomically};
use crate::engine_backend::EngineBackend;
pub use crate::ha::takeover::HaConfig;
use crate::ha::takeover::{exit_when_ownership_lost, Who};
use crate::io_stats::IoStats;
mod open;
use open::{open_engine, open_reservation_records, Opened};

use crate::data_files::load_or_create_token_file;
pub use crate::data_files::{READ_ONLY_TOKEN_FILE, TOKEN_FILE};
/// The single-process server's array id (the end of its array target's name).
pub const ARRAY_ID_FILE: &str = "array-id";
/// Where a running server says where it listens, for the CLI and tests.
pub const SERVE_FILE: &str = "serve.json";

/// Where the chunks and the cluster state live.
#[derive(Debug, Clone)]
#[allow(clippy::large_enum_variant)] // one per process
pub enum Backend {
    /// Single-process mode: a local d.node in the data dir, the embedded metadata store.
    Local(weft_engine::LocalStoreConfig),
    /// A c.node of a cluster.
    Cluster(ClusterConfig),
}

/// How a c.node joins its cluster.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// `etcd://host:port[,host:port...]`
    pub url: String,
    /// d.nodes of another cluster id are refused at the handshake.
    pub cluster_id: String,
    pub options: ClusterOptions,
    /// At start, wait this long for enough d.nodes (k+m) to register.
    pub wait_for_dnodes: Duration,
    pub ha: HaConfig,
}

/// Everything `weft serve` and `weft cnode` need, validated.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub engine: EngineConfig,
    pub backend: Backend,
    pub nbd_listen: SocketAddr,
    /// The iSCSI portals, all paths to the same targets (empty: no iSCSI).
    pub iscsi_listen: Vec<SocketAddr>,
    /// Portals off loopback also serve exports mapped to no host, to any initiator
    /// (otherwise they serve hosts their mapped exports only).
    pub iscsi_open_network: bool,
    /// Ping an idle iSCSI session after this long (NOP-In); close it after twice as long
    /// without an answer.
    pub iscsi_nop_interval: Duration,
    /// The NBD listener, off loopback, also serves exports mapped to no host, to anyone.
    pub nbd_open_network: bool,
    /// NBD over TLS (STARTTLS, X.509), when configured.
    pub nbd_tls: Option<crate::nbd_listener::NbdTlsFiles>,
    pub api_listen: SocketAddr,
    /// Prometheus `/metrics` (no token), when set.
    pub metrics_listen: Option<SocketAddr>,
    /// Count and time every I/O per export (the live statistics); off only to measure what
    /// that costs.
    pub io_stats: bool,
    pub default_volume: String,
    pub default_volume_size_bytes: u64,
    /// The snapshot scheduler's clock runs this many times as fast as the wall clock (1; more
    /// only in tests, see `snapshot_scheduler`).
    pub schedule_clock_scale: u64,
    /// The store's tier and prices, and how heat is counted ([`crate::tiering`]).
    pub tiering: crate::tiering::TieringConfig,
}

/// Run until a signal; returns after a clean shutdown (destaged and checkpointed).
pub async fn run(config: ServeConfig) -> anyhow::Result<()> {
    anyhow::ensure!(
        config.iscsi_nop_interval >= Duration::from_secs(1),
        "--iscsi-nop-interval must be at least 1s"
    );
    say_who_sees_what(&config);
    // Before the data dir is touched: a bad certificate stops the start.
    let mut nbd_tls = config
        .nbd_tls
        .as_ref()
        .map(crate::nbd_listener::NbdTls::load)
        .transpose()
        .context("loading the NBD TLS certificate")?;
    let data_dir = absolute(&config.engine.data_dir)?;
    std::fs::create_dir_all(&data_dir)
        .with_context(|| format!("creating data dir {}", data_dir.display()))?;
    let token = load_or_create_token(&data_dir)?;
    // Before the engine: a bad tier or price stops the start at once.
    let tiering = crate::tiering::Tiering::open(data_dir.clone(), config.tiering.clone())
        .context("opening the tier prices and the heat")?;
    let array_target = crate::iscsi_listener::array_target_name(&match &config.backend {
        Backend::Cluster(c) => c.cluster_id.clone(),
        Backend::Local(_) => load_or_create_array_id(&data_dir)?,
    });
    let engine_config = EngineConfig {
        data_dir: data_dir.clone(),
        ..config.engine.clone()
    };
    // The API and /metrics answer from the start: while recovery runs (it may wait for
    // d.nodes) they say what it waits for, then they serve the real routers.
    let token: Arc<str> = token.into();
    let read_only_token: Arc<str> =
        load_or_create_token_file(&data_dir, READ_ONLY_TOKEN_FILE)?.into();
    let api_listener = TcpListener::bind(config.api_listen)
        .await
        .with_context(|| format!("binding the API on {}", config.api_listen))?;
    let metrics_listener = match config.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding /metrics on {addr}"))?,
        ),
        None => None,
    };
    let api_addr = api_listener.local_addr()?;
    let metrics_addr = metrics_listener
        .as_ref()
        .map(TcpListener::local_addr)
        .transpose()?;
    let shutdown = CancellationToken::new();
    let recovering = crate::recovering::Recovering {
        status: engine_config.recovery_status.clone(),
        placement: Arc::default(),
        standby: Arc::default(),
        token: Arc::clone(&token),
        read_only_token: Arc::clone(&read_only_token),
        cluster_tokens: Arc::default(),
    };
    let api_slot: Arc<std::sync::OnceLock<axum::Router>> = Arc::default();
    let metrics_slot: Arc<std::sync::OnceLock<axum::Router>> = Arc::default();
    let api_stop = shutdown.clone();
    let api_router = crate::recovering::switch(
        Arc::clone(&api_slot),
        crate::recovering::api_router(recovering.clone()),
    );
    let api_task = tokio::spawn(async move {
        axum::serve(api_listener, api_router)
            .with_graceful_shutdown(async move { api_stop.cancelled().await })
            .await
    });
    let metrics_task = metrics_listener.map(|listener| {
        let router = crate::recovering::switch(
            Arc::clone(&metrics_slot),
            crate::recovering::metrics_router(recovering.clone()),
        );
        let stop = shutdown.clone();
        tokio::spawn(async move {
            axum::serve(listener, router)
                .with_graceful_shutdown(async move { stop.cancelled().await })
                .await
        })
    });
    let early_json = serde_json::json!({
        "api": format!("http://{api_addr}"),
        "metrics": metrics_addr.map(|a| format!("http://{a}/metrics")),
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
        "recovering": true,
    });
    write_atomically(
        &data_dir,
        SERVE_FILE,
        serde_json::to_vec_pretty(&early_json)?.as_slice(),
    )?;
    let io = IoStats::new();
    let sessions = crate::sessions::Sessions::new();
    let io_for_front_ends = config.io_stats.then_some(&io);
    let nbd_options = |tls| crate::nbd_listener::NbdOptions {
        open_network: config.nbd_open_network,
        tls,
        sessions: Arc::clone(&sessions),
    };
    let iscsi_options = |reservations, port_groups| crate::iscsi_listener::IscsiOptions {
        array_target: array_target.clone(),
        open_network: config.iscsi_open_network,
        nop_interval: config.iscsi_nop_interval,
        sessions: Arc::clone(&sessions),
        reservations,
        port_groups: Some(port_groups),
    };
    let nbd_tls_said = nbd_tls.as_ref().map(|t| {
        let mode = if t.mode == weft_nbd::TlsMode::Required {
            "required"
        } else {
            "optional"
        };
        let clients = if t.verifies_clients {
            "client certificates verified"
        } else {
            "no client certificates"
        };
        format!("{mode}, {clients}")
    });
    // A c.node of a cluster serves from the start, through the owner until it owns the
    // cluster itself.
    let early = match &config.backend {
        Backend::Cluster(c) => {
            let early = crate::ha::forward::serving::start_early(
                &c.url,
                &c.ha,
                &data_dir,
                crate::front_ends::bind(config.nbd_listen, &config.iscsi_listen).await?,
                &sessions,
                shutdown.clone(),
            )
            .await?;
            let iscsi = iscsi_options(early.reservations.clone(), Arc::clone(&early.port_groups));
            let view = Arc::clone(&early.view);
            let me = early.group.cnode.clone();
            let _ = recovering.standby.set(Arc::new(move || {
                let o = view.now().owner.clone().filter(|o| o.id != me)?;
                Some(crate::api_proxy::OwnerApi {
                    id: o.id,
                    api: o.api,
                })
            }));
            let tokens = crate::cluster_tokens::ClusterTokens::join(early.kv(), &data_dir).await?;
            let _ = recovering.cluster_tokens.set(tokens);
            Some(early.start_front_ends(
                io_for_front_ends,
                nbd_options(nbd_tls.take()),
                iscsi,
                &shutdown,
            ))
        }
        Backend::Local(_) => None,
    };
    if let Some(e) = &early {
        // Clients may connect now: requests go to the owner until this c.node owns the
        // cluster.
        let mut json = early_json.clone();
        json["nbd"] = e.nbd_addr.to_string().into();
        json["iscsi"] = e.iscsi_addrs.first().map(ToString::to_string).into();
        json["iscsi_portals"] = e.iscsi_addrs.iter().map(ToString::to_string).collect();
        json["forward"] = e.forward_addr.to_string().into();
        json["forwarding"] = true.into();
        write_atomically(
            &data_dir,
            SERVE_FILE,
            serde_json::to_vec_pretty(&json)?.as_slice(),
        )?;
        println!(
            "forwarding: nbd {}, iscsi {}: every volume is served through the c.node that owns the cluster until this one does",
            e.nbd_addr,
            e.iscsi_addrs.first().map_or_else(|| "off".to_string(), ToString::to_string),
        );
    }
    let backend = config.backend.clone();
    let engine_config_for_shards = engine_config.clone();
    let placement_slot = Arc::clone(&recovering.placement);
    let who = Who {
        api: format!("http://{api_addr}"),
        nbd: early
            .as_ref()
            .map_or_else(|| config.nbd_listen.to_string(), |e| e.nbd_addr.to_string()),
        iscsi: match &early {
            Some(e) => e.iscsi_addrs.first().map(ToString::to_string),
            None => config.iscsi_listen.first().map(ToString::to_string),
        }
        .unwrap_or_default(),
        forward: early
            .as_ref()
            .map(|e| e.forward_addr.to_string())
            .unwrap_or_default(),
        port_group: early.as_ref().map(|e| e.group.clone()),
    };
    let who_for_shards = who.clone();
    let kv = early.as_ref().map(|e| Arc::clone(&e.kv));
    let forward_addr = early.as_ref().map(|e| e.forward_addr);
    let Opened {
        engine,
        cluster,
        ownership,
        compute,
    } = tokio::task::spawn_blocking(move || {
        open_engine(engine_config, backend, kv, &placement_slot, who)
    })
    .await??;
    if let Some(o) = &ownership {
        exit_when_ownership_lost(Arc::clone(o));
    }
    if let Some(c) = &cluster {
        c.arm_out_grace();
    }
    if let (Some(c), Some(o), Backend::Cluster(b)) = (&cluster, &ownership, &config.backend) {
        // The heat in etcd too, the old owner's taken first (before any I/O is counted).
        let o = Arc::clone(o);
        let may_write = Box::new(move || o.may_acknowledge().is_ok());
        let mirror =
            crate::tiering::heat_etcd::HeatMirror::new(c.kv().clone(), b.ha.shard.0, may_write);
        let t = Arc::clone(&tiering);
        tokio::task::spawn_blocking(move || t.attach_etcd(mirror)).await?;
    }
    let engine = Arc::new(engine);
    // The default volume is the first shard's (another shard starts empty: its name is
    // taken).
    let first_shard = match &config.backend {
        Backend::Cluster(c) => c.ha.shard == weft_engine::ShardId::default(),
        Backend::Local(_) => true,
    };
    if engine.is_new() && first_shard {
        engine
            .create_volume(&config.default_volume, config.default_volume_size_bytes)
            .with_context(|| format!("creating the default volume {}", config.default_volume))?;
    }
    let reservations = open_reservation_records(
        &data_dir,
        early.as_ref().map(|e| e.reservations.clone()),
        match (&config.backend, &early) {
            (Backend::Cluster(c), Some(e)) => Some((Arc::clone(&e.kv), c.ha.shard)),
            _ => None,
        },
        &engine,
    )
    .await?;
    let qos = crate::qos::QosRegistry::new();
    let qos_stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let qos_thread = qos.start(engine.clone(), Arc::clone(&qos_stop))?;
    let engine_backend = EngineBackend::with_qos(engine.clone(), Arc::clone(&qos));
    let engine_backend: Arc<dyn ExportBackend> = Arc::new(if config.io_stats {
        engine_backend.with_heat(Arc::clone(&tiering))
    } else {
        engine_backend
    });
    let heat_thread = tiering.start_for(engine.clone())?;
    let early_parts = early.as_ref().map(|e| {
        (
            Arc::clone(&e.kv),
            Arc::clone(&e.router),
            e.forward_addr,
            e.secret.clone(),
        )
    });
    let (front_ends, nbd_addr, iscsi_addrs) = match early {
        Some(early) => {
            // From now on this c.node serves from its own engine.
            early.serve_locally(Arc::clone(&engine_backend));
            (early.front_ends, early.nbd_addr, early.iscsi_addrs)
        }
        None => {
            let bound = crate::front_ends::bind(config.nbd_listen, &config.iscsi_listen).await?;
            let (nbd_addr, iscsi_addrs) = (bound.nbd_addr, bound.iscsi_addrs.clone());
            // On its own: one group of its portals, every LU active/optimized.
            let groups = crate::iscsi_listener::single_port_groups(iscsi_addrs.len());
            let running = crate::front_ends::start(
                bound,
                &engine_backend,
                io_for_front_ends,
                nbd_options(nbd_tls.take()),
                iscsi_options(reservations.clone(), groups),
                &shutdown,
            );
            (running, nbd_addr, iscsi_addrs)
        }
    };
    let iscsi_addr = iscsi_addrs.first().copied();
    // The front ends count every export they serve: in a cluster also the other shards'
    // (forwarded, or owned here besides the own shard), so those are kept at the pruning.
    let sampler = match (config.io_stats, &early_parts) {
        (false, _) => None,
        (true, Some((_, router, _, _))) => {
            let router = Arc::clone(router);
            Some(io.start_sampler(move || {
                use crate::backend::ExportBackend;
                router.list_exports().into_iter().map(|e| e.name).collect()
            })?)
        }
        (true, None) => {
            let engine = engine.clone();
            Some(io.start_sampler(move || {
                engine.list_images().into_iter().map(|i| i.name).collect()
            })?)
        }
    };
    let audit = Arc::new(
        api::audit::AuditLog::open(&data_dir)
            .with_context(|| format!("opening the audit log in {}", data_dir.display()))?,
    );
    let capacity_history = Arc::new(crate::capacity::CapacityHistory::default());
    let capacity_sampler = {
        let (engine, cluster, history) = (
            engine.clone(),
            cluster.clone(),
            Arc::clone(&capacity_history),
        );
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let every = Duration::from_millis(crate::capacity::SAMPLE_INTERVAL_MS);
            loop {
                let (engine, cluster, history) =
                    (engine.clone(), cluster.clone(), Arc::clone(&history));
                let _ = tokio::task::spawn_blocking(move || {
                    crate::capacity::report_now(&engine, cluster.as_deref(), &history)
                })
                .await;
                tokio::select! {
                    () = stop.cancelled() => break,
                    () = tokio::time::sleep(every) => {}
                }
            }
        })
    };
    let schedule_clock = crate::snapshot_scheduler::Clock::scaled(
        config.schedule_clock_scale,
        crate::snapshot_scheduler::last_run_unix_s(&engine),
    );
    let scheduler = tokio::spawn(crate::snapshot_scheduler::run(
        engine.clone(),
        Arc::clone(&sessions),
        reservations.clone(),
        schedule_clock.clone(),
        shutdown.clone(),
    ));
    let state = ApiState {
        schedule_clock,
        compute: compute.clone(),
        cluster: cluster.clone(),
        engine: engine.clone(),
        capacity: Arc::clone(&capacity_history),
        read_only_token,
        audit,
        token,
        nbd_address: nbd_addr.to_string().into(),
        iscsi_portal: iscsi_addr.map(|a| a.to_string().into()),
        array_target: array_target.clone().into(),
        io: Arc::clone(&io),
        qos: Arc::clone(&qos),
        sessions,
        reservations,
        cluster_tokens: recovering.cluster_tokens.get().cloned(),
        tiering: Arc::clone(&tiering),
        router: early_parts
            .as_ref()
            .map(|(_, router, _, _)| Arc::clone(router)),
    };
    let extra_shards = crate::metrics::ExtraShards::default();
    let _ = metrics_slot.set(crate::metrics::router(crate::metrics::MetricsSource {
        engine: engine.clone(),
        io: Arc::clone(&io),
        cluster: cluster.clone(),
        compute: compute.clone(),
        capacity: capacity_history,
        tiering: Arc::clone(&tiering),
        qos: Arc::clone(&qos),
        router: early_parts
            .as_ref()
            .map(|(_, router, _, _)| Arc::clone(router)),
        extra_shards: extra_shards.clone(),
    }));
    let api_template = state.clone();
    let _ = api_slot.set(api::router(state));

    let serve_json = serde_json::json!({
        "nbd": nbd_addr.to_string(),
        "iscsi": iscsi_addr.map(|a| a.to_string()),
        "iscsi_portals": iscsi_addrs.iter().map(ToString::to_string).collect::<Vec<_>>(),
        "iscsi_array_target": array_target,
        "forward": forward_addr.map(|a| a.to_string()),
        "api": format!("http://{api_addr}"),
        "metrics": metrics_addr.map(|a| format!("http://{a}/metrics")),
        "pid": std::process::id(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    write_atomically(
        &data_dir,
        SERVE_FILE,
        serde_json::to_vec_pretty(&serve_json)?.as_slice(),
    )?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "weft: data dir {}", data_dir.display())?;
    if let Some(tls) = &nbd_tls_said {
        writeln!(out, "nbd tls: {tls} (nbds:// URIs)")?;
    }
    // A volume mapped to a host is served to that host only, even on loopback: the connect
    // line names one anyone here can open.
    let hosts = engine.list_hosts();
    let mapped_to = |name: &str| -> Vec<&str> {
        hosts
            .iter()
            .filter(|h| h.luns.iter().any(|l| l.export == name))
            .map(|h| h.name.as_str())
            .collect()
    };
    let volumes = engine.volume_sizes();
    for (name, size_bytes) in &volumes {
        let mapped = mapped_to(name);
        let who = if mapped.is_empty() {
            String::new()
        } else {
            format!(
                "; mapped to {}: served to that host only",
                mapped.join(", ")
            )
        };
        writeln!(
            out,
            "nbd: nbd://{nbd_addr}/{name}  ({}{who})",
            crate::capacity::binary(*size_bytes)
        )?;
        if let Some(portal) = iscsi_addr {
            writeln!(
                out,
                "iscsi: iscsi://{portal}/{}/0",
                crate::iscsi_listener::target_name(name)
            )?;
        }
    }
    let snapshots = engine.list_images().iter().filter(|i| i.read_only).count();
    if snapshots > 0 {
        let iscsi = if iscsi_addr.is_some() {
            format!(
                ", iscsi {}VOLUME:SNAPSHOT",
                crate::iscsi_listener::TARGET_PREFIX
            )
        } else {
            String::new()
        };
        writeln!(
            out,
            "snapshots: {snapshots}, read-only as nbd://{nbd_addr}/VOLUME@SNAPSHOT{iscsi} (weft snapshot list)"
        )?;
    }
    writeln!(
        out,
        "api: http://{api_addr}/api/v1 (token in {})",
        data_dir.join(TOKEN_FILE).display()
    )?;
    match volumes.iter().find(|(name, _)| mapped_to(name).is_empty()) {
        Some((name, _)) => writeln!(
            out,
            "connect: qemu-img info nbd://{nbd_addr}/{name} | nbdinfo nbd://{nbd_addr}/{name}"
        )?,
        None if volumes.is_empty() => writeln!(
            out,
            "connect: no volume yet: weft volume create NAME --size SIZE"
        )?,
        None => writeln!(
            out,
            "connect: every volume is mapped to a host: connect from that host"
        )?,
    }
    writeln!(
        out,
        "ui: http://{api_addr}/ (log in with the token in {}; viewers: {})",
        data_dir.join(TOKEN_FILE).display(),
        data_dir.join(READ_ONLY_TOKEN_FILE).display()
    )?;
    if let Some(addr) = metrics_addr {
        writeln!(out, "metrics: http://{addr}/metrics (Prometheus, no token)")?;
    }
    if let Some(portal) = iscsi_addr {
        writeln!(
            out,
            "iscsi array target: {array_target} at {portal} (hosts see the LUNs mapped to them: weft host create, weft volume map)"
        )?;
    }
    if iscsi_addrs.len() > 1 {
        let portals: Vec<String> = iscsi_addrs.iter().map(ToString::to_string).collect();
        writeln!(
            out,
            "iscsi portals (paths to every target): {}",
            portals.join(", ")
        )?;
    }
    // The shards this c.node owns besides its own, and those handed to it later.
    let shard_host = match (&config.backend, &early_parts, &cluster, &compute) {
        (
            Backend::Cluster(c),
            Some((kv, router, forward_addr, secret)),
            Some(placement),
            Some(compute),
        ) => {
            let mirrors = crate::ha::shard_mirrors::ShardMirrors::start(
                forward_addr.ip(),
                &data_dir,
                engine_config_for_shards.journal,
                compute.registration.id(),
            )?;
            compute
                .registration
                .set_shard_mirror(mirrors.addr().to_string());
            let host = crate::shard_host::ShardHost::new(crate::shard_host::HostContext {
                kv: Arc::clone(kv),
                placement: Arc::clone(placement),
                registration: Arc::clone(&compute.registration),
                router: Arc::clone(router),
                own_shard: c.ha.shard,
                engine: engine_config_for_shards.clone(),
                lease_ttl: c.ha.lease_ttl,
                who: who_for_shards.clone(),
                api: api_template,
                schedule_clock_scale: config.schedule_clock_scale,
                tiering: config.tiering.clone(),
                api_ip: api_addr.ip(),
                forward_ip: forward_addr.ip(),
                secret: secret.clone(),
                shutdown: shutdown.clone(),
                mirrors: Arc::clone(&mirrors),
            });
            for shard in crate::shard_host::shards_at_start(&data_dir, &c.ha) {
                match host.take_at_start(shard).await {
                    Ok(()) => writeln!(out, "shard {shard}: owned besides shard {} (its API and volumes through this c.node)", c.ha.shard)?,
                    Err(e) => writeln!(out, "shard {shard}: not owned: {e:#}")?,
                }
            }
            let adopter = host.adopt_handovers();
            let _ = extra_shards.0.set(Arc::clone(&host));
            Some((host, adopter, mirrors))
        }
        _ => {
            drop(api_template);
            None
        }
    };
    writeln!(out, "ready")?;
    out.flush()?;
    drop(out);
    tracing::info!(nbd = %nbd_addr, iscsi = ?iscsi_addrs, api = %api_addr, "serving");

    let drained = async {
        match &compute {
            Some(c) => c.drain.notified().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        () = wait_for_signal() => {}
        () = drained => tracing::warn!("draining at the operator's request (weft cnode drain): handing the cluster over to the standby"),
    }
    tracing::info!("shutting down: destaging and checkpointing");
    shutdown.cancel();
    front_ends.join().await;
    if let Some((host, adopter, mirrors)) = shard_host {
        let _ = adopter.await;
        host.stop().await;
        let _ = tokio::task::spawn_blocking(move || mirrors.close()).await;
    }
    let _ = api_task.await;
    let _ = capacity_sampler.await;
    let _ = scheduler.await;
    if let Some(task) = metrics_task {
        let _ = task.await;
    }
    io.stop();
    qos_stop.store(true, std::sync::atomic::Ordering::Release);
    let _ = qos_thread.join();
    if let Some(sampler) = sampler {
        let _ = sampler.join();
    }
    tiering.stop();
    let _ = heat_thread.join();
    if let Err(e) = tiering.persist(crate::tiering::now_s()) {
        tracing::warn!("writing the heat file at shutdown: {e:#}");
    }
    let _ = std::fs::remove_file(data_dir.join(SERVE_FILE));
    tokio::task::spawn_blocking(move || engine.shutdown()).await?;
    if let Some(c) = cluster {
        c.stop();
    }
    if let Some(o) = ownership {
        // Everything is destaged: a standby may take over at once.
        o.release();
    }
    if let Some(c) = compute {
        c.registration.stop();
    }
    Ok(())
}

/// Log who each listener serves: loopback listeners serve every export to local clients;
/// others serve hosts their mapped exports, and unmapped exports only when opened.
fn say_who_sees_what(config: &ServeConfig) {
    let off_loopback = |addrs: &[SocketAddr]| -> Vec<String> {
        addrs
            .iter()
            .filter(|a| !a.ip().is_loopback())
            .map(ToString::to_string)
            .collect()
    };
    let iscsi = off_loopback(&config.iscsi_listen);
    let nbd = off_loopback(&[config.nbd_listen]);
    for (protocol, addrs, open, flag) in [
        (
            "iSCSI",
            iscsi,
            config.iscsi_open_network,
            "--iscsi-open-network",
        ),
        ("NBD", nbd, config.nbd_open_network, "--nbd-open-network"),
    ] {
        if addrs.is_empty() {
            continue;
        }
        if open {
            tracing::warn!(
                listen = %addrs.join(", "),
                "{protocol} is open to the network ({flag}): any client that reaches it can read and write every volume not mapped to a host"
            );
        } else {
            tracing::info!(
                listen = %addrs.join(", "),
                "{protocol} off loopback serves each host only the volumes mapped to it (pass {flag} to serve unmapped volumes to anyone)"
            );
        }
    }
}

/// The id in the array target's name of a single-process server, made at first start.
fn load_or_create_array_id(data_dir: &Path) -> anyhow::Result<String> {
    load_or_create_id(data_dir, ARRAY_ID_FILE)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    if path.is_absolute() {
        Ok(path.to_path_buf())
    } else {
        // `components` drops the `.` of `./weft-data`.
        Ok(std::env::current_dir()?.join(path).components().collect())
    }
}

/// The API token: read it, or create it (32 random bytes, hex) with mode 0600.
pub fn load_or_create_token(data_dir: &Path) -> anyhow::Result<String> {
    load_or_create_token_file(data_dir, TOKEN_FILE)
}
