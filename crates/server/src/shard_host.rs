//! The shards a c.node process owns besides its own: one engine per shard.
//!
//! A c.node's own shard (`weft cnode --shard N`, the first of the list) is opened by `serve`
//! in the data dir itself, with its partner and standby. Every other shard it owns, named at
//! start (`--shard 0,2`) or adopted from a c.node that drained (`super::ha::shard_handover`),
//! is an [`ExtraShard`]: its own engine with its journal in `<data dir>/shards/<n>/`, its own
//! ownership lease and epoch, and, so nothing else needs to know the process holds several,
//! its own management API and forward listener on free ports, named in the shard's ownership
//! record. Requests reach it as they reach any shard's owner:
//!
//! ```text
//!  host --NBD/iSCSI--> front ends --ShardRouter--> shard n's RoutedBackend --local slot--> engine n
//!  other c.node ------FORWARD-----> shard n's forward listener --------------------------> engine n
//!  weft CLI --> API (own shard) --shard_routes: name claim says n--> shard n's API -----> engine n
//! ```
//!
//! An extra shard mirrors its write buffer to a partner it picks when it is opened: another
//! c.node's shard-mirror service (`super::ha::shard_mirrors`), so its acknowledged writes not
//! yet in stripes are on two machines, as the own shard's are. When this c.node dies, that
//! partner takes the shard over on its mirror ([`ShardHost::adopt_handovers`] runs the
//! rescue on every c.node). With no other c.node to pick, the shard runs without a partner
//! (the status says `single` for it). It is given up by a drain (handed to another c.node, then the process stops), or while
//! the process runs ([`ShardHost::give_up`]), which the spread policy does when another owner
//! has two or more shards fewer ([`ShardHost::spread_once`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use weft_engine::{Backends, Engine, EngineConfig, ShardId};
use weft_meta::MetaStore;

use crate::api::ApiState;
use crate::backend::ExportBackend;
use crate::cluster::ClusterPlacement;
use crate::engine_backend::EngineBackend;
use crate::ha::forward::server::ForwardService;
use crate::ha::forward::shards::ShardRouter;
use crate::ha::ownership::Ownership;
use crate::ha::registry::Registration;
use crate::ha::shard_handover;
use crate::ha::shard_mirrors::{choose_partner, rescue_candidates, ShardMirrors};
use crate::ha::shard_moves;
use crate::ha::takeover::{exit_when_ownership_lost, own_the_cluster, HaConfig, Owned, Who};

/// The key of the c.node epoch counter.
pub const EPOCH_KEY: &str = "weft/cnode/epoch";
pub use crate::data_files::{shard_dir, SHARDS_DIR};
/// How often the handover requests are read.
const ADOPT_INTERVAL: Duration = Duration::from_millis(500);

/// Take a new c.node epoch (one above the last engine's, of any shard).
pub fn take_epoch(kv: &dyn MetaStore) -> anyhow::Result<u64> {
    let (epoch, _) = weft_meta::update_json(kv, EPOCH_KEY, |old: Option<u64>| {
        Ok::<_, weft_meta::MetaError>(old.unwrap_or(0) + 1)
    })
    .context("taking a c.node epoch")?;
    Ok(epoch)
}

/// Fence every family of `shard` at `epoch` on every d.node (and on those that register
/// later) before anything is written or deleted, then open the shard's engine: recovery from
/// its checkpoint, segments and `write_log`. Another shard's families are its owner's to
/// fence.
pub fn fence_and_open(
    kv: &Arc<dyn MetaStore>,
    placement: &Arc<ClusterPlacement>,
    shard: ShardId,
    epoch: u64,
    write_log: Arc<dyn weft_engine::write_log::WriteLogSource>,
    config: EngineConfig,
) -> anyhow::Result<Engine> {
    let data_dir = config.data_dir.clone();
    let state = weft_engine::metastore::ClusterStore::open_shard(kv.clone(), shard)?;
    let families: std::collections::BTreeSet<u64> = state
        .state
        .volumes
        .iter()
        .map(|v| v.family.0)
        .chain(state.state.snapshots.iter().map(|s| s.family.0))
        .collect();
    for store in weft_engine::stripe::Placement::all_stores(&**placement) {
        for &family in &families {
            if let Err(e) = store.fence(family, epoch) {
                tracing::warn!(store = store.name(), family, error = %e, "could not fence a family on a d.node");
            }
        }
    }
    placement.fence_late_comers(epoch, families.iter().copied().collect());
    tracing::info!(
        epoch,
        shard = shard.0,
        families = families.len(),
        "c.node epoch taken; families fenced"
    );
    let backends = Backends {
        placement: placement.clone(),
        metastore: kv.clone(),
        write_log: Some(write_log),
        epoch,
        shard,
    };
    Engine::open_with(config, backends).with_context(|| {
        format!(
            "recovering shard {shard} from the cluster (journal in {})",
            data_dir.display()
        )
    })
}

