//! `/metrics`: Prometheus text (OpenMetrics) on its own listener, without a token (bind it to
//! loopback or a monitoring network). Every scrape reads the live figures: per export the I/O
//! counters and latency histograms by protocol and operation ([`crate::io_stats`]), per volume
//! its size and space, per family its data reduction, the engine's journal and destage
//! backlog, GC and write amplification, capacity, repair, and per d.node its state and space.
//! In a cluster the per-volume series cover every shard the process owns and every export its
//! front ends serve, labelled with their shard and route ([`volumes`]).

use std::sync::{Arc, OnceLock};

use axum::http::{header, HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, MetricEncoder};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use weft_engine::{Engine, EngineStats, ShardId};

use crate::cluster::{ClusterPlacement, NodeState, NodeStatus};
use crate::ha::forward::shards::ShardRouter;
use crate::io_stats::IoStats;
use crate::shard_host::ShardHost;

/// What a scrape reads.
#[derive(Debug, Clone)]
pub struct MetricsSource {
    pub engine: Arc<Engine>,
    pub io: Arc<IoStats>,
    pub cluster: Option<Arc<ClusterPlacement>>,
    pub compute: Option<Arc<crate::ha::ComputeInfo>>,
    /// The used bytes over the last day (shared with the API), for days to full.
    pub capacity: Arc<crate::capacity::CapacityHistory>,
    /// Heat and tiers, for the figures per tier.
    pub tiering: Arc<crate::tiering::Tiering>,
    /// The volumes' throttles: throttled I/O per volume.
    pub qos: Arc<crate::qos::QosRegistry>,
    /// Every shard's exports and where they are served (`None`: single-process mode).
    pub router: Option<Arc<ShardRouter>>,
    /// The shards the process owns besides its own, once it serves them.
    pub(crate) extra_shards: ExtraShards,
}

/// The shards the process owns besides its own (`crate::shard_host`), set once the c.node
/// serves: the metrics listener starts before.
#[derive(Clone, Default)]
pub(crate) struct ExtraShards(pub Arc<OnceLock<Arc<ShardHost>>>);

impl std::fmt::Debug for ExtraShards {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExtraShards")
            .field("set", &self.0.get().is_some())
            .finish()
    }
}

mod qos;
mod volumes;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `/metrics` router: OpenMetrics to scrapers that ask for it (Prometheus does), the
/// classic Prometheus text format to everyone else (curl, promtool, older agents).
pub fn router(source: MetricsSource) -> Router {
    let source = Arc::new(source);
    Router::new().route(
        "/metrics",
        get(move |headers: HeaderMap| {
            let source = Arc::clone(&source);
            let openmetrics = headers
                .get_all(header::ACCEPT)
                .iter()
                .filter_map(|v| v.to_str().ok())
                .any(|v| v.contains("application/openmetrics-text"));
            async move {
                let extras = match source.extra_shards.0.get() {
                    Some(host) => host.extra_engines().await,
                    None => Vec::new(),
                };
                match tokio::task::spawn_blocking(move || render(&source, extras)).await {
                    Ok(Ok(text)) if openmetrics => {
                        ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response()
                    }
                    Ok(Ok(text)) => (
                        [(header::CONTENT_TYPE, PROMETHEUS_TEXT)],
                        openmetrics_to_prometheus_text(&text),
                    )
                        .into_response(),
                    Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
                    Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
                }
            }
        }),
    )
}

/// The text of one scrape; `extras` are the engines of the shards the process owns besides its
/// own.
pub fn render(
    source: &Arc<MetricsSource>,
    extras: Vec<(ShardId, Arc<Engine>)>,
) -> Result<String, String> {
    let mut registry = Registry::with_prefix("weft");
    registry.register_collector(Box::new(Scrape(Arc::clone(source), extras)));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)
        .map_err(|e| format!("encoding metrics: {e}"))?;
    Ok(text)
}

