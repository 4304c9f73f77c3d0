//! A small NBD client for load generation: fixed-newstyle handshake with NBD_OPT_GO (asking for
//! NBD_INFO_BLOCK_SIZE; NBD_OPT_EXPORT_NAME as the fallback for old servers), then simple replies
//! only, pipelined: one TCP connection carries a queue's whole depth, requests are matched to
//! replies by cookie (our slot tag).
//!
//! Cost per batch of I/Os: one send of all queued requests and as few receives as the replies
//! need. No allocation per I/O: the send and receive buffers are reused. The reply parser is
//! sans-IO ([`ReplyParser`]); the queue only feeds it bytes.
//!
//! Block status (`base:allocation`, on a connection of its own with structured replies) is
//! [`allocation`], for the check of unwritten ranges. Not here: TLS, Unix sockets.

mod allocation;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::time::Duration;

use crate::datagen::DataGen;
use crate::sys;
use crate::target::{
    Allocation, IoQueue, IoRequest, Op, Target, TargetError, TargetInfo, NBD_SERVER, NBD_URI_FORM,
};

const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943; // "NBDMAGIC"
const IHAVEOPT: u64 = 0x4948_4156_454f_5054; // "IHAVEOPT"
const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
const REQUEST_MAGIC: u32 = 0x2560_9513;
const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
const HANDSHAKE_FLAG_FIXED_NEWSTYLE: u16 = 1;
const HANDSHAKE_FLAG_NO_ZEROES: u16 = 2;
const OPT_EXPORT_NAME: u32 = 1;
const OPT_GO: u32 = 7;
const REP_ACK: u32 = 1;
const REP_INFO: u32 = 3;
const REP_ERR_BIT: u32 = 1 << 31;
const REP_ERR_UNSUP: u32 = REP_ERR_BIT | 1;
const INFO_EXPORT: u16 = 0;
const INFO_BLOCK_SIZE: u16 = 3;
const FLAG_READ_ONLY: u16 = 1 << 1;
const CMD_READ: u16 = 0;
const CMD_WRITE: u16 = 1;
const CMD_DISC: u16 = 2;

/// The NBD default port (IANA).
const NBD_PORT_DEFAULT: u16 = 10809;
/// Bytes of a request header on the wire.
const REQUEST_HEADER_BYTES: usize = 28;
/// Bytes of a simple reply header on the wire.
const REPLY_HEADER_BYTES: usize = 16;
/// Largest option reply payload we accept during the handshake; the spec's info replies are tiny.
const OPTION_REPLY_BYTES_MAX: u32 = 64 * 1024;
/// Export names longer than this are refused by the spec (4096 bytes).
const EXPORT_NAME_BYTES_MAX: usize = 4096;
/// Receive buffer: large enough that many small replies arrive in one recv.
const RECV_BUF_BYTES: usize = 256 * 1024;
/// Block size we assume when the server sends no NBD_INFO_BLOCK_SIZE (the spec's default).
const BLOCK_SIZE_MIN_DEFAULT: u32 = 1;
/// Largest payload the spec lets a client assume without NBD_INFO_BLOCK_SIZE: 32 MiB.
const BLOCK_SIZE_MAX_DEFAULT: u32 = 32 * 1024 * 1024;
/// How long to wait for a TCP connection before declaring the target unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the handshake may take (an idle server that never answers is an error).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const _: () = assert!(RECV_BUF_BYTES >= 2 * REPLY_HEADER_BYTES);

/// An NBD export, located by `nbd://host[:port]/[export]`.
#[derive(Debug)]
pub(crate) struct NbdTarget {
    addr: SocketAddr,
    addr_text: String,
    export: String,
    info: TargetInfo,
}

/// What the handshake told us about the export.
#[derive(Debug, Clone, Copy)]
struct ExportFacts {
    size_bytes: u64,
    flags: u16,
    block_min: u32,
    block_pref: u32,
    block_max: u32,
}

