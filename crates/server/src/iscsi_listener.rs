//! iSCSI listener: accepts TCP connections on a portal and serves exports as LUNs.
//!
//! Glue only. iSCSI framing, login, CHAP and sequence numbers are the sans-IO `weft-iscsi`
//! crate; SCSI commands are `weft-scsi`; this module moves bytes between sockets and them
//! and runs every command on a worker pool, never on the runtime's threads.
//!
//! Shape: one task per connection ([`connection`]): login, then full feature phase
//! ([`session`]), where the task reads PDUs, gathers each write's data (immediate,
//! unsolicited, and R2T-solicited Data-Out), and hands whole commands to the pool; a writer
//! task sends responses in StatSN order ([`respond`] builds them). What those share (the
//! sequence lock, the response queue, the connection's error): [`shared`]. Targets and who
//! may use them: [`targets`]; a LUN over an export: [`lun`].
//!
//! Shutdown: cancelling the token stops accepting; every connection stops reading, lets its
//! commands finish and their responses go out, then closes.

mod connection;
mod keepalive;
mod lun;
mod respond;
mod session;
mod shared;
mod targets;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;
use weft_iscsi::TargetLimits;
use weft_scsi::{LunState, RecordNews};

use crate::backend::ExportBackend;
use crate::reservation_records::ReservationRecords;
use crate::target_port_groups::TargetPortGroups;
use crate::workers::WorkerPool;

pub use targets::{array_target_name, target_name, ARRAY_TARGET_PREFIX, TARGET_PREFIX};

/// Threads running SCSI commands for every connection of every portal.
const WORKER_THREADS: usize = 16;
/// The portal group every portal of this server belongs to (one per c.node, with ALUA).
const PORTAL_GROUP_TAG: u16 = 1;
/// This server's name in its target port groups until a cluster layer names the c.nodes.
const LOCAL_CNODE: &str = "local";

/// What every connection of every portal of this server shares (several portals are
/// several paths to the same LUNs: multipath).
pub(crate) struct Portal {
    backend: Arc<dyn ExportBackend>,
    /// The array target's name (hosts log in to it and see their LUNs).
    array_target: String,
    /// Connections off loopback see unmapped exports too (`--iscsi-open-network`).
    open_network: bool,
    /// A session idle this long gets a NOP-In ping ([`keepalive`]).
    nop_interval: std::time::Duration,
    /// The relative target port identifier of each portal (1, 2, ... unless the target port
    /// groups say otherwise): this c.node's target port group holds them all.
    ports: Vec<u16>,
    /// This c.node's target port group id.
    port_group: u16,
    /// Every c.node's target port group and the access state of each LU through it.
    port_groups: Arc<TargetPortGroups>,
    workers: WorkerPool,
    limits: TargetLimits,
    next_tsih: AtomicU16,
    /// SCSI state of each LU shared by every session on every portal.
    lun_states: Mutex<HashMap<String, Arc<SharedLu>>>,
    /// Where each session registers the exports it opened.
    sessions: Arc<crate::sessions::Sessions>,
    /// Where each LU's persistent reservations are kept.
    reservations: ReservationRecords,
}

/// What the sessions of one LU share: the SCSI state (mode pages, the COMPARE AND WRITE
/// lock) and a count of resets, by which every session learns of a LUN RESET on any path,
/// through this c.node or another ([`Portal::reservations_changed`]), and reports it once as
/// a unit attention (SPC-4 §6.3: every I_T nexus gets one).
pub(crate) struct SharedLu {
    pub(crate) state: LunState,
    pub(crate) resets: AtomicU64,
}

impl Portal {
    fn tsih(&self) -> u16 {
        loop {
            let t = self.next_tsih.fetch_add(1, Ordering::Relaxed);
            if t != 0 {
                return t;
            }
        }
    }

