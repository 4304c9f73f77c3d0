//! One worker's iSCSI session: the [`IoQueue`] that carries a queue's whole depth on one
//! connection. It moves bytes between the socket and the sans-IO [`Pipeline`]: commands are
//! encoded into one send buffer and sent together, PDUs are cut from one receive buffer
//! without copying, and read data is copied once, into its slot's buffer.
//!
//! As for NBD: sends are non-blocking and keep receiving while the socket is full, so a target
//! blocked sending us read data cannot deadlock with us blocked sending it write data. No
//! allocation per I/O once the buffers have grown to a batch.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use weft_iscsi::wire::{AHS_MAX_BYTES, BHS_BYTES, DIGEST_BYTES};
use weft_iscsi::{parse_pdu_ref, Digests, Parse};

use super::connection::{Session, RECV_DATA_SEGMENT_MAX_BYTES};
use super::pipeline::{Direction, Pipeline, PipelineError, Received};
use crate::datagen::DataGen;
use crate::sys;
use crate::target::{IoQueue, IoRequest, Op, ScsiFailure, TargetError, ISCSI_TARGET};

/// The largest PDU the target may send us: a BHS, the largest AHS, digests (never
/// negotiated, counted anyway) and our MaxRecvDataSegmentLength.
const FRAME_MAX_BYTES: usize =
    BHS_BYTES + AHS_MAX_BYTES + 2 * DIGEST_BYTES + RECV_DATA_SEGMENT_MAX_BYTES as usize;
/// Receive buffer: room for several whole PDUs, so many small responses arrive in one recv.
const RECV_BUF_BYTES: usize = 1 << 20;
/// Send buffer to start with: a batch of small commands, or a few writes' immediate data; it
/// grows to the largest batch and stays.
const SEND_BUF_BYTES_INITIAL: usize = 256 << 10;
/// How long a logout may take before we just close the connection.
const LOGOUT_TIMEOUT: Duration = Duration::from_secs(2);
/// The slot setup commands (INQUIRY, READ CAPACITY, ...) use.
const SETUP_TAG: u32 = 0;
const _: () = assert!(RECV_BUF_BYTES >= 2 * FRAME_MAX_BYTES);

/// What the queue knows about each outstanding tag, for error messages.
#[derive(Debug, Clone, Copy)]
struct Inflight {
    op: Op,
    offset_bytes: u64,
    len_bytes: u32,
}

/// Why a wait ended without completions.
#[derive(Debug)]
pub(super) enum WaitError {
    /// The transport or the protocol failed; the session is done.
    Target(TargetError),
    /// One command failed at the target; the session itself is fine.
    Command { tag: u32, failure: ScsiFailure },
}

impl From<TargetError> for WaitError {
    fn from(e: TargetError) -> Self {
        WaitError::Target(e)
    }
}

/// One session carrying one queue.
pub(super) struct IscsiQueue {
    stream: TcpStream,
    addr: String,
    pipeline: Pipeline,
    block_bytes: u32,
    inflight: Vec<Inflight>,
    /// Encoded PDUs not yet sent: `send_buf[send_pos..]`.
    send_buf: Vec<u8>,
    send_pos: usize,
    recv_buf: Vec<u8>,
    recv_pos: usize,
    recv_len: usize,
    data: DataGen,
}

