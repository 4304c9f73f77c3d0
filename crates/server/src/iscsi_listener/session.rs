//! Full feature phase of one session (one connection: MaxConnections=1).
//!
//! The reader (the connection task) frames PDUs, checks CmdSN, gathers each write's data
//! (immediate data, unsolicited Data-Out, then one R2T at a time of at most MaxBurstLength)
//! and hands whole commands to the portal's worker pool. A job executes its command with
//! `weft-scsi` and encodes its Data-In and status; encoding and queueing happen under the
//! session's sequence lock, so responses leave in StatSN order. The writer task sends them.
//!
//! The session is one I_T nexus (`weft_scsi::Nexus`: InitiatorName and ISID, the portal's
//! relative target port): every command carries it, so each LU's persistent reservations
//! and RESERVE(6) reservation know who is asking. A LUN reset releases RESERVE(6) only, and
//! so does the end of the session; registrations and persistent reservations survive both.
//! A LUN reset is answered once every other c.node serving the LU heard of it (its sessions
//! report the reset's unit attention on their next command), as a PR OUT is.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};
use weft_iscsi::request::{DataOut, ScsiCommand, TaskManagement};
use weft_iscsi::response::{self, ReadyToTransfer};
use weft_iscsi::session::{CmdSnCheck, Sequence};
use weft_iscsi::text::{parse_pairs, push_pair};
use weft_iscsi::wire::*;
use weft_iscsi::{decode, parse_pdu, Digests, LoggedIn, Parse, Request};
use weft_scsi::{LogicalUnit, Nexus};

use super::keepalive::{Due, Keepalive};
use super::lun::ExportLun;
use super::respond::{respond, transfer, Transfer, DATA_OFFSET_ERROR, DATA_PHASE_ERROR};
use super::shared::{ConnError, Shared, READ_BUFFER_BYTES};
use super::targets::Viewer;
use super::{Portal, SharedLu};
use crate::api::types::SessionProtocol;
use crate::qos::serve_received;
use crate::sessions::SessionOrigin;

/// Commands a session may have in flight (received, response not yet sent): twice the
/// CmdSN window, so an initiator inside its window never meets it.
const INFLIGHT_COMMANDS_MAX: usize = 2 * weft_iscsi::login::COMMAND_WINDOW as usize;
/// The most data-out this target gathers for one command: the SCSI layer's transfer limit
/// (reported in the Block Limits VPD page), which also bounds every parameter list.
const WRITE_GATHER_MAX_BYTES: u32 = weft_scsi::limits::MAX_TRANSFER_BYTES;
/// The largest read or write run on the connection's task (see [`runs_inline`]).
const INLINE_TRANSFER_MAX_BYTES: u32 = 64 * 1024;

/// A session's LUN.
struct Lun {
    export: String,
    lu: Arc<ExportLun>,
    shared: Arc<SharedLu>,
    /// The LU's reset count this session (I_T nexus) has reported.
    resets_seen: AtomicU64,
    /// The session's LUN inventory changed (a mapping came or went) and this LU has not
    /// said so yet.
    luns_changed: AtomicBool,
}

