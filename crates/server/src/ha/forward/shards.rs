//! Every c.node serves every shard's volumes: the export backend of a c.node in a cluster of
//! several shards. Its own shard's exports go through its [`RoutedBackend`] (its engine once it
//! owns the shard, its shard's owner until then); every other shard's go to that shard's owner
//! over the forward protocol, through a [`RoutedBackend`] of their own that never serves
//! locally.
//!
//! ```text
//!  host --NBD/iSCSI--> c.node of shard 0 -- ShardRouter --+-- shard 0: RoutedBackend (own engine / owner)
//!                                                         +-- shard 1: RoutedBackend --FORWARD--> shard 1's owner
//!                                                         +-- shard 2: ...
//! ```
//!
//! Which shards exist is read from the c.node registrations every [`DISCOVER_INTERVAL`]
//! (shard 0 always: it is the cluster of old); each shard's exports, hosts and owner from its
//! own catalog document ([`ClusterView`]). Names are unique across shards (the name claims of
//! `weft_engine::name_claims`), so an export name says its shard; while a rename or delete
//! races the views, the own shard's listing wins. A shard whose c.nodes are all down and were
//! never seen by this c.node since it started is not listed until one of them registers.
//!
//! Access rules: the hosts of every shard's catalog merged by host name
//! ([`crate::access::merge_hosts`]): a host is defined in shard 0's catalog (the cluster's host
//! catalog) and every shard maps its own exports to it, under LUN numbers claimed across
//! shards (`weft_engine::hosts`, its `luns` module). An export is mapped only in its own
//! shard's catalog, so the rules per export are exact, and an initiator sees its LUNs of every
//! shard through every c.node.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use weft_engine::ShardId;
use weft_meta::MetaStore;

use super::local::LocalSlot;
use super::routed::RoutedBackend;
use super::view::ClusterView;
use crate::access::AccessTable;
use crate::backend::{ExportBackend, ExportHandle, ExportInfo, OpenError};
use crate::target_port_groups::Ownership;

/// How often the registrations are read for shards not seen yet.
pub const DISCOVER_INTERVAL: Duration = Duration::from_secs(2);

/// What a routed backend for another shard needs besides its view.
#[derive(Debug, Clone)]
struct Forwarding {
    me: String,
    secret: String,
    retry_for: Duration,
    stale_after: Duration,
}

/// Another shard: its catalog as read, and the backend forwarding to its owner (or serving
/// from this process's engine of that shard, once `local` is set).
#[derive(Debug)]
struct OtherShard {
    view: Arc<ClusterView>,
    backend: RoutedBackend,
    local: Arc<LocalSlot>,
}

/// See the module doc.
#[derive(Debug)]
pub struct ShardRouter {
    own_shard: ShardId,
    own: RoutedBackend,
    kv: Arc<dyn MetaStore>,
    forwarding: Forwarding,
    others: Mutex<BTreeMap<ShardId, Arc<OtherShard>>>,
    /// The merged access table and the generation it was built at.
    access: Mutex<Arc<AccessTable>>,
}

impl ShardRouter {
    /// A router for a c.node of `own_shard` serving its own shard through `own`; other shards
    /// are found at once and then every [`DISCOVER_INTERVAL`] by a thread that ends with the
    /// router.
    pub fn start(
        own_shard: ShardId,
        own: RoutedBackend,
        kv: Arc<dyn MetaStore>,
        me: String,
        secret: String,
        retry_for: Duration,
        stale_after: Duration,
    ) -> Arc<ShardRouter> {
        let router = Arc::new(ShardRouter {
            own_shard,
            own,
            kv,
            forwarding: Forwarding {
                me,
                secret,
                retry_for,
                stale_after,
            },
            others: Mutex::default(),
            access: Mutex::default(),
        });
        router.discover();
        let weak: Weak<ShardRouter> = Arc::downgrade(&router);
        let _ = std::thread::Builder::new()
            .name("weft-shard-discovery".into())
            .spawn(move || loop {
                std::thread::sleep(DISCOVER_INTERVAL);
                match weak.upgrade() {
                    Some(router) => router.discover(),
                    None => return,
                }
            });
        router
    }

