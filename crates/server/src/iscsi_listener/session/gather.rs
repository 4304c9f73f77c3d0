//! Gathering a write's data-out: immediate data, unsolicited Data-Out up to FirstBurstLength,
//! then one R2T at a time of at most MaxBurstLength (MaxOutstandingR2T=1, DataPDUInOrder and
//! DataSequenceInOrder Yes). A whole command goes to [`Reader::dispatch`]; a Data-Out out of
//! order fails its command with ABORTED COMMAND and the session goes on.

use std::sync::Arc;

use tokio::sync::OwnedSemaphorePermit;
use tracing::debug;
use weft_iscsi::request::{DataOut, ScsiCommand};
use weft_iscsi::response::{self, ReadyToTransfer};
use weft_iscsi::wire::TAG_NONE;

use super::Reader;
use crate::iscsi_listener::respond::{respond, DATA_OFFSET_ERROR, DATA_PHASE_ERROR};
use crate::iscsi_listener::shared::ConnError;

/// The most data-out this target gathers for one command: the SCSI layer's transfer limit
/// (reported in the Block Limits VPD page), which also bounds every parameter list.
const WRITE_GATHER_MAX_BYTES: u32 = weft_scsi::limits::MAX_TRANSFER_BYTES;

/// A write command waiting for its data.
pub(super) struct PendingWrite {
    command: ScsiCommand,
    data: Vec<u8>,
    received: u32,
    /// The R2T being answered: (target transfer tag, end offset).
    r2t: Option<(u32, u32)>,
    next_r2t_offset: u32,
    r2t_sn: u32,
    /// DataPDUInOrder and DataSequenceInOrder are Yes: the next Data-Out starts here, with
    /// this DataSN (counted from 0 again in each R2T's sequence).
    next_offset: u32,
    next_data_sn: u32,
    permit: OwnedSemaphorePermit,
}

impl Reader<'_> {
    pub(super) fn command(&mut self, mut c: ScsiCommand) -> Result<(), ConnError> {
        if self.discovery {
            return Err(ConnError::Protocol("SCSI command in a discovery session"));
        }
        let permit = Arc::clone(&self.inflight)
            .try_acquire_owned()
            .map_err(|_| ConnError::Protocol("more commands in flight than the window allows"))?;
        self.shared.sequence.lock().task_started();
        let params = self.shared.params;
        if c.data.len() > params.first_burst as usize
            || (!c.data.is_empty() && !params.immediate_data)
        {
            return Err(ConnError::Protocol(
                "immediate data beyond what was negotiated",
            ));
        }
        if c.data.len() > c.expected_len as usize {
            return Err(ConnError::Protocol(
                "more immediate data than the expected length",
            ));
        }
        // A write longer than any command may move is refused by the SCSI layer at once,
        // with its immediate data only; Data-Out the initiator still sends is dropped.
        if !c.write || c.expected_len == 0 || c.expected_len > WRITE_GATHER_MAX_BYTES {
            self.dispatch(c, permit);
            return Ok(());
        }
        let immediate = std::mem::take(&mut c.data);
        let mut data = vec![0u8; c.expected_len as usize];
        data[..immediate.len()].copy_from_slice(&immediate);
        let unsolicited_end = if params.initial_r2t || c.final_ {
            immediate.len() as u32
        } else {
            params.first_burst.min(c.expected_len)
        };
        let mut pending = PendingWrite {
            received: immediate.len() as u32,
            data,
            r2t: None,
            next_r2t_offset: unsolicited_end,
            r2t_sn: 0,
            next_offset: immediate.len() as u32,
            next_data_sn: 0,
            command: c,
            permit,
        };
        if pending.received == pending.command.expected_len {
            let PendingWrite {
                command,
                data,
                permit,
                ..
            } = pending;
            self.dispatch(ScsiCommand { data, ..command }, permit);
            return Ok(());
        }
        self.next_r2t(&mut pending);
        self.pending.insert(pending.command.itt, pending);
        Ok(())
    }

    /// Ask for the next MaxBurstLength of a write, if some is still unasked.
    fn next_r2t(&mut self, p: &mut PendingWrite) {
        // One R2T at a time (MaxOutstandingR2T=1), and only once the unsolicited data is in.
        if p.r2t.is_some()
            || p.next_r2t_offset >= p.command.expected_len
            || p.next_offset < p.next_r2t_offset
        {
            return;
        }
        let offset = p.next_r2t_offset;
        let len = (p.command.expected_len - offset).min(self.shared.params.max_burst);
        let ttt = self.next_ttt;
        self.next_ttt = self.next_ttt.wrapping_add(1).max(1);
        if self.next_ttt == TAG_NONE {
            self.next_ttt = 1;
        }
        p.r2t = Some((ttt, offset + len));
        p.next_r2t_offset = offset + len;
        p.next_data_sn = 0;
        let r = ReadyToTransfer {
            lun: p.command.lun,
            itt: p.command.itt,
            ttt,
            r2t_sn: p.r2t_sn,
            offset,
            len,
        };
        p.r2t_sn += 1;
        let digests = self.shared.digests;
        self.shared
            .send_plain(|n, out| response::r2t(&r, n, digests, out));
    }

    pub(super) fn data_out(&mut self, d: DataOut) -> Result<(), ConnError> {
        let Some(mut p) = self.pending.remove(&d.itt) else {
            // Data for a command that was aborted or already refused: dropped.
            return Ok(());
        };
        let end = u64::from(d.offset) + d.data.len() as u64;
        if end > u64::from(p.command.expected_len) {
            return Err(ConnError::Protocol(
                "Data-Out beyond the expected transfer length",
            ));
        }
        // A lost, repeated or reordered Data-Out fails its command (CHECK CONDITION, ABORTED
        // COMMAND); the rest of its data is dropped as it arrives, the session goes on.
        if d.offset != p.next_offset || d.data_sn != p.next_data_sn {
            let code = if d.offset != p.next_offset {
                DATA_OFFSET_ERROR
            } else {
                DATA_PHASE_ERROR
            };
            debug!(
                itt = d.itt,
                offset = d.offset,
                data_sn = d.data_sn,
                "Data-Out out of order"
            );
            let PendingWrite {
                command, permit, ..
            } = p;
            let failed = weft_scsi::Response::check(weft_scsi::Sense::new(
                weft_scsi::sense::key::ABORTED_COMMAND,
                code,
            ));
            respond(
                &self.shared,
                &ScsiCommand {
                    data: Vec::new(),
                    ..command
                },
                None,
                failed,
            );
            drop(permit);
            return Ok(());
        }
        p.next_offset = end as u32;
        p.next_data_sn += 1;
        p.data[d.offset as usize..end as usize].copy_from_slice(&d.data);
        p.received += d.data.len() as u32;
        if let Some((ttt, r2t_end)) = p.r2t {
            if d.ttt == ttt && (d.final_ || end >= u64::from(r2t_end)) {
                p.r2t = None;
            }
        }
        if p.received >= p.command.expected_len {
            let PendingWrite {
                command,
                data,
                permit,
                ..
            } = p;
            self.dispatch(ScsiCommand { data, ..command }, permit);
            return Ok(());
        }
        self.next_r2t(&mut p);
        self.pending.insert(d.itt, p);
        Ok(())
    }
}
