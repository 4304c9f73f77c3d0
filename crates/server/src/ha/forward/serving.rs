//! How a c.node of a cluster starts serving before it owns the cluster: it connects to etcd,
//! reads the cluster (exports, hosts, owner), binds its forward listener, and starts its front
//! ends on a [`ShardRouter`] (its own shard through a [`RoutedBackend`], the others' through
//! their owners); `serve` then opens the engine (waiting as a standby while
//! another c.node owns the cluster) and hands it to [`Started::local`].

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::routed::{LocalSlot, RoutedBackend};
use super::server::ForwardService;
use super::shards::ShardRouter;
use super::view::ClusterView;
use crate::backend::ExportBackend;
use crate::front_ends::{Bound, Running};
use crate::ha::port_groups::ForeignOwners;
use crate::io_stats::IoStats;
use crate::reservation_records::{Peers, ReservationRecords};
use crate::sessions::Sessions;
use crate::target_port_groups::{ClusterOwner, CnodeGroup, TargetPortGroups};

/// A c.node whose forwarding is set up and whose front ends are bound, not yet started.
pub(crate) struct Early {
    pub bound: Bound,
    pub reservations: ReservationRecords,
    /// The LUs' ALUA groups: one per c.node, following the owner.
    pub port_groups: Arc<TargetPortGroups>,
    /// This c.node's group.
    pub group: CnodeGroup,
    /// The cluster as read from etcd (exports, hosts, owner).
    pub view: Arc<ClusterView>,
    kv: Arc<dyn weft_meta::MetaStore>,
    local: Arc<LocalSlot>,
    router: Arc<ShardRouter>,
    secret: String,
    forward_addr: SocketAddr,
}

/// A c.node serving through the owner until [`Started::local`] is set.
pub(crate) struct Started {
    pub front_ends: Running,
    pub group: CnodeGroup,
    pub port_groups: Arc<TargetPortGroups>,
    pub local: Arc<LocalSlot>,
    pub kv: Arc<dyn weft_meta::MetaStore>,
    pub reservations: ReservationRecords,
    /// Every shard's backend: shards this process owns besides its own are served through
    /// their slots in it (`crate::shard_host`).
    pub router: Arc<ShardRouter>,
    /// The cluster's forwarding secret.
    pub secret: String,
    pub nbd_addr: SocketAddr,
    pub iscsi_addrs: Vec<SocketAddr>,
    pub forward_addr: SocketAddr,
}

/// How long a forwarded request waits for an owner: a takeover takes the lease's time to live
/// and the new owner's recovery.
pub fn retry_window(lease_ttl: Duration) -> Duration {
    lease_ttl * 2 + Duration::from_secs(20)
}

impl Early {
    /// The cluster's metadata store.
    pub fn kv(&self) -> Arc<dyn weft_meta::MetaStore> {
        Arc::clone(&self.kv)
    }
}

