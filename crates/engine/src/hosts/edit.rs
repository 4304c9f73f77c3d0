//! Changing a host in place, as an array's host edit does: add or remove one of its iSCSI
//! initiator names, and set, change or remove its CHAP secrets, without deleting the host and
//! so without unmapping its LUNs.
//!
//! A change is one commit of the cluster state and bumps the hosts generation, so iSCSI
//! sessions rebuild their LUN map at their next command: a removed initiator's sessions lose
//! their LUNs at once. CHAP is checked at login: a changed secret applies to the next login,
//! sessions logged in with the old one go on. The invariants of `host create` hold after every
//! edit (a host keeps at least one initiator, address or TLS name; CHAP needs an initiator).

use crate::engine::Engine;
use crate::error::EngineError;
use crate::host_records::{ChapRecord, HostRecord, MutualChap, Secret};

use super::{find_host, host_info, validate, HostInfo};

/// CHAP settings as `host create` and `host set-chap` take them, secrets in plain text.
/// All `None`: no CHAP.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChapSpec {
    pub user: Option<String>,
    pub secret: Option<String>,
    /// The name the target answers mutual CHAP with (default: the CHAP user).
    pub mutual_user: Option<String>,
    pub mutual_secret: Option<String>,
}

impl Engine {
    /// Let the host log in with one more initiator name.
    pub fn add_initiator(&self, host: &str, iqn: &str) -> Result<HostInfo, EngineError> {
        let iqn = validate::initiator_name(iqn)?;
        self.edit_host(host, |state, h| {
            if let Some(other) = state.iter().find(|o| o.iqns.contains(&iqn)) {
                return Err(EngineError::InUse {
                    what: format!("initiator {iqn:?}"),
                    detail: format!("it belongs to host {:?}", other.name),
                });
            }
            if h.iqns.len() >= validate::HOST_NAMES_MAX {
                return Err(EngineError::InvalidHost {
                    reason: format!(
                        "host {:?} has {} initiator names, the most a host may have",
                        h.name,
                        h.iqns.len()
                    ),
                });
            }
            h.iqns.push(iqn.clone());
            Ok(())
        })
    }

    /// Take an initiator name away from the host: its sessions lose their LUNs.
    pub fn remove_initiator(&self, host: &str, iqn: &str) -> Result<HostInfo, EngineError> {
        let iqn = iqn.trim().to_ascii_lowercase();
        self.edit_host(host, |_, h| {
            if !h.iqns.contains(&iqn) {
                return Err(EngineError::InvalidHost {
                    reason: format!(
                        "host {:?} has no initiator {iqn:?} (it has: {})",
                        h.name,
                        list_or_none(&h.iqns)
                    ),
                });
            }
            h.iqns.retain(|i| *i != iqn);
            if h.iqns.is_empty() && h.chap.is_some() {
                return Err(EngineError::InvalidHost {
                    reason: format!(
                        "{iqn:?} is the last initiator of host {:?}, which has CHAP secrets: remove its CHAP first (weft host set-chap {} --none), or add another initiator",
                        h.name, h.name
                    ),
                });
            }
            if h.iqns.is_empty() && h.nbd_addresses.is_empty() && h.tls_names.is_empty() {
                return Err(EngineError::InvalidHost {
                    reason: format!(
                        "{iqn:?} is all that identifies host {:?}: add another initiator first, or delete the host",
                        h.name
                    ),
                });
            }
            Ok(())
        })
    }

    /// Set, change or (with an empty spec) remove a host's CHAP secrets.
    pub fn set_host_chap(&self, host: &str, spec: &ChapSpec) -> Result<HostInfo, EngineError> {
        let chap = chap_record(spec)?;
        self.edit_host(host, |_, h| {
            if chap.is_some() && h.iqns.is_empty() {
                return Err(EngineError::InvalidHost {
                    reason: format!(
                        "CHAP secrets are for iSCSI: host {:?} has no initiator name (weft host add-initiator {} IQN)",
                        h.name, h.name
                    ),
                });
            }
            h.chap = chap.clone();
            Ok(())
        })
    }

