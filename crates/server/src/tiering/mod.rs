//! Tiering, first half: heat per volume and extent ([`heat`]), kept across restarts
//! ([`heat_file`]) and, in a cluster, across a failover ([`heat_etcd`]), tiers and their
//! prices ([`prices`]), and the advisor's cost model
//! ([`advisor`]) served at `GET /api/v1/tiers/advice` (`crate::api`'s `tiers` module).
//!
//! [`Tiering`] owns the heat of every volume this c.node serves and the tier book. The engine
//! backend (`engine_backend.rs`, where every protocol's I/O reaches the engine on the c.node
//! that owns the volume, forwarded I/O included) records each read and write into the
//! volume's [`VolumeHeat`]; a thread ([`Tiering::start`]) folds the counts every minute and
//! writes the heat file every persist interval (60 s by default) and at shutdown.
//!
//! The local store of `weft serve` has one tier (`--tier`, `performance` by default); every
//! extent of every volume is on it. Moving cold extents to a capacity tier is the mover's job,
//! designed in docs/ARCHITECTURE.md ("Tiering: heat and the advisor") and not built yet.

pub mod advisor;
pub mod heat;
pub mod heat_etcd;
pub mod heat_file;
pub mod metrics;
pub mod prices;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

pub use heat::{VolumeHeat, Window};
pub use prices::{TierBook, TierPrices};

/// How a server counts heat and which tier its local store is.
#[derive(Debug, Clone)]
pub struct TieringConfig {
    /// The tier of this server's store.
    pub tier: String,
    /// Its prices, when given (otherwise the tier book's, or the defaults).
    pub prices: Option<TierPrices>,
    /// Heat is counted per extent of this size.
    pub extent_bytes: u64,
    /// The heat file is rewritten this often (and at shutdown).
    pub persist_interval: Duration,
}

impl Default for TieringConfig {
    fn default() -> Self {
        TieringConfig {
            tier: prices::PERFORMANCE.to_string(),
            prices: None,
            extent_bytes: heat::DEFAULT_EXTENT_BYTES,
            persist_interval: Duration::from_secs(60),
        }
    }
}

/// The heat of every volume and the tier book.
#[derive(Debug, Default)]
pub struct Tiering {
    pub config: TieringConfig,
    /// Where the heat file and tiers.json live (`None`: kept in memory only).
    dir: Option<PathBuf>,
    volumes: RwLock<HashMap<String, Arc<VolumeHeat>>>,
    book: Mutex<TierBook>,
    stop: AtomicBool,
    /// The shard's heat in etcd: a c.node of a cluster, once it owns its shard.
    etcd: Mutex<Option<heat_etcd::HeatMirror>>,
}

