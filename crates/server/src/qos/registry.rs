//! Every volume's throttle on this c.node, by export name, and the thread that keeps them
//! current: every [`TICK`] it re-reads the settings from the catalog (so a change made
//! through any c.node's API, or before a restart, applies within a tick) and runs the
//! latency controller over the window just ended.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use weft_engine::group_records::GroupQosListing;
use weft_engine::qos_settings::QosSettings;
use weft_engine::Engine;

use super::controller::{LatencyController, Window, MIN_SAMPLES};
use super::volume::{QosState, VolumeQos};
use crate::ha::clock::{Clock, SystemClock};
use crate::io_stats::histogram::Buckets;

/// The controller's window, and how often settings are re-read.
pub const TICK: Duration = Duration::from_millis(100);

/// What the last window ended with, per volume: the cumulative figures to subtract.
#[derive(Debug)]
struct Mark {
    latency: Buckets,
    units: u64,
}

/// The throttles of this c.node's volumes and of their consistency groups.
#[derive(Debug)]
pub struct QosRegistry {
    clock: Arc<dyn Clock>,
    volumes: RwLock<HashMap<String, Arc<VolumeQos>>>,
    /// Groups with settings, by group name: the buckets their members share.
    groups: RwLock<HashMap<String, Arc<VolumeQos>>>,
    controller: Mutex<(LatencyController, HashMap<String, Mark>)>,
}

impl QosRegistry {
    pub fn new() -> Arc<QosRegistry> {
        QosRegistry::with_clock(SystemClock::shared())
    }

    pub fn with_clock(clock: Arc<dyn Clock>) -> Arc<QosRegistry> {
        Arc::new(QosRegistry {
            clock,
            volumes: RwLock::new(HashMap::new()),
            groups: RwLock::new(HashMap::new()),
            controller: Mutex::new((LatencyController::default(), HashMap::new())),
        })
    }

