//! The reservation state of one logical unit, shared by every I_T nexus that reaches it:
//! SPC-4 persistent reservations (registrations, the reservation and its holder,
//! PRgeneration) and the SPC-2 RESERVE(6) reservation; the service actions that change that
//! state; and the rule that decides which commands conflict with it ([`Reservations::conflicts`]
//! over the [`Access`] class of each command, from SPC-4's and SBC-3's tables of commands
//! allowed in the presence of each reservation type; `Command::access` in `cdb` gives each
//! decoded command its class).
//!
//! Not here: decoding PERSISTENT RESERVE IN/OUT CDBs and parameter lists (`persistent_reserve_in`,
//! `persistent_reserve_out`) and the unit attention queue (`unit_attention`). Service actions
//! report the unit attentions they cause as [`Attention`]s for the caller to queue.
//!
//! Invariants: at most one registration per I_T nexus and at most [`REGISTRATIONS_MAX`] of
//! them; a reservation that is not of an all-registrants type has a registered holder; an
//! all-registrants reservation exists only while some I_T nexus is registered; a RESERVE(6)
//! reservation and registrations never exist together (SPC-2 5.5.1: each refuses the other).
//! Persistent reservations survive LUN resets and I_T nexus loss (SPC-4 5.13.1); a RESERVE(6)
//! reservation does not. All of it (the RESERVE(6) holder too, so that every process serving
//! the LU enforces it) travels to and from the LU's `reservation_store` as a record (see
//! [`Reservations::record`], [`Reservations::load`]); whether it survives a power loss is the
//! store's business, by the APTPL flag it carries (a RESERVE(6) reservation never does).

use crate::nexus::Nexus;
use crate::reservation_store::{
    RecordNews, RecordVersion, RegistrationRecord, ReservationHolder, ReservationRecord,
};
use crate::sense::{asc, Sense};

/// I_T nexuses registered at once. A cluster registers each host through each path: a few
/// dozen at most; the bound keeps a misbehaving initiator from growing the state.
pub(crate) const REGISTRATIONS_MAX: usize = 256;

/// Persistent reservation types (SPC-4 table 225). Scope is always the logical unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReservationType {
    WriteExclusive,
    ExclusiveAccess,
    WriteExclusiveRegistrantsOnly,
    ExclusiveAccessRegistrantsOnly,
    WriteExclusiveAllRegistrants,
    ExclusiveAccessAllRegistrants,
}

impl ReservationType {
    /// Every type, in the order of their codes.
    pub(crate) const ALL: [ReservationType; 6] = [
        ReservationType::WriteExclusive,
        ReservationType::ExclusiveAccess,
        ReservationType::WriteExclusiveRegistrantsOnly,
        ReservationType::ExclusiveAccessRegistrantsOnly,
        ReservationType::WriteExclusiveAllRegistrants,
        ReservationType::ExclusiveAccessAllRegistrants,
    ];

    /// The TYPE code of a PERSISTENT RESERVE OUT CDB, or `None` for a reserved code.
    pub(crate) fn from_code(code: u8) -> Option<Self> {
        ReservationType::ALL.into_iter().find(|t| t.code() == code)
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            ReservationType::WriteExclusive => 0x1,
            ReservationType::ExclusiveAccess => 0x3,
            ReservationType::WriteExclusiveRegistrantsOnly => 0x5,
            ReservationType::ExclusiveAccessRegistrantsOnly => 0x6,
            ReservationType::WriteExclusiveAllRegistrants => 0x7,
            ReservationType::ExclusiveAccessAllRegistrants => 0x8,
        }
    }

    /// Every registered I_T nexus holds the reservation.
    pub(crate) fn all_registrants(self) -> bool {
        matches!(
            self,
            ReservationType::WriteExclusiveAllRegistrants
                | ReservationType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registered I_T nexuses that do not hold it may still read and write.
    fn registrants_allowed(self) -> bool {
        !matches!(
            self,
            ReservationType::WriteExclusive | ReservationType::ExclusiveAccess
        )
    }

    /// Reads from I_T nexuses that may not write are still allowed (the Write Exclusive
    /// family); the Exclusive Access family refuses them too.
    fn reads_shared(self) -> bool {
        matches!(
            self,
            ReservationType::WriteExclusive
                | ReservationType::WriteExclusiveRegistrantsOnly
                | ReservationType::WriteExclusiveAllRegistrants
        )
    }

    /// Releasing it tells the other registrants (RESERVATIONS RELEASED): registrants-only and
    /// all-registrants types (SPC-4 5.13.11.2.2).
    fn release_is_announced(self) -> bool {
        self.registrants_allowed()
    }
}

/// How a command may pass a reservation held by another I_T nexus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// Allowed under every reservation, RESERVE(6) included: INQUIRY, REQUEST SENSE, REPORT
    /// LUNS, REPORT TARGET PORT GROUPS (path checkers must keep working).
    Always,
    /// Allowed under every persistent reservation, not under another nexus's RESERVE(6):
    /// TEST UNIT READY, READ CAPACITY, START STOP UNIT starting the unit, PREVENT ALLOW
    /// MEDIUM REMOVAL allowing removal.
    Status,
    /// Reads data or state (READ, VERIFY, GET LBA STATUS, MODE SENSE, REPORT SUPPORTED
    /// OPERATION CODES): allowed through the Write Exclusive types.
    Read,
    /// Changes data or state (every write, UNMAP, SYNCHRONIZE CACHE, MODE SELECT, stopping
    /// the unit): only the holder, and registrants under registrants-only and all-registrants
    /// types.
    Write,
    /// PERSISTENT RESERVE IN and OUT: allowed under every persistent reservation (their
    /// service actions have their own rules), refused under any RESERVE(6) reservation.
    PersistentReserve,
    /// RESERVE(6) and RELEASE(6): their own rules.
    Reserve6,
}

