//! The snapshot scheduler: fires the engine's snapshot schedules (`weft_engine::schedules`) when
//! they are due and prunes each volume's scheduled snapshots to its retention.
//!
//! One task per server, beside the API, woken every [`Clock::tick`]. A due schedule takes
//! `VOLUME@auto-YYYYMMDD-HHMMSS`, notes the run in the cluster state (so a restart neither
//! repeats nor forgets it: a run missed while the server was down fires once at start), then
//! deletes the volume's scheduled snapshots that retention no longer keeps. A snapshot that
//! clients have open, that clones use or that is mapped to a host is not pruned (it is retried
//! at the next run): the scheduler never cuts anyone off.
//!
//! The clock: the wall clock, or for tests a clock that runs `scale` times as fast (the hidden
//! `--test-clock-scale` of `weft serve`; `--every 1h` then fires every 3600/scale s). A scaled
//! clock starts at the later of the wall clock and the schedules' last runs, so it never runs
//! backwards across a restart.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_util::sync::CancellationToken;
use weft_engine::schedules::{auto_snapshot_name, auto_snapshot_time, retained};
use weft_engine::{Engine, EngineError, ScheduleRecord, SNAPSHOT_SEPARATOR};

use crate::reservation_records::ReservationRecords;
use crate::sessions::Sessions;

/// How often the scheduler looks for due schedules on the wall clock: a schedule fires at most
/// once a minute, so a second late is nothing.
const TICK_WALL: Duration = Duration::from_secs(1);
/// The shortest tick of a scaled clock (one scheduler minute, but no busier than this).
const TICK_MIN: Duration = Duration::from_millis(10);

/// The scheduler's clock (see the module doc). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Clock(Arc<ClockInner>);

#[derive(Debug)]
struct ClockInner {
    /// 1: the wall clock.
    scale: u64,
    anchor_unix_s: u64,
    started: Instant,
}

impl Default for Clock {
    fn default() -> Clock {
        Clock::scaled(1, 0)
    }
}

impl Clock {
    /// A clock `scale` times as fast as the wall clock, starting at the later of now and
    /// `not_before_unix_s`. Scale 1 is the wall clock itself.
    pub fn scaled(scale: u64, not_before_unix_s: u64) -> Clock {
        Clock(Arc::new(ClockInner {
            scale: scale.max(1),
            anchor_unix_s: wall_unix_s().max(not_before_unix_s),
            started: Instant::now(),
        }))
    }

    /// The scheduler's time, in seconds since the Unix epoch.
    pub fn now_unix_s(&self) -> u64 {
        let c = &self.0;
        if c.scale == 1 {
            return wall_unix_s();
        }
        let elapsed_ms = u64::try_from(c.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        c.anchor_unix_s
            .saturating_add(elapsed_ms.saturating_mul(c.scale) / 1000)
    }

    /// How long the scheduler sleeps between looks.
    pub fn tick(&self) -> Duration {
        if self.0.scale == 1 {
            TICK_WALL
        } else {
            (Duration::from_secs(60) / u32::try_from(self.0.scale).unwrap_or(u32::MAX))
                .max(TICK_MIN)
        }
    }
}

/// Run the schedules until `stop`.
pub async fn run(
    engine: Arc<Engine>,
    sessions: Arc<Sessions>,
    reservations: ReservationRecords,
    clock: Clock,
    stop: CancellationToken,
) {
    loop {
        let (engine, sessions, reservations, now) = (
            Arc::clone(&engine),
            Arc::clone(&sessions),
            reservations.clone(),
            clock.now_unix_s(),
        );
        let _ = tokio::task::spawn_blocking(move || {
            for schedule in engine.due_schedules(now) {
                fire(&engine, &sessions, &reservations, &schedule, now);
            }
        })
        .await;
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(clock.tick()) => {}
        }
    }
}

/// The latest run of any schedule (a scaled clock starts after it).
pub fn last_run_unix_s(engine: &Engine) -> u64 {
    engine
        .snapshot_schedules()
        .iter()
        .filter_map(|s| s.last_run_unix_s)
        .max()
        .unwrap_or(0)
}

/// Take the schedule's snapshot, note the run, prune. Failures are logged and retried at the
/// next run: a schedule must not stop because one run could not snapshot.
fn fire(
    engine: &Engine,
    sessions: &Sessions,
    reservations: &ReservationRecords,
    schedule: &ScheduleRecord,
    now_unix_s: u64,
) {
    let volume = schedule.volume.as_str();
    match engine.create_snapshot(volume, &auto_snapshot_name(now_unix_s)) {
        Ok(_) | Err(EngineError::SnapshotExists { .. }) => {}
        Err(error) => tracing::warn!(volume, %error, "scheduled snapshot failed"),
    }
    if let Err(error) = engine.schedule_ran(volume, now_unix_s) {
        tracing::warn!(volume, %error, "could not record a scheduled snapshot's run");
    }
    prune(engine, sessions, reservations, schedule);
}

/// Delete the volume's scheduled snapshots that retention does not keep.
fn prune(
    engine: &Engine,
    sessions: &Sessions,
    reservations: &ReservationRecords,
    schedule: &ScheduleRecord,
) {
    let prefix = format!("{}{SNAPSHOT_SEPARATOR}", schedule.volume);
    let taken: Vec<(String, u64)> = engine
        .list_images()
        .into_iter()
        .filter(|i| i.read_only)
        .filter_map(|i| {
            let at = auto_snapshot_time(i.name.strip_prefix(&prefix)?)?;
            Some((i.name, at))
        })
        .collect();
    let stamps: Vec<u64> = taken.iter().map(|(_, at)| *at).collect();
    let keep = retained(&stamps, schedule.keep, schedule.daily);
    for (name, at) in taken.iter().filter(|(_, at)| !keep.contains(at)) {
        if !sessions.of_export(name).is_empty() {
            tracing::info!(snapshot = %name, "scheduled snapshot kept past retention: clients have it open");
            continue;
        }
        match engine.delete_snapshot(name, false) {
            Ok(()) => {
                tracing::info!(snapshot = %name, taken_unix_s = at, "scheduled snapshot pruned");
                if let Err(error) = reservations.remove(name) {
                    tracing::warn!(snapshot = %name, %error, "could not remove the reservation record of a pruned snapshot");
                }
            }
            Err(error) => {
                tracing::warn!(snapshot = %name, %error, "scheduled snapshot kept past retention");
            }
        }
    }
}

fn wall_unix_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scaled_clock_runs_fast_and_never_before_its_floor() {
        let far = wall_unix_s() + 10 * 86_400;
        let clock = Clock::scaled(3600, far);
        let t0 = clock.now_unix_s();
        assert!(t0 >= far);
        std::thread::sleep(Duration::from_millis(50));
        // 50 ms at 3600x is three minutes.
        assert!(
            clock.now_unix_s() >= t0 + 150,
            "{t0} {}",
            clock.now_unix_s()
        );
        // One scheduler minute: 60 s / 3600.
        assert!((Duration::from_millis(16)..Duration::from_millis(17)).contains(&clock.tick()));
        assert_eq!(Clock::default().tick(), TICK_WALL);
        let wall = Clock::default().now_unix_s();
        assert!(wall.abs_diff(wall_unix_s()) <= 1);
    }
}
