//! The QoS families of `/metrics`: per volume, I/Os the throttle made wait and the time they
//! waited, the limits in force and the latency controller's cap.

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::{family, Labels};
use crate::qos::QosRegistry;

/// `shard`: the label of the registry's shard, in a cluster.
pub(super) fn encode_qos(
    encoder: &mut DescriptorEncoder,
    qos: &QosRegistry,
    shard: Option<&str>,
) -> std::fmt::Result {
    let states = qos.states();
    let shard = shard.unwrap_or_default();
    let labels = |name| -> Labels {
        let mut l = vec![("volume", name)];
        if !shard.is_empty() {
            l.push(("shard", shard));
        }
        l
    };
    let mut f = family(
        encoder,
        "volume_qos_throttled_ios",
        "I/Os of the volume that waited for its QoS limits or the latency controller's cap",
        MetricType::Counter,
    )?;
    for s in &states {
        f.counter(&labels(s.name.as_str()), s.throttled_ios)?;
    }
    let mut f = family(
        encoder,
        "volume_qos_throttled_wait_seconds",
        "Time the volume's I/Os waited for its QoS limits or the latency controller's cap, summed",
        MetricType::Counter,
    )?;
    for s in &states {
        f.encoder
            .encode_family(&labels(s.name.as_str()))?
            .encode_counter::<prometheus_client::encoding::NoLabelSet, _, f64>(
            &s.throttled_wait_seconds,
            None,
        )?;
    }
    let mut f = family(
        encoder,
        "volume_qos_iops_limit",
        "The volume's IOPS limit (reads and writes together, 4 KiB units per second)",
        MetricType::Gauge,
    )?;
    for s in &states {
        if let Some(limit) = s.settings.iops_max {
            f.gauge(&labels(s.name.as_str()), limit as f64)?;
        }
    }
    let mut f = family(
        encoder,
        "volume_qos_latency_cap_iops",
        "The latency controller's cap on the volume now (4 KiB units per second), while it holds another volume's target",
        MetricType::Gauge,
    )?;
    for s in &states {
        if let Some(cap) = s.cap_units_per_s {
            f.gauge(&labels(s.name.as_str()), cap)?;
        }
    }
    Ok(())
}