/// What every extra shard of this process shares with its own shard.
pub(crate) struct HostContext {
    pub kv: Arc<dyn MetaStore>,
    pub placement: Arc<ClusterPlacement>,
    pub registration: Arc<Registration>,
    pub router: Arc<ShardRouter>,
    pub own_shard: ShardId,
    /// The process's engine settings (its data dir the root of `shards/`).
    pub engine: EngineConfig,
    pub lease_ttl: Duration,
    /// How the process is reached (each shard's API and forward address replace its own).
    pub who: Who,
    /// The own shard's API state: an extra shard's is the same with its own engine.
    pub api: ApiState,
    pub schedule_clock_scale: u64,
    pub tiering: crate::tiering::TieringConfig,
    pub api_ip: IpAddr,
    pub forward_ip: IpAddr,
    pub secret: String,
    pub shutdown: CancellationToken,
    /// This c.node's shard-mirror service: the shards it may rescue are those it mirrors.
    pub mirrors: Arc<ShardMirrors>,
}

/// One shard this process owns besides its own (see the module doc).
struct ExtraShard {
    engine: Arc<Engine>,
    ownership: Arc<Ownership>,
    stop: CancellationToken,
    qos_stop: Arc<AtomicBool>,
    qos_thread: Option<std::thread::JoinHandle<()>>,
    tiering: Arc<crate::tiering::Tiering>,
    heat_thread: Option<std::thread::JoinHandle<()>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    api: SocketAddr,
}

/// The extra shards of this process, and the adoption of shards handed to it.
pub(crate) struct ShardHost {
    ctx: HostContext,
    extras: tokio::sync::Mutex<BTreeMap<ShardId, ExtraShard>>,
    /// Shards being opened now (an adoption takes a lease and a recovery).
    opening: Mutex<Vec<ShardId>>,
}

impl ShardHost {
    pub fn new(ctx: HostContext) -> Arc<ShardHost> {
        Arc::new(ShardHost {
            ctx,
            extras: tokio::sync::Mutex::default(),
            opening: Mutex::default(),
        })
    }

    /// The shards this process owns besides its own.
    pub async fn owned(&self) -> Vec<ShardId> {
        self.extras.lock().await.keys().copied().collect()
    }

    /// Own `shard` besides this c.node's own: take its lease (waiting at most two lease
    /// times for a live owner to go), recover it, and serve it. A shard another live c.node
    /// keeps owning is refused.
    pub async fn take(self: &Arc<Self>, shard: ShardId) -> anyhow::Result<()> {
        anyhow::ensure!(
            shard != self.ctx.own_shard,
            "shard {shard} is this c.node's own"
        );
        {
            let mut opening = self.opening.lock();
            anyhow::ensure!(
                !opening.contains(&shard),
                "shard {shard} is being opened already"
            );
            opening.push(shard);
        }
        let result = self.open(shard).await;
        self.opening.lock().retain(|s| *s != shard);
        let extra = result?;
        self.ctx.registration.set_extra_shard(shard, true);
        tracing::info!(shard = shard.0, api = %extra.api, "serving shard {shard} from an engine of this c.node (besides its own shard)");
        self.extras.lock().await.insert(shard, extra);
        Ok(())
    }

