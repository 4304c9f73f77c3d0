//! The owner's link to its partner c.node (see [`super::mirror`]): one connection at a time;
//! each starts a new mirror (the journal resent from disk, then `CAUGHT_UP`), then the live
//! stream, where the threads that append, sync and release send their frames themselves, and
//! the writers waiting for the partner's answers read them themselves. A partner that does
//! not answer in time degrades the mirror ([`MirrorStatus`]).
//!
//! On the live stream a record is copied into [`Pending`] under the journal's lock (no
//! system call there) and sent once the lock is released ([`Link::flush_pending`]): the first
//! writer to reach the socket becomes the sender and sends what every writer queued, in one
//! `write` per batch, until the queue is empty; the others go on to wait without blocking on
//! the socket. So at queue depth 32 records cross the loopback in batches and the partner
//! answers each batch with one `RECEIVED`.
//!
//! Answers: one waiting writer at a time holds the reader role ([`LinkState::reading`]) and
//! reads the socket itself, so at queue depth 1 the partner's answer wakes the writer that
//! waits for it, with no thread in between; it wakes the writers the answer completes and,
//! once its own record is answered, hands the role to a writer still waiting. The connection's
//! answer thread reads until the mirror caught up (nobody waits before that), then whenever
//! acknowledgements wait with no writer parked on them ([`Link::wait_then`], e.g. the NBD
//! front end's writes: the answer finishes them on this thread), else only what no writer
//! reads (answers to records nobody waits for, a closed connection), at most every
//! [`IDLE_READ_EVERY`]. It also degrades the mirror when such a wait's answer is late, and
//! fails the waits of a connection that ended.

use std::collections::VecDeque;
use std::io::{BufWriter, ErrorKind, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard};
use weft_engine::journal::{Journal, JournalRecord};
use weft_engine::write_log::RecordHeader;

use super::handover::{Coverage, Handover};
pub(super) use super::mirror_deferred::Wait;
use super::mirror_deferred::{Answered as AnsweredThen, DeferredWaits, Ready};
use super::wire;

/// How long the owner waits for its partner's answer before it declares the mirror degraded.
pub const MIRROR_ACK_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RECONNECT_EVERY: Duration = Duration::from_secs(1);
/// A reader blocked on the socket wakes this often to look at its deadline (so the mirror
/// degrades within this much after [`MIRROR_ACK_TIMEOUT`]).
const ANSWER_READ_SLICE: Duration = Duration::from_millis(100);
/// How often the answer thread reads what no writer did, once the mirror caught up; only
/// when no writer waited meanwhile, and only what has arrived (it never blocks a writer
/// that wants to read).
const IDLE_READ_EVERY: Duration = Duration::from_millis(20);
/// The answers' read buffer (answers are 13 bytes each).
const ANSWERS_BUFFER_BYTES: usize = 64 << 10;
const _: () = assert!(ANSWER_READ_SLICE.as_millis() < MIRROR_ACK_TIMEOUT.as_millis());

/// What the mirror is doing, for status and metrics.
#[derive(Debug, Default)]
pub struct MirrorStatus {
    pub partner: Mutex<Option<String>>,
    /// Acknowledgements wait for the partner.
    pub mirrored: AtomicBool,
    /// Why it is not, when it is not.
    pub degraded_why: Mutex<Option<String>>,
}

impl MirrorStatus {
    /// One line for status output: how acknowledged writes are protected.
    pub fn describe(&self) -> String {
        match self.partner.lock().clone() {
            None => "one copy: acknowledged writes not yet in stripes live only in this c.node's journal (no partner: start a second c.node with --mirror-listen and give this one --partner)".into(),
            Some(p) if self.mirrored.load(Ordering::Acquire) => format!("mirrored to partner {p}"),
            Some(p) => format!(
                "DEGRADED: partner {p} unreachable ({}); acknowledged writes not yet in stripes live only in this c.node's journal",
                self.degraded_why.lock().clone().unwrap_or_default()
            ),
        }
    }
}

/// Shuts a socket down both ways when dropped.
struct Closer(TcpStream);

