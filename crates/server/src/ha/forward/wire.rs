//! The forwarding protocol between a c.node that serves a client and the c.node that owns the
//! cluster, over TCP. Frames are those of the mirror ([`crate::ha::wire`]): a type byte, a
//! little-endian u32 body length and the body.
//!
//! | frame | direction | body |
//! | --- | --- | --- |
//! | `HELLO` | forwarder → owner | JSON [`Hello`]: the cluster's forwarding secret, the forwarder's id |
//! | `WELCOME` | owner → forwarder | the owner's c.node id (UTF-8) |
//! | `OPEN` | forwarder → owner | JSON [`Open`]: the export |
//! | `OPENED` | owner → forwarder | JSON [`Opened`]: the export as the owner describes it |
//! | `REFUSED` | owner → forwarder | why (UTF-8): wrong secret, unknown export |
//! | `REQUEST` | forwarder → owner | id u64, op u8, flags u8, offset u64, length u64, data (writes) |
//! | `REPLY` | owner → forwarder | id u64, status u8, then data (reads), extents (block status) or why |
//!
//! One connection carries one open export. Requests are pipelined: the owner answers each by
//! its id, in any order. An owner that stops (drain, lost lease) closes its connections without
//! answering what is in flight; the forwarder sends those requests again to whoever owns the
//! cluster next (every request is idempotent: a write carries its data, not a delta).

use serde::{Deserialize, Serialize};

use crate::backend::{ExportInfo, ExportIoError, ExtentStatus};

pub const HELLO: u8 = 21;
pub const WELCOME: u8 = 22;
pub const OPEN: u8 = 23;
pub const OPENED: u8 = 24;
pub const REFUSED: u8 = 25;
pub const REQUEST: u8 = 26;
pub const REPLY: u8 = 27;

/// A whole frame of `kind` with `body`.
pub fn frame(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(kind);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// What a forwarder says first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Hello {
    pub secret: String,
    pub cnode: String,
}

/// Open an export for one of the forwarder's clients.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Open {
    pub export: String,
}

/// The export as the owner opened it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Opened {
    pub name: String,
    pub description: String,
    pub size_bytes: u64,
    pub read_only: bool,
    pub logical_block_size_bytes: u32,
}

impl From<ExportInfo> for Opened {
    fn from(i: ExportInfo) -> Opened {
        Opened {
            name: i.name,
            description: i.description,
            size_bytes: i.size_bytes,
            read_only: i.read_only,
            logical_block_size_bytes: i.logical_block_size_bytes,
        }
    }
}

impl From<Opened> for ExportInfo {
    fn from(o: Opened) -> ExportInfo {
        ExportInfo {
            name: o.name,
            description: o.description,
            size_bytes: o.size_bytes,
            read_only: o.read_only,
            logical_block_size_bytes: o.logical_block_size_bytes,
        }
    }
}

/// What a request asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Read,
    Write,
    Flush,
    Trim,
    WriteZeroes,
    BlockStatus,
    /// The data is the bytes to compare, then as many to write.
    CompareAndWrite,
}

impl Op {
    fn code(self) -> u8 {
        match self {
            Op::Read => 1,
            Op::Write => 2,
            Op::Flush => 3,
            Op::Trim => 4,
            Op::WriteZeroes => 5,
            Op::BlockStatus => 6,
            Op::CompareAndWrite => 7,
        }
    }

    fn from_code(code: u8) -> Option<Op> {
        Some(match code {
            1 => Op::Read,
            2 => Op::Write,
            3 => Op::Flush,
            4 => Op::Trim,
            5 => Op::WriteZeroes,
            6 => Op::BlockStatus,
            7 => Op::CompareAndWrite,
            _ => return None,
        })
    }
}

pub const FLAG_FUA: u8 = 1;
pub const FLAG_MAY_TRIM: u8 = 2;

const REQUEST_HEAD_BYTES: usize = 8 + 1 + 1 + 8 + 8;

/// A request's fixed part; a write's data follows it in the frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHead {
    pub id: u64,
    pub op: Op,
    pub flags: u8,
    pub offset_bytes: u64,
    pub length_bytes: u64,
}

