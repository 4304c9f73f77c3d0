//! Keys one shard holds across the cluster: the rule that makes a name or number unique
//! although each shard's catalog is its own document. A claim is one key in the metadata
//! store, `<prefix><id>`, whose value names the shard that holds it (`{"shard": N}`).
//! Volume names (`crate::name_claims`) and a host's LUN numbers (`crate::lun_claims`) are
//! claimed so.
//!
//! - A shard claims a key (create-if-absent) *before* it commits a catalog that uses it, so
//!   no catalog ever uses a key another shard holds. A claim already its own (left by a
//!   commit that failed or was cut by a crash) is taken as it is.
//! - It releases a key *after* it committed a catalog without it, and only if the claim is
//!   still its own. A release that fails leaves a stale claim: harmless, because only the
//!   shard it names can take it back, and does when it next opens ([`Space::settle`]).
//! - At open, before it serves, a shard's owner claims every key its catalog uses that has no
//!   claim (catalogs from before claims existed) and deletes its own claims its catalog does
//!   not use. Proof for that delete: only this shard's owner writes this shard's catalog or
//!   claims keys for it, and it is opening (nothing of its own is in flight); the catalog is
//!   read by compare-and-swap revision, so a claim its catalog lacks is one whose commit never
//!   happened or whose removal did. A claim is a name, never data: deleting it loses nothing
//!   stored.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use weft_meta::MetaStore;

use crate::error::IoFailure;
use crate::units::ShardId;

/// The value of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardClaim {
    pub shard: ShardId,
}

/// One kind of claim: where its keys live and what they are called in messages.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Space {
    pub prefix: &'static str,
    /// What a key is, for logs ("volume name", "LUN").
    pub what: &'static str,
}

/// Why a claim was not made.
#[derive(Debug)]
pub(crate) enum Refused {
    /// Another shard holds the key.
    Held(ShardId),
    Io(IoFailure),
}

impl Space {
    pub fn key(&self, id: &str) -> String {
        format!("{}{id}", self.prefix)
    }

    /// The shard holding `id`, if any, with the claim's revision.
    pub fn holder(
        &self,
        kv: &dyn MetaStore,
        id: &str,
    ) -> Result<Option<(ShardId, u64)>, IoFailure> {
        let k = self.key(id);
        let Some(v) = kv.get(&k).map_err(|e| corrupt(&k, e.to_string()))? else {
            return Ok(None);
        };
        let claim: ShardClaim =
            serde_json::from_slice(&v.value).map_err(|e| corrupt(&k, e.to_string()))?;
        Ok(Some((claim.shard, v.mod_revision)))
    }

    /// Claim `id` for `shard` (see the module doc).
    pub fn claim(&self, kv: &dyn MetaStore, shard: ShardId, id: &str) -> Result<(), Refused> {
        let value = serde_json::to_vec(&ShardClaim { shard }).expect("a claim always serialises");
        if kv.compare_and_put(&self.key(id), 0, &value, None).is_ok() {
            return Ok(());
        }
        // Taken, or the reply was lost: read what is there.
        match self.holder(kv, id).map_err(Refused::Io)? {
            Some((s, _)) if s == shard => Ok(()),
            Some((s, _)) => Err(Refused::Held(s)),
            None => Err(Refused::Io(corrupt(
                &self.key(id),
                format!("the metadata store refused the claim of a {}", self.what),
            ))),
        }
    }

    /// Release `id` if `shard` still holds it. Best effort: a claim left behind is settled
    /// when the shard next opens.
    pub fn release(&self, kv: &dyn MetaStore, shard: ShardId, id: &str) {
        match self.holder(kv, id) {
            Ok(Some((s, revision))) if s == shard => {
                if let Err(e) = kv.compare_and_delete(&self.key(id), revision) {
                    tracing::warn!(id, what = self.what, error = %e, "could not release a claim; released at the next start");
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(id, what = self.what, error = %e, "could not read a claim; released at the next start");
            }
        }
    }

    /// At open: claim the keys `used` by the catalog that nobody claims, and delete this
    /// shard's claims the catalog does not use (the proof is in the module doc).
    pub fn settle(
        &self,
        kv: &dyn MetaStore,
        shard: ShardId,
        used: &BTreeSet<String>,
    ) -> Result<(), IoFailure> {
        let listed = kv
            .list(self.prefix)
            .map_err(|e| corrupt(self.prefix, e.to_string()))?;
        let mut claimed = BTreeSet::new();
        for (k, v) in listed {
            let id = k.strip_prefix(self.prefix).unwrap_or(&k).to_string();
            let claim: ShardClaim =
                serde_json::from_slice(&v.value).map_err(|e| corrupt(&k, e.to_string()))?;
            if claim.shard == shard && !used.contains(&id) {
                tracing::info!(id, what = self.what, %shard, "releasing a claim this shard's catalog does not use");
                if let Err(e) = kv.compare_and_delete(&k, v.mod_revision) {
                    tracing::warn!(id, what = self.what, error = %e, "could not release a stale claim");
                }
            } else if claim.shard != shard && used.contains(&id) {
                tracing::error!(id, what = self.what, %shard, other = %claim.shard, "two shards use the same key; the claims name the other");
            }
            claimed.insert(id);
        }
        for id in used {
            if !claimed.contains(id) {
                match self.claim(kv, shard, id) {
                    Ok(()) => {}
                    Err(Refused::Io(e)) => return Err(e),
                    Err(Refused::Held(other)) => {
                        tracing::error!(id, what = self.what, %shard, %other, "two shards use the same key; the claims name the other");
                    }
                }
            }
        }
        Ok(())
    }
}

fn corrupt(what: &str, detail: String) -> IoFailure {
    IoFailure::CorruptMetadata {
        what: what.to_string(),
        detail,
    }
}
