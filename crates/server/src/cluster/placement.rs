//! [`ClusterPlacement`]: the engine's [`Placement`] in a cluster. It keeps a view of the
//! d.nodes (from their registrations in the metadata store), the pool and its placement-group
//! map, refreshed by a monitor thread that also marks d.nodes down and out:
//!
//! - **up**: registered (its lease is alive);
//! - **down**: its registration is gone (it died or lost etcd). It keeps its PG positions:
//!   reads of its chunks are reconstructed from the others, stripes are durable without its
//!   chunk (while min(k+1, k+m) others are written), and if it comes back before the grace
//!   period ends it rejoins and the repairer fills in what it missed;
//! - **out**: down for longer than the grace period, or marked out by an operator. Its
//!   positions move to other d.nodes (sticky rendezvous hashing, see [`crate::cluster::pgmap`])
//!   and the repairer rebuilds its chunks there.
//!
//! The PG map is written with compare-and-swap, so two c.nodes never clobber each other.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};
use weft_chunk::ChunkStore;
use weft_ec::Redundancy;
use weft_engine::stripe::Placement;
use weft_meta::{get_json, list_json, MetaStore};

use crate::cluster::chunk_io::{ChunkIoCounters, ChunkIoTotals, CountingChunkStore};
use crate::cluster::pgmap::{self, Candidate};
use crate::cluster::pool_tiers::{self, NodeTier, PoolTier};
use crate::cluster::records::{
    pgmap_key, pool_key, DiskRecord, DnodeAdmin, DnodeRecord, PgMap, PoolRecord, DNODES_PREFIX,
    DNODE_ADMIN_PREFIX, POOLS_PREFIX,
};
use crate::cluster::unregistered::{named_in_pgmaps, UnreachableStore};

/// Connects to a d.node: (node id, address) → its chunk store.
pub type Connector = dyn Fn(&str, SocketAddr) -> Arc<dyn ChunkStore> + Send + Sync;

/// How the c.node uses the cluster.
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// The pool new stripes go to.
    pub pool: String,
    /// Used when the pool does not exist yet (it is created).
    pub redundancy: Redundancy,
    pub pg_count: u32,
    /// A d.node down this long is marked out and its chunks are rebuilt elsewhere.
    pub out_grace: Duration,
    /// How often the view is refreshed from the metadata store.
    pub refresh_interval: Duration,
}

/// A d.node's state as this c.node sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    Up,
    Down,
    Out,
}

/// One d.node in the status report.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct NodeStatus {
    pub id: String,
    pub addr: String,
    pub zone: String,
    /// Its storage tier (`weft dnode --tier`; empty: none said).
    #[serde(default)]
    pub tier: String,
    pub state: NodeState,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    /// Seconds since it was last seen registered (down or out).
    pub down_for_s: Option<u64>,
    /// PG positions it holds.
    pub pg_positions: u64,
    /// Chunk requests this c.node sent it since start.
    pub chunk_io: ChunkIoTotals,
}

#[derive(Debug)]
struct NodeView {
    record: DnodeRecord,
    state: NodeState,
    down_since: Option<Instant>,
    admin_out: bool,
    store: Arc<dyn ChunkStore>,
    /// Chunk requests sent to it (kept when it reconnects at a new address).
    chunk_io: Arc<ChunkIoCounters>,
}

#[derive(Debug, Clone)]
struct PoolView {
    record: PoolRecord,
    redundancy: Redundancy,
    pgmap: PgMap,
}

#[derive(Debug, Default)]
struct View {
    nodes: BTreeMap<String, NodeView>,
    pools: BTreeMap<String, PoolView>,
    /// Families in a pool other than the default.
    families: std::collections::HashMap<u64, String>,
}

impl View {
    fn pool_of(&self, family: u64, default: &str) -> Option<&PoolView> {
        let name = self.families.get(&family).map_or(default, String::as_str);
        self.pools.get(name)
    }
}

