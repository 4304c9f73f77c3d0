//! Running a whole command: the session's LUNs ([`Lun`]: an open export, the LU's shared
//! state, the unit attentions this nexus owes), the CDB decoded once into a
//! [`weft_scsi::DecodedCdb`] that the rest of the command uses (REPORT LUNS, the inline
//! choice, unit attentions, the data-out transfer, execution), and the job that executes it
//! on the worker pool, or on the connection's task when it is alone and small.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;
use weft_iscsi::request::ScsiCommand;
use weft_scsi::{DataOutTransfer, DecodedCdb, LogicalUnit, Nexus};

use super::{Reader, INFLIGHT_COMMANDS_MAX};
use crate::iscsi_listener::lun::ExportLun;
use crate::iscsi_listener::respond::respond;
use crate::iscsi_listener::SharedLu;
use crate::qos::serve_received;

/// The largest read or write run on the connection's task (see [`runs_inline`]): a 4 KiB
/// to 64 KiB command costs less than the two thread wake-ups of a hand-off to a worker.
const INLINE_TRANSFER_MAX_BYTES: u32 = 64 * 1024;

/// A session's LUN.
pub(super) struct Lun {
    pub(super) export: String,
    pub(super) lu: Arc<ExportLun>,
    pub(super) shared: Arc<SharedLu>,
    /// The LU's reset count this session (I_T nexus) has reported.
    pub(super) resets_seen: AtomicU64,
    /// The session's LUN inventory changed (a mapping came or went) and this LU has not
    /// said so yet.
    pub(super) luns_changed: AtomicBool,
}

impl Lun {
    /// A unit attention this nexus has not reported yet: a reset (POWER ON, RESET, OR BUS
    /// DEVICE RESET OCCURRED), then a LUN inventory change (REPORTED LUNS DATA HAS CHANGED),
    /// then one a persistent reservation change on another nexus left for this one
    /// (RESERVATIONS PREEMPTED or RELEASED, REGISTRATIONS PREEMPTED), on any command but
    /// INQUIRY, REPORT LUNS and REQUEST SENSE, which SPC-4 answers without it (REQUEST SENSE
    /// returns the reservation ones as its data, in `weft_scsi::execute`).
    fn unit_attention(&self, nexus: &Nexus, command: &DecodedCdb) -> Option<weft_scsi::Response> {
        if command.answered_without_unit_attention() {
            return None;
        }
        let resets = self.shared.resets.load(Ordering::Acquire);
        let seen = self.resets_seen.swap(resets, Ordering::AcqRel);
        let attention = |code| {
            weft_scsi::Response::check(weft_scsi::Sense::new(
                weft_scsi::sense::key::UNIT_ATTENTION,
                code,
            ))
        };
        if seen != resets {
            return Some(attention(RESET_OCCURRED));
        }
        if self.luns_changed.swap(false, Ordering::AcqRel) {
            return Some(attention(REPORTED_LUNS_CHANGED));
        }
        self.shared.state.unit_attention_decoded(nexus, command)
    }
}

/// The ASC/ASCQ of a reset and of a LUN inventory change (sense key UNIT ATTENTION).
const RESET_OCCURRED: (u8, u8) = (0x29, 0x00);
const REPORTED_LUNS_CHANGED: (u8, u8) = (0x3f, 0x0e);

/// Commands small enough to run on the connection's task when they are alone: plain block
/// I/O ([`DecodedCdb::is_plain_io`]: READ, WRITE, SYNCHRONIZE CACHE, TEST UNIT READY) of at
/// most [`INLINE_TRANSFER_MAX_BYTES`]. Nothing that may wait on another session
/// (reservations, COMPARE AND WRITE).
fn runs_inline(c: &ScsiCommand, command: &DecodedCdb) -> bool {
    command.is_plain_io() && c.expected_len <= INLINE_TRANSFER_MAX_BYTES
}

/// The LUN number of an 8-byte LUN field (`u64::MAX`: no LUN we could have).
pub(super) fn lun_number(field: u64) -> u64 {
    weft_scsi::decode_lun(field.to_be_bytes()).unwrap_or(u64::MAX)
}

impl Reader<'_> {
    /// Run a whole command on the worker pool. Its CDB is decoded here, once.
    pub(super) fn dispatch(&mut self, c: ScsiCommand, permit: OwnedSemaphorePermit) {
        // The command's latency, as the QoS latency target sees it, starts here (its data
        // has all arrived).
        let received = Instant::now();
        self.refresh_luns();
        let shared = Arc::clone(&self.shared);
        shared.executing.lock().insert(c.itt);
        let lun = self.luns.get(&lun_number(c.lun)).cloned();
        let nexus = Arc::clone(&self.nexus);
        let command = DecodedCdb::decode(&c.cdb);
        let lun_list: Vec<u64> = if command.is_report_luns() {
            // REPORT LUNS tells the initiator what changed: the attention is spent.
            for l in self.luns.values() {
                l.luns_changed.store(false, Ordering::Release);
            }
            self.luns.keys().copied().collect()
        } else {
            Vec::new()
        };
        let inline = self.input_idle
            && self.inflight.available_permits() == INFLIGHT_COMMANDS_MAX - 1
            && runs_inline(&c, &command)
            && !lun.as_ref().is_some_and(|l| l.lu.may_throttle());
        let job = move || {
            let mut data_out_len = None;
            let result = match &lun {
                _ if command.is_report_luns() => weft_scsi::report_luns(&command, &lun_list),
                Some(lun) => {
                    if lun.lu.is_gone() {
                        shared.sequence.lock().task_finished();
                        shared.executing.lock().remove(&c.itt);
                        shared.answered.notify_waiters();
                        shared.closing.cancel();
                        drop(permit);
                        return;
                    }
                    let geometry = lun.lu.geometry();
                    data_out_len = command.data_out_len(&geometry);
                    let state = &lun.shared.state;
                    let execute = |command: &DecodedCdb| {
                        weft_scsi::execute_decoded(state, &*lun.lu, &nexus, command, &c.data)
                    };
                    match (
                        lun.unit_attention(&nexus, &command),
                        command.transfer(c.expected_len, &geometry),
                    ) {
                        (Some(attention), _) => attention,
                        (None, DataOutTransfer::AsIs) => execute(&command),
                        (None, DataOutTransfer::Truncated(write)) => execute(&write),
                        (None, DataOutTransfer::Refused(refusal)) => refusal,
                    }
                }
                None => weft_scsi::execute_no_lun(&command),
            };
            respond(&shared, &c, data_out_len, result);
            shared.executing.lock().remove(&c.itt);
            shared.answered.notify_waiters();
            drop(permit);
        };
        let job = move || serve_received(received, job);
        if inline {
            // The session's only command and a small one: a hand-off to a worker and back
            // would cost two thread wake-ups, more than the command (QD1 latency).
            job();
        } else {
            self.portal.workers.submit(Box::new(job));
        }
    }
}
