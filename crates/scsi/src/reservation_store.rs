//! Where a logical unit's persistent reservation state lives: the [`ReservationStore`] seam,
//! the [`ReservationRecord`] that crosses it, and [`MemReservationStore`], the in-memory
//! store every [`crate::LunState`] uses unless the server gives it another.
//!
//! The record is what SPC-4 calls the persistent reservation state of the logical unit:
//! registrations (reservation key and I_T nexus), the reservation (holder and type),
//! PRgeneration and the last APTPL value; beside it the holder of the SPC-2 RESERVE(6)
//! reservation, so that every process serving the LU enforces that one too (it does not
//! survive a power loss, APTPL or not), and the [`RecordNews`] of the change that stored it:
//! the unit attentions that change established, which the other processes serving the LU
//! queue for their own I_T nexuses (pending unit attentions themselves stay in the process
//! that serves the nexus).
//!
//! A PERSISTENT RESERVE OUT is a read-modify-write of the record: load it with its version,
//! apply the service action, store it if the version is still the one loaded, and start over
//! from a fresh load when it is not ([`StoreError::Conflict`]). So several processes (c.nodes)
//! serving one LU through one shared store never lose each other's changes. Nothing here does
//! I/O; implementations that do (etcd, a file) live in the server, and are called from the
//! threads that run SCSI commands, never from an async runtime.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::nexus::Nexus;

/// A record's version in its store: it changes on every successful
/// [`ReservationStore::store`]. 0 is the version of a record that was never stored.
pub type RecordVersion = u64;

/// The persistent reservation state of one logical unit, as a plain value. A record with no
/// registration, no reservation, generation 0 and APTPL clear is the state of a LU nobody
/// has touched, and what [`ReservationStore::load`] answers for a LU without a record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReservationRecord {
    /// PRgeneration.
    pub generation: u32,
    /// In registration order (READ KEYS lists them so).
    pub registrations: Vec<RegistrationRecord>,
    /// The persistent reservation, if any.
    pub reservation: Option<ReservationHolder>,
    /// The last valid APTPL bit received: the state survives a power loss (a restart of
    /// every process serving the LU) only when it is set.
    pub aptpl: bool,
    /// The holder of the SPC-2 RESERVE(6) reservation. Never set while any I_T nexus is
    /// registered (SPC-2 5.5.1: each refuses the other).
    pub reserved_by: Option<Nexus>,
    /// What the change that stored this record told I_T nexuses. Only carried by a store
    /// (for the other processes serving the LU, see [`RecordNews`]); a loaded record's news
    /// mean nothing and are ignored.
    pub news: RecordNews,
}

/// The unit attentions a change of the record established (SAM-5 5.14), carried with the
/// record that change stored: every other process serving the LU learns of the change when
/// its copy of the store tells it the record changed, and queues these for the I_T nexuses
/// it serves ([`crate::LunState::heard`]); the process that made the change queued them
/// itself. Bounded: one attention per registration at most, and the reset flag.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecordNews {
    /// The logical unit was reset (LUN RESET, a target reset): every I_T nexus of the LU
    /// gets the reset's unit attention, which the transport keeps.
    pub reset: bool,
    /// Unit attentions for named nexuses, as (nexus, (ASC, ASCQ)), in the order they were
    /// established: RESERVATIONS PREEMPTED or RELEASED, REGISTRATIONS PREEMPTED.
    pub attentions: Vec<(Nexus, (u8, u8))>,
}

impl RecordNews {
    /// Nothing to tell anyone.
    pub fn is_empty(&self) -> bool {
        !self.reset && self.attentions.is_empty()
    }
}

/// One registered I_T nexus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationRecord {
    pub nexus: Nexus,
    pub key: u64,
    /// Registered with ALL_TG_PT=1.
    pub all_target_ports: bool,
}

/// The persistent reservation: who made it and its TYPE code (SPC-4 table 225).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservationHolder {
    pub holder: Nexus,
    pub type_code: u8,
}