/// A pool in the status report.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PoolStatus {
    pub name: String,
    pub redundancy: String,
    pub pg_count: u32,
    /// Chunks durable before a stripe is.
    pub min_size: u8,
    /// Its storage tier (`weft pool create --tier`; null: untiered, on every d.node).
    #[serde(default)]
    pub tier: Option<String>,
    /// Its prices for the tier, dollars per GB-month and IOPS-month (null: the tier book's).
    #[serde(default)]
    pub price_gb: Option<f64>,
    #[serde(default)]
    pub price_iops: Option<f64>,
    /// The d.nodes its placement groups use.
    #[serde(default)]
    pub dnodes: Vec<String>,
    pub pgmap_epoch: u64,
    /// PGs whose every position is on an up d.node.
    pub pgs_healthy: u64,
    /// PGs with a position on a down or out d.node (reads of it are reconstructed).
    pub pgs_degraded: u64,
    /// PGs with a position no d.node could take (too few d.nodes or failure domains).
    pub pgs_incomplete: u64,
}

/// The placement of a c.node in a cluster.
pub struct ClusterPlacement {
    kv: Arc<dyn MetaStore>,
    options: ClusterOptions,
    connect: Box<Connector>,
    view: RwLock<View>,
    /// Rises with every change of a d.node's state or of a PG map (see
    /// `Placement::generation`).
    generation: AtomicU64,
    stop: Arc<AtomicBool>,
    monitor: Mutex<Option<JoinHandle<()>>>,
    /// Down d.nodes become out after the grace period only once this is set (when the
    /// engine is open): while recovery waits for d.nodes, moving their positions would
    /// only send its reads to d.nodes that never had the chunks.
    grace_armed: AtomicBool,
    /// Each engine's epoch and the families it fenced at its start (one per shard this
    /// process owns): a d.node that registers later (it was down then) is fenced too before
    /// anything else is sent to it.
    fence: Mutex<Vec<(u64, Vec<u64>)>>,
    /// Stores connected since the last refresh, to fence.
    unfenced: Mutex<Vec<Arc<dyn ChunkStore>>>,
}

impl std::fmt::Debug for ClusterPlacement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterPlacement")
            .field("pool", &self.options.pool)
            .finish_non_exhaustive()
    }
}

impl ClusterPlacement {
    /// The cluster's metadata store.
    pub fn kv(&self) -> &Arc<dyn MetaStore> {
        &self.kv
    }

    /// Load the pool (creating it if absent), wait up to `wait_for` for at least k+m d.nodes
    /// to register (so the first PG map is balanced), then start the monitor.
    pub fn start(
        kv: Arc<dyn MetaStore>,
        options: ClusterOptions,
        connect: Box<Connector>,
        wait_for: Duration,
    ) -> anyhow::Result<Arc<ClusterPlacement>> {
        let placement = Arc::new(ClusterPlacement {
            kv,
            options,
            connect,
            view: RwLock::new(View::default()),
            generation: AtomicU64::new(1),
            stop: Arc::new(AtomicBool::new(false)),
            monitor: Mutex::new(None),
            grace_armed: AtomicBool::new(false),
            fence: Mutex::new(Vec::new()),
            unfenced: Mutex::new(Vec::new()),
        });
        let default = &placement.options;
        let created = placement.create_pool(
            &default.pool,
            default.redundancy,
            default.pg_count,
            None,
            None,
        );
        match created {
            Ok(()) | Err(CreatePoolError::Exists) => {}
            Err(e) => return Err(anyhow::anyhow!("pool {}: {e}", default.pool)),
        }
        let redundancy = placement.redundancy(0);
        let deadline = Instant::now() + wait_for;
        let width = usize::from(redundancy.total_chunks());
        loop {
            placement.refresh(false)?;
            let up = placement.count_up();
            if up >= width || Instant::now() >= deadline {
                if up < width {
                    tracing::warn!(up, needed = width, "fewer d.nodes than chunks per stripe: placement groups stay incomplete until more register");
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        placement.refresh(true)?;
        let weak = Arc::downgrade(&placement);
        let stop = placement.stop.clone();
        let interval = placement.options.refresh_interval;
        let handle = std::thread::Builder::new()
            .name("weft-cluster-monitor".into())
            .spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(interval);
                    let Some(p) = weak.upgrade() else { return };
                    if let Err(e) = p.refresh(true) {
                        tracing::warn!(error = %e, "cluster view refresh failed; keeping the last one");
                    }
                }
            })?;
        *placement.monitor.lock() = Some(handle);
        Ok(placement)
    }

