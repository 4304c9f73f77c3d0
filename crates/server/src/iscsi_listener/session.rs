//! Full feature phase of one session (one connection: MaxConnections=1).
//!
//! The reader (the connection task) frames PDUs, checks CmdSN, gathers each write's data
//! (immediate data, unsolicited Data-Out, then one R2T at a time of at most MaxBurstLength)
//! and hands whole commands to the portal's worker pool. A job executes its command with
//! `weft-scsi` and encodes its Data-In and status; encoding and queueing happen under the
//! session's sequence lock, so responses leave in StatSN order. The writer task sends them
//! with vectored writes, a read's data from the command's own buffer (no copy).
//!
//! The session is one I_T nexus (`weft_scsi::Nexus`: InitiatorName and ISID, the portal's
//! relative target port): every command carries it, so each LU's persistent reservations
//! and RESERVE(6) reservation know who is asking. A LUN reset releases RESERVE(6) only, and
//! so does the end of the session; registrations and persistent reservations survive both.
//! A LUN reset is answered once every other c.node serving the LU heard of it (its sessions
//! report the reset's unit attention on their next command), as a PR OUT is.
//!
//! This file owns the connection's loop (framing, CmdSN, keepalive, shutdown, the end of the
//! nexus) and the writer task. Below it: `gather` (a write's data-out and R2Ts), `dispatch`
//! (the session's LUNs and running a command, its CDB decoded once), `inventory` (which LUNs
//! and targets the session sees), `task_management` (aborts and resets).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::io::IoSlice;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use weft_iscsi::response;
use weft_iscsi::session::{CmdSnCheck, Sequence};
use weft_iscsi::wire::*;
use weft_iscsi::{decode, parse_pdu, Digests, LoggedIn, Parse, Request};
use weft_scsi::Nexus;

use super::keepalive::{Due, Keepalive};
use super::shared::{ConnError, Frames, Shared, READ_BUFFER_BYTES};
use super::{Portal, SharedLu};
use dispatch::Lun;
use gather::PendingWrite;

mod dispatch;
mod gather;
mod inventory;
mod task_management;

/// Commands a session may have in flight (received, response not yet sent): twice the
/// CmdSN window, so an initiator inside its window never meets it.
const INFLIGHT_COMMANDS_MAX: usize = 2 * weft_iscsi::login::COMMAND_WINDOW as usize;

/// Parts the writer task hands to one vectored write (well under IOV_MAX, 1024 on Linux).
const WRITE_PARTS_MAX: usize = 64;

/// The connection task's state in full feature phase.
struct Reader<'a> {
    shared: Arc<Shared>,
    portal: &'a Portal,
    /// The session's LUNs, as of hosts generation `generation`.
    luns: BTreeMap<u64, Arc<Lun>>,
    /// `None` before the first look.
    generation: Option<u64>,
    initiator: String,
    /// This session's I_T nexus.
    nexus: Arc<Nexus>,
    /// LUs the session reached and no longer sees (unmapped): it is still an I_T nexus of
    /// theirs until it ends.
    departed: Vec<Arc<SharedLu>>,
    /// The connection sees unmapped exports ([`crate::access`]).
    open: bool,
    discovery: bool,
    target: Option<String>,
    local: std::net::SocketAddr,
    /// The initiator's address, for its sessions ([`crate::sessions`]).
    peer: std::net::SocketAddr,
    pending: HashMap<u32, PendingWrite>,
    next_ttt: u32,
    inflight: Arc<Semaphore>,
    /// Nothing is buffered behind the PDU being handled (the initiator is waiting on it).
    input_idle: bool,
}