impl Lun {
    /// A unit attention this nexus has not reported yet: a reset (POWER ON, RESET, OR BUS
    /// DEVICE RESET OCCURRED), then a LUN inventory change (REPORTED LUNS DATA HAS CHANGED),
    /// then one a persistent reservation change on another nexus left for this one
    /// (RESERVATIONS PREEMPTED or RELEASED, REGISTRATIONS PREEMPTED), on any command but
    /// INQUIRY, REPORT LUNS and REQUEST SENSE, which SPC-4 answers without it (REQUEST SENSE
    /// returns the reservation ones as its data, in `weft_scsi::execute`).
    fn unit_attention(&self, nexus: &Nexus, cdb: &[u8]) -> Option<weft_scsi::Response> {
        use weft_scsi::opcode::{INQUIRY, REPORT_LUNS, REQUEST_SENSE};
        if matches!(cdb[0], INQUIRY | REPORT_LUNS | REQUEST_SENSE) {
            return None;
        }
        let resets = self.shared.resets.load(Ordering::Acquire);
        let seen = self.resets_seen.swap(resets, Ordering::AcqRel);
        let attention = |code| {
            weft_scsi::Response::check(weft_scsi::Sense::new(
                weft_scsi::sense::key::UNIT_ATTENTION,
                code,
            ))
        };
        if seen != resets {
            return Some(attention(RESET_OCCURRED));
        }
        if self.luns_changed.swap(false, Ordering::AcqRel) {
            return Some(attention(REPORTED_LUNS_CHANGED));
        }
        self.shared.state.unit_attention(nexus, cdb)
    }
}

/// The ASC/ASCQ of a reset and of a LUN inventory change (sense key UNIT ATTENTION).
const RESET_OCCURRED: (u8, u8) = (0x29, 0x00);
const REPORTED_LUNS_CHANGED: (u8, u8) = (0x3f, 0x0e);

/// A write command waiting for its data.
struct PendingWrite {
    command: ScsiCommand,
    data: Vec<u8>,
    received: u32,
    /// The R2T being answered: (target transfer tag, end offset).
    r2t: Option<(u32, u32)>,
    next_r2t_offset: u32,
    r2t_sn: u32,
    /// DataPDUInOrder and DataSequenceInOrder are Yes: the next Data-Out starts here, with
    /// this DataSN (counted from 0 again in each R2T's sequence).
    next_offset: u32,
    next_data_sn: u32,
    permit: OwnedSemaphorePermit,
}

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

/// Open `export` as a LUN of a session logged in to `target` (`None`: it vanished), and
/// register it as a session of `origin`.
fn open_lun(
    portal: &Portal,
    export: &str,
    target: &str,
    nexus: &Nexus,
    origin: &SessionOrigin,
) -> Option<Arc<Lun>> {
    let handle = portal.backend.open(export).ok()?;
    let handle = portal.sessions.track(handle, origin.clone());
    let shared = portal.shared_lu(export);
    // From now on this nexus hears of the LU's access state changes.
    shared.state.nexus_joined(nexus);
    let resets_seen = AtomicU64::new(shared.resets.load(Ordering::Acquire));
    Some(Arc::new(Lun {
        export: export.to_string(),
        shared,
        resets_seen,
        luns_changed: AtomicBool::new(false),
        lu: Arc::new(ExportLun::new(
            handle,
            target,
            portal.port_group,
            nexus.relative_target_port,
            portal.ports.clone(),
        )),
    }))
}

async fn write_responses(write_half: OwnedWriteHalf, mut rx: mpsc::UnboundedReceiver<Vec<u8>>) {
    let mut w = BufWriter::with_capacity(256 << 10, write_half);
    while let Some(pdu) = rx.recv().await {
        if w.write_all(&pdu).await.is_err() {
            return;
        }
        while let Ok(more) = rx.try_recv() {
            if w.write_all(&more).await.is_err() {
                return;
            }
        }
        if w.flush().await.is_err() {
            return;
        }
    }
    let _ = w.shutdown().await;
}

/// Commands small enough to run on the connection's task when they are alone: reads and
/// writes of at most [`INLINE_TRANSFER_MAX_BYTES`], SYNCHRONIZE CACHE, TEST UNIT READY.
/// Nothing that may wait on another session (reservations, COMPARE AND WRITE).
fn runs_inline(c: &ScsiCommand) -> bool {
    use weft_scsi::opcode::{
        READ_10, READ_16, SYNCHRONIZE_CACHE_10, SYNCHRONIZE_CACHE_16, TEST_UNIT_READY, WRITE_10,
        WRITE_16,
    };
    matches!(
        c.cdb[0],
        TEST_UNIT_READY
            | READ_10
            | WRITE_10
            | SYNCHRONIZE_CACHE_10
            | READ_16
            | WRITE_16
            | SYNCHRONIZE_CACHE_16
    ) && c.expected_len <= INLINE_TRANSFER_MAX_BYTES
}

