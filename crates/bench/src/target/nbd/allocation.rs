//! NBD block status for the check of unwritten ranges: a connection of its own that
//! negotiates structured replies and the `base:allocation` meta context before NBD_OPT_GO,
//! then asks NBD_CMD_BLOCK_STATUS one range at a time and reads its structured replies.
//! A server that offers neither has no way to say (the check is reported as not done).
//!
//! The reply parser is sans-IO ([`parse_extents`]); the probe only moves bytes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use super::{
    be_u32, be_u64, disconnect, encode_request, go, greet, read_option_reply, HandshakeError,
    NbdTarget, IHAVEOPT, REP_ACK, REP_ERR_BIT, REQUEST_HEADER_BYTES, SIMPLE_REPLY_MAGIC,
};
use crate::target::{Allocation, AllocationProbe, Extent, TargetError, NBD_SERVER};

const OPT_STRUCTURED_REPLY: u32 = 8;
const OPT_SET_META_CONTEXT: u32 = 10;
const REP_META_CONTEXT: u32 = 4;
const CMD_BLOCK_STATUS: u16 = 7;
const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
const REPLY_FLAG_DONE: u16 = 1;
const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
/// Reply types with this bit are errors: a 32-bit errno, then a message.
const REPLY_TYPE_ERROR_BIT: u16 = 1 << 15;
/// `base:allocation` status flag: nothing is allocated here.
const STATE_HOLE: u32 = 1;
const BASE_ALLOCATION: &str = "base:allocation";
/// Bytes of a structured reply chunk's header.
const STRUCTURED_HEADER_BYTES: usize = 20;
/// Most bytes one NBD_CMD_BLOCK_STATUS asks about (the request's length is 32 bits).
const QUERY_BYTES_MAX: u64 = 1 << 30;
/// Largest structured reply chunk accepted: 64 Ki descriptors.
const CHUNK_PAYLOAD_BYTES_MAX: u32 = 512 * 1024;
/// A server that does not answer a block status query within this is broken.
const QUERY_TIMEOUT: Duration = Duration::from_secs(60);
/// The cookie of every query (one at a time).
const COOKIE: u64 = 1;

/// NBD block status on a connection of its own.
pub(super) struct NbdAllocation {
    stream: TcpStream,
    addr: String,
    context_id: u32,
}

/// Opens the probe connection, or says why the server cannot tell.
pub(super) fn open(target: &NbdTarget) -> Result<Allocation, TargetError> {
    let mut stream = target.connect_tcp()?;
    let negotiated =
        negotiate(&mut stream, &target.export).map_err(|e| target.handshake_error(e))?;
    let context_id = match negotiated {
        Ok(id) => id,
        Err(why) => return Ok(Allocation::Unknown(why)),
    };
    stream
        .set_read_timeout(Some(QUERY_TIMEOUT))
        .map_err(|e| target.connection_error(e))?;
    Ok(Allocation::Known(Box::new(NbdAllocation {
        stream,
        addr: target.addr_text.clone(),
        context_id,
    })))
}

