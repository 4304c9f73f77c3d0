//! A consistency group's QoS settings in the catalog: stored with the group record
//! (`GroupRecord::qos`), so they survive restarts and follow the group's membership. The
//! server's throttle (`weft_server::qos`) gives the group one set of buckets its members
//! share.

use super::groups::find_group;
use crate::engine::Engine;
use crate::error::EngineError;
use crate::group_records::GroupQosListing;
use crate::qos_settings::QosSettings;

impl Engine {
    /// Replace the group's settings (`None` or empty settings: no group QoS). Returns what
    /// is stored.
    pub fn set_group_qos(
        &self,
        name: &str,
        settings: Option<QosSettings>,
    ) -> Result<Option<QosSettings>, EngineError> {
        let settings = QosSettings::checked(settings)?;
        let mut meta = self.shared.meta.lock();
        let group = find_group(&meta.state, name)?;
        if group.qos == settings {
            return Ok(settings);
        }
        let mut next = meta.state.clone();
        for g in &mut next.groups {
            if g.name == name {
                g.qos.clone_from(&settings);
            }
        }
        meta.commit(next)?;
        tracing::info!(group = name, qos = ?settings, "group QoS set");
        Ok(settings)
    }

    /// The group's settings as stored (`None`: none).
    pub fn group_qos(&self, name: &str) -> Result<Option<QosSettings>, EngineError> {
        let meta = self.shared.meta.lock();
        Ok(find_group(&meta.state, name)?.qos)
    }

    /// Every group with settings, with its members' names.
    pub fn groups_qos(&self) -> Vec<GroupQosListing> {
        let meta = self.shared.meta.lock();
        let state = &meta.state;
        state
            .groups
            .iter()
            .filter_map(|g| {
                let settings = g.qos.clone()?;
                let members = g
                    .members
                    .iter()
                    .filter_map(|m| state.volumes.iter().find(|v| v.id == m.volume))
                    .map(|v| v.name.clone())
                    .collect();
                Some(GroupQosListing {
                    group: g.name.clone(),
                    settings,
                    members,
                })
            })
            .collect()
    }
}
