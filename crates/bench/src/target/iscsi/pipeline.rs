//! The sans-IO core of one iSCSI session in full feature phase, as an initiator: the task
//! table (one task per queue slot, task tag = slot), the command window, and what each PDU
//! from the target leads to. Feed it submissions and target PDUs; it appends the PDUs to send
//! to a caller-owned buffer and reports finished tags.
//!
//! Invariants:
//! - a command is sent only while its CmdSN is inside the window (CmdSN <= MaxCmdSN, serial
//!   arithmetic); commands beyond it wait, in submission order, until a response opens it;
//! - a write sends immediate data up to FirstBurstLength (and the target's
//!   MaxRecvDataSegmentLength), then unsolicited Data-Out up to FirstBurstLength when
//!   InitialR2T=No, then exactly what each R2T asks for; no PDU carries more than the
//!   target's MaxRecvDataSegmentLength;
//! - Data-In lands in the task's buffer at its buffer offset; a PDU outside the expected
//!   transfer is a protocol error, never a panic;
//! - a command that fails with UNIT ATTENTION is sent again (a few times), as SCSI initiators
//!   do; any other failure ends the run.
//!
//! Not here: digests, several connections, error recovery above level 0 (a lost PDU is a hung
//! or failed run), task management, SNACK.

use std::collections::VecDeque;

use weft_iscsi::initiator::{
    data_out, logout_request, nop_out, scsi_command, CommandPdu, DataOutPdu, NopOutPdu,
};
use weft_iscsi::initiator_login::LoginOutcome;
use weft_iscsi::response::{Numbers, ReadyToTransfer};
use weft_iscsi::session::serial_lt;
use weft_iscsi::target_pdu::{decode_target_pdu, AsyncMessage, DataIn, ScsiResponse, TargetPdu};
use weft_iscsi::wire::{LOGOUT_SUCCESS, RESPONSE_COMPLETED, TAG_NONE};
use weft_iscsi::{Digests, PduRef, SessionParams};
use weft_scsi::Sense;

use crate::target::ScsiFailure;

/// Times a command is sent again after a UNIT ATTENTION before its failure counts.
const UNIT_ATTENTION_RETRIES_MAX: u8 = 3;
/// The task tag of our Logout Request: above every slot tag, and not the reserved TAG_NONE.
const LOGOUT_ITT: u32 = TAG_NONE - 1;
/// SCSI status GOOD and CHECK CONDITION.
const STATUS_GOOD: u8 = 0x00;
const STATUS_CHECK_CONDITION: u8 = 0x02;
/// Async message events that end the session: logout requested, connection or session drop.
const ASYNC_EVENT_SCSI: u8 = 0;
/// Digests are never negotiated (see the module docs).
const DIGESTS: Digests = Digests {
    header: false,
    data: false,
};

/// Which way a command's data flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    None,
    Read,
    Write,
}

/// Where a task is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    /// The slot is free.
    Idle,
    /// Submitted, waiting for the command window.
    Waiting,
    /// Sent; its status has not come back.
    Issued,
}

/// One slot's command.
#[derive(Debug)]
struct Task {
    state: TaskState,
    cdb: [u8; 16],
    direction: Direction,
    /// The expected data transfer length.
    len_bytes: u32,
    /// Write data, or read data as it arrives. Allocated once per slot.
    buf: Vec<u8>,
    /// Data-In bytes received so far.
    received_bytes: u32,
    unit_attentions: u8,
}

/// Why the session cannot go on, or which command failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PipelineError {
    /// The target broke the protocol (or asked to end the session); the connection is done.
    Protocol(String),
    /// The command of slot `tag` failed at the target.
    Command { tag: u32, failure: ScsiFailure },
}

/// What a received PDU meant, besides finished tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Received {
    Progress,
    /// The target answered our Logout Request.
    LoggedOut,
}

/// One session's command pipeline.
#[derive(Debug)]
pub(crate) struct Pipeline {
    params: SessionParams,
    /// The LUN field of every command (8 bytes, big-endian).
    lun_field: u64,
    /// CmdSN of the next non-immediate command.
    cmd_sn: u32,
    /// StatSN of the next status we expect.
    exp_stat_sn: u32,
    exp_cmd_sn: u32,
    max_cmd_sn: u32,
    tasks: Vec<Task>,
    /// Slots waiting for the window, in submission order.
    waiting: VecDeque<u32>,
    logout_sent: bool,
}