    /// Apply `change` to a copy of the host (it sees the other hosts too), then commit.
    fn edit_host(
        &self,
        host: &str,
        change: impl FnOnce(&[HostRecord], &mut HostRecord) -> Result<(), EngineError>,
    ) -> Result<HostInfo, EngineError> {
        let mut meta = self.shared.meta.lock();
        let mut record = find_host(&meta.state, host)?;
        let others: Vec<HostRecord> = meta
            .state
            .hosts
            .iter()
            .filter(|h| h.name != host)
            .cloned()
            .collect();
        change(&others, &mut record)?;
        let mut next = meta.state.clone();
        for h in &mut next.hosts {
            if h.name == host {
                *h = record.clone();
            }
        }
        meta.commit(next)?;
        self.hosts_changed();
        tracing::info!(host, "host changed");
        host_info(&meta.state, host)
    }
}

/// Validate CHAP settings: both a user and a secret or neither; a mutual secret only with
/// one-way CHAP, and different from its secret (RFC 7143 §12.1.3).
pub(super) fn chap_record(spec: &ChapSpec) -> Result<Option<ChapRecord>, EngineError> {
    let invalid = |reason: &str| EngineError::InvalidHost {
        reason: reason.to_string(),
    };
    let (user, secret) = match (&spec.user, &spec.secret) {
        (None, None) => {
            if spec.mutual_secret.is_some() || spec.mutual_user.is_some() {
                return Err(invalid(
                    "mutual CHAP needs one-way CHAP too (--chap-user and --chap-secret)",
                ));
            }
            return Ok(None);
        }
        (Some(user), Some(secret)) => (user, secret),
        _ => {
            return Err(invalid(
                "CHAP needs both a user (--chap-user) and a secret (--chap-secret)",
            ))
        }
    };
    let user = validate::chap_user(user)?;
    let secret = validate::chap_secret(secret, "CHAP secret")?;
    let mutual = match &spec.mutual_secret {
        // A mutual user without a mutual secret means nothing (as `host create` always took it).
        None => None,
        Some(m) => {
            let m = validate::chap_secret(m, "mutual CHAP secret")?;
            if m == secret {
                return Err(invalid(
                    "the mutual CHAP secret must differ from the CHAP secret (RFC 7143 §12.1.3)",
                ));
            }
            let user = match &spec.mutual_user {
                Some(u) => validate::chap_user(u)?,
                None => user.clone(),
            };
            Some(MutualChap {
                user,
                secret: Secret(m),
            })
        }
    };
    Ok(Some(ChapRecord {
        user,
        secret: Secret(secret),
        mutual,
    }))
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(user: Option<&str>, secret: Option<&str>, mutual: Option<&str>) -> ChapSpec {
        ChapSpec {
            user: user.map(Into::into),
            secret: secret.map(Into::into),
            mutual_user: None,
            mutual_secret: mutual.map(Into::into),
        }
    }

    #[test]
    fn chap_needs_user_and_secret_and_a_different_mutual_secret() {
        assert_eq!(chap_record(&ChapSpec::default()).unwrap(), None);
        let one_way = chap_record(&spec(Some("db1"), Some("secret-0123456"), None)).unwrap();
        assert_eq!(one_way.unwrap().secret.expose(), "secret-0123456");
        let mutual = chap_record(&spec(
            Some("db1"),
            Some("secret-0123456"),
            Some("target-0123456"),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(mutual.mutual.unwrap().user, "db1");
        for bad in [
            spec(Some("db1"), None, None),
            spec(None, Some("secret-0123456"), None),
            spec(None, None, Some("target-0123456")),
            spec(Some("db1"), Some("short"), None),
            spec(Some("db1"), Some("secret-0123456"), Some("secret-0123456")),
        ] {
            assert!(chap_record(&bad).is_err(), "{bad:?}");
        }
    }
}
