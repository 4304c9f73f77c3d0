//! [`Dnode`]: a running d.node. `start` validates the config, reads (or creates) the node id,
//! opens the data dirs, binds the listener, and starts the worker pool, the acceptor, the
//! registration thread and the background scrubber; `shutdown` (or drop) stops all of them in
//! order: deregister, stop accepting, close connections, drain the workers, stop the scrubber.
//!
//! Nothing here serves or stores: this module only wires the parts together and owns their
//! lifetimes.

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{SystemTime, UNIX_EPOCH};

use weft_chunk::ChunkError;
use weft_meta::MetaStore;

use crate::config::DnodeConfig;
use crate::connection::ServeContext;
use crate::error::DnodeError;
use crate::handler::Handler;
use crate::multi_disk::MultiDiskStore;
use crate::node_id;
use crate::pool::WorkerPool;
use crate::record::{DiskRecord, DnodeRecord};
use crate::registration::{RecordFn, Registration};
use crate::scrubber::Scrubber;
use crate::server::Server;
use crate::stats::{Counters, DnodeStats};
use crate::stop::Stop;

/// A running d.node. Dropping it shuts it down as [`Dnode::shutdown`] does.
#[derive(Debug)]
pub struct Dnode {
    node_id: String,
    local_addr: SocketAddr,
    advertised: SocketAddr,
    store: Arc<MultiDiskStore>,
    scrubber: Arc<Scrubber>,
    counters: Arc<Counters>,
    stop: Arc<Stop>,
    // Parts that run, in shutdown order; `None` once stopped (or never started).
    registration: Option<Registration>,
    server: Option<Server>,
    pool: Option<Arc<WorkerPool>>,
    background_scrub: Option<JoinHandle<()>>,
}

