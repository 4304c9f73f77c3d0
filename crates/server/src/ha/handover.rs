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
//! less than the truth. A missing key (a cluster made before this record) reads as `clean`.
//! `weft cnode --force-takeover` overrides the rule: it gives the dead owner's
//! unprotected writes up, and says so.

use std::sync::Arc;

use anyhow::Context;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use weft_meta::MetaStore;

pub const JOURNAL_STATE_KEY: &str = "weft/cnode-journal";
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
    me: &str,
    holds_mirror_of: &dyn Fn(&str) -> bool,
) -> anyhow::Result<Result<(), String>> {
    let Some(v) = kv
        .get(JOURNAL_STATE_KEY)
        .context("reading the last owner's journal state")?
    else {
        return Ok(Ok(()));
    };
    let r: JournalRecordOfOwner = serde_json::from_slice(&v.value)
        .with_context(|| format!("{JOURNAL_STATE_KEY} does not parse"))?;
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

/// The owner's side: keeps `weft/cnode-journal` at least as strict as the truth.
#[derive(Debug)]
pub struct Handover {
    kv: Arc<dyn MetaStore>,
    owner: String,
    partner: String,
    st: Mutex<Recorded>,
}

#[derive(Debug)]
struct Recorded {
    state: Option<JournalState>,
    /// The c.node id of the partner the mirror caught up with.
    partner_id: String,
    /// The highest seq acknowledged to a client through the journal.
    last_acked: u64,
}

impl Handover {
    /// At start, before anything is acknowledged: `unprotected` (replayed records may be in
    /// the journal; the mirror has not caught up yet). `acknowledged`: the last record in the
    /// journal at start (an earlier run acknowledged it).
    pub fn start(
        kv: Arc<dyn MetaStore>,
        owner: String,
        partner: Option<String>,
        acknowledged: u64,
    ) -> anyhow::Result<Handover> {
        let h = Handover {
            kv,
            owner,
            partner: partner.unwrap_or_default(),
            st: Mutex::new(Recorded {
                state: None,
                partner_id: String::new(),
                last_acked: acknowledged,
            }),
        };
        let mut st = h.st.lock();
        h.put(&mut st, JournalState::Unprotected)?;
        drop(st);
        Ok(h)
    }

    /// Before acknowledging the write of record `seq`; `mirrored`: the partner holds it.
    pub fn before_ack(&self, seq: u64, mirrored: bool) -> anyhow::Result<()> {
        let mut st = self.st.lock();
        st.last_acked = st.last_acked.max(seq);
        let need = if mirrored {
            JournalState::Mirrored
        } else {
            JournalState::Unprotected
        };
        match (st.state, need) {
            (Some(JournalState::Unprotected), _) => Ok(()),
            (Some(JournalState::Mirrored), JournalState::Mirrored) => Ok(()),
            _ => self.put(&mut st, need),
        }
    }

    /// The partner did not confirm a sync: what it holds may not survive its machine, so a
    /// `mirrored` state becomes `unprotected`.
    pub fn partner_unsynced(&self) -> anyhow::Result<()> {
        let mut st = self.st.lock();
        if st.state == Some(JournalState::Mirrored) {
            self.put(&mut st, JournalState::Unprotected)?;
        }
        Ok(())
    }

    /// The mirror caught up with partner `partner_id`: every record of the journal is on it
    /// (`still`: and the mirror is still up, asked under this lock).
    pub fn mirror_caught_up(&self, partner_id: &str, still: impl FnOnce() -> bool) {
        let mut st = self.st.lock();
        st.partner_id = partner_id.to_string();
        if st.state != Some(JournalState::Clean) && still() {
            if let Err(e) = self.put(&mut st, JournalState::Mirrored) {
                tracing::warn!(error = %e, "could not record the mirrored journal state");
            }
        }
    }

    /// The journal released records up to `hwm`: clean once every acknowledged one is.
    pub fn released(&self, hwm: u64) {
        let mut st = self.st.lock();
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
            .put(JOURNAL_STATE_KEY, &serde_json::to_vec(&record)?, None)
            .context("recording the journal state")?;
        st.state = Some(state);
        Ok(())
    }
}
