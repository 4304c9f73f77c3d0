//! A small blocking NBD client over std sockets, built on `weft-nbd`'s client-side encoders,
//! for scripting exact byte sequences (errors, malformed input, pipelining).

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use weft_nbd::negotiation::{encode_info_request, encode_meta_context_request, encode_option};
use weft_nbd::reply::{parse_reply_header, ReplyHeader};
use weft_nbd::wire::{
    CLIENT_FLAG_FIXED_NEWSTYLE, CLIENT_FLAG_NO_ZEROES, OPTION_REPLY_MAGIC, OPT_GO,
    OPT_SET_META_CONTEXT, OPT_STRUCTURED_REPLY, REP_ACK, REP_INFO,
};
use weft_nbd::{Parse, RequestHeader};

#[derive(Debug)]
pub struct RawClient {
    pub stream: TcpStream,
}

/// One reply as the client sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    Simple {
        error: u32,
        handle: u64,
    },
    Chunk {
        flags: u16,
        reply_type: u16,
        handle: u64,
        payload: Vec<u8>,
    },
}

impl Reply {
    pub fn handle(&self) -> u64 {
        match self {
            Reply::Simple { handle, .. } | Reply::Chunk { handle, .. } => *handle,
        }
    }
}

impl RawClient {
    /// Connect and get past the greeting and client flags.
    pub fn connect(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        stream.set_nodelay(true).expect("nodelay");
        let mut c = RawClient { stream };
        let greeting = c.read_exact_vec(18);
        assert_eq!(&greeting[0..8], b"NBDMAGIC");
        c.send(&(CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES).to_be_bytes());
        c
    }

    /// Connect and negotiate `export` with structured replies and base:allocation, or plain.
    pub fn open(addr: SocketAddr, export: &str, structured: bool) -> (Self, u64, u16) {
        let mut c = Self::connect(addr);
        if structured {
            assert_eq!(c.option(OPT_STRUCTURED_REPLY, &[])[0].0, REP_ACK);
            let meta = encode_meta_context_request(export, &["base:allocation"]);
            let replies = c.option(OPT_SET_META_CONTEXT, &meta);
            assert_eq!(replies.len(), 2, "one context and ACK: {replies:?}");
        }
        let replies = c.option(OPT_GO, &encode_info_request(export, &[]));
        assert_eq!(
            replies.last().map(|r| r.0),
            Some(REP_ACK),
            "GO {export}: {replies:?}"
        );
        let info = &replies.iter().find(|r| r.0 == REP_INFO).expect("info").1;
        let size = u64::from_be_bytes(info[2..10].try_into().expect("8"));
        let flags = u16::from_be_bytes(info[10..12].try_into().expect("2"));
        (c, size, flags)
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
    }

    pub fn read_exact_vec(&mut self, n: usize) -> Vec<u8> {
        let mut buf = vec![0u8; n];
        self.stream.read_exact(&mut buf).expect("read");
        buf
    }

    /// Send an option and collect replies up to the final one (ACK or an error).
    pub fn option(&mut self, option: u32, payload: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let mut bytes = Vec::new();
        encode_option(option, payload, &mut bytes);
        self.send(&bytes);
        let mut replies = Vec::new();
        loop {
            let h = self.read_exact_vec(20);
            assert_eq!(
                u64::from_be_bytes(h[0..8].try_into().expect("8")),
                OPTION_REPLY_MAGIC
            );
            assert_eq!(u32::from_be_bytes(h[8..12].try_into().expect("4")), option);
            let reply_type = u32::from_be_bytes(h[12..16].try_into().expect("4"));
            let len = u32::from_be_bytes(h[16..20].try_into().expect("4")) as usize;
            let data = self.read_exact_vec(len);
            replies.push((reply_type, data));
            if reply_type == REP_ACK || reply_type & (1 << 31) != 0 {
                return replies;
            }
        }
    }

    pub fn request(
        &mut self,
        command: u16,
        flags: u16,
        handle: u64,
        offset_bytes: u64,
        length_bytes: u32,
        payload: &[u8],
    ) {
        let mut bytes = RequestHeader {
            flags,
            command,
            handle,
            offset_bytes,
            length_bytes,
        }
        .encode()
        .to_vec();
        bytes.extend_from_slice(payload);
        self.send(&bytes);
    }

    /// Read one reply; `read_len` is the data length that follows a successful simple reply
    /// (0 for non-reads).
    pub fn reply(&mut self, read_len: usize) -> Reply {
        let mut head = self.read_exact_vec(4);
        let magic = u32::from_be_bytes(head[0..4].try_into().expect("4"));
        let rest = if magic == weft_nbd::wire::SIMPLE_REPLY_MAGIC {
            12
        } else {
            16
        };
        head.extend(self.read_exact_vec(rest));
        match parse_reply_header(&head) {
            Parse::Complete(ReplyHeader::Simple { error, handle }, _) => {
                if error == 0 && read_len > 0 {
                    let _ = self.read_exact_vec(read_len);
                }
                Reply::Simple { error, handle }
            }
            Parse::Complete(
                ReplyHeader::Chunk {
                    flags,
                    reply_type,
                    handle,
                    length_bytes,
                },
                _,
            ) => {
                let payload = self.read_exact_vec(length_bytes as usize);
                Reply::Chunk {
                    flags,
                    reply_type,
                    handle,
                    payload,
                }
            }
            other => panic!("bad reply header {other:?}"),
        }
    }

    /// Read a simple reply's data (after a successful simple read reply header).
    pub fn read_simple(
        &mut self,
        handle: u64,
        offset_bytes: u64,
        len: u32,
    ) -> Result<Vec<u8>, u32> {
        self.request(weft_nbd::wire::CMD_READ, 0, handle, offset_bytes, len, &[]);
        let h = self.read_exact_vec(16);
        let error = u32::from_be_bytes(h[4..8].try_into().expect("4"));
        assert_eq!(u64::from_be_bytes(h[8..16].try_into().expect("8")), handle);
        if error != 0 {
            return Err(error);
        }
        Ok(self.read_exact_vec(len as usize))
    }

    /// True if the server closed the connection (EOF) within the read timeout.
    pub fn closed_by_server(&mut self) -> bool {
        let mut byte = [0u8; 1];
        loop {
            match self.stream.read(&mut byte) {
                Ok(0) => return true,
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
                Err(_) => return false,
            }
        }
    }
}