/// Connect to the cluster and set forwarding up (see the module doc).
pub(crate) async fn start_early(
    etcd_url: &str,
    ha: &crate::ha::takeover::HaConfig,
    data_dir: &Path,
    bound: Bound,
    sessions: &Arc<Sessions>,
    shutdown: CancellationToken,
) -> anyhow::Result<Early> {
    let (url, dir) = (etcd_url.to_string(), data_dir.to_path_buf());
    let portals = bound.iscsi_addrs.len();
    let (ttl, stop, shard) = (ha.lease_ttl, shutdown.clone(), ha.shard);
    let local = LocalSlot::new();
    let slot = Arc::clone(&local);
    let (kv, id, secret, view, group, port_groups, router) =
        tokio::task::spawn_blocking(move || -> anyhow::Result<_> {
            let kv =
                weft_meta::connect_etcd(&url).with_context(|| format!("connecting to {url}"))?;
            let id =
                crate::data_files::load_or_create_id(&dir, crate::ha::takeover::CNODE_ID_FILE)?;
            let secret = super::cluster_secret(&*kv).context("reading the forwarding secret")?;
            let view = ClusterView::start(Arc::clone(&kv), shard);
            let own = RoutedBackend::new(
                slot,
                Arc::clone(&view),
                id.clone(),
                secret.clone(),
                retry_window(ttl),
                ttl / 2,
            );
            let router = ShardRouter::start(
                shard,
                own,
                Arc::clone(&kv),
                id.clone(),
                secret.clone(),
                retry_window(ttl),
                ttl / 2,
            );
            let group = crate::ha::port_groups::local_group(&*kv, &dir, &id, portals)?;
            let foreign: ForeignOwners = {
                let router = Arc::downgrade(&router);
                Arc::new(move || {
                    router
                        .upgrade()
                        .map(|r| r.foreign_owners())
                        .unwrap_or_default()
                })
            };
            let port_groups = crate::ha::port_groups::follow(
                Arc::clone(&kv),
                shard,
                group.clone(),
                foreign,
                ttl,
                stop,
            );
            Ok((kv, id, secret, view, group, port_groups, router))
        })
        .await??;
    let forward_at = ha
        .forward_listen
        .unwrap_or_else(|| SocketAddr::new(bound.nbd_addr.ip(), 0));
    let listener = TcpListener::bind(forward_at)
        .await
        .with_context(|| format!("binding the forward listener on {forward_at}"))?;
    let forward_addr = listener.local_addr()?;
    tokio::spawn(super::server::run(
        listener,
        ForwardService {
            local: Arc::clone(&local),
            secret: secret.clone().into(),
            id: id.clone().into(),
            sessions: Arc::clone(sessions),
        },
        shutdown,
    ));
    Ok(Early {
        bound,
        port_groups,
        group,
        view,
        reservations: ReservationRecords::new(Arc::clone(&kv)).with_peers(Peers {
            me: id.clone(),
            others: {
                let (kv, me) = (Arc::clone(&kv), id.clone());
                // The registered c.nodes with iSCSI portals, and the owner even when its
                // registration lapsed first.
                Arc::new(move || {
                    let mut ids: Vec<String> = crate::ha::registry::list(&*kv)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|r| !r.iscsi.is_empty())
                        .map(|r| r.id)
                        .chain(
                            crate::ha::ownership::Ownership::owner(&*kv, shard)
                                .ok()
                                .flatten()
                                .map(|o| o.id),
                        )
                        .filter(|id| *id != me)
                        .collect();
                    ids.sort();
                    ids.dedup();
                    ids
                })
            },
            wait: ha.lease_ttl + Duration::from_secs(1),
        }),
        kv,
        local,
        router,
        secret,
        forward_addr,
    })
}

impl Started {
    /// This c.node owns the cluster and its engine is open: it serves from `engine`, and its
    /// LUs say so at once (its ALUA group active/optimized) rather than at the port groups'
    /// next reading of etcd.
    pub fn serve_locally(&self, engine: Arc<dyn ExportBackend>) {
        self.local.set(engine);
        self.port_groups
            .set_cluster_owner(ClusterOwner::Cnode(self.group.cnode.clone()));
    }
}

impl Early {
    /// Start the front ends on the routed backend.
    pub fn start_front_ends(
        self,
        io: Option<&Arc<IoStats>>,
        nbd: crate::nbd_listener::NbdOptions,
        iscsi: crate::iscsi_listener::IscsiOptions,
        shutdown: &CancellationToken,
    ) -> Started {
        let (nbd_addr, iscsi_addrs) = (self.bound.nbd_addr, self.bound.iscsi_addrs.clone());
        let backend: Arc<dyn ExportBackend> = self.router.clone();
        let front_ends = crate::front_ends::start(self.bound, &backend, io, nbd, iscsi, shutdown);
        Started {
            front_ends,
            group: self.group,
            port_groups: self.port_groups,
            local: self.local,
            kv: self.kv,
            reservations: self.reservations,
            router: self.router,
            secret: self.secret,
            nbd_addr,
            iscsi_addrs,
            forward_addr: self.forward_addr,
        }
    }
}
