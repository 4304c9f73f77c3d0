//! The acknowledgements waiting for the partner's answer without a thread parked on them
//! ([`super::mirror_link::Link::wait_then`]): each is a seq, what it waits for, its
//! connection, its deadline and the callback that finishes it. A plain list, no I/O and no
//! locking of its own: the link keeps it under its state lock, so an answer and a new wait
//! cannot pass each other, and runs the callbacks once that lock is released.

use std::collections::VecDeque;
use std::time::Instant;

/// What a wait for the partner waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Wait {
    /// `RECEIVED`: the record is in the partner's journal.
    Received,
    /// `SYNCED`: the partner's journal is synced up to it.
    Synced,
}

/// Finishes one acknowledgement: `true` once the partner answered, `false` when the mirror
/// degraded first (the caller acknowledges from the local journal alone, as the blocking
/// wait's `false` does).
pub(super) type Answered = Box<dyn FnOnce(bool) + Send>;

/// One acknowledgement waiting for connection `connection`'s answer.
pub(super) struct Deferred {
    seq: u64,
    what: Wait,
    connection: u64,
    deadline: Instant,
    done: Answered,
}

/// The waiting acknowledgements, oldest first (so the first one's deadline is the nearest).
#[derive(Default)]
pub(super) struct DeferredWaits {
    list: VecDeque<Deferred>,
}

impl std::fmt::Debug for DeferredWaits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeferredWaits")
            .field("waiting", &self.list.len())
            .finish()
    }
}

/// Callbacks taken from the list, to run once the link's lock is released.
#[must_use = "the callbacks finish acknowledgements: run them"]
pub(super) struct Ready {
    done: Vec<Answered>,
    answered: bool,
}

impl Ready {
    /// Nothing to finish.
    pub(super) fn none() -> Ready {
        Ready {
            done: Vec::new(),
            answered: true,
        }
    }

    /// Finish them all (without the link's lock held, nor its reader role).
    pub(super) fn run(self) {
        for done in self.done {
            done(self.answered);
        }
    }
}

impl DeferredWaits {
    pub(super) fn push(
        &mut self,
        seq: u64,
        what: Wait,
        connection: u64,
        deadline: Instant,
        done: Answered,
    ) {
        self.list.push_back(Deferred {
            seq,
            what,
            connection,
            deadline,
            done,
        });
    }

    pub(super) fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// Whether the oldest wait is past its deadline at `now`.
    pub(super) fn overdue(&self, now: Instant) -> bool {
        self.list.front().is_some_and(|d| now >= d.deadline)
    }

    /// The waits on `connection` the partner has now answered (`received`, `synced`).
    pub(super) fn take_answered(&mut self, connection: u64, received: u64, synced: u64) -> Ready {
        let is_answered = |d: &Deferred| {
            d.connection == connection
                && match d.what {
                    Wait::Received => received >= d.seq,
                    Wait::Synced => synced >= d.seq,
                }
        };
        self.take(is_answered, true)
    }

    /// Every wait on `connection`, which ended: the partner will not answer them.
    pub(super) fn take_ended(&mut self, connection: u64) -> Ready {
        self.take(|d| d.connection == connection, false)
    }

    fn take(&mut self, which: impl Fn(&Deferred) -> bool, answered: bool) -> Ready {
        let mut done = Vec::new();
        if self.list.iter().any(&which) {
            let mut kept = VecDeque::with_capacity(self.list.len());
            for d in self.list.drain(..) {
                if which(&d) {
                    done.push(d.done);
                } else {
                    kept.push_back(d);
                }
            }
            self.list = kept;
        }
        Ready { done, answered }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use super::*;

    /// What the callbacks got: (seq, answered), in the order they ran.
    type Got = Arc<Mutex<Vec<(u64, bool)>>>;

    fn recorder() -> (Got, impl Fn(u64) -> Answered) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let make = {
            let got = Arc::clone(&got);
            move |seq: u64| -> Answered {
                let got = Arc::clone(&got);
                Box::new(move |answered| got.lock().unwrap().push((seq, answered)))
            }
        };
        (got, make)
    }

    #[test]
    fn an_answer_finishes_only_the_waits_it_covers() {
        let (got, done) = recorder();
        let now = Instant::now();
        let mut waits = DeferredWaits::default();
        waits.push(1, Wait::Received, 7, now, done(1));
        waits.push(2, Wait::Synced, 7, now, done(2));
        waits.push(3, Wait::Received, 7, now, done(3));
        waits.push(1, Wait::Received, 8, now, done(10));
        waits.take_answered(7, 2, 1).run();
        assert_eq!(*got.lock().unwrap(), vec![(1, true)]);
        waits.take_answered(7, 3, 2).run();
        assert_eq!(*got.lock().unwrap(), vec![(1, true), (2, true), (3, true)]);
        assert!(!waits.is_empty(), "the other connection's wait stays");
    }

    #[test]
    fn an_ended_connection_fails_its_waits_and_only_its() {
        let (got, done) = recorder();
        let now = Instant::now();
        let mut waits = DeferredWaits::default();
        waits.push(5, Wait::Received, 1, now, done(5));
        waits.push(6, Wait::Received, 2, now, done(6));
        waits.take_ended(1).run();
        assert_eq!(*got.lock().unwrap(), vec![(5, false)]);
        waits.take_ended(2).run();
        assert_eq!(*got.lock().unwrap(), vec![(5, false), (6, false)]);
        assert!(waits.is_empty());
    }

    #[test]
    fn the_oldest_wait_sets_the_deadline() {
        let (_got, done) = recorder();
        let now = Instant::now();
        let mut waits = DeferredWaits::default();
        assert!(!waits.overdue(now));
        waits.push(1, Wait::Received, 1, now + Duration::from_secs(2), done(1));
        waits.push(2, Wait::Received, 1, now + Duration::from_secs(3), done(2));
        assert!(!waits.overdue(now + Duration::from_secs(1)));
        assert!(waits.overdue(now + Duration::from_secs(2)));
        waits.take_answered(1, 1, 0).run();
        assert!(!waits.overdue(now + Duration::from_secs(2)));
    }
}
