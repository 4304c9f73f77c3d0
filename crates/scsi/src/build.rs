//! CDB and parameter-list builders, for this crate's tests and fuzz seeds and for the
//! transport's tests. They encode exactly what their arguments say (no validation), so tests
//! can build invalid commands too.

use crate::opcode;

/// READ(6)/WRITE(6): 21-bit LBA, 8-bit length (0 means 256).
pub fn rw6(op: u8, lba: u32, count: u8) -> Vec<u8> {
    let [_, high, mid, low] = lba.to_be_bytes();
    vec![op, high & 0x1f, mid, low, count, 0]
}

/// A 10-byte CDB in the READ(10) layout: flags in byte 1, LBA in 2..6, length in 7..9.
/// Also fits WRITE(10), VERIFY(10), WRITE AND VERIFY(10), WRITE SAME(10), SYNCHRONIZE
/// CACHE(10).
pub fn rw10(op: u8, flags: u8, lba: u32, count: u16) -> Vec<u8> {
    let mut cdb = vec![0u8; 10];
    cdb[0] = op;
    cdb[1] = flags;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&count.to_be_bytes());
    cdb
}

/// A 12-byte CDB in the READ(12) layout: LBA in 2..6, length in 6..10.
pub fn rw12(op: u8, flags: u8, lba: u32, count: u32) -> Vec<u8> {
    let mut cdb = vec![0u8; 12];
    cdb[0] = op;
    cdb[1] = flags;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[6..10].copy_from_slice(&count.to_be_bytes());
    cdb
}

/// A 16-byte CDB in the READ(16) layout: LBA in 2..10, length in 10..14. Also fits WRITE
/// SAME(16), VERIFY(16), SYNCHRONIZE CACHE(16).
pub fn rw16(op: u8, flags: u8, lba: u64, count: u32) -> Vec<u8> {
    let mut cdb = vec![0u8; 16];
    cdb[0] = op;
    cdb[1] = flags;
    cdb[2..10].copy_from_slice(&lba.to_be_bytes());
    cdb[10..14].copy_from_slice(&count.to_be_bytes());
    cdb
}

/// COMPARE AND WRITE of `blocks` blocks at `lba`.
pub fn compare_and_write(lba: u64, blocks: u8) -> Vec<u8> {
    let mut cdb = rw16(opcode::COMPARE_AND_WRITE, 0, lba, 0);
    cdb[13] = blocks;
    cdb
}

/// SYNCHRONIZE CACHE(10).
pub fn sync_cache10(lba: u32, count: u16) -> Vec<u8> {
    rw10(opcode::SYNCHRONIZE_CACHE_10, 0, lba, count)
}

/// SYNCHRONIZE CACHE(16).
pub fn sync_cache16(lba: u64, count: u32) -> Vec<u8> {
    rw16(opcode::SYNCHRONIZE_CACHE_16, 0, lba, count)
}

/// UNMAP with a parameter list length.
pub fn unmap_cdb(parameter_len: usize) -> Vec<u8> {
    let len = u16::try_from(parameter_len).unwrap_or(u16::MAX);
    let mut cdb = vec![0u8; 10];
    cdb[0] = opcode::UNMAP;
    cdb[7..9].copy_from_slice(&len.to_be_bytes());
    cdb
}

/// UNMAP parameter list: 8-byte header, one 16-byte descriptor per (LBA, blocks).
pub fn unmap(descriptors: &[(u64, u32)]) -> Vec<u8> {
    let descriptors_len = u16::try_from(16 * descriptors.len()).unwrap_or(u16::MAX);
    let mut list = Vec::with_capacity(8 + 16 * descriptors.len());
    list.extend(descriptors_len.saturating_add(6).to_be_bytes());
    list.extend(descriptors_len.to_be_bytes());
    list.extend([0u8; 4]);
    for &(lba, blocks) in descriptors {
        list.extend(lba.to_be_bytes());
        list.extend(blocks.to_be_bytes());
        list.extend([0u8; 4]);
    }
    list
}

/// INQUIRY.
pub fn inquiry(evpd: bool, page_code: u8, allocation_len: u16) -> Vec<u8> {
    let [high, low] = allocation_len.to_be_bytes();
    vec![opcode::INQUIRY, u8::from(evpd), page_code, high, low, 0]
}

/// MODE SENSE(6): DBD (no block descriptors), page control, page and subpage codes.
pub fn mode_sense6(
    dbd: bool,
    page_control: u8,
    page_code: u8,
    subpage: u8,
    allocation_len: u8,
) -> Vec<u8> {
    vec![
        opcode::MODE_SENSE_6,
        if dbd { 0x08 } else { 0 },
        ((page_control & 0x3) << 6) | (page_code & 0x3f),
        subpage,
        allocation_len,
        0,
    ]
}