impl NbdTarget {
    /// Resolves the URI and performs one handshake to learn the export's size and limits.
    pub(crate) fn open(uri: &str) -> Result<Self, TargetError> {
        let (host, port, export) = parse_uri(uri)?;
        let addr_text = format!("{host}:{port}");
        let addr = (host.as_str(), port)
            .to_socket_addrs()
            .map_err(|source| TargetError::Connect {
                peer: NBD_SERVER,
                addr: addr_text.clone(),
                source,
            })?
            .next()
            .ok_or_else(|| TargetError::Connect {
                peer: NBD_SERVER,
                addr: addr_text.clone(),
                source: io::Error::new(io::ErrorKind::NotFound, "host has no address"),
            })?;
        let mut t = NbdTarget {
            addr,
            addr_text,
            export,
            info: TargetInfo {
                uri: uri.to_string(),
                kind: "nbd".to_string(),
                size_bytes: 0,
                block_size_min_bytes: 0,
                block_size_preferred_bytes: 0,
                block_size_max_bytes: 0,
                read_only: false,
                direct_io: None,
            },
        };
        let (mut stream, facts) = t.connect()?;
        disconnect(&mut stream);
        t.info.size_bytes = facts.size_bytes;
        t.info.block_size_min_bytes = facts.block_min;
        t.info.block_size_preferred_bytes = facts.block_pref;
        t.info.block_size_max_bytes = facts.block_max;
        t.info.read_only = facts.flags & FLAG_READ_ONLY != 0;
        Ok(t)
    }

    fn connect(&self) -> Result<(TcpStream, ExportFacts), TargetError> {
        let mut stream = self.connect_tcp()?;
        let facts = handshake(&mut stream, &self.export).map_err(|e| self.handshake_error(e))?;
        stream
            .set_read_timeout(None)
            .map_err(|e| self.connection_error(e))?;
        Ok((stream, facts))
    }

    /// A TCP connection to the server, ready for a handshake (with its read timeout).
    fn connect_tcp(&self) -> Result<TcpStream, TargetError> {
        let stream = TcpStream::connect_timeout(&self.addr, CONNECT_TIMEOUT).map_err(|source| {
            TargetError::Connect {
                peer: NBD_SERVER,
                addr: self.addr_text.clone(),
                source,
            }
        })?;
        stream
            .set_nodelay(true)
            .map_err(|e| self.connection_error(e))?;
        stream
            .set_read_timeout(Some(HANDSHAKE_TIMEOUT))
            .map_err(|e| self.connection_error(e))?;
        Ok(stream)
    }

    fn connection_error(&self, source: io::Error) -> TargetError {
        TargetError::Connection {
            peer: NBD_SERVER,
            addr: self.addr_text.clone(),
            source,
        }
    }

    fn handshake_error(&self, e: HandshakeError) -> TargetError {
        match e {
            HandshakeError::Io(source) => self.connection_error(source),
            HandshakeError::Protocol(reason) => TargetError::Protocol {
                peer: NBD_SERVER,
                addr: self.addr_text.clone(),
                reason,
            },
            HandshakeError::Refused(reason) => TargetError::ExportRefused {
                addr: self.addr_text.clone(),
                export: self.export.clone(),
                reason,
            },
        }
    }
}

impl Target for NbdTarget {
    fn info(&self) -> &TargetInfo {
        &self.info
    }

    fn queue_depth_max(&self) -> u32 {
        u32::MAX
    }

    fn open_queue(
        &self,
        depth: u32,
        io_bytes_max: u32,
        data: DataGen,
    ) -> Result<Box<dyn IoQueue>, TargetError> {
        let (stream, _) = self.connect()?;
        Ok(Box::new(NbdQueue::new(
            stream,
            self.addr_text.clone(),
            depth,
            io_bytes_max,
            data,
        )))
    }

    fn allocation(&self) -> Result<Allocation, TargetError> {
        allocation::open(self)
    }
}

