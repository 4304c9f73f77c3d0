//! The write-buffer mirrors this c.node keeps for shards other c.nodes own besides their
//! own, and which of those shards it takes over when their owner dies.
//!
//! A c.node's own shard has the partner its operator set (`--partner`, the standby's
//! `--mirror-listen`). A shard it owns besides its own (`crate::shard_host`) picks one when it
//! is opened ([`choose_partner`]): the live c.node other than itself that owns the fewest
//! shards, at the address that c.node registered for this service (`shard_mirror` in
//! `weft/cnodes/<id>`). Every c.node of a cluster runs the service ([`ShardMirrors`]): one
//! listener, whose port is kept in `<data dir>/shard-mirror-port` so that a restart binds the
//! same one and the owners' mirrors reconnect. It reads the owner's `HELLO`
//! (`<owner id>@<shard>`) without consuming it and hands the connection to that shard's
//! [`Partner`], whose generations go in `<data dir>/shards/<shard>/mirror/<owner id>/`: where
//! taking the shard over as an extra shard looks for them (`own_the_cluster` on the shard's
//! dir).
//!
//! Taking over ([`rescue_candidates`]): a shard is taken here when all of these hold:
//! - its journal state (`super::handover`) says `mirrored` with this c.node as the partner,
//!   so every write its owner acknowledged is in this c.node's mirror;
//! - nobody holds its ownership lease (the owner key lives on the lease: the owner died or
//!   was cut off, and stops acknowledging once its term runs out);
//! - a complete generation of that owner's mirror is here.
//!
//! The shard's partner here is stopped before its engine opens ([`ShardMirrors::hold`]): no
//! late record from a dying owner lands in the generation it recovers on, and no new
//! generation's catch-up removes it.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use parking_lot::Mutex;
use weft_engine::journal::JournalOptions;
use weft_engine::ShardId;
use weft_meta::MetaStore;

use super::handover::{journal_state_key, JournalRecordOfOwner, JournalState};
use super::partner::{complete_mirror, Partner};
use super::registry::CnodeRecord;
use super::wire;

/// Where the service's port is kept across restarts.
const PORT_FILE: &str = "shard-mirror-port";
/// How long an owner has to say `HELLO` after it connected.
const HELLO_WAIT: Duration = Duration::from_secs(5);
/// The longest `HELLO` body read: an id (at most 64 bytes), `@` and a shard number.
const HELLO_MAX_BYTES: usize = 96;

/// The shard-mirror service of this c.node (see the module doc).
#[derive(Debug)]
pub struct ShardMirrors {
    id: String,
    /// The c.node's data dir: the shards' dirs are under it.
    data_dir: PathBuf,
    options: JournalOptions,
    addr: SocketAddr,
    st: Mutex<Served>,
    closed: AtomicBool,
}

#[derive(Debug, Default)]
struct Served {
    partners: BTreeMap<ShardId, Arc<Partner>>,
    /// Shards this c.node takes over or owns: their owners' mirrors are refused.
    held: BTreeSet<ShardId>,
}

