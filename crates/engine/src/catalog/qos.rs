//! A volume's QoS settings in the catalog: set, changed and read with the volume record, so
//! they survive restarts and move with the volume (one commit of the cluster state, like a
//! resize; no data moves and no client is disturbed).

use crate::engine::Engine;
use crate::error::EngineError;
use crate::qos_settings::QosSettings;

use super::find_volume;

impl Engine {
    /// Replace the volume's settings (`None` or empty settings: no QoS). Returns what is
    /// stored.
    pub fn set_volume_qos(
        &self,
        name: &str,
        settings: Option<QosSettings>,
    ) -> Result<Option<QosSettings>, EngineError> {
        let settings = QosSettings::checked(settings)?;
        let mut meta = self.shared.meta.lock();
        let record = find_volume(&meta.state, name)?;
        if record.qos == settings {
            return Ok(settings);
        }
        let mut next = meta.state.clone();
        for v in &mut next.volumes {
            if v.id == record.id {
                v.qos.clone_from(&settings);
            }
        }
        meta.commit(next)?;
        tracing::info!(volume = name, qos = ?settings, "volume QoS set");
        Ok(settings)
    }

    /// The volume's settings as stored (`None`: none).
    pub fn volume_qos(&self, name: &str) -> Result<Option<QosSettings>, EngineError> {
        let meta = self.shared.meta.lock();
        Ok(find_volume(&meta.state, name)?.qos)
    }

    /// Every volume with settings, by name: what the throttle re-reads to follow changes.
    pub fn volumes_qos(&self) -> Vec<(String, QosSettings)> {
        let meta = self.shared.meta.lock();
        meta.state
            .volumes
            .iter()
            .filter_map(|v| Some((v.name.clone(), v.qos.clone()?)))
            .collect()
    }
}
