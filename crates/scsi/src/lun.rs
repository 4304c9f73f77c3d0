//! The seam between SCSI and storage: the [`LogicalUnit`] trait a volume implements, the facts
//! about it the command set reports ([`Identity`]; [`Geometry`] and the errors it may return,
//! [`MediumError`], live in the leaf `medium` module and are re-exported here), and the SCSI
//! state of one logical unit shared by every session ([`LunState`]): mode values, the COMPARE AND WRITE lock, reservations and the unit
//! attentions they cause.
//!
//! Nothing here does I/O; the trait is implemented elsewhere (by the engine, and by
//! [`crate::MemLun`] for tests).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::alua::{AccessState, AluaProvider, PortGroups};
use crate::decoded::DecodedCdb;
pub use crate::medium::{Geometry, MediumError};
use crate::nexus::Nexus;
use crate::reservation_store::{MemReservationStore, RecordNews, ReservationStore, StoreError};
use crate::reservations::{Attention, Refusal, Reservations};
use crate::sense::{asc, key, Response, Sense};
use crate::unit_attention::{UnitAttentions, ATTENTION_NEXUSES_MAX};

/// Who the logical unit is, for INQUIRY, VPD pages 0x80 and 0x83 and REPORT TARGET PORT GROUPS.
/// Strings are reported as printable ASCII (other characters become spaces) and cut to their
/// field's width; the target name is reported as UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// T10 vendor identification, up to 8 characters ("WEFT").
    pub vendor: String,
    /// Product identification, up to 16 characters.
    pub product: String,
    /// Product revision level, up to 4 characters.
    pub revision: String,
    /// Unit serial number (VPD 0x80), up to 252 characters.
    pub serial: String,
    /// NAA 6 (IEEE registered extended) designator, built by the caller, unique per volume.
    pub naa_id: [u8; 16],
    /// The target port group this LU is reached through (ALUA).
    pub target_port_group: u16,
    /// The relative target port identifier of the port the session came in on.
    pub relative_target_port: u16,
    /// Every relative target port of the group (one per portal of the server), for REPORT
    /// TARGET PORT GROUPS; the session's own is among them.
    pub group_ports: Vec<u16>,
    /// The iSCSI target name (IQN), for the SCSI name string designator.
    pub target_name: String,
}

/// Storage under one LUN. Offsets and lengths are bytes, multiples of
/// `geometry().block_size_bytes`, and inside the logical unit: [`crate::execute`] checks every
/// range before it calls in. Implementations are shared by every session, hence `Send + Sync`.
pub trait LogicalUnit: Send + Sync {
    /// Current size and shape. Called once per command.
    fn geometry(&self) -> Geometry;
    /// Who this LU is.
    fn identity(&self) -> &Identity;
    /// Fill `buf` from `offset_bytes`. Deallocated blocks read as zeroes.
    fn read(&self, offset_bytes: u64, buf: &mut [u8]) -> Result<(), MediumError>;
    /// Store `data` at `offset_bytes`. Durable against a process crash on return; with `fua`
    /// durable against power loss.
    fn write(&self, offset_bytes: u64, data: &[u8], fua: bool) -> Result<(), MediumError>;
    /// Make every write acknowledged so far durable against power loss.
    fn flush(&self) -> Result<(), MediumError>;
    /// Deallocate a range. Afterwards it reads as zeroes: we report LBPRZ=1.
    fn unmap(&self, offset_bytes: u64, len_bytes: u64) -> Result<(), MediumError>;
    /// Make a range read as zeroes; with `unmap` it may also be deallocated.
    fn write_zeroes(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
        unmap: bool,
    ) -> Result<(), MediumError>;
    /// Allocation from `offset_bytes`: consecutive `(length_bytes, mapped)` extents starting at
    /// `offset_bytes`, covering at least the first block and at most `len_bytes`.
    fn allocation(
        &self,
        offset_bytes: u64,
        len_bytes: u64,
    ) -> Result<Vec<(u64, bool)>, MediumError>;
    /// COMPARE AND WRITE's medium part: if the range holds `compare`, store `new` there (same
    /// length) and return `None`; else store nothing and return the offset of the first
    /// differing byte. The caller holds the LU's exclusive I/O lock; an implementation whose
    /// storage other servers also write makes the pair atomic against them too. The default
    /// reads, compares and writes.
    fn compare_and_write(
        &self,
        offset_bytes: u64,
        compare: &[u8],
        new: &[u8],
        fua: bool,
    ) -> Result<Option<u64>, MediumError> {
        let mut medium = vec![0u8; compare.len()];
        self.read(offset_bytes, &mut medium)?;
        if let Some(at) = medium.iter().zip(compare).position(|(x, y)| x != y) {
            return Ok(Some(at as u64));
        }
        self.write(offset_bytes, new, fua)?;
        Ok(None)
    }
}