/// Why a service action was refused: RESERVATION CONFLICT status, or CHECK CONDITION.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Refusal {
    Conflict,
    Check(Sense),
}

impl From<Sense> for Refusal {
    fn from(sense: Sense) -> Self {
        Refusal::Check(sense)
    }
}

/// A unit attention a service action establishes for another I_T nexus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Attention {
    pub nexus: Nexus,
    pub code: (u8, u8),
}

/// One registered I_T nexus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Registration {
    pub nexus: Nexus,
    pub key: u64,
    /// Registered with ALL_TG_PT=1 (through every target port at once).
    pub all_target_ports: bool,
}

/// The persistent reservation. For the all-registrants types `holder` is the nexus that
/// reserved, kept for nothing: every registrant holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reservation {
    holder: Nexus,
    kind: ReservationType,
}

/// Reservation state of one logical unit. See the module documentation for its invariants.
/// Everything but `version` is the state a [`ReservationRecord`] carries to and from the LU's
/// store; `version` says which stored record it is.
#[derive(Debug, Default, Clone)]
pub(crate) struct Reservations {
    /// PRgeneration: counts the PERSISTENT RESERVE OUT commands that changed registrations.
    generation: u32,
    /// In the order the I_T nexuses registered (READ KEYS lists them so).
    registrations: Vec<Registration>,
    reservation: Option<Reservation>,
    /// The last valid APTPL bit received (REGISTER, REGISTER AND IGNORE EXISTING KEY,
    /// REGISTER AND MOVE): the persistent state survives a power loss when set.
    aptpl: bool,
    /// The version of the stored record the persistent state was loaded from or stored as.
    version: RecordVersion,
    /// The holder of the SPC-2 RESERVE(6) reservation: shared through the store like the
    /// rest, released by the holder's RELEASE(6), its nexus loss and LU resets.
    reserved_by: Option<Nexus>,
}

impl Reservations {
    /// The persistent state as a record for the store.
    pub(crate) fn record(&self) -> ReservationRecord {
        ReservationRecord {
            generation: self.generation,
            registrations: self
                .registrations
                .iter()
                .map(|r| RegistrationRecord {
                    nexus: r.nexus.clone(),
                    key: r.key,
                    all_target_ports: r.all_target_ports,
                })
                .collect(),
            reservation: self.reservation.as_ref().map(|r| ReservationHolder {
                holder: r.holder.clone(),
                type_code: r.kind.code(),
            }),
            aptpl: self.aptpl,
            reserved_by: self.reserved_by.clone(),
            news: RecordNews::default(),
        }
    }

    /// Replace the state with a stored `record` of `version` (its news ignored), after
    /// checking it keeps this module's invariants. `Err` says what is wrong with the record,
    /// and leaves `self` as it was.
    pub(crate) fn load(
        &mut self,
        record: ReservationRecord,
        version: RecordVersion,
    ) -> Result<(), String> {
        if record.registrations.len() > REGISTRATIONS_MAX {
            return Err(format!(
                "{} registrations, at most {REGISTRATIONS_MAX}",
                record.registrations.len()
            ));
        }
        let mut registrations: Vec<Registration> = Vec::with_capacity(record.registrations.len());
        for r in record.registrations {
            if r.key == 0 {
                return Err("a registration with key 0".into());
            }
            if registrations.iter().any(|seen| seen.nexus == r.nexus) {
                return Err(format!("{} registered twice", r.nexus.initiator_port));
            }
            registrations.push(Registration {
                nexus: r.nexus,
                key: r.key,
                all_target_ports: r.all_target_ports,
            });
        }
        let reservation = match record.reservation {
            None => None,
            Some(r) => {
                let kind = ReservationType::from_code(r.type_code)
                    .ok_or_else(|| format!("reservation type {:#x}", r.type_code))?;
                let holder_registered = registrations.iter().any(|reg| reg.nexus == r.holder);
                let held = if kind.all_registrants() {
                    !registrations.is_empty()
                } else {
                    holder_registered
                };
                if !held {
                    return Err("a reservation without a registered holder".into());
                }
                Some(Reservation {
                    holder: r.holder,
                    kind,
                })
            }
        };
        if record.reserved_by.is_some() && !registrations.is_empty() {
            return Err("a RESERVE(6) reservation beside registrations".into());
        }
        self.generation = record.generation;
        self.registrations = registrations;
        self.reservation = reservation;
        self.aptpl = record.aptpl;
        self.reserved_by = record.reserved_by;
        self.version = version;
        Ok(())
    }

