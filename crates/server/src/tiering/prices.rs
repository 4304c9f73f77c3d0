//! Tiers and their prices: what a GB and an IOPS cost per month on each tier, as the operator
//! states them (`weft serve --tier NAME --price-gb X --price-iops Y` for the local store's
//! tier, `weft tier set NAME ...` for the others). Kept in `tiers.json` in the data dir, so
//! the advisor (and the mover, when there is one) can price a move to a tier this server does
//! not have yet.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// The file of the tier book in the data dir.
pub const TIERS_FILE: &str = "tiers.json";
pub const PERFORMANCE: &str = "performance";
pub const CAPACITY: &str = "capacity";

/// What a tier costs per month.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TierPrices {
    /// Dollars per GB-month (GB: 2^30 bytes).
    pub price_gb: f64,
    /// Dollars per IOPS-month (an I/O per second sustained over the month).
    pub price_iops: f64,
}

impl TierPrices {
    /// Illustrative prices for a tier nobody priced: local NVMe (performance: the IOPS come
    /// with the GB) and HDD or throttled network block storage (capacity: cheap GB, dear
    /// IOPS). Set real ones with `weft tier set`.
    pub fn default_for(tier: &str) -> Option<TierPrices> {
        match tier {
            PERFORMANCE => Some(TierPrices {
                price_gb: 0.10,
                price_iops: 0.0,
            }),
            CAPACITY => Some(TierPrices {
                price_gb: 0.015,
                price_iops: 0.10,
            }),
            _ => None,
        }
    }

    pub fn check(&self) -> Result<(), String> {
        for (what, v) in [("price-gb", self.price_gb), ("price-iops", self.price_iops)] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("--{what} must be a price of zero or more, not {v}"));
            }
        }
        Ok(())
    }
}

/// Checks a tier name: 1 to 32 of `a-z 0-9 - _`.
pub fn check_tier_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{name:?} is not a tier name: 1 to 32 of lowercase letters, digits, - and _"
        ))
    }
}

/// Every tier this server knows a price of.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TierBook {
    pub tiers: BTreeMap<String, TierPrices>,
}

impl TierBook {
    /// The book in `dir`, with the default tiers added where absent.
    pub fn load(dir: &Path) -> std::io::Result<TierBook> {
        let mut book = match std::fs::read(path(dir)) {
            Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("{}: {e}", path(dir).display()),
                )
            })?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => TierBook::default(),
            Err(e) => return Err(e),
        };
        for tier in [PERFORMANCE, CAPACITY] {
            if let Some(p) = TierPrices::default_for(tier) {
                book.tiers.entry(tier.to_string()).or_insert(p);
            }
        }
        Ok(book)
    }

    pub fn save(&self, dir: &Path) -> anyhow::Result<()> {
        let bytes = serde_json::to_vec_pretty(self)?;
        crate::data_files::write_atomically(dir, TIERS_FILE, &bytes)
    }
}

fn path(dir: &Path) -> PathBuf {
    dir.join(TIERS_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_book_round_trips_and_keeps_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let mut book = TierBook::load(dir.path()).unwrap();
        assert_eq!(book.tiers.len(), 2);
        book.tiers.insert(
            "archive".into(),
            TierPrices {
                price_gb: 0.004,
                price_iops: 1.0,
            },
        );
        book.tiers.get_mut(CAPACITY).unwrap().price_iops = 0.5;
        book.save(dir.path()).unwrap();
        assert_eq!(TierBook::load(dir.path()).unwrap(), book);
        assert!(check_tier_name("hdd-2").is_ok());
        assert!(check_tier_name("Fast").is_err());
        assert!(TierPrices {
            price_gb: -1.0,
            price_iops: 0.0
        }
        .check()
        .is_err());
    }
}