pub(super) async fn run(
    stream: TcpStream,
    mut buf: BytesMut,
    login: LoggedIn,
    portal: &Portal,
    port: u16,
    open: bool,
    shutdown: &CancellationToken,
) -> Result<(), ConnError> {
    let local = stream.local_addr()?;
    let peer = stream.peer_addr()?;
    let (mut read_half, write_half) = stream.into_split();
    let (tx, rx) = mpsc::unbounded_channel();
    let params = login.params;
    let digests = Digests {
        header: params.header_digest,
        data: params.data_digest,
    };
    let shared = Arc::new(Shared {
        sequence: Mutex::new(Sequence::new(&login)),
        tx,
        digests,
        params,
        closing: CancellationToken::new(),
        executing: Mutex::new(std::collections::HashSet::new()),
        answered: tokio::sync::Notify::new(),
    });
    let writer = tokio::spawn(write_responses(write_half, rx));
    let mut reader = Reader {
        shared: Arc::clone(&shared),
        portal,
        luns: BTreeMap::new(),
        generation: None,
        initiator: login.initiator.clone(),
        nexus: Arc::new(Nexus::iscsi(&login.initiator, login.isid, port)),
        departed: Vec::new(),
        open,
        discovery: login.target.is_none(),
        target: login.target.clone(),
        local,
        peer,
        pending: HashMap::new(),
        next_ttt: 1,
        inflight: Arc::new(Semaphore::new(INFLIGHT_COMMANDS_MAX)),
        input_idle: false,
    };
    reader.refresh_luns();
    let data_max = params.target_max_recv as usize;
    let mut keepalive = Keepalive::new(portal.nop_interval);
    let result: Result<(), ConnError> = async {
        loop {
            let pdu = match parse_pdu(&buf, digests, data_max) {
                Parse::Complete(pdu, used) => {
                    let _ = buf.split_to(used);
                    reader.input_idle = buf.is_empty();
                    pdu
                }
                Parse::Incomplete => {
                    buf.reserve(READ_BUFFER_BYTES);
                    let n = tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        _ = shared.closing.cancelled() => return Ok(()),
                        _ = tokio::time::sleep_until(keepalive.deadline()) => {
                            match keepalive.due() {
                                Due::Ping(ttt) => shared.send_plain(|n, out| {
                                    response::nop_in(0, TAG_NONE, ttt, &[], n, digests, out)
                                }),
                                Due::Dead => return Err(ConnError::Protocol(
                                    "the initiator did not answer a NOP-In",
                                )),
                            }
                            continue;
                        }
                        n = read_half.read_buf(&mut buf) => n?,
                    };
                    if n == 0 {
                        return Ok(());
                    }
                    keepalive.heard();
                    continue;
                }
                Parse::Invalid(e) => return Err(e.into()),
            };
            let bhs = pdu.bhs;
            match decode(pdu) {
                Ok(request) => {
                    if reader.handle(request).await? {
                        return Ok(());
                    }
                }
                Err(e) => {
                    debug!(error = %e, "rejecting a PDU");
                    shared.send_plain(|n, out| {
                        response::reject(e.reject_reason(), &bhs, n, digests, out)
                    });
                }
            }
        }
    }
    .await;
    // Let every dispatched command finish and its response go out.
    reader.pending.clear();
    let _ = reader
        .inflight
        .acquire_many(INFLIGHT_COMMANDS_MAX as u32)
        .await;
    nexus_lost(&reader).await;
    drop(reader);
    drop(shared);
    let _ = writer.await;
    result
}

/// The session (I_T nexus) ended, by logout or by losing its connection: each LU it reached
/// releases the RESERVE(6) reservation it held. That waits for commands of other sessions
/// still running on the LU, so it runs off the async threads.
async fn nexus_lost(reader: &Reader<'_>) {
    let lus: Vec<Arc<SharedLu>> = reader
        .luns
        .values()
        .map(|l| Arc::clone(&l.shared))
        .chain(reader.departed.iter().cloned())
        .collect();
    if lus.is_empty() {
        return;
    }
    let nexus = Arc::clone(&reader.nexus);
    let _ = tokio::task::spawn_blocking(move || {
        for lu in lus {
            if let Err(sense) = lu.state.nexus_lost(&nexus) {
                warn!(nexus = %nexus.initiator_port, ?sense, "could not release a RESERVE(6) reservation of a lost nexus");
            }
        }
    })
    .await;
}