impl Pipeline {
    /// A pipeline of `depth` slots, each with a buffer of `io_bytes_max`.
    pub(crate) fn new(login: &LoginOutcome, lun_field: u64, depth: u32, io_bytes_max: u32) -> Self {
        let tasks = (0..depth)
            .map(|_| Task {
                state: TaskState::Idle,
                cdb: [0; 16],
                direction: Direction::None,
                len_bytes: 0,
                buf: vec![0; io_bytes_max as usize],
                received_bytes: 0,
                unit_attentions: 0,
            })
            .collect();
        Pipeline {
            params: login.params,
            lun_field,
            cmd_sn: login.cmd_sn,
            exp_stat_sn: login.exp_stat_sn,
            exp_cmd_sn: login.exp_cmd_sn,
            max_cmd_sn: login.max_cmd_sn,
            tasks,
            waiting: VecDeque::with_capacity(depth as usize),
            logout_sent: false,
        }
    }

    /// Commands the target lets us have outstanding right now (MaxCmdSN - ExpCmdSN + 1).
    pub(crate) fn window(&self) -> u32 {
        self.max_cmd_sn
            .wrapping_sub(self.exp_cmd_sn)
            .wrapping_add(1)
            .min(1 << 31)
    }

    /// The buffer of slot `tag`, `len` bytes long: fill it with write data before `submit`.
    pub(crate) fn buffer_mut(&mut self, tag: u32, len: u32) -> &mut [u8] {
        &mut self.tasks[tag as usize].buf[..len as usize]
    }

    /// The data a finished read of slot `tag` received.
    pub(crate) fn data_in(&self, tag: u32) -> &[u8] {
        let t = &self.tasks[tag as usize];
        &t.buf[..t.received_bytes as usize]
    }

    /// Queue a command on slot `tag`; [`Pipeline::issue`] sends it when the window allows.
    pub(crate) fn submit(&mut self, tag: u32, cdb: [u8; 16], direction: Direction, len: u32) {
        let task = &mut self.tasks[tag as usize];
        assert_eq!(task.state, TaskState::Idle, "tag {tag} submitted twice");
        assert!(
            len as usize <= task.buf.len(),
            "I/O larger than the slot's buffer"
        );
        *task = Task {
            state: TaskState::Waiting,
            cdb,
            direction,
            len_bytes: len,
            buf: std::mem::take(&mut task.buf),
            received_bytes: 0,
            unit_attentions: 0,
        };
        self.waiting.push_back(tag);
    }

    /// Send every waiting command the window has room for.
    pub(crate) fn issue(&mut self, out: &mut Vec<u8>) {
        while !serial_lt(self.max_cmd_sn, self.cmd_sn) {
            let Some(tag) = self.waiting.pop_front() else {
                return;
            };
            self.send_command(tag, out);
        }
    }

    /// Append a Logout Request closing the session.
    pub(crate) fn logout(&mut self, out: &mut Vec<u8>) {
        self.logout_sent = true;
        logout_request(LOGOUT_ITT, self.cmd_sn, self.exp_stat_sn, DIGESTS, out);
    }

    /// Handle one PDU from the target: finished tags go to `done`, PDUs it calls for (Data-Out
    /// for an R2T, a NOP-Out for a ping) to `out`.
    pub(crate) fn receive(
        &mut self,
        pdu: &PduRef<'_>,
        out: &mut Vec<u8>,
        done: &mut Vec<u32>,
    ) -> Result<Received, PipelineError> {
        let pdu = decode_target_pdu(pdu).map_err(|e| PipelineError::Protocol(e.to_string()))?;
        match pdu {
            TargetPdu::DataIn(d) => self.data_in_pdu(&d, done)?,
            TargetPdu::ScsiResponse(r) => self.scsi_response(&r, done)?,
            TargetPdu::ReadyToTransfer(r2t, numbers) => {
                self.note_numbers(numbers, false);
                self.ready_to_transfer(&r2t, out)?;
            }
            TargetPdu::NopIn(n) => {
                self.note_numbers(n.numbers, n.itt != TAG_NONE);
                if n.ttt != TAG_NONE {
                    // The target's ping: answer with its tag and data.
                    nop_out(
                        &NopOutPdu {
                            lun: n.lun,
                            itt: TAG_NONE,
                            ttt: n.ttt,
                            cmd_sn: self.cmd_sn,
                            exp_stat_sn: self.exp_stat_sn,
                            data: n.data,
                        },
                        DIGESTS,
                        out,
                    );
                }
            }
            TargetPdu::Logout(l) if self.logout_sent && l.itt == LOGOUT_ITT => {
                self.note_numbers(l.numbers, true);
                if l.response != LOGOUT_SUCCESS {
                    return Err(protocol(format!(
                        "logout refused with response {}",
                        l.response
                    )));
                }
                return Ok(Received::LoggedOut);
            }
            TargetPdu::AsyncMessage(a) => self.async_message(&a)?,
            TargetPdu::Reject(r) => {
                return Err(protocol(format!(
                    "the target rejected a PDU (reason {:#04x}: {})",
                    r.reason,
                    reject_reason_text(r.reason)
                )))
            }
            TargetPdu::Login(_) => return Err(protocol("a Login Response in full feature phase")),
            TargetPdu::Text(_) => return Err(protocol("a Text Response nobody asked for")),
            TargetPdu::Logout(_) => return Err(protocol("a Logout Response nobody asked for")),
            TargetPdu::TaskManagement(_) => {
                return Err(protocol("a Task Management Response nobody asked for"))
            }
        }
        Ok(Received::Progress)
    }

