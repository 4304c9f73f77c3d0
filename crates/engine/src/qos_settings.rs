//! A volume's quality-of-service settings as the catalog keeps them (with the volume record),
//! and the classes `gold`, `silver` and `bronze`: templates a user's own fields override.
//!
//! Pure data: the throttle that enforces these lives in the server (`weft_server::qos`).
//! IOPS are counted in 4 KiB units (a 64 KiB I/O is 16), as SolidFire normalises, so a limit
//! means the same whatever block size the client uses.

use serde::{Deserialize, Serialize};

/// The size of one I/O unit of an IOPS limit: an I/O of n bytes counts ceil(n / 4096), at
/// least one.
pub const QOS_IO_UNIT_BYTES: u64 = 4096;

/// What a user set on a volume. Every field is optional: absent means "no limit" (or "the
/// class's value" when `class` names one). Stored as given, resolved with [`resolve`] when
/// the throttle is (re)built, so a class's values may change in a later release and the
/// volume follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct QosSettings {
    /// A template (`gold`, `silver`, `bronze`) whose values apply where a field is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Reads and writes together, in 4 KiB units per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops_max: Option<u64>,
    /// Reads alone, in 4 KiB units per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_iops_max: Option<u64>,
    /// Writes alone, in 4 KiB units per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_iops_max: Option<u64>,
    /// How many I/O units the IOPS buckets hold: an idle volume may run this many above its
    /// rate at once. Default: a tenth of a second at the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops_burst: Option<u64>,
    /// Reads and writes together, in bytes per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_per_s_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_bytes_per_s_max: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_bytes_per_s_max: Option<u64>,
    /// How many bytes the byte buckets hold. Default: a tenth of a second at the rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_burst: Option<u64>,
    /// The minimum share: the latency controller never throttles this volume below this many
    /// 4 KiB units per second for another volume's target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iops_min: Option<u64>,
    /// The p99 completion latency this volume should keep, in microseconds. When it misses,
    /// volumes with no target or a looser one are throttled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_target_us: Option<u64>,
}

/// The class names, best first.
pub const QOS_CLASSES: [&str; 3] = ["gold", "silver", "bronze"];

/// A class's template. The values (documented in README.md, "Quality of service"):
///
/// | class | IOPS max | burst | MB/s max | minimum share | p99 target |
/// |---|---:|---:|---:|---:|---:|
/// | gold | 50,000 | 100,000 | none | 10,000 | 2 ms |
/// | silver | 20,000 | 40,000 | 400 | 2,000 | 10 ms |
/// | bronze | 5,000 | 10,000 | 100 | 500 | none |
pub fn class_template(name: &str) -> Option<QosSettings> {
    let t =
        |iops: u64, burst: u64, mbps: Option<u64>, min: u64, target_us: Option<u64>| QosSettings {
            iops_max: Some(iops),
            iops_burst: Some(burst),
            bytes_per_s_max: mbps.map(|m| m * 1_000_000),
            iops_min: Some(min),
            latency_target_us: target_us,
            ..QosSettings::default()
        };
    match name {
        "gold" => Some(t(50_000, 100_000, None, 10_000, Some(2_000))),
        "silver" => Some(t(20_000, 40_000, Some(400), 2_000, Some(10_000))),
        "bronze" => Some(t(5_000, 10_000, Some(100), 500, None)),
        _ => None,
    }
}

impl QosSettings {
    /// Settings as a catalog stores them: empty ones are none, others must validate.
    pub(crate) fn checked(
        settings: Option<QosSettings>,
    ) -> Result<Option<QosSettings>, crate::EngineError> {
        let settings = settings.filter(|s| !s.is_empty());
        if let Some(s) = &settings {
            s.validate()
                .map_err(|reason| crate::EngineError::InvalidQos { reason })?;
        }
        Ok(settings)
    }

    /// Nothing set: the same as no QoS.
    pub fn is_empty(&self) -> bool {
        *self == QosSettings::default()
    }