    async fn open(&self, shard: ShardId) -> anyhow::Result<ExtraShard> {
        let ctx = &self.ctx;
        if self.extras.lock().await.contains_key(&shard) {
            anyhow::bail!("this c.node owns shard {shard} already");
        }
        // Followed before it is served: its exports are listed through its view meanwhile.
        let slot = ctx
            .router
            .local_slot(shard)
            .context("the own shard has no extra slot")?;
        let dir = shard_dir(&ctx.engine.data_dir, shard);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let api_listener = TcpListener::bind(SocketAddr::new(ctx.api_ip, 0)).await?;
        let forward_listener = TcpListener::bind(SocketAddr::new(ctx.forward_ip, 0)).await?;
        let (api_addr, forward_addr) = (api_listener.local_addr()?, forward_listener.local_addr()?);
        let config = EngineConfig {
            data_dir: dir.clone(),
            ..ctx.engine.clone()
        };
        let me = ctx.registration.id();
        let kv = Arc::clone(&ctx.kv);
        let partner = tokio::task::spawn_blocking(move || {
            let mut records = crate::ha::registry::list(&*kv)?;
            // Not one that is handing its shards over: it is about to stop.
            let leaving: Vec<String> = shard_handover::list(&*kv)?
                .into_iter()
                .map(|(r, _)| r.from)
                .collect();
            records.retain(|r| !leaving.contains(&r.id));
            Ok::<_, anyhow::Error>(choose_partner(&records, &me))
        })
        .await?
        .context("reading the c.nodes to pick the shard's partner")?;
        match &partner {
            Some(p) => tracing::info!(shard = shard.0, partner = %p, "the shard's write buffer is mirrored to another c.node"),
            None => tracing::warn!(shard = shard.0, "no other c.node to mirror the shard's write buffer to: its acknowledged writes not yet in stripes live only in this c.node's journal"),
        }
        let ha = HaConfig {
            partner,
            mirror_listen: None,
            forward_listen: None,
            lease_ttl: ctx.lease_ttl,
            force_takeover: false,
            shard,
            also: Vec::new(),
        };
        let who = Who {
            api: format!("http://{api_addr}"),
            forward: forward_addr.to_string(),
            ..ctx.who.clone()
        };
        let (kv, placement, registration) = (
            Arc::clone(&ctx.kv),
            Arc::clone(&ctx.placement),
            Arc::clone(&ctx.registration),
        );
        let (engine, ownership, compute) = tokio::task::spawn_blocking(move || {
            let Owned {
                ownership,
                write_log,
                compute,
            } = own_the_cluster(&kv, &ha, &config, who, Some(registration))?;
            let epoch = take_epoch(&*kv)?;
            let engine = fence_and_open(&kv, &placement, shard, epoch, write_log, config)?;
            Ok::<_, anyhow::Error>((engine, ownership, compute))
        })
        .await??;
        exit_when_ownership_lost(Arc::clone(&ownership));
        let engine = Arc::new(engine);
        let stop = ctx.shutdown.child_token();
        let qos = crate::qos::QosRegistry::new();
        let qos_stop = Arc::new(AtomicBool::new(false));
        let qos_thread = qos.start(Arc::clone(&engine), Arc::clone(&qos_stop))?;
        // Heat per extent, kept in the shard's dir and in etcd (taken over from the last
        // owner before any I/O is counted), as for the own shard.
        let tiering = crate::tiering::Tiering::open(dir, ctx.tiering.clone())
            .context("opening the shard's tier prices and heat")?;
        {
            let o = Arc::clone(&ownership);
            let may_write = Box::new(move || o.may_acknowledge().is_ok());
            let mirror =
                crate::tiering::heat_etcd::HeatMirror::new(Arc::clone(&ctx.kv), shard.0, may_write);
            let t = Arc::clone(&tiering);
            tokio::task::spawn_blocking(move || t.attach_etcd(mirror)).await?;
        }
        let heat_thread = tiering.start_for(Arc::clone(&engine))?;
        let backend: Arc<dyn ExportBackend> = Arc::new(
            EngineBackend::with_qos(Arc::clone(&engine), Arc::clone(&qos))
                .with_heat(Arc::clone(&tiering)),
        );
        let mut tasks = Vec::new();
        tasks.push(tokio::spawn(crate::ha::forward::server::run(
            forward_listener,
            ForwardService {
                local: Arc::clone(&slot),
                secret: ctx.secret.clone().into(),
                id: ctx.registration.id().into(),
                sessions: Arc::clone(&ctx.api.sessions),
            },
            stop.clone(),
        )));
        let schedule_clock = crate::snapshot_scheduler::Clock::scaled(
            ctx.schedule_clock_scale,
            crate::snapshot_scheduler::last_run_unix_s(&engine),
        );
        tasks.push(tokio::spawn(crate::snapshot_scheduler::run(
            Arc::clone(&engine),
            Arc::clone(&ctx.api.sessions),
            ctx.api.reservations.clone(),
            schedule_clock.clone(),
            stop.clone(),
        )));
        let state = ApiState {
            engine: Arc::clone(&engine),
            compute: Some(compute),
            qos,
            tiering: Arc::clone(&tiering),
            capacity: Arc::default(),
            schedule_clock,
            ..ctx.api.clone()
        };
        let router = crate::api::router(state);
        let api_stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let served = axum::serve(api_listener, router)
                .with_graceful_shutdown(async move { api_stop.cancelled().await })
                .await;
            if let Err(e) = served {
                tracing::warn!(error = %e, "a shard's API listener stopped");
            }
        }));
        // From now on the front ends serve the shard from this engine.
        slot.set(backend);
        Ok(ExtraShard {
            engine,
            ownership,
            stop,
            qos_stop,
            qos_thread: Some(qos_thread),
            tiering,
            heat_thread: Some(heat_thread),
            tasks,
            api: api_addr,
        })
    }

    /// Own `shard` from the start, unless another live c.node owns it (then it is served
    /// through that owner, as any other shard).
    pub async fn take_at_start(self: &Arc<Self>, shard: ShardId) -> anyhow::Result<()> {
        let (kv, me) = (Arc::clone(&self.ctx.kv), self.ctx.registration.id());
        let owner = tokio::task::spawn_blocking(move || Ownership::owner(&*kv, shard)).await??;
        if let Some(o) = owner.filter(|o| o.id != me) {
            anyhow::bail!("c.node {} owns it (served through it)", o.id);
        }
        self.take(shard).await
    }

    /// Adopt the shards handed to this c.node (see `shard_handover`), and spread the shards
    /// over the owners ([`ShardHost::spread_once`]), until shutdown.
    pub fn adopt_handovers(self: &Arc<Self>) -> tokio::task::JoinHandle<()> {
        let host = Arc::clone(self);
        tokio::spawn(async move {
            let mut spread_at = tokio::time::Instant::now() + SPREAD_INTERVAL;
            loop {
                tokio::select! {
                    () = host.ctx.shutdown.cancelled() => return,
                    () = tokio::time::sleep(ADOPT_INTERVAL) => {}
                }
                host.adopt_once().await;
                host.rescue_once().await;
                host.move_once().await;
                if tokio::time::Instant::now() >= spread_at {
                    spread_at = tokio::time::Instant::now() + SPREAD_INTERVAL;
                    host.spread_once().await;
                }
            }
        })
    }

    async fn adopt_once(self: &Arc<Self>) {
        let me = self.ctx.registration.id();
        let kv = Arc::clone(&self.ctx.kv);
        let asked = tokio::task::spawn_blocking(move || {
            let records = shard_handover::list(&*kv)?;
            let mut out = Vec::new();
            for (record, revision) in records {
                let owner = Ownership::owner(&*kv, record.shard)?;
                out.push((record, revision, owner.map(|o| o.id)));
            }
            Ok::<_, anyhow::Error>(out)
        })
        .await;
        let Ok(Ok(asked)) = asked else {
            return;
        };
        let owned = self.owned().await;
        for (record, revision, owner) in asked {
            if record.to != me {
                continue;
            }
            let shard = record.shard;
            let served = shard == self.ctx.own_shard || owned.contains(&shard);
            let someone_else = owner
                .as_deref()
                .is_some_and(|o| o != me && o != record.from);
            if served || someone_else {
                // Ours now, or another c.node took it: the request is answered.
                let kv = Arc::clone(&self.ctx.kv);
                let _ = tokio::task::spawn_blocking(move || {
                    shard_handover::done(&*kv, shard, revision)
                })
                .await;
                continue;
            }
            if owner.as_deref().is_some_and(|o| o != me) || self.opening.lock().contains(&shard) {
                // Its owner is still stopping (or this c.node is opening it). A record with
                // this c.node's own id is a previous run of it, replaced at once.
                continue;
            }
            tracing::warn!(shard = shard.0, from = %record.from, "adopting a shard handed over by a draining c.node");
            let host = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(e) = host.take(shard).await {
                    tracing::error!(shard = shard.0, error = %format!("{e:#}"), "could not adopt the shard; trying again");
                }
            });
        }
    }

    /// Take over the shards whose owner died and whose mirror this c.node keeps (see
    /// `shard_mirrors::rescue_candidates`): their partner here stops first, then the shard
    /// opens on the mirror, as a standby takes its own shard over.
    async fn rescue_once(self: &Arc<Self>) {
        let mut skip = self.owned().await;
        skip.push(self.ctx.own_shard);
        skip.extend(self.opening.lock().iter().copied());
        let (kv, me) = (Arc::clone(&self.ctx.kv), self.ctx.registration.id());
        let dir = self.ctx.engine.data_dir.clone();
        let found =
            tokio::task::spawn_blocking(move || rescue_candidates(&*kv, &dir, &me, &skip)).await;
        let Ok(Ok(shards)) = found else {
            return;
        };
        for shard in shards {
            tracing::warn!(shard = shard.0, "the shard's owner is gone and this c.node holds its write-buffer mirror: taking it over");
            let mirrors = Arc::clone(&self.ctx.mirrors);
            let _ = tokio::task::spawn_blocking(move || mirrors.hold(shard)).await;
            let host = Arc::clone(self);
            tokio::spawn(async move {
                if let Err(e) = host.take(shard).await {
                    host.ctx.mirrors.release(shard);
                    tracing::error!(shard = shard.0, error = %format!("{e:#}"), "could not take the shard over; trying again");
                }
            });
        }
    }

    /// Stop every extra shard: its listeners, then its engine (destaged, checkpointed), then
    /// its lease, so whoever adopts it next recovers nothing.
    pub async fn stop(&self) {
        let extras = std::mem::take(&mut *self.extras.lock().await);
        for (shard, extra) in extras {
            self.stop_one(shard, extra).await;
        }
    }

    async fn stop_one(&self, shard: ShardId, mut extra: ExtraShard) {
        extra.stop.cancel();
        for task in extra.tasks.drain(..) {
            let _ = task.await;
        }
        extra.qos_stop.store(true, Ordering::Release);
        if let Some(t) = extra.qos_thread.take() {
            let _ = t.join();
        }
        extra.tiering.stop();
        if let Some(t) = extra.heat_thread.take() {
            let _ = t.join();
        }
        if let Err(e) = extra.tiering.persist(crate::tiering::now_s()) {
            tracing::warn!(shard = shard.0, "writing the shard's heat file: {e:#}");
        }
        let engine = Arc::clone(&extra.engine);
        let _ = tokio::task::spawn_blocking(move || engine.shutdown()).await;
        extra.ownership.release();
        self.ctx.registration.set_extra_shard(shard, false);
        // Whoever owns it next may mirror it here.
        self.ctx.mirrors.release(shard);
        tracing::info!(
            shard = shard.0,
            "shard stopped: destaged, checkpointed, lease released"
        );
    }

    /// Hand `shard` (one this process owns besides its own) to c.node `to` while running:
    /// ask `to` to adopt it, switch this c.node's front ends back to forwarding (requests
    /// then wait for the next owner), wait for the requests already running on the engine,
    /// then stop the engine (destaged, checkpointed, journal `clean`) and release the lease;
    /// `to` takes it with nothing to replay and the waiting requests go there.
    pub async fn give_up(&self, shard: ShardId, to: &str) -> anyhow::Result<()> {
        let Some(extra) = self.extras.lock().await.remove(&shard) else {
            anyhow::bail!("this c.node does not own shard {shard} besides its own");
        };
        let record = shard_handover::HandoverRecord {
            shard,
            from: self.ctx.registration.id(),
            to: to.to_string(),
            asked_unix_s: now_unix_s(),
        };
        let kv = Arc::clone(&self.ctx.kv);
        let asked = tokio::task::spawn_blocking(move || shard_handover::ask(&*kv, &record)).await;
        if !matches!(asked, Ok(Ok(()))) {
            self.extras.lock().await.insert(shard, extra);
            anyhow::bail!("could not write the handover request of shard {shard}");
        }
        tracing::warn!(shard = shard.0, to, "handing the shard over while running");
        if let Some(slot) = self.ctx.router.local_slot(shard) {
            slot.clear();
            let deadline = tokio::time::Instant::now() + GIVE_UP_WAIT;
            while slot.in_flight() > 0 && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        self.stop_one(shard, extra).await;
        Ok(())
    }

    /// The operator's moves (`crate::ha::shard_moves`): a shard this c.node owns besides its
    /// own that is pinned to another running owner is given to it, one at a time.
    async fn move_once(&self) {
        let me = self.ctx.registration.id();
        let kv = Arc::clone(&self.ctx.kv);
        let read = tokio::task::spawn_blocking(move || {
            Ok::<_, anyhow::Error>((
                shard_moves::list(&*kv)?,
                crate::ha::registry::list(&*kv)?,
                shard_handover::list(&*kv)?,
            ))
        })
        .await;
        let Ok(Ok((moves, records, pending))) = read else {
            return;
        };
        if pending.iter().any(|(r, _)| r.from == me) {
            return;
        }
        let owned = self.owned().await;
        for m in moves {
            let running = records
                .iter()
                .any(|r| r.id == m.to && r.role == crate::ha::registry::CnodeRole::Owner);
            if m.to == me || !owned.contains(&m.shard) || !running {
                continue;
            }
            tracing::warn!(shard = m.shard.0, to = %m.to, "moving the shard at the operator's request");
            if let Err(e) = self.give_up(m.shard, &m.to).await {
                tracing::warn!(shard = m.shard.0, error = %format!("{e:#}"), "could not hand the shard over");
            }
            return;
        }
    }

    /// The spread policy: while this c.node owns at least two shards more than the least
    /// loaded other owner, it gives that owner one of those it owns besides its own (the
    /// highest numbered not pinned to it by the operator), one at a time: each c.node decides for itself from the
    /// registrations, and a request of its own still pending holds the next.
    async fn spread_once(&self) {
        let me = self.ctx.registration.id();
        let kv = Arc::clone(&self.ctx.kv);
        let read = tokio::task::spawn_blocking(move || {
            Ok::<_, anyhow::Error>((
                crate::ha::registry::list(&*kv)?,
                shard_handover::list(&*kv)?,
                shard_moves::list(&*kv)?,
            ))
        })
        .await;
        let Ok(Ok((records, pending, moves))) = read else {
            return;
        };
        if pending.iter().any(|(r, _)| r.from == me) {
            return;
        }
        let owned = self.owned().await;
        // The operator's placement stays (`weft cnode move-shard`).
        let Some(&shard) = owned
            .iter()
            .rev()
            .find(|s| !shard_moves::pinned_to(&moves, **s, &me))
        else {
            return;
        };
        let mine = 1 + owned.len();
        let Some(to) = shard_handover::choose_adopter(&records, &me, &[]) else {
            return;
        };
        let theirs = records
            .iter()
            .find(|r| r.id == to)
            .map_or(usize::MAX, |r| shard_handover::owned_by(r).len());
        if mine < theirs.saturating_add(2) {
            return;
        }
        tracing::warn!(shard = shard.0, %to, mine, theirs, "spreading shards: this c.node owns two or more shards more than another");
        if let Err(e) = self.give_up(shard, &to).await {
            tracing::warn!(shard = shard.0, error = %format!("{e:#}"), "could not hand the shard over");
        }
    }

    /// The engines of the shards this process owns besides its own, for `/metrics`.
    pub async fn extra_engines(&self) -> Vec<(ShardId, Arc<Engine>)> {
        let extras = self.extras.lock().await;
        extras
            .iter()
            .map(|(shard, extra)| (*shard, Arc::clone(&extra.engine)))
            .collect()
    }
}