impl Drop for Closer {
    fn drop(&mut self) {
        let _ = self.0.shutdown(std::net::Shutdown::Both);
    }
}

#[derive(Debug)]
pub(super) enum Out {
    Record(JournalRecord),
    Sync(u64),
    Release(u64),
}

#[derive(Debug, Default)]
struct LinkState {
    /// Records appended from now on go to the partner (a connection is starting or up).
    collecting: bool,
    /// The live stream: the threads that append records, sync and release write them to
    /// the socket themselves ([`Link::direct`]); before it (the journal resent from disk),
    /// they go to `outbox` and the sender thread writes them.
    direct: bool,
    /// Caught up: acknowledgements wait for the partner.
    mirrored: bool,
    /// Bumped when a connection ends, so waiters stop waiting for it.
    connection: u64,
    /// The partner's c.node id, from its hello.
    partner_id: String,
    outbox: VecDeque<Out>,
    received: u64,
    synced: u64,
    /// A thread holds the reader role: it alone reads [`Link::answers`].
    reading: bool,
    /// What the writers asleep until an answer wait for (they are not reading): the reader
    /// hands its role to one of them still unanswered when it stops.
    waiting: Vec<(u64, Wait)>,
    /// Waits begun, ever: the answer thread reads only when none began since it last looked.
    waits: u64,
    /// The acknowledgements waiting with no thread parked on them ([`Link::wait_then`]).
    deferred: DeferredWaits,
}

impl LinkState {
    fn answered(&self, seq: u64, what: Wait) -> bool {
        match what {
            Wait::Received => self.received >= seq,
            Wait::Synced => self.synced >= seq,
        }
    }
}

#[derive(Debug)]
pub(super) struct Link {
    partner: String,
    owner_id: String,
    dir: PathBuf,
    status: Arc<MirrorStatus>,
    handover: Arc<Handover>,
    st: Mutex<LinkState>,
    /// The live stream's socket once the sender handed it over (lock order: `st`, then
    /// this, then `pending`).
    direct: Mutex<Option<Direct>>,
    /// Frames of the live stream not sent yet, in seq order (appends hold the journal's
    /// lock); the thread sending sends them before it stops.
    pending: Mutex<Pending>,
    /// The partner's answers on the current connection, read by the thread holding the
    /// reader role (lock order: this, then `st`; `st` is never held while waiting for it).
    answers: Mutex<Option<Answers>>,
    /// The sender waits here for the outbox.
    outbox_ready: Condvar,
    /// The answer thread waits here for the reader role, before the mirror caught up and
    /// while acknowledgements wait in [`LinkState::deferred`].
    reader_free: Condvar,
    /// The idle answer thread waits here: a new entry in [`LinkState::deferred`] wakes it.
    deferred_ready: Condvar,
    /// A writer waiting for seq `s` waits on `answered[s % ANSWER_SLOTS]`, so an answer wakes
    /// the writers it completes, not all of them (at QD32 waking every waiter on every
    /// answer cost more CPU than the mirror's I/O).
    answered: [Condvar; ANSWER_SLOTS],
}

/// Condition variables the waiting writers are spread over, by seq.
const ANSWER_SLOTS: usize = 64;

/// The socket of connection `connection`, written by whoever sends.
#[derive(Debug)]
struct Direct {
    connection: u64,
    stream: TcpStream,
}

/// Frames queued for connection `connection`'s live stream.
#[derive(Debug, Default)]
struct Pending {
    connection: u64,
    bytes: Vec<u8>,
    /// A thread is sending for `connection`: it sends what is queued before it stops.
    sending: bool,
    /// The sender's buffer between sends (no allocation per batch).
    spare: Vec<u8>,
}

/// The reading side of connection `connection`.
#[derive(Debug)]
struct Answers {
    connection: u64,
    stream: TcpStream,
    frames: wire::FrameReader,
    /// Whether the socket's read time-out is set (once: no system call per read).
    timeout_set: bool,
}

/// How a read of the answers waits.
#[derive(Debug, Clone, Copy)]
enum ReadWait {
    /// Up to [`ANSWER_READ_SLICE`] for the first byte.
    Slice,
    /// Not at all: what has arrived.
    No,
}