/// The unix time in seconds.
pub fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl Tiering {
    /// Loads the tier book and the heat file of `dir`; the configured tier's prices, when
    /// given, replace the book's.
    pub fn open(dir: PathBuf, config: TieringConfig) -> anyhow::Result<Arc<Tiering>> {
        prices::check_tier_name(&config.tier).map_err(anyhow::Error::msg)?;
        anyhow::ensure!(
            config.extent_bytes >= 1 << 20 && config.extent_bytes.is_power_of_two(),
            "--heat-extent-size must be a power of two of at least 1M"
        );
        let mut book = TierBook::load(&dir)?;
        if let Some(p) = config.prices {
            p.check().map_err(anyhow::Error::msg)?;
            book.tiers.insert(config.tier.clone(), p);
            book.save(&dir)?;
        }
        anyhow::ensure!(
            book.tiers.contains_key(&config.tier),
            "the tier {:?} has no prices: give --price-gb and --price-iops",
            config.tier
        );
        let mut volumes = HashMap::new();
        for saved in heat_file::load(&dir) {
            if saved.extent_bytes != config.extent_bytes {
                tracing::warn!(
                    volume = %saved.name,
                    "the heat extent size changed: the volume's heat starts afresh"
                );
                continue;
            }
            let size = saved.folded.rings.len() as u64 * saved.extent_bytes;
            let heat = VolumeHeat::restore(saved.extent_bytes, size, saved.folded);
            volumes.insert(saved.name, Arc::new(heat));
        }
        Ok(Arc::new(Tiering {
            config,
            dir: Some(dir),
            volumes: RwLock::new(volumes),
            book: Mutex::new(book),
            stop: AtomicBool::new(false),
            etcd: Mutex::new(None),
        }))
    }

    /// From now on the heat is kept in etcd too (a c.node that owns its shard); first, each
    /// volume's heat in etcd folded later than this c.node's own is taken (a takeover: the
    /// old owner's counts).
    pub fn attach_etcd(&self, mirror: heat_etcd::HeatMirror) {
        let mut taken = 0;
        {
            let mut volumes = self.volumes.write();
            for saved in mirror.load() {
                if saved.extent_bytes != self.config.extent_bytes {
                    tracing::warn!(
                        volume = %saved.name,
                        "the heat in etcd has another extent size: not taken"
                    );
                    continue;
                }
                let newer = volumes
                    .get(&saved.name)
                    .is_none_or(|v| v.folded_s() < saved.folded.folded_s);
                if newer {
                    let size = saved.folded.rings.len() as u64 * saved.extent_bytes;
                    let heat = VolumeHeat::restore(saved.extent_bytes, size, saved.folded);
                    volumes.insert(saved.name, Arc::new(heat));
                    taken += 1;
                }
            }
        }
        tracing::info!(volumes = taken, "heat taken from etcd");
        *self.etcd.lock() = Some(mirror);
    }

    /// The heat of a volume, counted from now if it has none yet.
    pub fn volume(&self, name: &str, size_bytes: u64) -> Arc<VolumeHeat> {
        if let Some(h) = self.volumes.read().get(name) {
            return Arc::clone(h);
        }
        let mut volumes = self.volumes.write();
        Arc::clone(volumes.entry(name.to_string()).or_insert_with(|| {
            Arc::new(VolumeHeat::new(
                self.config.extent_bytes.max(1),
                size_bytes,
                now_s(),
            ))
        }))
    }

    /// The heat of a volume, if it has any.
    pub fn existing(&self, name: &str) -> Option<Arc<VolumeHeat>> {
        self.volumes.read().get(name).cloned()
    }

    /// Forgets volumes that no longer exist.
    pub fn retain(&self, existing: &HashSet<String>) {
        self.volumes
            .write()
            .retain(|name, _| existing.contains(name));
    }

    /// Extents counted, over every volume.
    pub fn extents(&self) -> u64 {
        self.volumes
            .read()
            .values()
            .map(|v| v.extent_count() as u64)
            .sum()
    }

    /// Reads and writes per second over each window (hour, day, week), every volume.
    pub fn iops(&self, now: u64) -> [f64; 3] {
        let volumes: Vec<_> = self.volumes.read().values().cloned().collect();
        let mut out = [0.0; 3];
        for v in volumes {
            let (started, readings) = v.read(now);
            for w in Window::ALL {
                let ops: u64 = readings
                    .iter()
                    .map(|r| r.ops[w.index()].reads + r.ops[w.index()].writes)
                    .sum();
                out[w.index()] += ops as f64 / w.covered_s(now, started) as f64;
            }
        }
        out
    }

    pub fn volume_count(&self) -> usize {
        self.volumes.read().len()
    }

    pub fn book(&self) -> TierBook {
        self.book.lock().clone()
    }

    /// Sets a tier's prices and saves the book.
    pub fn set_prices(&self, name: &str, p: TierPrices) -> Result<(), String> {
        prices::check_tier_name(name)?;
        p.check()?;
        let mut book = self.book.lock();
        book.tiers.insert(name.to_string(), p);
        if let Some(dir) = &self.dir {
            book.save(dir).map_err(|e| format!("{e:#}"))?;
        }
        Ok(())
    }

    /// Folds every volume at `now`.
    pub fn fold(&self, now: u64) {
        let volumes: Vec<_> = self.volumes.read().values().cloned().collect();
        for v in volumes {
            v.fold(now);
        }
    }

    /// Writes the heat file, and the heat in etcd when attached (volumes with nothing counted
    /// are left out).
    pub fn persist(&self, now: u64) -> anyhow::Result<()> {
        let volumes: Vec<_> = self
            .volumes
            .read()
            .iter()
            .map(|(n, v)| (n.clone(), Arc::clone(v)))
            .collect();
        let mut saved = Vec::new();
        for (name, v) in volumes {
            let folded = v.snapshot(now);
            if !v.is_cold() {
                saved.push(heat_file::SavedVolume {
                    name,
                    extent_bytes: v.extent_bytes(),
                    folded,
                });
            }
        }
        saved.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(mirror) = &*self.etcd.lock() {
            if let Err(e) = mirror.save(&saved) {
                tracing::warn!("writing the heat to etcd: {e:#}");
            }
        }
        match &self.dir {
            Some(dir) => heat_file::save(dir, &saved),
            None => Ok(()),
        }
    }

    /// Folds every minute (or persist interval, if shorter) and persists every persist
    /// interval, on its own thread, until [`Tiering::stop`]; `existing` lists the volumes
    /// that exist (the heat of deleted ones is dropped).
    pub fn start(
        self: &Arc<Self>,
        existing: impl Fn() -> HashSet<String> + Send + 'static,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let tiering = Arc::clone(self);
        let persist_every = self.config.persist_interval.max(Duration::from_millis(100));
        let fold_every = persist_every.min(Duration::from_secs(60));
        std::thread::Builder::new()
            .name("weft-heat".into())
            .spawn(move || {
                let mut next_fold = Instant::now() + fold_every;
                let mut next_persist = Instant::now() + persist_every;
                while !tiering.stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(100));
                    let now = Instant::now();
                    if now >= next_fold {
                        tiering.fold(now_s());
                        next_fold = now + fold_every;
                    }
                    if now >= next_persist {
                        tiering.retain(&existing());
                        if let Err(e) = tiering.persist(now_s()) {
                            tracing::warn!("writing the heat file: {e:#}");
                        }
                        next_persist = now + persist_every;
                    }
                }
            })
    }

    /// Stops the thread (within 100 ms); the caller persists once more after joining it.
    /// [`Tiering::start`] over the writable volumes of `engine`.
    pub fn start_for(
        self: &Arc<Self>,
        engine: Arc<weft_engine::Engine>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        self.start(move || {
            engine
                .list_images()
                .into_iter()
                .filter(|i| !i.read_only)
                .map(|i| i.name)
                .collect()
        })
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
    }
}