/// OpenMetrics names a counter family without its `_total` suffix and ends with `# EOF`;
/// the Prometheus text format (0.0.4) names the family with it and has no end marker.
pub fn openmetrics_to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + 64 * counters.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let rest = line
            .strip_prefix("# HELP ")
            .map(|r| ("# HELP ", r))
            .or_else(|| line.strip_prefix("# TYPE ").map(|r| ("# TYPE ", r)));
        match rest {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[derive(Debug)]
struct Scrape(Arc<MetricsSource>, Vec<(ShardId, Arc<Engine>)>);

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One metric family: a name, help, type and its labelled values.
struct Family<'e> {
    encoder: MetricEncoder<'e>,
}

fn family<'e>(
    encoder: &'e mut DescriptorEncoder,
    name: &'e str,
    help: &str,
    kind: MetricType,
) -> Result<Family<'e>, std::fmt::Error> {
    Ok(Family {
        encoder: encoder.encode_descriptor(name, help, None, kind)?,
    })
}

impl Family<'_> {
    fn counter(&mut self, labels: &Labels, value: u64) -> std::fmt::Result {
        if labels.is_empty() {
            return self
                .encoder
                .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None);
        }
        self.encoder
            .encode_family(labels)?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, u64>(&value, None)
    }

    fn gauge(&mut self, labels: &Labels, value: f64) -> std::fmt::Result {
        if labels.is_empty() {
            return self.encoder.encode_gauge(&value);
        }
        self.encoder.encode_family(labels)?.encode_gauge(&value)
    }

    fn histogram(
        &mut self,
        labels: &Labels,
        sum: f64,
        count: u64,
        b: &[(f64, u64)],
    ) -> std::fmt::Result {
        self.encoder
            .encode_family(labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(sum, count, b, None)
    }
}

/// Gauges without labels, one family each.
fn gauges(encoder: &mut DescriptorEncoder, list: &[(&str, &str, f64)]) -> std::fmt::Result {
    for (name, help, value) in list {
        family(encoder, name, help, MetricType::Gauge)?.gauge(&Vec::new(), *value)?;
    }
    Ok(())
}

/// Counters without labels, one family each (the encoder appends `_total`).
fn counters(encoder: &mut DescriptorEncoder, list: &[(&str, &str, u64)]) -> std::fmt::Result {
    for (name, help, value) in list {
        family(encoder, name, help, MetricType::Counter)?.counter(&Vec::new(), *value)?;
    }
    Ok(())
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let source = &self.0;
        family(
            &mut encoder,
            "build_info",
            "weft version",
            MetricType::Gauge,
        )?
        .gauge(&vec![("version", env!("CARGO_PKG_VERSION"))], 1.0)?;
        let placement = volumes::Placement::read(source.router.as_deref());
        volumes::encode_io(&mut encoder, &source.io, &placement)?;
        // In a cluster the own shard is the one the c.node was started for.
        let own_shard = source.compute.as_ref().map(|c| c.shard.to_string());
        qos::encode_qos(&mut encoder, &source.qos, own_shard.as_deref())?;
        let mut engines: Vec<(Option<String>, &Engine)> = vec![(own_shard, &source.engine)];
        engines.extend(
            self.1
                .iter()
                .map(|(shard, engine)| (Some(shard.to_string()), &**engine)),
        );
        volumes::encode_volumes(&mut encoder, &engines)?;
        let stats = source.engine.stats();
        encode_engine(&mut encoder, &stats)?;
        crate::tiering::metrics::encode(&mut encoder, &source.tiering, stats.used_bytes)?;
        encode_dnodes(
            &mut encoder,
            &source.engine,
            source.cluster.as_deref(),
            &stats,
        )?;
        if let Some(c) = &source.compute {
            let mode = c.write_buffer();
            gauges(
                &mut encoder,
                &[
                    (
                        "write_buffer_mirrored",
                        "1 when every write acknowledged now is also in the partner c.node's memory",
                        f64::from(u8::from(mode == "mirrored")),
                    ),
                    (
                        "write_buffer_partner_configured",
                        "1 when this c.node has a partner (--partner)",
                        f64::from(u8::from(c.partner.is_some())),
                    ),
                    (
                        "write_buffer_single_copy_bytes",
                        "Acknowledged bytes not yet destaged that only this c.node holds (0 while mirrored)",
                        if mode == "mirrored" { 0.0 } else { stats.buffer_bytes as f64 },
                    ),
                ],
            )?;
        }
        let capacity = crate::capacity::report_now(
            &source.engine,
            source.cluster.as_deref(),
            &source.capacity,
        );
        encode_capacity(&mut encoder, &capacity)?;
        Ok(())
    }
}