/// Reads a socket without blocking (`MSG_DONTWAIT`; the socket itself stays blocking, for
/// the writers and the readers that wait).
struct DontWait<'a>(&'a TcpStream);

impl std::io::Read for DontWait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        use std::os::fd::AsRawFd;
        // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes for the call's
        // duration, and the descriptor is kept open by the borrowed stream.
        #[allow(unsafe_code)]
        let n = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(usize::try_from(n).expect("not negative"))
    }
}

/// What one read of the partner's answers said.
#[derive(Debug, Default)]
struct Answered {
    partner_id: Option<String>,
    received: Option<u64>,
    synced: Option<u64>,
}

impl Link {
    pub(super) fn start(
        partner: String,
        owner_id: String,
        dir: PathBuf,
        status: Arc<MirrorStatus>,
        handover: Arc<Handover>,
    ) -> Arc<Link> {
        *status.partner.lock() = Some(partner.clone());
        *status.degraded_why.lock() = Some("not connected yet".into());
        let link = Arc::new(Link {
            partner,
            owner_id,
            dir,
            status,
            handover,
            st: Mutex::new(LinkState::default()),
            direct: Mutex::new(None),
            pending: Mutex::new(Pending::default()),
            answers: Mutex::new(None),
            outbox_ready: Condvar::new(),
            reader_free: Condvar::new(),
            deferred_ready: Condvar::new(),
            answered: std::array::from_fn(|_| Condvar::new()),
        });
        let runner = Arc::clone(&link);
        std::thread::Builder::new()
            .name("weft-mirror".into())
            .spawn(move || runner.run())
            .expect("spawning the mirror thread");
        link
    }

    /// Called with the journal locked, so records go out in seq order: on the live stream
    /// queued in [`Pending`] for [`Link::flush_pending`] (called once the journal's lock is
    /// released), else queued for the sender thread.
    pub(super) fn record(&self, seq: u64, header: RecordHeader, payload: &[u8]) {
        let mut st = self.st.lock();
        if !st.collecting {
            return;
        }
        if st.direct {
            let connection = st.connection;
            drop(st);
            self.queue(connection, |bytes| {
                wire::write_record_parts(bytes, seq, header, payload)
            });
            return;
        }
        st.outbox.push_back(Out::Record(JournalRecord {
            seq,
            header,
            payload: payload.to_vec(),
        }));
        self.outbox_ready.notify_one();
    }

    /// SYNC or RELEASE, once the partner caught up; false when it has not (nothing sent).
    pub(super) fn push(&self, out: Out) -> bool {
        let mut st = self.st.lock();
        if !st.mirrored {
            return false;
        }
        if st.direct {
            let connection = st.connection;
            drop(st);
            // After every record queued before it: a SYNC reaches the partner after the
            // records it covers.
            self.queue(connection, |bytes| match &out {
                Out::Record(r) => wire::write_record(bytes, r),
                Out::Sync(s) => wire::write_seq(bytes, wire::SYNC, *s),
                Out::Release(s) => wire::write_seq(bytes, wire::RELEASE, *s),
            });
            self.send_pending(connection);
            return true;
        }
        st.outbox.push_back(out);
        self.outbox_ready.notify_one();
        true
    }

    /// Queue a frame for connection `connection`'s live stream.
    fn queue(&self, connection: u64, write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) {
        let mut pending = self.pending.lock();
        if pending.connection > connection {
            // Connection `connection` ended after this thread looked: the next one resends
            // this record from the journal (it was on disk before that one's scan), and its
            // own queued records must not be dropped for it.
            return;
        }
        if pending.connection < connection {
            pending.connection = connection;
            pending.bytes.clear();
            // A sender of the old connection leaves without sending for this one.
            pending.sending = false;
        }
        write(&mut pending.bytes).expect("writing to a Vec does not fail");
    }

    /// Send the records queued on the live stream, unless another writer is sending: called
    /// after appending, once the journal's lock is released.
    pub(super) fn flush_pending(&self) {
        let connection = {
            let st = self.st.lock();
            if !st.direct {
                return;
            }
            st.connection
        };
        self.send_pending(connection);
    }

