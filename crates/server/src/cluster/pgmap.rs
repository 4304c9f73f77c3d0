//! Placement-group maps: which d.nodes hold the chunks of a placement group's stripes. No
//! I/O here.
//!
//! Each position of a PG is chosen by rendezvous hashing (the d.node with the highest
//! hash(pool, pg, node) that is usable and not already in the PG), preferring a failure
//! domain (zone) not yet used by the PG. The map is sticky: a recomputation keeps every
//! position whose d.node is still usable and refills only the others, so losing one d.node
//! moves only its own chunks (which the repairer rebuilds) and nothing else.

use std::collections::HashSet;

use crate::cluster::records::PgMap;

/// A d.node that may hold chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub id: String,
    pub zone: String,
}

/// The map for `pg_count` PGs of `width` (k+m) chunks over `usable` d.nodes, keeping what
/// `previous` placed on d.nodes that are still usable. The epoch is `previous.epoch + 1` when
/// anything changed.
pub fn compute(
    pool: &str,
    pg_count: u32,
    width: usize,
    usable: &[Candidate],
    previous: Option<&PgMap>,
) -> PgMap {
    let usable_ids: HashSet<&str> = usable.iter().map(|c| c.id.as_str()).collect();
    let mut pgs = Vec::with_capacity(pg_count as usize);
    for pg in 0..pg_count {
        let mut positions: Vec<Option<String>> = previous
            .and_then(|p| p.pgs.get(pg as usize))
            .map(|old| {
                let mut kept: Vec<Option<String>> = old
                    .iter()
                    .map(|n| n.clone().filter(|id| usable_ids.contains(id.as_str())))
                    .collect();
                kept.resize(width, None);
                kept.truncate(width);
                kept
            })
            .unwrap_or_else(|| vec![None; width]);
        let mut ranked: Vec<&Candidate> = usable.iter().collect();
        ranked.sort_by_key(|c| std::cmp::Reverse(rendezvous(pool, pg, &c.id)));
        for slot in 0..width {
            if positions[slot].is_some() {
                continue;
            }
            let used: HashSet<&str> = positions.iter().flatten().map(String::as_str).collect();
            let used_zones: HashSet<&str> = positions
                .iter()
                .flatten()
                .filter_map(|id| usable.iter().find(|c| &c.id == id))
                .map(|c| c.zone.as_str())
                .collect();
            let free = ranked.iter().filter(|c| !used.contains(c.id.as_str()));
            let pick = free
                .clone()
                .find(|c| !used_zones.contains(c.zone.as_str()))
                .or_else(|| free.clone().next());
            positions[slot] = pick.map(|c| c.id.clone());
        }
        pgs.push(positions);
    }
    let epoch = match previous {
        Some(p) if p.pgs == pgs => p.epoch,
        Some(p) => p.epoch + 1,
        None => 1,
    };
    PgMap { epoch, pgs }
}

/// The placement group of a stripe.
pub fn pg_of(family: u64, segment: u64, pg_count: u32) -> u32 {
    let h = mix(family.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ segment);
    u32::try_from(h % u64::from(pg_count.max(1))).expect("below pg_count")
}

fn rendezvous(pool: &str, pg: u32, node: &str) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    for b in pool
        .bytes()
        .chain([0])
        .chain(pg.to_le_bytes())
        .chain(node.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    mix(h)
}

/// splitmix64's finaliser: spreads nearby inputs over the whole range.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: usize, zones: usize) -> Vec<Candidate> {
        (0..n)
            .map(|i| Candidate {
                id: format!("dn-{i}"),
                zone: format!("z{}", i % zones),
            })
            .collect()
    }

    #[test]
    fn positions_are_distinct_nodes_in_distinct_zones_when_possible() {
        let map = compute("p", 64, 6, &nodes(8, 8), None);
        for pg in &map.pgs {
            let ids: HashSet<_> = pg.iter().flatten().collect();
            assert_eq!(ids.len(), 6);
        }
        let map = compute("p", 64, 6, &nodes(12, 6), None);
        for pg in &map.pgs {
            let zones: HashSet<_> = pg
                .iter()
                .flatten()
                .map(|id| id.trim_start_matches("dn-").parse::<usize>().unwrap() % 6)
                .collect();
            assert_eq!(zones.len(), 6, "{pg:?}");
        }
    }

    #[test]
    fn losing_a_node_moves_only_its_positions() {
        let all = nodes(8, 8);
        let before = compute("p", 128, 6, &all, None);
        let fewer: Vec<Candidate> = all.iter().filter(|c| c.id != "dn-3").cloned().collect();
        let after = compute("p", 128, 6, &fewer, Some(&before));
        assert_eq!(after.epoch, before.epoch + 1);
        let mut moved = 0;
        for (a, b) in before.pgs.iter().zip(&after.pgs) {
            for (x, y) in a.iter().zip(b) {
                if x != y {
                    assert_eq!(x.as_deref(), Some("dn-3"));
                    moved += 1;
                }
            }
            assert!(!b.iter().flatten().any(|id| id == "dn-3"));
        }
        assert!(moved > 0);
        let same = compute("p", 128, 6, &fewer, Some(&after));
        assert_eq!(same.epoch, after.epoch, "no change, no new epoch");
    }

    #[test]
    fn too_few_nodes_leave_positions_empty() {
        let map = compute("p", 8, 6, &nodes(4, 4), None);
        for pg in &map.pgs {
            assert_eq!(pg.iter().flatten().count(), 4);
        }
    }

    #[test]
    fn stripes_spread_over_pgs() {
        let mut counts = vec![0u32; 16];
        for s in 0..16_000u64 {
            counts[pg_of(3, s, 16) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c > 800 && c < 1200), "{counts:?}");
    }
}