    fn send_command(&mut self, tag: u32, out: &mut Vec<u8>) {
        let params = self.params;
        let cmd_sn = self.cmd_sn;
        self.cmd_sn = self.cmd_sn.wrapping_add(1);
        let task = &mut self.tasks[tag as usize];
        debug_assert_eq!(task.state, TaskState::Waiting);
        task.state = TaskState::Issued;
        task.received_bytes = 0;
        let len = task.len_bytes;
        let write = task.direction == Direction::Write;
        let segment_max = params.target_max_recv;
        let (immediate, unsolicited_end) = if write {
            let first_burst = len.min(params.first_burst);
            let immediate = if params.immediate_data {
                first_burst.min(segment_max)
            } else {
                0
            };
            let end = if params.initial_r2t {
                immediate
            } else {
                first_burst
            };
            (immediate, end)
        } else {
            (0, 0)
        };
        scsi_command(
            &CommandPdu {
                final_: unsolicited_end == immediate,
                lun: self.lun_field,
                itt: tag,
                cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                read: task.direction == Direction::Read,
                write,
                expected_len: len,
                cdb: task.cdb,
                data: &task.buf[..immediate as usize],
            },
            DIGESTS,
            out,
        );
        if unsolicited_end > immediate {
            send_data_out(
                task,
                self.lun_field,
                tag,
                TAG_NONE,
                self.exp_stat_sn,
                (immediate, unsolicited_end),
                segment_max,
                out,
            );
        }
    }

    fn data_in_pdu(&mut self, d: &DataIn<'_>, done: &mut Vec<u32>) -> Result<(), PipelineError> {
        self.note_numbers(d.numbers, d.status.is_some());
        let task = self.issued(d.itt, "Data-In")?;
        if task.direction != Direction::Read {
            return Err(protocol(format!(
                "Data-In for task {} that reads nothing",
                d.itt
            )));
        }
        let start = d.offset as usize;
        let end = start + d.data.len();
        if end > task.len_bytes as usize {
            return Err(protocol(format!(
                "Data-In for bytes {start}..{end} of a {}-byte read",
                task.len_bytes
            )));
        }
        task.buf[start..end].copy_from_slice(d.data);
        task.received_bytes = task.received_bytes.saturating_add(d.data.len() as u32);
        if let Some((status, _residual)) = d.status {
            self.finish(d.itt, RESPONSE_COMPLETED, status, &[], done)?;
        }
        Ok(())
    }

    fn scsi_response(
        &mut self,
        r: &ScsiResponse<'_>,
        done: &mut Vec<u32>,
    ) -> Result<(), PipelineError> {
        self.note_numbers(r.numbers, true);
        self.issued(r.itt, "SCSI Response")?;
        self.finish(r.itt, r.response, r.status, r.sense, done)
    }

    /// A task's status arrived: it is done, sent again (UNIT ATTENTION), or failed.
    fn finish(
        &mut self,
        tag: u32,
        response: u8,
        status: u8,
        sense: &[u8],
        done: &mut Vec<u32>,
    ) -> Result<(), PipelineError> {
        let task = &mut self.tasks[tag as usize];
        if response == RESPONSE_COMPLETED && status == STATUS_GOOD {
            task.state = TaskState::Idle;
            done.push(tag);
            return Ok(());
        }
        let sense = Sense::decode(sense);
        let unit_attention = status == STATUS_CHECK_CONDITION
            && sense
                .as_ref()
                .is_some_and(|s| s.key == weft_scsi::sense::key::UNIT_ATTENTION);
        if response == RESPONSE_COMPLETED
            && unit_attention
            && task.unit_attentions < UNIT_ATTENTION_RETRIES_MAX
        {
            task.unit_attentions += 1;
            task.state = TaskState::Waiting;
            self.waiting.push_front(tag);
            return Ok(());
        }
        task.state = TaskState::Idle;
        Err(PipelineError::Command {
            tag,
            failure: ScsiFailure {
                response,
                status,
                sense,
            },
        })
    }