impl ShardMirrors {
    /// Listen on `ip`, at the port of the last run when it is free.
    pub fn start(
        ip: IpAddr,
        data_dir: &Path,
        options: JournalOptions,
        id: String,
    ) -> anyhow::Result<Arc<ShardMirrors>> {
        let kept = std::fs::read_to_string(data_dir.join(PORT_FILE))
            .ok()
            .and_then(|p| p.trim().parse::<u16>().ok());
        let listener = match kept.and_then(|port| TcpListener::bind((ip, port)).ok()) {
            Some(l) => l,
            None => TcpListener::bind((ip, 0))
                .with_context(|| format!("binding the shard-mirror listener on {ip}"))?,
        };
        let addr = listener.local_addr()?;
        crate::data_files::write_atomically(
            data_dir,
            PORT_FILE,
            addr.port().to_string().as_bytes(),
        )?;
        let service = Arc::new(ShardMirrors {
            id,
            data_dir: data_dir.to_path_buf(),
            options,
            addr,
            st: Mutex::default(),
            closed: AtomicBool::new(false),
        });
        let s = Arc::clone(&service);
        std::thread::Builder::new()
            .name("weft-shard-mirrors".into())
            .spawn(move || s.accept(listener))?;
        tracing::info!(%addr, "keeping write-buffer mirrors of other c.nodes' extra shards");
        Ok(service)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn accept(self: Arc<Self>, listener: TcpListener) {
        for conn in listener.incoming() {
            if self.closed.load(Ordering::Acquire) {
                return;
            }
            let Ok(conn) = conn else { continue };
            let me = Arc::clone(&self);
            let _ = std::thread::Builder::new()
                .name("weft-shard-mirror-hello".into())
                .spawn(move || {
                    if let Err(e) = me.hand_over(conn) {
                        tracing::warn!(error = %format!("{e:#}"), "refused a shard's mirror connection");
                    }
                });
        }
    }

    /// Give `conn` to the partner of the shard its `HELLO` names.
    fn hand_over(&self, mut conn: TcpStream) -> anyhow::Result<()> {
        let name = peek_hello(&conn)?;
        let shard = name
            .split_once('@')
            .and_then(|(_, n)| n.parse::<u16>().ok())
            .map(ShardId)
            .with_context(|| format!("the owner {name:?} names no shard"))?;
        let mut st = self.st.lock();
        if st.held.contains(&shard) || self.closed.load(Ordering::Acquire) {
            drop(st);
            let mut refusal = Vec::new();
            wire::write_frame(
                &mut refusal,
                wire::REFUSED,
                format!(
                    "c.node {} took shard {shard} over; it mirrors it no more",
                    self.id
                )
                .as_bytes(),
            )?;
            conn.write_all(&refusal)?;
            return Ok(());
        }
        let dir = crate::data_files::shard_dir(&self.data_dir, shard);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let partner = st
            .partners
            .entry(shard)
            .or_insert_with(|| Partner::detached(&dir, self.options, self.id.clone()));
        // Under the lock: a hold that follows waits for this connection (Partner::stop).
        partner.serve(conn);
        Ok(())
    }

    /// Refuse `shard`'s mirror from now on and stop the one running (waiting for it): this
    /// c.node is about to recover the shard on its mirror, or owns it.
    pub fn hold(&self, shard: ShardId) {
        let partner = {
            let mut st = self.st.lock();
            st.held.insert(shard);
            st.partners.remove(&shard)
        };
        if let Some(p) = partner {
            p.stop();
        }
    }

    /// Mirror `shard` again for whoever owns it next (this c.node gave it up, or did not
    /// take it after all).
    pub fn release(&self, shard: ShardId) {
        self.st.lock().held.remove(&shard);
    }

    /// Stop the service: no more connections; the running mirrors are cut.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let _ = TcpStream::connect(self.addr);
        let partners = std::mem::take(&mut self.st.lock().partners);
        for p in partners.into_values() {
            p.stop();
        }
    }
}

/// The `HELLO` body on `conn`, read without consuming it (the partner reads it again).
fn peek_hello(conn: &TcpStream) -> anyhow::Result<String> {
    conn.set_read_timeout(Some(HELLO_WAIT))?;
    let deadline = Instant::now() + HELLO_WAIT;
    let mut buf = [0u8; 5 + HELLO_MAX_BYTES];
    loop {
        let n = conn
            .peek(&mut buf)
            .context("waiting for the owner's hello")?;
        anyhow::ensure!(n > 0, "the owner closed the connection");
        if n >= 5 {
            anyhow::ensure!(buf[0] == wire::HELLO, "the owner did not say hello");
            let len = u32::from_le_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
            anyhow::ensure!(len <= HELLO_MAX_BYTES, "the owner's hello is too long");
            if n >= 5 + len {
                conn.set_read_timeout(None)?;
                return Ok(String::from_utf8(buf[5..5 + len].to_vec())?);
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "the owner's hello did not come");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The shard-mirror address of the c.node a shard owned by `me` besides its own mirrors
/// to: a registered c.node other than `me` with the service, owning the fewest shards
/// (ties: the lowest id). `None`: there is none (the shard runs without a partner).
pub fn choose_partner(records: &[CnodeRecord], me: &str) -> Option<String> {
    records
        .iter()
        .filter(|r| r.id != me && r.shard_mirror.is_some())
        .min_by_key(|r| (r.shards.len(), r.id.clone()))
        .and_then(|r| r.shard_mirror.clone())
}

/// The shards whose mirror this c.node (`me`, data dir `data_dir`) keeps and which it must
/// take over now (see the module doc); `skip`: the shards it owns already.
pub fn rescue_candidates(
    kv: &dyn MetaStore,
    data_dir: &Path,
    me: &str,
    skip: &[ShardId],
) -> anyhow::Result<Vec<ShardId>> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(data_dir.join(crate::data_files::SHARDS_DIR)) else {
        return Ok(out);
    };
    for entry in entries.flatten() {
        let Some(shard) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u16>().ok())
            .map(ShardId)
        else {
            continue;
        };
        if skip.contains(&shard) || !entry.path().join("mirror").is_dir() {
            continue;
        }
        let Some(v) = kv.get(&journal_state_key(shard))? else {
            continue;
        };
        let Ok(last) = serde_json::from_slice::<JournalRecordOfOwner>(&v.value) else {
            continue;
        };
        let mirrored_here =
            last.state == JournalState::Mirrored && last.partner_id == me && last.owner != me;
        if !mirrored_here || super::ownership::Ownership::owner(kv, shard)?.is_some() {
            continue;
        }
        if complete_mirror(&entry.path(), &last.owner).is_some() {
            out.push(shard);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
