//! A bare iSCSI initiator on a socket (weft-iscsi's initiator-side PDU encoders): logs in
//! straight to full feature phase and runs single commands on LUN 0, for what no tool here
//! drives without a kernel initiator (persistent reservations, REPORT TARGET PORT GROUPS).
//! `cunit`: libiscsi's test suite's output; `array_luns`: what `iscsi-ls` shows a host.
#![allow(dead_code)]

pub mod array_luns;
pub mod cunit;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use weft_iscsi::initiator::{login_request, scsi_command, CommandPdu, LoginRequestPdu};
use weft_iscsi::wire::{BHS_BYTES, OP_DATA_IN, OP_LOGIN_RESPONSE, OP_SCSI_RESPONSE};
use weft_iscsi::Digests;

pub const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";
/// SCSI status codes.
pub const GOOD: u8 = 0x00;
pub const CHECK_CONDITION: u8 = 0x02;
pub const RESERVATION_CONFLICT: u8 = 0x18;
/// PERSISTENT RESERVE OUT service actions and the type Exclusive Access.
pub const REGISTER: u8 = 0x00;
pub const RESERVE: u8 = 0x01;
pub const REGISTER_AND_IGNORE_EXISTING_KEY: u8 = 0x06;
pub const EXCLUSIVE_ACCESS: u8 = 0x03;
/// PERSISTENT RESERVE IN service actions.
pub const READ_KEYS: u8 = 0x00;
pub const READ_RESERVATION: u8 = 0x01;
/// Byte 20 of the PR OUT parameter list: APTPL.
pub const APTPL: u8 = 0x01;

/// One iSCSI session to LUN 0 of a target, as a bare initiator drives it.
pub struct Session {
    pub stream: TcpStream,
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub itt: u32,
}

/// What a command came back with.
#[derive(Debug)]
pub struct Reply {
    pub status: u8,
    pub data_in: Vec<u8>,
    /// Sense key, ASC, ASCQ of a CHECK CONDITION.
    pub sense: Option<(u8, u8, u8)>,
}

impl Session {
    /// Log `initiator` in to `target` through `portal`, straight to full feature phase.
    pub fn login(portal: SocketAddr, initiator: &str, target: &str) -> Session {
        let mut stream = TcpStream::connect(portal).expect("connect to the portal");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let text = format!(
            "InitiatorName={initiator}\0TargetName={target}\0SessionType=Normal\0AuthMethod=None\0"
        );
        let mut out = Vec::new();
        login_request(
            &LoginRequestPdu {
                transit: true,
                current_stage: 0,
                next_stage: 3,
                isid: [0x80, 0, 0, 0, 0, 1],
                itt: 0,
                cmd_sn: 1,
                exp_stat_sn: 0,
                text: text.as_bytes(),
            },
            &mut out,
        );
        stream.write_all(&out).unwrap();
        let (bhs, _) = read_pdu(&mut stream);
        assert_eq!(bhs[0] & 0x3f, OP_LOGIN_RESPONSE);
        assert_eq!((bhs[36], bhs[37]), (0, 0), "login refused");
        assert_eq!(bhs[1] & 0x03, 3, "straight to full feature phase");
        Session {
            stream,
            cmd_sn: 1,
            exp_stat_sn: be32(&bhs[24..28]).wrapping_add(1),
            itt: 1,
        }
    }

    pub fn run(&mut self, cdb: &[u8], data_out: &[u8], read_len: u32) -> Reply {
        let mut padded = [0u8; 16];
        padded[..cdb.len()].copy_from_slice(cdb);
        let itt = self.itt;
        self.itt += 1;
        let mut out = Vec::new();
        scsi_command(
            &CommandPdu {
                final_: true,
                lun: 0,
                itt,
                cmd_sn: self.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                read: read_len > 0,
                write: !data_out.is_empty(),
                expected_len: if data_out.is_empty() {
                    read_len
                } else {
                    data_out.len() as u32
                },
                cdb: padded,
                data: data_out,
            },
            Digests::default(),
            &mut out,
        );
        self.cmd_sn += 1;
        self.stream.write_all(&out).unwrap();
        let mut data_in = Vec::new();
        loop {
            let (bhs, data) = read_pdu(&mut self.stream);
            match bhs[0] & 0x3f {
                OP_DATA_IN => {
                    data_in.extend_from_slice(&data);
                    // The S bit: status in this PDU.
                    if bhs[1] & 0x01 != 0 {
                        self.exp_stat_sn = be32(&bhs[24..28]).wrapping_add(1);
                        return Reply {
                            status: bhs[3],
                            data_in,
                            sense: None,
                        };
                    }
                }
                OP_SCSI_RESPONSE => {
                    self.exp_stat_sn = be32(&bhs[24..28]).wrapping_add(1);
                    // Sense data: a 2-byte length, then fixed-format sense.
                    let sense =
                        (data.len() >= 2 + 14).then(|| (data[4] & 0x0f, data[14], data[15]));
                    return Reply {
                        status: bhs[3],
                        data_in,
                        sense,
                    };
                }
                // NOP-In pings and the like: not ours to answer in a test this short.
                _ => {}
            }
        }
    }

