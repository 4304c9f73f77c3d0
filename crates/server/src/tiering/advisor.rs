//! The advisor's cost model, after Oracle's "Database on Flash": what matters is an extent's
//! IO intensity (IOPS per GB), and its monthly cost on a tier is
//! `max(IOPS x $/IOPS-month, GB x $/GB-month)`: a tier bills whichever of the two resources
//! the extent uses more of, at its price.
//!
//! - IOPS: the extent's reads and writes over the chosen window, divided by the seconds the
//!   window covers ([`super::heat::Window::covered_s`]).
//! - GB: the extent's logical data, the blocks that hold data (neither holes nor zeroes), in
//!   GiB (2^30 bytes). The estimate after data reduction (scaled by the volume's family
//!   ratio) is shown beside it; the cost uses the logical figure, which is what a tier
//!   holding the extent un-reduced would bill and keeps the hand computation simple.
//! - The cheapest tier wins, with hysteresis: a move is advised only when it saves at least
//!   [`DEFAULT_MARGIN`] (20%) of the cost now, so an extent near the break-even intensity does
//!   not flap between tiers. An extent without data costs nothing anywhere and stays.
//!
//! Pure functions: the API gathers the inputs (heat, allocation, prices) and calls these.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::heat::Window;
use super::prices::TierPrices;

/// The share of the cost now a move must save.
pub const DEFAULT_MARGIN: f64 = 0.2;
pub const GIB: f64 = (1u64 << 30) as f64;

/// A tier's monthly cost for an extent of `gib` GiB doing `iops`.
pub fn monthly_cost(prices: &TierPrices, iops: f64, gib: f64) -> f64 {
    (iops * prices.price_iops).max(gib * prices.price_gb)
}

/// The tier an extent should be on, and the costs now and there.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub tier: String,
    pub cost_now: f64,
    pub cost_after: f64,
}