    /// Become the sender of connection `connection` and send what is queued, one `write` per
    /// batch, until nothing is; at once if another thread is the sender (it sends what this
    /// one queued). A failure ends the connection (the mirror degrades; the next connection
    /// resends the journal from disk, where these records already are).
    fn send_pending(&self, connection: u64) {
        let mut batch = {
            let mut pending = self.pending.lock();
            if pending.connection != connection || pending.sending || pending.bytes.is_empty() {
                return;
            }
            pending.sending = true;
            let spare = std::mem::take(&mut pending.spare);
            std::mem::replace(&mut pending.bytes, spare)
        };
        loop {
            let sent = self.write_direct(connection, &batch);
            batch.clear();
            let mut pending = self.pending.lock();
            if pending.connection != connection {
                // The connection ended and the next one started: its queue is not ours.
                return;
            }
            if sent.is_err() || pending.bytes.is_empty() {
                pending.sending = false;
                pending.spare = batch;
                drop(pending);
                if let Err(e) = sent {
                    let mut st = self.st.lock();
                    if st.connection == connection {
                        self.end_connection(&mut st, &format!("sending to the partner: {e}"));
                    }
                }
                return;
            }
            std::mem::swap(&mut pending.bytes, &mut batch);
        }
    }

    fn write_direct(&self, connection: u64, bytes: &[u8]) -> std::io::Result<()> {
        let mut direct = self.direct.lock();
        let Some(d) = direct.as_mut().filter(|d| d.connection == connection) else {
            return Err(std::io::Error::other("the connection ended"));
        };
        let sent = d.stream.write_all(bytes);
        if sent.is_err() {
            *direct = None;
        }
        sent
    }

    /// What the partner holds on the current connection, once it caught up.
    pub(super) fn coverage(&self) -> Option<Coverage> {
        let st = self.st.lock();
        st.mirrored.then_some(Coverage {
            received: st.received,
            synced: st.synced,
        })
    }

    /// Wait until the partner holds (or synced) `seq`: true once it does; false at once when
    /// the mirror is degraded, and after degrading it when the partner does not answer in
    /// time. For `Wait::Synced` the caller has pushed `Out::Sync(seq)` first, and it was
    /// taken. While no other thread reads the partner's answers, this one does.
    pub(super) fn wait(&self, seq: u64, what: Wait) -> bool {
        let mut st = self.st.lock();
        if !st.mirrored {
            return false;
        }
        st.waits += 1;
        let connection = st.connection;
        let deadline = Instant::now() + MIRROR_ACK_TIMEOUT;
        loop {
            if st.answered(seq, what) {
                return true;
            }
            if !st.mirrored || st.connection != connection {
                return false;
            }
            if Instant::now() >= deadline {
                self.end_connection(&mut st, "no answer within the acknowledgement time-out");
                return false;
            }
            if !st.reading {
                st.reading = true;
                let read = MutexGuard::unlocked(&mut st, || {
                    self.read_answers(connection, ReadWait::Slice)
                });
                self.stop_reading(&mut st);
                match read {
                    Err(why) => {
                        if st.connection == connection {
                            self.end_connection(&mut st, &why);
                        }
                        return false;
                    }
                    // Once the role is handed on: the next reader need not wait for them.
                    Ok(ready) => MutexGuard::unlocked(&mut st, || ready.run()),
                }
                continue;
            }
            st.waiting.push((seq, what));
            let slot = &self.answered[(seq % ANSWER_SLOTS as u64) as usize];
            slot.wait_until(&mut st, deadline);
            let at = st
                .waiting
                .iter()
                .position(|w| *w == (seq, what))
                .expect("a waiter stays listed until it wakes");
            st.waiting.swap_remove(at);
        }
    }

