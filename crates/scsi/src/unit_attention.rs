//! Unit attention conditions pending per I_T nexus (SAM-5 5.14): the ones persistent
//! reservations establish for other nexuses (RESERVATIONS PREEMPTED, RESERVATIONS RELEASED,
//! REGISTRATIONS PREEMPTED). Each nexus reports its own, oldest first, one per command.
//!
//! The transport keeps its own reset unit attention (POWER ON, RESET, OR BUS DEVICE RESET
//! OCCURRED) and reports it first: it has the higher priority. Bounded: a nexus keeps at most
//! [`ATTENTIONS_PER_NEXUS_MAX`] distinct conditions, and at most [`ATTENTION_NEXUSES_MAX`]
//! nexuses have any pending; past either bound new conditions are dropped (an initiator that
//! never returns must not grow the state).

use std::collections::{HashMap, VecDeque};

use crate::nexus::Nexus;
use crate::reservations::REGISTRATIONS_MAX;

/// Conditions one nexus may have pending. A nexus can be told of each PR event at most once
/// per PERSISTENT RESERVE OUT command, and duplicates are merged: a few suffice.
pub(crate) const ATTENTIONS_PER_NEXUS_MAX: usize = 8;
/// Nexuses with conditions pending: every registrant, and as many again that were removed
/// and not heard from since.
pub(crate) const ATTENTION_NEXUSES_MAX: usize = 2 * REGISTRATIONS_MAX;

/// Pending unit attentions by nexus, as (ASC, ASCQ) pairs.
#[derive(Debug, Default)]
pub(crate) struct UnitAttentions {
    pending: HashMap<Nexus, VecDeque<(u8, u8)>>,
}

impl UnitAttentions {
    /// Queue `code` for `nexus`, unless it is already pending there or a bound is reached.
    pub(crate) fn push(&mut self, nexus: &Nexus, code: (u8, u8)) {
        if !self.pending.contains_key(nexus) && self.pending.len() >= ATTENTION_NEXUSES_MAX {
            return;
        }
        let queue = self.pending.entry(nexus.clone()).or_default();
        if !queue.contains(&code) && queue.len() < ATTENTIONS_PER_NEXUS_MAX {
            queue.push_back(code);
        }
    }

    /// The oldest condition pending for `nexus`, removed.
    pub(crate) fn take(&mut self, nexus: &Nexus) -> Option<(u8, u8)> {
        let queue = self.pending.get_mut(nexus)?;
        let code = queue.pop_front();
        if queue.is_empty() {
            self.pending.remove(nexus);
        }
        code
    }

    /// Whether any nexus has a condition pending.
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_nexus_gets_its_own_in_order_without_duplicates() {
        let (a, b) = (Nexus::new("a", 1), Nexus::new("b", 1));
        let mut q = UnitAttentions::default();
        q.push(&a, (0x2a, 3));
        q.push(&a, (0x2a, 5));
        q.push(&a, (0x2a, 3));
        q.push(&b, (0x2a, 4));
        assert_eq!(q.take(&a), Some((0x2a, 3)));
        assert_eq!(q.take(&a), Some((0x2a, 5)));
        assert_eq!(q.take(&a), None);
        assert_eq!(q.take(&a.through_port(2)), None);
        assert!(!q.is_empty());
        assert_eq!(q.take(&b), Some((0x2a, 4)));
        assert!(q.is_empty());
    }

    #[test]
    fn queues_and_nexuses_are_bounded() {
        let a = Nexus::new("a", 1);
        let mut q = UnitAttentions::default();
        for ascq in 0..20 {
            q.push(&a, (0x2a, ascq));
        }
        let mut taken = 0;
        while q.take(&a).is_some() {
            taken += 1;
        }
        assert_eq!(taken, ATTENTIONS_PER_NEXUS_MAX);
        for i in 0..ATTENTION_NEXUSES_MAX + 5 {
            q.push(&Nexus::new(i.to_string(), 1), (0x2a, 3));
        }
        assert_eq!(q.pending.len(), ATTENTION_NEXUSES_MAX);
    }
}