/// Splits `nbd://host[:port]/[export]`.
fn parse_uri(uri: &str) -> Result<(String, u16, String), TargetError> {
    let bad = |reason| TargetError::BadUri {
        uri: uri.to_string(),
        scheme: "NBD",
        reason,
        form: NBD_URI_FORM,
    };
    let rest = uri
        .strip_prefix("nbd://")
        .ok_or_else(|| bad("missing nbd://"))?;
    let (authority, export) = match rest.split_once('/') {
        Some((a, e)) => (a, e),
        None => (rest, ""),
    };
    if authority.is_empty() {
        return Err(bad("missing host"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, tail) = v6
            .split_once(']')
            .ok_or_else(|| bad("unclosed '[' in host"))?;
        let port = match tail.strip_prefix(':') {
            Some(p) => p.parse().map_err(|_| bad("bad port"))?,
            None if tail.is_empty() => NBD_PORT_DEFAULT,
            None => return Err(bad("junk after host")),
        };
        (h.to_string(), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), p.parse().map_err(|_| bad("bad port"))?),
            None => (authority.to_string(), NBD_PORT_DEFAULT),
        }
    };
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    if export.len() > EXPORT_NAME_BYTES_MAX {
        return Err(bad("export name longer than 4096 bytes"));
    }
    Ok((host, port, export.to_string()))
}

#[derive(Debug)]
enum HandshakeError {
    Io(io::Error),
    Protocol(String),
    Refused(String),
}

impl From<io::Error> for HandshakeError {
    fn from(e: io::Error) -> Self {
        if e.kind() == io::ErrorKind::UnexpectedEof {
            HandshakeError::Protocol("server closed the connection during the handshake".into())
        } else {
            HandshakeError::Io(e)
        }
    }
}

/// Fixed-newstyle negotiation, ending in transmission mode.
fn handshake(s: &mut TcpStream, export: &str) -> Result<ExportFacts, HandshakeError> {
    let no_zeroes = greet(s)?;
    go(s, export, no_zeroes)
}

/// The server's greeting and our flags; whether the server leaves out the export name
/// fallback's zeroes.
fn greet(s: &mut TcpStream) -> Result<bool, HandshakeError> {
    let mut greet = [0u8; 18];
    s.read_exact(&mut greet)?;
    if be_u64(&greet[0..8]) != NBD_MAGIC {
        return Err(HandshakeError::Protocol(
            "not an NBD server (bad greeting magic)".into(),
        ));
    }
    if be_u64(&greet[8..16]) != IHAVEOPT {
        return Err(HandshakeError::Protocol(
            "server speaks oldstyle NBD, only newstyle is supported".into(),
        ));
    }
    let server_flags = u16::from_be_bytes([greet[16], greet[17]]);
    if server_flags & HANDSHAKE_FLAG_FIXED_NEWSTYLE == 0 {
        return Err(HandshakeError::Protocol(
            "server does not offer fixed newstyle".into(),
        ));
    }
    let no_zeroes = server_flags & HANDSHAKE_FLAG_NO_ZEROES != 0;
    let client_flags: u32 = 1 | if no_zeroes { 2 } else { 0 };
    s.write_all(&client_flags.to_be_bytes())?;
    Ok(no_zeroes)
}

/// NBD_OPT_GO (NBD_OPT_EXPORT_NAME for old servers): into transmission mode on `export`.
fn go(s: &mut TcpStream, export: &str, no_zeroes: bool) -> Result<ExportFacts, HandshakeError> {
    // NBD_OPT_GO: name length, name, one info request (block size).
    let name = export.as_bytes();
    let name_len = u32::try_from(name.len()).expect("export name length checked in parse_uri");
    let mut opt = Vec::with_capacity(16 + 8 + name.len());
    opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&OPT_GO.to_be_bytes());
    opt.extend_from_slice(&(4 + name_len + 2 + 2).to_be_bytes());
    opt.extend_from_slice(&name_len.to_be_bytes());
    opt.extend_from_slice(name);
    opt.extend_from_slice(&1u16.to_be_bytes());
    opt.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    s.write_all(&opt)?;

    let mut size_flags: Option<(u64, u16)> = None;
    let mut blocks: Option<(u32, u32, u32)> = None;
    loop {
        let (reply_type, data) = read_option_reply(s)?;
        match reply_type {
            REP_ACK => break,
            REP_INFO if data.len() >= 2 => {
                let info = u16::from_be_bytes([data[0], data[1]]);
                if info == INFO_EXPORT && data.len() >= 12 {
                    size_flags = Some((
                        be_u64(&data[2..10]),
                        u16::from_be_bytes([data[10], data[11]]),
                    ));
                } else if info == INFO_BLOCK_SIZE && data.len() >= 14 {
                    blocks = Some((
                        be_u32(&data[2..6]),
                        be_u32(&data[6..10]),
                        be_u32(&data[10..14]),
                    ));
                }
            }
            REP_INFO => return Err(HandshakeError::Protocol("short NBD_REP_INFO".into())),
            REP_ERR_UNSUP => return export_name_fallback(s, name, no_zeroes),
            t if t & REP_ERR_BIT != 0 => {
                let text = String::from_utf8_lossy(&data).into_owned();
                return Err(HandshakeError::Refused(option_error_text(t, &text)));
            }
            _ => {} // unknown reply types before the ACK are ignorable
        }
    }
    let (size_bytes, flags) = size_flags.ok_or_else(|| {
        HandshakeError::Protocol("NBD_OPT_GO ended without NBD_INFO_EXPORT".into())
    })?;
    let (block_min, block_pref, block_max) =
        blocks.unwrap_or((BLOCK_SIZE_MIN_DEFAULT, 4096, BLOCK_SIZE_MAX_DEFAULT));
    Ok(ExportFacts {
        size_bytes,
        flags,
        block_min,
        block_pref,
        block_max,
    })
}