/// Structured replies and the `base:allocation` context, then NBD_OPT_GO: the context's
/// id, or (in the inner error) why the server offers no block status.
fn negotiate(s: &mut TcpStream, export: &str) -> Result<Result<u32, String>, HandshakeError> {
    let no_zeroes = greet(s)?;
    send_option(s, OPT_STRUCTURED_REPLY, &[])?;
    loop {
        match read_option_reply(s)? {
            (REP_ACK, _) => break,
            (t, _) if t & REP_ERR_BIT != 0 => {
                return Ok(Err("the NBD server offers no structured replies".into()))
            }
            _ => {}
        }
    }
    let name = export.as_bytes();
    let name_len = u32::try_from(name.len()).expect("export name length checked in parse_uri");
    let query = BASE_ALLOCATION.as_bytes();
    let mut payload = Vec::with_capacity(12 + name.len() + query.len());
    payload.extend_from_slice(&name_len.to_be_bytes());
    payload.extend_from_slice(name);
    payload.extend_from_slice(&1u32.to_be_bytes());
    let query_len = u32::try_from(query.len()).expect("a short constant");
    payload.extend_from_slice(&query_len.to_be_bytes());
    payload.extend_from_slice(query);
    send_option(s, OPT_SET_META_CONTEXT, &payload)?;
    let mut context_id = None;
    loop {
        match read_option_reply(s)? {
            (REP_ACK, _) => break,
            (REP_META_CONTEXT, data) if data.len() >= 4 && &data[4..] == query => {
                context_id = Some(be_u32(&data[0..4]));
            }
            (t, _) if t & REP_ERR_BIT != 0 => {
                return Ok(Err(
                    "the NBD server refused the base:allocation context".into()
                ))
            }
            _ => {}
        }
    }
    let Some(context_id) = context_id else {
        return Ok(Err(
            "the NBD server offers no base:allocation context".into()
        ));
    };
    go(s, export, no_zeroes)?;
    Ok(Ok(context_id))
}

fn send_option(s: &mut TcpStream, option: u32, payload: &[u8]) -> Result<(), HandshakeError> {
    let mut out = Vec::with_capacity(16 + payload.len());
    out.extend_from_slice(&IHAVEOPT.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    let len = u32::try_from(payload.len()).expect("option payloads are small");
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(payload);
    s.write_all(&out)?;
    Ok(())
}

impl AllocationProbe for NbdAllocation {
    fn method(&self) -> &'static str {
        "nbd base:allocation"
    }

    fn extents(&mut self, offset_bytes: u64, len_bytes: u64) -> Result<Vec<Extent>, TargetError> {
        let len = u32::try_from(len_bytes.min(QUERY_BYTES_MAX)).expect("at most 1 GiB");
        let mut req = [0u8; REQUEST_HEADER_BYTES];
        encode_request(&mut req, CMD_BLOCK_STATUS, COOKIE, offset_bytes, len);
        self.stream
            .write_all(&req)
            .map_err(|e| self.connection_error(e))?;
        let mut extents = Vec::new();
        loop {
            let mut magic = [0u8; 4];
            self.read(&mut magic)?;
            if be_u32(&magic) == SIMPLE_REPLY_MAGIC {
                // Only an error comes back as a simple reply once structured replies are on.
                let mut rest = [0u8; 12];
                self.read(&mut rest)?;
                return Err(self.remote(offset_bytes, len, be_u32(&rest[0..4])));
            }
            if be_u32(&magic) != STRUCTURED_REPLY_MAGIC {
                return Err(self.protocol(format!("bad reply magic {:#010x}", be_u32(&magic))));
            }
            let mut header = [0u8; STRUCTURED_HEADER_BYTES - 4];
            self.read(&mut header)?;
            let flags = u16::from_be_bytes([header[0], header[1]]);
            let kind = u16::from_be_bytes([header[2], header[3]]);
            let cookie = be_u64(&header[4..12]);
            let payload_len = be_u32(&header[12..16]);
            if cookie != COOKIE {
                return Err(self.protocol(format!("reply for unknown cookie {cookie}")));
            }
            if payload_len > CHUNK_PAYLOAD_BYTES_MAX {
                return Err(self.protocol(format!("a reply chunk of {payload_len} bytes")));
            }
            let mut payload = vec![0u8; payload_len as usize];
            self.read(&mut payload)?;
            if kind & REPLY_TYPE_ERROR_BIT != 0 {
                let errno = payload.get(0..4).map_or(0, be_u32);
                return Err(self.remote(offset_bytes, len, errno));
            }
            if kind == REPLY_TYPE_BLOCK_STATUS {
                let parsed =
                    parse_extents(&payload, self.context_id).map_err(|r| self.protocol(r))?;
                extents.extend(parsed);
            }
            if flags & REPLY_FLAG_DONE != 0 {
                break;
            }
        }
        let extents = clip(extents, u64::from(len));
        if extents.is_empty() {
            return Err(self.protocol("block status described no bytes".into()));
        }
        Ok(extents)
    }
}