    /// A command, after any unit attention this nexus has pending.
    pub fn run_past_attentions(&mut self, cdb: &[u8], data_out: &[u8], read_len: u32) -> Reply {
        for _ in 0..4 {
            let r = self.run(cdb, data_out, read_len);
            if r.status != CHECK_CONDITION || r.sense.map(|s| s.0) != Some(0x06) {
                return r;
            }
        }
        panic!("unit attentions do not stop");
    }

    pub fn prout(&mut self, action: u8, kind: u8, key: u64, sa_key: u64, flags: u8) -> Reply {
        let cdb = [0x5f, action, kind, 0, 0, 0, 0, 0, 24, 0];
        let mut list = [0u8; 24];
        list[0..8].copy_from_slice(&key.to_be_bytes());
        list[8..16].copy_from_slice(&sa_key.to_be_bytes());
        list[20] = flags;
        self.run_past_attentions(&cdb, &list, 0)
    }

    pub fn prin(&mut self, action: u8) -> Vec<u8> {
        let cdb = [0x5e, action, 0, 0, 0, 0, 0, 0x10, 0, 0];
        let r = self.run_past_attentions(&cdb, &[], 0x1000);
        assert_eq!(r.status, GOOD, "{r:?}");
        r.data_in
    }

    /// The keys READ KEYS lists.
    pub fn keys(&mut self) -> Vec<u64> {
        let d = self.prin(READ_KEYS);
        d[8..]
            .chunks(8)
            .map(|k| u64::from_be_bytes(k.try_into().unwrap()))
            .collect()
    }

    /// The key and type READ RESERVATION reports, if reserved.
    pub fn reservation(&mut self) -> Option<(u64, u8)> {
        let d = self.prin(READ_RESERVATION);
        (be32(&d[4..8]) == 16).then(|| (u64::from_be_bytes(d[8..16].try_into().unwrap()), d[21]))
    }

    /// WRITE(10) of one 512-byte block at LBA 0: its status.
    pub fn write_block(&mut self) -> u8 {
        let cdb = [0x2a, 0, 0, 0, 0, 0, 0, 0, 1, 0];
        self.run_past_attentions(&cdb, &[0x5a; 512], 0).status
    }
}

pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().unwrap())
}

/// The next PDU: its BHS and its data segment (no digests are negotiated).
pub fn read_pdu(stream: &mut TcpStream) -> ([u8; BHS_BYTES], Vec<u8>) {
    let mut bhs = [0u8; BHS_BYTES];
    stream.read_exact(&mut bhs).expect("a PDU from the target");
    let data_len = u32::from_be_bytes([0, bhs[5], bhs[6], bhs[7]]) as usize;
    let ahs_len = usize::from(bhs[4]) * 4;
    let mut rest = vec![0u8; ahs_len + data_len.div_ceil(4) * 4];
    stream.read_exact(&mut rest).expect("the PDU's data");
    (bhs, rest[ahs_len..ahs_len + data_len].to_vec())
}

/// REPORT TARGET PORT GROUPS: each group's id and asymmetric access state (0 active/optimized,
/// 1 active/non-optimized, 0xf transitioning), and its relative target ports.
pub fn report_target_port_groups(s: &mut Session) -> Vec<(u16, u8, Vec<u16>)> {
    let cdb = [0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
    let r = s.run_past_attentions(&cdb, &[], 0x1000);
    assert_eq!(r.status, GOOD, "{r:?}");
    let d = r.data_in;
    let len = be32(&d[..4]) as usize;
    let mut groups = Vec::new();
    let mut at = 4;
    while at + 8 <= (4 + len).min(d.len()) {
        let state = d[at] & 0x0f;
        let id = u16::from_be_bytes([d[at + 2], d[at + 3]]);
        let count = usize::from(d[at + 7]);
        let ports = (0..count)
            .filter_map(|i| {
                let p = at + 8 + i * 4;
                d.get(p + 2..p + 4)
                    .map(|b| u16::from_be_bytes([b[0], b[1]]))
            })
            .collect();
        groups.push((id, state, ports));
        at += 8 + count * 4;
    }
    groups
}
