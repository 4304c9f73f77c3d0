//! The per-volume families of `/metrics`: I/O counters and latency histograms per export,
//! protocol and operation, and size, space and data reduction per volume and family.
//!
//! In a cluster every series carries its volume's `shard`, and the engine figures come from
//! every engine of the process (its own shard's and those it owns besides). The I/O counters
//! are the front ends' (where a host's request came in), so they also count exports of shards
//! another c.node owns; their `route` says which: `local` (served by an engine of this
//! process) or `forwarded` (passed on to the shard's owner). Summed over every c.node,
//! `route` left out, they count each host request once; `route="local"` are the requests the
//! owners served from their own front ends. The route is read at the scrape: when a shard
//! moves, its exports' counters move from one route to the other. In single-process mode
//! the series have no `shard` or `route`.

use std::collections::HashMap;

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;
use weft_engine::Engine;

use super::{family, Labels};
use crate::ha::forward::shards::ShardRouter;
use crate::io_stats::{prometheus_buckets, IoStats, Op, Protocol};

/// The label of an export's I/O served by an engine of this process.
pub const ROUTE_LOCAL: &str = "local";
/// The label of an export's I/O passed on to its shard's owner.
pub const ROUTE_FORWARDED: &str = "forwarded";
/// The shard and route of an export no shard lists now (deleted since its last I/O).
const UNKNOWN: &str = "unknown";

/// Each export's shard and route in a cluster; empty (no labels) in single-process mode.
#[derive(Debug, Default)]
pub(super) struct Placement {
    by_name: HashMap<String, (String, &'static str)>,
    cluster: bool,
}

impl Placement {
    /// The placement `router` (a cluster's) says now; `None`: single-process mode.
    pub fn read(router: Option<&ShardRouter>) -> Placement {
        let Some(router) = router else {
            return Placement::default();
        };
        let by_name = router
            .placements()
            .into_iter()
            .map(|p| {
                let route = if p.here { ROUTE_LOCAL } else { ROUTE_FORWARDED };
                (p.export.name, (p.shard.to_string(), route))
            })
            .collect();
        Placement {
            by_name,
            cluster: true,
        }
    }

    /// `labels` with the export's shard and route appended, in a cluster.
    fn io_labels<'a>(&'a self, name: &str, mut labels: Labels<'a>) -> Labels<'a> {
        if self.cluster {
            let (shard, route) = self
                .by_name
                .get(name)
                .map_or((UNKNOWN, UNKNOWN), |(s, r)| (s.as_str(), *r));
            labels.push(("shard", shard));
            labels.push(("route", route));
        }
        labels
    }
}

/// The engines whose volumes a scrape lists: the own shard's first, then those the process
/// owns besides, each with its shard's label (`None` in single-process mode).
pub(super) type Engines<'a> = [(Option<String>, &'a Engine)];

pub(super) fn encode_io(
    encoder: &mut DescriptorEncoder,
    io: &IoStats,
    placement: &Placement,
) -> std::fmt::Result {
    let exports = io.exports();
    let mut rows = Vec::new();
    for (name, counters) in &exports {
        for protocol in Protocol::ALL {
            for op in Op::ALL {
                let totals = counters.op(protocol, op).load();
                if totals.ops > 0 {
                    let labels = placement.io_labels(
                        name,
                        vec![
                            ("volume", name.as_ref()),
                            ("protocol", protocol.name()),
                            ("op", op.name()),
                        ],
                    );
                    rows.push((labels, totals));
                }
            }
        }
    }
    type Get = fn(&crate::io_stats::OpTotals) -> u64;
    let per_op: [(&str, &str, Get); 3] = [
        (
            "volume_io_requests",
            "I/O requests by volume (or snapshot), protocol and operation",
            |t| t.ops,
        ),
        (
            "volume_io_bytes",
            "Bytes read, written or discarded, by volume, protocol and operation",
            |t| t.bytes,
        ),
        (
            "volume_io_errors",
            "I/O requests that failed, by volume, protocol and operation",
            |t| t.errors,
        ),
    ];
    for (name, help, value) in per_op {
        let mut f = family(encoder, name, help, MetricType::Counter)?;
        for (labels, t) in &rows {
            f.counter(labels, value(t))?;
        }
    }
    let mut f = family(
        encoder,
        "volume_io_latency_seconds",
        "Time from request to answer inside weft, by volume, protocol and operation",
        MetricType::Histogram,
    )?;
    for (labels, t) in &rows {
        f.histogram(
            labels,
            t.latency_sum_us as f64 / 1e6,
            t.latency.total(),
            &prometheus_buckets(&t.latency),
        )?;
    }
    Ok(())
}