/// Times a PERSISTENT RESERVE OUT loads, applies and tries to store the reservation record
/// before it gives up: each failed try means another process changed the record meanwhile,
/// so this many in a row means the LU's reservations are being fought over.
const RESERVATION_STORE_ATTEMPTS_MAX: usize = 16;

/// Mutable SCSI state of one logical unit, shared by every session (I_T nexus) that reaches
/// it: the mode page values MODE SELECT may change, the lock that makes COMPARE AND WRITE
/// atomic, the persistent and RESERVE(6) reservations, and the unit attentions pending per
/// nexus.
///
/// Every command that reads or writes blocks through [`crate::execute`] holds `io_lock` shared;
/// COMPARE AND WRITE holds it exclusive between its read and its write, so no read or write
/// issued through this crate on the same `LunState` sees or splits it. Writes that bypass this
/// crate (another front end on the same volume) are not covered.
///
/// Every command but PERSISTENT RESERVE OUT, RESERVE(6) and RELEASE(6) holds `reservations`
/// shared from its conflict check to its end; those three hold it exclusive. So when a
/// PREEMPT returns, no command of the preempted nexus that passed the check before it is still
/// running, and every later one meets the new reservation.
///
/// The persistent part of the reservations lives in a [`ReservationStore`] (in memory unless
/// [`LunState::with_reservation_store`] says otherwise) that other processes serving the LU
/// may share. `reservations` caches it: PERSISTENT RESERVE OUT reloads it, applies its
/// service action and stores the result if nobody else stored since (else it retries);
/// PERSISTENT RESERVE IN reloads it; other commands reload it only after
/// [`LunState::invalidate_reservations`] (the server calls that when the store tells it of a
/// change) and check against the cache otherwise. RESERVE(6), RELEASE(6), a LU reset and the
/// loss of a RESERVE(6) holder's nexus change the record the same way. Unit attentions a
/// change causes are queued here for this process's nexuses and stored with the record as
/// its [`RecordNews`]; the other processes serving the LU queue them for theirs when they
/// hear of the change ([`LunState::heard`]).
///
/// What the transport calls besides [`crate::execute`]: [`LunState::unit_attention`] before
/// each command, [`LunState::logical_unit_reset`] on LUN RESET and target resets,
/// [`LunState::nexus_lost`] when a session ends, and [`LunState::heard`] with the news of a
/// change another process stored.
#[derive(Debug)]
pub struct LunState {
    /// Caching mode page WCE bit. When cleared, every write is issued with `fua`.
    write_cache_enabled: AtomicBool,
    io_lock: RwLock<()>,
    reservations: RwLock<Reservations>,
    /// Where the persistent part of `reservations` is kept.
    store: Arc<dyn ReservationStore>,
    /// `reservations` may be older than `store`: reload it before the next conflict check.
    reservations_stale: AtomicBool,
    /// Locked after `reservations` when both are.
    attentions: Mutex<UnitAttentions>,
    /// Whether `attentions` may hold anything: spares every command the mutex when not.
    attentions_pending: AtomicBool,
    /// Where the target port groups and their states come from; `None`: one group, the
    /// identity's, active/optimized.
    alua: Option<Arc<dyn AluaProvider>>,
    /// The provider's generation the nexuses were last told of.
    alua_generation: AtomicU64,
    /// The I_T nexuses that reach the LU now ([`LunState::nexus_joined`]), which a change of
    /// access states is announced to. At most `ATTENTION_NEXUSES_MAX`; locked after
    /// `attentions` when both are.
    nexuses: Mutex<HashSet<Nexus>>,
    /// The relative target ports of this process's portals, when other processes serve the
    /// LU through ports of their own: unit attentions for nexuses through other ports are
    /// theirs to queue, not ours. `None`: every nexus is this process's.
    local_ports: Option<Vec<u16>>,
}