    /// The store version of the persistent state.
    pub(crate) fn version(&self) -> RecordVersion {
        self.version
    }

    /// The persistent state is now stored as `version`.
    pub(crate) fn set_version(&mut self, version: RecordVersion) {
        self.version = version;
    }

    /// The last valid APTPL bit received.
    pub(crate) fn aptpl(&self) -> bool {
        self.aptpl
    }

    /// A REGISTER-family service action carried APTPL.
    pub(crate) fn set_aptpl(&mut self, aptpl: bool) {
        self.aptpl = aptpl;
    }

    /// Whether a command of class `access` from `nexus` meets RESERVATION CONFLICT.
    pub(crate) fn conflicts(&self, nexus: &Nexus, access: Access) -> bool {
        if let Some(holder) = &self.reserved_by {
            return match access {
                Access::Always | Access::Reserve6 => false,
                Access::PersistentReserve => true,
                Access::Status | Access::Read | Access::Write => holder != nexus,
            };
        }
        let Some(reservation) = &self.reservation else {
            return false;
        };
        match access {
            Access::Always | Access::Status | Access::PersistentReserve | Access::Reserve6 => false,
            Access::Read | Access::Write => {
                let passes = self.is_holder(nexus)
                    || (reservation.kind.registrants_allowed() && self.is_registered(nexus));
                !passes && (access == Access::Write || !reservation.kind.reads_shared())
            }
        }
    }

    /// PRgeneration.
    pub(crate) fn generation(&self) -> u32 {
        self.generation
    }

    /// Every registration, in registration order.
    pub(crate) fn registrations(&self) -> &[Registration] {
        &self.registrations
    }

    /// The persistent reservation's type and the key READ RESERVATION reports: the holder's,
    /// or zero for the all-registrants types (SPC-4 6.16.3).
    pub(crate) fn reservation(&self) -> Option<(ReservationType, u64)> {
        let r = self.reservation.as_ref()?;
        let key = if r.kind.all_registrants() {
            0
        } else {
            self.key_of(&r.holder).unwrap_or(0)
        };
        Some((r.kind, key))
    }

    /// Whether `nexus` holds the persistent reservation: it reserved (or it is the same
    /// initiator port through another target port, when the holder registered with
    /// ALL_TG_PT), or it is registered and the type is all-registrants.
    pub(crate) fn is_holder(&self, nexus: &Nexus) -> bool {
        let Some(r) = &self.reservation else {
            return false;
        };
        if r.kind.all_registrants() {
            return self.is_registered(nexus);
        }
        r.holder == *nexus
            || (r.holder.same_initiator_port(nexus)
                && self.is_registered(nexus)
                && self
                    .registration(&r.holder)
                    .is_some_and(|reg| reg.all_target_ports))
    }

    fn registration(&self, nexus: &Nexus) -> Option<&Registration> {
        self.registrations.iter().find(|r| r.nexus == *nexus)
    }

    fn key_of(&self, nexus: &Nexus) -> Option<u64> {
        self.registration(nexus).map(|r| r.key)
    }

    fn is_registered(&self, nexus: &Nexus) -> bool {
        self.registration(nexus).is_some()
    }

    /// RESERVATION CONFLICT unless `nexus` is registered with `key`: every service action but
    /// REGISTER AND IGNORE EXISTING KEY checks the RESERVATION KEY field so.
    fn check_key(&self, nexus: &Nexus, key: u64) -> Result<(), Refusal> {
        match self.key_of(nexus) {
            Some(registered) if registered == key => Ok(()),
            _ => Err(Refusal::Conflict),
        }
    }

    fn bump_generation(&mut self) {
        self.generation = self.generation.wrapping_add(1);
    }

    /// REGISTER (`ignore_existing` false: `key` must be the registered key, or zero when
    /// unregistered) and REGISTER AND IGNORE EXISTING KEY. A non-zero `new_key` registers or
    /// changes the key, zero unregisters. With ALL_TG_PT, `all_target_ports` lists every
    /// target port of the logical unit, and the change applies to this initiator port through
    /// each of them.
    pub(crate) fn register(
        &mut self,
        nexus: &Nexus,
        key: u64,
        new_key: u64,
        ignore_existing: bool,
        all_target_ports: Option<&[u16]>,
        attentions: &mut Vec<Attention>,
    ) -> Result<(), Refusal> {
        let current = self.key_of(nexus);
        if !ignore_existing && current.unwrap_or(0) != key {
            return Err(Refusal::Conflict);
        }
        if current.is_none() && new_key == 0 {
            // Unregistering an unregistered nexus: nothing happens, PRgeneration included.
            return Ok(());
        }
        let mut targets = vec![nexus.clone()];
        if let Some(ports) = all_target_ports {
            for &port in ports {
                let other = nexus.through_port(port);
                if !targets.contains(&other) {
                    targets.push(other);
                }
            }
        }
        if new_key == 0 {
            for target in &targets {
                self.unregister(target, attentions);
            }
        } else {
            let added = targets.iter().filter(|t| !self.is_registered(t)).count();
            if self.registrations.len() + added > REGISTRATIONS_MAX {
                return Err(
                    Sense::illegal_request(asc::INSUFFICIENT_REGISTRATION_RESOURCES).into(),
                );
            }
            for target in targets {
                match self.registrations.iter_mut().find(|r| r.nexus == target) {
                    Some(existing) => {
                        existing.key = new_key;
                        existing.all_target_ports = all_target_ports.is_some();
                    }
                    None => self.registrations.push(Registration {
                        nexus: target,
                        key: new_key,
                        all_target_ports: all_target_ports.is_some(),
                    }),
                }
            }
        }
        self.bump_generation();
        Ok(())
    }

