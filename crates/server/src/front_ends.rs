//! The c.node's front ends (the NBD listener and the iSCSI portals): bound, then started on an
//! export backend. A single-process server starts them on its engine once it is open; a c.node
//! of a cluster starts them before it owns anything, on a backend that forwards to the owner
//! until this c.node's engine serves ([`crate::ha::forward`]).

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backend::ExportBackend;
use crate::io_stats::{IoStats, MeteredBackend, Protocol};

/// The bound listeners.
#[derive(Debug)]
pub(crate) struct Bound {
    nbd: TcpListener,
    iscsi: Vec<TcpListener>,
    pub nbd_addr: SocketAddr,
    pub iscsi_addrs: Vec<SocketAddr>,
}

/// Bind NBD on `nbd` and an iSCSI portal on each of `iscsi`.
pub(crate) async fn bind(nbd: SocketAddr, iscsi: &[SocketAddr]) -> anyhow::Result<Bound> {
    let nbd = TcpListener::bind(nbd)
        .await
        .with_context(|| format!("binding NBD on {nbd}"))?;
    let mut portals = Vec::new();
    for addr in iscsi {
        portals.push(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("binding the iSCSI portal on {addr}"))?,
        );
    }
    Ok(Bound {
        nbd_addr: nbd.local_addr()?,
        iscsi_addrs: portals
            .iter()
            .map(TcpListener::local_addr)
            .collect::<Result<Vec<_>, _>>()?,
        nbd,
        iscsi: portals,
    })
}

/// The running front ends.
#[derive(Debug)]
pub(crate) struct Running {
    nbd: JoinHandle<std::io::Result<()>>,
    iscsi: Option<JoinHandle<std::io::Result<()>>>,
}

impl Running {
    /// Wait until they drained (after `shutdown` was cancelled).
    pub async fn join(self) {
        let _ = self.nbd.await;
        if let Some(task) = self.iscsi {
            let _ = task.await;
        }
    }
}

/// Start serving `backend`, metered per protocol into `io` when given.
pub(crate) fn start(
    bound: Bound,
    backend: &Arc<dyn ExportBackend>,
    io: Option<&Arc<IoStats>>,
    nbd: crate::nbd_listener::NbdOptions,
    iscsi: crate::iscsi_listener::IscsiOptions,
    shutdown: &CancellationToken,
) -> Running {
    let metered = |protocol| -> Arc<dyn ExportBackend> {
        match io {
            Some(io) => Arc::new(MeteredBackend::new(
                Arc::clone(backend),
                Arc::clone(io),
                protocol,
            )),
            None => Arc::clone(backend),
        }
    };
    let nbd = tokio::spawn(crate::nbd_listener::run(
        bound.nbd,
        metered(Protocol::Nbd),
        nbd,
        shutdown.clone(),
    ));
    let iscsi = (!bound.iscsi.is_empty()).then(|| {
        tokio::spawn(crate::iscsi_listener::run(
            bound.iscsi,
            metered(Protocol::Iscsi),
            iscsi,
            shutdown.clone(),
        ))
    });
    Running { nbd, iscsi }
}
