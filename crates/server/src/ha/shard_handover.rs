//! Handing a shard to another c.node: the records that ask a c.node to adopt a shard, and the
//! choice of that c.node.
//!
//! A c.node that drains (`weft cnode drain`) and owns shards no standby holds an in-sync
//! mirror of (the shards it owns besides its own, and its own when it has no such standby)
//! asks another running c.node to adopt each: it writes `weft/handovers/<shard>` naming
//! itself and the adopter, then stops as on SIGTERM (destaged, checkpointed, journal state
//! `clean`, lease released). The adopter (`crate::shard_host`) sees the record addressed to
//! it, waits until the shard has no owner, and takes it as a shard of its own besides: the
//! takeover of today, allowed because the journal state is `clean`, with nothing to replay.
//!
//! A record is a request, never authority: the ownership lease and the journal state decide
//! who may own the shard (`super::handover::may_take_over`). A record whose shard another
//! c.node took meanwhile is obsolete and deleted by its adopter; a record naming a c.node that
//! never comes is left for the operator (`weft cnode list` shows it), and the shard is taken
//! by whichever c.node of it starts next. Deleting a record deletes no data.

use serde::{Deserialize, Serialize};
use weft_engine::ShardId;
use weft_meta::{MetaError, MetaStore, Revision};

use super::registry::{CnodeRecord, CnodeRole};

/// Where handover requests live, one key per shard.
pub const HANDOVERS_PREFIX: &str = "weft/handovers/";

/// The key asking for `shard`'s adoption.
pub fn handover_key(shard: ShardId) -> String {
    format!("{HANDOVERS_PREFIX}{shard}")
}

/// A request that c.node `to` adopt `shard`, which c.node `from` is giving up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandoverRecord {
    pub shard: ShardId,
    pub from: String,
    pub to: String,
    pub asked_unix_s: u64,
}

/// Ask for the handover (replacing an older request for the same shard).
pub fn ask(kv: &dyn MetaStore, record: &HandoverRecord) -> Result<(), MetaError> {
    let value = serde_json::to_vec(record).expect("a handover record serializes");
    kv.put(&handover_key(record.shard), &value, None)?;
    Ok(())
}

/// Every request, with its revision (for [`done`]).
pub fn list(kv: &dyn MetaStore) -> Result<Vec<(HandoverRecord, Revision)>, MetaError> {
    Ok(kv
        .list(HANDOVERS_PREFIX)?
        .into_iter()
        .filter_map(|(_, v)| {
            serde_json::from_slice(&v.value)
                .ok()
                .map(|r| (r, v.mod_revision))
        })
        .collect())
}

