//! iSCSI listener: accepts TCP connections on a portal and serves exports as LUNs.
//!
//! Glue only. iSCSI framing, login, CHAP and sequence numbers are the sans-IO `weft-iscsi`
//! crate; SCSI commands are `weft-scsi`; this module moves bytes between sockets and them
//! and runs every command on a worker pool, never on the runtime's threads.
//!
//! Shape: one task per connection ([`connection`]): login, then full feature phase
//! ([`session`]), where the task reads PDUs, gathers each write's data (immediate,
//! unsolicited, and R2T-solicited Data-Out), and hands whole commands to the pool; a writer
//! task sends responses in StatSN order ([`respond`] builds them). Targets and who may use
//! them: [`targets`]; a LUN over an export: [`lun`].
//!
//! Shutdown: cancelling the token stops accepting; every connection stops reading, lets its
//! commands finish and their responses go out, then closes.

mod connection;
mod lun;
mod respond;
mod session;
mod targets;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tracing::info;
use weft_iscsi::TargetLimits;
use weft_scsi::LunState;

use crate::backend::ExportBackend;
use crate::workers::WorkerPool;

pub use targets::{target_name, TARGET_PREFIX};

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
    crate::accept::serve_connections(listener, "iscsi", &shutdown, |stream, _peer| {
        connection::serve(stream, Arc::clone(&portal), shutdown.clone())
    })
    .await;
    info!("iscsi portal stopped");
    Ok(())
}
