//! Asymmetric logical unit access (SPC-4 5.15), implicit only: the target port groups a LU is
//! reached through and the access state of each, as an [`AluaProvider`] tells them. One
//! group per c.node serving the LU; the server (or a cluster layer) implements the provider
//! and decides the states (the volume's owner active/optimized, the others
//! active/non-optimized, both ends of a handover transitioning).
//!
//! Here: the [`PortGroups`] value a provider answers, its encoding as REPORT TARGET PORT
//! GROUPS parameter data, which group a target port belongs to (for the Device
//! Identification VPD page), and which commands a port in a non-active state refuses. The
//! unit attention a change of states raises is queued by [`crate::LunState`]. No I/O, no
//! clock: a provider's `generation` is how a change is noticed.

use crate::sense::{asc, key, Sense};

/// Asymmetric access states (SPC-4 table 159).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AccessState {
    ActiveOptimized,
    ActiveNonOptimized,
    Standby,
    Unavailable,
    Transitioning,
}

impl AccessState {
    /// The ASYMMETRIC ACCESS STATE code.
    pub fn code(self) -> u8 {
        match self {
            AccessState::ActiveOptimized => 0x0,
            AccessState::ActiveNonOptimized => 0x1,
            AccessState::Standby => 0x2,
            AccessState::Unavailable => 0x3,
            AccessState::Transitioning => 0xf,
        }
    }

    /// The sense a command this state does not serve is refused with: NOT READY, LOGICAL
    /// UNIT NOT ACCESSIBLE and why. `None` for the active states, which serve everything.
    pub(crate) fn refusal(self) -> Option<Sense> {
        let code = match self {
            AccessState::ActiveOptimized | AccessState::ActiveNonOptimized => return None,
            AccessState::Transitioning => asc::ASYMMETRIC_ACCESS_STATE_TRANSITION,
            AccessState::Standby => asc::TARGET_PORT_IN_STANDBY_STATE,
            AccessState::Unavailable => asc::TARGET_PORT_IN_UNAVAILABLE_STATE,
        };
        Some(Sense::new(key::NOT_READY, code))
    }
}

/// One target port group: its identifier (unique across the SCSI target device, so across
/// the cluster), its state for this LU, and the relative target port identifiers of its
/// ports (also unique across the device).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroup {
    pub id: u16,
    pub state: AccessState,
    pub ports: Vec<u16>,
}

/// Every target port group of a LU, as REPORT TARGET PORT GROUPS reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortGroups {
    pub groups: Vec<PortGroup>,
    /// IMPLICIT TRANSITION TIME: the seconds a transition may take (0: unspecified).
    pub implicit_transition_time_secs: u8,
}

impl PortGroups {
    /// One group, active/optimized: a LU reached through one c.node.
    pub fn single(id: u16, ports: Vec<u16>) -> PortGroups {
        PortGroups {
            groups: vec![PortGroup {
                id,
                state: AccessState::ActiveOptimized,
                ports,
            }],
            implicit_transition_time_secs: 0,
        }
    }

    /// The group `port` belongs to.
    pub fn group_of(&self, port: u16) -> Option<&PortGroup> {
        self.groups.iter().find(|g| g.ports.contains(&port))
    }
}

/// Where a LU's target port groups and their states come from. Shared by every session of
/// the LU; called from the threads that run commands, so it must answer from memory.
pub trait AluaProvider: Send + Sync + std::fmt::Debug {
    /// Changes whenever the states (or the groups) change; [`crate::LunState`] compares it
    /// before each command to raise ASYMMETRIC ACCESS STATE CHANGED. Called per command:
    /// make it an atomic load.
    fn generation(&self) -> u64;
    /// The groups now.
    fn port_groups(&self) -> PortGroups;
    /// The state of the group `relative_target_port` belongs to; active/optimized for a port
    /// in no group. Called per command: override it to answer without building the groups.
    fn access_state(&self, relative_target_port: u16) -> AccessState {
        self.port_groups()
            .group_of(relative_target_port)
            .map_or(AccessState::ActiveOptimized, |g| g.state)
    }
}

/// Byte 1 of a target port group descriptor: T_SUP, U_SUP, S_SUP, AN_SUP, AO_SUP, every
/// state [`AccessState`] has.
const SUPPORTED_STATES: u8 = 0x80 | 0x08 | 0x04 | 0x02 | 0x01;
/// Extended header byte 4: FORMAT TYPE 001b.
const FORMAT_EXTENDED: u8 = 0x10;
/// Byte 5 of a descriptor: STATUS CODE 02h, the state was changed by an implicit
/// transition; 00h when it is active/optimized (nothing to explain).
const STATUS_IMPLICIT_TRANSITION: u8 = 0x02;
/// Target ports one descriptor lists: TARGET PORT COUNT is one byte.
const GROUP_PORTS_MAX: usize = u8::MAX as usize;

