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
//! Calls block: they run on the iSCSI worker threads, the API's blocking pool, or at start.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use weft_meta::{EmbeddedMetaStore, MetaError, MetaStore, WatchEvent};
use weft_scsi::{
    Nexus, RecordVersion, RegistrationRecord, ReservationHolder, ReservationRecord,
    ReservationStore, StoreError,
};

/// Where the records live in the metadata store: this prefix, then the export's name.
pub const RESERVATIONS_PREFIX: &str = "weft/scsi/reservations/";
/// The single-process server's store of records, in its data dir.
pub const RESERVATIONS_DIR: &str = "scsi-reservations";
/// The format of a stored record; a record of another format is refused as corrupt.
const RECORD_FORMAT: u32 = 1;
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
    /// its registrations and reservation across the rename.
    pub fn rename(&self, from: &str, to: &str) -> Result<(), MetaError> {
        if let Some(record) = self.kv.get(&key_of(from))? {
            self.kv.put(&key_of(to), &record.value, None)?;
            self.kv.delete(&key_of(from))?;
        }
        Ok(())
    }

    /// The LUs come back after every process serving them stopped (a power loss in SPC-4's
    /// terms): drop the records without APTPL (unless `failover`: a c.node that takes over
    /// from another is a path change for the hosts, not a power loss of the LUs, and
    /// clustered databases fence with these reservations), and those of exports not in
    /// `exports` (deleted while no record could be removed). The number of records dropped.
    pub fn power_on(&self, exports: &BTreeSet<String>, failover: bool) -> Result<usize, MetaError> {
        let mut dropped = 0;
        for (key, versioned) in self.kv.list(RESERVATIONS_PREFIX)? {
            let export = key.strip_prefix(RESERVATIONS_PREFIX).unwrap_or(&key);
            let keep = exports.contains(export)
                && decode(&versioned.value)
                    .is_ok_and(|r| failover || r.after_power_loss().is_some());
            if keep {
                continue;
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
/// c.node's PERSISTENT RESERVE OUT, a deletion), and with `None` when changes may have been
/// missed (the watch broke): then every LU must reload.
pub fn follow(
    records: &ReservationRecords,
    shutdown: &CancellationToken,
    changed: impl Fn(Option<&str>),
) {
    while !shutdown.is_cancelled() {
        let watch = records
            .kv
            .list_with_revision(RESERVATIONS_PREFIX)
            .and_then(|(_, revision)| {
                records
                    .kv
                    .watch(RESERVATIONS_PREFIX, revision)
                    .map(|w| (w, revision))
            });
        let (watch, start) = match watch {
            Ok(watch) => watch,
            Err(error) => {
                tracing::warn!(%error, "cannot watch the reservation records; retrying");
                std::thread::sleep(FOLLOW_RETRY_INTERVAL);
                continue;
            }
        };
        // Whatever happened before the watch started is unknown here.
        changed(None);
        records.applied(start);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match watch.events.recv_timeout(FOLLOW_POLL_INTERVAL) {
                Ok(event) => {
                    let key = event.key();
                    changed(Some(key.strip_prefix(RESERVATIONS_PREFIX).unwrap_or(key)));
                    let (WatchEvent::Put { revision, .. } | WatchEvent::Delete { revision, .. }) =
                        &event;
                    records.applied(*revision);
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
                let record = decode(&v.value).map_err(StoreError::Corrupt)?;
                Ok((record, v.mod_revision))
            }
        }
    }

    fn store(
        &self,
        record: &ReservationRecord,
        expected: RecordVersion,
    ) -> Result<RecordVersion, StoreError> {
        let bytes = serde_json::to_vec(&StoredRecord::from(record))
            .map_err(|e| StoreError::Corrupt(e.to_string()))?;
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

fn decode(bytes: &[u8]) -> Result<ReservationRecord, String> {
    let stored: StoredRecord = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    if stored.format != RECORD_FORMAT {
        return Err(format!(
            "record format {}, this weft reads {RECORD_FORMAT}",
            stored.format
        ));
    }
    Ok(stored.into())
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
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(aptpl: bool) -> ReservationRecord {
        ReservationRecord {
            generation: 2,
            registrations: vec![RegistrationRecord {
                nexus: Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
                key: 0xabcd_0000_0000_0001,
                all_target_ports: true,
            }],
            reservation: Some(ReservationHolder {
                holder: Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
                type_code: 3,
            }),
            aptpl,
        }
    }

    #[test]
    fn records_round_trip_with_compare_and_swap() {
        let records = ReservationRecords::in_memory();
        let store = records.for_export("vol");
        assert_eq!(store.load(), Ok((ReservationRecord::default(), 0)));
        let v1 = store.store(&record(true), 0).expect("first store");
        assert_eq!(store.load(), Ok((record(true), v1)));
        assert_eq!(store.store(&record(false), 0), Err(StoreError::Conflict));
        let other = records.for_export("other");
        assert_eq!(other.load().expect("load").1, 0, "one record per export");
        records.remove("vol").expect("remove");
        assert_eq!(store.load(), Ok((ReservationRecord::default(), 0)));
    }

    #[test]
    fn power_on_keeps_aptpl_records_of_live_exports_only() {
        let records = ReservationRecords::in_memory();
        for (export, aptpl) in [("kept", true), ("cleared", false), ("deleted", true)] {
            records
                .for_export(export)
                .store(&record(aptpl), 0)
                .expect("store");
        }
        let live: BTreeSet<String> = ["kept", "cleared"].map(String::from).into();
        // A c.node taking over keeps them all but the deleted export's.
        assert_eq!(records.power_on(&live, true).expect("failover"), 1);
        assert!(records.for_export("cleared").load().expect("load").1 > 0);
        assert_eq!(records.power_on(&live, false).expect("power on"), 1);
        assert!(records.for_export("kept").load().expect("load").1 > 0);
        assert_eq!(records.for_export("cleared").load().expect("load").1, 0);
        assert_eq!(records.for_export("deleted").load().expect("load").1, 0);
    }

    #[test]
    fn a_record_of_another_format_is_corrupt() {
        let records = ReservationRecords::in_memory();
        records
            .kv
            .put(&key_of("vol"), br#"{"format":2}"#, None)
            .expect("put");
        assert!(matches!(
            records.for_export("vol").load(),
            Err(StoreError::Corrupt(_))
        ));
    }

    /// Two c.nodes on one etcd, each with its own connection and its own `LunState` of one
    /// LU: a reservation one takes is seen and enforced by the other once the watch tells it.
    #[test]
    fn two_cnodes_on_one_etcd_share_a_reservation_and_a_change_waits_for_the_other() {
        use weft_scsi::{build, opcode, LunState, MemLun, Status};

        let etcd = weft_meta::testing::EtcdServer::start().expect("starting etcd");
        // Each c.node knows the other serves the LU: a change waits until the other applied it.
        let connect = |me: &str, other: &'static str| -> ReservationRecords {
            ReservationRecords::new(Arc::new(etcd.connect().expect("connect"))).with_peers(Peers {
                me: me.to_string(),
                others: Arc::new(move || vec![other.to_string()]),
                wait: Duration::from_secs(3),
            })
        };
        let (one, two) = (connect("one", "two"), connect("two", "one"));
        let state_one = LunState::with_reservation_store(one.for_export("vol"));
        let state_two = Arc::new(LunState::with_reservation_store(two.for_export("vol")));
        let lu = MemLun::with_blocks(512, 64);
        let (a, b) = (
            Nexus::iscsi("iqn.2026-01.test:a", [0x80, 0, 0, 0, 0, 1], 1),
            Nexus::iscsi("iqn.2026-01.test:b", [0x80, 0, 0, 0, 0, 1], 257),
        );
        let write = |state: &LunState, nexus: &Nexus| {
            let cdb = build::rw10(opcode::WRITE_10, 0, 1, 1);
            weft_scsi::execute(state, &lu, nexus, &cdb, &[1; 512]).status
        };
        // b has written through c.node two: its cache is loaded and fresh.
        assert_eq!(write(&state_two, &b), Status::Good);
        let shutdown = CancellationToken::new();
        let follower = {
            let (two, state_two, shutdown) =
                (two.clone(), Arc::clone(&state_two), shutdown.clone());
            std::thread::spawn(move || {
                follow(&two, &shutdown, |export| {
                    if export.is_none_or(|e| e == "vol") {
                        state_two.invalidate_reservations();
                    }
                })
            })
        };
        let prout = |sa, kind, key, sark| {
            let cdb = build::persistent_reserve_out(sa, kind, 24);
            let list = build::prout_parameters(key, sark, 0x01);
            weft_scsi::execute(&state_one, &lu, &a, &cdb, &list).status
        };
        assert_eq!(prout(opcode::SA_REGISTER, 0, 0, 0xa), Status::Good);
        let started = std::time::Instant::now();
        assert_eq!(prout(opcode::SA_RESERVE, 0x3, 0xa, 0), Status::Good);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "c.node two applied it: no time-out"
        );
        assert_eq!(
            write(&state_two, &b),
            Status::ReservationConflict,
            "c.node two refuses b's very next write"
        );
        shutdown.cancel();
        follower.join().expect("follower");
        let (record, _) = two.for_export("vol").load().expect("load");
        assert!(record.aptpl && record.reservation.is_some());
    }
}
