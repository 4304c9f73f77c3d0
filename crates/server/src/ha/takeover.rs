//! How a c.node comes to own the cluster at start (see [`crate::ha`]): at once when nobody
//! owns it (or a previous run of this c.node did); as a standby that takes over on the
//! owner's mirror once the owner's lease expired; and how it stops when it loses the lease.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use weft_engine::EngineConfig;

use crate::data_files::{load_or_create_id, write_atomically};
use crate::ha::registry::{CnodeRecord, CnodeRole, Registration};

/// A c.node's id in its cluster (ownership, mirrors), made at first start.
pub const CNODE_ID_FILE: &str = "cnode-id";
/// The journal a c.node uses when it is not `<data dir>/journal`: the mirror it took over.
pub const JOURNAL_DIR_FILE: &str = "journal-dir";

/// The c.node's part in compute-layer high availability (see [`crate::ha`]).
#[derive(Debug, Clone)]
pub struct HaConfig {
    /// The partner's mirror address: writes are acknowledged once it holds them too.
    pub partner: Option<String>,
    /// Where this c.node listens for an owner's mirror when another c.node owns the cluster
    /// (it then waits as that owner's standby); `None`: it waits for the owner to go, then
    /// gives up.
    pub mirror_listen: Option<SocketAddr>,
    /// Where this c.node serves other c.nodes' clients while it owns the cluster (`None`: the
    /// NBD listener's address, any free port).
    pub forward_listen: Option<SocketAddr>,
    /// The ownership lease's time to live: a dead owner's standby takes over after it.
    pub lease_ttl: Duration,
    /// Take over even when the last owner's journal may hold acknowledged writes nobody
    /// else has (they are given up).
    pub force_takeover: bool,
    /// The shard this c.node serves (`weft cnode --shard`): its catalog, ownership lease,
    /// journal state and volumes. Shard 0 is the cluster as it was before shards.
    pub shard: weft_engine::ShardId,
    /// Shards it owns besides its own from the start (`--shard 0,2`), each with an engine of
    /// its own and no partner (`crate::shard_host`).
    pub also: Vec<weft_engine::ShardId>,
}

/// What taking the cluster over gives the c.node.
pub(crate) struct Owned {
    pub ownership: Arc<crate::ha::ownership::Ownership>,
    /// The write log the engine opens (mirrored to the partner, if any).
    pub write_log: Arc<dyn weft_engine::write_log::WriteLogSource>,
    pub compute: Arc<crate::ha::ComputeInfo>,
}

/// How this c.node is reached, for its ownership record.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub api: String,
    pub nbd: String,
    pub iscsi: String,
    pub forward: String,
    /// Its ALUA target port group and its portals' relative target ports.
    pub port_group: Option<crate::target_port_groups::CnodeGroup>,
}