/// The LUN number of an 8-byte LUN field (`u64::MAX`: no LUN we could have).
fn lun_number(field: u64) -> u64 {
    weft_scsi::decode_lun(field.to_be_bytes()).unwrap_or(u64::MAX)
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

    /// Wait while `busy` holds for the set of executing tasks.
    async fn wait_answered(&self, busy: impl Fn(&std::collections::HashSet<u32>) -> bool) {
        loop {
            let answered = self.shared.answered.notified();
            tokio::pin!(answered);
            answered.as_mut().enable();
            if !busy(&self.shared.executing.lock()) {
                return;
            }
            answered.await;
        }
    }

    /// Forget the writes still waiting for data (aborted: no response is owed).
    fn drop_pending(&mut self) {
        let dropped = self.pending.len();
        self.pending.clear();
        let mut sequence = self.shared.sequence.lock();
        for _ in 0..dropped {
            sequence.task_finished();
        }
    }

    fn accept(&self, cmd_sn: u32, immediate: bool) -> bool {
        self.shared.sequence.lock().check_command(cmd_sn, immediate) == CmdSnCheck::Accept
    }

    fn command(&mut self, mut c: ScsiCommand) -> Result<(), ConnError> {
        if self.discovery {
            return Err(ConnError::Protocol("SCSI command in a discovery session"));
        }
        let permit = Arc::clone(&self.inflight)
            .try_acquire_owned()
            .map_err(|_| ConnError::Protocol("more commands in flight than the window allows"))?;
        self.shared.sequence.lock().task_started();
        let params = self.shared.params;
        if c.data.len() > params.first_burst as usize
            || (!c.data.is_empty() && !params.immediate_data)
        {
            return Err(ConnError::Protocol(
                "immediate data beyond what was negotiated",
            ));
        }
        if c.data.len() > c.expected_len as usize {
            return Err(ConnError::Protocol(
                "more immediate data than the expected length",
            ));
        }
        // A write longer than any command may move is refused by the SCSI layer at once,
        // with its immediate data only; Data-Out the initiator still sends is dropped.
        if !c.write || c.expected_len == 0 || c.expected_len > WRITE_GATHER_MAX_BYTES {
            self.dispatch(c, permit);
            return Ok(());
        }
        let immediate = std::mem::take(&mut c.data);
        let mut data = vec![0u8; c.expected_len as usize];
        data[..immediate.len()].copy_from_slice(&immediate);
        let unsolicited_end = if params.initial_r2t || c.final_ {
            immediate.len() as u32
        } else {
            params.first_burst.min(c.expected_len)
        };
        let mut pending = PendingWrite {
            received: immediate.len() as u32,
            data,
            r2t: None,
            next_r2t_offset: unsolicited_end,
            r2t_sn: 0,
            next_offset: immediate.len() as u32,
            next_data_sn: 0,
            command: c,
            permit,
        };
        if pending.received == pending.command.expected_len {
            let PendingWrite {
                command,
                data,
                permit,
                ..
            } = pending;
            self.dispatch(ScsiCommand { data, ..command }, permit);
            return Ok(());
        }
        self.next_r2t(&mut pending);
        self.pending.insert(pending.command.itt, pending);
        Ok(())
    }

    /// Ask for the next MaxBurstLength of a write, if some is still unasked.
    fn next_r2t(&mut self, p: &mut PendingWrite) {
        // One R2T at a time (MaxOutstandingR2T=1), and only once the unsolicited data is in.
        if p.r2t.is_some()
            || p.next_r2t_offset >= p.command.expected_len
            || p.next_offset < p.next_r2t_offset
        {
            return;
        }
        let offset = p.next_r2t_offset;
        let len = (p.command.expected_len - offset).min(self.shared.params.max_burst);
        let ttt = self.next_ttt;
        self.next_ttt = self.next_ttt.wrapping_add(1).max(1);
        if self.next_ttt == TAG_NONE {
            self.next_ttt = 1;
        }
        p.r2t = Some((ttt, offset + len));
        p.next_r2t_offset = offset + len;
        p.next_data_sn = 0;
        let r = ReadyToTransfer {
            lun: p.command.lun,
            itt: p.command.itt,
            ttt,
            r2t_sn: p.r2t_sn,
            offset,
            len,
        };
        p.r2t_sn += 1;
        let digests = self.shared.digests;
        self.shared
            .send_plain(|n, out| response::r2t(&r, n, digests, out));
    }

    fn data_out(&mut self, d: DataOut) -> Result<(), ConnError> {
        let Some(mut p) = self.pending.remove(&d.itt) else {
            // Data for a command that was aborted or already refused: dropped.
            return Ok(());
        };
        let end = u64::from(d.offset) + d.data.len() as u64;
        if end > u64::from(p.command.expected_len) {
            return Err(ConnError::Protocol(
                "Data-Out beyond the expected transfer length",
            ));
        }
        // A lost, repeated or reordered Data-Out fails its command (CHECK CONDITION, ABORTED
        // COMMAND); the rest of its data is dropped as it arrives, the session goes on.
        if d.offset != p.next_offset || d.data_sn != p.next_data_sn {
            let code = if d.offset != p.next_offset {
                DATA_OFFSET_ERROR
            } else {
                DATA_PHASE_ERROR
            };
            debug!(
                itt = d.itt,
                offset = d.offset,
                data_sn = d.data_sn,
                "Data-Out out of order"
            );
            let PendingWrite {
                command, permit, ..
            } = p;
            let failed = weft_scsi::Response::check(weft_scsi::Sense::new(
                weft_scsi::sense::key::ABORTED_COMMAND,
                code,
            ));
            respond(
                &self.shared,
                &ScsiCommand {
                    data: Vec::new(),
                    ..command
                },
                None,
                failed,
            );
            drop(permit);
            return Ok(());
        }
        p.next_offset = end as u32;
        p.next_data_sn += 1;
        p.data[d.offset as usize..end as usize].copy_from_slice(&d.data);
        p.received += d.data.len() as u32;
        if let Some((ttt, r2t_end)) = p.r2t {
            if d.ttt == ttt && (d.final_ || end >= u64::from(r2t_end)) {
                p.r2t = None;
            }
        }
        if p.received >= p.command.expected_len {
            let PendingWrite {
                command,
                data,
                permit,
                ..
            } = p;
            self.dispatch(ScsiCommand { data, ..command }, permit);
            return Ok(());
        }
        self.next_r2t(&mut p);
        self.pending.insert(d.itt, p);
        Ok(())
    }

    /// Follow a host or mapping change: LUNs mapped since appear, unmapped ones go, and
    /// every LUN the session keeps reports REPORTED LUNS DATA HAS CHANGED once.
    fn refresh_luns(&mut self) {
        let generation = self.portal.backend.access_generation();
        if self.generation == Some(generation) {
            return;
        }
        let Some(target) = &self.target else {
            return;
        };
        let table = self.portal.backend.access();
        let viewer = Viewer {
            backend: &*self.portal.backend,
            table: &table,
            array_target: &self.portal.array_target,
            open: self.open,
        };
        let wanted = viewer.luns(&self.initiator, target);
        let first = self.generation.is_none();
        self.generation = Some(generation);
        let unchanged = wanted.len() == self.luns.len()
            && wanted
                .iter()
                .all(|(n, e)| self.luns.get(n).is_some_and(|l| &l.export == e));
        if unchanged {
            return;
        }
        let origin = SessionOrigin {
            protocol: SessionProtocol::Iscsi,
            client: self.initiator.clone(),
            address: self.peer,
            host: table
                .host_of_initiator(&self.initiator)
                .map(|h| h.name.clone()),
        };
        let mut luns = BTreeMap::new();
        for (n, export) in wanted {
            let lun = match self.luns.get(&n) {
                Some(l) if l.export == export => Some(Arc::clone(l)),
                _ => open_lun(self.portal, &export, target, &self.nexus, &origin),
            };
            if let Some(lun) = lun {
                lun.luns_changed.store(!first, Ordering::Release);
                luns.insert(n, lun);
            }
        }
        let previous = std::mem::replace(&mut self.luns, luns);
        for gone in previous.into_values() {
            let still_seen = self
                .luns
                .values()
                .any(|l| Arc::ptr_eq(&l.shared, &gone.shared));
            let known = self.departed.iter().any(|d| Arc::ptr_eq(d, &gone.shared));
            if !still_seen && !known {
                self.departed.push(Arc::clone(&gone.shared));
            }
        }
    }

    /// Run a whole command on the worker pool.
    fn dispatch(&mut self, c: ScsiCommand, permit: OwnedSemaphorePermit) {
        // The command's latency, as the QoS latency target sees it, starts here (its data
        // has all arrived).
        let received = Instant::now();
        self.refresh_luns();
        let shared = Arc::clone(&self.shared);
        shared.executing.lock().insert(c.itt);
        let lun = self.luns.get(&lun_number(c.lun)).cloned();
        let nexus = Arc::clone(&self.nexus);
        let lun_list: Vec<u64> = if c.cdb[0] == weft_scsi::opcode::REPORT_LUNS {
            // REPORT LUNS tells the initiator what changed: the attention is spent.
            for l in self.luns.values() {
                l.luns_changed.store(false, Ordering::Release);
            }
            self.luns.keys().copied().collect()
        } else {
            Vec::new()
        };
        let inline = self.input_idle
            && self.inflight.available_permits() == INFLIGHT_COMMANDS_MAX - 1
            && runs_inline(&c)
            && !lun.as_ref().is_some_and(|l| l.lu.may_throttle());
        let job = move || {
            let mut data_out_len = None;
            let result = match &lun {
                _ if c.cdb[0] == weft_scsi::opcode::REPORT_LUNS => {
                    weft_scsi::report_luns(&c.cdb, &lun_list)
                }
                Some(lun) => {
                    if lun.lu.is_gone() {
                        shared.sequence.lock().task_finished();
                        shared.executing.lock().remove(&c.itt);
                        shared.answered.notify_waiters();
                        shared.closing.cancel();
                        drop(permit);
                        return;
                    }
                    // Decoded once: for the transfer's checks and for the command itself.
                    let geometry = lun.lu.geometry();
                    let decoded = weft_scsi::DecodedCdb::new(&c.cdb, &geometry);
                    data_out_len = decoded.data_out_len();
                    let state = &lun.shared.state;
                    match (
                        lun.unit_attention(&nexus, &c.cdb),
                        transfer(&c, &decoded, geometry.block_size_bytes),
                    ) {
                        (Some(attention), _) => attention,
                        (None, Transfer::AsIs) => {
                            weft_scsi::execute_decoded(state, &*lun.lu, &nexus, &decoded, &c.data)
                        }
                        (None, Transfer::Truncated(write)) => {
                            weft_scsi::execute_decoded(state, &*lun.lu, &nexus, &write, &c.data)
                        }
                        (None, Transfer::Refused(refusal)) => refusal,
                    }
                }
                None => weft_scsi::execute_no_lun(&c.cdb),
            };
            respond(&shared, &c, data_out_len, result);
            shared.executing.lock().remove(&c.itt);
            shared.answered.notify_waiters();
            drop(permit);
        };
        let job = move || serve_received(received, job);
        if inline {
            // The session's only command and a small one: a hand-off to a worker and back
            // would cost two thread wake-ups, more than the command (QD1 latency).
            job();
        } else {
            self.portal.workers.submit(Box::new(job));
        }
    }

    fn text_reply(&self, text: &[u8]) -> Vec<u8> {
        let mut reply = Vec::new();
        let Ok(pairs) = parse_pairs(text) else {
            return reply;
        };
        for (key, value) in pairs {
            if key != "SendTargets" {
                push_pair(&mut reply, &key, "NotUnderstood");
                continue;
            }
            let table = self.portal.backend.access();
            let visible = Viewer {
                backend: &*self.portal.backend,
                table: &table,
                array_target: &self.portal.array_target,
                open: self.open,
            }
            .targets(&self.initiator);
            let names: Vec<String> = match (&self.target, value.as_str()) {
                (Some(own), _) => vec![own.clone()],
                (None, "All") => visible,
                (None, one) => visible
                    .into_iter()
                    .filter(|t| t.eq_ignore_ascii_case(one))
                    .collect(),
            };
            for name in names {
                push_pair(&mut reply, "TargetName", &name);
                push_pair(
                    &mut reply,
                    "TargetAddress",
                    &format!("{},{}", self.local, super::PORTAL_GROUP_TAG),
                );
            }
        }
        reply
    }

    /// A task still waiting for its data is dropped ("function complete"); one already
    /// executing cannot be stopped half way through a write, so the answer waits until it
    /// is done and its response is out, then says the task does not exist (what libiscsi's
    /// tests expect of a task that completed before the abort).
    async fn task_management(&mut self, tm: &TaskManagement) -> u8 {
        match tm.function {
            TMF_ABORT_TASK => {
                if self.pending.remove(&tm.referenced_itt).is_some() {
                    self.shared.sequence.lock().task_finished();
                    return TMF_RESPONSE_COMPLETE;
                }
                // Executing, or already answered: its response is (or will be) out before
                // ours, and the task is gone by the time the initiator reads this.
                self.wait_answered(|executing| executing.contains(&tm.referenced_itt))
                    .await;
                TMF_RESPONSE_NO_TASK
            }
            TMF_ABORT_TASK_SET | TMF_CLEAR_TASK_SET | TMF_LUN_RESET | TMF_TARGET_WARM_RESET => {
                self.refresh_luns();
                let lun = self.luns.get(&lun_number(tm.lun)).cloned();
                if tm.function != TMF_TARGET_WARM_RESET && lun.is_none() {
                    return TMF_RESPONSE_NO_LUN;
                }
                self.drop_pending();
                self.wait_answered(|executing| !executing.is_empty()).await;
                let reset: Vec<Arc<Lun>> = match tm.function {
                    TMF_LUN_RESET => lun.into_iter().collect(),
                    TMF_TARGET_WARM_RESET => self.luns.values().cloned().collect(),
                    _ => Vec::new(),
                };
                for lun in &reset {
                    lun.shared.resets.fetch_add(1, Ordering::AcqRel);
                }
                // A reset releases RESERVE(6) reservations, not persistent ones (SPC-4
                // 5.13.1), and is stored as news for the other c.nodes' sessions, answered
                // once they heard it. Releasing waits for other sessions' commands on the
                // LU and for the other c.nodes, so it runs off the async threads.
                if !reset.is_empty() {
                    let _ = tokio::task::spawn_blocking(move || {
                        for lun in reset {
                            if let Err(sense) = lun.shared.state.logical_unit_reset() {
                                warn!(export = %lun.export, ?sense, "a LU reset reached neither the reservation record nor the other c.nodes");
                            }
                        }
                    })
                    .await;
                }
                TMF_RESPONSE_COMPLETE
            }
            other => {
                warn!(function = other, "task management function not supported");
                TMF_RESPONSE_NOT_SUPPORTED
            }
        }
    }
}