impl NbdAllocation {
    fn read(&mut self, buf: &mut [u8]) -> Result<(), TargetError> {
        self.stream
            .read_exact(buf)
            .map_err(|e| self.connection_error(e))
    }

    fn connection_error(&self, source: std::io::Error) -> TargetError {
        TargetError::Connection {
            peer: NBD_SERVER,
            addr: self.addr.clone(),
            source,
        }
    }

    fn protocol(&self, reason: String) -> TargetError {
        TargetError::Protocol {
            peer: NBD_SERVER,
            addr: self.addr.clone(),
            reason,
        }
    }

    fn remote(&self, offset_bytes: u64, len_bytes: u32, errno: u32) -> TargetError {
        TargetError::Remote {
            op: "block status",
            offset_bytes,
            len_bytes,
            errno,
        }
    }
}

impl Drop for NbdAllocation {
    fn drop(&mut self) {
        disconnect(&mut self.stream);
    }
}

/// The extents of a BLOCK_STATUS chunk's payload (context id, then length and flags pairs);
/// a chunk of another context describes nothing we asked for.
fn parse_extents(payload: &[u8], context_id: u32) -> Result<Vec<Extent>, String> {
    if payload.len() < 4 || !(payload.len() - 4).is_multiple_of(8) {
        return Err(format!("a block status chunk of {} bytes", payload.len()));
    }
    if be_u32(&payload[0..4]) != context_id {
        return Ok(Vec::new());
    }
    Ok(payload[4..]
        .chunks_exact(8)
        .map(|d| Extent {
            length_bytes: u64::from(be_u32(&d[0..4])),
            allocated: be_u32(&d[4..8]) & STATE_HOLE == 0,
        })
        .filter(|e| e.length_bytes > 0)
        .collect())
}

/// The extents cut to `len` bytes (a server may describe more than it was asked).
fn clip(extents: Vec<Extent>, len: u64) -> Vec<Extent> {
    let mut left = len;
    let mut out = Vec::with_capacity(extents.len());
    for mut e in extents {
        if left == 0 {
            break;
        }
        e.length_bytes = e.length_bytes.min(left);
        left -= e.length_bytes;
        out.push(e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(context: u32, descriptors: &[(u32, u32)]) -> Vec<u8> {
        let mut v = context.to_be_bytes().to_vec();
        for (len, flags) in descriptors {
            v.extend_from_slice(&len.to_be_bytes());
            v.extend_from_slice(&flags.to_be_bytes());
        }
        v
    }

    #[test]
    fn holes_are_unallocated_and_zero_data_is_allocated() {
        // hole+zero, data, data+zero (written zeroes are still written).
        let payload = chunk(7, &[(8192, 3), (4096, 0), (4096, 2)]);
        assert_eq!(
            parse_extents(&payload, 7).unwrap(),
            [
                Extent {
                    length_bytes: 8192,
                    allocated: false
                },
                Extent {
                    length_bytes: 4096,
                    allocated: true
                },
                Extent {
                    length_bytes: 4096,
                    allocated: true
                },
            ]
        );
        assert!(
            parse_extents(&payload, 8).unwrap().is_empty(),
            "another context"
        );
        assert!(parse_extents(&payload[..7], 7).is_err());
    }

    #[test]
    fn extents_are_clipped_to_the_query() {
        let e = |length_bytes, allocated| Extent {
            length_bytes,
            allocated,
        };
        assert_eq!(
            clip(vec![e(4096, true), e(1 << 20, false)], 8192),
            [e(4096, true), e(4096, false)]
        );
    }
}