    /// From now on, d.nodes down for longer than the grace period are marked out (their
    /// positions move and are rebuilt). Called once the engine has recovered.
    pub fn arm_out_grace(&self) {
        self.grace_armed.store(true, Ordering::Release);
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        if let Some(h) = self.monitor.lock().take() {
            let _ = h.join();
        }
    }

    fn count_up(&self) -> usize {
        self.view
            .read()
            .nodes
            .values()
            .filter(|n| n.state == NodeState::Up)
            .count()
    }

    /// Fence every d.node that registers from now on at `epoch` for `families` (those
    /// registered now were fenced by the caller).
    pub fn fence_late_comers(&self, epoch: u64, families: Vec<u64>) {
        let mut fence = self.fence.lock();
        if fence.is_empty() {
            // The first engine fenced every store connected so far.
            self.unfenced.lock().clear();
        }
        // Another engine's (a shard this process took besides its own): stores that
        // registered since are fenced at both epochs, each for its own families.
        fence.push((epoch, families));
    }

    /// Read registrations and admin marks, update node states, and (with `update_map`)
    /// recompute the PG map if the usable d.nodes changed; fence d.nodes that registered.
    pub fn refresh(&self, update_map: bool) -> anyhow::Result<()> {
        let result = self.refresh_view(update_map);
        let fence = self.fence.lock().clone();
        if !fence.is_empty() {
            let stores = std::mem::take(&mut *self.unfenced.lock());
            for store in stores {
                for (epoch, families) in &fence {
                    for &family in families {
                        if let Err(e) = store.fence(family, *epoch) {
                            tracing::warn!(store = store.name(), family, error = %e, "could not fence a family on a d.node that registered");
                        }
                    }
                }
            }
        }
        result
    }