fn encode_engine(encoder: &mut DescriptorEncoder, s: &EngineStats) -> std::fmt::Result {
    let r = &s.reduction;
    gauges(
        encoder,
        &[
            (
                "logical_bytes",
                "Bytes mapped by every layer (data or zeroes)",
                r.logical_bytes as f64,
            ),
            (
                "stored_bytes",
                "Bytes of live stored blocks, after compression",
                r.stored_bytes as f64,
            ),
            (
                "zero_eliminated_bytes",
                "Bytes eliminated as zeroes",
                r.zero_bytes as f64,
            ),
            (
                "dedup_saved_bytes",
                "Bytes saved by deduplication",
                r.dedup_saved_bytes as f64,
            ),
            (
                "compression_saved_bytes",
                "Bytes saved by compression",
                r.compression_saved_bytes as f64,
            ),
            (
                "reduction_ratio",
                "Logical over stored bytes (0: nothing stored)",
                r.ratio.unwrap_or(0.0),
            ),
            (
                "write_buffer_bytes",
                "Acknowledged bytes in the journal not yet destaged",
                s.buffer_bytes as f64,
            ),
            (
                "write_buffer_records",
                "Journal records not yet destaged",
                s.buffer_records as f64,
            ),
            (
                "journal_files",
                "Journal files in use",
                s.journal_files as f64,
            ),
            (
                "sealed_segments",
                "Sealed log segments",
                s.sealed_segments as f64,
            ),
            (
                "write_amplification",
                "Bytes written to chunks per byte written by hosts (0: nothing written)",
                s.write_amplification.unwrap_or(0.0),
            ),
            (
                "capacity_bytes",
                "Capacity of the chunk stores (0: unknown)",
                s.capacity_bytes.unwrap_or(0) as f64,
            ),
            (
                "used_bytes",
                "Bytes used in the chunk stores",
                s.used_bytes as f64,
            ),
            (
                "out_of_space",
                "1 when writes are refused for lack of space",
                f64::from(u8::from(s.out_of_space)),
            ),
            ("volumes", "Volumes", s.volumes as f64),
            (
                "snapshots",
                "Snapshots that can be opened",
                s.snapshots as f64,
            ),
            (
                "metadata_memory_bytes",
                "Estimated memory of the block maps",
                s.metadata_memory_bytes as f64,
            ),
            (
                "read_cache_capacity_bytes",
                "Bound of the cache of blocks read from chunks (0: off)",
                s.read_cache.capacity_bytes as f64,
            ),
            (
                "read_cache_bytes",
                "Bytes held by the cache of blocks read from chunks",
                s.read_cache.bytes as f64,
            ),
            (
                "repair_running",
                "1 while a repair scan rebuilds chunks",
                f64::from(u8::from(s.repair.running)),
            ),
            (
                "repair_chunks_to_rebuild",
                "Chunks the current repair scan found missing or corrupt",
                s.repair.chunks_to_rebuild as f64,
            ),
            (
                "repair_chunks_rebuilt",
                "Chunks the current repair scan rebuilt",
                s.repair.chunks_rebuilt as f64,
            ),
            (
                "repair_rate_bytes_per_second",
                "Rebuild rate over the current scan",
                s.repair.rate_bytes_per_s as f64,
            ),
            (
                "repair_eta_seconds",
                "Estimated seconds until the current scan ends (0: none)",
                s.repair.eta_s.unwrap_or(0) as f64,
            ),
            (
                "repair_caught_up",
                "1 when a scan after the last placement change found nothing left",
                f64::from(u8::from(s.repair.caught_up)),
            ),
        ],
    )?;
    counters(
        encoder,
        &[
            (
                "host_written_bytes",
                "Bytes written by hosts",
                s.host_written_bytes,
            ),
            (
                "chunk_written_bytes",
                "Bytes written to chunks (segments, GC moves, summaries)",
                s.chunk_written_bytes,
            ),
            ("gc_runs", "Garbage collection runs", s.gc.runs),
            (
                "gc_segments_reclaimed",
                "Segments garbage collection reclaimed",
                s.gc.segments_reclaimed,
            ),
            (
                "gc_moved_bytes",
                "Live bytes garbage collection moved",
                s.gc.bytes_moved,
            ),
            (
                "gc_reclaimed_bytes",
                "Bytes garbage collection freed",
                s.gc.bytes_reclaimed,
            ),
            (
                "degraded_reads",
                "Reads that rebuilt a chunk from the rest of its stripe",
                s.degraded_reads,
            ),
            (
                "read_cache_hits",
                "Block reads served by the read cache",
                s.read_cache.hits,
            ),
            (
                "read_cache_misses",
                "Block reads from chunks the read cache did not hold",
                s.read_cache.misses,
            ),
            (
                "read_cache_evictions",
                "Blocks evicted from the read cache",
                s.read_cache.evictions,
            ),
            (
                "corrupt_reads",
                "Chunk reads that failed their checksum (never served)",
                s.corrupt_reads,
            ),
            (
                "chunks_missed_at_write",
                "Chunks not written with their stripe (repaired later)",
                s.chunks_missed_at_write,
            ),
            (
                "repair_chunks_rebuilt_all",
                "Chunks rebuilt since start",
                s.repair.chunks_rebuilt_total,
            ),
            (
                "repair_rebuilt_bytes",
                "Bytes rebuilt since start",
                s.repair.bytes_rebuilt_total,
            ),
        ],
    )
}