    /// [`Link::wait`] without parking this thread: `done` gets what `wait` would return, on
    /// this thread when that is known now, else on the thread that reads the answer (or that
    /// sees the connection end, or the answer late: `false`, the mirror degraded). `done` runs
    /// with no lock of the link held.
    pub(super) fn wait_then(&self, seq: u64, what: Wait, done: AnsweredThen) {
        let mut st = self.st.lock();
        if !st.mirrored {
            drop(st);
            return done(false);
        }
        if st.answered(seq, what) {
            drop(st);
            return done(true);
        }
        let connection = st.connection;
        let deadline = Instant::now() + MIRROR_ACK_TIMEOUT;
        st.deferred.push(seq, what, connection, deadline, done);
        drop(st);
        self.deferred_ready.notify_one();
    }

    /// Give the reader role up: to a writer still waiting for an answer, if any (else to the
    /// answer thread, should it want it). Not to one already answered: it would return
    /// without reading and leave the others asleep.
    fn stop_reading(&self, st: &mut LinkState) {
        st.reading = false;
        match st
            .waiting
            .iter()
            .find(|(seq, what)| !st.answered(*seq, *what))
        {
            Some((seq, _)) => {
                self.answered[(seq % ANSWER_SLOTS as u64) as usize].notify_all();
            }
            None => {
                self.reader_free.notify_one();
            }
        }
    }

