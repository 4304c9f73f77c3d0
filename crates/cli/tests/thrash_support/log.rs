//! The event log: every fault and check with its time since the start, its kind and target,
//! printed as it happens and again in full at the end (or at a failure), plus counts by kind.

use std::collections::BTreeMap;
use std::time::Instant;

#[derive(Clone, Debug)]
pub struct Event {
    pub secs: f64,
    pub kind: String,
    pub target: String,
    pub detail: String,
}

#[derive(Debug)]
pub struct EventLog {
    t0: Instant,
    seed: u64,
    events: Vec<Event>,
}

impl EventLog {
    pub fn new(seed: u64) -> EventLog {
        EventLog {
            t0: Instant::now(),
            seed,
            events: Vec::new(),
        }
    }

    pub fn secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }

    /// Records and prints one event.
    pub fn record(&mut self, kind: &str, target: &str, detail: &str) {
        let e = Event {
            secs: self.secs(),
            kind: kind.into(),
            target: target.into(),
            detail: detail.into(),
        };
        eprintln!(
            "[thrash seed={} +{:.1}s] EVENT {}",
            self.seed,
            e.secs,
            line(&e)
        );
        self.events.push(e);
    }

    /// The whole log, one event a line.
    pub fn text(&self) -> String {
        let mut s = String::new();
        for e in &self.events {
            s.push_str(&format!("  +{:7.1}s {}\n", e.secs, line(e)));
        }
        s
    }

    /// How many faults of each kind (the `FAULT` events, by their detail).
    pub fn faults_by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for e in self.events.iter().filter(|e| e.kind == "FAULT") {
            *m.entry(e.detail.clone()).or_insert(0) += 1;
        }
        m
    }

    /// How many events of each kind (checks and notes included).
    pub fn by_kind(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for e in &self.events {
            *m.entry(e.kind.clone()).or_insert(0) += 1;
        }
        m
    }
}

fn line(e: &Event) -> String {
    let mut s = format!("{:<22} {:<14}", e.kind, e.target);
    if !e.detail.is_empty() {
        s.push(' ');
        s.push_str(&e.detail);
    }
    s
}