/// One option reply: its type and data.
fn read_option_reply(s: &mut TcpStream) -> Result<(u32, Vec<u8>), HandshakeError> {
    let mut hdr = [0u8; 20];
    s.read_exact(&mut hdr)?;
    if be_u64(&hdr[0..8]) != OPTION_REPLY_MAGIC {
        return Err(HandshakeError::Protocol("bad option reply magic".into()));
    }
    let reply_type = be_u32(&hdr[12..16]);
    let len = be_u32(&hdr[16..20]);
    if len > OPTION_REPLY_BYTES_MAX {
        return Err(HandshakeError::Protocol(format!(
            "option reply of {len} bytes"
        )));
    }
    let mut data = vec![0u8; len as usize];
    s.read_exact(&mut data)?;
    Ok((reply_type, data))
}

/// Old servers without NBD_OPT_GO: NBD_OPT_EXPORT_NAME has no error path, only a close.
fn export_name_fallback(
    s: &mut TcpStream,
    name: &[u8],
    no_zeroes: bool,
) -> Result<ExportFacts, HandshakeError> {
    let name_len = u32::try_from(name.len()).expect("export name length checked in parse_uri");
    let mut opt = Vec::with_capacity(16 + name.len());
    opt.extend_from_slice(&IHAVEOPT.to_be_bytes());
    opt.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    opt.extend_from_slice(&name_len.to_be_bytes());
    opt.extend_from_slice(name);
    s.write_all(&opt)?;
    let mut reply = [0u8; 10 + 124];
    let want = if no_zeroes { 10 } else { 134 };
    s.read_exact(&mut reply[..want])
        .map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => HandshakeError::Refused("export not found".into()),
            _ => HandshakeError::Io(e),
        })?;
    Ok(ExportFacts {
        size_bytes: be_u64(&reply[0..8]),
        flags: u16::from_be_bytes([reply[8], reply[9]]),
        block_min: BLOCK_SIZE_MIN_DEFAULT,
        block_pref: 4096,
        block_max: BLOCK_SIZE_MAX_DEFAULT,
    })
}

fn option_error_text(reply_type: u32, text: &str) -> String {
    let name = match reply_type & !REP_ERR_BIT {
        1 => "unsupported",
        2 => "forbidden by policy",
        3 => "invalid request",
        4 => "unsupported on this platform",
        5 => "TLS required",
        6 => "unknown export",
        7 => "server shutting down",
        8 => "block size negotiation required",
        9 => "request too big",
        _ => "error",
    };
    if text.is_empty() {
        name.to_string()
    } else {
        format!("{name} ({text})")
    }
}

/// Best effort: tell the server we are leaving. Errors do not matter at this point.
fn disconnect(s: &mut TcpStream) {
    let mut req = [0u8; REQUEST_HEADER_BYTES];
    encode_request(&mut req, CMD_DISC, 0, 0, 0);
    let _ = s.write_all(&req);
    let _ = s.shutdown(std::net::Shutdown::Both);
}

