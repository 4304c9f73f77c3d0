//! PERSISTENT RESERVE IN (SPC-4 6.16): the parameter data of READ KEYS, READ RESERVATION,
//! REPORT CAPABILITIES and READ FULL STATUS, built from a [`Reservations`] the caller holds
//! (shared) for the command. Data is cut to the allocation length; the ADDITIONAL LENGTH
//! fields still count everything (SPC-4 6.16.2).

use crate::opcode;
use crate::reservations::{ReservationType, Reservations};
use crate::sense::Response;

/// PRGENERATION and ADDITIONAL LENGTH.
const HEADER_LEN_BYTES: usize = 8;
/// READ RESERVATION's reservation descriptor: key, obsolete, reserved, scope and type,
/// obsolete.
const RESERVATION_DESCRIPTOR_LEN_BYTES: u32 = 16;
/// SCOPE LU_SCOPE (0h) in bits 7..4 of the scope-and-type byte: the only scope.
const SCOPE_LU: u8 = 0x00;
/// REPORT CAPABILITIES: LENGTH field value (the whole parameter data is 8 bytes).
const CAPABILITIES_LEN_BYTES: u16 = 8;
/// Byte 2: ATP_C (ALL_TG_PT supported) and PTPL_C (APTPL supported). CRH (compatible
/// reservation handling), SIP_C (SPEC_I_PT) and RLR_C (replace lost reservation) are zero.
const CAPABILITY_ALL_TARGET_PORTS: u8 = 0x04;
const CAPABILITY_PERSIST_THROUGH_POWER_LOSS: u8 = 0x01;
/// Byte 3: TMV (the type mask is valid) and ALLOW COMMANDS 011b: TEST UNIT READY is allowed
/// through Write Exclusive and Exclusive Access reservations, and MODE SENSE, REPORT
/// SUPPORTED OPERATION CODES and the other reads of state through Write Exclusive ones (see
/// `Command::access`). PTPL_A (bit 0): the last APTPL received was one.
const CAPABILITY_TYPE_MASK_VALID: u8 = 0x80;
const ALLOW_COMMANDS_READS_THROUGH_WRITE_EXCLUSIVE: u8 = 0x3 << 4;
const PERSIST_THROUGH_POWER_LOSS_ACTIVE: u8 = 0x01;
/// READ FULL STATUS descriptor: fixed part before the TransportID, byte 12's flags.
const FULL_STATUS_DESCRIPTOR_FIXED_LEN_BYTES: usize = 24;
const FULL_STATUS_ALL_TARGET_PORTS: u8 = 0x02;
const FULL_STATUS_HOLDER: u8 = 0x01;

/// Answer PERSISTENT RESERVE IN. `service_action` was checked by the decoder.
pub(crate) fn persistent_reserve_in(
    reservations: &Reservations,
    service_action: u16,
    allocation_len: u32,
) -> Response {
    let data = match service_action {
        opcode::SA_READ_KEYS => read_keys(reservations),
        opcode::SA_READ_RESERVATION => read_reservation(reservations),
        opcode::SA_REPORT_CAPABILITIES => report_capabilities(reservations),
        _ => read_full_status(reservations),
    };
    Response::good_cut(data, allocation_len)
}

/// PRGENERATION, then ADDITIONAL LENGTH := the bytes that follow, once they are in.
fn header(reservations: &Reservations) -> Vec<u8> {
    let mut data = Vec::with_capacity(HEADER_LEN_BYTES);
    data.extend(reservations.generation().to_be_bytes());
    data.extend([0u8; 4]);
    data
}

fn set_additional_len(data: &mut [u8]) {
    // Bounded by REGISTRATIONS_MAX descriptors of at most a few hundred bytes each.
    let len = u32::try_from(data.len() - HEADER_LEN_BYTES).unwrap_or(u32::MAX);
    data[4..HEADER_LEN_BYTES].copy_from_slice(&len.to_be_bytes());
}

fn scope_and_type(kind: ReservationType) -> u8 {
    (SCOPE_LU << 4) | kind.code()
}