    /// `self`'s fields where set, `other`'s elsewhere (for a live change that names only
    /// some fields).
    pub fn overlay(&self, other: &QosSettings) -> QosSettings {
        fn pick<T: Clone>(a: &Option<T>, b: &Option<T>) -> Option<T> {
            a.clone().or_else(|| b.clone())
        }
        QosSettings {
            class: pick(&self.class, &other.class),
            iops_max: pick(&self.iops_max, &other.iops_max),
            read_iops_max: pick(&self.read_iops_max, &other.read_iops_max),
            write_iops_max: pick(&self.write_iops_max, &other.write_iops_max),
            iops_burst: pick(&self.iops_burst, &other.iops_burst),
            bytes_per_s_max: pick(&self.bytes_per_s_max, &other.bytes_per_s_max),
            read_bytes_per_s_max: pick(&self.read_bytes_per_s_max, &other.read_bytes_per_s_max),
            write_bytes_per_s_max: pick(&self.write_bytes_per_s_max, &other.write_bytes_per_s_max),
            bytes_burst: pick(&self.bytes_burst, &other.bytes_burst),
            iops_min: pick(&self.iops_min, &other.iops_min),
            latency_target_us: pick(&self.latency_target_us, &other.latency_target_us),
        }
    }

    /// Refuses an unknown class and zero rates (a zero limit would stop the volume; clear the
    /// field instead).
    pub fn validate(&self) -> Result<(), String> {
        if let Some(c) = &self.class {
            if class_template(c).is_none() {
                return Err(format!(
                    "unknown QoS class {c:?}: one of {}",
                    QOS_CLASSES.join(", ")
                ));
            }
        }
        let fields = [
            ("iops_max", self.iops_max),
            ("read_iops_max", self.read_iops_max),
            ("write_iops_max", self.write_iops_max),
            ("iops_burst", self.iops_burst),
            ("bytes_per_s_max", self.bytes_per_s_max),
            ("read_bytes_per_s_max", self.read_bytes_per_s_max),
            ("write_bytes_per_s_max", self.write_bytes_per_s_max),
            ("bytes_burst", self.bytes_burst),
            ("latency_target_us", self.latency_target_us),
        ];
        for (name, value) in fields {
            if value == Some(0) {
                return Err(format!(
                    "{name} must be above zero (clear it to remove the limit)"
                ));
            }
        }
        Ok(())
    }

    /// The values in force: the user's fields over the class's template.
    pub fn resolve(&self) -> QosSettings {
        match self.class.as_deref().and_then(class_template) {
            Some(template) => self.overlay(&template),
            None => self.clone(),
        }
    }
}

/// The settings in force for a stored value (none for no settings).
pub fn resolve(settings: Option<&QosSettings>) -> QosSettings {
    settings.map(QosSettings::resolve).unwrap_or_default()
}

/// I/O units of an I/O of `bytes` bytes: ceil(bytes / 4 KiB), at least one.
pub fn io_units(bytes: u64) -> u64 {
    bytes.div_ceil(QOS_IO_UNIT_BYTES).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_fields_override_the_class() {
        let s = QosSettings {
            class: Some("gold".into()),
            iops_max: Some(1234),
            ..QosSettings::default()
        };
        let r = s.resolve();
        assert_eq!(r.iops_max, Some(1234));
        assert_eq!(r.latency_target_us, Some(2_000));
        assert_eq!(r.iops_min, Some(10_000));
    }

    #[test]
    fn bad_values_are_refused() {
        let unknown = QosSettings {
            class: Some("platinum".into()),
            ..QosSettings::default()
        };
        assert!(unknown.validate().unwrap_err().contains("gold"));
        let zero = QosSettings {
            iops_max: Some(0),
            ..QosSettings::default()
        };
        assert!(zero.validate().is_err());
        for class in QOS_CLASSES {
            assert!(class_template(class).unwrap().validate().is_ok());
        }
    }

    #[test]
    fn units_are_4k() {
        assert_eq!(io_units(512), 1);
        assert_eq!(io_units(4096), 1);
        assert_eq!(io_units(4097), 2);
        assert_eq!(io_units(65536), 16);
        assert_eq!(io_units(0), 1);
    }

    #[test]
    fn old_records_without_settings_load() {
        let s: QosSettings = serde_json::from_str("{}").unwrap();
        assert!(s.is_empty());
    }
}