fn encode_request(out: &mut [u8], cmd: u16, cookie: u64, offset: u64, len: u32) {
    out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    out[4..6].copy_from_slice(&0u16.to_be_bytes());
    out[6..8].copy_from_slice(&cmd.to_be_bytes());
    out[8..16].copy_from_slice(&cookie.to_be_bytes());
    out[16..24].copy_from_slice(&offset.to_be_bytes());
    out[24..28].copy_from_slice(&len.to_be_bytes());
}

fn be_u64(b: &[u8]) -> u64 {
    u64::from_be_bytes(b[..8].try_into().expect("8 bytes"))
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes(b[..4].try_into().expect("4 bytes"))
}

/// What the parser needs to know about each outstanding tag.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    outstanding: bool,
    op: Op,
    offset_bytes: u64,
    len_bytes: u32,
}

/// One step of reply parsing.
#[derive(Debug, PartialEq, Eq)]
enum ReplyStep {
    /// Need more bytes.
    Incomplete,
    /// Consumed this many bytes without finishing a reply (a payload piece or a header of a
    /// read whose payload follows).
    Consumed(usize),
    /// Consumed this many bytes and finished the reply for `tag`.
    Done {
        consumed: usize,
        tag: u32,
        errno: u32,
    },
}

/// Sans-IO parser of simple replies, including skipping read payloads that span receives.
#[derive(Debug, Default)]
struct ReplyParser {
    /// Bytes of the current read payload still to skip.
    payload_left: u64,
    /// The tag whose payload is being skipped.
    payload_tag: u32,
}

impl ReplyParser {
    fn step(&mut self, buf: &[u8], inflight: &[Inflight]) -> Result<ReplyStep, String> {
        if self.payload_left > 0 {
            if buf.is_empty() {
                return Ok(ReplyStep::Incomplete);
            }
            let n = usize::try_from(self.payload_left)
                .unwrap_or(usize::MAX)
                .min(buf.len());
            self.payload_left -= n as u64;
            if self.payload_left == 0 {
                return Ok(ReplyStep::Done {
                    consumed: n,
                    tag: self.payload_tag,
                    errno: 0,
                });
            }
            return Ok(ReplyStep::Consumed(n));
        }
        if buf.len() < REPLY_HEADER_BYTES {
            return Ok(ReplyStep::Incomplete);
        }
        let magic = be_u32(&buf[0..4]);
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(format!("bad reply magic {magic:#010x}"));
        }
        let errno = be_u32(&buf[4..8]);
        let cookie = be_u64(&buf[8..16]);
        let slot = usize::try_from(cookie)
            .ok()
            .and_then(|i| inflight.get(i))
            .filter(|s| s.outstanding)
            .ok_or_else(|| format!("reply for unknown cookie {cookie}"))?;
        let tag = u32::try_from(cookie).expect("cookie indexes the inflight table");
        if errno == 0 && slot.op == Op::Read && slot.len_bytes > 0 {
            self.payload_left = u64::from(slot.len_bytes);
            self.payload_tag = tag;
            return Ok(ReplyStep::Consumed(REPLY_HEADER_BYTES));
        }
        Ok(ReplyStep::Done {
            consumed: REPLY_HEADER_BYTES,
            tag,
            errno,
        })
    }
}

/// One pipelined connection.
struct NbdQueue {
    stream: TcpStream,
    addr: String,
    inflight: Vec<Inflight>,
    /// Encoded requests not yet sent: `send_buf[send_pos..send_len]`. `send_buf` only grows.
    send_buf: Vec<u8>,
    send_pos: usize,
    send_len: usize,
    recv_buf: Vec<u8>,
    recv_pos: usize,
    recv_len: usize,
    parser: ReplyParser,
    data: DataGen,
}