    fn shared_lu(&self, export: &str) -> Arc<SharedLu> {
        self.lun_states
            .lock()
            .entry(export.to_string())
            .or_insert_with(|| {
                Arc::new(SharedLu {
                    state: LunState::with_reservation_store(self.reservations.for_export(export))
                        .with_alua(self.port_groups.for_export(export))
                        .with_local_ports(self.ports.clone()),
                    resets: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// The reservation record of `export` changed in the store (`None`: any may have): its
    /// LU reloads it before its next command. With `news` (another c.node's change), first
    /// every session of the LU here reports a reset, and the nexuses of this c.node's
    /// portals the unit attentions named for them (the LU's state is made for them if no
    /// session reached it yet: a registrant that logs in later still hears of it).
    fn reservations_changed(&self, export: Option<&str>, news: Option<&RecordNews>) {
        if let (Some(export), Some(news)) = (export, news) {
            let ours = news
                .attentions
                .iter()
                .any(|(nexus, _)| self.ports.contains(&nexus.relative_target_port));
            let lu = if ours {
                Some(self.shared_lu(export))
            } else {
                self.lun_states.lock().get(export).cloned()
            };
            if let Some(lu) = lu {
                if news.reset {
                    lu.resets.fetch_add(1, Ordering::AcqRel);
                }
                lu.state.heard(news);
            }
        }
        let lun_states = self.lun_states.lock();
        match export {
            Some(export) => {
                if let Some(lu) = lun_states.get(export) {
                    lu.state.invalidate_reservations();
                }
            }
            None => {
                for lu in lun_states.values() {
                    lu.state.invalidate_reservations();
                }
            }
        }
    }
}

/// How this server presents itself on iSCSI.
#[derive(Debug, Clone)]
pub struct IscsiOptions {
    /// The array target's name ([`array_target_name`]).
    pub array_target: String,
    /// Portals off loopback serve unmapped exports to any initiator too.
    pub open_network: bool,
    /// Ping a session idle this long with a NOP-In; close it after twice as long without
    /// an answer.
    pub nop_interval: std::time::Duration,
    /// Where each session registers the exports (LUNs) it opened.
    pub sessions: Arc<crate::sessions::Sessions>,
    /// Where the LUs' persistent reservations are kept (shared with the other c.nodes).
    pub reservations: ReservationRecords,
    /// The c.nodes' target port groups, which a cluster layer updates; `None`: this server
    /// alone, one group of its portals, every LU active/optimized ([`single_port_groups`]).
    pub port_groups: Option<Arc<TargetPortGroups>>,
}

/// The target port groups of a server on its own with `portals` portals: one group, the
/// portal group, holding relative target ports 1..=`portals`.
pub fn single_port_groups(portals: usize) -> Arc<TargetPortGroups> {
    let ports = (1..=portals)
        .map(|p| u16::try_from(p).unwrap_or(u16::MAX))
        .collect();
    TargetPortGroups::single(LOCAL_CNODE, PORTAL_GROUP_TAG, ports)
}

/// Serve iSCSI on bound listeners (the portals, all paths to the same targets) until
/// `shutdown` is cancelled, then drain.
pub async fn run(
    listeners: Vec<TcpListener>,
    backend: Arc<dyn ExportBackend>,
    options: IscsiOptions,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let port_groups = options
        .port_groups
        .unwrap_or_else(|| single_port_groups(listeners.len()));
    // Each portal is a relative target port of this c.node's group, in order.
    let (port_group, ports) = match port_groups.local_group() {
        Some(g) if g.relative_ports.len() == listeners.len() => (g.group_id, g.relative_ports),
        _ => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "this c.node's target port group does not list one relative port per portal",
            ))
        }
    };
    let portal = Arc::new(Portal {
        backend,
        array_target: options.array_target,
        open_network: options.open_network,
        nop_interval: options.nop_interval,
        ports: ports.clone(),
        port_group,
        port_groups,
        workers: WorkerPool::new("iscsi", WORKER_THREADS)?,
        limits: TargetLimits::default(),
        next_tsih: AtomicU16::new(1),
        lun_states: Mutex::new(HashMap::new()),
        sessions: options.sessions,
        reservations: options.reservations,
    });
    // Another c.node's PERSISTENT RESERVE OUT, RESERVE(6) or LU reset, or a deleted volume,
    // changes a record: the LU must not go on checking commands against what it cached, and
    // the unit attentions that change established reach this c.node's nexuses.
    let follower = {
        let portal = Arc::clone(&portal);
        let shutdown = shutdown.clone();
        std::thread::Builder::new()
            .name("iscsi-reservations".into())
            .spawn(move || {
                crate::reservation_records::follow(
                    &portal.reservations,
                    &shutdown,
                    |export, news| portal.reservations_changed(export, news),
                )
            })?
    };
    let mut tasks = Vec::new();
    for (listener, port) in listeners.into_iter().zip(ports) {
        info!(address = %listener.local_addr()?, relative_port = port, "iscsi portal started");
        let portal = Arc::clone(&portal);
        let shutdown = shutdown.clone();
        tasks.push(tokio::spawn(async move {
            crate::accept::serve_connections(listener, "iscsi", &shutdown, |stream, _peer| {
                connection::serve(stream, Arc::clone(&portal), port, shutdown.clone())
            })
            .await;
        }));
    }
    for task in tasks {
        let _ = task.await;
    }
    let _ = tokio::task::spawn_blocking(move || follower.join()).await;
    info!("iscsi portals stopped");
    Ok(())
}
