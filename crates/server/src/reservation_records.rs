//! SCSI persistent reservations of the iSCSI LUs, kept in the metadata store: one record per
//! export (volume or snapshot) under [`RESERVATIONS_PREFIX`], beside and never inside the
//! engine's cluster state. In cluster mode that store is the cluster's etcd, so every c.node
//! serving a LU shares its registrations and reservation; a single-process server keeps its
//! own embedded store in [`RESERVATIONS_DIR`] of the data dir.
//!
//! Each LU's `weft_scsi::LunState` reaches its record through [`ReservationRecords::for_export`]
//! (load, and store with a compare-and-swap on the key's mod revision); [`follow`] tells the
//! LUs of this process when a record changed under them. The record of an export goes when the
//! export is deleted ([`ReservationRecords::remove`]) and moves when it is renamed
//! ([`ReservationRecords::rename`]); at power-on ([`ReservationRecords::power_on`])
//! records without APTPL go, as SPC-4 has a power loss clear them, and so do those of exports
//! that no longer exist.
//!
//! The record also holds the RESERVE(6) holder, and carries the news of the change that
//! stored it (`weft_scsi::RecordNews`: a LU reset, unit attentions for named nexuses) with
//! the id of the c.node that stored it, so that the unit attentions a LUN RESET or a PR OUT
//! through one c.node causes reach the nexuses logged in through the others.
//!
//! Why every other c.node queues a change's unit attentions before the command that made it
//! is answered, once each and in order:
//! 1. A change C through c.node X is one compare-and-put of the LU's key, at etcd revision
//!    R; the value written at R carries C's news and X's id, and nothing else writes R.
//! 2. Every other c.node Y watches the prefix; etcd delivers each Put of a watched key once,
//!    in revision order. On the Put of R, Y's [`follow`] first hands the news to its LUs
//!    (reset counted, attentions queued for the nexuses of Y's portals), then invalidates
//!    their caches, and only then writes `weft/scsi/applied/<Y>` = R.
//! 3. X answers C (the PR OUT's status, the LUN RESET's task management response) only once
//!    every other c.node serving iSCSI wrote an applied revision >= R ([`Peers`]): so a host
//!    that saw C answered and then sends a command through Y meets C's unit attention there
//!    (and C's reservation state). Y's queue is FIFO and fed in revision order, so C's unit
//!    attentions come after those of every earlier change.
//! 4. X does not hear its own news (its id is in them; it queued its nexuses' attentions when
//!    it stored), a watch started or restarted from a listing applies none (the listing's
//!    records are older news), and a rename copies the record without them: no attention is
//!    queued twice.
//!
//! What can be lost: when a watch breaks it is resumed after the last revision it delivered;
//! if etcd has compacted that revision away, it starts again from a listing and the news in
//! between are lost (those nexuses miss a unit attention; the reservation state itself is
//! reloaded). A c.node that does not answer within [`Peers::wait`] is named in a WARN log and
//! the command answers anyway, as for any reservation change.
//!
//! Calls block: they run on the iSCSI worker threads, the API's blocking pool, or at start.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use weft_meta::{EmbeddedMetaStore, MetaError, MetaStore, WatchEvent};
use weft_scsi::{
    Nexus, RecordNews, RecordVersion, RegistrationRecord, ReservationHolder, ReservationRecord,
    ReservationStore, StoreError,
};

/// Where the records live in the metadata store: this prefix, then the export's name.
pub const RESERVATIONS_PREFIX: &str = "weft/scsi/reservations/";
/// The single-process server's store of records, in its data dir.
pub const RESERVATIONS_DIR: &str = "scsi-reservations";
/// The format of a stored record that holds a RESERVE(6) reservation or news; one that holds
/// neither is written in [`RECORD_FORMAT_PERSISTENT_ONLY`], which builds from before them
/// read. A record of another format is refused as corrupt.
const RECORD_FORMAT: u32 = 2;
/// Persistent reservations only: no `reserved_by`, no `news`.
const RECORD_FORMAT_PERSISTENT_ONLY: u32 = 1;
/// How long [`follow`] waits for a change before it looks at the shutdown token again.
const FOLLOW_POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How long [`follow`] waits before watching again after its watch broke.
const FOLLOW_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Where each c.node of a cluster says up to which revision of the records its LUs have
/// dropped what they cached: this prefix, then its id.
pub const APPLIED_PREFIX: &str = "weft/scsi/applied/";
const PEERS_POLL: Duration = Duration::from_millis(2);

