//! The latency controller: when a volume with a p99 target misses it over a window, the
//! volumes with no target or a looser one are capped (their rate halved, multiplicative
//! decrease), never below their minimum share; while every target is met the caps rise by a
//! step per window (additive increase) and are lifted once they no longer bind. The same
//! shape as Linux's io.latency controller, with a rate where it has a queue depth.
//!
//! Pure: it takes one window's figures per volume and returns the caps to set. The registry
//! ([`super::registry`]) measures the windows and applies the caps.

use std::collections::HashMap;

/// What one volume did over one window.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub name: String,
    /// Its p99 target, in microseconds.
    pub target_us: Option<u64>,
    /// Its minimum share, in 4 KiB units per second.
    pub min_units_per_s: Option<u64>,
    /// Its p99 completion latency over the window (`None`: too few I/Os to tell).
    pub p99_us: Option<f64>,
    /// 4 KiB units completed per second over the window.
    pub units_per_s: f64,
}

/// Fewer completions than this in a window say nothing about its p99.
pub const MIN_SAMPLES: u64 = 20;
/// The floor of a volume without a minimum share of its own, in units per second.
pub const DEFAULT_MIN_UNITS_PER_S: u64 = 100;
/// A miss multiplies the cap by this.
const DECREASE: f64 = 0.5;
/// Each window that meets every target raises a cap by this share of the rate the volume
/// ran at when it was first capped.
const INCREASE_SHARE: f64 = 0.05;

/// A capped volume.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Capped {
    cap: f64,
    /// Its rate when first capped: the cap is lifted once it rises past this.
    free_rate: f64,
}

/// The caps in force, carried from window to window.
#[derive(Debug, Default)]
pub struct LatencyController {
    capped: HashMap<String, Capped>,
}

impl LatencyController {
    /// One window: returns each volume whose cap changes and its new cap (`None`: lifted).
    pub fn tick(&mut self, windows: &[Window]) -> Vec<(String, Option<f64>)> {
        // The strictest target missed in this window.
        let missed = windows
            .iter()
            .filter_map(|w| match (w.target_us, w.p99_us) {
                (Some(t), Some(p99)) if p99 > t as f64 => Some(t),
                _ => None,
            })
            .min();
        let mut changes = Vec::new();
        for w in windows {
            let floor = w.min_units_per_s.unwrap_or(DEFAULT_MIN_UNITS_PER_S) as f64;
            let before = self.capped.get(&w.name).copied();
            let after = match missed {
                // A volume with a target at least as strict as the one missed is not the
                // noise: it keeps its rate.
                Some(t) if w.target_us.is_none_or(|own| own > t) => {
                    match before {
                        Some(c) => Some(Capped {
                            cap: (c.cap * DECREASE).max(floor),
                            ..c
                        }),
                        // Idle volumes are no one's noise.
                        None if w.units_per_s <= floor => None,
                        None => Some(Capped {
                            cap: (w.units_per_s * DECREASE).max(floor),
                            free_rate: w.units_per_s,
                        }),
                    }
                }
                _ => before.and_then(|c| {
                    let cap = c.cap + (c.free_rate * INCREASE_SHARE).max(floor);
                    (cap < c.free_rate).then_some(Capped { cap, ..c })
                }),
            };
            if before.map(|c| c.cap) != after.map(|c| c.cap) {
                changes.push((w.name.clone(), after.map(|c| c.cap)));
            }
            match after {
                Some(c) => self.capped.insert(w.name.clone(), c),
                None => self.capped.remove(&w.name),
            };
        }
        // Volumes gone from the windows (deleted) are forgotten.
        self.capped
            .retain(|name, _| windows.iter().any(|w| &w.name == name));
        changes
    }

    /// The cap on `name` now.
    pub fn cap(&self, name: &str) -> Option<f64> {
        self.capped.get(name).map(|c| c.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(name: &str, target_us: Option<u64>, p99_us: f64, units_per_s: f64) -> Window {
        Window {
            name: name.into(),
            target_us,
            min_units_per_s: None,
            p99_us: Some(p99_us),
            units_per_s,
        }
    }

    /// A toy system: the target volume's p99 grows with the noisy volume's rate
    /// (100 µs + 0.1 µs per unit per second of noise), the noise runs as fast as its cap lets
    /// it (40,000/s free). Over simulated windows the controller must bring the p99 under
    /// the 2 ms target and keep it there most of the time.
    #[test]
    fn holds_a_target_against_a_noisy_neighbour() {
        let mut c = LatencyController::default();
        let mut met = 0;
        let windows = 200;
        for i in 0..windows {
            let noise = c.cap("noisy").unwrap_or(40_000.0);
            let p99 = 100.0 + 0.1 * noise;
            c.tick(&[
                window("db", Some(2_000), p99, 2_000.0),
                window("noisy", None, 5_000.0, noise),
            ]);
            if i >= 20 && p99 <= 2_000.0 {
                met += 1;
            }
        }
        assert!(
            met as f64 >= 0.8 * (windows - 20) as f64,
            "met in {met} windows"
        );
        assert!(
            c.cap("db").is_none(),
            "the target's own volume is never capped"
        );
        // The noise was not throttled to nothing either: it ran near what the target allows.
        let cap = c.cap("noisy").unwrap_or(40_000.0);
        assert!(cap > 5_000.0, "{cap}");
    }

    #[test]
    fn never_below_the_minimum_share() {
        let mut c = LatencyController::default();
        let mut noisy = window("noisy", None, 100.0, 10_000.0);
        noisy.min_units_per_s = Some(3_000);
        for _ in 0..50 {
            c.tick(&[window("db", Some(1_000), 9_000.0, 100.0), noisy.clone()]);
        }
        assert_eq!(c.cap("noisy"), Some(3_000.0));
    }

    #[test]
    fn a_stricter_or_equal_target_is_not_throttled_and_caps_lift_when_met() {
        let mut c = LatencyController::default();
        let windows = |db_p99| {
            [
                window("db", Some(2_000), db_p99, 1_000.0),
                window("strict", Some(1_000), 500.0, 8_000.0),
                window("loose", Some(10_000), 500.0, 8_000.0),
                window("idle", None, 0.0, 0.0),
            ]
        };
        c.tick(&windows(5_000.0));
        assert_eq!(c.cap("strict"), None);
        assert_eq!(c.cap("idle"), None);
        assert_eq!(c.cap("loose"), Some(4_000.0));
        // Met from now on: the cap climbs by 5% of 8,000 per window and is lifted past 8,000.
        let mut lifted_after = None;
        for i in 1..=30 {
            c.tick(&windows(500.0));
            if c.cap("loose").is_none() {
                lifted_after = Some(i);
                break;
            }
        }
        assert_eq!(lifted_after, Some(10));
    }

    #[test]
    fn too_few_samples_change_nothing() {
        let mut c = LatencyController::default();
        let mut db = window("db", Some(1_000), 0.0, 10.0);
        db.p99_us = None;
        let changes = c.tick(&[db, window("noisy", None, 0.0, 50_000.0)]);
        assert!(changes.is_empty());
    }
}
