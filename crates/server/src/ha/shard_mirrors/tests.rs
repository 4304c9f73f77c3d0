//! The shard-mirror service with a real owner's log on loopback: an extra shard's records
//! land in that shard's dir, a dead owner's shard is a rescue candidate for its partner
//! alone, and a held shard's owner is refused.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use weft_engine::journal::{Journal, RecordHeader, RecordKind};
use weft_engine::units::LayerId;
use weft_engine::write_log::{WriteLog, WriteLogSource};
use weft_meta::{EmbeddedMetaStore, MetaStore};

use super::*;
use crate::ha::clock::SystemClock;
use crate::ha::mirror::{MirrorStatus, OwnedLogSource};
use crate::ha::ownership::{OwnerRecord, Ownership};

const OPTIONS: JournalOptions = JournalOptions {
    file_bytes: 1 << 20,
    prefill: false,
};
const SHARD: ShardId = ShardId(2);

fn owner_of_shard(kv: &Arc<dyn MetaStore>) -> Arc<Ownership> {
    let record = OwnerRecord {
        id: "A".into(),
        api: String::new(),
        nbd: String::new(),
        iscsi: String::new(),
        partner: String::new(),
        forward: String::new(),
        since_unix_s: 0,
    };
    Ownership::acquire(
        Arc::clone(kv),
        SHARD,
        &record,
        Duration::from_secs(60),
        SystemClock::shared(),
        Some(Duration::from_secs(5)),
        &|| Ok(()),
    )
    .unwrap()
}

struct Owner {
    log: Arc<dyn WriteLog>,
    status: Arc<MirrorStatus>,
    ownership: Arc<Ownership>,
    _dir: tempfile::TempDir,
}

/// Owner "A" of shard 2, mirroring to `partner` as an extra shard does.
fn start_owner(kv: &Arc<dyn MetaStore>, partner: SocketAddr) -> Owner {
    let dir = tempfile::tempdir().unwrap();
    let ownership = owner_of_shard(kv);
    let status = Arc::new(MirrorStatus::default());
    let source = OwnedLogSource {
        dir: dir.path().to_path_buf(),
        options: OPTIONS,
        partner: Some(partner.to_string()),
        owner_id: "A".into(),
        mirror_name: format!("A@{SHARD}"),
        ownership: Arc::clone(&ownership),
        status: Arc::clone(&status),
        kv: Arc::clone(kv),
        shard: SHARD,
    };
    let (log, _) = source.open(1).unwrap();
    Owner {
        log: Arc::from(log),
        status,
        ownership,
        _dir: dir,
    }
}

fn payload(seq: u64) -> Vec<u8> {
    (0..512u64)
        .flat_map(|i| (seq * 7919 + i).to_le_bytes())
        .collect()
}

/// Append and acknowledge `n` records; the acknowledged seqs.
fn write(log: &Arc<dyn WriteLog>, n: u64) -> Vec<u64> {
    let mut acked = Vec::new();
    for _ in 0..n {
        let seq = log.locked(|appender| {
            let next = log.written_seq() + 1;
            let header = RecordHeader {
                kind: RecordKind::Write,
                layer: LayerId(1),
                lba: next,
                count: 1,
            };
            appender.append(header, &payload(next)).unwrap()
        });
        if log.replicated(seq).is_ok() {
            acked.push(seq);
        }
    }
    acked
}

fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn an_extra_shards_mirror_is_kept_in_its_dir_and_rescued_by_its_partner_alone() {
    let kv: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
    let partner_dir = tempfile::tempdir().unwrap();
    let service = ShardMirrors::start(
        "127.0.0.1".parse().unwrap(),
        partner_dir.path(),
        OPTIONS,
        "B".into(),
    )
    .unwrap();
    let owner = start_owner(&kv, service.addr());
    wait_for("the mirror to catch up", || {
        owner.status.mirrored.load(Ordering::Acquire)
    });
    let acked = write(&owner.log, 50);
    assert_eq!(acked.len(), 50);
    wait_for("the journal state to say mirrored to B", || {
        super::super::handover::may_take_over(&*kv, SHARD, "B", &|o| {
            complete_mirror(&crate::data_files::shard_dir(partner_dir.path(), SHARD), o).is_some()
        })
        .unwrap()
        .is_ok()
    });
    // Alive: nobody rescues it.
    assert!(rescue_candidates(&*kv, partner_dir.path(), "B", &[])
        .unwrap()
        .is_empty());
    // The owner dies (its lease goes): its partner, and only it, takes the shard.
    owner.ownership.release();
    assert_eq!(
        rescue_candidates(&*kv, partner_dir.path(), "B", &[]).unwrap(),
        vec![SHARD]
    );
    assert!(rescue_candidates(&*kv, partner_dir.path(), "C", &[])
        .unwrap()
        .is_empty());
    assert!(rescue_candidates(&*kv, partner_dir.path(), "B", &[SHARD])
        .unwrap()
        .is_empty());
    service.hold(SHARD);
    let generation = complete_mirror(
        &crate::data_files::shard_dir(partner_dir.path(), SHARD),
        "A",
    )
    .expect("a complete generation in the shard's dir");
    let records = Journal::scan(&generation).unwrap();
    for seq in acked {
        let r = records
            .iter()
            .find(|r| r.seq == seq)
            .unwrap_or_else(|| panic!("acknowledged record {seq} is not in the mirror"));
        assert_eq!(r.payload, payload(seq), "record {seq}");
    }
    service.close();
}

#[test]
fn a_held_shards_owner_is_refused_and_runs_degraded() {
    let kv: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
    let partner_dir = tempfile::tempdir().unwrap();
    let service = ShardMirrors::start(
        "127.0.0.1".parse().unwrap(),
        partner_dir.path(),
        OPTIONS,
        "B".into(),
    )
    .unwrap();
    service.hold(SHARD);
    let owner = start_owner(&kv, service.addr());
    let acked = write(&owner.log, 3);
    assert_eq!(acked.len(), 3, "acknowledged from the local journal alone");
    assert!(!owner.status.mirrored.load(Ordering::Acquire));
    assert!(!crate::data_files::shard_dir(partner_dir.path(), SHARD)
        .join("mirror")
        .exists());
    service.close();
}

#[test]
fn the_partner_is_the_other_cnode_owning_fewest_shards() {
    let record = |id: &str, shards: &[u16], service: bool| CnodeRecord {
        id: id.into(),
        shard: ShardId(0),
        shards: shards.iter().map(|s| ShardId(*s)).collect(),
        role: super::super::registry::CnodeRole::Owner,
        api: String::new(),
        nbd: String::new(),
        iscsi: String::new(),
        forward: None,
        port_group: None,
        relative_ports: Vec::new(),
        mirror_listen: None,
        partner: None,
        shard_mirror: service.then(|| format!("{id}:1")),
        pid: 1,
        version: "test".into(),
        started_unix_s: 0,
    };
    let records = vec![
        record("a", &[], true),
        record("b", &[3, 4], true),
        record("c", &[5], true),
        record("d", &[], false),
    ];
    assert_eq!(choose_partner(&records, "a").as_deref(), Some("c:1"));
    assert_eq!(choose_partner(&records, "c").as_deref(), Some("a:1"));
    assert_eq!(choose_partner(&records[..1], "a"), None);
}