    /// Remove one registration, and the reservation with it when it held it: a
    /// registrants-only reservation released so tells the other registrants (SPC-4
    /// 5.13.11.2.3); an all-registrants one goes with the last registrant.
    fn unregister(&mut self, nexus: &Nexus, attentions: &mut Vec<Attention>) {
        let Some(at) = self.registrations.iter().position(|r| r.nexus == *nexus) else {
            return;
        };
        self.registrations.remove(at);
        let Some(r) = &self.reservation else {
            return;
        };
        if r.kind.all_registrants() {
            if self.registrations.is_empty() {
                self.reservation = None;
            }
        } else if r.holder == *nexus {
            let kind = r.kind;
            self.reservation = None;
            if kind.registrants_allowed() {
                self.tell_registrants(None, asc::RESERVATIONS_RELEASED, attentions);
            }
        }
    }

    /// RESERVE: create the reservation, or nothing if `nexus` already holds one of this type.
    pub(crate) fn reserve(
        &mut self,
        nexus: &Nexus,
        key: u64,
        kind: ReservationType,
    ) -> Result<(), Refusal> {
        self.check_key(nexus, key)?;
        match &self.reservation {
            None => {
                self.reservation = Some(Reservation {
                    holder: nexus.clone(),
                    kind,
                });
                Ok(())
            }
            Some(r) if r.kind == kind && self.is_holder(nexus) => Ok(()),
            Some(_) => Err(Refusal::Conflict),
        }
    }

    /// RELEASE: the holder releases the reservation (its type must be `kind_code`); anyone
    /// else registered is told GOOD and nothing happens.
    pub(crate) fn release(
        &mut self,
        nexus: &Nexus,
        key: u64,
        kind_code: u8,
        attentions: &mut Vec<Attention>,
    ) -> Result<(), Refusal> {
        self.check_key(nexus, key)?;
        let Some(r) = &self.reservation else {
            return Ok(());
        };
        if !self.is_holder(nexus) {
            return Ok(());
        }
        if r.kind.code() != kind_code {
            return Err(
                Sense::illegal_request(asc::INVALID_RELEASE_OF_PERSISTENT_RESERVATION).into(),
            );
        }
        let kind = r.kind;
        self.reservation = None;
        if kind.release_is_announced() {
            self.tell_registrants(Some(nexus), asc::RESERVATIONS_RELEASED, attentions);
        }
        Ok(())
    }

    /// CLEAR: every registration and the reservation go; every other registrant is told
    /// RESERVATIONS PREEMPTED.
    pub(crate) fn clear(
        &mut self,
        nexus: &Nexus,
        key: u64,
        attentions: &mut Vec<Attention>,
    ) -> Result<(), Refusal> {
        self.check_key(nexus, key)?;
        self.tell_registrants(Some(nexus), asc::RESERVATIONS_PREEMPTED, attentions);
        self.registrations.clear();
        self.reservation = None;
        self.bump_generation();
        Ok(())
    }

    /// PREEMPT and PREEMPT AND ABORT (SPC-4 5.13.11.4): remove the registrations of
    /// `victim_key` (never the preempting nexus's own) and, when that key holds the
    /// reservation (or is zero under an all-registrants one), take the reservation over with
    /// `kind`. Returns the nexuses whose registrations were removed (whose tasks PREEMPT AND
    /// ABORT would abort).
    pub(crate) fn preempt(
        &mut self,
        nexus: &Nexus,
        key: u64,
        victim_key: u64,
        kind: ReservationType,
        attentions: &mut Vec<Attention>,
    ) -> Result<Vec<Nexus>, Refusal> {
        self.check_key(nexus, key)?;
        let takes_reservation = match &self.reservation {
            None => false,
            Some(r) if r.kind.all_registrants() => victim_key == 0,
            Some(r) => self.key_of(&r.holder) == Some(victim_key),
        };
        let removed = if takes_reservation && victim_key == 0 {
            // All registrants: every other registration goes.
            self.remove_registrations(nexus, |_| true)
        } else {
            if victim_key == 0 {
                // SARK zero names nobody outside an all-registrants reservation.
                return Err(Sense::invalid_parameter_field(SERVICE_ACTION_KEY_AT).into());
            }
            if !self.registrations.iter().any(|r| r.key == victim_key) {
                return Err(Refusal::Conflict);
            }
            self.remove_registrations(nexus, |r| r.key == victim_key)
        };
        for victim in &removed {
            attentions.push(Attention {
                nexus: victim.clone(),
                code: asc::REGISTRATIONS_PREEMPTED,
            });
        }
        if takes_reservation {
            let changed = self.reservation.as_ref().is_some_and(|r| r.kind != kind);
            self.reservation = Some(Reservation {
                holder: nexus.clone(),
                kind,
            });
            if changed {
                self.tell_registrants(Some(nexus), asc::RESERVATIONS_RELEASED, attentions);
            }
        }
        self.bump_generation();
        Ok(removed)
    }

