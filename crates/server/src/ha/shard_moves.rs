//! Moving a shard on the operator's request (`weft cnode move-shard N --to ID`), and keeping
//! it where it was put.
//!
//! The request is a record `weft/shard-moves/<shard>` naming the c.node that should own the
//! shard. The shard's owner (`crate::shard_host`, every 0.5 s) gives the shard to that c.node
//! while running, as the spread policy does: a handover request (`super::shard_handover`),
//! then the shard's engine stops clean and the named c.node adopts it. The record stays as a
//! *pin*: the spread policy never moves a shard away from the c.node it is pinned to, so it
//! does not undo the operator's placement. `--unpin` deletes the record (the spread policy
//! may move the shard again); a drain hands pinned shards over like any other.
//!
//! A record is a request, never authority: the ownership lease and the journal state decide
//! who may own the shard. Deleting one deletes no data.

use serde::{Deserialize, Serialize};
use weft_engine::ShardId;
use weft_meta::{MetaError, MetaStore};

/// Where the move requests (pins) live, one key per shard.
pub const MOVES_PREFIX: &str = "weft/shard-moves/";

fn move_key(shard: ShardId) -> String {
    format!("{MOVES_PREFIX}{shard}")
}

/// The operator asked that c.node `to` own `shard`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveRecord {
    pub shard: ShardId,
    pub to: String,
    pub asked_unix_s: u64,
}

/// Ask for the move (replacing an older request for the same shard).
pub fn ask(kv: &dyn MetaStore, record: &MoveRecord) -> Result<(), MetaError> {
    let value = serde_json::to_vec(record).expect("a move record serializes");
    kv.put(&move_key(record.shard), &value, None)?;
    Ok(())
}

/// Every request.
pub fn list(kv: &dyn MetaStore) -> Result<Vec<MoveRecord>, MetaError> {
    Ok(kv
        .list(MOVES_PREFIX)?
        .into_iter()
        .filter_map(|(_, v)| serde_json::from_slice(&v.value).ok())
        .collect())
}

/// Forget the pin of `shard`; whether there was one.
pub fn unpin(kv: &dyn MetaStore, shard: ShardId) -> Result<bool, MetaError> {
    let key = move_key(shard);
    let had = kv.get(&key)?.is_some();
    if had {
        kv.delete(&key)?;
    }
    Ok(had)
}

/// Whether `shard` is pinned to c.node `id`.
pub fn pinned_to(moves: &[MoveRecord], shard: ShardId, id: &str) -> bool {
    moves.iter().any(|m| m.shard == shard && m.to == id)
}
