//! The cluster's view of `GET /api/v1/stats/volumes` (and of the `volumes` events of the
//! stream): every registered c.node's own answer (`?scope=cnode`) merged, one row per volume.
//!
//! A host's request is counted by the front end it came in through, which may be any c.node
//! (it forwards to the volume's owner), so a volume's rates are the sum over every c.node's
//! answer. The answering c.node asks the others' APIs itself, so the CLI and the web UI read
//! one answer: each c.node is asked at once, with [`PEER_TIMEOUT`], and one that does not
//! answer is named in the answer's `cnodes`; the rows of the volumes it owns say
//! `owner_unreachable` (their rates lack its front ends' share: unknown, not zero).
//!
//! Merging: the sums of IOPS, bytes and requests in flight; the worst path's latency
//! percentiles and `%util` (a bound, not the merged distribution: the answers carry no
//! histogram); the sparklines added second by second from their ends. Size, shard and owner
//! are the owner's word (its row says `route: local`), else any c.node's (all read the same
//! catalogs). No I/O is done here: the peers are asked by [`ask_peers`].

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use super::{CnodeAnswer, VolumeRate, VolumesStats, ROUTE_LOCAL};
use crate::io_stats::OpRate;

/// How long a c.node may take to answer, connection included: the view is refreshed every
/// second, and an unreachable c.node must not hold it up for long.
pub const PEER_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest answer read from a c.node (a few hundred bytes per volume).
const ANSWER_MAX_BYTES: u64 = 64 << 20;

/// A c.node to ask: its id and API address as its registration has them.
#[derive(Debug, Clone)]
pub struct Peer {
    pub id: String,
    pub api: String,
}

/// Ask every peer for its own answer at once; each result in `peers`' order.
pub fn ask_peers(peers: &[Peer], token: &str) -> Vec<Result<VolumesStats, String>> {
    let agent = ureq::Agent::new_with_config(
        ureq::Agent::config_builder()
            .proxy(None)
            .max_redirects(0)
            .timeout_global(Some(PEER_TIMEOUT))
            .build(),
    );
    std::thread::scope(|scope| {
        let asked: Vec<_> = peers
            .iter()
            .map(|peer| {
                let agent = agent.clone();
                scope.spawn(move || ask(&agent, peer, token))
            })
            .collect();
        asked
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
            .collect()
    })
}

fn ask(agent: &ureq::Agent, peer: &Peer, token: &str) -> Result<VolumesStats, String> {
    let api = peer.api.trim_end_matches('/');
    let base = if api.contains("://") {
        api.to_string()
    } else {
        format!("http://{api}")
    };
    let mut answer = agent
        .get(format!("{base}/api/v1/stats/volumes?scope=cnode"))
        .header("authorization", format!("Bearer {token}"))
        .call()
        .map_err(|e| e.to_string())?;
    answer
        .body_mut()
        .with_config()
        .limit(ANSWER_MAX_BYTES)
        .read_json::<VolumesStats>()
        .map_err(|e| format!("its answer: {e}"))
}