impl std::fmt::Debug for NbdQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NbdQueue")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl NbdQueue {
    fn new(stream: TcpStream, addr: String, depth: u32, io_bytes_max: u32, data: DataGen) -> Self {
        let depth = depth as usize;
        let idle = Inflight {
            outstanding: false,
            op: Op::Read,
            offset_bytes: 0,
            len_bytes: 0,
        };
        NbdQueue {
            stream,
            addr,
            inflight: vec![idle; depth],
            send_buf: vec![
                0;
                depth.min(64) * (REQUEST_HEADER_BYTES + io_bytes_max.min(65536) as usize)
            ],
            send_pos: 0,
            send_len: 0,
            recv_buf: vec![0; RECV_BUF_BYTES],
            recv_pos: 0,
            recv_len: 0,
            parser: ReplyParser::default(),
            data,
        }
    }

    fn conn_err(&self, source: io::Error) -> TargetError {
        TargetError::Connection {
            peer: NBD_SERVER,
            addr: self.addr.clone(),
            source,
        }
    }

    /// Parses everything buffered; pushes finished tags.
    fn parse_buffered(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError> {
        loop {
            let buf = &self.recv_buf[self.recv_pos..self.recv_len];
            let step =
                self.parser
                    .step(buf, &self.inflight)
                    .map_err(|reason| TargetError::Protocol {
                        peer: NBD_SERVER,
                        addr: self.addr.clone(),
                        reason,
                    })?;
            match step {
                ReplyStep::Incomplete => break,
                ReplyStep::Consumed(n) => self.recv_pos += n,
                ReplyStep::Done {
                    consumed,
                    tag,
                    errno,
                } => {
                    self.recv_pos += consumed;
                    let slot = &mut self.inflight[tag as usize];
                    slot.outstanding = false;
                    if errno != 0 {
                        return Err(TargetError::Remote {
                            op: slot.op.name(),
                            offset_bytes: slot.offset_bytes,
                            len_bytes: slot.len_bytes,
                            errno,
                        });
                    }
                    done.push(tag);
                }
            }
        }
        // Keep a partial header at the front so the next receive has room after it.
        if self.recv_pos == self.recv_len {
            self.recv_pos = 0;
            self.recv_len = 0;
        } else if self.recv_pos > 0 && self.recv_buf.len() - self.recv_len < REPLY_HEADER_BYTES {
            self.recv_buf.copy_within(self.recv_pos..self.recv_len, 0);
            self.recv_len -= self.recv_pos;
            self.recv_pos = 0;
        }
        Ok(())
    }

    fn note_received(&mut self, n: usize) -> Result<(), TargetError> {
        if n == 0 {
            return Err(self.conn_err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "server closed the connection",
            )));
        }
        self.recv_len += n;
        Ok(())
    }

    /// Sends all queued requests. Normally one non-blocking send takes them all; if the socket
    /// is full we keep receiving replies while we wait, so that a server blocked on sending us
    /// large read replies cannot deadlock with us blocked on sending it large writes.
    fn flush(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError> {
        let fd = self.stream.as_raw_fd();
        while self.send_pos < self.send_len {
            let n = sys::send_nowait(fd, &self.send_buf[self.send_pos..self.send_len])
                .map_err(|e| self.conn_err(e))?;
            self.send_pos += n;
            if self.send_pos == self.send_len {
                break;
            }
            let free = self.recv_len..self.recv_buf.len();
            match sys::recv_nowait(fd, &mut self.recv_buf[free]).map_err(|e| self.conn_err(e))? {
                Some(got) => {
                    self.note_received(got)?;
                    self.parse_buffered(done)?;
                }
                None if n == 0 => sys::poll_socket(fd, true).map_err(|e| self.conn_err(e))?,
                None => {}
            }
        }
        self.send_pos = 0;
        self.send_len = 0;
        Ok(())
    }
}

impl IoQueue for NbdQueue {
    fn submit(&mut self, req: IoRequest) {
        let slot = &mut self.inflight[req.tag as usize];
        assert!(!slot.outstanding, "tag {} submitted twice", req.tag);
        *slot = Inflight {
            outstanding: true,
            op: req.op,
            offset_bytes: req.offset_bytes,
            len_bytes: req.len_bytes,
        };
        let payload = if req.op == Op::Write {
            req.len_bytes as usize
        } else {
            0
        };
        let need = self.send_len + REQUEST_HEADER_BYTES + payload;
        if need > self.send_buf.len() {
            self.send_buf.resize(need, 0);
        }
        let cmd = if req.op == Op::Write {
            CMD_WRITE
        } else {
            CMD_READ
        };
        let start = self.send_len;
        encode_request(
            &mut self.send_buf[start..start + REQUEST_HEADER_BYTES],
            cmd,
            u64::from(req.tag),
            req.offset_bytes,
            req.len_bytes,
        );
        let data = start + REQUEST_HEADER_BYTES;
        self.data.fill(&mut self.send_buf[data..data + payload]);
        self.send_len = need;
    }