impl Default for LunState {
    fn default() -> Self {
        Self::new()
    }
}

impl LunState {
    /// Power-on state: write cache enabled, reservations kept in this process's memory.
    pub fn new() -> Self {
        Self::with_reservation_store(Arc::new(MemReservationStore::default()))
    }

    /// Power-on state with the persistent reservations kept in `store`, loaded from it on the
    /// first command that needs them.
    pub fn with_reservation_store(store: Arc<dyn ReservationStore>) -> Self {
        LunState {
            write_cache_enabled: AtomicBool::new(true),
            io_lock: RwLock::new(()),
            reservations: RwLock::new(Reservations::default()),
            store,
            reservations_stale: AtomicBool::new(true),
            attentions: Mutex::new(UnitAttentions::default()),
            attentions_pending: AtomicBool::new(false),
            alua: None,
            alua_generation: AtomicU64::new(0),
            nexuses: Mutex::new(HashSet::new()),
            local_ports: None,
        }
    }

    /// The same, serving the LU through the relative target ports `ports` only (other
    /// processes serve it through theirs): unit attentions are queued for nexuses through
    /// these ports only.
    pub fn with_local_ports(mut self, ports: Vec<u16>) -> Self {
        self.local_ports = Some(ports);
        self
    }

    /// The same, with the target port groups and their access states from `provider`.
    pub fn with_alua(mut self, provider: Arc<dyn AluaProvider>) -> Self {
        self.alua_generation = AtomicU64::new(provider.generation());
        self.alua = Some(provider);
        self
    }

    /// `nexus` reaches the LU (a session logged in with it among its LUNs): it is told of
    /// later changes of the access states.
    pub fn nexus_joined(&self, nexus: &Nexus) {
        // Changes before it joined are the other nexuses' news, not its own.
        self.announce_access_states();
        let mut nexuses = self.nexuses.lock();
        if nexuses.len() < ATTENTION_NEXUSES_MAX {
            nexuses.insert(nexus.clone());
        }
    }

    /// The next unit attention pending for `nexus` (one a persistent reservation change on
    /// another nexus established), as the CHECK CONDITION to answer `command` with, and
    /// removed from the queue. `None` when nothing is pending, and for INQUIRY, REPORT LUNS
    /// and REQUEST SENSE, which SPC-4 answers without it (REQUEST SENSE returns it as its
    /// parameter data instead, through [`crate::execute`]). The transport calls this before
    /// each command, after its own reset unit attention, which has the higher priority.
    pub fn unit_attention_decoded(&self, nexus: &Nexus, command: &DecodedCdb) -> Option<Response> {
        if command.answered_without_unit_attention() {
            return None;
        }
        let code = self.take_attention(nexus)?;
        Some(Response::check(Sense::new(key::UNIT_ATTENTION, code)))
    }

    /// [`LunState::unit_attention_decoded`] before the CDB `cdb`.
    pub fn unit_attention(&self, nexus: &Nexus, cdb: &[u8]) -> Option<Response> {
        self.unit_attention_decoded(nexus, &DecodedCdb::decode(cdb))
    }

    /// A LUN reset, target warm reset or target cold reset happened: the RESERVE(6)
    /// reservation is released, and the record is stored with news of the reset
    /// ([`RecordNews::reset`]) even when nothing else changed, so that every process serving
    /// the LU tells its nexuses. Persistent reservations and registrations survive resets
    /// (SPC-4 5.13.1); the transport reports the reset's own unit attention. `Err`: the store
    /// could not be used; nothing was released or announced.
    pub fn logical_unit_reset(&self) -> Result<(), Sense> {
        self.change_reservations(true, |reservations, _| {
            reservations.reset();
            Ok(())
        })
        .map_err(refusal_sense)
    }

    /// Another process serving the LU stored a change with `news`: queue its unit attentions
    /// for this process's nexuses (the reset one is the transport's to report).
    pub fn heard(&self, news: &RecordNews) {
        let attentions = news
            .attentions
            .iter()
            .map(|(nexus, code)| Attention {
                nexus: nexus.clone(),
                code: *code,
            })
            .collect();
        self.queue_attentions(attentions);
    }