impl Dnode {
    /// Start a d.node: serve the data dirs of `config` on its listen address and register in
    /// `meta`. Fails on a bad config, a data dir or node id file that cannot be used, or an
    /// address that cannot be bound; the metadata store being down is not fatal (registration
    /// retries in the background).
    pub fn start(config: DnodeConfig, meta: Arc<dyn MetaStore>) -> Result<Dnode, DnodeError> {
        config.validate()?;
        let node_id = node_id::load_or_create(&config.data_dirs[0])?;
        let store = Arc::new(MultiDiskStore::open(
            &config.data_dirs,
            config.capacity_bytes,
            config.direct_io,
        )?);
        let listener = TcpListener::bind(config.listen).map_err(|e| DnodeError::Bind {
            addr: config.listen,
            source: e,
        })?;
        let local_addr = listener.local_addr().map_err(|e| DnodeError::Bind {
            addr: config.listen,
            source: e,
        })?;
        let advertised = config.advertise.unwrap_or(local_addr);
        if advertised.ip().is_unspecified() {
            tracing::warn!(addr = %advertised, "advertising a wildcard address: set advertise so c.nodes can connect");
        }
        let counters = Arc::new(Counters::default());
        let scrubber = Arc::new(Scrubber::new(store.clone(), counters.clone()));
        let stop = Arc::new(Stop::default());
        let mut dnode = Dnode {
            node_id: node_id.clone(),
            local_addr,
            advertised,
            store: store.clone(),
            scrubber: scrubber.clone(),
            counters: counters.clone(),
            stop: stop.clone(),
            registration: None,
            server: None,
            pool: None,
            background_scrub: None,
        };
        // From here on, an early return drops `dnode`, which stops what was started.
        let pool = Arc::new(WorkerPool::start(config.workers)?);
        dnode.pool = Some(pool.clone());
        let cx = Arc::new(ServeContext {
            cluster_id: config.cluster_id.clone(),
            connections_max: config.connections_max,
            handler: Arc::new(Handler {
                node_id: node_id.clone(),
                store: store.clone(),
                scrubber: scrubber.clone(),
            }),
            pool,
            counters,
        });
        dnode.server = Some(Server::start(listener, cx, stop.clone())?);
        if let Some(interval) = config.scrub_interval {
            let (scrubber, stop) = (scrubber.clone(), stop.clone());
            let thread = std::thread::Builder::new()
                .name("weft-dnode-scrub".into())
                .spawn(move || scrubber.run(interval, &stop))
                .map_err(|e| DnodeError::Thread {
                    name: "scrubber",
                    source: e,
                })?;
            dnode.background_scrub = Some(thread);
        }
        let started_unix_s = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let record_fn: RecordFn = {
            let (store, id, zone) = (store, node_id.clone(), config.zone.clone());
            let tier = config.tier.clone();
            Box::new(move || DnodeRecord {
                id: id.clone(),
                addr: advertised,
                zone: zone.clone(),
                disks: disk_records(&store),
                started_unix_s,
                tier: tier.clone(),
            })
        };
        dnode.registration = Some(Registration::start(
            meta,
            &node_id,
            record_fn,
            config.lease_ttl,
            config.stat_interval,
            stop,
        )?);
        tracing::info!(
            node_id = %node_id,
            addr = %local_addr,
            advertised = %advertised,
            cluster = %config.cluster_id,
            zone = %config.zone,
            tier = %config.tier,
            disks = config.data_dirs.len(),
            workers = config.workers,
            "d.node started"
        );
        Ok(dnode)
    }

    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The bound address (the real port when the config asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// The address in the registration record.
    pub fn advertised_addr(&self) -> SocketAddr {
        self.advertised
    }

    /// The store the d.node serves (for tools and tests that look behind the protocol).
    pub fn store(&self) -> Arc<MultiDiskStore> {
        self.store.clone()
    }

    pub fn stats(&self) -> DnodeStats {
        self.counters.snapshot()
    }

    /// Scrub now, as a `Scrub` request would (counted in [`Dnode::stats`]).
    pub fn scrub(&self, family: Option<u64>) -> Result<weft_chunk::ScrubReport, ChunkError> {
        self.scrubber.scrub(family)
    }

    /// Stop everything and revoke the registration (the record disappears at once). Waits for
    /// requests being executed and for a background scrub's current family.
    pub fn shutdown(mut self) {
        self.stop_all(true);
    }

    /// Stop serving and refreshing the lease *without* revoking it, as a crash would: the
    /// record stays until the lease expires. For failure tests.
    pub fn abandon(mut self) {
        self.stop_all(false);
    }

    fn stop_all(&mut self, revoke: bool) {
        let running = self.server.is_some() || self.registration.is_some();
        // Deregister first: c.nodes stop choosing this d.node while it still answers.
        if let Some(mut registration) = self.registration.take() {
            registration.finish(revoke);
        }
        self.stop.stop();
        if let Some(mut server) = self.server.take() {
            server.shutdown();
        }
        if let Some(pool) = self.pool.take() {
            pool.shutdown();
        }
        if let Some(scrub) = self.background_scrub.take() {
            let _ = scrub.join();
        }
        if running {
            tracing::info!(node_id = %self.node_id, revoked = revoke, "d.node stopped");
        }
    }
}

impl Drop for Dnode {
    fn drop(&mut self) {
        self.stop_all(true);
    }
}

fn disk_records(store: &MultiDiskStore) -> Vec<DiskRecord> {
    match store.disks() {
        Ok(disks) => disks
            .into_iter()
            .map(|d| DiskRecord {
                path: d.path,
                capacity_bytes: d.capacity_bytes,
                used_bytes: d.stat.used_bytes,
                chunks: d.stat.chunks,
                limit_bytes: d.stat.capacity_bytes,
                fs_id: d.fs.as_ref().map(|f| f.fs_id.clone()).unwrap_or_default(),
                fs_size_bytes: d.fs.as_ref().map_or(0, |f| f.size_bytes),
                fs_free_bytes: d.fs.as_ref().map_or(0, |f| f.free_bytes),
            })
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read disk usage for the registration record");
            Vec::new()
        }
    }
}
