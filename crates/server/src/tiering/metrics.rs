//! The figures per tier in `/metrics`: the bytes stored on each tier, the IOPS the heat saw
//! there over each window, and the heat's memory. (Bytes moved up and down between tiers
//! come with the mover.)

use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::MetricType;

use super::heat::Window;
use super::{now_s, Tiering};

/// Encodes the tier families; `stored_bytes` is what the local store holds (its tier's).
pub fn encode(
    encoder: &mut DescriptorEncoder,
    tiering: &Tiering,
    stored_bytes: u64,
) -> std::fmt::Result {
    let tier = tiering.config.tier.as_str();
    let now = now_s();
    let iops = tiering.iops(now);
    encoder
        .encode_descriptor(
            "tier_stored_bytes",
            "Bytes stored on each tier",
            None,
            MetricType::Gauge,
        )?
        .encode_family(&vec![("tier", tier)])?
        .encode_gauge(&(stored_bytes as f64))?;
    let mut family = encoder.encode_descriptor(
        "tier_iops",
        "Reads and writes per second on each tier, averaged over the window (hour, day, week)",
        None,
        MetricType::Gauge,
    )?;
    for w in Window::ALL {
        let window = match w {
            Window::Hour => "hour",
            Window::Day => "day",
            Window::Week => "week",
        };
        family
            .encode_family(&vec![("tier", tier), ("window", window)])?
            .encode_gauge(&iops[w.index()])?;
    }
    encoder
        .encode_descriptor(
            "heat_memory_bytes",
            "Memory the heat counters take (per extent of every volume)",
            None,
            MetricType::Gauge,
        )?
        .encode_gauge(&((tiering.extents() * super::heat::BYTES_PER_EXTENT) as f64))?;
    Ok(())
}