    fn refresh_view(&self, update_map: bool) -> anyhow::Result<()> {
        let records = list_json::<DnodeRecord>(&*self.kv, DNODES_PREFIX)?;
        let admin = list_json::<DnodeAdmin>(&*self.kv, DNODE_ADMIN_PREFIX)?;
        let now = Instant::now();
        let mut view = self.view.write();
        let registered: BTreeMap<String, DnodeRecord> = records
            .into_iter()
            .map(|(_, r, _)| (r.id.clone(), r))
            .collect();
        for (id, record) in &registered {
            let addr: Option<SocketAddr> = record.addr.parse().ok();
            let changed = view
                .nodes
                .get(id)
                .is_none_or(|n| n.record.addr != record.addr);
            if changed {
                let Some(addr) = addr else {
                    tracing::warn!(node = %id, addr = %record.addr, "d.node registered an unusable address");
                    continue;
                };
                let chunk_io = view
                    .nodes
                    .get(id)
                    .map(|n| Arc::clone(&n.chunk_io))
                    .unwrap_or_default();
                let store: Arc<dyn ChunkStore> = Arc::new(CountingChunkStore::new(
                    (self.connect)(id, addr),
                    Arc::clone(&chunk_io),
                ));
                self.generation.fetch_add(1, Ordering::AcqRel);
                self.unfenced.lock().push(Arc::clone(&store));
                view.nodes.insert(
                    id.clone(),
                    NodeView {
                        record: record.clone(),
                        state: NodeState::Up,
                        down_since: None,
                        admin_out: false,
                        store,
                        chunk_io,
                    },
                );
            } else if let Some(n) = view.nodes.get_mut(id) {
                n.record = record.clone();
            }
        }
        // D.nodes the placement-group maps name but that are not registered: down since
        // this c.node started. They keep their positions until the grace period runs out,
        // and listings count them as not answering (absence on them proves nothing).
        for id in named_in_pgmaps(&*self.kv)? {
            if view.nodes.contains_key(&id) || registered.contains_key(&id) {
                continue;
            }
            tracing::warn!(node = %id, "d.node named by the placement-group map is not registered: down; its positions are kept for the grace period");
            view.nodes.insert(
                id.clone(),
                NodeView {
                    record: DnodeRecord {
                        id: id.clone(),
                        addr: String::new(),
                        zone: String::new(),
                        disks: Vec::new(),
                        tier: String::new(),
                    },
                    state: NodeState::Down,
                    down_since: Some(now),
                    admin_out: false,
                    store: Arc::new(UnreachableStore(id.clone())),
                    chunk_io: Arc::default(),
                },
            );
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
        let grace_armed = self.grace_armed.load(Ordering::Acquire);
        for (id, n) in view.nodes.iter_mut() {
            n.admin_out = admin
                .iter()
                .any(|(key, a, _)| key.ends_with(&format!("/{id}")) && a.out);
            if registered.contains_key(id) {
                n.down_since = None;
            } else if n.down_since.is_none() {
                tracing::warn!(node = %id, "d.node down: its chunks are read from the others");
                n.down_since = Some(now);
            }
            let state = match n.down_since {
                _ if n.admin_out => NodeState::Out,
                None => NodeState::Up,
                Some(since)
                    if grace_armed && now.duration_since(since) >= self.options.out_grace =>
                {
                    NodeState::Out
                }
                Some(_) => NodeState::Down,
            };
            if state != n.state {
                tracing::info!(node = %id, from = ?n.state, to = ?state, "d.node state");
                if state == NodeState::Up {
                    // Back: whatever backoff its link is in no longer holds (the repairer's
                    // next listing must reach it).
                    n.store.reconnect_now();
                }
                n.state = state;
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
        }
        // Pools and their PG maps as stored (another c.node may have changed them).
        let pools = list_json::<PoolRecord>(&*self.kv, POOLS_PREFIX)?;
        let mut stored_maps = BTreeMap::new();
        for (_, record, _) in pools {
            let Ok(redundancy) = Redundancy::parse(&record.redundancy) else {
                tracing::warn!(pool = %record.name, redundancy = %record.redundancy, "pool with an unknown redundancy; ignored");
                continue;
            };
            let stored = get_json::<PgMap>(&*self.kv, &pgmap_key(&record.name))?;
            let pgmap = stored.as_ref().map(|(m, _)| m.clone()).unwrap_or_default();
            if view
                .pools
                .get(&record.name)
                .is_none_or(|p| p.pgmap.epoch != pgmap.epoch)
            {
                self.generation.fetch_add(1, Ordering::AcqRel);
            }
            stored_maps.insert(record.name.clone(), stored);
            view.pools.insert(
                record.name.clone(),
                PoolView {
                    record,
                    redundancy,
                    pgmap,
                },
            );
        }
        if !update_map {
            return Ok(());
        }
        if view.nodes.values().all(|n| n.state == NodeState::Out) {
            return Ok(());
        }
        // Once any d.node says its tier, a tiered pool is placed on its tier's d.nodes only.
        let tiered_cluster = view.nodes.values().any(|n| !n.record.tier.is_empty());
        for (name, stored) in stored_maps {
            let Some(pool) = view.pools.get(&name).cloned() else {
                continue;
            };
            let previous = stored.as_ref().map(|(m, _)| m);
            let placed: std::collections::HashSet<&str> = previous
                .map(|m| {
                    m.pgs
                        .iter()
                        .flatten()
                        .flatten()
                        .map(String::as_str)
                        .collect()
                })
                .unwrap_or_default();
            let usable: Vec<Candidate> = view
                .nodes
                .values()
                .filter(|n| n.state != NodeState::Out)
                .filter(|n| {
                    let node = NodeTier {
                        tier: &n.record.tier,
                        unknown: n.record.addr.is_empty(),
                        placed: placed.contains(n.record.id.as_str()),
                    };
                    pool_tiers::eligible(pool.record.tier.as_deref(), node, tiered_cluster)
                })
                .map(|n| Candidate {
                    id: n.record.id.clone(),
                    zone: n.record.zone.clone(),
                })
                .collect();
            if usable.is_empty() && previous.is_some() {
                continue; // keep its positions until a d.node of its tier is usable
            }
            let next = pgmap::compute(
                &name,
                pool.record.pg_count,
                usize::from(pool.redundancy.total_chunks()),
                &usable,
                previous,
            );
            if previous == Some(&next) {
                continue;
            }
            let expected = stored.as_ref().map_or(0, |(_, rev)| *rev);
            match weft_meta::cas_json(&*self.kv, &pgmap_key(&name), expected, &next, None) {
                Ok(_) => {
                    tracing::info!(pool = %name, epoch = next.epoch, "placement-group map updated");
                    if let Some(p) = view.pools.get_mut(&name) {
                        p.pgmap = next;
                    }
                    self.generation.fetch_add(1, Ordering::AcqRel);
                }
                Err(weft_meta::MetaError::Conflict { .. }) => {} // another c.node did; next round
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Create a pool (refused if one of that name exists), of a storage tier if given.
    pub fn create_pool(
        &self,
        name: &str,
        redundancy: Redundancy,
        pg_count: u32,
        min_size: Option<u8>,
        tier: Option<PoolTier>,
    ) -> Result<(), CreatePoolError> {
        if let Some(t) = &tier {
            let pools: Vec<PoolRecord> = list_json::<PoolRecord>(&*self.kv, POOLS_PREFIX)
                .map_err(|e| CreatePoolError::Meta(e.to_string()))?
                .into_iter()
                .map(|(_, p, _)| p)
                .collect();
            t.check(&pools).map_err(CreatePoolError::Invalid)?;
        }
        if let Some(m) = min_size {
            let (low, high) = (redundancy.min_durable_chunks(), redundancy.total_chunks());
            if !(low..=high).contains(&m) {
                return Err(CreatePoolError::Invalid(format!(
                    "min size for {redundancy} must be {low}..={high}"
                )));
            }
        }
        if name.is_empty()
            || name.len() > 64
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        {
            return Err(CreatePoolError::Invalid(
                "pool names are 1-64 characters from [A-Za-z0-9._-]".into(),
            ));
        }
        if !(1..=PG_COUNT_MAX).contains(&pg_count) {
            return Err(CreatePoolError::Invalid(format!(
                "pg count must be 1..={PG_COUNT_MAX}"
            )));
        }
        let record = PoolRecord {
            name: name.to_string(),
            redundancy: redundancy.to_string(),
            pg_count,
            min_size,
            price_gb: tier.as_ref().and_then(|t| t.prices).map(|p| p.price_gb),
            price_iops: tier.as_ref().and_then(|t| t.prices).map(|p| p.price_iops),
            tier: tier.map(|t| t.name),
        };
        match weft_meta::cas_json(&*self.kv, &pool_key(name), 0, &record, None) {
            Ok(_) => {}
            Err(weft_meta::MetaError::Conflict { .. }) => return Err(CreatePoolError::Exists),
            Err(e) => return Err(CreatePoolError::Meta(e.to_string())),
        }
        // The monitor computes its PG map at its next round (the caller of `start` right
        // after waiting for enough d.nodes, so the first map is balanced).
        self.refresh(false)
            .map_err(|e| CreatePoolError::Meta(e.to_string()))
    }

    /// Every pool with the health of its PGs.
    pub fn pools(&self) -> Vec<PoolStatus> {
        let view = self.view.read();
        view.pools
            .values()
            .map(|p| {
                let (mut healthy, mut degraded, mut incomplete) = (0, 0, 0);
                for pg in &p.pgmap.pgs {
                    if pg.iter().any(Option::is_none) {
                        incomplete += 1;
                    } else if pg
                        .iter()
                        .flatten()
                        .all(|id| view.nodes.get(id).is_some_and(|n| n.state == NodeState::Up))
                    {
                        healthy += 1;
                    } else {
                        degraded += 1;
                    }
                }
                PoolStatus {
                    name: p.record.name.clone(),
                    redundancy: p.record.redundancy.clone(),
                    pg_count: p.record.pg_count,
                    min_size: p
                        .record
                        .min_size
                        .unwrap_or_else(|| p.redundancy.min_durable_chunks()),
                    tier: p.record.tier.clone(),
                    price_gb: p.record.price_gb,
                    price_iops: p.record.price_iops,
                    dnodes: p
                        .pgmap
                        .pgs
                        .iter()
                        .flatten()
                        .flatten()
                        .cloned()
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    pgmap_epoch: p.pgmap.epoch,
                    pgs_healthy: healthy,
                    pgs_degraded: degraded,
                    pgs_incomplete: incomplete,
                }
            })
            .collect()
    }

    /// Mark a d.node out (its chunks are rebuilt elsewhere) or back in.
    pub fn set_out(&self, id: &str, out: bool) -> anyhow::Result<()> {
        if !self.view.read().nodes.contains_key(id) {
            anyhow::bail!("no d.node {id:?}");
        }
        let key = crate::cluster::records::dnode_admin_key(id);
        if out {
            weft_meta::update_json(&*self.kv, &key, |_: Option<DnodeAdmin>| {
                Ok::<_, weft_meta::MetaError>(DnodeAdmin { out: true })
            })?;
        } else {
            self.kv.delete(&key)?;
        }
        self.refresh(true)
    }

    /// Placement groups where the up d.node `id` holds a position and fewer than k of the
    /// others are up: marking it out would leave their stripes unreadable and unrebuildable
    /// until the others return (it may hold the only readable copy).
    pub fn pgs_needing(&self, id: &str) -> u64 {
        let view = self.view.read();
        if view.nodes.get(id).is_none_or(|n| n.state != NodeState::Up) {
            return 0;
        }
        let mut count = 0;
        for pool in view.pools.values() {
            let k = usize::from(pool.redundancy.data_chunks());
            for pg in &pool.pgmap.pgs {
                if !pg.iter().flatten().any(|p| p == id) {
                    continue;
                }
                let others_up = pg
                    .iter()
                    .flatten()
                    .filter(|p| p.as_str() != id)
                    .filter(|p| view.nodes.get(*p).is_some_and(|n| n.state == NodeState::Up))
                    .count();
                if others_up < k {
                    count += 1;
                }
            }
        }
        count
    }

    /// The pool a family's stripes go to (the default pool unless the family was bound to
    /// another), as stored.
    pub fn pool_of_family(&self, family: u64) -> Option<PoolRecord> {
        self.view
            .read()
            .pool_of(family, &self.options.pool)
            .map(|p| p.record.clone())
    }

    /// Every pool's record, as last read.
    pub fn pool_records(&self) -> Vec<PoolRecord> {
        self.view
            .read()
            .pools
            .values()
            .map(|p| p.record.clone())
            .collect()
    }

    /// The disks of every up d.node, as last registered (for the capacity report).
    pub fn up_disks(&self) -> Vec<(String, Vec<DiskRecord>)> {
        self.view
            .read()
            .nodes
            .values()
            .filter(|n| n.state == NodeState::Up)
            .map(|n| (n.record.id.clone(), n.record.disks.clone()))
            .collect()
    }

    /// Every d.node this c.node knows, with its state.
    pub fn nodes(&self) -> Vec<NodeStatus> {
        let view = self.view.read();
        let now = Instant::now();
        view.nodes
            .values()
            .map(|n| NodeStatus {
                id: n.record.id.clone(),
                addr: n.record.addr.clone(),
                zone: n.record.zone.clone(),
                tier: n.record.tier.clone(),
                state: n.state,
                capacity_bytes: n.record.capacity_bytes(),
                used_bytes: n.record.used_bytes(),
                down_for_s: n.down_since.map(|s| now.duration_since(s).as_secs()),
                pg_positions: view
                    .pools
                    .values()
                    .flat_map(|p| p.pgmap.pgs.iter().flatten())
                    .filter(|p| p.as_deref() == Some(n.record.id.as_str()))
                    .count() as u64,
                chunk_io: n.chunk_io.totals(),
            })
            .collect()
    }
}

impl Drop for ClusterPlacement {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

impl Placement for ClusterPlacement {
    fn redundancy(&self, family: u64) -> Redundancy {
        self.view
            .read()
            .pool_of(family, &self.options.pool)
            .map_or(self.options.redundancy, |p| p.redundancy)
    }

    fn stores(
        &self,
        family: u64,
        segment: u64,
        redundancy: Redundancy,
    ) -> Vec<Option<Arc<dyn ChunkStore>>> {
        let view = self.view.read();
        let width = usize::from(redundancy.total_chunks());
        let Some(pool) = view.pool_of(family, &self.options.pool) else {
            return vec![None; width];
        };
        let pg_count = u32::try_from(pool.pgmap.pgs.len()).unwrap_or(0);
        if pg_count == 0 {
            return vec![None; width];
        }
        let pg = &pool.pgmap.pgs[pgmap::pg_of(family, segment, pg_count) as usize];
        (0..width)
            .map(|i| {
                pg.get(i)
                    .cloned()
                    .flatten()
                    .and_then(|id| view.nodes.get(&id))
                    .map(|n| n.store.clone())
            })
            .collect()
    }

    fn all_stores(&self) -> Vec<Arc<dyn ChunkStore>> {
        self.view
            .read()
            .nodes
            .values()
            .filter(|n| n.state != NodeState::Out)
            .map(|n| n.store.clone())
            .collect()
    }

    fn listing_stores(&self) -> Vec<Arc<dyn ChunkStore>> {
        // Out d.nodes too: until the repairer has rebuilt their chunks elsewhere they may
        // hold the only copies.
        self.view
            .read()
            .nodes
            .values()
            .map(|n| n.store.clone())
            .collect()
    }

    fn min_durable_chunks(&self, family: u64, redundancy: Redundancy) -> u8 {
        self.view
            .read()
            .pool_of(family, &self.options.pool)
            .and_then(|p| p.record.min_size)
            .unwrap_or_else(|| redundancy.min_durable_chunks())
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    fn bind_family(&self, family: u64, pool: &str) -> Result<(), String> {
        if !self.view.read().pools.contains_key(pool) {
            let _ = self.refresh(false);
        }
        let mut view = self.view.write();
        if !view.pools.contains_key(pool) {
            return Err("no such pool (weft pool list)".into());
        }
        view.families.insert(family, pool.to_string());
        Ok(())
    }

    fn space(&self) -> (Option<u64>, u64) {
        let view = self.view.read();
        let (capacity, used) = super::raw_space::raw_space(
            view.nodes
                .values()
                .filter(|n| n.state == NodeState::Up)
                .flat_map(|n| n.record.disks.iter()),
        );
        // Capacity is raw: a pool's usable share is capacity × k / (k + m).
        ((capacity > 0).then_some(capacity), used)
    }
}

/// Why a pool was not created.
#[derive(Debug, thiserror::Error)]
pub enum CreatePoolError {
    #[error("a pool of that name exists")]
    Exists,
    #[error("{0}")]
    Invalid(String),
    #[error("metadata store: {0}")]
    Meta(String),
}

/// Placement groups per pool at most: bounds the PG map (a few hundred KB in etcd).
pub const PG_COUNT_MAX: u32 = 4096;