    /// Remove the registrations `which` picks, except `keep`'s; the nexuses removed.
    fn remove_registrations(
        &mut self,
        keep: &Nexus,
        which: impl Fn(&Registration) -> bool,
    ) -> Vec<Nexus> {
        let mut removed = Vec::new();
        self.registrations.retain(|r| {
            let goes = r.nexus != *keep && which(r);
            if goes {
                removed.push(r.nexus.clone());
            }
            !goes
        });
        removed
    }

    /// REGISTER AND MOVE (SPC-4 5.13.8): the holder registers `destination` with `new_key`
    /// (unless it is registered already, when its key stays), hands it the reservation, and
    /// with `unregister_source` unregisters itself.
    pub(crate) fn register_and_move(
        &mut self,
        nexus: &Nexus,
        key: u64,
        new_key: u64,
        destination: Nexus,
        unregister_source: bool,
    ) -> Result<(), Refusal> {
        self.check_key(nexus, key)?;
        let Some(r) = &self.reservation else {
            return Err(Refusal::Conflict);
        };
        if r.kind.all_registrants() || !self.is_holder(nexus) {
            return Err(Refusal::Conflict);
        }
        if new_key == 0 {
            return Err(Sense::invalid_parameter_field(SERVICE_ACTION_KEY_AT).into());
        }
        if destination == *nexus {
            return Err(Sense::invalid_parameter_field(MOVE_DESTINATION_AT).into());
        }
        if !self.is_registered(&destination) {
            if self.registrations.len() >= REGISTRATIONS_MAX {
                return Err(
                    Sense::illegal_request(asc::INSUFFICIENT_REGISTRATION_RESOURCES).into(),
                );
            }
            self.registrations.push(Registration {
                nexus: destination.clone(),
                key: new_key,
                all_target_ports: false,
            });
        }
        let kind = r.kind;
        self.reservation = Some(Reservation {
            holder: destination,
            kind,
        });
        if unregister_source {
            self.registrations.retain(|r| r.nexus != *nexus);
        }
        self.bump_generation();
        Ok(())
    }

    /// RESERVE(6): refused while any I_T nexus is registered or another holds it.
    pub(crate) fn reserve6(&mut self, nexus: &Nexus) -> Result<(), Refusal> {
        if !self.registrations.is_empty() {
            return Err(Refusal::Conflict);
        }
        match &self.reserved_by {
            Some(holder) if holder != nexus => Err(Refusal::Conflict),
            _ => {
                self.reserved_by = Some(nexus.clone());
                Ok(())
            }
        }
    }

    /// RELEASE(6): refused while any I_T nexus is registered; releases only the holder's.
    pub(crate) fn release6(&mut self, nexus: &Nexus) -> Result<(), Refusal> {
        if !self.registrations.is_empty() {
            return Err(Refusal::Conflict);
        }
        if self.reserved_by.as_ref() == Some(nexus) {
            self.reserved_by = None;
        }
        Ok(())
    }

    /// Whether `nexus` holds the RESERVE(6) reservation.
    pub(crate) fn holds_reserve6(&self, nexus: &Nexus) -> bool {
        self.reserved_by.as_ref() == Some(nexus)
    }

    /// A LUN reset (or a target reset) releases the RESERVE(6) reservation; persistent
    /// reservations stay.
    pub(crate) fn reset(&mut self) {
        self.reserved_by = None;
    }

    /// The loss of an I_T nexus (logout, dropped connection) releases its RESERVE(6)
    /// reservation; its registrations stay.
    pub(crate) fn nexus_lost(&mut self, nexus: &Nexus) {
        if self.reserved_by.as_ref() == Some(nexus) {
            self.reserved_by = None;
        }
    }

    /// A unit attention with `code` for every registered I_T nexus but `except`.
    fn tell_registrants(
        &self,
        except: Option<&Nexus>,
        code: (u8, u8),
        attentions: &mut Vec<Attention>,
    ) {
        for r in &self.registrations {
            if Some(&r.nexus) != except {
                attentions.push(Attention {
                    nexus: r.nexus.clone(),
                    code,
                });
            }
        }
    }
}

/// Byte offsets in the PERSISTENT RESERVE OUT parameter list, for field pointers.
pub(crate) const SERVICE_ACTION_KEY_AT: u16 = 8;
pub(crate) const MOVE_DESTINATION_AT: u16 = 24;