impl std::fmt::Debug for IscsiQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IscsiQueue")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl IscsiQueue {
    /// A queue of `depth` slots of up to `io_bytes_max` each over a logged-in session.
    /// `block_bytes` is the LUN's logical block size (0 before it is known: setup only).
    pub(super) fn new(
        session: Session,
        addr: String,
        lun_field: u64,
        block_bytes: u32,
        depth: u32,
        io_bytes_max: u32,
        data: DataGen,
    ) -> IscsiQueue {
        let mut recv_buf = vec![0; RECV_BUF_BYTES];
        let leftover = session.leftover.len().min(RECV_BUF_BYTES);
        recv_buf[..leftover].copy_from_slice(&session.leftover[..leftover]);
        let idle = Inflight {
            op: Op::Read,
            offset_bytes: 0,
            len_bytes: 0,
        };
        IscsiQueue {
            stream: session.stream,
            addr,
            pipeline: Pipeline::new(&session.login, lun_field, depth, io_bytes_max),
            block_bytes,
            inflight: vec![idle; depth as usize],
            send_buf: Vec::with_capacity(SEND_BUF_BYTES_INITIAL),
            send_pos: 0,
            recv_buf,
            recv_pos: 0,
            recv_len: leftover,
            data,
        }
    }

    /// Commands the target let this session have outstanding when it last said.
    pub(super) fn window(&self) -> u32 {
        self.pipeline.window()
    }

    /// Runs one setup command reading up to `data_in_len` bytes, alone on the session; its
    /// data-in, or how the target failed it.
    pub(super) fn execute(
        &mut self,
        cdb: &[u8],
        data_in_len: u32,
    ) -> Result<Result<Vec<u8>, ScsiFailure>, TargetError> {
        let mut padded = [0u8; 16];
        padded[..cdb.len()].copy_from_slice(cdb);
        self.pipeline
            .submit(SETUP_TAG, padded, Direction::Read, data_in_len);
        let mut done = Vec::new();
        loop {
            match self.wait_some(&mut done) {
                Ok(()) => {}
                Err(WaitError::Target(e)) => return Err(e),
                Err(WaitError::Command { failure, .. }) => return Ok(Err(failure)),
            }
            if done.contains(&SETUP_TAG) {
                return Ok(Ok(self.pipeline.data_in(SETUP_TAG).to_vec()));
            }
        }
    }

    fn protocol(&self, reason: String) -> TargetError {
        TargetError::Protocol {
            peer: ISCSI_TARGET,
            addr: self.addr.clone(),
            reason,
        }
    }

    fn conn_err(&self, source: io::Error) -> TargetError {
        TargetError::Connection {
            peer: ISCSI_TARGET,
            addr: self.addr.clone(),
            source,
        }
    }

    /// Sends what can be sent and blocks until at least one command finishes.
    fn wait_some(&mut self, done: &mut Vec<u32>) -> Result<(), WaitError> {
        self.pump(done)?;
        while done.is_empty() {
            let free = self.recv_len..self.recv_buf.len();
            let n = (&self.stream)
                .read(&mut self.recv_buf[free])
                .map_err(|e| self.conn_err(e))?;
            self.note_received(n)?;
            self.parse_buffered(done)?;
            self.pump(done)?;
        }
        Ok(())
    }

    /// Issues what the window allows and sends everything queued, until nothing is left.
    fn pump(&mut self, done: &mut Vec<u32>) -> Result<(), WaitError> {
        loop {
            self.pipeline.issue(&mut self.send_buf);
            if self.send_pos == self.send_buf.len() {
                self.send_buf.clear();
                self.send_pos = 0;
                return Ok(());
            }
            self.flush(done)?;
        }
    }

    /// Sends `send_buf[send_pos..]`, receiving while the socket is full (what arrives may
    /// append more to send: Data-Out for an R2T).
    fn flush(&mut self, done: &mut Vec<u32>) -> Result<(), WaitError> {
        let fd = self.stream.as_raw_fd();
        while self.send_pos < self.send_buf.len() {
            let n = sys::send_nowait(fd, &self.send_buf[self.send_pos..])
                .map_err(|e| self.conn_err(e))?;
            self.send_pos += n;
            if self.send_pos == self.send_buf.len() {
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
        Ok(())
    }

    fn note_received(&mut self, n: usize) -> Result<(), TargetError> {
        if n == 0 {
            return Err(self.conn_err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "target closed the connection",
            )));
        }
        self.recv_len += n;
        Ok(())
    }

    /// Hands every whole PDU buffered to the pipeline.
    fn parse_buffered(&mut self, done: &mut Vec<u32>) -> Result<(), WaitError> {
        loop {
            let buf = &self.recv_buf[self.recv_pos..self.recv_len];
            let (result, used) = match parse_pdu_ref(
                buf,
                Digests::default(),
                RECV_DATA_SEGMENT_MAX_BYTES as usize,
            ) {
                Parse::Complete(pdu, used) => {
                    (self.pipeline.receive(&pdu, &mut self.send_buf, done), used)
                }
                Parse::Incomplete => break,
                Parse::Invalid(e) => return Err(self.protocol(format!("framing: {e}")).into()),
            };
            self.recv_pos += used;
            match result {
                Ok(Received::Progress) => {}
                Ok(Received::LoggedOut) => {
                    return Err(self.protocol("a Logout Response mid-run".into()).into())
                }
                Err(PipelineError::Protocol(reason)) => return Err(self.protocol(reason).into()),
                Err(PipelineError::Command { tag, failure }) => {
                    return Err(WaitError::Command { tag, failure })
                }
            }
        }
        // Keep a partial PDU at the front so the next receive has room for all of it.
        if self.recv_pos == self.recv_len {
            self.recv_pos = 0;
            self.recv_len = 0;
        } else if self.recv_buf.len() - self.recv_len < FRAME_MAX_BYTES {
            self.recv_buf.copy_within(self.recv_pos..self.recv_len, 0);
            self.recv_len -= self.recv_pos;
            self.recv_pos = 0;
        }
        Ok(())
    }

    /// Best effort: log out (bounded by [`LOGOUT_TIMEOUT`]), then close.
    fn logout(&mut self) {
        let deadline = Instant::now() + LOGOUT_TIMEOUT;
        let _ = self.stream.set_read_timeout(Some(LOGOUT_TIMEOUT));
        let _ = self.stream.set_write_timeout(Some(LOGOUT_TIMEOUT));
        let mut out = Vec::new();
        self.pipeline.logout(&mut out);
        if self.stream.write_all(&out).is_ok() {
            let mut done = Vec::new();
            'read: while Instant::now() < deadline {
                loop {
                    let buf = &self.recv_buf[self.recv_pos..self.recv_len];
                    let Parse::Complete(pdu, used) = parse_pdu_ref(
                        buf,
                        Digests::default(),
                        RECV_DATA_SEGMENT_MAX_BYTES as usize,
                    ) else {
                        break;
                    };
                    // Responses to commands still outstanding are taken and forgotten.
                    let result = self.pipeline.receive(&pdu, &mut out, &mut done);
                    self.recv_pos += used;
                    if !matches!(result, Ok(Received::Progress)) {
                        break 'read;
                    }
                }
                if self.recv_pos == self.recv_len {
                    self.recv_pos = 0;
                    self.recv_len = 0;
                } else if self.recv_buf.len() - self.recv_len < FRAME_MAX_BYTES {
                    self.recv_buf.copy_within(self.recv_pos..self.recv_len, 0);
                    self.recv_len -= self.recv_pos;
                    self.recv_pos = 0;
                }
                let free = self.recv_len..self.recv_buf.len();
                match (&self.stream).read(&mut self.recv_buf[free]) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.recv_len += n,
                }
            }
        }
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