/// The other c.nodes serving the same LUs (cluster mode): a reservation change made here is
/// answered only once each of them has applied it, so a host fenced through one c.node is
/// refused at once through every other.
#[derive(Clone)]
pub struct Peers {
    /// This c.node's id.
    pub me: String,
    /// The ids of the other c.nodes that serve iSCSI now.
    pub others: Arc<dyn Fn() -> Vec<String> + Send + Sync>,
    /// How long a change waits for them: longer than a c.node cut off from etcd goes on
    /// serving (its lease time).
    pub wait: Duration,
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Peers")
            .field("me", &self.me)
            .finish_non_exhaustive()
    }
}

/// The reservation records of every export, in one metadata store.
#[derive(Debug, Clone)]
pub struct ReservationRecords {
    kv: Arc<dyn MetaStore>,
    peers: Option<Peers>,
}

impl ReservationRecords {
    /// Records in `kv` (the cluster's etcd in cluster mode).
    pub fn new(kv: Arc<dyn MetaStore>) -> ReservationRecords {
        ReservationRecords { kv, peers: None }
    }

    /// Records shared with other c.nodes: changes wait for them (see [`Peers`]).
    pub fn with_peers(self, peers: Peers) -> ReservationRecords {
        ReservationRecords {
            peers: Some(peers),
            ..self
        }
    }

    /// The news of a stored record `value`, if another c.node stored it with some.
    fn news_from_elsewhere(&self, value: &[u8]) -> Option<RecordNews> {
        let me = &self.peers.as_ref()?.me;
        match decode(value) {
            Ok((record, Some(origin))) if origin != *me && !record.news.is_empty() => {
                Some(record.news)
            }
            _ => None,
        }
    }

    /// Say that this c.node's LUs have applied every change up to `revision`.
    fn applied(&self, revision: u64) {
        if let Some(p) = &self.peers {
            let key = format!("{APPLIED_PREFIX}{}", p.me);
            if let Err(error) = self.kv.put(&key, revision.to_string().as_bytes(), None) {
                tracing::warn!(%error, "could not say which reservation changes this c.node applied");
            }
        }
    }

    /// The single-process server's records, in `data_dir`/[`RESERVATIONS_DIR`].
    pub fn open_local(data_dir: &Path) -> Result<ReservationRecords, MetaError> {
        let kv = EmbeddedMetaStore::open(&data_dir.join(RESERVATIONS_DIR))?;
        Ok(ReservationRecords::new(Arc::new(kv)))
    }

    /// Records that live as long as the process (tests).
    pub fn in_memory() -> ReservationRecords {
        ReservationRecords::new(Arc::new(EmbeddedMetaStore::in_memory()))
    }

    /// The store of `export`'s record, for its `LunState`.
    pub fn for_export(&self, export: &str) -> Arc<dyn ReservationStore> {
        Arc::new(ExportRecord {
            kv: Arc::clone(&self.kv),
            peers: self.peers.clone(),
            key: key_of(export),
        })
    }

    /// `export` was deleted: its record goes with it.
    pub fn remove(&self, export: &str) -> Result<(), MetaError> {
        self.kv.delete(&key_of(export))
    }

