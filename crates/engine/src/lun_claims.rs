//! A host's LUN numbers are unique across shards: a host may see exports of several shards,
//! each shard maps its own exports in its own catalog, so the rule that two exports never
//! share a LUN of one host lives beside the catalogs, one key per host and LUN,
//! `weft/luns/<host>/<lun>`, whose value names the shard that maps it. The rules of claiming,
//! releasing and settling (and the proof for the deletes at open) are
//! [`crate::shard_claims`]'s; a claim is made before the catalog commit that maps the LUN and
//! released after the one that unmaps it.

use std::collections::BTreeSet;

use weft_meta::MetaStore;

use crate::error::{EngineError, IoFailure};
use crate::metastore::ClusterState;
use crate::shard_claims::{Refused, Space};
use crate::units::ShardId;

/// Where the claims live: `<prefix><host>/<lun>`.
pub const LUN_CLAIMS_PREFIX: &str = "weft/luns/";

const LUNS: Space = Space {
    prefix: LUN_CLAIMS_PREFIX,
    what: "LUN",
};

fn id(host: &str, lun: u64) -> String {
    format!("{host}/{lun}")
}

/// Why LUN `lun` of `host` could not be claimed.
pub(crate) enum Taken {
    /// Another shard maps an export of its own there.
    ByShard(ShardId),
    Failed(EngineError),
}

/// Claim LUN `lun` of `host` for `shard`.
pub(crate) fn claim(kv: &dyn MetaStore, shard: ShardId, host: &str, lun: u64) -> Result<(), Taken> {
    LUNS.claim(kv, shard, &id(host, lun))
        .map_err(|refused| match refused {
            Refused::Held(other) => Taken::ByShard(other),
            Refused::Io(e) => Taken::Failed(e.into()),
        })
}

/// Release LUN `lun` of `host` if `shard` still holds it (best effort).
pub(crate) fn release(kv: &dyn MetaStore, shard: ShardId, host: &str, lun: u64) {
    LUNS.release(kv, shard, &id(host, lun));
}

/// At open: claim the LUNs the catalog maps that nobody claims, and delete this shard's
/// claims the catalog does not map.
pub(crate) fn settle(
    kv: &dyn MetaStore,
    shard: ShardId,
    state: &ClusterState,
) -> Result<(), IoFailure> {
    let used: BTreeSet<String> = state
        .hosts
        .iter()
        .flat_map(|h| h.luns.iter().map(|m| id(&h.name, m.lun)))
        .collect();
    LUNS.settle(kv, shard, &used)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holder(kv: &dyn MetaStore, host: &str, lun: u64) -> Option<ShardId> {
        LUNS.holder(kv, &id(host, lun)).unwrap().map(|(s, _)| s)
    }

    #[test]
    fn a_lun_of_a_host_is_mapped_by_one_shard_and_released_only_by_it() {
        let kv = weft_meta::EmbeddedMetaStore::in_memory();
        assert!(claim(&kv, ShardId(1), "db1", 0).is_ok());
        assert!(
            claim(&kv, ShardId(1), "db1", 0).is_ok(),
            "its own claim again"
        );
        assert!(matches!(
            claim(&kv, ShardId(0), "db1", 0),
            Err(Taken::ByShard(ShardId(1)))
        ));
        assert!(claim(&kv, ShardId(0), "db1", 1).is_ok());
        assert!(
            claim(&kv, ShardId(0), "db2", 0).is_ok(),
            "another host's LUN 0"
        );
        release(&kv, ShardId(0), "db1", 0);
        assert_eq!(holder(&kv, "db1", 0), Some(ShardId(1)));
        release(&kv, ShardId(1), "db1", 0);
        assert_eq!(holder(&kv, "db1", 0), None);
    }

    #[test]
    fn settle_claims_the_catalogs_luns_and_drops_only_its_own_stale_claims() {
        let kv = weft_meta::EmbeddedMetaStore::in_memory();
        let state: ClusterState = serde_json::from_value(serde_json::json!({
            "format_version": crate::metastore::FORMAT_VERSION,
            "shard": 2,
            "volumes": [], "hosts": [{"name": "db1", "luns": [{"lun": 3, "export": "pg"}], "holder": true,
                       "created_unix_s": 0}],
            "next_volume_id": 2, "next_family_id": 2, "next_layer_id": 2
        }))
        .unwrap();
        assert!(claim(&kv, ShardId(2), "db1", 4).is_ok()); // a map that never committed
        assert!(claim(&kv, ShardId(0), "db1", 0).is_ok()); // shard 0's
        settle(&kv, ShardId(2), &state).unwrap();
        assert_eq!(holder(&kv, "db1", 3), Some(ShardId(2)));
        assert_eq!(holder(&kv, "db1", 4), None);
        assert_eq!(holder(&kv, "db1", 0), Some(ShardId(0)));
    }
}