/// REPORT TARGET PORT GROUPS parameter data (SPC-4 6.36), whole: the caller cuts it to the
/// allocation length. RETURN DATA LENGTH counts every byte after itself in both header
/// formats (Linux `scsi_dh_alua` and sg_rtpg read it so).
pub(crate) fn encode_port_groups(groups: &PortGroups, extended_header: bool) -> Vec<u8> {
    let mut data = vec![0u8; 4];
    if extended_header {
        data.extend([FORMAT_EXTENDED, groups.implicit_transition_time_secs, 0, 0]);
    }
    for group in &groups.groups {
        let ports = &group.ports[..group.ports.len().min(GROUP_PORTS_MAX)];
        let status = if group.state == AccessState::ActiveOptimized {
            0
        } else {
            STATUS_IMPLICIT_TRANSITION
        };
        // PREF 0, the state; the supported states; the group's id; reserved; STATUS CODE;
        // vendor specific; TARGET PORT COUNT.
        data.push(group.state.code());
        data.push(SUPPORTED_STATES);
        data.extend(group.id.to_be_bytes());
        // At most GROUP_PORTS_MAX ports, which fits a byte.
        let count = u8::try_from(ports.len()).unwrap_or(u8::MAX);
        data.extend([0, status, 0, count]);
        for port in ports {
            data.extend([0, 0]);
            data.extend(port.to_be_bytes());
        }
    }
    let len = u32::try_from(data.len() - 4).unwrap_or(u32::MAX);
    data[0..4].copy_from_slice(&len.to_be_bytes());
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three_cnodes() -> PortGroups {
        PortGroups {
            groups: vec![
                PortGroup {
                    id: 1,
                    state: AccessState::ActiveOptimized,
                    ports: vec![1, 2],
                },
                PortGroup {
                    id: 2,
                    state: AccessState::ActiveNonOptimized,
                    ports: vec![257],
                },
                PortGroup {
                    id: 3,
                    state: AccessState::Transitioning,
                    ports: vec![513, 514],
                },
            ],
            implicit_transition_time_secs: 30,
        }
    }

    fn be32(d: &[u8]) -> u32 {
        u32::from_be_bytes([d[0], d[1], d[2], d[3]])
    }

    #[test]
    fn states_have_their_spc4_codes() {
        let codes: Vec<u8> = [
            AccessState::ActiveOptimized,
            AccessState::ActiveNonOptimized,
            AccessState::Standby,
            AccessState::Unavailable,
            AccessState::Transitioning,
        ]
        .map(AccessState::code)
        .into();
        assert_eq!(codes, vec![0x0, 0x1, 0x2, 0x3, 0xf]);
    }

    #[test]
    fn one_descriptor_per_group_in_the_spc4_layout() {
        let d = encode_port_groups(&three_cnodes(), false);
        // Header, then descriptors of 8 bytes plus 4 per port.
        assert_eq!(d.len(), 4 + (8 + 8) + (8 + 4) + (8 + 8));
        assert_eq!(be32(&d) as usize, d.len() - 4);
        let first = &d[4..];
        assert_eq!(first[0], 0x00, "PREF 0, active/optimized");
        assert_eq!(first[1], 0x8f, "T_SUP U_SUP S_SUP AN_SUP AO_SUP");
        assert_eq!(&first[2..4], &[0, 1], "TARGET PORT GROUP");
        assert_eq!(first[5], 0, "no status for the optimized group");
        assert_eq!(first[7], 2, "TARGET PORT COUNT");
        assert_eq!(&first[8..12], &[0, 0, 0, 1]);
        assert_eq!(&first[12..16], &[0, 0, 0, 2]);
        let second = &first[16..];
        assert_eq!((second[0], &second[2..4]), (0x01, &[0u8, 2][..]));
        assert_eq!(second[5], 0x02, "altered by an implicit transition");
        assert_eq!(&second[8..12], &[0, 0, 0x01, 0x01], "relative port 257");
        let third = &second[12..];
        assert_eq!((third[0], third[7]), (0x0f, 2), "transitioning, two ports");
    }

    #[test]
    fn extended_header_carries_the_implicit_transition_time() {
        let d = encode_port_groups(&three_cnodes(), true);
        assert_eq!(be32(&d) as usize, d.len() - 4);
        assert_eq!(d[4], 0x10, "FORMAT TYPE 001b");
        assert_eq!(d[5], 30, "IMPLICIT TRANSITION TIME");
        assert_eq!(&d[10..12], &[0, 1], "first descriptor after 8 bytes");
    }

    #[test]
    fn only_active_states_serve_every_command() {
        assert_eq!(AccessState::ActiveOptimized.refusal(), None);
        assert_eq!(AccessState::ActiveNonOptimized.refusal(), None);
        let t = AccessState::Transitioning.refusal().expect("refused");
        assert_eq!((t.key, t.asc, t.ascq), (key::NOT_READY, 0x04, 0x0a));
        let s = AccessState::Standby.refusal().expect("refused");
        assert_eq!((s.asc, s.ascq), (0x04, 0x0b));
        let u = AccessState::Unavailable.refusal().expect("refused");
        assert_eq!((u.asc, u.ascq), (0x04, 0x0c));
    }

    #[test]
    fn without_a_provider_one_group_holds_every_port_of_the_identity() {
        let id = crate::mem_lun::test_identity();
        let groups = crate::LunState::new().port_groups(&id);
        let d = encode_port_groups(&groups, false);
        assert_eq!(d.len(), 4 + 8 + 2 * 4);
        assert_eq!(be32(&d), 16);
        assert_eq!(d[4] & 0x0f, 0, "active/optimized");
        assert_eq!(d[5] & 0x01, 0x01, "AO_SUP");
        assert_eq!(&d[6..8], &id.target_port_group.to_be_bytes());
        assert_eq!(&d[14..16], &id.relative_target_port.to_be_bytes());
        assert_eq!(d[11], 2, "both ports of the group");
        assert_eq!(&d[18..20], &2u16.to_be_bytes());
        let d = encode_port_groups(&groups, true);
        assert_eq!(d.len(), 8 + 8 + 2 * 4);
        assert_eq!(be32(&d), 20);
        assert_eq!((d[4], d[5]), (0x10, 0));
    }

    #[test]
    fn ports_find_their_group() {
        let g = three_cnodes();
        assert_eq!(g.group_of(257).map(|g| g.id), Some(2));
        assert_eq!(g.group_of(3), None);
        assert_eq!(
            PortGroups::single(7, vec![1]).group_of(1).map(|g| g.id),
            Some(7)
        );
    }
}