/// REPORT LUNS, SELECT REPORT 00h.
pub fn report_luns(allocation_len: u32) -> Vec<u8> {
    let mut cdb = vec![0u8; 12];
    cdb[0] = opcode::REPORT_LUNS;
    cdb[6..10].copy_from_slice(&allocation_len.to_be_bytes());
    cdb
}

/// SERVICE ACTION IN(16): READ CAPACITY(16) (10h) or GET LBA STATUS (12h).
pub fn service_action_in(service_action: u8, lba: u64, allocation_len: u32) -> Vec<u8> {
    let mut cdb = rw16(
        opcode::SERVICE_ACTION_IN_16,
        service_action,
        lba,
        allocation_len,
    );
    cdb[1] = service_action & opcode::SERVICE_ACTION_MASK;
    cdb
}

/// MAINTENANCE IN with a service action, byte 2 (RSOC's RCTD and REPORTING OPTIONS) and an
/// allocation length.
pub fn maintenance_in(service_action: u8, byte_2: u8, allocation_len: u32) -> Vec<u8> {
    let mut cdb = vec![0u8; 12];
    cdb[0] = opcode::MAINTENANCE_IN;
    cdb[1] = service_action;
    cdb[2] = byte_2;
    cdb[6..10].copy_from_slice(&allocation_len.to_be_bytes());
    cdb
}

/// REPORT SUPPORTED OPERATION CODES for one command.
pub fn report_one_operation_code(options: u8, op: u8, service_action: u16) -> Vec<u8> {
    let mut cdb = maintenance_in(
        u8::try_from(opcode::SA_REPORT_SUPPORTED_OPERATION_CODES).unwrap_or(0),
        options,
        0xffff,
    );
    cdb[3] = op;
    cdb[4..6].copy_from_slice(&service_action.to_be_bytes());
    cdb
}

/// PERSISTENT RESERVE IN with a service action and a 16-bit allocation length.
pub fn persistent_reserve_in(service_action: u16, allocation_len: u16) -> Vec<u8> {
    let mut cdb = vec![0u8; 10];
    cdb[0] = opcode::PERSISTENT_RESERVE_IN;
    cdb[1] = u8::try_from(service_action).unwrap_or(0xff) & opcode::SERVICE_ACTION_MASK;
    cdb[7..9].copy_from_slice(&allocation_len.to_be_bytes());
    cdb
}

/// PERSISTENT RESERVE OUT with a service action, a reservation type (LU scope) and a
/// parameter list length.
pub fn persistent_reserve_out(service_action: u16, kind: u8, parameter_len: u32) -> Vec<u8> {
    let mut cdb = vec![0u8; 10];
    cdb[0] = opcode::PERSISTENT_RESERVE_OUT;
    cdb[1] = u8::try_from(service_action).unwrap_or(0xff) & opcode::SERVICE_ACTION_MASK;
    cdb[2] = kind & 0x0f;
    cdb[5..9].copy_from_slice(&parameter_len.to_be_bytes());
    cdb
}

/// PERSISTENT RESERVE OUT basic parameter list (24 bytes): RESERVATION KEY, SERVICE ACTION
/// RESERVATION KEY, and byte 20's flags (SPEC_I_PT 08h, ALL_TG_PT 04h, APTPL 01h).
pub fn prout_parameters(key: u64, service_action_key: u64, flags: u8) -> Vec<u8> {
    let mut list = vec![0u8; 24];
    list[0..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&service_action_key.to_be_bytes());
    list[20] = flags;
    list
}

/// REGISTER AND MOVE parameter list: keys, UNREG, the destination's relative target port and
/// an iSCSI TransportID (format 01b) for `initiator_port` (`<name>,i,0x<isid>`).
pub fn register_and_move_parameters(
    key: u64,
    service_action_key: u64,
    unregister: bool,
    relative_target_port: u16,
    initiator_port: &str,
) -> Vec<u8> {
    let mut name = initiator_port.as_bytes().to_vec();
    name.push(0);
    name.resize(name.len().next_multiple_of(4).max(20), 0);
    let mut transport_id = vec![0x45, 0];
    transport_id.extend(u16::try_from(name.len()).unwrap_or(u16::MAX).to_be_bytes());
    transport_id.extend(name);
    let mut list = vec![0u8; 24];
    list[0..8].copy_from_slice(&key.to_be_bytes());
    list[8..16].copy_from_slice(&service_action_key.to_be_bytes());
    list[17] = if unregister { 0x02 } else { 0 };
    list[18..20].copy_from_slice(&relative_target_port.to_be_bytes());
    list[20..24].copy_from_slice(&u32::try_from(transport_id.len()).unwrap_or(0).to_be_bytes());
    list.extend(transport_id);
    list
}

/// RESERVE(6) of the whole logical unit.
pub fn reserve6() -> Vec<u8> {
    vec![opcode::RESERVE_6, 0, 0, 0, 0, 0]
}

/// RELEASE(6).
pub fn release6() -> Vec<u8> {
    vec![opcode::RELEASE_6, 0, 0, 0, 0, 0]
}
