//! The owner's link to its partner c.node (see [`super::mirror`]): one connection at a time;
//! each starts a new mirror (the journal resent from disk, then `CAUGHT_UP`), then the live
//! stream, where the threads that append, sync and release send their frames themselves. A
//! thread reads the partner's answers and wakes the writers they complete; a partner that
//! does not answer in time degrades the mirror ([`MirrorStatus`]).
//!
//! On the live stream a record is copied into [`Pending`] under the journal's lock (no
//! system call there) and sent once the lock is released ([`Link::flush_pending`]): the first
//! writer to reach the socket sends what every writer queued meanwhile, in one `write`, so at
//! queue depth 32 records cross the loopback in batches and the partner answers them with one
//! `RECEIVED`.

use std::collections::VecDeque;
use std::io::{BufReader, BufWriter, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use weft_engine::journal::{Journal, JournalRecord};
use weft_engine::write_log::RecordHeader;

use super::handover::{Coverage, Handover};
use super::wire;

/// How long the owner waits for its partner's answer before it declares the mirror degraded.
pub const MIRROR_ACK_TIMEOUT: Duration = Duration::from_secs(2);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

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

#[derive(Debug, Clone, Copy)]
pub(super) enum Wait {
    Received,
    Synced,
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
    /// lock); whoever holds `direct` next sends them before its own frame.
    pending: Mutex<Pending>,
    /// The sender waits here for the outbox.
    outbox_ready: Condvar,
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
    out: BufWriter<TcpStream>,
    /// The buffer [`Pending`] gets back after a send (no allocation per batch).
    spare: Vec<u8>,
}

/// Frames queued for connection `connection`'s live stream.
#[derive(Debug, Default)]
struct Pending {
    connection: u64,
    bytes: Vec<u8>,
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
            outbox_ready: Condvar::new(),
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
            let mut pending = self.pending.lock();
            if pending.connection > connection {
                // Connection `connection` ended after this thread looked: the next one
                // resends this record from the journal (it was on disk before that one's
                // scan), and its own queued records must not be dropped for it.
                return;
            }
            if pending.connection < connection {
                pending.connection = connection;
                pending.bytes.clear();
            }
            wire::write_record_parts(&mut pending.bytes, seq, header, payload)
                .expect("writing to a Vec does not fail");
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
            self.send_direct(connection, |w| match &out {
                Out::Record(r) => wire::write_record(w, r),
                Out::Sync(s) => wire::write_seq(w, wire::SYNC, *s),
                Out::Release(s) => wire::write_seq(w, wire::RELEASE, *s),
            });
            return true;
        }
        st.outbox.push_back(out);
        self.outbox_ready.notify_one();
        true
    }

    /// Send the records queued on the live stream, if another writer has not sent them
    /// yet: called after appending, once the journal's lock is released.
    pub(super) fn flush_pending(&self) {
        let connection = {
            let st = self.st.lock();
            if !st.direct {
                return;
            }
            st.connection
        };
        if self.pending.lock().bytes.is_empty() {
            return;
        }
        self.send_direct(connection, |_| Ok(()));
    }

    /// Write the queued records and then a frame on the live stream of `connection`, and
    /// flush; a failure ends the connection (the mirror degrades; the next connection resends
    /// the journal from disk, where these records already are).
    fn send_direct(
        &self,
        connection: u64,
        write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>,
    ) {
        let mut direct = self.direct.lock();
        let Some(d) = direct.as_mut().filter(|d| d.connection == connection) else {
            return;
        };
        let mut batch = std::mem::take(&mut d.spare);
        batch.clear();
        {
            let mut pending = self.pending.lock();
            if pending.connection == connection {
                std::mem::swap(&mut pending.bytes, &mut batch);
            }
        }
        // One system call for the queued records and the frame (the buffered writer is
        // empty on the live stream: every send flushes it).
        let sent = write(&mut batch)
            .and_then(|()| d.out.flush())
            .and_then(|()| d.out.get_mut().write_all(&batch));
        d.spare = batch;
        if let Err(e) = sent {
            *direct = None;
            drop(direct);
            let mut st = self.st.lock();
            if st.connection == connection {
                self.end_connection(&mut st, &format!("sending to the partner: {e}"));
            }
        }
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
    /// taken.
    pub(super) fn wait(&self, seq: u64, what: Wait) -> bool {
        let mut st = self.st.lock();
        if !st.mirrored {
            return false;
        }
        let connection = st.connection;
        let deadline = std::time::Instant::now() + MIRROR_ACK_TIMEOUT;
        loop {
            let done = match what {
                Wait::Received => st.received >= seq,
                Wait::Synced => st.synced >= seq,
            };
            if done {
                return true;
            }
            if !st.mirrored || st.connection != connection {
                return false;
            }
            let slot = &self.answered[(seq % ANSWER_SLOTS as u64) as usize];
            if slot.wait_until(&mut st, deadline).timed_out() {
                self.end_connection(&mut st, "no answer within the acknowledgement time-out");
                return false;
            }
        }
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
        let reader = stream.try_clone()?;
        let acks = Arc::clone(self);
        std::thread::Builder::new()
            .name("weft-mirror-acks".into())
            .spawn(move || acks.read_acks(reader, connection))?;
        // However this connection ends, the partner and the ack reader see it closed.
        let _closer = Closer(stream.try_clone()?);
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
                    *self.direct.lock() = Some(Direct {
                        connection,
                        out,
                        spare: Vec::new(),
                    });
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

    fn read_acks(&self, stream: TcpStream, connection: u64) {
        let mut r = BufReader::new(stream);
        let why = loop {
            let (kind, body) = match wire::read_frame(&mut r) {
                Ok(f) => f,
                Err(e) => break format!("reading the partner's answers: {e}"),
            };
            let mut st = self.st.lock();
            if st.connection != connection {
                return;
            }
            match kind {
                wire::RECEIVED | wire::SYNCED => {
                    let Ok(seq) = wire::seq_of(&body) else {
                        break "a malformed answer".to_string();
                    };
                    if kind == wire::RECEIVED {
                        let before = st.received;
                        st.received = before.max(seq);
                        self.wake_answered(before, st.received);
                    } else {
                        let before = st.synced;
                        st.synced = before.max(seq);
                        self.wake_answered(before, st.synced);
                        // The first SYNCED answers CAUGHT_UP: the partner holds the whole
                        // journal; from now on acknowledgements wait for it.
                        if !st.mirrored {
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
                            continue;
                        }
                    }
                    // The journal state waits for the partner to hold everything acknowledged
                    // (lock order: the handover's, then the link's).
                    if st.mirrored && self.handover.upgrade_wanted() {
                        drop(st);
                        self.handover.try_mirrored(&|| self.coverage());
                        continue;
                    }
                }
                wire::HELLO => {
                    st.partner_id = String::from_utf8_lossy(&body).into_owned();
                }
                wire::REFUSED => {
                    break format!("the partner refused: {}", String::from_utf8_lossy(&body));
                }
                other => break format!("unexpected frame {other} from the partner"),
            }
        };
        let mut st = self.st.lock();
        if st.connection == connection {
            self.end_connection(&mut st, &why);
        }
    }
}
