//! Volume names are unique across shards: each shard's catalog is its own document, so the
//! cluster-wide rule lives beside them, one key per volume name, `weft/names/<name>`, whose
//! value names the shard that holds the volume. The front ends and the API find a volume's
//! shard there; two shards can never both create `pgdata`.
//!
//! - A shard claims a name (create-if-absent) *before* it commits a catalog that names it, so
//!   no catalog ever names a volume whose name another shard holds. A claim already its own
//!   (left by a create that failed or was cut by a crash) is taken as it is.
//! - It releases a name *after* it committed a catalog without it, and only if the claim is
//!   still its own. A release that fails leaves a stale claim: harmless, because only the
//!   shard it names can take it back, and does when it next opens ([`settle`]).
//! - At open, before it serves, a shard's owner claims every name of its catalog that has no
//!   claim (catalogs from before claims existed) and deletes its own claims its catalog does
//!   not name. Proof for that delete: only this shard's owner writes this shard's catalog or
//!   claims names for it, and it is opening (nothing of its own is in flight); the catalog is
//!   read by compare-and-swap revision, so a claim its catalog lacks is one whose create never
//!   committed or whose delete did. The claim is a name, never data: deleting it loses nothing
//!   stored.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use weft_meta::MetaStore;

use crate::error::{EngineError, IoFailure};
use crate::metastore::ClusterState;
use crate::units::ShardId;

/// Where the claims live: `<prefix><volume name>`.
pub const NAME_CLAIMS_PREFIX: &str = "weft/names/";

/// The value of a claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NameClaim {
    pub shard: ShardId,
}

/// The shard that holds volume `name`, if any claims it.
pub fn shard_of(kv: &dyn MetaStore, name: &str) -> Result<Option<ShardId>, IoFailure> {
    Ok(read(kv, name)?.map(|(claim, _)| claim.shard))
}

/// Claim `name` for `shard` (see the module doc): refused when another shard holds it.
pub(crate) fn claim(kv: &dyn MetaStore, shard: ShardId, name: &str) -> Result<(), EngineError> {
    let value = serde_json::to_vec(&NameClaim { shard }).expect("a claim always serialises");
    if kv.compare_and_put(&key(name), 0, &value, None).is_ok() {
        return Ok(());
    }
    // Taken, or the reply was lost: read what is there.
    match read(kv, name)? {
        Some((c, _)) if c.shard == shard => Ok(()),
        Some((c, _)) => Err(EngineError::InUse {
            what: format!("the name {name:?}"),
            detail: format!("a volume of shard {} holds it", c.shard),
        }),
        None => Err(IoFailure::CorruptMetadata {
            what: key(name),
            detail: "the metadata store refused the claim of a volume name".into(),
        }
        .into()),
    }
}

/// Release `name` if `shard` still holds it. Best effort: a claim left behind is settled
/// when the shard next opens.
pub(crate) fn release(kv: &dyn MetaStore, shard: ShardId, name: &str) {
    match read(kv, name) {
        Ok(Some((c, revision))) if c.shard == shard => {
            if let Err(e) = kv.compare_and_delete(&key(name), revision) {
                tracing::warn!(name, error = %e, "could not release a volume name; released at the next start");
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(name, error = %e, "could not read a volume name's claim; released at the next start");
        }
    }
}

/// The volume names a catalog holds.
pub(crate) fn names_of(state: &ClusterState) -> BTreeSet<&str> {
    state.volumes.iter().map(|v| v.name.as_str()).collect()
}

/// At open: claim the catalog's unclaimed names, and delete this shard's claims the catalog
/// does not name (the proof is in the module doc).
pub(crate) fn settle(
    kv: &dyn MetaStore,
    shard: ShardId,
    state: &ClusterState,
) -> Result<(), IoFailure> {
    let listed = kv
        .list(NAME_CLAIMS_PREFIX)
        .map_err(|e| corrupt(NAME_CLAIMS_PREFIX, e.to_string()))?;
    let mine = names_of(state);
    let mut claimed = BTreeSet::new();
    for (k, v) in listed {
        let name = k.strip_prefix(NAME_CLAIMS_PREFIX).unwrap_or(&k).to_string();
        let claim: NameClaim =
            serde_json::from_slice(&v.value).map_err(|e| corrupt(&k, e.to_string()))?;
        if claim.shard == shard && !mine.contains(name.as_str()) {
            tracing::info!(name, %shard, "releasing a volume name this shard's catalog does not hold");
            if let Err(e) = kv.compare_and_delete(&k, v.mod_revision) {
                tracing::warn!(name, error = %e, "could not release a stale volume name");
            }
        } else if claim.shard != shard && mine.contains(name.as_str()) {
            tracing::error!(name, %shard, other = %claim.shard, "two shards hold a volume of this name; it is served by this one, and named by the other in the claims");
        }
        claimed.insert(name);
    }
    for name in mine {
        if !claimed.contains(name) {
            claim(kv, shard, name).map_err(|e| corrupt(&key(name), e.to_string()))?;
        }
    }
    Ok(())
}

fn key(name: &str) -> String {
    format!("{NAME_CLAIMS_PREFIX}{name}")
}

fn read(kv: &dyn MetaStore, name: &str) -> Result<Option<(NameClaim, u64)>, IoFailure> {
    let k = key(name);
    let Some(v) = kv.get(&k).map_err(|e| corrupt(&k, e.to_string()))? else {
        return Ok(None);
    };
    let claim = serde_json::from_slice(&v.value).map_err(|e| corrupt(&k, e.to_string()))?;
    Ok(Some((claim, v.mod_revision)))
}

fn corrupt(what: &str, detail: String) -> IoFailure {
    IoFailure::CorruptMetadata {
        what: what.to_string(),
        detail,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_held_by_one_shard_and_released_only_by_it() {
        let kv = weft_meta::EmbeddedMetaStore::in_memory();
        claim(&kv, ShardId(1), "pg").unwrap();
        // Its own claim again (a create cut short and retried): fine.
        claim(&kv, ShardId(1), "pg").unwrap();
        let err = claim(&kv, ShardId(2), "pg").unwrap_err();
        assert!(err.to_string().contains("shard 1"), "{err}");
        // Another shard's release does nothing.
        release(&kv, ShardId(2), "pg");
        assert_eq!(shard_of(&kv, "pg").unwrap(), Some(ShardId(1)));
        release(&kv, ShardId(1), "pg");
        assert_eq!(shard_of(&kv, "pg").unwrap(), None);
        claim(&kv, ShardId(2), "pg").unwrap();
    }

    #[test]
    fn settle_claims_the_catalogs_names_and_drops_only_its_own_stale_claims() {
        let kv = weft_meta::EmbeddedMetaStore::in_memory();
        let state: ClusterState = serde_json::from_value(serde_json::json!({
            "format_version": crate::metastore::FORMAT_VERSION,
            "shard": 4,
            "volumes": [{"id": 1, "name": "old", "size_bytes": 4096, "family": 1, "layer": 1,
                         "created_unix_s": 0}],
            "next_volume_id": 2, "next_family_id": 2, "next_layer_id": 2
        }))
        .unwrap();
        claim(&kv, ShardId(4), "stale").unwrap();
        claim(&kv, ShardId(9), "theirs").unwrap();
        settle(&kv, ShardId(4), &state).unwrap();
        assert_eq!(shard_of(&kv, "old").unwrap(), Some(ShardId(4)));
        assert_eq!(shard_of(&kv, "stale").unwrap(), None);
        assert_eq!(shard_of(&kv, "theirs").unwrap(), Some(ShardId(9)));
    }
}