    fn ready_to_transfer(
        &mut self,
        r2t: &ReadyToTransfer,
        out: &mut Vec<u8>,
    ) -> Result<(), PipelineError> {
        let lun_field = self.lun_field;
        let exp_stat_sn = self.exp_stat_sn;
        let segment_max = self.params.target_max_recv;
        let task = self.issued(r2t.itt, "R2T")?;
        let end = u64::from(r2t.offset) + u64::from(r2t.len);
        if task.direction != Direction::Write || r2t.len == 0 || end > u64::from(task.len_bytes) {
            return Err(protocol(format!(
                "R2T for bytes {}..{end} of task {} ({:?}, {} bytes)",
                r2t.offset, r2t.itt, task.direction, task.len_bytes
            )));
        }
        send_data_out(
            task,
            lun_field,
            r2t.itt,
            r2t.ttt,
            exp_stat_sn,
            (r2t.offset, r2t.offset + r2t.len),
            segment_max,
            out,
        );
        Ok(())
    }

    fn async_message(&mut self, a: &AsyncMessage<'_>) -> Result<(), PipelineError> {
        self.note_numbers(a.numbers, false);
        if a.event == ASYNC_EVENT_SCSI {
            // A SCSI asynchronous event (sense in the data): nothing a benchmark acts on.
            return Ok(());
        }
        let what = match a.event {
            1 => "asks us to log out",
            2 => "is dropping the connection",
            3 => "is dropping the session",
            4 => "asks to renegotiate parameters",
            _ => "sent an unknown asynchronous event",
        };
        Err(protocol(format!(
            "the target {what} (async event {})",
            a.event
        )))
    }

    /// The outstanding task `itt` names, or a protocol error.
    fn issued(&mut self, itt: u32, what: &str) -> Result<&mut Task, PipelineError> {
        self.tasks
            .get_mut(itt as usize)
            .filter(|t| t.state == TaskState::Issued)
            .ok_or_else(|| {
                protocol(format!(
                    "{what} for task tag {itt}, which is not outstanding"
                ))
            })
    }

    /// Take the window and status numbers a target PDU carries (RFC 7143 §4.2.2.1): only
    /// forward, and never a window that would be negative.
    fn note_numbers(&mut self, n: Numbers, carries_status: bool) {
        if !serial_lt(n.max_cmd_sn, n.exp_cmd_sn.wrapping_sub(1)) {
            if serial_lt(self.exp_cmd_sn, n.exp_cmd_sn) {
                self.exp_cmd_sn = n.exp_cmd_sn;
            }
            if serial_lt(self.max_cmd_sn, n.max_cmd_sn) {
                self.max_cmd_sn = n.max_cmd_sn;
            }
        }
        if carries_status && !serial_lt(n.stat_sn, self.exp_stat_sn) {
            self.exp_stat_sn = n.stat_sn.wrapping_add(1);
        }
    }
}

/// Data-Out PDUs for bytes `range` of `task`'s buffer, each at most `segment_max` bytes, DataSN
/// from 0, F on the last.
#[allow(clippy::too_many_arguments)]
fn send_data_out(
    task: &Task,
    lun: u64,
    itt: u32,
    ttt: u32,
    exp_stat_sn: u32,
    (start, end): (u32, u32),
    segment_max: u32,
    out: &mut Vec<u8>,
) {
    let mut offset = start;
    let mut data_sn = 0;
    while offset < end {
        let len = (end - offset).min(segment_max);
        data_out(
            &DataOutPdu {
                lun,
                itt,
                ttt,
                exp_stat_sn,
                data_sn,
                offset,
                final_: offset + len == end,
                data: &task.buf[offset as usize..(offset + len) as usize],
            },
            DIGESTS,
            out,
        );
        offset += len;
        data_sn += 1;
    }
}

fn protocol(reason: impl Into<String>) -> PipelineError {
    PipelineError::Protocol(reason.into())
}

fn reject_reason_text(reason: u8) -> &'static str {
    match reason {
        0x02 => "data digest error",
        0x03 => "SNACK reject",
        0x04 => "protocol error",
        0x05 => "command not supported",
        0x06 => "immediate command reject",
        0x07 => "task in progress",
        0x08 => "invalid data ack",
        0x09 => "invalid PDU field",
        0x0a => "long operation reject",
        0x0c => "waiting for logout",
        _ => "unknown reason",
    }
}

#[cfg(test)]
mod tests;