    /// The reservation store may hold a newer record than this LU last saw (another process
    /// changed it): reload it before the next command's conflict check.
    pub fn invalidate_reservations(&self) {
        self.reservations_stale.store(true, Ordering::Release);
    }

    /// `nexus` is gone (logout, connection lost, session reinstated): its RESERVE(6)
    /// reservation is released (in the store). Its registrations and pending unit attentions
    /// stay, for when it logs in again. `Err`: the store could not be used, and the nexus may
    /// still hold it.
    pub fn nexus_lost(&self, nexus: &Nexus) -> Result<(), Sense> {
        self.nexuses.lock().remove(nexus);
        // Only this process's sessions reserve through its nexuses, so a fresh cache that
        // does not name it is the store's truth too: no store round trip per logout.
        if !self.reservations_stale.load(Ordering::Acquire)
            && !self.reservations.read().holds_reserve6(nexus)
        {
            return Ok(());
        }
        self.update_reservations(|reservations, _| {
            reservations.nexus_lost(nexus);
            Ok(())
        })
        .map_err(refusal_sense)
    }

    /// The target port groups and their states now.
    pub(crate) fn port_groups(&self, identity: &Identity) -> PortGroups {
        match &self.alua {
            Some(provider) => provider.port_groups(),
            None => {
                let mut ports = identity.group_ports.clone();
                if !ports.contains(&identity.relative_target_port) {
                    ports.push(identity.relative_target_port);
                }
                PortGroups::single(identity.target_port_group, ports)
            }
        }
    }

    /// The access state of the target port `relative_target_port` (a nexus's): its group's;
    /// active/optimized without a provider, and for a port the provider puts in no group.
    pub(crate) fn access_state(&self, relative_target_port: u16) -> AccessState {
        match &self.alua {
            Some(provider) => provider.access_state(relative_target_port),
            None => AccessState::ActiveOptimized,
        }
    }