#[cfg(test)]
mod tests {
    use super::*;

    fn nexus(name: &str) -> Nexus {
        Nexus::new(name, 1)
    }

    fn registered(keys: &[(&Nexus, u64)]) -> Reservations {
        let mut r = Reservations::default();
        for (n, key) in keys {
            r.register(n, 0, *key, false, None, &mut Vec::new())
                .expect("register");
        }
        r
    }

    fn codes(attentions: &[Attention]) -> Vec<(&str, (u8, u8))> {
        attentions
            .iter()
            .map(|a| (a.nexus.initiator_port.as_str(), a.code))
            .collect()
    }

    #[test]
    fn type_codes_round_trip_and_reserved_codes_are_refused() {
        for t in ReservationType::ALL {
            assert_eq!(ReservationType::from_code(t.code()), Some(t));
        }
        for code in [0, 2, 4, 9, 0xf] {
            assert_eq!(ReservationType::from_code(code), None);
        }
    }

    #[test]
    fn register_checks_the_key_and_counts_generations() {
        let a = nexus("a");
        let mut r = Reservations::default();
        let mut out = Vec::new();
        assert_eq!(
            r.register(&a, 5, 7, false, None, &mut out),
            Err(Refusal::Conflict),
            "unregistered with a non-zero key"
        );
        r.register(&a, 0, 0, false, None, &mut out).expect("no-op");
        assert_eq!(r.generation(), 0, "unregistering nobody changes nothing");
        r.register(&a, 0, 7, false, None, &mut out)
            .expect("register");
        assert_eq!(
            r.register(&a, 8, 9, false, None, &mut out),
            Err(Refusal::Conflict)
        );
        r.register(&a, 7, 9, false, None, &mut out)
            .expect("change key");
        r.register(&a, 1234, 10, true, None, &mut out)
            .expect("ignore existing");
        assert_eq!(r.registrations()[0].key, 10);
        r.register(&a, 10, 0, false, None, &mut out)
            .expect("unregister");
        assert!(r.registrations().is_empty());
        assert_eq!(r.generation(), 4);
        assert!(out.is_empty());
    }

    #[test]
    fn all_target_ports_registers_every_port_once() {
        let a = nexus("a");
        let mut r = Reservations::default();
        r.register(&a, 0, 3, false, Some(&[1, 2, 3]), &mut Vec::new())
            .expect("register");
        let ports: Vec<u16> = r
            .registrations()
            .iter()
            .map(|reg| reg.nexus.relative_target_port)
            .collect();
        assert_eq!(ports, vec![1, 2, 3]);
        assert!(r.registrations().iter().all(|reg| reg.all_target_ports));
        r.register(
            &a.through_port(2),
            3,
            0,
            false,
            Some(&[1, 2, 3]),
            &mut Vec::new(),
        )
        .expect("unregister everywhere");
        assert!(r.registrations().is_empty());
        assert_eq!(r.generation(), 2);
    }

    #[test]
    fn registrations_are_bounded() {
        let mut r = Reservations::default();
        for i in 0..REGISTRATIONS_MAX {
            r.register(&nexus(&i.to_string()), 0, 1, false, None, &mut Vec::new())
                .expect("room");
        }
        let refused = r.register(&nexus("late"), 0, 1, false, None, &mut Vec::new());
        assert_eq!(
            refused,
            Err(Refusal::Check(Sense::illegal_request(
                asc::INSUFFICIENT_REGISTRATION_RESOURCES
            )))
        );
    }

    #[test]
    fn conflicts_follow_the_type_and_the_registration() {
        let (holder, member, stranger) = (nexus("h"), nexus("m"), nexus("s"));
        for kind in ReservationType::ALL {
            let mut r = registered(&[(&holder, 1), (&member, 2)]);
            r.reserve(&holder, 1, kind).expect("reserve");
            for access in [Access::Always, Access::Status, Access::PersistentReserve] {
                assert!(!r.conflicts(&stranger, access), "{kind:?} {access:?}");
            }
            assert!(!r.conflicts(&holder, Access::Write));
            let registrant_passes = kind.registrants_allowed();
            assert_eq!(r.conflicts(&member, Access::Write), !registrant_passes);
            assert_eq!(
                r.conflicts(&member, Access::Read),
                !registrant_passes && !kind.reads_shared(),
                "{kind:?}"
            );
            assert!(r.conflicts(&stranger, Access::Write));
            assert_eq!(r.conflicts(&stranger, Access::Read), !kind.reads_shared());
        }
    }