/// The capacity report: the same figures as `GET /api/v1/capacity` and `weft status`.
#[allow(clippy::cast_precision_loss)]
fn encode_capacity(
    encoder: &mut DescriptorEncoder,
    c: &crate::capacity::CapacityReport,
) -> std::fmt::Result {
    use crate::capacity::Level;
    gauges(
        encoder,
        &[
            (
                "capacity_raw_bytes",
                "Raw bytes weft can fill: chunks stored plus the free space of their file systems (each counted once), capped by limits",
                c.raw_bytes as f64,
            ),
            (
                "capacity_free_bytes",
                "Raw bytes the chunk stores can still take",
                c.free_bytes as f64,
            ),
            (
                "capacity_usable_bytes",
                "Host data that fits in the raw space after redundancy",
                c.usable_bytes as f64,
            ),
            (
                "capacity_used_ratio",
                "Chunks stored as a share of the raw space (0 to 1)",
                c.used_percent / 100.0,
            ),
            (
                "capacity_provisioned_bytes",
                "Sum of the volumes' sizes",
                c.provisioned_bytes as f64,
            ),
            (
                "capacity_overcommit_ratio",
                "Provisioned bytes per usable byte (0: no usable space)",
                c.overcommit.unwrap_or(0.0),
            ),
            (
                "capacity_growth_bytes_per_day",
                "Growth of the chunks stored over the last day (or since start), per day",
                c.growth_bytes_per_day.unwrap_or(0.0),
            ),
            (
                "capacity_level",
                "0 ok, 1 warning (80 % used), 2 critical (90 %): the worst of weft's space and its file systems",
                match c.level {
                    Level::Ok => 0.0,
                    Level::Warning => 1.0,
                    Level::Critical => 2.0,
                },
            ),
        ],
    )?;
    // Only while growing: a gauge of +Inf would be read as a number by dashboards.
    let mut f = family(
        encoder,
        "capacity_days_to_full",
        "Days until the raw space is full at the recent growth (absent: not growing)",
        MetricType::Gauge,
    )?;
    if let Some(days) = c.days_to_full {
        f.gauge(&Vec::new(), days)?;
    }
    type Get = fn(&crate::capacity::FileSystemSpace) -> f64;
    let per_fs: [(&str, &str, Get); 3] = [
        (
            "filesystem_size_bytes",
            "Size of a file system under the data dir or a d.node disk",
            |f| f.size_bytes as f64,
        ),
        (
            "filesystem_free_bytes",
            "Free bytes of the file system for a writer without root",
            |f| f.free_bytes as f64,
        ),
        (
            "filesystem_weft_used_bytes",
            "Bytes of weft's chunks on the file system",
            |f| f.weft_used_bytes as f64,
        ),
    ];
    for (name, help, value) in per_fs {
        let mut f = family(encoder, name, help, MetricType::Gauge)?;
        for fs in &c.filesystems {
            let paths = fs.paths.join(", ");
            f.gauge(
                &vec![("fs", fs.fs_id.as_str()), ("paths", paths.as_str())],
                value(fs),
            )?;
        }
    }
    Ok(())
}

