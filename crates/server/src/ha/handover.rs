//! What a dead owner left behind, recorded in etcd before it mattered, so that whoever takes
//! the cluster over next knows whether it may. `weft/cnode-journal` says, for the owner:
//!
//! - `clean`: every write it acknowledged is in durable stripes (its journal holds nothing a
//!   successor needs): any c.node may take over;
//! - `mirrored`: acknowledged writes may be in its journal, and its partner holds them all:
//!   only the owner itself (restarted on its data dir) or that partner, with a complete
//!   mirror, may take over;
//! - `unprotected`: acknowledged writes may be in its journal alone (no partner, or the
//!   mirror was degraded when they were acknowledged): only the owner itself may take over.
//!
//! The owner writes the state *before* it acknowledges a write that needs it
//! ([`Handover::before_ack`]) and writes `clean` only when every write it acknowledged is
//! released from the journal ([`Handover::released`]), both under one lock, so etcd never says
//! less than the truth. `mirrored` comes back after `unprotected` only when the partner's
//! answers, read under that lock ([`Coverage`]), cover every acknowledged record still in the
//! journal and every record a FLUSH made durable here alone: not at the moment a new mirror
//! connection caught up (records appended during the resend may still be on their way), and
//! not never (a write that saw the mirror down just before it caught up must not leave the
//! state `unprotected` for good, which would refuse the partner a takeover it can make). A missing key (a cluster made before this record) reads as `clean`.
//! `weft cnode --force-takeover` overrides the rule: it gives the dead owner's
//! unprotected writes up, and says so.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::Context;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use weft_engine::ShardId;
use weft_meta::MetaStore;

/// Where shard 0's journal state lives (the cluster's, before shards).
pub const JOURNAL_STATE_KEY: &str = "weft/cnode-journal";

/// Where a shard's journal state lives: shard 0's at [`JOURNAL_STATE_KEY`], shard n's at
/// `weft/shards/<n>/journal`.
pub fn journal_state_key(shard: ShardId) -> String {
    if shard == ShardId::default() {
        JOURNAL_STATE_KEY.to_string()
    } else {
        format!(
            "{}{shard}/journal",
            weft_engine::metastore::SHARD_STATES_PREFIX
        )
    }
}
/// How long recording the journal state tries before the acknowledgement fails.
const PUT_RETRY_FOR: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum JournalState {
    Clean,
    Mirrored,
    Unprotected,
}

/// The value of `weft/cnode-journal`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalRecordOfOwner {
    pub owner: String,
    pub state: JournalState,
    /// The partner's mirror address and c.node id when `mirrored`.
    #[serde(default)]
    pub partner: String,
    #[serde(default)]
    pub partner_id: String,
}

/// Whether `me` may take the cluster over, given what the last owner recorded;
/// `holds_mirror_of(owner)`: `me` holds a complete mirror of that owner's write buffer.
pub fn may_take_over(
    kv: &dyn MetaStore,
    shard: ShardId,
    me: &str,
    holds_mirror_of: &dyn Fn(&str) -> bool,
) -> anyhow::Result<Result<(), String>> {
    let key = journal_state_key(shard);
    let Some(v) = kv
        .get(&key)
        .context("reading the last owner's journal state")?
    else {
        return Ok(Ok(()));
    };
    let r: JournalRecordOfOwner =
        serde_json::from_slice(&v.value).with_context(|| format!("{key} does not parse"))?;
    if r.owner == me {
        return Ok(Ok(()));
    }
    Ok(match r.state {
        JournalState::Clean => Ok(()),
        JournalState::Mirrored if r.partner_id == me && holds_mirror_of(&r.owner) => Ok(()),
        JournalState::Mirrored => Err(format!(
            "c.node {} stopped with acknowledged writes not yet in stripes; its partner ({}) holds them: start that partner (it takes over by itself), or c.node {} again on its data dir",
            r.owner, r.partner, r.owner
        )),
        JournalState::Unprotected => Err(format!(
            "c.node {} stopped with acknowledged writes that only its own journal holds (no partner had them): start it again on its data dir to serve them; --force-takeover gives them up",
            r.owner
        )),
    })
}

