//! Tiers in a cluster: a pool's tier and prices ([`PoolTier`], checked at `weft pool create
//! --tier`) and which d.nodes a pool may be placed on ([`eligible`]). No I/O here.
//!
//! A d.node says its tier at registration (`weft dnode --tier`). A pool with a tier is placed
//! only on d.nodes of that tier, once any d.node of the cluster says a tier; until then (a
//! cluster of untiered d.nodes) the pool's tier is a label for the advisor and the pool takes
//! every d.node, as an untiered pool always does. When d.nodes start saying tiers, the
//! positions of a tiered pool on d.nodes of another tier move (sticky rendezvous hashing,
//! `super::pgmap`) and the repairer rebuilds their chunks on the pool's tier.

use crate::cluster::records::PoolRecord;
use crate::tiering::prices::check_tier_name;
use crate::tiering::TierPrices;

/// A pool's tier as `weft pool create --tier NAME [--price-gb X --price-iops Y]` gives it.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolTier {
    pub name: String,
    /// Both or neither: the pool's own prices for its tier (`None`: the tier book's).
    pub prices: Option<TierPrices>,
}

impl PoolTier {
    /// Checks the name and prices, and that no other pool prices the same tier otherwise
    /// (a tier has one price: the advisor could not say which applies).
    pub fn check(&self, pools: &[PoolRecord]) -> Result<(), String> {
        check_tier_name(&self.name)?;
        let Some(mine) = self.prices else {
            return Ok(());
        };
        mine.check()?;
        for p in pools {
            if let (Some(tier), Some(theirs)) = (&p.tier, prices_of(p)) {
                if *tier == self.name && theirs != mine {
                    return Err(format!(
                        "pool {} prices tier {tier} at ${}/GB-month and ${}/IOPS-month: a tier \
                         has one price (give the same, or leave the prices out)",
                        p.name, theirs.price_gb, theirs.price_iops
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The prices a pool record states for its tier, if it states both.
pub fn prices_of(p: &PoolRecord) -> Option<TierPrices> {
    Some(TierPrices {
        price_gb: p.price_gb?,
        price_iops: p.price_iops?,
    })
}

/// What [`eligible`] knows of a d.node.
#[derive(Debug, Clone, Copy)]
pub struct NodeTier<'a> {
    /// Its registered tier (empty: none said).
    pub tier: &'a str,
    /// Not registered since this c.node started: its tier is unknown.
    pub unknown: bool,
    /// The pool's previous map gives it a position.
    pub placed: bool,
}

/// Whether a usable d.node may hold positions of a pool of `pool_tier`, in a cluster where
/// `tiered_cluster` says whether any d.node says its tier. A d.node whose tier is unknown
/// keeps the positions it has (it is down; they move only when it is out, as for any pool).
pub fn eligible(pool_tier: Option<&str>, node: NodeTier<'_>, tiered_cluster: bool) -> bool {
    match pool_tier {
        None => true,
        Some(_) if !tiered_cluster => true,
        Some(t) => node.tier == t || (node.unknown && node.placed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, tier: Option<&str>, prices: Option<(f64, f64)>) -> PoolRecord {
        PoolRecord {
            name: name.into(),
            redundancy: "2+1".into(),
            pg_count: 8,
            min_size: None,
            tier: tier.map(String::from),
            price_gb: prices.map(|p| p.0),
            price_iops: prices.map(|p| p.1),
        }
    }

    #[test]
    fn a_tiered_pool_takes_only_its_tier_once_dnodes_say_tiers() {
        let node = |tier, unknown, placed| NodeTier {
            tier,
            unknown,
            placed,
        };
        // Untiered pool: every d.node.
        assert!(eligible(None, node("performance", false, false), true));
        // No d.node says a tier: the pool's tier is a label.
        assert!(eligible(Some("capacity"), node("", false, false), false));
        // Tiered cluster: its own tier only.
        assert!(eligible(
            Some("capacity"),
            node("capacity", false, false),
            true
        ));
        assert!(!eligible(
            Some("capacity"),
            node("performance", false, true),
            true
        ));
        assert!(!eligible(Some("capacity"), node("", false, true), true));
        // A d.node not seen since start keeps what it has, and gets nothing new.
        assert!(eligible(Some("capacity"), node("", true, true), true));
        assert!(!eligible(Some("capacity"), node("", true, false), true));
    }

    #[test]
    fn a_tier_has_one_price_across_pools() {
        let pools = [
            pool("cold", Some("capacity"), Some((0.02, 0.0))),
            pool("plain", None, None),
        ];
        let same = PoolTier {
            name: "capacity".into(),
            prices: Some(TierPrices {
                price_gb: 0.02,
                price_iops: 0.0,
            }),
        };
        assert_eq!(same.check(&pools), Ok(()));
        let other = PoolTier {
            prices: Some(TierPrices {
                price_gb: 0.03,
                price_iops: 0.0,
            }),
            ..same.clone()
        };
        assert!(other.check(&pools).unwrap_err().contains("pool cold"));
        let unpriced = PoolTier {
            prices: None,
            ..same
        };
        assert_eq!(unpriced.check(&pools), Ok(()));
        let bad = PoolTier {
            name: "Fast".into(),
            prices: None,
        };
        assert!(bad.check(&pools).is_err());
        assert_eq!(
            prices_of(&pools[0]),
            Some(TierPrices {
                price_gb: 0.02,
                price_iops: 0.0
            })
        );
        assert_eq!(prices_of(&pools[1]), None);
    }

    #[test]
    fn a_pool_record_from_before_tiers_loads_untiered() {
        let old: PoolRecord = serde_json::from_str(
            r#"{"name":"default","redundancy":"4+2","pg_count":64,"min_size":null}"#,
        )
        .unwrap();
        assert_eq!(old, pool("default", None, None).with_redundancy("4+2", 64));
    }

    impl PoolRecord {
        fn with_redundancy(mut self, r: &str, pgs: u32) -> PoolRecord {
            self.redundancy = r.into();
            self.pg_count = pgs;
            self
        }
    }
}