    /// The throttle of `name`, made (unlimited) if it has none yet.
    pub fn volume(&self, name: &str) -> Arc<VolumeQos> {
        if let Some(v) = self.volumes.read().get(name) {
            return Arc::clone(v);
        }
        let mut volumes = self.volumes.write();
        Arc::clone(
            volumes
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(VolumeQos::new(name, Arc::clone(&self.clock)))),
        )
    }

    /// Apply the catalog's settings: the listed volumes get theirs (resolved), every other
    /// volume none; the listed groups' members pay their group's buckets too, and take its
    /// latency target and minimum share where they have none of their own. Throttles nobody
    /// holds, without settings and in no group are dropped.
    pub fn apply(&self, listed: &[(String, QosSettings)], groups: &[GroupQosListing]) {
        let mut wanted: HashMap<&str, QosSettings> = listed
            .iter()
            .map(|(n, s)| (n.as_str(), s.resolve()))
            .collect();
        let mut member_of: HashMap<&str, Arc<VolumeQos>> = HashMap::new();
        for g in groups {
            let settings = g.settings.resolve();
            let throttle = self.group_throttle(&g.group);
            if throttle.settings() != settings {
                throttle.set(&settings);
            }
            let inherited = QosSettings {
                latency_target_us: settings.latency_target_us,
                iops_min: settings.iops_min,
                ..QosSettings::default()
            };
            for m in &g.members {
                member_of.insert(m.as_str(), Arc::clone(&throttle));
                if !inherited.is_empty() {
                    let own = wanted.remove(m.as_str()).unwrap_or_default();
                    wanted.insert(m.as_str(), own.overlay(&inherited));
                }
            }
        }
        self.groups
            .write()
            .retain(|name, _| groups.iter().any(|g| g.group == *name));
        for (name, settings) in &wanted {
            let v = self.volume(name);
            if v.settings() != *settings {
                v.set(settings);
            }
        }
        for name in member_of.keys() {
            let _ = self.volume(name);
        }
        let mut volumes = self.volumes.write();
        for (name, v) in volumes.iter() {
            if !wanted.contains_key(name.as_str()) && !v.settings().is_empty() {
                v.set(&QosSettings::default());
            }
            let group = member_of.get(name.as_str());
            if group.is_some() || v.group().is_some() {
                // Also when the group is the same: its limits may have changed.
                v.set_group(group.cloned());
            }
        }
        volumes.retain(|name, v| {
            wanted.contains_key(name.as_str())
                || member_of.contains_key(name.as_str())
                || Arc::strong_count(v) > 1
                || v.cap().is_some()
        });
    }

    /// The shared throttle of group `name`, made (unlimited) if it has none yet.
    fn group_throttle(&self, name: &str) -> Arc<VolumeQos> {
        let mut groups = self.groups.write();
        Arc::clone(
            groups
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(VolumeQos::new(name, Arc::clone(&self.clock)))),
        )
    }

    /// Group `name`'s shared throttle: its settings in force and what it throttled.
    pub fn group_state(&self, name: &str) -> Option<QosState> {
        self.groups.read().get(name).map(|g| g.state())
    }

    /// Close the window of `elapsed` and let the controller set caps.
    pub fn tick(&self, elapsed: Duration) {
        let volumes: Vec<Arc<VolumeQos>> = self.volumes.read().values().cloned().collect();
        let mut guard = self.controller.lock();
        let (controller, marks) = &mut *guard;
        let seconds = elapsed.as_secs_f64().max(1e-3);
        let mut windows = Vec::with_capacity(volumes.len());
        for v in &volumes {
            let latency = v.latency().load();
            let units = v.completed_units();
            // A mark from another `VolumeQos` of the same name (the volume was deleted and
            // created again, or renamed) counts from its own zero: no window this tick.
            let (p99_us, units_per_s) = match marks.get(v.name()) {
                Some(m) if units >= m.units => {
                    let window = latency.since(&m.latency);
                    let p99 = (window.total() >= MIN_SAMPLES).then(|| window.quantile_us(0.99));
                    (p99, (units - m.units) as f64 / seconds)
                }
                _ => (None, 0.0),
            };
            if let Some(p99) = p99_us {
                v.measured_p99(p99);
            }
            marks.insert(v.name().to_string(), Mark { latency, units });
            let s = v.settings();
            windows.push(Window {
                name: v.name().to_string(),
                target_us: s.latency_target_us,
                min_units_per_s: s.iops_min,
                p99_us,
                units_per_s,
            });
        }
        marks.retain(|name, _| volumes.iter().any(|v| v.name() == name));
        // Nothing to hold: no target anywhere, and no cap left to lift.
        for (name, cap) in controller.tick(&windows) {
            if let Some(v) = volumes.iter().find(|v| v.name() == name) {
                tracing::debug!(volume = name, ?cap, "latency controller cap");
                v.set_cap(cap);
            }
        }
    }

    /// Every throttle's settings and counters, by name.
    pub fn states(&self) -> Vec<QosState> {
        let mut states: Vec<QosState> = self.volumes.read().values().map(|v| v.state()).collect();
        states.sort_by(|a, b| a.name.cmp(&b.name));
        states
    }

    /// Keep the registry current from `engine` until `stop` is set (a thread: the catalog's
    /// lock may wait on etcd).
    pub fn start(
        self: &Arc<Self>,
        engine: Arc<Engine>,
        stop: Arc<std::sync::atomic::AtomicBool>,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let registry = Arc::clone(self);
        std::thread::Builder::new()
            .name("qos".into())
            .spawn(move || {
                let mut last = registry.clock.now();
                while !stop.load(std::sync::atomic::Ordering::Acquire) {
                    registry.apply(&engine.volumes_qos(), &engine.groups_qos());
                    std::thread::sleep(TICK);
                    let now = registry.clock.now();
                    registry.tick(now.saturating_sub(last));
                    last = now;
                }
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ha::clock::SimClock;
    use crate::qos::volume::Direction;

    #[test]
    fn settings_follow_the_catalog_and_classes_resolve() {
        let r = QosRegistry::with_clock(Arc::new(SimClock::default()));
        let held = r.volume("a");
        r.apply(
            &[(
                "a".into(),
                QosSettings {
                    class: Some("bronze".into()),
                    ..QosSettings::default()
                },
            )],
            &[],
        );
        assert_eq!(held.settings().iops_max, Some(5_000));
        // Cleared in the catalog: the held throttle is lifted.
        r.apply(&[], &[]);
        assert!(held.settings().is_empty());
        // Unheld and unlimited: dropped.
        let _ = r.volume("b");
        r.apply(&[], &[]);
        assert_eq!(r.states().len(), 1);
    }

    /// A throttle dropped and made again under the same name counts from zero: the window
    /// after it is skipped, not a subtraction that overflows (which aborted the c.node).
    #[test]
    fn a_throttle_made_again_under_its_name_starts_a_fresh_window() {
        let clock = Arc::new(SimClock::default());
        let r = QosRegistry::with_clock(clock.clone());
        let first = r.volume("vol0");
        for _ in 0..50 {
            first.completed(4096, Duration::from_micros(100));
        }
        r.tick(TICK);
        drop(first);
        r.apply(&[], &[]); // unheld and unlimited: dropped
        let again = r.volume("vol0");
        again.completed(4096, Duration::from_micros(100));
        clock.advance(TICK);
        r.tick(TICK);
        r.tick(TICK);
        assert_eq!(again.cap(), None);
    }

    #[test]
    fn group_members_share_buckets_and_inherit_its_target() {
        let r = QosRegistry::with_clock(Arc::new(SimClock::default()));
        let a = r.volume("a");
        let group = |members: &[&str]| GroupQosListing {
            group: "g".into(),
            settings: QosSettings {
                iops_max: Some(1_000),
                iops_burst: Some(1),
                latency_target_us: Some(2_000),
                ..QosSettings::default()
            },
            members: members.iter().map(|m| (*m).to_string()).collect(),
        };
        let own = QosSettings {
            latency_target_us: Some(500),
            ..QosSettings::default()
        };
        r.apply(&[("b".into(), own.clone())], &[group(&["a", "b"])]);
        let b = r.volume("b");
        assert_eq!(a.group().as_deref(), Some("g"));
        assert_eq!(a.settings().latency_target_us, Some(2_000));
        assert_eq!(b.settings(), own, "its own target wins");
        assert!(a.admit(Direction::Write, 4096).is_zero());
        assert!(
            !b.admit(Direction::Write, 4096).is_zero(),
            "one bucket for both"
        );
        assert_eq!(r.group_state("g").map(|s| s.throttled_ios), Some(1));
        // `a` leaves the group, then the group loses its settings.
        r.apply(&[("b".into(), own.clone())], &[group(&["b"])]);
        assert_eq!(a.group(), None);
        assert!(a.settings().is_empty());
        r.apply(&[], &[]);
        assert_eq!(b.group(), None);
        assert!(r.group_state("g").is_none());
    }

    #[test]
    fn a_missed_target_caps_the_neighbour() {
        let clock = Arc::new(SimClock::default());
        let r = QosRegistry::with_clock(clock.clone());
        let db = r.volume("db");
        let noisy = r.volume("noisy");
        r.apply(
            &[(
                "db".into(),
                QosSettings {
                    latency_target_us: Some(1_000),
                    ..QosSettings::default()
                },
            )],
            &[],
        );
        r.tick(TICK); // the first window only marks
        for _ in 0..100 {
            db.completed(4096, Duration::from_millis(5));
        }
        for _ in 0..5_000 {
            noisy.completed(4096, Duration::from_micros(100));
        }
        clock.advance(TICK);
        r.tick(TICK);
        // 5,000 units in 0.1 s = 50,000/s, halved.
        assert_eq!(noisy.cap(), Some(25_000.0));
        assert_eq!(db.cap(), None);
        // Its bucket holds a tenth of a second at the cap: 2,500 units pass, then waits.
        let waited = (0..3_000)
            .filter(|_| !noisy.admit(Direction::Write, 4096).is_zero())
            .count();
        assert_eq!(waited, 500);
    }
}
