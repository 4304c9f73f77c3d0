//! iSCSI listener: accepts TCP connections on a portal and serves exports as LUNs.
//!
//! Glue only. iSCSI framing, login, CHAP and sequence numbers are the sans-IO `weft-iscsi`
//! crate; SCSI commands are `weft-scsi`; this module moves bytes between sockets and them
//! and runs every command on a worker pool, never on the runtime's threads.
//!
//! Shape: one task per connection ([`connection`]): login, then full feature phase
//! ([`session`]), where the task reads PDUs, gathers each write's data (immediate,
//! unsolicited, and R2T-solicited Data-Out), and hands whole commands to the pool; a writer
//! task sends responses in StatSN order. Targets and who may use them: [`targets`]; a LUN
//! over an export: [`lun`].
//!
//! Shutdown: cancelling the token stops accepting; every connection stops reading, lets its
//! commands finish and their responses go out, then closes.

mod connection;
mod lun;
mod session;
mod targets;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn, Instrument};
use weft_iscsi::TargetLimits;
use weft_scsi::LunState;

use crate::backend::ExportBackend;
use crate::workers::WorkerPool;

pub use targets::{target_name, TARGET_PREFIX};

/// Connections served at once (as for NBD).
const CONNECTIONS_MAX: usize = 1024;
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// Threads running SCSI commands for every connection of the portal.
const WORKER_THREADS: usize = 16;
/// The portal group every portal of this server belongs to (one per c.node, with ALUA).
const PORTAL_GROUP_TAG: u16 = 1;

/// What every connection of one portal shares.
pub(crate) struct Portal {
    backend: Arc<dyn ExportBackend>,
    workers: WorkerPool,
    limits: TargetLimits,
    next_tsih: AtomicU16,
    /// SCSI state of each LU (mode pages, the COMPARE AND WRITE lock), shared by sessions.
    lun_states: Mutex<HashMap<String, Arc<LunState>>>,
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

    fn lun_state(&self, export: &str) -> Arc<LunState> {
        self.lun_states
            .lock()
            .entry(export.to_string())
            .or_insert_with(|| Arc::new(LunState::new()))
            .clone()
    }
}

/// Serve iSCSI on a bound listener until `shutdown` is cancelled, then drain.
pub async fn run(
    listener: TcpListener,
    backend: Arc<dyn ExportBackend>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let address = listener.local_addr()?;
    info!(%address, "iscsi portal started");
    let portal = Arc::new(Portal {
        backend,
        workers: WorkerPool::new("iscsi", WORKER_THREADS)?,
        limits: TargetLimits::default(),
        next_tsih: AtomicU16::new(1),
        lun_states: Mutex::new(HashMap::new()),
    });
    let mut connections = JoinSet::new();
    let mut next_conn_id: u64 = 0;
    loop {
        while connections.try_join_next().is_some() {}
        if connections.len() >= CONNECTIONS_MAX {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = connections.join_next() => continue,
            }
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    next_conn_id += 1;
                    let span = tracing::info_span!("iscsi_conn", conn_id = next_conn_id, %peer);
                    let task = connection::serve(stream, Arc::clone(&portal), shutdown.clone());
                    connections.spawn(task.instrument(span));
                }
                Err(error) => {
                    warn!(%error, "iscsi accept failed");
                    tokio::time::sleep(ACCEPT_ERROR_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    while connections.join_next().await.is_some() {}
    info!("iscsi portal stopped");
    Ok(())
}