    /// Start following every shard the registrations name that is not followed yet. An
    /// unreachable etcd changes nothing.
    fn discover(&self) {
        let Ok(records) = crate::ha::registry::list(&*self.kv) else {
            return;
        };
        for shard in crate::ha::registry::shards_named(&records) {
            self.follow(shard);
        }
    }

    /// Follow `shard` (another than this c.node's own) if it is not followed yet.
    fn follow(&self, shard: ShardId) -> Option<Arc<OtherShard>> {
        if shard == self.own_shard {
            return None;
        }
        let mut others = self.others.lock();
        if let Some(other) = others.get(&shard) {
            return Some(Arc::clone(other));
        }
        tracing::info!(
            shard = shard.0,
            "serving the volumes of another shard through its owner"
        );
        let view = ClusterView::start(Arc::clone(&self.kv), shard);
        let f = &self.forwarding;
        let local = LocalSlot::new();
        // This process may own the shard for a while and give it up again.
        let backend = RoutedBackend::releasable(
            Arc::clone(&local),
            Arc::clone(&view),
            f.me.clone(),
            f.secret.clone(),
            f.retry_for,
            f.stale_after,
        );
        let other = Arc::new(OtherShard {
            view,
            backend,
            local,
        });
        others.insert(shard, Arc::clone(&other));
        Some(other)
    }

    /// The slot through which this process serves `shard` (another than its own) from an
    /// engine of its own once it owns that shard too: requests of exports opened through the
    /// owner then switch to it, as a standby's do at a takeover. `None` for the own shard.
    pub fn local_slot(&self, shard: ShardId) -> Option<Arc<LocalSlot>> {
        self.follow(shard).map(|o| Arc::clone(&o.local))
    }

    fn others(&self) -> Vec<Arc<OtherShard>> {
        self.others.lock().values().cloned().collect()
    }

    /// The owner of every export of another shard (transitioning while that shard has none),
    /// for the LUs' ALUA states. The own shard's exports are not named: they follow the
    /// c.node's own shard owner.
    pub fn foreign_owners(&self) -> HashMap<String, Ownership> {
        let mut owners = HashMap::new();
        for other in self.others() {
            let now = other.view.now();
            let ownership = match &now.owner {
                Some(owner) => Ownership::Owner(owner.id.clone()),
                None => Ownership::Nobody,
            };
            for export in &now.exports {
                owners.insert(export.name.clone(), ownership.clone());
            }
        }
        owners
    }

    /// The shards followed besides this c.node's own, for status.
    pub fn other_shards(&self) -> Vec<ShardId> {
        self.others.lock().keys().copied().collect()
    }

    /// Every export this c.node serves, with its shard and whether this process serves it
    /// from an engine of its own (its own shard, or one it owns besides) or forwards it to
    /// that shard's owner: what the statistics label each export's I/O with. Names listed
    /// by two shards while a rename races the views are given once, as
    /// [`ExportBackend::list_exports`] gives them.
    pub fn placements(&self) -> Vec<ExportPlacement> {
        let mut out: Vec<ExportPlacement> = self
            .own
            .list_exports()
            .into_iter()
            .map(|export| ExportPlacement {
                export,
                shard: self.own_shard,
                here: true,
                owner: None,
            })
            .collect();
        let mut seen: std::collections::HashSet<String> =
            out.iter().map(|p| p.export.name.clone()).collect();
        for (shard, other) in self.others.lock().clone() {
            let here = other.local.get().is_some();
            let owner = if here {
                None
            } else {
                other.view.now().owner.as_ref().map(|o| o.id.clone())
            };
            for export in other.backend.list_exports() {
                if seen.insert(export.name.clone()) {
                    out.push(ExportPlacement {
                        export,
                        shard,
                        here,
                        owner: owner.clone(),
                    });
                }
            }
        }
        out
    }
}

