//! A model of the journal-state rule (`handover.rs`) under random, seeded sequences of
//! faults: writes acknowledged with and without the mirror, releases into stripes, lost and
//! delayed mirror messages (the link drops), a partner dying before or during re-sync, a
//! partner machine lost with its disk, re-syncs. At every step the owner may die; then
//! every c.node the real `may_take_over` lets take over must find every acknowledged write
//! in what it would recover from: the stripes, plus its own journal (the owner itself) or
//! its newest complete mirror generation (the partner), or nothing (anyone else).

use std::collections::BTreeSet;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use weft_meta::EmbeddedMetaStore;
use weft_meta::MetaStore;

use super::handover::{may_take_over, Coverage, Handover};

/// A caught-up mirror in the model holds the owner's whole journal.
fn caught_up() -> Option<Coverage> {
    Some(Coverage {
        received: u64::MAX,
        synced: u64::MAX,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Down,
    /// Connected, resending the journal; writes are acknowledged without waiting for it.
    Resyncing,
    CaughtUp,
}

struct Model {
    kv: Arc<dyn MetaStore>,
    owner: Handover,
    next_seq: u64,
    /// Records in the owner's journal (not yet released).
    journal: BTreeSet<u64>,
    /// Records up to this are in durable stripes.
    released: u64,
    acked: BTreeSet<u64>,
    partner_up: bool,
    link: Link,
    /// The partner's mirror generations: records, complete.
    gens: Vec<(BTreeSet<u64>, bool)>,
    log: Vec<String>,
}

impl Model {
    fn new() -> Model {
        let kv: Arc<dyn MetaStore> = Arc::new(EmbeddedMetaStore::in_memory());
        let owner = Handover::start(
            Arc::clone(&kv),
            weft_engine::ShardId::default(),
            "A".into(),
            Some("b:1".into()),
            0,
        )
        .unwrap();
        Model {
            kv,
            owner,
            next_seq: 1,
            journal: BTreeSet::new(),
            released: 0,
            acked: BTreeSet::new(),
            partner_up: true,
            link: Link::Down,
            gens: Vec::new(),
            log: Vec::new(),
        }
    }

    fn step(&mut self, rng: &mut StdRng) {
        match rng.random_range(0..100) {
            0..=49 => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.journal.insert(seq);
                // The record goes to the partner when a connection is up (resending or not).
                let sent = self.link != Link::Down;
                if sent {
                    self.gens
                        .last_mut()
                        .expect("a connection has a generation")
                        .0
                        .insert(seq);
                }
                // Acknowledged as mirrored only on a caught-up connection that answered.
                let mirrored = self.link == Link::CaughtUp;
                self.owner.before_ack(seq, mirrored, &|| None).unwrap();
                self.acked.insert(seq);
                self.log.push(format!("ack {seq} mirrored={mirrored}"));
            }
            50..=61 => {
                let hwm = rng.random_range(self.released..self.next_seq);
                self.released = hwm;
                self.journal.retain(|&s| s > hwm);
                self.owner.released(hwm);
                self.log.push(format!("release {hwm}"));
            }
            62..=69 => {
                self.link = Link::Down;
                self.log.push("link drops (lost or late answers)".into());
            }
            70..=75 => {
                self.partner_up = false;
                self.link = Link::Down;
                self.log.push("partner process dies".into());
            }
            76..=78 => {
                self.partner_up = false;
                self.link = Link::Down;
                self.gens.clear();
                self.log.push("partner machine lost with its disk".into());
            }
            79..=89 => {
                if self.link == Link::Down {
                    self.partner_up = true;
                    self.link = Link::Resyncing;
                    // A new generation starts with the owner's whole journal, read from disk.
                    self.gens.push((self.journal.clone(), false));
                    self.log.push("partner connects; resending".into());
                }
            }
            _ => {
                if self.link == Link::Resyncing {
                    self.link = Link::CaughtUp;
                    let n = self.gens.len();
                    self.gens.last_mut().unwrap().1 = true;
                    self.gens.drain(..n - 1);
                    self.owner.mirror_caught_up("B", &caught_up);
                    self.log.push("mirror caught up".into());
                }
            }
        }
    }

    /// The owner dies now: whoever may take over must have every acknowledged write.
    fn check_takeovers(&self) {
        let newest_complete = self.gens.iter().rev().find(|g| g.1).map(|g| &g.0);
        for who in ["A", "B", "C"] {
            let holds = |owner: &str| owner == "A" && who == "B" && newest_complete.is_some();
            let allowed =
                may_take_over(&*self.kv, weft_engine::ShardId::default(), who, &holds).unwrap();
            if allowed.is_err() {
                continue;
            }
            let recovers: BTreeSet<u64> = match who {
                "A" => self.journal.clone(),
                "B" => newest_complete.cloned().unwrap_or_default(),
                _ => BTreeSet::new(),
            };
            for &seq in self.acked.iter().filter(|&&s| s > self.released) {
                assert!(
                    recovers.contains(&seq),
                    "{who} may take over but lacks acknowledged record {seq}; history:\n{}",
                    self.log.join("\n")
                );
            }
        }
    }
}

#[test]
fn no_successor_the_journal_state_admits_lacks_an_acknowledged_write() {
    for seed in 0..300u64 {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut m = Model::new();
        for _ in 0..150 {
            m.step(&mut rng);
            m.check_takeovers();
        }
    }
}

#[test]
fn the_partner_is_admitted_when_it_holds_everything() {
    // Not only safe but useful: a caught-up partner of a busy owner may take over.
    let mut m = Model::new();
    m.link = Link::Resyncing;
    m.gens.push((BTreeSet::new(), false));
    m.link = Link::CaughtUp;
    m.gens[0].1 = true;
    m.owner.mirror_caught_up("B", &caught_up);
    for _ in 0..20 {
        let seq = m.next_seq;
        m.next_seq += 1;
        m.journal.insert(seq);
        m.gens[0].0.insert(seq);
        m.owner.before_ack(seq, true, &|| None).unwrap();
        m.acked.insert(seq);
    }
    assert!(
        may_take_over(&*m.kv, weft_engine::ShardId::default(), "B", &|o| o == "A")
            .unwrap()
            .is_ok()
    );
    assert!(
        may_take_over(&*m.kv, weft_engine::ShardId::default(), "C", &|_| false)
            .unwrap()
            .is_err()
    );
    m.check_takeovers();
}