/// One row per volume from every c.node's own answer; `asked` names each answer's c.node (or
/// why it gave none).
pub fn merge(
    me: &str,
    asked: Vec<(Peer, Result<VolumesStats, String>)>,
    time_ms: u64,
    window_ms: u64,
) -> VolumesStats {
    let mut rows: BTreeMap<String, VolumeRate> = BTreeMap::new();
    let mut cnodes = Vec::new();
    let mut counted: HashSet<String> = HashSet::new();
    for (peer, answer) in asked {
        let answer = match answer {
            // A standby's API passes requests to its owner: that answer is counted once.
            Ok(a) if a.cnode.as_deref().is_some_and(|id| id != peer.id) => {
                let by = a.cnode.clone().unwrap_or_default();
                cnodes.push(CnodeAnswer {
                    error: Some(format!(
                        "answered by c.node {by} (it has no statistics of its own before it owns its shard)"
                    )),
                    ..CnodeAnswer::from(&peer)
                });
                if !counted.insert(by) {
                    continue;
                }
                a
            }
            Ok(a) => {
                counted.insert(peer.id.clone());
                cnodes.push(CnodeAnswer {
                    answered: true,
                    ..CnodeAnswer::from(&peer)
                });
                a
            }
            Err(e) => {
                cnodes.push(CnodeAnswer {
                    error: Some(e),
                    ..CnodeAnswer::from(&peer)
                });
                continue;
            }
        };
        let from = answer.cnode.clone().unwrap_or_else(|| peer.id.clone());
        for row in answer.volumes {
            add(&mut rows, row, &from);
        }
    }
    let unreachable: HashSet<&str> = cnodes
        .iter()
        .filter(|c| {
            !c.answered
                && c.error
                    .as_deref()
                    .is_some_and(|e| !e.starts_with("answered by"))
        })
        .map(|c| c.id.as_str())
        .collect();
    let volumes = rows
        .into_values()
        .map(|mut v| {
            v.owner_unreachable = v.owner.as_deref().is_some_and(|o| unreachable.contains(o));
            v.route = None;
            let iops = f64::from(v.read.iops + v.write.iops);
            v.iops_per_gb = if v.size_bytes == 0 {
                0.0
            } else {
                iops / (v.size_bytes as f64 / 1e9)
            };
            v
        })
        .collect();
    VolumesStats {
        time_ms,
        window_ms,
        volumes,
        scope: super::SCOPE_CLUSTER.into(),
        cnode: Some(me.to_string()),
        cnodes,
    }
}

/// Adds c.node `from`'s row of a volume to the merged rows.
fn add(rows: &mut BTreeMap<String, VolumeRate>, row: VolumeRate, from: &str) {
    let busy = row.read.iops + row.write.iops > 0.0;
    let owners_word = row.route.as_deref() == Some(ROUTE_LOCAL);
    let Some(merged) = rows.get_mut(&row.name) else {
        let mut first = row;
        first.served_by = if busy {
            vec![from.to_string()]
        } else {
            Vec::new()
        };
        rows.insert(first.name.clone(), first);
        return;
    };
    if owners_word {
        merged.size_bytes = row.size_bytes;
        merged.read_only = row.read_only;
        merged.shard = row.shard;
        merged.owner = row.owner.clone();
    }
    add_rate(&mut merged.read, &row.read);
    add_rate(&mut merged.write, &row.write);
    merged.util_pct = merged.util_pct.max(row.util_pct);
    merged.spark_iops = add_from_ends(&merged.spark_iops, &row.spark_iops);
    if busy {
        merged.served_by.push(from.to_string());
    }
}

fn add_rate(to: &mut OpRate, other: &OpRate) {
    to.iops += other.iops;
    to.bytes_per_s += other.bytes_per_s;
    to.queue_depth += other.queue_depth;
    to.p50_us = to.p50_us.max(other.p50_us);
    to.p99_us = to.p99_us.max(other.p99_us);
    to.max_us = to.max_us.max(other.max_us);
}