impl IoQueue for IscsiQueue {
    fn submit(&mut self, req: IoRequest) {
        assert!(
            self.block_bytes > 0
                && req.offset_bytes.is_multiple_of(u64::from(self.block_bytes))
                && req.len_bytes.is_multiple_of(self.block_bytes),
            "I/O not aligned to the LUN's {}-byte blocks (the plan aligns every I/O)",
            self.block_bytes
        );
        self.inflight[req.tag as usize] = Inflight {
            op: req.op,
            offset_bytes: req.offset_bytes,
            len_bytes: req.len_bytes,
        };
        let lba = req.offset_bytes / u64::from(self.block_bytes);
        let blocks = req.len_bytes / self.block_bytes;
        let mut cdb = [0u8; 16];
        cdb[0] = match req.op {
            Op::Read => weft_scsi::opcode::READ_16,
            Op::Write => weft_scsi::opcode::WRITE_16,
        };
        cdb[2..10].copy_from_slice(&lba.to_be_bytes());
        cdb[10..14].copy_from_slice(&blocks.to_be_bytes());
        let direction = match req.op {
            Op::Read => Direction::Read,
            Op::Write => {
                self.data
                    .fill(self.pipeline.buffer_mut(req.tag, req.len_bytes));
                Direction::Write
            }
        };
        self.pipeline.submit(req.tag, cdb, direction, req.len_bytes);
    }

    fn wait(&mut self, done: &mut Vec<u32>) -> Result<(), TargetError> {
        let first = done.len();
        match self.wait_some(done) {
            Ok(()) => {}
            Err(WaitError::Target(e)) => return Err(e),
            Err(WaitError::Command { tag, failure }) => {
                let slot = self.inflight[tag as usize];
                return Err(TargetError::ScsiFailed {
                    op: slot.op.name(),
                    offset_bytes: slot.offset_bytes,
                    len_bytes: slot.len_bytes,
                    failure,
                });
            }
        }
        // A read is done only when all of its data came.
        for &tag in &done[first..] {
            let slot = self.inflight[tag as usize];
            let got = self.pipeline.data_in(tag).len();
            if slot.op == Op::Read && got != slot.len_bytes as usize {
                return Err(self.protocol(format!(
                    "read of {} bytes at offset {} ended after {got} bytes of Data-In",
                    slot.len_bytes, slot.offset_bytes
                )));
            }
        }
        Ok(())
    }
}

impl Drop for IscsiQueue {
    fn drop(&mut self) {
        self.logout();
    }
}