    /// One read of connection `connection`'s answers, applied: the acknowledgements it
    /// finishes, for the caller to run once it gave the reader role up; `Err` when the
    /// connection is over (and why).
    fn read_answers(&self, connection: u64, wait: ReadWait) -> Result<Ready, String> {
        let mut answers = self.answers.lock();
        let Some(a) = answers.as_mut().filter(|a| a.connection == connection) else {
            return Err("the connection ended".into());
        };
        if !a.timeout_set {
            a.stream
                .set_read_timeout(Some(ANSWER_READ_SLICE))
                .map_err(|e| format!("reading the partner's answers: {e}"))?;
            a.timeout_set = true;
        }
        let filled = match wait {
            ReadWait::Slice => a.frames.fill(&mut a.stream),
            ReadWait::No => a.frames.fill(&mut DontWait(&a.stream)),
        };
        match filled {
            Ok(0) => return Err("the partner closed the connection".into()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Ok(Ready::none())
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(Ready::none()),
            Err(e) => return Err(format!("reading the partner's answers: {e}")),
        }
        let mut got = Answered::default();
        let malformed = |e: std::io::Error| format!("a malformed answer: {e}");
        while let Some(frame) = a.frames.next_frame().map_err(malformed)? {
            let body = a.frames.body(&frame);
            match frame.kind {
                wire::RECEIVED => {
                    let seq = wire::seq_of(body).map_err(malformed)?;
                    got.received = got.received.max(Some(seq));
                }
                wire::SYNCED => {
                    let seq = wire::seq_of(body).map_err(malformed)?;
                    got.synced = got.synced.max(Some(seq));
                }
                wire::HELLO => got.partner_id = Some(String::from_utf8_lossy(body).into_owned()),
                wire::REFUSED => {
                    return Err(format!(
                        "the partner refused: {}",
                        String::from_utf8_lossy(body)
                    ))
                }
                other => return Err(format!("unexpected frame {other} from the partner")),
            }
        }
        drop(answers);
        Ok(self.apply(connection, got))
    }

    /// Take in what the partner answered on connection `connection`: wake the writers it
    /// completes; its first `SYNCED` (the answer to `CAUGHT_UP`) makes the mirror caught up.
    /// Returns the acknowledgements waiting without a thread that it finishes.
    fn apply(&self, connection: u64, got: Answered) -> Ready {
        let mut st = self.st.lock();
        if st.connection != connection {
            return Ready::none();
        }
        if let Some(id) = got.partner_id {
            st.partner_id = id;
        }
        if let Some(seq) = got.received {
            let before = st.received;
            st.received = before.max(seq);
            self.wake_answered(before, st.received);
        }
        if let Some(seq) = got.synced {
            let before = st.synced;
            st.synced = before.max(seq);
            self.wake_answered(before, st.synced);
        }
        let (received, synced) = (st.received, st.synced);
        let ready = st.deferred.take_answered(connection, received, synced);
        // The first SYNCED answers CAUGHT_UP: the partner holds the whole journal; from now
        // on acknowledgements wait for it.
        if got.synced.is_some() && !st.mirrored {
            st.mirrored = true;
            self.status.mirrored.store(true, Ordering::Release);
            *self.status.degraded_why.lock() = None;
            tracing::info!(partner = %self.partner, "write-buffer mirror caught up: writes are acknowledged in two c.nodes");
            self.wake_all();
            let partner_id = st.partner_id.clone();
            drop(st);
            // Lock order: the handover's, then the link's.
            self.handover.mirror_caught_up(&partner_id, &|| {
                let st = self.st.lock();
                (st.mirrored && st.connection == connection).then_some(Coverage {
                    received: st.received,
                    synced: st.synced,
                })
            });
            return ready;
        }
        // The journal state waits for the partner to hold everything acknowledged (lock
        // order: the handover's, then the link's).
        let upgrade = (got.received.is_some() || got.synced.is_some())
            && st.mirrored
            && self.handover.upgrade_wanted();
        drop(st);
        if upgrade {
            self.handover.try_mirrored(&|| self.coverage());
        }
        ready
    }

    fn end_connection(&self, st: &mut LinkState, why: &str) {
        if st.mirrored {
            tracing::error!(partner = %self.partner, why, "write-buffer mirror DEGRADED: writes are acknowledged from this c.node's journal alone until the partner is back");
        }
        st.collecting = false;
        st.mirrored = false;
        st.direct = false;
        *self.direct.lock() = None;
        self.pending.lock().bytes.clear();
        st.outbox.clear();
        st.connection += 1;
        self.status.mirrored.store(false, Ordering::Release);
        *self.status.degraded_why.lock() = Some(why.to_string());
        self.wake_all();
    }

    /// The partner's answers moved from `from` to `to`: wake the writers waiting for the
    /// seqs in between.
    fn wake_answered(&self, from: u64, to: u64) {
        if to.saturating_sub(from) >= ANSWER_SLOTS as u64 {
            self.answered.iter().for_each(|c| {
                c.notify_all();
            });
            return;
        }
        for seq in from + 1..=to {
            self.answered[(seq % ANSWER_SLOTS as u64) as usize].notify_all();
        }
    }

    /// The mirror's state changed: every waiter looks again.
    fn wake_all(&self) {
        self.outbox_ready.notify_all();
        self.reader_free.notify_all();
        self.deferred_ready.notify_all();
        self.answered.iter().for_each(|c| {
            c.notify_all();
        });
    }

    fn run(self: Arc<Self>) {
        loop {
            let why = match self.connect() {
                Ok(stream) => match self.serve(stream) {
                    Ok(()) => "connection closed".to_string(),
                    Err(e) => e.to_string(),
                },
                Err(e) => format!("cannot connect: {e}"),
            };
            self.end_connection(&mut self.st.lock(), &why);
            std::thread::sleep(RECONNECT_EVERY);
        }
    }

    fn connect(&self) -> std::io::Result<TcpStream> {
        let addr = self
            .partner
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| std::io::Error::other("the partner address resolves to nothing"))?;
        let stream = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)?;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// One connection: resend the journal, then stream.
    fn serve(self: &Arc<Self>, stream: TcpStream) -> std::io::Result<()> {
        let connection = {
            let mut st = self.st.lock();
            st.collecting = true;
            st.outbox.clear();
            st.received = 0;
            st.synced = 0;
            st.connection
        };
        // However this connection ends, the partner and its readers see it closed.
        let _closer = Closer(stream.try_clone()?);
        // Waits for a reader of the last connection to let go (its socket is shut down).
        *self.answers.lock() = Some(Answers {
            connection,
            stream: stream.try_clone()?,
            frames: wire::FrameReader::new(ANSWERS_BUFFER_BYTES),
            timeout_set: false,
        });
        let acks = Arc::clone(self);
        std::thread::Builder::new()
            .name("weft-mirror-acks".into())
            .spawn(move || acks.read_acks(connection))?;
        let mut out = BufWriter::with_capacity(1 << 20, stream);
        wire::write_frame(&mut out, wire::HELLO, self.owner_id.as_bytes())?;
        // Everything on disk now; what is appended from here on is also in the outbox.
        let on_disk = Journal::scan(&self.dir).map_err(std::io::Error::other)?;
        let mut last_sent = 0;
        for r in &on_disk {
            wire::write_record(&mut out, r)?;
            last_sent = r.seq;
        }
        wire::write_seq(&mut out, wire::CAUGHT_UP, last_sent)?;
        out.flush()?;
        tracing::info!(partner = %self.partner, records = on_disk.len(), "write-buffer mirror connected; resent the journal");
        // What was appended meanwhile, from the outbox; then the socket goes to the threads
        // that append (the live stream), and this thread waits for the connection's end.
        loop {
            let batch: Vec<Out> = {
                let mut st = self.st.lock();
                if st.connection != connection {
                    return Err(std::io::Error::other("the connection was declared dead"));
                }
                if st.outbox.is_empty() {
                    // A partner that stops reading must not hold the appending threads (and
                    // the journal's lock) for ever: its connection ends instead.
                    out.get_ref().set_write_timeout(Some(MIRROR_ACK_TIMEOUT))?;
                    let stream = out.into_inner().map_err(|e| e.into_error())?;
                    *self.direct.lock() = Some(Direct { connection, stream });
                    st.direct = true;
                    loop {
                        self.outbox_ready
                            .wait_for(&mut st, Duration::from_millis(100));
                        if st.connection != connection {
                            return Err(std::io::Error::other("the connection ended"));
                        }
                    }
                }
                st.outbox.drain(..).collect()
            };
            for o in &batch {
                match o {
                    Out::Record(r) if r.seq > last_sent => {
                        wire::write_record(&mut out, r)?;
                        last_sent = r.seq;
                    }
                    Out::Record(_) => {}
                    Out::Sync(s) => wire::write_seq(&mut out, wire::SYNC, *s)?,
                    Out::Release(s) => wire::write_seq(&mut out, wire::RELEASE, *s)?,
                }
            }
            out.flush()?;
        }
    }