    /// `from` was renamed `to` (a volume rename): its record moves with it, so a host keeps
    /// its registrations and reservation across the rename. Without its news: they were
    /// heard when it was stored.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), MetaError> {
        if let Some(versioned) = self.kv.get(&key_of(from))? {
            let value = match decode(&versioned.value) {
                Ok((record, _)) => encode(
                    &ReservationRecord {
                        news: RecordNews::default(),
                        ..record
                    },
                    None,
                ),
                // Not ours to read: moved as it is.
                Err(_) => versioned.value,
            };
            self.kv.put(&key_of(to), &value, None)?;
            self.kv.delete(&key_of(from))?;
        }
        Ok(())
    }

    /// The LUs come back after every process serving them stopped (a power loss in SPC-4's
    /// terms): drop the records without APTPL (unless `failover`: a c.node that takes over
    /// from another is a path change for the hosts, not a power loss of the LUs, and
    /// clustered databases fence with these reservations), and those of exports not in
    /// `exports` (deleted while no record could be removed). A power-on also releases a
    /// RESERVE(6) reservation kept in an APTPL record. The number of records dropped.
    ///
    /// `foreign`: an export of another shard (its volume's name claim says so), whose LUs
    /// this start does not power on: its record is left as it is. Without that, a c.node of
    /// one shard starting would take every other shard's exports, absent from its engine,
    /// for deleted ones and drop their reservations.
    pub fn power_on(
        &self,
        exports: &BTreeSet<String>,
        failover: bool,
        foreign: &dyn Fn(&str) -> bool,
    ) -> Result<usize, MetaError> {
        let mut dropped = 0;
        for (key, versioned) in self.kv.list(RESERVATIONS_PREFIX)? {
            let export = key.strip_prefix(RESERVATIONS_PREFIX).unwrap_or(&key);
            if !exports.contains(export) && foreign(export) {
                continue;
            }
            let decoded = decode(&versioned.value).ok().map(|(record, _)| record);
            let kept = match decoded {
                Some(record) if exports.contains(export) => {
                    if failover {
                        Some(None)
                    } else {
                        record
                            .clone()
                            .after_power_loss()
                            .map(|after| (after.reserved_by != record.reserved_by).then_some(after))
                    }
                }
                _ => None,
            };
            match kept {
                Some(None) => continue,
                Some(Some(after)) => {
                    let value = encode(&after, None);
                    match self
                        .kv
                        .compare_and_put(&key, versioned.mod_revision, &value, None)
                    {
                        Ok(_) | Err(MetaError::Conflict { .. }) => continue,
                        Err(e) => return Err(e),
                    }
                }
                None => {}
            }
            match self.kv.compare_and_delete(&key, versioned.mod_revision) {
                Ok(()) => dropped += 1,
                // Changed since the listing: someone is using it, so it is not stale.
                Err(MetaError::Conflict { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(dropped)
    }
}

/// Until `shutdown`, call `changed` with the export of every record that changes (another
/// c.node's PERSISTENT RESERVE OUT, a deletion) and the news another c.node stored with it,
/// and with `None` when changes may have been missed (the watch started or broke): then every
/// LU must reload. See the module documentation for why the news arrive once and in order.
pub fn follow(
    records: &ReservationRecords,
    shutdown: &CancellationToken,
    changed: impl Fn(Option<&str>, Option<&RecordNews>),
) {
    // The last revision the watch delivered: a broken watch resumes after it.
    let mut resume: Option<u64> = None;
    while !shutdown.is_cancelled() {
        let resumed = resume.and_then(|after| {
            records
                .kv
                .watch(RESERVATIONS_PREFIX, after)
                .ok()
                .map(|w| (w, after))
        });
        let watch = match resumed {
            Some(watch) => Ok(watch),
            None => records
                .kv
                .list_with_revision(RESERVATIONS_PREFIX)
                .and_then(|(_, revision)| {
                    records
                        .kv
                        .watch(RESERVATIONS_PREFIX, revision)
                        .map(|w| (w, revision))
                }),
        };
        let (watch, start) = match watch {
            Ok(watch) => watch,
            Err(error) => {
                tracing::warn!(%error, "cannot watch the reservation records; retrying");
                std::thread::sleep(FOLLOW_RETRY_INTERVAL);
                continue;
            }
        };
        // Whatever happened before the watch started is unknown here.
        changed(None, None);
        records.applied(start);
        resume = Some(start);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match watch.events.recv_timeout(FOLLOW_POLL_INTERVAL) {
                Ok(event) => {
                    let key = event.key();
                    let export = key.strip_prefix(RESERVATIONS_PREFIX).unwrap_or(key);
                    let news = match &event {
                        WatchEvent::Put { value, .. } => records.news_from_elsewhere(value),
                        WatchEvent::Delete { .. } => None,
                    };
                    changed(Some(export), news.as_ref());
                    let (WatchEvent::Put { revision, .. } | WatchEvent::Delete { revision, .. }) =
                        &event;
                    records.applied(*revision);
                    resume = Some(*revision);
                    if let WatchEvent::Delete { .. } = event {
                        tracing::debug!(key, "reservation record removed");
                    }
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                    let error = watch.error().map(|e| e.to_string());
                    tracing::warn!(
                        ?error,
                        "the reservation records watch broke; watching again"
                    );
                    break;
                }
            }
        }
        std::thread::sleep(FOLLOW_RETRY_INTERVAL);
    }
}

fn key_of(export: &str) -> String {
    format!("{RESERVATIONS_PREFIX}{export}")
}

/// One export's record, as `weft_scsi` sees it.
#[derive(Debug)]
struct ExportRecord {
    kv: Arc<dyn MetaStore>,
    peers: Option<Peers>,
    key: String,
}

impl ReservationStore for ExportRecord {
    fn load(&self) -> Result<(ReservationRecord, RecordVersion), StoreError> {
        match self.kv.get(&self.key).map_err(unavailable)? {
            None => Ok((ReservationRecord::default(), 0)),
            Some(v) => {
                let (record, _) = decode(&v.value).map_err(StoreError::Corrupt)?;
                Ok((record, v.mod_revision))
            }
        }
    }

    fn store(
        &self,
        record: &ReservationRecord,
        expected: RecordVersion,
    ) -> Result<RecordVersion, StoreError> {
        // News are for the other c.nodes: a server alone stores none.
        let origin = self.peers.as_ref().map(|p| p.me.as_str());
        let bytes = encode(record, origin);
        match self.kv.compare_and_put(&self.key, expected, &bytes, None) {
            Ok(revision) => {
                if let Some(peers) = &self.peers {
                    wait_for_peers(&*self.kv, peers, revision);
                }
                Ok(revision)
            }
            Err(MetaError::Conflict { .. }) => Err(StoreError::Conflict),
            Err(e) => Err(unavailable(e)),
        }
    }
}

/// Until every other c.node serving iSCSI has applied `revision` (or `peers.wait` passed:
/// one that does not answer etcd is named in the log; it has stopped serving by then).
fn wait_for_peers(kv: &dyn MetaStore, peers: &Peers, revision: u64) {
    let deadline = std::time::Instant::now() + peers.wait;
    loop {
        let behind: Vec<String> = (peers.others)()
            .into_iter()
            .filter(|id| {
                let applied = kv
                    .get(&format!("{APPLIED_PREFIX}{id}"))
                    .ok()
                    .flatten()
                    .and_then(|v| String::from_utf8_lossy(&v.value).parse::<u64>().ok());
                applied.is_none_or(|a| a < revision)
            })
            .collect();
        if behind.is_empty() {
            return;
        }
        if std::time::Instant::now() >= deadline {
            tracing::warn!(?behind, revision, "a reservation change answered before these c.nodes applied it: a host fenced here may still write through them until they do");
            return;
        }
        std::thread::sleep(PEERS_POLL);
    }
}

fn unavailable(error: MetaError) -> StoreError {
    tracing::warn!(%error, "reservation store unavailable");
    StoreError::Unavailable(error.to_string())
}

/// A stored record and the id of the c.node that stored its news.
fn decode(bytes: &[u8]) -> Result<(ReservationRecord, Option<String>), String> {
    let stored: StoredRecord = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if ![RECORD_FORMAT_PERSISTENT_ONLY, RECORD_FORMAT].contains(&stored.format) {
        return Err(format!(
            "record format {}, this weft reads {RECORD_FORMAT_PERSISTENT_ONLY} and {RECORD_FORMAT}",
            stored.format
        ));
    }
    let origin = stored.news.as_ref().map(|n| n.origin.clone());
    Ok((stored.into(), origin))
}

/// `record` as stored; its news with `origin` (`None`: the news are dropped).
fn encode(record: &ReservationRecord, origin: Option<&str>) -> Vec<u8> {
    let mut stored = StoredRecord::from(record);
    stored.news = origin
        .filter(|_| !record.news.is_empty())
        .map(|origin| StoredNews {
            origin: origin.to_string(),
            reset: record.news.reset,
            attentions: record
                .news
                .attentions
                .iter()
                .map(|(nexus, (asc, ascq))| StoredAttention {
                    initiator_port: nexus.initiator_port.clone(),
                    relative_target_port: nexus.relative_target_port,
                    asc: *asc,
                    ascq: *ascq,
                })
                .collect(),
        });
    if stored.reserved_by.is_none() && stored.news.is_none() {
        stored.format = RECORD_FORMAT_PERSISTENT_ONLY;
    }
    serde_json::to_vec(&stored).expect("strings and numbers always serialize")
}

/// A record as JSON in the metadata store.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRecord {
    format: u32,
    generation: u32,
    aptpl: bool,
    registrations: Vec<StoredRegistration>,
    reservation: Option<StoredReservation>,
    /// The RESERVE(6) holder (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reserved_by: Option<StoredNexus>,
    /// The news of the change that stored the record, for the other c.nodes (format 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    news: Option<StoredNews>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredNexus {
    initiator_port: String,
    relative_target_port: u16,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredNews {
    /// The id of the c.node that stored them (which does not hear its own).
    origin: String,
    reset: bool,
    attentions: Vec<StoredAttention>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredAttention {
    initiator_port: String,
    relative_target_port: u16,
    asc: u8,
    ascq: u8,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredRegistration {
    initiator_port: String,
    relative_target_port: u16,
    key: u64,
    all_target_ports: bool,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredReservation {
    initiator_port: String,
    relative_target_port: u16,
    type_code: u8,
}

impl From<&ReservationRecord> for StoredRecord {
    fn from(r: &ReservationRecord) -> Self {
        StoredRecord {
            format: RECORD_FORMAT,
            generation: r.generation,
            aptpl: r.aptpl,
            registrations: r
                .registrations
                .iter()
                .map(|reg| StoredRegistration {
                    initiator_port: reg.nexus.initiator_port.clone(),
                    relative_target_port: reg.nexus.relative_target_port,
                    key: reg.key,
                    all_target_ports: reg.all_target_ports,
                })
                .collect(),
            reservation: r.reservation.as_ref().map(|h| StoredReservation {
                initiator_port: h.holder.initiator_port.clone(),
                relative_target_port: h.holder.relative_target_port,
                type_code: h.type_code,
            }),
            reserved_by: r.reserved_by.as_ref().map(|n| StoredNexus {
                initiator_port: n.initiator_port.clone(),
                relative_target_port: n.relative_target_port,
            }),
            // `encode` adds them with their origin.
            news: None,
        }
    }
}

impl From<StoredRecord> for ReservationRecord {
    fn from(s: StoredRecord) -> Self {
        ReservationRecord {
            generation: s.generation,
            aptpl: s.aptpl,
            registrations: s
                .registrations
                .into_iter()
                .map(|reg| RegistrationRecord {
                    nexus: Nexus::new(reg.initiator_port, reg.relative_target_port),
                    key: reg.key,
                    all_target_ports: reg.all_target_ports,
                })
                .collect(),
            reservation: s.reservation.map(|h| ReservationHolder {
                holder: Nexus::new(h.initiator_port, h.relative_target_port),
                type_code: h.type_code,
            }),
            reserved_by: s
                .reserved_by
                .map(|n| Nexus::new(n.initiator_port, n.relative_target_port)),
            news: s
                .news
                .map(|n| RecordNews {
                    reset: n.reset,
                    attentions: n
                        .attentions
                        .into_iter()
                        .map(|a| {
                            (
                                Nexus::new(a.initiator_port, a.relative_target_port),
                                (a.asc, a.ascq),
                            )
                        })
                        .collect(),
                })
                .unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests;
