//! SCSI block commands, target side, sans-IO.
//!
//! This crate is the SCSI layer of the iSCSI target: it decodes CDBs, executes them against a
//! [`LogicalUnit`] trait object that stores the data, and builds data-in buffers and sense
//! data. It never touches a socket, a thread or a clock; the iSCSI PDU/login crate and the
//! tokio listener decode each CDB once into a [`DecodedCdb`] (its data-out length, how it
//! meets the initiator's expected length) and pass it to [`execute_decoded`], [`report_luns`]
//! and [`execute_no_lun`], and on each LU's [`LunState`]: [`LunState::unit_attention_decoded`]
//! before every command,
//! [`LunState::logical_unit_reset`] on LUN and target resets, [`LunState::nexus_joined`] when
//! a session starts reaching the LU and [`LunState::nexus_lost`] when it ends, and
//! [`LunState::heard`] when another process serving the LU stored a change with news for
//! nexuses (see [`RecordNews`]). Every command carries its I_T nexus ([`Nexus`]).
//!
//! Modules and what each owns:
//! - `medium`: [`Geometry`] and [`MediumError`], what the storage under a LUN is and how it
//!   fails (a leaf the decoders, limits and sense mapping use).
//! - [`lun`]: the [`LogicalUnit`] trait, [`Identity`], and
//!   [`LunState`] (mode values, the COMPARE AND WRITE lock, reservations and pending unit
//!   attentions, shared by all sessions).
//! - [`nexus`]: [`Nexus`], the I_T nexus, and iSCSI TransportIDs.
//! - [`sense`]: [`Status`], [`Sense`] (fixed and descriptor formats), [`Response`], the named
//!   sense keys and codes, and the one mapping from [`MediumError`] to sense.
//! - [`opcode`]: operation codes and service actions.
//! - `cdb`: CDB decoding into a plain command value.
//! - `decoded`: [`DecodedCdb`], the decoded command a transport carries to execution, and
//!   what it implies: data-out length and data-in limit, transfer limits, how its data-out
//!   meets the initiator's expected length ([`DataOutTransfer`]).
//! - `execute`: dispatch, and the block data commands (READ, WRITE, WRITE AND VERIFY,
//!   SYNCHRONIZE CACHE).
//! - `compare`: the commands that compare data-out with the medium: VERIFY and COMPARE AND
//!   WRITE.
//! - `provisioning`: UNMAP, WRITE SAME, GET LBA STATUS.
//! - `block_io`: block ranges to byte ranges, data-out prefixes, write-through: what
//!   `execute`, `provisioning` and `persistent_reserve_out` share.
//! - `inquiry`: standard INQUIRY data and the VPD pages 00h, 80h, 83h, B0h, B1h, B2h.
//! - `mode`: MODE SENSE / MODE SELECT and the caching, control and informational exceptions
//!   pages.
//! - `capacity`: READ CAPACITY(10) and (16).
//! - `maintenance_in`: REPORT SUPPORTED OPERATION CODES (and the supported-command table).
//! - [`alua`]: implicit ALUA: the [`AluaProvider`] seam a server feeds target port groups
//!   and access states through, REPORT TARGET PORT GROUPS' data, and the commands a port in
//!   a non-active state refuses.
//! - `luns`: REPORT LUNS, commands to a LUN with no logical unit, LUN encoding.
//! - `reservations`: persistent reservation and RESERVE(6) state, their service actions, and
//!   which commands conflict with which reservation.
//! - [`reservation_store`]: the [`ReservationStore`] seam a LU's persistent reservation state
//!   (and its RESERVE(6) holder) is loaded from and stored through (compare-and-swap, shared
//!   by several processes), the [`ReservationRecord`] it carries with the [`RecordNews`] of
//!   the change that stored it, and [`MemReservationStore`], the default.
//! - `persistent_reserve_in`, `persistent_reserve_out`: PERSISTENT RESERVE IN/OUT parameter
//!   data and lists, RESERVE(6)/RELEASE(6).
//! - `unit_attention`: the bounded per-nexus queue of unit attentions reservations and
//!   access state changes cause.
//! - [`limits`]: the Block Limits values reported and enforced.
//! - [`mem_lun`]: [`MemLun`], an in-memory logical unit for tests.
//! - [`build`]: CDB and parameter-list builders for tests and seeds.
//! - [`fuzzing`]: the `scsi_cdb` fuzz entry point and its seed corpus.
//!
//! Invariants kept here: nothing an initiator sends can make these functions panic or allocate
//! more than the transfer limits in [`limits`]; every length field is checked before it is
//! used; a CHECK CONDITION always carries sense and a GOOD or RESERVATION CONFLICT never does.
//!
//! Persistent reservations (SPC-4 5.13) are implemented with every type, ALL_TG_PT and
//! REGISTER AND MOVE and APTPL (kept in the record; the store's owner drops a record without
//! it at power-on); not SPEC_I_PT or REPLACE LOST RESERVATION, and PREEMPT AND ABORT leaves
//! aborting the preempted tasks to the transport. SPC-2 RESERVE(6)/RELEASE(6) are
//! implemented; RESERVE(10)/RELEASE(10) are not. ALUA is implicit only (no SET TARGET PORT
//! GROUPS). Not implemented either: ACA, protection information, and unit attentions other
//! than those reservations and access state changes cause (the transport reports resets
//! itself).

pub mod alua;
mod block_io;
pub mod build;
mod capacity;
mod cdb;
mod compare;
mod decoded;
mod execute;
pub mod fuzzing;
mod inquiry;
pub mod limits;
pub mod lun;
mod luns;
mod maintenance_in;
mod medium;
pub mod mem_lun;
mod mode;
pub mod nexus;
pub mod opcode;
mod persistent_reserve_in;
mod persistent_reserve_out;
mod provisioning;
pub mod reservation_store;
mod reservations;
pub mod sense;
#[cfg(test)]
mod test_support;
mod unit_attention;

pub use alua::{AccessState, AluaProvider, PortGroup, PortGroups};
pub use decoded::{DataOutTransfer, DecodedCdb};
pub use execute::{execute, execute_decoded};
pub use lun::{Identity, LogicalUnit, LunState};
pub use luns::{decode_lun, encode_lun, execute_no_lun, report_luns, LUN_MAX};
pub use medium::{Geometry, MediumError};
pub use mem_lun::MemLun;
pub use nexus::Nexus;
pub use reservation_store::{
    MemReservationStore, RecordNews, RecordVersion, RegistrationRecord, ReservationHolder,
    ReservationRecord, ReservationStore, StoreError,
};
pub use sense::{FieldPointer, Response, Sense, Status};
