//! A session's sequence numbers in full feature phase (RFC 7143 §4.2.2): commands are
//! accepted in CmdSN order inside the window we advertise, and every response carries the
//! next StatSN. One connection per session (MaxConnections=1), so arrival order is CmdSN
//! order for everything but a retransmission or a confused initiator.

use crate::login::{LoggedIn, COMMAND_WINDOW};
use crate::response::Numbers;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequence {
    stat_sn: u32,
    exp_cmd_sn: u32,
    /// Commands received and not yet answered: the window we advertise shrinks by them, so
    /// an initiator never has more than the window outstanding however slowly they finish.
    tasks: u32,
}

/// What to do with a command given its CmdSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmdSnCheck {
    /// Next in order (or immediate): execute it.
    Accept,
    /// Outside the window or already seen: RFC 7143 says to drop it silently.
    Drop,
}

/// `a < b` in 32-bit serial number arithmetic (RFC 1982).
pub fn serial_lt(a: u32, b: u32) -> bool {
    a != b && b.wrapping_sub(a) < 1 << 31
}

impl Sequence {
    pub fn new(login: &LoggedIn) -> Sequence {
        Sequence {
            stat_sn: login.next_stat_sn,
            exp_cmd_sn: login.exp_cmd_sn,
            tasks: 0,
        }
    }

    /// Check a request's CmdSN. Immediate requests carry the current ExpCmdSN and do not
    /// advance it; a non-immediate one must be exactly the next.
    pub fn check_command(&mut self, cmd_sn: u32, immediate: bool) -> CmdSnCheck {
        if immediate {
            return CmdSnCheck::Accept;
        }
        if cmd_sn == self.exp_cmd_sn {
            self.exp_cmd_sn = self.exp_cmd_sn.wrapping_add(1);
            CmdSnCheck::Accept
        } else {
            CmdSnCheck::Drop
        }
    }

    /// A command became a task (its response comes later).
    pub fn task_started(&mut self) {
        self.tasks += 1;
    }

    /// A task ended (answered, or dropped by an abort); call before numbering its response.
    pub fn task_finished(&mut self) {
        self.tasks = self.tasks.saturating_sub(1);
    }

    /// Numbers for a response that carries status (it takes the next StatSN).
    pub fn next_status(&mut self) -> Numbers {
        let n = self.current();
        self.stat_sn = self.stat_sn.wrapping_add(1);
        n
    }

    /// Numbers for a PDU that carries no status (R2T, Data-In without status, our NOP-In).
    pub fn current(&self) -> Numbers {
        Numbers {
            stat_sn: self.stat_sn,
            exp_cmd_sn: self.exp_cmd_sn,
            max_cmd_sn: self
                .exp_cmd_sn
                .wrapping_add(COMMAND_WINDOW.saturating_sub(self.tasks))
                .wrapping_sub(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::negotiate::{SessionParams, TargetLimits};

    #[test]
    fn commands_advance_in_order_and_status_numbers_count_up_across_the_wrap() {
        let login = LoggedIn {
            initiator: "i".into(),
            target: None,
            params: SessionParams::new(&TargetLimits::default()),
            isid: [0; 6],
            tsih: 1,
            next_stat_sn: u32::MAX,
            exp_cmd_sn: u32::MAX,
        };
        let mut s = Sequence::new(&login);
        assert_eq!(s.check_command(u32::MAX, false), CmdSnCheck::Accept);
        assert_eq!(s.check_command(u32::MAX, false), CmdSnCheck::Drop);
        assert_eq!(s.check_command(5, false), CmdSnCheck::Drop);
        assert_eq!(s.check_command(0, true), CmdSnCheck::Accept);
        assert_eq!(s.check_command(0, false), CmdSnCheck::Accept);
        assert_eq!(s.next_status().stat_sn, u32::MAX);
        let n = s.next_status();
        assert_eq!(
            (n.stat_sn, n.exp_cmd_sn, n.max_cmd_sn),
            (0, 1, COMMAND_WINDOW)
        );
        assert!(serial_lt(u32::MAX, 0) && !serial_lt(0, u32::MAX));
        // Outstanding tasks close the window; finishing one opens it again.
        s.task_started();
        s.task_started();
        assert_eq!(s.current().max_cmd_sn, COMMAND_WINDOW - 2);
        s.task_finished();
        assert_eq!(s.current().max_cmd_sn, COMMAND_WINDOW - 1);
    }
}