    fn wait(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError> {
        self.flush(done)?;
        while done.is_empty() {
            let free = self.recv_len..self.recv_buf.len();
            let n = (&self.stream)
                .read(&mut self.recv_buf[free])
                .map_err(|e| self.conn_err(e))?;
            self.note_received(n)?;
            self.parse_buffered(done)?;
        }
        Ok(())
    }
}

impl Drop for NbdQueue {
    fn drop(&mut self) {
        // Outstanding replies are abandoned; the server will see the disconnect.
        disconnect(&mut self.stream);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflight(op: Op, len: u32) -> Vec<Inflight> {
        vec![
            Inflight {
                outstanding: true,
                op,
                offset_bytes: 0,
                len_bytes: len
            };
            4
        ]
    }

    fn reply(errno: u32, cookie: u64) -> Vec<u8> {
        let mut v = SIMPLE_REPLY_MAGIC.to_be_bytes().to_vec();
        v.extend_from_slice(&errno.to_be_bytes());
        v.extend_from_slice(&cookie.to_be_bytes());
        v
    }

    #[test]
    fn uri_parses_host_port_and_export() {
        assert_eq!(
            parse_uri("nbd://127.0.0.1:10810/vol1").unwrap(),
            ("127.0.0.1".to_string(), 10810, "vol1".to_string())
        );
        assert_eq!(
            parse_uri("nbd://host").unwrap(),
            ("host".to_string(), 10809, String::new())
        );
        assert_eq!(
            parse_uri("nbd://[::1]:99/").unwrap(),
            ("::1".to_string(), 99, String::new())
        );
        assert!(parse_uri("nbd://:12/x").is_err());
        assert!(parse_uri("nbd://h:port/x").is_err());
    }

    #[test]
    fn write_reply_completes_on_header() {
        let mut p = ReplyParser::default();
        let r = reply(0, 2);
        assert_eq!(
            p.step(&r[..10], &inflight(Op::Write, 8192)),
            Ok(ReplyStep::Incomplete)
        );
        assert_eq!(
            p.step(&r, &inflight(Op::Write, 8192)),
            Ok(ReplyStep::Done {
                consumed: 16,
                tag: 2,
                errno: 0
            })
        );
    }

    #[test]
    fn read_reply_payload_is_skipped_across_receives() {
        let mut p = ReplyParser::default();
        let table = inflight(Op::Read, 100);
        assert_eq!(p.step(&reply(0, 1), &table), Ok(ReplyStep::Consumed(16)));
        assert_eq!(p.step(&[0u8; 60], &table), Ok(ReplyStep::Consumed(60)));
        assert_eq!(p.step(&[], &table), Ok(ReplyStep::Incomplete));
        assert_eq!(
            p.step(&[0u8; 60], &table),
            Ok(ReplyStep::Done {
                consumed: 40,
                tag: 1,
                errno: 0
            })
        );
    }

    #[test]
    fn error_reply_has_no_payload_and_carries_errno() {
        let mut p = ReplyParser::default();
        assert_eq!(
            p.step(&reply(5, 0), &inflight(Op::Read, 4096)),
            Ok(ReplyStep::Done {
                consumed: 16,
                tag: 0,
                errno: 5
            })
        );
    }

    #[test]
    fn unknown_cookie_and_bad_magic_are_protocol_errors() {
        let mut p = ReplyParser::default();
        assert!(p.step(&reply(0, 9), &inflight(Op::Read, 1)).is_err());
        let mut idle = inflight(Op::Read, 1);
        idle[0].outstanding = false;
        assert!(p.step(&reply(0, 0), &idle).is_err());
        let mut bad = reply(0, 0);
        bad[0] = 0;
        assert!(p.step(&bad, &inflight(Op::Read, 1)).is_err());
    }
}
