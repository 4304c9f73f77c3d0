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

/// The reservation records of every export, in one metadata store.
#[derive(Debug, Clone)]
pub struct ReservationRecords {
    kv: Arc<dyn MetaStore>,
}

impl ReservationRecords {
    /// Records in `kv` (the cluster's etcd in cluster mode).
    pub fn new(kv: Arc<dyn MetaStore>) -> ReservationRecords {
        ReservationRecords { kv }
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
            .and_then(|(_, revision)| records.kv.watch(RESERVATIONS_PREFIX, revision));
        let watch = match watch {
            Ok(watch) => watch,
            Err(error) => {
                tracing::warn!(%error, "cannot watch the reservation records; retrying");
                std::thread::sleep(FOLLOW_RETRY_INTERVAL);
                continue;
            }
        };
        // Whatever happened before the watch started is unknown here.
        changed(None);
        loop {
            if shutdown.is_cancelled() {
                return;
            }
            match watch.events.recv_timeout(FOLLOW_POLL_INTERVAL) {
                Ok(event) => {
                    let key = event.key();
                    changed(Some(key.strip_prefix(RESERVATIONS_PREFIX).unwrap_or(key)));
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
            Ok(revision) => Ok(revision),
            Err(MetaError::Conflict { .. }) => Err(StoreError::Conflict),
            Err(e) => Err(unavailable(e)),
        }
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
    fn two_cnodes_on_one_etcd_share_a_reservation() {
        use weft_scsi::{build, opcode, LunState, MemLun, Status};

        let etcd = weft_meta::testing::EtcdServer::start().expect("starting etcd");
        let connect = || -> ReservationRecords {
            ReservationRecords::new(Arc::new(etcd.connect().expect("connect")))
        };
        let (one, two) = (connect(), connect());
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
        assert_eq!(prout(opcode::SA_RESERVE, 0x3, 0xa, 0), Status::Good);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while write(&state_two, &b) != Status::ReservationConflict {
            assert!(
                std::time::Instant::now() < deadline,
                "c.node two never saw the reservation"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        shutdown.cancel();
        follower.join().expect("follower");
        let (record, _) = two.for_export("vol").load().expect("load");
        assert!(record.aptpl && record.reservation.is_some());
    }
}
