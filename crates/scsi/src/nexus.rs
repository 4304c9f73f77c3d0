//! Who sent a command: the I_T nexus ([`Nexus`]), an initiator port and the target port it came
//! in through, which persistent reservations, RESERVE(6) and unit attentions are kept per
//! (SPC-4 5.13: a registration belongs to one I_T nexus). Also the iSCSI TransportID (SPC-4
//! 7.6.4.6) that names an initiator port in READ FULL STATUS and REGISTER AND MOVE.
//!
//! The transport builds the nexus once per session; nothing here checks that a name is a
//! valid iSCSI name, only that TransportIDs from the wire are well formed.

/// PROTOCOL IDENTIFIER of iSCSI (SPC-4 table 444), in bits 3..0 of TransportID byte 0.
const PROTOCOL_ISCSI: u8 = 0x05;
const PROTOCOL_MASK: u8 = 0x0f;
/// FORMAT CODE in bits 7..6 of TransportID byte 0: 00b names an initiator device, 01b an
/// initiator port (the name followed by the ISID).
const FORMAT_DEVICE_NAME: u8 = 0x00;
const FORMAT_PORT_NAME: u8 = 0x40;
const FORMAT_MASK: u8 = 0xc0;
/// Between the iSCSI name and the ISID in an initiator port name (RFC 7143 section 4.2.7.1).
const ISID_SEPARATOR: &str = ",i,0x";
/// An ISID is 6 bytes, written as 12 hex digits.
const ISID_HEX_DIGITS: usize = 12;
/// TransportID header: format and protocol, reserved, ADDITIONAL LENGTH.
const TRANSPORT_ID_HEADER_LEN_BYTES: usize = 4;
/// Byte offsets of the ADDITIONAL LENGTH and iSCSI NAME fields, for error pointers.
const ADDITIONAL_LENGTH_AT: u16 = 2;
const NAME_AT: u16 = 4;
/// SPC-4: the ADDITIONAL LENGTH of an iSCSI TransportID is at least 20 and a multiple of 4.
const TRANSPORT_ID_NAME_MIN_BYTES: usize = 20;
const TRANSPORT_ID_ALIGN_BYTES: usize = 4;
/// The longest TransportID we accept from an initiator: an iSCSI name is at most 223 bytes
/// (RFC 7143), plus the separator, the ISID, the NUL and padding.
pub(crate) const TRANSPORT_ID_MAX_BYTES: usize = TRANSPORT_ID_HEADER_LEN_BYTES + 256;

/// An I_T nexus: the initiator port and the relative target port identifier of the target
/// port the session uses. Two sessions of one initiator through two portals are two nexuses.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Nexus {
    /// The SCSI initiator port name. For iSCSI, `<InitiatorName>,i,0x<ISID>` with the ISID
    /// as 12 lowercase hex digits (see [`Nexus::iscsi`]).
    pub initiator_port: String,
    /// The relative target port identifier of the port the session came in through (the
    /// one [`crate::Identity::relative_target_port`] reports).
    pub relative_target_port: u16,
}

impl Nexus {
    /// A nexus from an initiator port name as it is.
    pub fn new(initiator_port: impl Into<String>, relative_target_port: u16) -> Self {
        Nexus {
            initiator_port: initiator_port.into(),
            relative_target_port,
        }
    }

    /// The nexus of an iSCSI session: the InitiatorName and ISID from its login, and the
    /// relative target port of the portal it logged in through.
    pub fn iscsi(initiator_name: &str, isid: [u8; 6], relative_target_port: u16) -> Self {
        let mut initiator_port = String::with_capacity(initiator_name.len() + 17);
        initiator_port.push_str(initiator_name);
        initiator_port.push_str(ISID_SEPARATOR);
        for byte in isid {
            initiator_port.push_str(&format!("{byte:02x}"));
        }
        Nexus::new(initiator_port, relative_target_port)
    }

    /// Whether `other` is the same initiator port, through any target port.
    pub(crate) fn same_initiator_port(&self, other: &Nexus) -> bool {
        self.initiator_port == other.initiator_port
    }

    /// The same initiator port through another target port.
    pub(crate) fn through_port(&self, relative_target_port: u16) -> Nexus {
        Nexus::new(self.initiator_port.clone(), relative_target_port)
    }

    /// The iSCSI TransportID naming this nexus's initiator port: format 01b when the name
    /// carries an ISID, else 00b (the name as it is); NUL-terminated, padded to a multiple
    /// of 4 bytes, at least 24 bytes long.
    pub(crate) fn transport_id(&self) -> Vec<u8> {
        let format = if split_isid(&self.initiator_port).is_some() {
            FORMAT_PORT_NAME
        } else {
            FORMAT_DEVICE_NAME
        };
        let mut name = self.initiator_port.as_bytes().to_vec();
        name.truncate(TRANSPORT_ID_MAX_BYTES - TRANSPORT_ID_HEADER_LEN_BYTES - 1);
        name.push(0);
        let padded = name
            .len()
            .next_multiple_of(TRANSPORT_ID_ALIGN_BYTES)
            .max(TRANSPORT_ID_NAME_MIN_BYTES);
        name.resize(padded, 0);
        // At most 256 bytes after the truncation above.
        let additional_len = u16::try_from(name.len()).expect("transport id name <= 256 bytes");
        let mut id = vec![format | PROTOCOL_ISCSI, 0];
        id.extend(additional_len.to_be_bytes());
        id.extend(name);
        id
    }
}