    /// The answer thread of connection `connection`: it reads until the mirror caught up
    /// (nobody waits for an answer before that), then for the acknowledgements waiting in
    /// [`LinkState::deferred`] while there are any, else what no writer reads, every
    /// [`IDLE_READ_EVERY`] when no writer began waiting meanwhile (answers to records nobody
    /// waits for must not fill the socket; a closed connection must degrade the mirror).
    /// When the connection ends, it fails the waits left on it.
    fn read_acks(&self, connection: u64) {
        let mut waits_seen = u64::MAX;
        let mut st = self.st.lock();
        loop {
            if st.connection != connection {
                let ended = st.deferred.take_ended(connection);
                drop(st);
                ended.run();
                return;
            }
            let wait = if !st.mirrored || !st.deferred.is_empty() {
                if st.reading {
                    self.reader_free.wait_for(&mut st, ANSWER_READ_SLICE);
                    continue;
                }
                ReadWait::Slice
            } else {
                // Look every IDLE_READ_EVERY, not more often (after a read too), unless an
                // acknowledgement begins to wait meanwhile.
                self.deferred_ready.wait_for(&mut st, IDLE_READ_EVERY);
                if st.connection != connection || !st.deferred.is_empty() {
                    continue;
                }
                let idle = !st.reading && st.waiting.is_empty() && st.waits == waits_seen;
                waits_seen = st.waits;
                if !idle {
                    continue;
                }
                ReadWait::No
            };
            st.reading = true;
            let read = MutexGuard::unlocked(&mut st, || self.read_answers(connection, wait));
            self.stop_reading(&mut st);
            if st.connection != connection {
                continue;
            }
            match read {
                Err(why) => self.end_connection(&mut st, &why),
                Ok(ready) => {
                    // Looked at after reading, before finishing what it read: answers that
                    // arrive while this thread finishes acknowledgements are not late.
                    if st.deferred.overdue(Instant::now()) {
                        self.end_connection(
                            &mut st,
                            "no answer within the acknowledgement time-out",
                        );
                    }
                    // Without the reader role: a writer that waits reads meanwhile.
                    MutexGuard::unlocked(&mut st, || ready.run());
                }
            }
        }
    }
}