/// What the partner holds on the current, caught-up mirror connection: every record up to
/// `received` (in its journal) and up to `synced` (and synced). `None`: no such connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Coverage {
    pub received: u64,
    pub synced: u64,
}

/// The owner's side: keeps `weft/cnode-journal` at least as strict as the truth.
#[derive(Debug)]
pub struct Handover {
    kv: Arc<dyn MetaStore>,
    /// [`journal_state_key`] of the shard.
    key: String,
    owner: String,
    partner: String,
    st: Mutex<Recorded>,
    /// The state is `unprotected` and a partner is configured: the mirror's answers should
    /// try [`Handover::try_mirrored`] (a flag, so the hot path takes no lock).
    upgrade_wanted: AtomicBool,
}

#[derive(Debug)]
struct Recorded {
    state: Option<JournalState>,
    /// The c.node id of the partner the mirror caught up with.
    partner_id: String,
    /// The highest seq acknowledged to a client through the journal.
    last_acked: u64,
    /// Records up to this are released (in durable stripes).
    released: u64,
    /// The highest seq a FLUSH made durable here without the partner's SYNCED.
    unsynced: u64,
    /// The partner id in the record as last written.
    written_partner_id: String,
}

impl Handover {
    /// At start, before anything is acknowledged: `unprotected` (replayed records may be in
    /// the journal; the mirror has not caught up yet), or `clean` when the journal holds no
    /// record (`acknowledged` 0: nothing is only here; the first acknowledgement writes the
    /// state it needs first). Without that, an owner that stopped before it acknowledged
    /// anything (a shard adopted and handed on at once) left `unprotected` naming it, and
    /// nobody else could take the shard. `acknowledged`: the last record in the journal at
    /// start (an earlier run acknowledged it).
    pub fn start(
        kv: Arc<dyn MetaStore>,
        shard: ShardId,
        owner: String,
        partner: Option<String>,
        acknowledged: u64,
    ) -> anyhow::Result<Handover> {
        let h = Handover {
            kv,
            key: journal_state_key(shard),
            owner,
            partner: partner.unwrap_or_default(),
            st: Mutex::new(Recorded {
                state: None,
                partner_id: String::new(),
                last_acked: acknowledged,
                released: 0,
                unsynced: 0,
                written_partner_id: String::new(),
            }),
            upgrade_wanted: AtomicBool::new(false),
        };
        let mut st = h.st.lock();
        let state = if acknowledged == 0 {
            JournalState::Clean
        } else {
            JournalState::Unprotected
        };
        h.put(&mut st, state)?;
        drop(st);
        Ok(h)
    }

    /// Before acknowledging the write of record `seq`; `mirrored`: the partner answered for
    /// it. `coverage` is asked again under this lock (the mirror may have caught up since).
    pub fn before_ack(
        &self,
        seq: u64,
        mirrored: bool,
        coverage: &dyn Fn() -> Option<Coverage>,
    ) -> anyhow::Result<()> {
        let mut st = self.st.lock();
        st.last_acked = st.last_acked.max(seq);
        let mirrored = mirrored || coverage().is_some_and(|c| c.received.max(c.synced) >= seq);
        match (st.state, mirrored) {
            (Some(JournalState::Unprotected), true) => {
                self.try_mirrored_locked(&mut st, coverage);
                Ok(())
            }
            (Some(JournalState::Unprotected), false) => Ok(()),
            (Some(JournalState::Mirrored), true) => Ok(()),
            (_, true) => self.put(&mut st, JournalState::Mirrored),
            (_, false) => self.put(&mut st, JournalState::Unprotected),
        }
    }