/// The request was served (or is obsolete): delete it unless it changed since it was read.
pub fn done(kv: &dyn MetaStore, shard: ShardId, revision: Revision) -> Result<(), MetaError> {
    match kv.compare_and_delete(&handover_key(shard), revision) {
        Ok(()) | Err(MetaError::Conflict { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The shards c.node `record` owns: its own (when it says it owns it) and those besides.
pub fn owned_by(record: &CnodeRecord) -> Vec<ShardId> {
    let own = (record.role == CnodeRole::Owner).then_some(record.shard);
    own.into_iter()
        .chain(record.shards.iter().copied())
        .collect()
}

/// The c.node to adopt a shard `me` gives up: a running owner other than `me` (only an owner
/// has the placement and engines a shard needs), the one owning the fewest shards counting
/// those already `promised` to it in this drain, then by id.
pub fn choose_adopter(records: &[CnodeRecord], me: &str, promised: &[String]) -> Option<String> {
    records
        .iter()
        .filter(|r| r.id != me && r.role == CnodeRole::Owner)
        .map(|r| {
            let load = owned_by(r).len() + promised.iter().filter(|p| **p == r.id).count();
            (load, r.id.clone())
        })
        .min()
        .map(|(_, id)| id)
}

/// The requests a drain of c.node `me` writes: one adopter for each of `shards` (the ones no
/// standby holds an in-sync mirror of), spread by [`choose_adopter`]. `Err`: the first shard
/// no running c.node can adopt.
pub fn plan_drain(
    records: &[CnodeRecord],
    me: &str,
    shards: &[ShardId],
    now_unix_s: u64,
) -> Result<Vec<HandoverRecord>, ShardId> {
    let mut promised = Vec::new();
    let mut plan = Vec::new();
    for &shard in shards {
        let to = choose_adopter(records, me, &promised).ok_or(shard)?;
        promised.push(to.clone());
        plan.push(HandoverRecord {
            shard,
            from: me.to_string(),
            to,
            asked_unix_s: now_unix_s,
        });
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cnode(id: &str, shard: u16, role: CnodeRole, besides: &[u16]) -> CnodeRecord {
        CnodeRecord {
            id: id.into(),
            shard: ShardId(shard),
            shards: besides.iter().map(|s| ShardId(*s)).collect(),
            role,
            api: String::new(),
            nbd: String::new(),
            iscsi: String::new(),
            forward: None,
            port_group: None,
            relative_ports: Vec::new(),
            mirror_listen: None,
            partner: None,
            shard_mirror: None,
            pid: 1,
            version: "test".into(),
            started_unix_s: 0,
        }
    }

    #[test]
    fn the_adopter_is_the_least_loaded_other_owner() {
        let records = [
            cnode("a", 0, CnodeRole::Owner, &[2]),
            cnode("b", 1, CnodeRole::Owner, &[]),
            cnode("c", 0, CnodeRole::Standby, &[]),
            cnode("d", 3, CnodeRole::Owner, &[]),
        ];
        assert_eq!(choose_adopter(&records, "d", &[]).as_deref(), Some("b"));
        // b got one shard of this drain already: a and b now own two each, a first by id.
        assert_eq!(
            choose_adopter(&records, "d", &["b".into()]).as_deref(),
            Some("a")
        );
        assert_eq!(
            choose_adopter(&records[2..3], "d", &[]),
            None,
            "a standby has no engine to adopt into"
        );
    }

    #[test]
    fn a_drain_spreads_its_shards() {
        let records = [
            cnode("a", 0, CnodeRole::Owner, &[]),
            cnode("b", 1, CnodeRole::Owner, &[]),
            cnode("c", 2, CnodeRole::Owner, &[3, 4]),
        ];
        let plan = plan_drain(&records, "c", &[ShardId(2), ShardId(3), ShardId(4)], 7).unwrap();
        let to: Vec<(u16, &str)> = plan.iter().map(|r| (r.shard.0, r.to.as_str())).collect();
        assert_eq!(to, [(2, "a"), (3, "b"), (4, "a")]);
        assert!(plan.iter().all(|r| r.from == "c" && r.asked_unix_s == 7));
        assert_eq!(
            plan_drain(&records[2..], "c", &[ShardId(3)], 7),
            Err(ShardId(3))
        );
    }

    #[test]
    fn requests_are_listed_and_done_only_when_unchanged() {
        let kv = weft_meta::EmbeddedMetaStore::in_memory();
        let record = HandoverRecord {
            shard: ShardId(2),
            from: "a".into(),
            to: "b".into(),
            asked_unix_s: 1,
        };
        ask(&kv, &record).unwrap();
        let listed = list(&kv).unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(listed[0].0, record);
        let again = HandoverRecord {
            to: "c".into(),
            ..record.clone()
        };
        ask(&kv, &again).unwrap();
        done(&kv, ShardId(2), listed[0].1).unwrap();
        assert_eq!(list(&kv).unwrap()[0].0, again, "a newer request stays");
        let revision = list(&kv).unwrap()[0].1;
        done(&kv, ShardId(2), revision).unwrap();
        assert!(list(&kv).unwrap().is_empty());
    }
}