/// The writer task: sends queued [`Frames`] in order, everything queued at once gathered into
/// vectored writes of up to [`WRITE_PARTS_MAX`] parts (a read's data straight from its buffer).
async fn write_responses(mut w: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Frames>) {
    let mut queue = VecDeque::new();
    while let Some(frames) = rx.recv().await {
        queue.extend(frames);
        while !queue.is_empty() {
            while let Ok(more) = rx.try_recv() {
                queue.extend(more);
            }
            let mut slices = [IoSlice::new(&[]); WRITE_PARTS_MAX];
            let mut count = 0;
            for (slot, part) in slices.iter_mut().zip(&queue) {
                *slot = IoSlice::new(part);
                count += 1;
            }
            match w.write_vectored(&slices[..count]).await {
                Ok(0) | Err(_) => return,
                Ok(n) => consume(&mut queue, n),
            }
        }
    }
    let _ = w.shutdown().await;
}

/// Drop the first `n` bytes of `queue` (written).
fn consume(queue: &mut VecDeque<Bytes>, mut n: usize) {
    while n > 0 {
        let Some(front) = queue.front_mut() else {
            return;
        };
        if front.len() <= n {
            n -= front.len();
            queue.pop_front();
        } else {
            front.advance(n);
            n = 0;
        }
    }
}

impl Reader<'_> {
    /// Handle one request; `true` ends the session (after logout).
    async fn handle(&mut self, request: Request) -> Result<bool, ConnError> {
        match request {
            Request::ScsiCommand(c) => {
                if self.accept(c.cmd_sn, c.immediate) {
                    self.command(c)?;
                }
            }
            Request::DataOut(d) => self.data_out(d)?,
            Request::NopOut(nop) => {
                if nop.itt != TAG_NONE && self.accept(nop.cmd_sn, nop.immediate) {
                    let digests = self.shared.digests;
                    self.shared.send_status(|n, out| {
                        response::nop_in(nop.lun, nop.itt, TAG_NONE, &nop.data, n, digests, out)
                    });
                }
            }
            Request::Text(t) => {
                if self.accept(t.cmd_sn, t.immediate) {
                    let text = self.text_reply(&t.text);
                    let digests = self.shared.digests;
                    self.shared.send_status(|n, out| {
                        response::text_response(t.itt, &text, n, digests, out)
                    });
                }
            }
            Request::TaskManagement(tm) => {
                if self.accept(tm.cmd_sn, tm.immediate) {
                    let reply = self.task_management(&tm).await;
                    let digests = self.shared.digests;
                    self.shared.send_status(|n, out| {
                        response::task_management_response(tm.itt, reply, n, digests, out)
                    });
                }
            }
            Request::Logout(l) => {
                self.accept(l.cmd_sn, l.immediate);
                // Outstanding commands finish first; their responses precede ours.
                self.drop_pending();
                let _ = self
                    .inflight
                    .acquire_many(INFLIGHT_COMMANDS_MAX as u32)
                    .await;
                // The nexus ends before the initiator hears so: a RESERVE(6) it held is
                // released by the time another initiator, told of the logout, asks.
                nexus_lost(self).await;
                let reply =
                    if l.reason == LOGOUT_CLOSE_SESSION || l.reason == LOGOUT_CLOSE_CONNECTION {
                        LOGOUT_SUCCESS
                    } else {
                        LOGOUT_RECOVERY_NOT_SUPPORTED
                    };
                let digests = self.shared.digests;
                self.shared
                    .send_status(|n, out| response::logout_response(l.itt, reply, n, digests, out));
                return Ok(true);
            }
            Request::Login(_) => {
                return Err(ConnError::Protocol("login request in full feature phase"))
            }
            Request::Snack { .. } => {
                return Err(ConnError::Protocol("SNACK at error recovery level 0"))
            }
        }
        Ok(false)
    }

    fn accept(&self, cmd_sn: u32, immediate: bool) -> bool {
        self.shared.sequence.lock().check_command(cmd_sn, immediate) == CmdSnCheck::Accept
    }
}