/// Two sparklines (one value a second, oldest first) added second by second from their ends.
fn add_from_ends(a: &[f32], b: &[f32]) -> Vec<f32> {
    let (long, short) = if a.len() >= b.len() { (a, b) } else { (b, a) };
    let offset = long.len() - short.len();
    long.iter()
        .enumerate()
        .map(|(i, x)| x + i.checked_sub(offset).map_or(0.0, |j| short[j]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, owner: &str, route: &str, write_iops: f32, p99: f32) -> VolumeRate {
        VolumeRate {
            name: name.into(),
            size_bytes: 1_000_000_000,
            read_only: false,
            read: OpRate::default(),
            write: OpRate {
                iops: write_iops,
                bytes_per_s: write_iops * 4096.0,
                p99_us: p99,
                queue_depth: 1.0,
                ..OpRate::default()
            },
            iops_per_gb: 0.0,
            spark_iops: vec![write_iops],
            util_pct: 10.0,
            shard: Some(1),
            owner: Some(owner.into()),
            route: Some(route.into()),
            served_by: Vec::new(),
            owner_unreachable: false,
        }
    }

    fn answer(cnode: &str, volumes: Vec<VolumeRate>) -> VolumesStats {
        VolumesStats {
            time_ms: 1,
            window_ms: 1000,
            volumes,
            scope: super::super::SCOPE_CNODE.into(),
            cnode: Some(cnode.into()),
            cnodes: Vec::new(),
        }
    }

    fn peer(id: &str) -> Peer {
        Peer {
            id: id.into(),
            api: format!("http://{id}:1"),
        }
    }

    #[test]
    fn every_cnodes_front_end_io_is_added_under_the_owners_word() {
        let merged = merge(
            "a",
            vec![
                (
                    peer("a"),
                    Ok(answer("a", vec![row("db", "b", "forwarded", 100.0, 900.0)])),
                ),
                (
                    peer("b"),
                    Ok(answer(
                        "b",
                        vec![
                            VolumeRate {
                                size_bytes: 2_000_000_000,
                                ..row("db", "b", ROUTE_LOCAL, 50.0, 300.0)
                            },
                            row("idle", "b", ROUTE_LOCAL, 0.0, 0.0),
                        ],
                    )),
                ),
            ],
            7,
            1000,
        );
        assert_eq!(merged.scope, "cluster");
        assert_eq!(merged.volumes.len(), 2);
        let db = &merged.volumes[0];
        assert_eq!(db.name, "db");
        assert_eq!(db.write.iops, 150.0);
        assert_eq!(db.write.queue_depth, 2.0);
        assert_eq!(db.write.p99_us, 900.0, "the worst path's");
        assert_eq!(db.size_bytes, 2_000_000_000, "the owner's word");
        assert_eq!(db.iops_per_gb, 75.0);
        assert_eq!(db.spark_iops, vec![150.0]);
        assert_eq!(db.served_by, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(db.route, None);
        assert!(merged.volumes[1].served_by.is_empty());
        assert!(merged.cnodes.iter().all(|c| c.answered));
    }

    #[test]
    fn an_unreachable_owners_volumes_say_so() {
        let merged = merge(
            "a",
            vec![
                (
                    peer("a"),
                    Ok(answer("a", vec![row("db", "b", "forwarded", 10.0, 1.0)])),
                ),
                (peer("b"), Err("timed out".into())),
            ],
            7,
            1000,
        );
        assert!(merged.volumes[0].owner_unreachable);
        let b = merged.cnodes.iter().find(|c| c.id == "b").unwrap();
        assert!(!b.answered);
        assert_eq!(b.error.as_deref(), Some("timed out"));
    }

    #[test]
    fn a_standbys_answer_through_its_owner_is_counted_once() {
        let merged = merge(
            "a",
            vec![
                (
                    peer("a"),
                    Ok(answer("a", vec![row("db", "a", ROUTE_LOCAL, 10.0, 1.0)])),
                ),
                (
                    peer("s"),
                    Ok(answer("a", vec![row("db", "a", ROUTE_LOCAL, 10.0, 1.0)])),
                ),
            ],
            7,
            1000,
        );
        assert_eq!(merged.volumes[0].write.iops, 10.0);
        assert!(!merged.volumes[0].owner_unreachable);
        let s = merged.cnodes.iter().find(|c| c.id == "s").unwrap();
        assert!(!s.answered && s.error.as_deref().unwrap().contains("answered by c.node a"));
    }

    #[test]
    fn sparklines_are_added_from_their_ends() {
        assert_eq!(
            add_from_ends(&[1.0, 2.0, 3.0], &[10.0]),
            vec![1.0, 2.0, 13.0]
        );
        assert_eq!(add_from_ends(&[5.0], &[1.0, 2.0]), vec![1.0, 7.0]);
        assert_eq!(add_from_ends(&[], &[]), Vec::<f32>::new());
    }
}
