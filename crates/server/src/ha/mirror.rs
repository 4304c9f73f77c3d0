//! The owner's write log: its local journal, plus (with a partner) a mirror of every record
//! on the partner c.node, plus the ownership check. [`OwnedLogSource`] opens it for the
//! engine.
//!
//! - A record is acknowledged ([`WriteLog::replicated`]) once the partner said it holds it
//!   (in its own journal, so in its RAM and surviving a kill -9 of both processes), and only
//!   while this c.node's ownership lease is surely alive.
//! - FLUSH ([`WriteLog::sync`]) waits for the local fdatasync and for the partner's.
//! - [`WriteLog::replicated_then`] and [`WriteLog::sync_then`] apply the same rules without
//!   parking the caller for the partner's answer: the thread that reads the answer finishes
//!   the acknowledgement (the handover's record, the lease check) and calls back.
//! - Each connection to the partner starts a new mirror: every record on the local journal
//!   is sent again (read from disk), then `CAUGHT_UP`, then new records as they come.
//!   Records appended meanwhile are collected in memory from the moment the connection
//!   starts, so none falls between the disk read and the live stream.
//! - When the partner cannot be reached, or does not answer within the acknowledgement
//!   time-out, the mirror is *degraded*: writes are acknowledged from the local journal alone
//!   (as without a partner) and the log, `/metrics` and `weft cluster status` say so, until a
//!   new connection has caught up.
//!
//! The connection to the partner is [`super::mirror_link`]'s.

use std::path::PathBuf;
use std::sync::Arc;

use weft_engine::journal::{Journal, JournalOptions, JournalRecord};
use weft_engine::write_log::{Acked, LogAppender, RecordHeader, WriteLog, WriteLogSource};
use weft_engine::IoFailure;

use super::handover::Handover;
use super::mirror_link::{Link, Out, Wait};
pub use super::mirror_link::{MirrorStatus, MIRROR_ACK_TIMEOUT};
use super::ownership::Ownership;

/// Opens the owner's write log for the engine.
#[derive(Debug, Clone)]
pub struct OwnedLogSource {
    pub dir: PathBuf,
    pub options: JournalOptions,
    /// The partner's mirror address (`None`: no partner; one copy).
    pub partner: Option<String>,
    pub owner_id: String,
    /// What the partner is told this mirror is: the owner's id, or `<id>@<shard>` for a
    /// shard owned besides the own one (the partner keeps it in that shard's dir).
    pub mirror_name: String,
    pub ownership: Arc<Ownership>,
    pub status: Arc<MirrorStatus>,
    /// Where the journal's state goes (see [`super::handover`]).
    pub kv: Arc<dyn weft_meta::MetaStore>,
    /// The shard whose journal this is.
    pub shard: weft_engine::ShardId,
}

impl WriteLogSource for OwnedLogSource {
    fn open(
        &self,
        min_next_seq: u64,
    ) -> Result<(Box<dyn WriteLog>, Vec<JournalRecord>), IoFailure> {
        let (journal, records) = Journal::open(&self.dir, min_next_seq, self.options)?;
        // Every record already in the journal was acknowledged by an earlier run.
        let acknowledged = records.last().map_or(0, |r| r.seq);
        let handover = Arc::new(
            Handover::start(
                Arc::clone(&self.kv),
                self.shard,
                self.owner_id.clone(),
                self.partner.clone(),
                acknowledged,
            )
            .map_err(|e| {
                IoFailure::disk(
                    "c.node journal state",
                    std::io::Error::other(format!("{e:#}")),
                )
            })?,
        );
        let link = self.partner.as_ref().map(|partner| {
            Link::start(
                partner.clone(),
                self.mirror_name.clone(),
                self.dir.clone(),
                Arc::clone(&self.status),
                Arc::clone(&handover),
            )
        });
        let log = OwnedLog {
            local: journal,
            acks: Arc::new(Acks {
                link,
                ownership: Arc::clone(&self.ownership),
                handover,
            }),
        };
        Ok((Box::new(log), records))
    }

    fn scan(&self) -> Result<Vec<JournalRecord>, IoFailure> {
        Journal::scan(&self.dir)
    }
}

#[derive(Debug)]
struct OwnedLog {
    local: Journal,
    acks: Arc<Acks>,
}

/// What an acknowledgement needs besides the local journal: shared with the callbacks of
/// [`WriteLog::replicated_then`] and [`WriteLog::sync_then`], which may finish on the thread
/// that read the partner's answer.
#[derive(Debug)]
struct Acks {
    link: Option<Arc<Link>>,
    ownership: Arc<Ownership>,
    handover: Arc<Handover>,
}

struct Tee<'a> {
    inner: &'a mut dyn LogAppender,
    link: Option<&'a Link>,
}