/// The name and ISID halves of an iSCSI initiator port name, when it has a well-formed ISID.
fn split_isid(initiator_port: &str) -> Option<(&str, &str)> {
    let (name, isid) = initiator_port.rsplit_once(ISID_SEPARATOR)?;
    (isid.len() == ISID_HEX_DIGITS && isid.bytes().all(|b| b.is_ascii_hexdigit()))
        .then_some((name, isid))
}

/// The initiator port an iSCSI TransportID names (format 01b: name and ISID), normalised as
/// [`Nexus::iscsi`] writes it. `Err` carries the byte offset, within `bytes`, of the field
/// that is wrong: another protocol or format, a bad length, a missing NUL, no ISID.
pub(crate) fn parse_transport_id(bytes: &[u8]) -> Result<String, u16> {
    let header = bytes.get(..TRANSPORT_ID_HEADER_LEN_BYTES).ok_or(0u16)?;
    if header[0] & PROTOCOL_MASK != PROTOCOL_ISCSI || header[0] & FORMAT_MASK != FORMAT_PORT_NAME {
        return Err(0);
    }
    let additional_len = usize::from(u16::from_be_bytes([header[2], header[3]]));
    if additional_len < TRANSPORT_ID_NAME_MIN_BYTES
        || !additional_len.is_multiple_of(TRANSPORT_ID_ALIGN_BYTES)
        || TRANSPORT_ID_HEADER_LEN_BYTES + additional_len > TRANSPORT_ID_MAX_BYTES
    {
        return Err(ADDITIONAL_LENGTH_AT);
    }
    let field = bytes
        .get(TRANSPORT_ID_HEADER_LEN_BYTES..TRANSPORT_ID_HEADER_LEN_BYTES + additional_len)
        .ok_or(ADDITIONAL_LENGTH_AT)?;
    let name_len = field.iter().position(|&b| b == 0).ok_or(NAME_AT)?;
    let name = std::str::from_utf8(&field[..name_len]).map_err(|_| NAME_AT)?;
    let (device, isid) = split_isid(name).ok_or(NAME_AT)?;
    if device.is_empty() {
        return Err(NAME_AT);
    }
    Ok(format!(
        "{device}{ISID_SEPARATOR}{}",
        isid.to_ascii_lowercase()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME: &str = "iqn.1994-05.com.redhat:host-a";

    #[test]
    fn iscsi_initiator_port_names_carry_the_isid_in_lowercase_hex() {
        let n = Nexus::iscsi(NAME, [0x80, 0x12, 0x34, 0x56, 0x78, 0x9a], 2);
        assert_eq!(
            n.initiator_port,
            "iqn.1994-05.com.redhat:host-a,i,0x80123456789a"
        );
        assert_eq!(n.relative_target_port, 2);
        assert!(n.same_initiator_port(&n.through_port(7)));
        assert_ne!(n, n.through_port(7));
    }

    #[test]
    fn transport_id_round_trips_format_01b() {
        let n = Nexus::iscsi(NAME, [0x40, 0, 0, 0, 0, 1], 1);
        let id = n.transport_id();
        assert_eq!(id[0], 0x45, "format 01b, iSCSI");
        assert_eq!(id.len() % 4, 0);
        let additional = usize::from(u16::from_be_bytes([id[2], id[3]]));
        assert_eq!(id.len(), 4 + additional);
        assert_eq!(
            &id[4..4 + n.initiator_port.len()],
            n.initiator_port.as_bytes()
        );
        assert_eq!(id[4 + n.initiator_port.len()], 0, "NUL-terminated");
        assert_eq!(parse_transport_id(&id), Ok(n.initiator_port.clone()));
    }

    #[test]
    fn names_without_an_isid_use_format_00b_and_a_minimum_length() {
        let id = Nexus::new("host", 1).transport_id();
        assert_eq!(id[0], 0x05);
        assert_eq!(id.len(), 24);
        assert_eq!(
            parse_transport_id(&id),
            Err(0),
            "REGISTER AND MOVE needs a port"
        );
    }

    #[test]
    fn malformed_transport_ids_point_at_the_bad_field() {
        let good = Nexus::iscsi(NAME, [1, 2, 3, 4, 5, 6], 1).transport_id();
        let mut fc = good.clone();
        fc[0] = 0x40;
        assert_eq!(parse_transport_id(&fc), Err(0));
        let mut odd = good.clone();
        odd[3] = 21;
        assert_eq!(parse_transport_id(&odd), Err(2));
        assert_eq!(parse_transport_id(&good[..good.len() - 4]), Err(2), "short");
        let mut no_nul = good.clone();
        for b in &mut no_nul[4..] {
            if *b == 0 {
                *b = b'x';
            }
        }
        assert_eq!(parse_transport_id(&no_nul), Err(4));
        let mut upper = good.clone();
        let at = 4 + NAME.len() + 5;
        upper[at..at + 2].copy_from_slice(b"0A");
        assert!(parse_transport_id(&upper)
            .expect("upper-case ISID")
            .ends_with(",i,0x0a0203040506"));
        assert_eq!(parse_transport_id(&[]), Err(0));
        assert_eq!(parse_transport_id(&[0x45, 0, 0xff, 0xfc]), Err(2));
    }
}