fn read_keys(reservations: &Reservations) -> Vec<u8> {
    let mut data = header(reservations);
    for r in reservations.registrations() {
        data.extend(r.key.to_be_bytes());
    }
    set_additional_len(&mut data);
    data
}

fn read_reservation(reservations: &Reservations) -> Vec<u8> {
    let mut data = header(reservations);
    if let Some((kind, key)) = reservations.reservation() {
        data.extend(key.to_be_bytes());
        data.extend([0u8; 4]);
        data.push(0);
        data.push(scope_and_type(kind));
        data.extend([0u8; 2]);
        debug_assert_eq!(
            data.len(),
            HEADER_LEN_BYTES + RESERVATION_DESCRIPTOR_LEN_BYTES as usize
        );
    }
    set_additional_len(&mut data);
    data
}

fn report_capabilities(reservations: &Reservations) -> Vec<u8> {
    let mut mask = [0u8; 2];
    for kind in ReservationType::ALL {
        // PERSISTENT RESERVATION TYPE MASK: WR_EX_AR (byte 4 bit 7), EX_AC_RO (6), WR_EX_RO
        // (5), EX_AC (3), WR_EX (1); EX_AC_AR (byte 5 bit 0).
        match kind {
            ReservationType::WriteExclusiveAllRegistrants => mask[0] |= 0x80,
            ReservationType::ExclusiveAccessRegistrantsOnly => mask[0] |= 0x40,
            ReservationType::WriteExclusiveRegistrantsOnly => mask[0] |= 0x20,
            ReservationType::ExclusiveAccess => mask[0] |= 0x08,
            ReservationType::WriteExclusive => mask[0] |= 0x02,
            ReservationType::ExclusiveAccessAllRegistrants => mask[1] |= 0x01,
        }
    }
    let mut data = CAPABILITIES_LEN_BYTES.to_be_bytes().to_vec();
    data.push(CAPABILITY_ALL_TARGET_PORTS | CAPABILITY_PERSIST_THROUGH_POWER_LOSS);
    let active = if reservations.aptpl() {
        PERSIST_THROUGH_POWER_LOSS_ACTIVE
    } else {
        0
    };
    data.push(CAPABILITY_TYPE_MASK_VALID | ALLOW_COMMANDS_READS_THROUGH_WRITE_EXCLUSIVE | active);
    data.extend(mask);
    data.extend([0u8; 2]);
    data
}