/// Take the cluster's ownership: when nobody holds its lease (or a previous run of this
/// c.node did) and the last owner's journal state allows it (see [`crate::ha::handover`]).
/// While another c.node holds it, a c.node with a mirror listener is its standby: it keeps
/// the owner's write-buffer mirror and takes over once the lease expires; without one it waits
/// for the lease to run out, then gives up. A successor that holds the last owner's complete
/// mirror recovers on it. Returns the ownership and the write log to open.
///
/// `joined`: this process is registered already (it owns its own shard and takes `ha.shard`
/// besides, see `crate::shard_host`): its id and registration are used.
pub(crate) fn own_the_cluster(
    kv: &Arc<dyn weft_meta::MetaStore>,
    ha: &HaConfig,
    config: &EngineConfig,
    who: Who,
    joined: Option<Arc<Registration>>,
) -> anyhow::Result<Owned> {
    use crate::ha::handover::{journal_state_key, may_take_over, JournalState};
    use crate::ha::ownership::{OwnerRecord, Ownership};
    use crate::ha::partner::{complete_mirror, Partner};
    let data_dir = &config.data_dir;
    let id = match &joined {
        Some(r) => r.id(),
        None => load_or_create_id(data_dir, CNODE_ID_FILE)?,
    };
    let record = OwnerRecord {
        id: id.clone(),
        api: who.api,
        nbd: who.nbd,
        iscsi: who.iscsi,
        partner: ha.partner.clone().unwrap_or_default(),
        forward: who.forward,
        since_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let port_group = who.port_group;
    let clock = crate::ha::clock::SystemClock::shared();
    let holder = Ownership::owner(&**kv, ha.shard)?;
    let someone_else = holder.as_ref().filter(|h| h.id != id);
    let partner = match (someone_else, ha.mirror_listen) {
        (Some(owner), Some(listen)) => {
            let p = Partner::start(listen, data_dir, config.journal, id.clone())?;
            tracing::info!(owner = %owner.id, mirror = ?p.addr(), "standby: another c.node owns the cluster; this one keeps its write-buffer mirror and takes over when its lease expires");
            Some(p)
        }
        _ => None,
    };
    let extra = joined.is_some();
    let registration = joined.unwrap_or_else(|| {
        Registration::start(
            Arc::clone(kv),
            CnodeRecord {
                id: id.clone(),
                shard: ha.shard,
                shards: Vec::new(),
                role: match (&someone_else, &partner) {
                    (None, _) => CnodeRole::Waiting,
                    (Some(_), Some(_)) => CnodeRole::Standby,
                    (Some(_), None) => CnodeRole::Waiting,
                },
                api: record.api.clone(),
                nbd: record.nbd.clone(),
                iscsi: record.iscsi.clone(),
                forward: Some(record.forward.clone()).filter(|f| !f.is_empty()),
                port_group: port_group.as_ref().map(|g| g.group_id),
                relative_ports: port_group
                    .as_ref()
                    .map(|g| g.relative_ports.clone())
                    .unwrap_or_default(),
                mirror_listen: ha.mirror_listen.map(|a| a.to_string()),
                partner: ha.partner.clone(),
                shard_mirror: None,
                pid: std::process::id(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                started_unix_s: record.since_unix_s,
            },
            ha.lease_ttl,
        )
    });
    let holds_mirror_of = |owner: &str| complete_mirror(data_dir, owner).is_some();
    let told = std::sync::atomic::AtomicBool::new(false);
    let may_take = || -> Result<(), String> {
        let verdict = may_take_over(&**kv, ha.shard, &id, &holds_mirror_of)
            .unwrap_or_else(|e| Err(format!("{e:#}")));
        match verdict {
            Err(why) if ha.force_takeover => {
                if !told.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::error!(%why, "--force-takeover: taking the cluster over anyway; those writes are given up");
                }
                Ok(())
            }
            Err(why) => {
                if !told.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::error!(%why, "not taking the cluster over");
                }
                Err(why)
            }
            Ok(()) => Ok(()),
        }
    };
    let wait = match &partner {
        Some(_) => None,
        None => Some(ha.lease_ttl * 2 + Duration::from_secs(2)),
    };
    let ownership = Ownership::acquire(
        kv.clone(),
        ha.shard,
        &record,
        ha.lease_ttl,
        clock,
        wait,
        &may_take,
    )
    .inspect_err(|_| {
        if !extra {
            registration.stop();
        }
    })?;
    // A shard taken besides the own one is added to the registration by its caller, once
    // it is served (`crate::shard_host`).
    if !extra {
        registration.set_role(CnodeRole::Owner);
    }
    if let Some(p) = &partner {
        p.stop();
    }
    // The last owner's journal state, as it left it (ours overwrites it once the log opens).
    let last: Option<crate::ha::handover::JournalRecordOfOwner> = kv
        .get(&journal_state_key(ha.shard))?
        .and_then(|v| serde_json::from_slice(&v.value).ok());
    let mirror = last.as_ref().and_then(|r| {
        (r.owner != id && r.state == JournalState::Mirrored && r.partner_id == id)
            .then(|| complete_mirror(data_dir, &r.owner))
            .flatten()
    });
    if let Some(dir) = &mirror {
        tracing::warn!(journal = %dir.display(), "took over from the last owner: recovering on its write-buffer mirror");
        write_atomically(data_dir, JOURNAL_DIR_FILE, dir.to_string_lossy().as_bytes())?;
    }
    let journal_dir = match std::fs::read_to_string(data_dir.join(JOURNAL_DIR_FILE)) {
        Ok(dir) if !dir.trim().is_empty() => PathBuf::from(dir.trim()),
        _ => data_dir.join("journal"),
    };
    let status = Arc::new(crate::ha::mirror::MirrorStatus::default());
    if ha.partner.is_none() && !extra {
        tracing::warn!("no partner c.node (--partner): acknowledged writes not yet in stripes live only in this c.node's journal; losing this machine loses them");
    }
    let info = Arc::new(crate::ha::ComputeInfo {
        id: id.clone(),
        shard: ha.shard,
        partner: ha.partner.clone(),
        lease_ttl: ha.lease_ttl,
        mirror: Arc::clone(&status),
        registration,
        drain: tokio::sync::Notify::new(),
    });
    let source = crate::ha::mirror::OwnedLogSource {
        dir: journal_dir,
        options: config.journal,
        partner: ha.partner.clone(),
        // A shard owned besides the own one is mirrored under its number, so one partner
        // can keep the mirrors of several shards of this c.node (`super::shard_mirrors`).
        mirror_name: if extra {
            format!("{id}@{}", ha.shard)
        } else {
            id.clone()
        },
        owner_id: id,
        ownership: Arc::clone(&ownership),
        status,
        kv: Arc::clone(kv),
        shard: ha.shard,
    };
    Ok(Owned {
        ownership,
        write_log: Arc::new(source),
        compute: info,
    })
}

/// A c.node whose ownership lease expired may be replaced by its standby at any moment: it
/// stops at once (its writes already fail), so it never serves stale data either.
pub(crate) fn exit_when_ownership_lost(ownership: Arc<crate::ha::ownership::Ownership>) {
    let _ = std::thread::Builder::new()
        .name("weft-ownership-watch".into())
        .spawn(move || loop {
            if ownership.is_lost() {
                tracing::error!("exiting: this c.node lost the cluster's ownership lease (another c.node may serve its volumes now)");
                std::process::exit(75);
            }
            std::thread::sleep(Duration::from_millis(100));
        });
}
