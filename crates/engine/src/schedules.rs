//! Snapshot schedules with retention, as sanoid and arrays' protection policies keep them:
//! a volume's schedule takes a snapshot `VOLUME@auto-YYYYMMDD-HHMMSS` (UTC) every `every_s`
//! seconds and keeps the newest `keep` of them, plus the first one of each of the newest
//! `daily` days that have one (grandfather-father-son: `--every 1h --keep 24 --daily 7` keeps a
//! day of hourly snapshots and a week of dailies).
//!
//! Schedules live in the cluster state beside the volumes (committed the same way, so they
//! survive restarts and failovers, follow a rename and go with their volume). The time a
//! snapshot was taken is in its name, so retention is a pure function of the names
//! ([`retained`]): nothing else records which snapshots a schedule made, and the `auto-` prefix
//! is the schedule's (a snapshot a user names that way is pruned like one it took).
//!
//! This module keeps the operations on the records; the records and the pure rules are in
//! [`crate::schedule_records`], the clock and the firing in the server (`snapshot_scheduler`), which asks [`Engine::due_schedules`] what to run.

use crate::engine::Engine;
use crate::error::EngineError;
use crate::metastore::ClusterState;
use crate::schedule_records::check;
pub use crate::schedule_records::{
    auto_snapshot_name, auto_snapshot_time, retained, ScheduleRecord, AUTO_PREFIX, EVERY_MIN_S,
    RETAINED_MAX,
};

impl Engine {
    /// Set (or replace) the schedule of `volume`; `now_unix_s` is the scheduler's clock.
    pub fn set_snapshot_schedule(
        &self,
        volume: &str,
        every_s: u64,
        keep: u32,
        daily: u32,
        now_unix_s: u64,
    ) -> Result<ScheduleRecord, EngineError> {
        check(every_s, keep, daily)?;
        let mut meta = self.shared.meta.lock();
        if !meta.state.volumes.iter().any(|v| v.name == volume) {
            return Err(EngineError::UnknownVolume {
                name: volume.to_string(),
            });
        }
        let record = ScheduleRecord {
            volume: volume.to_string(),
            every_s,
            keep,
            daily,
            created_unix_s: now_unix_s,
            last_run_unix_s: None,
        };
        let mut next = meta.state.clone();
        next.snapshot_schedules.retain(|s| s.volume != volume);
        next.snapshot_schedules.push(record.clone());
        next.snapshot_schedules
            .sort_by(|a, b| a.volume.cmp(&b.volume));
        meta.commit(next)?;
        tracing::info!(volume, every_s, keep, daily, "snapshot schedule set");
        Ok(record)
    }

    /// Every schedule, by volume name.
    pub fn snapshot_schedules(&self) -> Vec<ScheduleRecord> {
        self.shared.meta.lock().state.snapshot_schedules.clone()
    }

    /// Remove the schedule of `volume` (its snapshots stay).
    pub fn remove_snapshot_schedule(&self, volume: &str) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        if !meta
            .state
            .snapshot_schedules
            .iter()
            .any(|s| s.volume == volume)
        {
            return Err(EngineError::NoSchedule {
                volume: volume.to_string(),
            });
        }
        let mut next = meta.state.clone();
        next.snapshot_schedules.retain(|s| s.volume != volume);
        meta.commit(next)?;
        tracing::info!(volume, "snapshot schedule removed");
        Ok(())
    }

    /// The schedules due at `now_unix_s`.
    pub fn due_schedules(&self, now_unix_s: u64) -> Vec<ScheduleRecord> {
        let meta = self.shared.meta.lock();
        meta.state
            .snapshot_schedules
            .iter()
            .filter(|s| s.next_run_unix_s() <= now_unix_s)
            .cloned()
            .collect()
    }

    /// Note that the schedule of `volume` fired at `at_unix_s` (it may have been removed
    /// meanwhile: then nothing happens).
    pub fn schedule_ran(&self, volume: &str, at_unix_s: u64) -> Result<(), EngineError> {
        let mut meta = self.shared.meta.lock();
        if !meta
            .state
            .snapshot_schedules
            .iter()
            .any(|s| s.volume == volume)
        {
            return Ok(());
        }
        let mut next = meta.state.clone();
        for s in &mut next.snapshot_schedules {
            if s.volume == volume {
                s.last_run_unix_s = Some(at_unix_s);
            }
        }
        Ok(meta.commit(next)?)
    }
}

/// A deleted volume's schedule goes with it.
pub(crate) fn forget_volume(next: &mut ClusterState, volume: &str) {
    next.snapshot_schedules.retain(|s| s.volume != volume);
}