fn read_full_status(reservations: &Reservations) -> Vec<u8> {
    let mut data = header(reservations);
    let kind = reservations.reservation().map(|(kind, _)| kind);
    for r in reservations.registrations() {
        let holder = kind.is_some() && reservations.is_holder(&r.nexus);
        let mut flags = 0;
        if r.all_target_ports {
            flags |= FULL_STATUS_ALL_TARGET_PORTS;
        }
        if holder {
            flags |= FULL_STATUS_HOLDER;
        }
        let transport_id = r.nexus.transport_id();
        data.reserve(FULL_STATUS_DESCRIPTOR_FIXED_LEN_BYTES + transport_id.len());
        data.extend(r.key.to_be_bytes());
        data.extend([0u8; 4]);
        data.push(flags);
        data.push(match kind {
            Some(kind) if holder => scope_and_type(kind),
            _ => 0,
        });
        data.extend([0u8; 4]);
        data.extend(r.nexus.relative_target_port.to_be_bytes());
        // A TransportID is at most TRANSPORT_ID_MAX_BYTES long.
        let id_len = u32::try_from(transport_id.len()).unwrap_or(u32::MAX);
        data.extend(id_len.to_be_bytes());
        data.extend(transport_id);
    }
    set_additional_len(&mut data);
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nexus::Nexus;
    use crate::reservations::Attention;

    fn be32(d: &[u8], at: usize) -> u32 {
        u32::from_be_bytes([d[at], d[at + 1], d[at + 2], d[at + 3]])
    }

    fn two_registered() -> (Reservations, Nexus, Nexus) {
        let a = Nexus::iscsi("iqn.2024-01.test:a", [0x80, 0, 0, 0, 0, 1], 1);
        let b = Nexus::iscsi("iqn.2024-01.test:b", [0x80, 0, 0, 0, 0, 2], 2);
        let mut r = Reservations::default();
        let mut out: Vec<Attention> = Vec::new();
        r.register(&a, 0, 0xaaaa, false, None, &mut out).expect("a");
        r.register(&b, 0, 0xbbbb, false, Some(&[1, 2]), &mut out)
            .expect("b");
        (r, a, b)
    }

    #[test]
    fn read_keys_lists_every_registration_and_survives_truncation() {
        let (r, _, _) = two_registered();
        let d = persistent_reserve_in(&r, opcode::SA_READ_KEYS, 0xffff).data_in;
        assert_eq!(be32(&d, 0), 2, "PRgeneration");
        assert_eq!(be32(&d, 4), 24, "three I_T nexuses: b through both ports");
        assert_eq!(&d[8..16], &0xaaaau64.to_be_bytes());
        assert_eq!(&d[16..24], &0xbbbbu64.to_be_bytes());
        let cut = persistent_reserve_in(&r, opcode::SA_READ_KEYS, 8).data_in;
        assert_eq!(cut.len(), 8);
        assert_eq!(be32(&cut, 4), 24, "ADDITIONAL LENGTH is not cut");
    }

    #[test]
    fn read_reservation_reports_holder_key_type_and_nothing_when_free() {
        let (mut r, a, _) = two_registered();
        let d = persistent_reserve_in(&r, opcode::SA_READ_RESERVATION, 0xffff).data_in;
        assert_eq!((d.len(), be32(&d, 4)), (8, 0));
        r.reserve(&a, 0xaaaa, ReservationType::ExclusiveAccessRegistrantsOnly)
            .expect("reserve");
        let d = persistent_reserve_in(&r, opcode::SA_READ_RESERVATION, 0xffff).data_in;
        assert_eq!((d.len(), be32(&d, 4)), (24, 16));
        assert_eq!(&d[8..16], &0xaaaau64.to_be_bytes());
        assert_eq!(d[21], 0x06, "LU scope, type 6");
    }

    #[test]
    fn report_capabilities_layout() {
        let mut r = Reservations::default();
        let d = report_capabilities(&r);
        assert_eq!(d.len(), 8);
        assert_eq!(u16::from_be_bytes([d[0], d[1]]), 8);
        assert_eq!(d[2], 0x04 | 0x01, "ATP_C and PTPL_C: no SIP_C, no CRH");
        assert_eq!(d[3], 0x80 | 0x30, "TMV, ALLOW COMMANDS 3, PTPL_A clear");
        assert_eq!((d[4], d[5]), (0xea, 0x01), "all six types");
        r.set_aptpl(true);
        assert_eq!(report_capabilities(&r)[3], 0x80 | 0x30 | 0x01, "PTPL_A");
    }

    #[test]
    fn read_full_status_describes_each_nexus_with_its_transport_id() {
        let (mut r, a, b) = two_registered();
        r.reserve(&a, 0xaaaa, ReservationType::WriteExclusive)
            .expect("reserve");
        let d = persistent_reserve_in(&r, opcode::SA_READ_FULL_STATUS, 0xffff).data_in;
        assert_eq!(be32(&d, 4) as usize, d.len() - 8);
        let first = &d[8..];
        assert_eq!(&first[0..8], &0xaaaau64.to_be_bytes());
        assert_eq!(first[12], FULL_STATUS_HOLDER);
        assert_eq!(first[13], 0x01);
        assert_eq!(u16::from_be_bytes([first[18], first[19]]), 1);
        let id_len = be32(first, 20) as usize;
        assert_eq!(&first[24..24 + id_len], a.transport_id().as_slice());
        let second = &first[FULL_STATUS_DESCRIPTOR_FIXED_LEN_BYTES + id_len..];
        assert_eq!(&second[0..8], &0xbbbbu64.to_be_bytes());
        assert_eq!(second[12], FULL_STATUS_ALL_TARGET_PORTS, "not a holder");
        assert_eq!(second[13], 0);
        assert_eq!(
            u16::from_be_bytes([second[18], second[19]]),
            b.relative_target_port
        );
        assert_eq!(second[24], 0x45, "iSCSI TransportID, format 01b");
    }
}