/// Picks the tier for an extent on `now` (which must be in `tiers`).
pub fn choose(
    tiers: &BTreeMap<String, TierPrices>,
    now: &str,
    iops: f64,
    gib: f64,
    margin: f64,
) -> Choice {
    if gib <= 0.0 {
        return Choice {
            tier: now.to_string(),
            cost_now: 0.0,
            cost_after: 0.0,
        };
    }
    let cost_now = tiers.get(now).map_or(0.0, |p| monthly_cost(p, iops, gib));
    let stay = Choice {
        tier: now.to_string(),
        cost_now,
        cost_after: cost_now,
    };
    let best = tiers
        .iter()
        .map(|(name, p)| (name, monthly_cost(p, iops, gib)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match best {
        Some((name, cost)) if name != now && cost <= cost_now * (1.0 - margin) => Choice {
            tier: name.clone(),
            cost_now,
            cost_after: cost,
        },
        _ => stay,
    }
}

/// IOPS per GiB, none for an extent without data.
pub fn intensity(iops: f64, gib: f64) -> Option<f64> {
    (gib > 0.0).then(|| iops / gib)
}

/// One extent's figures and advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ExtentAdvice {
    pub index: u64,
    pub offset_bytes: u64,
    pub length_bytes: u64,
    /// Logical data in the extent (blocks neither holes nor zeroes), bytes.
    pub data_bytes: u64,
    /// The same in GiB: the GB of the cost model.
    pub gib: f64,
    /// Estimated stored GiB after data reduction (the volume family's ratio).
    pub stored_gib: f64,
    /// Reads and writes per window: hour, day, week.
    pub reads: WindowCounts,
    pub writes: WindowCounts,
    /// (reads + writes) / covered seconds, per window.
    pub iops: WindowRates,
    /// IOPS per GiB per window; null for an extent without data.
    pub iops_per_gb: WindowIntensities,
    pub tier_now: String,
    /// The tier the cost model picks on the chosen window (with the margin).
    pub advised_tier: String,
    /// Dollars per month on the tier now and on the advised tier.
    pub cost_now: f64,
    pub cost_after: f64,
}

macro_rules! window_figures {
    ($(#[$doc:meta])* $name:ident, $t:ty) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
        pub struct $name {
            pub hour: $t,
            pub day: $t,
            pub week: $t,
        }

        impl $name {
            pub fn from_fn(f: impl Fn(Window) -> $t) -> $name {
                $name {
                    hour: f(Window::Hour),
                    day: f(Window::Day),
                    week: f(Window::Week),
                }
            }

            pub fn get(&self, w: Window) -> $t {
                match w {
                    Window::Hour => self.hour,
                    Window::Day => self.day,
                    Window::Week => self.week,
                }
            }
        }
    };
}

window_figures!(
    /// A count per window.
    WindowCounts,
    u64
);
window_figures!(
    /// A rate per window.
    WindowRates,
    f64
);
window_figures!(
    /// A rate per window, null where it has no meaning (IOPS/GB of an extent without data).
    WindowIntensities,
    Option<f64>
);

/// A volume's advice.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct VolumeAdvice {
    pub volume: String,
    pub size_bytes: u64,
    pub extent_bytes: u64,
    pub tier_now: String,
    /// When heat counting began for the volume (unix s).
    pub counted_since_unix_s: u64,
    /// Seconds each window covers now.
    pub covered_s: WindowCounts,
    pub extents: Vec<ExtentAdvice>,
    /// Sums over the extents, dollars per month.
    pub cost_now: f64,
    pub cost_after: f64,
    /// Data bytes the advice would put on each tier.
    pub data_bytes_by_tier: BTreeMap<String, u64>,
}

/// The advisor's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Advice {
    /// The window the advice is computed on.
    pub window: String,
    /// The hysteresis margin: a move must save this share of the cost now.
    pub margin: f64,
    pub tiers: BTreeMap<String, TierPrices>,
    pub volumes: Vec<VolumeAdvice>,
    pub cost_now: f64,
    pub cost_after: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn book() -> BTreeMap<String, TierPrices> {
        BTreeMap::from([
            (
                "performance".to_string(),
                TierPrices {
                    price_gb: 0.10,
                    price_iops: 0.0,
                },
            ),
            (
                "capacity".to_string(),
                TierPrices {
                    price_gb: 0.02,
                    price_iops: 0.001,
                },
            ),
        ])
    }

    #[test]
    fn the_cost_model_matches_a_hand_computation() {
        let tiers = book();
        // A 64 MiB extent (1/16 GiB) read 16,200 times in the last hour: 4.5 IOPS, 72 IOPS/GB.
        let gib = 1.0 / 16.0;
        let iops = 16_200.0 / 3600.0;
        assert_eq!(intensity(iops, gib), Some(72.0));
        // performance: max(4.5 x 0, 0.0625 x 0.10) = $0.00625; capacity: max(4.5 x 0.001,
        // 0.0625 x 0.02) = max(0.0045, 0.00125) = $0.0045: capacity, 28% cheaper, more than
        // the 20% margin: it moves.
        let c = choose(&tiers, "performance", iops, gib, DEFAULT_MARGIN);
        assert_eq!(c.tier, "capacity");
        assert!((c.cost_now - 0.00625).abs() < 1e-12);
        assert!((c.cost_after - 0.0045).abs() < 1e-12);
        // At 6 IOPS capacity costs $0.006: 4% cheaper, inside the margin: stay.
        let c = choose(&tiers, "performance", 6.0, gib, DEFAULT_MARGIN);
        assert_eq!(c.tier, "performance");
        assert_eq!(c.cost_after, c.cost_now);
        // Hot (100 IOPS, 1600 IOPS/GB) on capacity: $0.10 there, $0.00625 on performance.
        let c = choose(&tiers, "capacity", 100.0, gib, DEFAULT_MARGIN);
        assert_eq!(c.tier, "performance");
        assert!((c.cost_now - 0.1).abs() < 1e-12);
        assert!((c.cost_after - 0.00625).abs() < 1e-12);
        // Cold (one read an hour) on performance: capacity at max(0.000278 x 0.001,
        // 0.00125) = $0.00125.
        let c = choose(&tiers, "performance", 1.0 / 3600.0, gib, DEFAULT_MARGIN);
        assert_eq!(c.tier, "capacity");
        assert!((c.cost_after - 0.00125).abs() < 1e-12);
        // Break-even intensity: $/GB[performance] / $/IOPS[capacity] = 100 IOPS/GB.
        assert!((monthly_cost(&tiers["capacity"], 100.0 * gib, gib) - 0.00625).abs() < 1e-12);
    }

    #[test]
    fn an_extent_without_data_stays() {
        let c = choose(&book(), "performance", 50.0, 0.0, DEFAULT_MARGIN);
        assert_eq!(c.tier, "performance");
        assert_eq!(c.cost_now, 0.0);
        assert_eq!(intensity(50.0, 0.0), None);
    }
}