impl ReservationRecord {
    /// What is left of the record after the LU loses power (every process serving it
    /// stopped): the persistent state with APTPL set, nothing without (SPC-4 5.13.5); never
    /// a RESERVE(6) reservation (SPC-2: a power on releases it) or news.
    pub fn after_power_loss(self) -> Option<ReservationRecord> {
        self.aptpl.then_some(ReservationRecord {
            reserved_by: None,
            news: RecordNews::default(),
            ..self
        })
    }
}

/// Why a load or a store failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The record changed since it was loaded: load again and retry.
    #[error("the reservation record changed since it was loaded")]
    Conflict,
    /// The store could not be reached or failed; the command that needed it fails.
    #[error("reservation store unavailable: {0}")]
    Unavailable(String),
    /// The stored record cannot be read back (not ours, or damaged).
    #[error("reservation record is corrupt: {0}")]
    Corrupt(String),
}

/// The persistent reservation state of one logical unit, kept somewhere several processes
/// may share. Both calls block; they run on the threads that execute SCSI commands.
pub trait ReservationStore: Send + Sync + std::fmt::Debug {
    /// The current record and its version; the empty record and version 0 when there is
    /// none.
    fn load(&self) -> Result<(ReservationRecord, RecordVersion), StoreError>;

    /// Replace the record if its version is still `expected`; the new version.
    /// [`StoreError::Conflict`] when another writer got there first.
    fn store(
        &self,
        record: &ReservationRecord,
        expected: RecordVersion,
    ) -> Result<RecordVersion, StoreError>;
}

/// A store in this process's memory: the default, and what tests share between two
/// [`crate::LunState`]s to stand for two processes.
#[derive(Debug, Default)]
pub struct MemReservationStore {
    slot: Mutex<(ReservationRecord, RecordVersion)>,
}

impl MemReservationStore {
    /// An empty store, shareable.
    pub fn shared() -> Arc<MemReservationStore> {
        Arc::new(MemReservationStore::default())
    }
}

impl ReservationStore for MemReservationStore {
    fn load(&self) -> Result<(ReservationRecord, RecordVersion), StoreError> {
        Ok(self.slot.lock().clone())
    }

    fn store(
        &self,
        record: &ReservationRecord,
        expected: RecordVersion,
    ) -> Result<RecordVersion, StoreError> {
        let mut slot = self.slot.lock();
        if slot.1 != expected {
            return Err(StoreError::Conflict);
        }
        let version = slot.1 + 1;
        *slot = (record.clone(), version);
        Ok(version)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_store_compares_versions() {
        let store = MemReservationStore::default();
        let (empty, v0) = store.load().expect("load");
        assert_eq!((empty.clone(), v0), (ReservationRecord::default(), 0));
        let mut record = empty;
        record.generation = 1;
        let v1 = store.store(&record, v0).expect("first store");
        assert_eq!(store.store(&record, v0), Err(StoreError::Conflict));
        assert_eq!(store.load(), Ok((record, v1)));
    }

    #[test]
    fn only_aptpl_state_survives_power_loss() {
        let mut record = ReservationRecord {
            generation: 3,
            registrations: vec![RegistrationRecord {
                nexus: Nexus::new("a", 1),
                key: 7,
                all_target_ports: false,
            }],
            reservation: None,
            aptpl: false,
            reserved_by: None,
            news: RecordNews::default(),
        };
        assert_eq!(record.clone().after_power_loss(), None);
        record.aptpl = true;
        assert_eq!(record.clone().after_power_loss(), Some(record.clone()));
        // A RESERVE(6) reservation and the last change's news never survive one.
        let mut with_reserve6 = record.clone();
        with_reserve6.registrations.clear();
        with_reserve6.reserved_by = Some(Nexus::new("b", 1));
        with_reserve6.news.reset = true;
        let after = with_reserve6.clone().after_power_loss().expect("APTPL");
        assert_eq!(
            (after.reserved_by, after.news),
            (None, RecordNews::default())
        );
    }
}