    #[test]
    fn reserve_is_idempotent_for_the_holder_and_conflicts_otherwise() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = registered(&[(&a, 1), (&b, 2)]);
        let we = ReservationType::WriteExclusive;
        assert_eq!(r.reserve(&a, 9, we), Err(Refusal::Conflict), "wrong key");
        r.reserve(&a, 1, we).expect("reserve");
        r.reserve(&a, 1, we).expect("again");
        assert_eq!(
            r.reserve(&a, 1, ReservationType::ExclusiveAccess),
            Err(Refusal::Conflict)
        );
        assert_eq!(r.reserve(&b, 2, we), Err(Refusal::Conflict));
        assert_eq!(r.reservation(), Some((we, 1)));
        assert_eq!(r.generation(), 2, "RESERVE does not count");
    }

    #[test]
    fn release_by_non_holder_is_a_no_op_and_wrong_type_is_invalid_release() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = registered(&[(&a, 1), (&b, 2)]);
        let ro = ReservationType::WriteExclusiveRegistrantsOnly;
        r.reserve(&a, 1, ro).expect("reserve");
        let mut out = Vec::new();
        r.release(&b, 2, ro.code(), &mut out).expect("no-op");
        assert!(r.reservation().is_some());
        let wrong = r.release(&a, 1, 1, &mut out);
        assert_eq!(
            wrong,
            Err(Refusal::Check(Sense::illegal_request(
                asc::INVALID_RELEASE_OF_PERSISTENT_RESERVATION
            )))
        );
        r.release(&a, 1, ro.code(), &mut out).expect("release");
        assert_eq!(r.reservation(), None);
        assert_eq!(codes(&out), vec![("b", asc::RESERVATIONS_RELEASED)]);
        let stranger = nexus("s");
        assert_eq!(r.release(&stranger, 0, 1, &mut out), Err(Refusal::Conflict));
    }

    #[test]
    fn holder_unregistering_releases_and_all_registrants_outlive_one() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut out = Vec::new();
        let mut r = registered(&[(&a, 1), (&b, 2)]);
        r.reserve(&a, 1, ReservationType::ExclusiveAccessRegistrantsOnly)
            .expect("reserve");
        r.register(&a, 1, 0, false, None, &mut out)
            .expect("unregister");
        assert_eq!(r.reservation(), None);
        assert_eq!(codes(&out), vec![("b", asc::RESERVATIONS_RELEASED)]);

        let mut out = Vec::new();
        let mut r = registered(&[(&a, 1), (&b, 2)]);
        let ar = ReservationType::WriteExclusiveAllRegistrants;
        r.reserve(&a, 1, ar).expect("reserve");
        assert_eq!(
            r.reservation(),
            Some((ar, 0)),
            "all registrants report key 0"
        );
        assert!(r.is_holder(&b));
        r.register(&a, 1, 0, false, None, &mut out)
            .expect("unregister");
        assert_eq!(r.reservation(), Some((ar, 0)));
        r.register(&b, 2, 0, false, None, &mut out)
            .expect("unregister");
        assert_eq!(r.reservation(), None);
        assert!(out.is_empty());
    }

    #[test]
    fn clear_removes_everything_and_tells_the_others() {
        let (a, b, c) = (nexus("a"), nexus("b"), nexus("c"));
        let mut r = registered(&[(&a, 1), (&b, 2), (&c, 3)]);
        r.reserve(&b, 2, ReservationType::ExclusiveAccess)
            .expect("reserve");
        let mut out = Vec::new();
        assert_eq!(r.clear(&nexus("s"), 0, &mut out), Err(Refusal::Conflict));
        r.clear(&a, 1, &mut out).expect("clear");
        assert!(r.registrations().is_empty() && r.reservation().is_none());
        assert_eq!(
            codes(&out),
            vec![
                ("b", asc::RESERVATIONS_PREEMPTED),
                ("c", asc::RESERVATIONS_PREEMPTED)
            ]
        );
        assert_eq!(r.generation(), 4);
    }

    #[test]
    fn preempt_without_a_reservation_removes_registrations_only() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = registered(&[(&a, 1), (&b, 2)]);
        let ea = ReservationType::ExclusiveAccess;
        let mut out = Vec::new();
        assert_eq!(r.preempt(&b, 2, 77, ea, &mut out), Err(Refusal::Conflict));
        assert!(matches!(
            r.preempt(&b, 2, 0, ea, &mut out),
            Err(Refusal::Check(_))
        ));
        let removed = r.preempt(&b, 2, 1, ea, &mut out).expect("preempt");
        assert_eq!(removed, vec![a.clone()]);
        assert_eq!(r.reservation(), None);
        assert_eq!(codes(&out), vec![("a", asc::REGISTRATIONS_PREEMPTED)]);
        assert_eq!(r.generation(), 3);
    }

    #[test]
    fn preempting_the_holder_takes_the_reservation() {
        let (a, b, c) = (nexus("a"), nexus("b"), nexus("c"));
        let mut r = registered(&[(&a, 1), (&b, 2), (&c, 3)]);
        r.reserve(&a, 1, ReservationType::WriteExclusive)
            .expect("reserve");
        let mut out = Vec::new();
        r.preempt(&b, 2, 1, ReservationType::ExclusiveAccess, &mut out)
            .expect("preempt");
        assert_eq!(r.reservation(), Some((ReservationType::ExclusiveAccess, 2)));
        assert!(r.is_holder(&b));
        assert_eq!(
            codes(&out),
            vec![
                ("a", asc::REGISTRATIONS_PREEMPTED),
                ("c", asc::RESERVATIONS_RELEASED)
            ],
            "the type changed: the remaining registrant hears of it"
        );
        // Preempting a non-holder's key leaves the reservation alone.
        let mut out = Vec::new();
        r.preempt(&b, 2, 3, ReservationType::ExclusiveAccess, &mut out)
            .expect("preempt c");
        assert_eq!(r.reservation(), Some((ReservationType::ExclusiveAccess, 2)));
        assert_eq!(codes(&out), vec![("c", asc::REGISTRATIONS_PREEMPTED)]);
    }

    #[test]
    fn preempt_with_zero_key_under_all_registrants_takes_everything() {
        let (a, b, c) = (nexus("a"), nexus("b"), nexus("c"));
        let mut r = registered(&[(&a, 1), (&b, 2), (&c, 3)]);
        r.reserve(&a, 1, ReservationType::ExclusiveAccessAllRegistrants)
            .expect("reserve");
        let mut out = Vec::new();
        r.preempt(&c, 3, 0, ReservationType::WriteExclusive, &mut out)
            .expect("preempt");
        assert_eq!(r.registrations().len(), 1);
        assert_eq!(r.reservation(), Some((ReservationType::WriteExclusive, 3)));
        assert_eq!(out.len(), 2);
    }

    #[test]
    fn register_and_move_hands_the_reservation_over() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = registered(&[(&a, 1)]);
        assert_eq!(
            r.register_and_move(&a, 1, 5, b.clone(), false),
            Err(Refusal::Conflict),
            "no reservation"
        );
        r.reserve(&a, 1, ReservationType::WriteExclusive)
            .expect("reserve");
        assert!(matches!(
            r.register_and_move(&a, 1, 5, a.clone(), false),
            Err(Refusal::Check(_))
        ));
        assert!(matches!(
            r.register_and_move(&a, 1, 0, b.clone(), false),
            Err(Refusal::Check(_))
        ));
        r.register_and_move(&a, 1, 5, b.clone(), true)
            .expect("move");
        assert!(r.is_holder(&b) && !r.is_holder(&a));
        assert_eq!(r.reservation(), Some((ReservationType::WriteExclusive, 5)));
        assert_eq!(r.registrations().len(), 1, "source unregistered");
        assert_eq!(r.generation(), 2);
    }

    #[test]
    fn reserve6_excludes_others_and_registrations() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = Reservations::default();
        r.reserve6(&a).expect("reserve");
        r.reserve6(&a).expect("again");
        assert_eq!(r.reserve6(&b), Err(Refusal::Conflict));
        r.release6(&b).expect("no-op");
        assert!(r.conflicts(&b, Access::Status));
        assert!(r.conflicts(&b, Access::Read));
        assert!(!r.conflicts(&b, Access::Always));
        assert!(
            r.conflicts(&a, Access::PersistentReserve),
            "even the holder"
        );
        assert!(!r.conflicts(&a, Access::Write));
        r.nexus_lost(&b);
        assert!(r.conflicts(&b, Access::Write));
        r.nexus_lost(&a);
        r.reserve6(&b).expect("free after a's nexus is lost");
        r.reset();
        assert!(!r.conflicts(&a, Access::Write));

        let mut r = registered(&[(&a, 1)]);
        assert_eq!(r.reserve6(&b), Err(Refusal::Conflict));
        assert_eq!(r.release6(&a), Err(Refusal::Conflict));
    }

    #[test]
    fn the_reserve6_holder_travels_in_the_record_and_never_beside_registrations() {
        let (a, b) = (nexus("a"), nexus("b"));
        let mut r = Reservations::default();
        r.reserve6(&a).expect("reserve");
        let record = r.record();
        assert_eq!(record.reserved_by, Some(a.clone()));
        // Another process loads it and enforces it.
        let mut other = Reservations::default();
        other.load(record.clone(), 7).expect("load");
        assert!(other.conflicts(&b, Access::Write));
        assert!(!other.conflicts(&a, Access::Write));
        assert_eq!(other.reserve6(&b), Err(Refusal::Conflict));
        // A record released elsewhere releases it here.
        r.release6(&a).expect("release");
        other.load(r.record(), 8).expect("load");
        assert!(!other.conflicts(&b, Access::Write));
        // A record that breaks the invariant is refused and changes nothing.
        let mut broken = record;
        broken.registrations.push(RegistrationRecord {
            nexus: b.clone(),
            key: 1,
            all_target_ports: false,
        });
        assert!(other.load(broken, 9).is_err());
        assert_eq!(other.version(), 8);
    }

    #[test]
    fn all_target_ports_holder_holds_through_every_port() {
        let a = nexus("a");
        let mut r = Reservations::default();
        r.register(&a, 0, 4, false, Some(&[1, 2]), &mut Vec::new())
            .expect("register");
        r.reserve(&a, 4, ReservationType::ExclusiveAccess)
            .expect("reserve");
        assert!(r.is_holder(&a.through_port(2)));
        assert!(!r.conflicts(&a.through_port(2), Access::Write));
        assert!(
            r.conflicts(&a.through_port(3), Access::Write),
            "not registered there"
        );
    }
}
