//! Volume names are unique across shards: each shard's catalog is its own document, so the
//! cluster-wide rule lives beside them, one key per volume name, `weft/names/<name>`, whose
//! value names the shard that holds the volume. The front ends and the API find a volume's
//! shard there; two shards can never both create `pgdata`. The rules of claiming, releasing
//! and settling (and the proof for the deletes at open) are [`crate::shard_claims`]'s.

use std::collections::BTreeSet;

use weft_meta::MetaStore;

use crate::error::{EngineError, IoFailure};
use crate::metastore::ClusterState;
use crate::shard_claims::{Refused, Space};
use crate::units::ShardId;

pub use crate::shard_claims::ShardClaim as NameClaim;

/// Where the claims live: `<prefix><volume name>`.
pub const NAME_CLAIMS_PREFIX: &str = "weft/names/";

const NAMES: Space = Space {
    prefix: NAME_CLAIMS_PREFIX,
    what: "volume name",
};

/// The shard that holds volume `name`, if any claims it.
pub fn shard_of(kv: &dyn MetaStore, name: &str) -> Result<Option<ShardId>, IoFailure> {
    Ok(NAMES.holder(kv, name)?.map(|(shard, _)| shard))
}

/// Claim `name` for `shard`: refused when another shard holds it.
pub(crate) fn claim(kv: &dyn MetaStore, shard: ShardId, name: &str) -> Result<(), EngineError> {
    NAMES
        .claim(kv, shard, name)
        .map_err(|refused| match refused {
            Refused::Held(other) => EngineError::InUse {
                what: format!("the name {name:?}"),
                detail: format!("a volume of shard {other} holds it"),
            },
            Refused::Io(e) => e.into(),
        })
}

/// Release `name` if `shard` still holds it (best effort).
pub(crate) fn release(kv: &dyn MetaStore, shard: ShardId, name: &str) {
    NAMES.release(kv, shard, name);
}

/// The volume names a catalog holds.
pub(crate) fn names_of(state: &ClusterState) -> BTreeSet<&str> {
    state.volumes.iter().map(|v| v.name.as_str()).collect()
}

/// At open: claim the catalog's unclaimed names, and delete this shard's claims the catalog
/// does not name.
pub(crate) fn settle(
    kv: &dyn MetaStore,
    shard: ShardId,
    state: &ClusterState,
) -> Result<(), IoFailure> {
    let used = names_of(state).into_iter().map(str::to_string).collect();
    NAMES.settle(kv, shard, &used)
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