    /// Held from a command's conflict check to its end; reloaded from the store first when
    /// stale. `Err` is the sense of a store that cannot be read.
    pub(crate) fn reservations(&self) -> Result<RwLockReadGuard<'_, Reservations>, Sense> {
        if !self.reservations_stale.load(Ordering::Acquire) {
            return Ok(self.reservations.read());
        }
        let mut guard = self.reservations.write();
        self.reload_reservations(&mut guard)?;
        Ok(RwLockWriteGuard::downgrade(guard))
    }

    /// As [`LunState::reservations`], reloaded whatever the cache says: PERSISTENT RESERVE IN
    /// reports what the store holds now.
    pub(crate) fn fresh_reservations(&self) -> Result<RwLockReadGuard<'_, Reservations>, Sense> {
        self.invalidate_reservations();
        self.reservations()
    }

    /// As cached, never reloaded: for the commands no reservation refuses (INQUIRY, REPORT
    /// TARGET PORT GROUPS...), which must keep answering while the store is unreachable.
    pub(crate) fn cached_reservations(&self) -> RwLockReadGuard<'_, Reservations> {
        self.reservations.read()
    }

    /// A PERSISTENT RESERVE OUT: under the exclusive lock, load the record, run `apply` on a
    /// copy, and store the copy if the record is still the one loaded; on a conflict start
    /// again from a fresh load, at most [`RESERVATION_STORE_ATTEMPTS_MAX`] times. The unit
    /// attentions of the try that counted are stored with the record as its news and queued
    /// here before the lock is released; a refusal changes nothing and stores nothing.
    /// RESERVE(6) and RELEASE(6) run through here too.
    pub(crate) fn update_reservations(
        &self,
        apply: impl FnMut(&mut Reservations, &mut Vec<Attention>) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        self.change_reservations(false, apply)
    }

    /// [`LunState::update_reservations`]; with `reset` the record is stored (with news of
    /// the reset) even when `apply` changed nothing in it.
    fn change_reservations(
        &self,
        reset: bool,
        mut apply: impl FnMut(&mut Reservations, &mut Vec<Attention>) -> Result<(), Refusal>,
    ) -> Result<(), Refusal> {
        let mut guard = self.reservations.write();
        for _ in 0..RESERVATION_STORE_ATTEMPTS_MAX {
            self.reload_reservations(&mut guard)?;
            let mut next = guard.clone();
            let mut attentions = Vec::new();
            apply(&mut next, &mut attentions)?;
            let mut record = next.record();
            if reset || record != guard.record() {
                record.news = RecordNews {
                    reset,
                    attentions: attentions
                        .iter()
                        .map(|a| (a.nexus.clone(), a.code))
                        .collect(),
                };
                match self.store.store(&record, guard.version()) {
                    Ok(version) => next.set_version(version),
                    Err(StoreError::Conflict) => continue,
                    Err(_) => return Err(store_failure().into()),
                }
            }
            *guard = next;
            self.queue_attentions(attentions);
            return Ok(());
        }
        Err(store_failure().into())
    }

    /// Replace the cached persistent state with the store's. On failure the cache stays as
    /// it was, still stale.
    fn reload_reservations(&self, reservations: &mut Reservations) -> Result<(), Sense> {
        let (record, version) = self.store.load().map_err(|_| store_failure())?;
        reservations
            .load(record, version)
            .map_err(|_| store_failure())?;
        self.reservations_stale.store(false, Ordering::Release);
        Ok(())
    }

    /// Queue unit attentions a change established, for this process's nexuses.
    pub(crate) fn queue_attentions(&self, attentions: Vec<Attention>) {
        let local = |a: &Attention| {
            self.local_ports
                .as_ref()
                .is_none_or(|ports| ports.contains(&a.nexus.relative_target_port))
        };
        if !attentions.iter().any(local) {
            return;
        }
        let mut queue = self.attentions.lock();
        for a in attentions.iter().filter(|a| local(a)) {
            queue.push(&a.nexus, a.code);
        }
        self.attentions_pending
            .store(!queue.is_empty(), Ordering::Release);
    }

    /// The oldest unit attention pending for `nexus`, removed.
    pub(crate) fn take_attention(&self, nexus: &Nexus) -> Option<(u8, u8)> {
        self.announce_access_states();
        if !self.attentions_pending.load(Ordering::Acquire) {
            return None;
        }
        let mut queue = self.attentions.lock();
        let code = queue.take(nexus);
        self.attentions_pending
            .store(!queue.is_empty(), Ordering::Release);
        code
    }

    /// If the provider's states changed since the nexuses were last told, queue ASYMMETRIC
    /// ACCESS STATE CHANGED for every nexus that reaches the LU (SPC-4 5.15.2.5: an implicit
    /// transition establishes it on every I_T nexus). One atomic load when nothing changed.
    fn announce_access_states(&self) {
        let Some(provider) = &self.alua else {
            return;
        };
        let generation = provider.generation();
        if generation == self.alua_generation.load(Ordering::Acquire) {
            return;
        }
        let mut queue = self.attentions.lock();
        if self.alua_generation.swap(generation, Ordering::AcqRel) == generation {
            return;
        }
        for nexus in self.nexuses.lock().iter() {
            queue.push(nexus, asc::ASYMMETRIC_ACCESS_STATE_CHANGED);
        }
        self.attentions_pending
            .store(!queue.is_empty(), Ordering::Release);
    }

    /// Caching mode page WCE bit as MODE SELECT last left it.
    pub fn write_cache_enabled(&self) -> bool {
        self.write_cache_enabled.load(Ordering::Acquire)
    }

    pub(crate) fn set_write_cache_enabled(&self, enabled: bool) {
        self.write_cache_enabled.store(enabled, Ordering::Release);
    }

    /// Held by every block read and write.
    pub(crate) fn shared_io(&self) -> RwLockReadGuard<'_, ()> {
        self.io_lock.read()
    }

    /// Held by COMPARE AND WRITE from its read to its write.
    pub(crate) fn exclusive_io(&self) -> RwLockWriteGuard<'_, ()> {
        self.io_lock.write()
    }
}

/// The sense of a reservation change that cannot conflict (a reset, a nexus loss) and failed.
fn refusal_sense(refusal: Refusal) -> Sense {
    match refusal {
        Refusal::Check(sense) => sense,
        Refusal::Conflict => store_failure(),
    }
}

/// The sense of a command that needed the reservation store and could not use it
/// (unreachable, corrupt, or fought over): HARDWARE ERROR, INTERNAL TARGET FAILURE.
fn store_failure() -> Sense {
    Sense::new(key::HARDWARE_ERROR, asc::INTERNAL_TARGET_FAILURE)
}
