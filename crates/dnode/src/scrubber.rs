//! Scrubbing: reading every chunk back and checking it, in the background every
//! `scrub_interval` and on a client's `Scrub` request. One scrub runs at a time (a second one
//! waits), so scrubs never compete with each other for the disks. Corrupt chunks are logged at
//! warn and counted; repairing them is the c.node's job (it reconstructs from the stripe).

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use weft_chunk::{ChunkError, ChunkStore, ScrubReport};

use crate::multi_disk::MultiDiskStore;
use crate::stats::Counters;
use crate::stop::Stop;

/// Corrupt keys named in one log line; the count is always logged.
const LOGGED_CORRUPT_KEYS_MAX: usize = 16;

#[derive(Debug)]
pub(crate) struct Scrubber {
    store: Arc<MultiDiskStore>,
    counters: Arc<Counters>,
    /// Held for the length of a scrub.
    running: Mutex<()>,
}

impl Scrubber {
    pub(crate) fn new(store: Arc<MultiDiskStore>, counters: Arc<Counters>) -> Scrubber {
        Scrubber {
            store,
            counters,
            running: Mutex::new(()),
        }
    }

    /// Scrub one family, or everything; counted and logged.
    pub(crate) fn scrub(&self, family: Option<u64>) -> Result<ScrubReport, ChunkError> {
        let _one = self.running.lock();
        let report = self.store.scrub(family)?;
        self.record(&report, "request");
        Ok(report)
    }

    /// The background thread: a full pass every `interval` until stopped. A pass goes family by
    /// family so a shutdown waits for one family at most.
    pub(crate) fn run(&self, interval: Duration, stop: &Stop) {
        while !stop.wait(interval) {
            match self.pass(stop) {
                Ok(Some(report)) => self.record(&report, "background"),
                Ok(None) => return,
                Err(e) => tracing::warn!(error = %e, "background scrub failed"),
            }
        }
    }

    /// One full pass; `None` if stopped half way.
    fn pass(&self, stop: &Stop) -> Result<Option<ScrubReport>, ChunkError> {
        let mut total = ScrubReport::default();
        for family in self.store.families()? {
            if stop.is_stopped() {
                return Ok(None);
            }
            let _one = self.running.lock();
            let report = self.store.scrub(Some(family))?;
            total.checked += report.checked;
            total.corrupt.extend(report.corrupt);
        }
        Ok(Some(total))
    }

    fn record(&self, report: &ScrubReport, origin: &'static str) {
        Counters::add(&self.counters.scrubs, 1);
        Counters::add(&self.counters.chunks_scrubbed, report.checked);
        Counters::add(&self.counters.corrupt_found, report.corrupt.len() as u64);
        if report.corrupt.is_empty() {
            tracing::debug!(
                origin,
                checked = report.checked,
                "scrub found no corrupt chunk"
            );
        } else {
            let named: Vec<String> = report
                .corrupt
                .iter()
                .take(LOGGED_CORRUPT_KEYS_MAX)
                .map(ToString::to_string)
                .collect();
            tracing::warn!(origin, checked = report.checked, corrupt = report.corrupt.len(), chunks = ?named, "scrub found corrupt chunks");
        }
    }
}