impl LogAppender for Tee<'_> {
    fn append(&mut self, header: RecordHeader, payload: &[u8]) -> Result<u64, IoFailure> {
        let seq = self.inner.append(header, payload)?;
        if let Some(link) = self.link {
            link.record(seq, header, payload);
        }
        Ok(seq)
    }
}

impl WriteLog for OwnedLog {
    fn with_lock(&self, f: &mut dyn FnMut(&mut dyn LogAppender)) {
        let link = self.acks.link.as_deref();
        WriteLog::with_lock(&self.local, &mut |inner| {
            let mut tee = Tee { inner, link };
            f(&mut tee);
        });
        // Outside the journal's lock: the socket write (and the wait for another writer's)
        // holds up no append.
        if let Some(link) = link {
            link.flush_pending();
        }
    }

    fn sync(&self, upto: u64) -> Result<(), IoFailure> {
        // The partner's fdatasync runs while this one does, not after it. A SYNC not sent (the
        // mirror was not caught up) is not waited for: this FLUSH is durable here alone.
        let asked = self.acks.ask_sync(upto);
        self.local.sync(upto)?;
        let both = asked.is_some_and(|link| link.wait(upto, Wait::Synced));
        self.acks.synced(upto, both)
    }

    fn sync_then(&self, upto: u64, done: Acked) {
        let asked = self.acks.ask_sync(upto).cloned();
        if let Err(e) = self.local.sync(upto) {
            return done(Err(e));
        }
        let Some(link) = asked else {
            return done(self.acks.synced(upto, false));
        };
        let acks = Arc::clone(&self.acks);
        link.wait_then(
            upto,
            Wait::Synced,
            Box::new(move |both| done(acks.synced(upto, both))),
        );
    }

    fn written_seq(&self) -> u64 {
        self.local.written_seq()
    }

    fn release_upto(&self, hwm: u64) -> Result<(), IoFailure> {
        self.local.release_upto(hwm)?;
        if let Some(link) = &self.acks.link {
            let _ = link.push(Out::Release(hwm));
        }
        self.acks.handover.released(hwm);
        Ok(())
    }

    fn pieces_in_use(&self) -> usize {
        self.local.file_count()
    }

    fn may_serve(&self) -> Result<(), IoFailure> {
        self.acks.may_acknowledge()
    }

    fn replicated(&self, seq: u64) -> Result<(), IoFailure> {
        let mirrored = self
            .acks
            .link
            .as_ref()
            .is_some_and(|link| link.wait(seq, Wait::Received));
        self.acks.replicated(seq, mirrored)
    }

    fn replicated_then(&self, seq: u64, done: Acked) {
        let Some(link) = &self.acks.link else {
            return done(self.acks.replicated(seq, false));
        };
        let acks = Arc::clone(&self.acks);
        link.wait_then(
            seq,
            Wait::Received,
            Box::new(move |mirrored| done(acks.replicated(seq, mirrored))),
        );
    }
}

impl Acks {
    /// Ask the partner to sync up to `upto`: its link when it took the SYNC.
    fn ask_sync(&self, upto: u64) -> Option<&Arc<Link>> {
        self.link.as_ref().filter(|link| link.push(Out::Sync(upto)))
    }

    /// `seq` is in the local journal and (when `mirrored`) the partner's: may it be
    /// acknowledged?
    fn replicated(&self, seq: u64, mirrored: bool) -> Result<(), IoFailure> {
        self.record(seq, mirrored)?;
        self.may_acknowledge()
    }

    /// `upto` is synced here, and (when `both`) on the partner: may the FLUSH be answered?
    fn synced(&self, upto: u64, both: bool) -> Result<(), IoFailure> {
        if !both {
            // Durable here alone: a successor must know.
            self.handover.partner_unsynced(upto).map_err(|e| {
                IoFailure::disk(
                    "c.node journal state",
                    std::io::Error::other(format!("{e:#}")),
                )
            })?;
        }
        self.may_acknowledge()
    }

    /// Before acknowledging `seq`: etcd must say at least as much as is true.
    fn record(&self, seq: u64, mirrored: bool) -> Result<(), IoFailure> {
        let coverage = || self.link.as_ref().and_then(|link| link.coverage());
        self.handover
            .before_ack(seq, mirrored, &coverage)
            .map_err(|e| {
                IoFailure::disk(
                    "c.node journal state",
                    std::io::Error::other(format!("{e:#}")),
                )
            })
    }

    fn may_acknowledge(&self) -> Result<(), IoFailure> {
        self.ownership
            .may_acknowledge()
            .map_err(|why| IoFailure::disk("c.node ownership", std::io::Error::other(why)))
    }
}