/// A whole `REQUEST` frame (head and data), ready to send.
pub fn request_frame(head: RequestHead, data: &[u8]) -> Vec<u8> {
    let body_len = REQUEST_HEAD_BYTES + data.len();
    let mut out = Vec::with_capacity(5 + body_len);
    out.push(REQUEST);
    out.extend_from_slice(&(body_len as u32).to_le_bytes());
    out.extend_from_slice(&head.id.to_le_bytes());
    out.push(head.op.code());
    out.push(head.flags);
    out.extend_from_slice(&head.offset_bytes.to_le_bytes());
    out.extend_from_slice(&head.length_bytes.to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// A `REQUEST` body: its head, and where the data starts.
pub fn parse_request(body: &[u8]) -> std::io::Result<(RequestHead, &[u8])> {
    if body.len() < REQUEST_HEAD_BYTES {
        return Err(invalid("short forwarded request"));
    }
    let u = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let op = Op::from_code(body[8]).ok_or_else(|| invalid("unknown forwarded op"))?;
    let head = RequestHead {
        id: u(0),
        op,
        flags: body[9],
        offset_bytes: u(10),
        length_bytes: u(18),
    };
    let data = &body[REQUEST_HEAD_BYTES..];
    match op {
        Op::Write if data.len() as u64 != head.length_bytes => {
            Err(invalid("a forwarded write's data is not its length"))
        }
        Op::Write => Ok((head, data)),
        Op::CompareAndWrite if data.len() as u64 != 2 * head.length_bytes => Err(invalid(
            "a forwarded compare-and-write's data is not twice its length",
        )),
        Op::CompareAndWrite => Ok((head, data)),
        _ if !data.is_empty() => Err(invalid("data after a forwarded request that takes none")),
        _ => Ok((head, data)),
    }
}

/// What a reply carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    Done,
    Data(Vec<u8>),
    Extents(Vec<ExtentStatus>),
    /// A compare-and-write found this offset (from the request's) different: nothing written.
    Miscompare(u64),
}

const STATUS_OK: u8 = 0;
const STATUS_INVALID: u8 = 1;
const STATUS_READ_ONLY: u8 = 2;
const STATUS_NO_SPACE: u8 = 3;
const STATUS_IO: u8 = 4;
const STATUS_GONE: u8 = 5;
const STATUS_MISCOMPARE: u8 = 6;

const EXTENT_HOLE: u8 = 1;
const EXTENT_ZERO: u8 = 2;

/// A whole `REPLY` frame for request `id`.
pub fn reply_frame(id: u64, result: &Result<Answer, ExportIoError>) -> Vec<u8> {
    let mut body = Vec::with_capacity(9);
    body.extend_from_slice(&id.to_le_bytes());
    match result {
        Ok(Answer::Done) => body.push(STATUS_OK),
        Ok(Answer::Data(data)) => {
            body.reserve(data.len());
            body.push(STATUS_OK);
            body.extend_from_slice(data);
        }
        Ok(Answer::Miscompare(at)) => {
            body.push(STATUS_MISCOMPARE);
            body.extend_from_slice(&at.to_le_bytes());
        }
        Ok(Answer::Extents(extents)) => {
            body.push(STATUS_OK);
            for e in extents {
                body.extend_from_slice(&e.length_bytes.to_le_bytes());
                let mut flags = 0;
                if e.hole {
                    flags |= EXTENT_HOLE;
                }
                if e.zero {
                    flags |= EXTENT_ZERO;
                }
                body.push(flags);
            }
        }
        Err(e) => {
            let (status, why) = match e {
                ExportIoError::Invalid { reason } => (STATUS_INVALID, (*reason).to_string()),
                ExportIoError::ReadOnly => (STATUS_READ_ONLY, String::new()),
                ExportIoError::NoSpace => (STATUS_NO_SPACE, String::new()),
                ExportIoError::Io { detail } => (STATUS_IO, detail.clone()),
                ExportIoError::Gone => (STATUS_GONE, String::new()),
            };
            body.push(status);
            body.extend_from_slice(why.as_bytes());
        }
    }
    let mut out = Vec::with_capacity(5 + body.len());
    out.push(REPLY);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// A `REPLY` body: the request's id and its result, read as an answer to `op`.
pub fn parse_reply(
    mut body: Vec<u8>,
    op_of: impl FnOnce(u64) -> Option<Op>,
) -> std::io::Result<(u64, Result<Answer, ExportIoError>)> {
    if body.len() < 9 {
        return Err(invalid("short forwarded reply"));
    }
    let id = u64::from_le_bytes(body[..8].try_into().expect("8 bytes"));
    let status = body[8];
    let rest = body.split_off(9);
    let result = match status {
        STATUS_OK => match op_of(id) {
            Some(Op::Read) => Ok(Answer::Data(rest)),
            Some(Op::BlockStatus) => {
                if !rest.len().is_multiple_of(9) {
                    return Err(invalid("block status reply not made of 9-byte extents"));
                }
                Ok(Answer::Extents(
                    rest.chunks_exact(9)
                        .map(|c| ExtentStatus {
                            length_bytes: u64::from_le_bytes(c[..8].try_into().expect("8 bytes")),
                            hole: c[8] & EXTENT_HOLE != 0,
                            zero: c[8] & EXTENT_ZERO != 0,
                        })
                        .collect(),
                ))
            }
            Some(_) => Ok(Answer::Done),
            None => return Err(invalid("a reply to no request")),
        },
        STATUS_INVALID => Err(ExportIoError::Invalid {
            reason: "invalid request (refused by the owner c.node)",
        }),
        STATUS_READ_ONLY => Err(ExportIoError::ReadOnly),
        STATUS_NO_SPACE => Err(ExportIoError::NoSpace),
        STATUS_IO => Err(ExportIoError::Io {
            detail: format!("on the owner c.node: {}", String::from_utf8_lossy(&rest)),
        }),
        STATUS_GONE => Err(ExportIoError::Gone),
        STATUS_MISCOMPARE => {
            let at: [u8; 8] = rest
                .as_slice()
                .try_into()
                .map_err(|_| invalid("a miscompare reply without its offset"))?;
            Ok(Answer::Miscompare(u64::from_le_bytes(at)))
        }
        other => return Err(invalid(&format!("unknown reply status {other}"))),
    };
    Ok((id, result))
}

fn invalid(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(frame: &[u8]) -> Vec<u8> {
        let len = u32::from_le_bytes(frame[1..5].try_into().unwrap()) as usize;
        assert_eq!(frame.len(), 5 + len);
        frame[5..].to_vec()
    }

    #[test]
    fn requests_round_trip() {
        let head = RequestHead {
            id: 9,
            op: Op::Write,
            flags: FLAG_FUA,
            offset_bytes: 4096,
            length_bytes: 3,
        };
        let frame = request_frame(head, &[1, 2, 3]);
        assert_eq!(frame[0], REQUEST);
        let b = body(&frame);
        let (parsed, data) = parse_request(&b).unwrap();
        assert_eq!((parsed, data), (head, &[1u8, 2, 3][..]));
        let read = RequestHead {
            op: Op::Read,
            length_bytes: 8192,
            ..head
        };
        let b = body(&request_frame(read, &[]));
        assert_eq!(parse_request(&b).unwrap().0, read);
    }

    #[test]
    fn replies_round_trip() {
        let data = Ok(Answer::Data(vec![7; 4096]));
        let b = body(&reply_frame(3, &data));
        assert_eq!(parse_reply(b, |_| Some(Op::Read)).unwrap(), (3, data));
        let extents = Ok(Answer::Extents(vec![
            ExtentStatus {
                length_bytes: 4096,
                hole: true,
                zero: true,
            },
            ExtentStatus {
                length_bytes: 8192,
                hole: false,
                zero: false,
            },
        ]));
        let b = body(&reply_frame(4, &extents));
        assert_eq!(
            parse_reply(b, |_| Some(Op::BlockStatus)).unwrap(),
            (4, extents)
        );
        let b = body(&reply_frame(8, &Ok(Answer::Miscompare(513))));
        assert_eq!(
            parse_reply(b, |_| Some(Op::CompareAndWrite)).unwrap(),
            (8, Ok(Answer::Miscompare(513)))
        );
        let caw = RequestHead {
            id: 9,
            op: Op::CompareAndWrite,
            flags: 0,
            offset_bytes: 0,
            length_bytes: 2,
        };
        let b = body(&request_frame(caw, &[1, 2, 3, 4]));
        assert_eq!(parse_request(&b).unwrap(), (caw, &[1u8, 2, 3, 4][..]));
        assert!(parse_request(&body(&request_frame(caw, &[1, 2]))).is_err());
        let b = body(&reply_frame(5, &Ok(Answer::Done)));
        assert_eq!(
            parse_reply(b, |_| Some(Op::Flush)).unwrap(),
            (5, Ok(Answer::Done))
        );
        for e in [
            ExportIoError::ReadOnly,
            ExportIoError::NoSpace,
            ExportIoError::Gone,
        ] {
            let b = body(&reply_frame(6, &Err(e.clone())));
            assert_eq!(parse_reply(b, |_| Some(Op::Write)).unwrap(), (6, Err(e)));
        }
        let b = body(&reply_frame(
            7,
            &Err(ExportIoError::Io {
                detail: "disk".into(),
            }),
        ));
        let (_, r) = parse_reply(b, |_| Some(Op::Read)).unwrap();
        assert!(matches!(r, Err(ExportIoError::Io { detail }) if detail.contains("disk")));
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        assert!(parse_request(&[1, 2, 3]).is_err());
        let mut bad_op = body(&request_frame(
            RequestHead {
                id: 1,
                op: Op::Flush,
                flags: 0,
                offset_bytes: 0,
                length_bytes: 0,
            },
            &[],
        ));
        bad_op[8] = 99;
        assert!(parse_request(&bad_op).is_err());
        // A write whose data is shorter than its length, a read that carries data.
        let short = RequestHead {
            id: 1,
            op: Op::Write,
            flags: 0,
            offset_bytes: 0,
            length_bytes: 10,
        };
        assert!(parse_request(&body(&request_frame(short, &[1]))).is_err());
        let read = RequestHead {
            op: Op::Read,
            ..short
        };
        assert!(parse_request(&body(&request_frame(read, &[1]))).is_err());
        assert!(parse_reply(vec![1, 2], |_| Some(Op::Read)).is_err());
        let mut unknown = body(&reply_frame(1, &Ok(Answer::Done)));
        unknown[8] = 77;
        assert!(parse_reply(unknown, |_| Some(Op::Read)).is_err());
        assert!(parse_reply(body(&reply_frame(1, &Ok(Answer::Done))), |_| None).is_err());
    }
}
