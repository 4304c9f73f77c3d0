//! How a c.node comes to own the cluster at start (see [`crate::ha`]): at once when nobody
//! owns it (or a previous run of this c.node did); as a standby that takes over on the
//! owner's mirror once the owner's lease expired; and how it stops when it loses the lease.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use weft_engine::EngineConfig;

use crate::data_files::{load_or_create_id, write_atomically};
use std::net::SocketAddr;

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
    /// The ownership lease's time to live: a dead owner's standby takes over after it.
    pub lease_ttl: Duration,
}

/// How this c.node is reached, for its ownership record.
#[derive(Debug, Clone)]
pub(crate) struct Who {
    pub api: String,
    pub nbd: String,
    pub iscsi: String,
}

/// Take the cluster's ownership: at once when it is free (or held by a previous run of this
/// c.node); else, with a mirror listener, as the owner's standby once its lease expires,
/// on the mirror of its write buffer; else after waiting for the owner's lease to run out.
/// Returns the ownership and the write log to open (mirrored to the partner, if any).
pub(crate) fn own_the_cluster(
    kv: &Arc<dyn weft_meta::MetaStore>,
    ha: &HaConfig,
    config: &EngineConfig,
    who: Who,
) -> anyhow::Result<(
    Arc<crate::ha::ownership::Ownership>,
    Arc<dyn weft_engine::write_log::WriteLogSource>,
)> {
    use crate::ha::ownership::{OwnerRecord, Ownership};
    let data_dir = &config.data_dir;
    let id = load_or_create_id(data_dir, CNODE_ID_FILE)?;
    let record = OwnerRecord {
        id: id.clone(),
        api: who.api,
        nbd: who.nbd,
        iscsi: who.iscsi,
        partner: ha.partner.clone().unwrap_or_default(),
        since_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let clock = crate::ha::clock::SystemClock::shared();
    let holder = Ownership::owner(&**kv)?;
    let someone_else = holder.as_ref().is_some_and(|h| h.id != id);
    let ownership = match (someone_else, ha.mirror_listen) {
        (true, Some(listen)) => {
            let owner = holder.map(|h| h.id).unwrap_or_default();
            let partner = crate::ha::partner::Partner::start(listen, data_dir, config.journal)?;
            tracing::info!(%owner, mirror = %partner.addr(), "standby: another c.node owns the cluster; this one keeps its write-buffer mirror and takes over when its lease expires");
            let has_mirror = || partner.mirrors().as_deref() == Some(owner.as_str());
            let ownership =
                Ownership::acquire(kv.clone(), &record, ha.lease_ttl, clock, None, &has_mirror)?;
            let dir = partner.take_over(&owner)?;
            tracing::warn!(%owner, journal = %dir.display(), "took over from the owner: its lease expired; recovering on its write-buffer mirror");
            write_atomically(data_dir, JOURNAL_DIR_FILE, dir.to_string_lossy().as_bytes())?;
            ownership
        }
        _ => Ownership::acquire(
            kv.clone(),
            &record,
            ha.lease_ttl,
            clock,
            Some(ha.lease_ttl * 2 + Duration::from_secs(2)),
            &|| true,
        )?,
    };
    let journal_dir = match std::fs::read_to_string(data_dir.join(JOURNAL_DIR_FILE)) {
        Ok(dir) if !dir.trim().is_empty() => PathBuf::from(dir.trim()),
        _ => data_dir.join("journal"),
    };
    let status = Arc::new(crate::ha::mirror::MirrorStatus::default());
    if ha.partner.is_none() {
        tracing::warn!("no partner c.node (--partner): acknowledged writes not yet in stripes live only in this c.node's journal; losing this machine loses them");
    }
    let source = crate::ha::mirror::OwnedLogSource {
        dir: journal_dir,
        options: config.journal,
        partner: ha.partner.clone(),
        owner_id: id,
        ownership: Arc::clone(&ownership),
        status,
    };
    Ok((ownership, Arc::new(source)))
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