/// How long giving a shard up waits for the requests running on its engine.
const GIVE_UP_WAIT: Duration = Duration::from_secs(30);
/// How often the spread policy looks at the owners' loads.
const SPREAD_INTERVAL: Duration = Duration::from_secs(2);

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The shards a c.node takes besides its own at start: those `--shard` lists after its own,
/// and every one it kept a journal for in its data dir (a shard it owned besides its own
/// when it stopped: after a crash, its acknowledged writes not yet in stripes are in that
/// journal, and in its partner's mirror when it had one; the journal state says which of
/// the two may recover them).
pub fn shards_at_start(data_dir: &std::path::Path, ha: &HaConfig) -> Vec<ShardId> {
    let mut shards = ha.also.clone();
    if let Ok(entries) = std::fs::read_dir(data_dir.join(SHARDS_DIR)) {
        for entry in entries.flatten() {
            // Its journal, or the mirror it took the shard over on (`journal-dir`).
            let kept = entry.path().join("journal").exists()
                || entry
                    .path()
                    .join(crate::ha::takeover::JOURNAL_DIR_FILE)
                    .exists();
            match entry.file_name().to_str().map(str::parse::<u16>) {
                Some(Ok(n)) if kept => shards.push(ShardId(n)),
                _ => {}
            }
        }
    }
    shards.retain(|s| *s != ha.shard);
    shards.sort_unstable();
    shards.dedup();
    shards
}