    /// A FLUSH made records up to `upto` durable here but the partner did not confirm it:
    /// what it holds may not survive its machine, so a `mirrored` state becomes
    /// `unprotected` until the partner has synced them.
    pub fn partner_unsynced(&self, upto: u64) -> anyhow::Result<()> {
        let mut st = self.st.lock();
        st.unsynced = st.unsynced.max(upto);
        if st.state == Some(JournalState::Mirrored) {
            self.put(&mut st, JournalState::Unprotected)?;
        }
        Ok(())
    }

    /// The mirror caught up with partner `partner_id` (its whole journal as it was when the
    /// connection started is on it); `coverage` says what it holds now.
    pub fn mirror_caught_up(&self, partner_id: &str, coverage: &dyn Fn() -> Option<Coverage>) {
        let mut st = self.st.lock();
        st.partner_id = partner_id.to_string();
        self.try_mirrored_locked(&mut st, coverage);
    }

    /// Whether the mirror's answers should call [`Handover::try_mirrored`].
    pub fn upgrade_wanted(&self) -> bool {
        self.upgrade_wanted.load(Ordering::Acquire)
    }

    /// `unprotected` becomes `mirrored` if the partner (`coverage`, asked under this lock)
    /// holds every acknowledged record not released and has synced every record a FLUSH
    /// made durable here alone.
    pub fn try_mirrored(&self, coverage: &dyn Fn() -> Option<Coverage>) {
        let mut st = self.st.lock();
        self.try_mirrored_locked(&mut st, coverage);
    }

    fn try_mirrored_locked(&self, st: &mut Recorded, coverage: &dyn Fn() -> Option<Coverage>) {
        let current = match st.state {
            Some(JournalState::Clean) => true,
            Some(JournalState::Mirrored) => st.written_partner_id == st.partner_id,
            _ => false,
        };
        if current {
            return;
        }
        let Some(c) = coverage() else {
            return;
        };
        let holds_acked = st.last_acked <= st.released || c.received.max(c.synced) >= st.last_acked;
        let synced = st.unsynced <= st.released || c.synced >= st.unsynced;
        if holds_acked && synced && !st.partner_id.is_empty() {
            if let Err(e) = self.put(st, JournalState::Mirrored) {
                tracing::warn!(error = %e, "could not record the mirrored journal state");
            }
        }
    }

    /// The journal released records up to `hwm`: clean once every acknowledged one is.
    pub fn released(&self, hwm: u64) {
        let mut st = self.st.lock();
        st.released = st.released.max(hwm);
        if st.last_acked <= hwm && st.state != Some(JournalState::Clean) {
            if let Err(e) = self.put(&mut st, JournalState::Clean) {
                tracing::warn!(error = %e, "could not record the clean journal state");
            }
        }
    }

    /// Write the state, trying again for a while if etcd does not answer (a restart): the
    /// acknowledgement that needs it waits meanwhile.
    fn put(&self, st: &mut Recorded, state: JournalState) -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + PUT_RETRY_FOR;
        loop {
            match self.put_once(st, state) {
                Ok(()) => return Ok(()),
                Err(e) if std::time::Instant::now() >= deadline => return Err(e),
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "could not record the journal state; trying again");
                    std::thread::sleep(std::time::Duration::from_millis(200));
                }
            }
        }
    }

    fn put_once(&self, st: &mut Recorded, state: JournalState) -> anyhow::Result<()> {
        let mirrored = state == JournalState::Mirrored;
        let record = JournalRecordOfOwner {
            owner: self.owner.clone(),
            state,
            partner: if mirrored {
                self.partner.clone()
            } else {
                String::new()
            },
            partner_id: if mirrored {
                st.partner_id.clone()
            } else {
                String::new()
            },
        };
        self.kv
            .put(&self.key, &serde_json::to_vec(&record)?, None)
            .context("recording the journal state")?;
        st.state = Some(state);
        st.written_partner_id = record.partner_id;
        self.upgrade_wanted.store(
            state == JournalState::Unprotected && !self.partner.is_empty(),
            Ordering::Release,
        );
        Ok(())
    }
}