/// One row per d.node: the cluster's, or in single-process mode the local store as `local`.
fn encode_dnodes(
    encoder: &mut DescriptorEncoder,
    engine: &Engine,
    cluster: Option<&ClusterPlacement>,
    stats: &EngineStats,
) -> std::fmt::Result {
    let nodes = match cluster {
        Some(c) => c.nodes(),
        None => {
            vec![NodeStatus {
                id: "local".into(),
                addr: String::new(),
                zone: String::new(),
                tier: String::new(),
                state: NodeState::Up,
                capacity_bytes: crate::capacity::local_store_capacity_bytes(
                    engine,
                    stats.capacity_bytes,
                )
                .unwrap_or(0),
                used_bytes: stats.used_bytes,
                down_for_s: None,
                pg_positions: 0,
                chunk_io: Default::default(),
            }]
        }
    };
    let rows: Vec<(Labels, &NodeStatus)> = nodes
        .iter()
        .map(|n| {
            (
                vec![
                    ("dnode", n.id.as_str()),
                    ("addr", n.addr.as_str()),
                    ("zone", n.zone.as_str()),
                ],
                n,
            )
        })
        .collect();
    type Get = fn(&NodeStatus) -> f64;
    let per_node: [(&str, &str, Get); 5] = [
        (
            "dnode_up",
            "1 when the d.node is registered and reachable",
            |n| f64::from(u8::from(n.state == NodeState::Up)),
        ),
        (
            "dnode_out",
            "1 when the d.node is out (its data is being moved away)",
            |n| f64::from(u8::from(n.state == NodeState::Out)),
        ),
        (
            "dnode_capacity_bytes",
            "Capacity of the d.node's disks",
            |n| n.capacity_bytes as f64,
        ),
        (
            "dnode_used_bytes",
            "Bytes used on the d.node's disks",
            |n| n.used_bytes as f64,
        ),
        (
            "dnode_pg_positions",
            "Placement-group positions the d.node holds",
            |n| n.pg_positions as f64,
        ),
    ];
    for (name, help, value) in per_node {
        let mut f = family(encoder, name, help, MetricType::Gauge)?;
        for (labels, n) in &rows {
            f.gauge(labels, value(n))?;
        }
    }
    if cluster.is_none() {
        return Ok(());
    }
    let mut f = family(
        encoder,
        "dnode_chunk_requests",
        "Chunk requests this c.node sent the d.node, by operation",
        MetricType::Counter,
    )?;
    for n in &nodes {
        let io = &n.chunk_io;
        for (op, count) in [("put", io.puts), ("read", io.reads), ("delete", io.deletes)] {
            f.counter(&vec![("dnode", n.id.as_str()), ("op", op)], count)?;
        }
    }
    let mut f = family(
        encoder,
        "dnode_chunk_bytes",
        "Chunk bytes this c.node wrote to or read from the d.node",
        MetricType::Counter,
    )?;
    for n in &nodes {
        let io = &n.chunk_io;
        for (op, bytes) in [("put", io.put_bytes), ("read", io.read_bytes)] {
            f.counter(&vec![("dnode", n.id.as_str()), ("op", op)], bytes)?;
        }
    }
    let mut f = family(
        encoder,
        "dnode_chunk_errors",
        "Chunk requests to the d.node that failed",
        MetricType::Counter,
    )?;
    for n in &nodes {
        f.counter(&vec![("dnode", n.id.as_str())], n.chunk_io.errors)?;
    }
    Ok(())
}
