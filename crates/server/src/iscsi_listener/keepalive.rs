//! Target-initiated NOP-In pings (RFC 7143 §11.19): a session idle for `interval` gets a
//! NOP-In with a target transfer tag, which the initiator must answer with a NOP-Out; one
//! that sends nothing for a further `2 × interval` is taken for dead and its connection is
//! closed, so a vanished host does not hold its tasks and reservations forever.
//!
//! Any PDU from the initiator counts as an answer. No I/O here: the session's reader asks
//! when to wake and what to do then.

use std::time::Duration;

use tokio::time::Instant;

/// How long a session may stay silent after a ping, as a multiple of the interval.
const ANSWER_INTERVALS: u32 = 2;

/// What the reader does when [`Keepalive::deadline`] passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Due {
    /// Send a NOP-In with this target transfer tag.
    Ping(u32),
    /// The initiator did not answer: close the connection.
    Dead,
}

#[derive(Debug)]
pub(super) struct Keepalive {
    interval: Duration,
    last_heard: Instant,
    /// When the unanswered ping went out.
    pinged: Option<Instant>,
    next_tag: u32,
}

impl Keepalive {
    pub(super) fn new(interval: Duration) -> Keepalive {
        Keepalive {
            interval,
            last_heard: Instant::now(),
            pinged: None,
            next_tag: 1,
        }
    }

    /// The initiator sent something.
    pub(super) fn heard(&mut self) {
        self.last_heard = Instant::now();
        self.pinged = None;
    }

    /// When to wake up.
    pub(super) fn deadline(&self) -> Instant {
        match self.pinged {
            Some(at) => at + self.interval * ANSWER_INTERVALS,
            None => self.last_heard + self.interval,
        }
    }

    /// The deadline passed.
    pub(super) fn due(&mut self) -> Due {
        if self.pinged.is_some() {
            return Due::Dead;
        }
        self.pinged = Some(Instant::now());
        let tag = self.next_tag;
        // Never the reserved 0xffffffff, and distinct from R2T tags only by time: the
        // initiator echoes it in a NOP-Out, which the reader recognises by its ITT.
        self.next_tag = self.next_tag.wrapping_add(1).clamp(1, u32::MAX - 1);
        Due::Ping(tag)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn pings_when_idle_and_gives_up_without_an_answer() {
        let mut k = Keepalive::new(Duration::from_secs(15));
        let start = Instant::now();
        assert_eq!(k.deadline(), start + Duration::from_secs(15));
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(k.due(), Due::Ping(1));
        assert_eq!(k.deadline(), Instant::now() + Duration::from_secs(30));
        // An answer resets it.
        k.heard();
        assert_eq!(k.deadline(), Instant::now() + Duration::from_secs(15));
        tokio::time::advance(Duration::from_secs(15)).await;
        assert_eq!(k.due(), Due::Ping(2));
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(k.due(), Due::Dead);
    }
}