/// `labels` with `shard` appended when there is one.
fn with_shard<'a>(mut labels: Labels<'a>, shard: Option<&'a String>) -> Labels<'a> {
    if let Some(shard) = shard {
        labels.push(("shard", shard.as_str()));
    }
    labels
}

pub(super) fn encode_volumes(
    encoder: &mut DescriptorEncoder,
    engines: &Engines<'_>,
) -> std::fmt::Result {
    let volumes: Vec<(Option<&String>, weft_engine::VolumeInfo)> = engines
        .iter()
        .flat_map(|(shard, engine)| {
            engine
                .list_volumes()
                .into_iter()
                .map(move |v| (shard.as_ref(), v))
        })
        .collect();
    type Get = fn(&weft_engine::VolumeInfo) -> u64;
    let per_volume: [(&str, &str, Get); 4] = [
        ("volume_size_bytes", "Provisioned size of the volume", |v| {
            v.size_bytes
        }),
        (
            "volume_mapped_bytes",
            "Bytes of the volume that read as written data or zeroes",
            |v| v.space.mapped_bytes,
        ),
        (
            "volume_own_bytes",
            "Bytes written in the volume's own layer (a clone's changes since its base)",
            |v| v.space.own_bytes,
        ),
        (
            "volume_unique_stored_bytes",
            "Stored bytes that deleting the volume would free now",
            |v| v.space.unique_stored_bytes,
        ),
    ];
    for (name, help, value) in per_volume {
        let mut f = family(encoder, name, help, MetricType::Gauge)?;
        for (shard, v) in &volumes {
            let labels = with_shard(vec![("volume", v.name.as_str())], *shard);
            f.gauge(&labels, value(v) as f64)?;
        }
    }
    // One row per family (its volumes all carry the same summary); family ids are unique
    // across shards.
    let mut families: Vec<&(Option<&String>, weft_engine::VolumeInfo)> = Vec::new();
    for v in &volumes {
        if !families.iter().any(|f| f.1.family.id == v.1.family.id) {
            families.push(v);
        }
    }
    let ids: Vec<String> = families.iter().map(|v| v.1.family.id.to_string()).collect();
    type GetReduction = fn(&weft_engine::FamilyReduction) -> f64;
    let per_family: [(&str, &str, GetReduction); 6] = [
        (
            "family_logical_bytes",
            "Bytes the family's layers map (data or zeroes)",
            |r| r.logical_bytes as f64,
        ),
        ("family_zero_bytes", "Bytes eliminated as zeroes", |r| {
            r.zero_bytes as f64
        }),
        (
            "family_dedup_saved_bytes",
            "Bytes saved by deduplication",
            |r| r.dedup_saved_bytes as f64,
        ),
        (
            "family_compression_saved_bytes",
            "Bytes saved by compression",
            |r| r.compression_saved_bytes as f64,
        ),
        (
            "family_stored_bytes",
            "Bytes stored for the family, after reduction",
            |r| r.stored_bytes as f64,
        ),
        (
            "family_reduction_ratio",
            "Logical over stored bytes (0: nothing stored)",
            |r| r.ratio.unwrap_or(0.0),
        ),
    ];
    for (name, help, value) in per_family {
        let mut f = family(encoder, name, help, MetricType::Gauge)?;
        for ((shard, v), id) in families.iter().map(|f| (&f.0, &f.1)).zip(&ids) {
            let labels = with_shard(
                vec![("family", id.as_str()), ("volume", v.name.as_str())],
                *shard,
            );
            f.gauge(&labels, value(&v.family.reduction))?;
        }
    }
    Ok(())
}