/// Where one export is served from, as this c.node sees it now ([`ShardRouter::placements`]).
#[derive(Debug, Clone)]
pub struct ExportPlacement {
    pub export: ExportInfo,
    pub shard: ShardId,
    /// This process serves it from an engine of its own.
    pub here: bool,
    /// The shard's owner c.node when it is another (`None`: here, or no owner now).
    pub owner: Option<String>,
}

impl ExportBackend for ShardRouter {
    fn list_exports(&self) -> Vec<ExportInfo> {
        let mut exports = self.own.list_exports();
        let mut seen: std::collections::HashSet<String> =
            exports.iter().map(|e| e.name.clone()).collect();
        for other in self.others() {
            for export in other.backend.list_exports() {
                if seen.insert(export.name.clone()) {
                    exports.push(export);
                }
            }
        }
        exports
    }

    /// An export no followed shard lists is looked for once more after reading the
    /// registrations again (a shard whose c.node registered since the last discovery), and
    /// then after reading every other shard's catalog again (a volume created since).
    fn open(&self, name: &str) -> Result<Arc<dyn ExportHandle>, OpenError> {
        match self.own.open(name) {
            Err(OpenError::UnknownExport { .. }) => {}
            found => return found,
        }
        // A shard this process owns too lists from its engine (its view may not have read
        // a volume just created); another from its view.
        let find = || {
            self.others().into_iter().find(|o| match o.local.get() {
                Some(local) => local.list_exports().iter().any(|e| e.name == name),
                None => o.view.now().exports.iter().any(|e| e.name == name),
            })
        };
        let other = find().or_else(|| {
            let before = self.others.lock().len();
            self.discover();
            // Not in one expression with the lock's guard: `find` takes the lock again.
            let grew = self.others.lock().len() > before;
            grew.then(find).flatten()
        });
        // A volume created in another shard since its view's last reading (every
        // `view::POLL_INTERVAL`): read the views again once.
        let other = other.or_else(|| {
            for o in self.others() {
                if o.local.get().is_none() {
                    o.view.refresh();
                }
            }
            find()
        });
        match other {
            Some(other) => other.backend.open(name),
            None => Err(OpenError::UnknownExport {
                name: name.to_string(),
            }),
        }
    }

    fn access(&self) -> Arc<AccessTable> {
        let generation = self.access_generation();
        let mut cached = self.access.lock();
        if cached.generation == generation {
            return Arc::clone(&cached);
        }
        let mut per_shard = vec![(self.own_shard, self.own.access().hosts().to_vec())];
        for (shard, other) in self.others.lock().iter() {
            per_shard.push((*shard, other.backend.access().hosts().to_vec()));
        }
        per_shard.sort_by_key(|(shard, _)| *shard);
        let hosts = crate::access::merge_hosts(per_shard.into_iter().map(|(_, h)| h));
        warn_on_shared_initiators(&hosts);
        let table = Arc::new(AccessTable::new(generation, hosts));
        *cached = Arc::clone(&table);
        table
    }

    /// The sum of every shard's generation: each only grows, so the sum moves whenever any
    /// shard's hosts change or a shard is added.
    fn access_generation(&self) -> u64 {
        self.others()
            .iter()
            .map(|o| o.backend.access_generation())
            .fold(self.own.access_generation(), u64::wrapping_add)
    }
}

/// Log once per access table an initiator that two hosts name (hosts defined in two shards'
/// catalogs before the cluster had one host catalog): it gets the LUN map of the first only.
fn warn_on_shared_initiators(hosts: &[weft_engine::HostRecord]) {
    let mut first: HashMap<&str, &str> = HashMap::new();
    for host in hosts {
        for iqn in &host.iqns {
            // A catalog names an initiator once: a second host naming it is another shard's.
            match first.get(iqn.as_str()) {
                Some(earlier) => tracing::warn!(
                    initiator = %iqn,
                    host = %earlier,
                    also = %host.name,
                    "an initiator belongs to two hosts (defined in two shards' catalogs): it sees the LUNs of the first only; map its volumes to one host"
                ),
                None => {
                    first.insert(iqn, &host.name);
                }
            }
        }
    }
}
