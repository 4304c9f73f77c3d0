//! Transmission-phase requests: the header parser, and validation of a parsed header against
//! the agreed export into a [`Command`] that execution consumes.
//!
//! Parse and execute are separate: [`parse_request_header`] only frames bytes (and rejects what
//! would desynchronise the stream: bad magic, an over-long write payload); [`Session::classify`]
//! decides what the request means and which errno it earns. Neither does I/O.

use crate::negotiation::Agreement;
use crate::wire::{
    Errno, BLOCK_SIZE_MIN_BYTES, BLOCK_SIZE_PREFERRED_BYTES, CMD_BLOCK_STATUS, CMD_DISC,
    CMD_FLAG_FAST_ZERO, CMD_FLAG_FUA, CMD_FLAG_NO_HOLE, CMD_FLAG_REQ_ONE, CMD_FLUSH, CMD_READ,
    CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES, PAYLOAD_MAX_BYTES, REQUEST_HEADER_LEN_BYTES,
    REQUEST_MAGIC,
};
use crate::{Cursor, Parse};

/// A request header exactly as sent. A WRITE is followed by `length_bytes` of payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestHeader {
    pub flags: u16,
    pub command: u16,
    pub handle: u64,
    pub offset_bytes: u64,
    pub length_bytes: u32,
}

/// A request that breaks framing: the connection cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RequestError {
    #[error("request magic {magic:#x} is wrong")]
    BadMagic { magic: u32 },
    #[error("write payload of {length_bytes} bytes is over the {max} byte limit")]
    PayloadTooLarge { length_bytes: u32, max: u32 },
}

/// What a valid request asks for. Offsets and lengths are checked against the export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    Read {
        offset_bytes: u64,
        length_bytes: u32,
    },
    Write {
        offset_bytes: u64,
        length_bytes: u32,
        fua: bool,
    },
    Flush,
    Trim {
        offset_bytes: u64,
        length_bytes: u32,
        fua: bool,
    },
    WriteZeroes {
        offset_bytes: u64,
        length_bytes: u32,
        may_trim: bool,
        fua: bool,
    },
    BlockStatus {
        offset_bytes: u64,
        length_bytes: u32,
        req_one: bool,
    },
    /// NBD_CMD_DISC: finish what is in flight, then close. Never replied to.
    Disconnect,
}

/// What transmission needs from the agreement to validate requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Session {
    pub size_bytes: u64,
    /// Offsets and lengths of data commands must be multiples of this (a power of two).
    pub block_size_min_bytes: u32,
    pub read_only: bool,
    pub structured_replies: bool,
    pub base_allocation: bool,
}

impl RequestHeader {
    /// Bytes of payload that follow this header on the wire.
    pub fn payload_len_bytes(&self) -> u32 {
        if self.command == CMD_WRITE {
            self.length_bytes
        } else {
            0
        }
    }

    /// Encode (client side: tests, fuzz seeds, our own tools).
    pub fn encode(&self) -> [u8; REQUEST_HEADER_LEN_BYTES] {
        let mut out = [0u8; REQUEST_HEADER_LEN_BYTES];
        out[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        out[4..6].copy_from_slice(&self.flags.to_be_bytes());
        out[6..8].copy_from_slice(&self.command.to_be_bytes());
        out[8..16].copy_from_slice(&self.handle.to_be_bytes());
        out[16..24].copy_from_slice(&self.offset_bytes.to_be_bytes());
        out[24..28].copy_from_slice(&self.length_bytes.to_be_bytes());
        out
    }
}

/// Frame one request header from the front of `input`. The payload is not included in the
/// consumed count; the caller reads [`RequestHeader::payload_len_bytes`] more bytes.
pub fn parse_request_header(input: &[u8]) -> Parse<RequestHeader, RequestError> {
    let mut c = Cursor::new(input);
    let Some(magic) = c.u32() else {
        return Parse::Incomplete;
    };
    if magic != REQUEST_MAGIC {
        return Parse::Invalid(RequestError::BadMagic { magic });
    }
    let (Some(flags), Some(command), Some(handle), Some(offset_bytes), Some(length_bytes)) =
        (c.u16(), c.u16(), c.u64(), c.u64(), c.u32())
    else {
        return Parse::Incomplete;
    };
    let header = RequestHeader {
        flags,
        command,
        handle,
        offset_bytes,
        length_bytes,
    };
    if header.payload_len_bytes() > PAYLOAD_MAX_BYTES {
        return Parse::Invalid(RequestError::PayloadTooLarge {
            length_bytes: header.payload_len_bytes(),
            max: PAYLOAD_MAX_BYTES,
        });
    }
    Parse::Complete(header, REQUEST_HEADER_LEN_BYTES)
}

impl Session {
    pub fn new(agreement: &Agreement) -> Self {
        Session {
            size_bytes: agreement.export.size_bytes,
            block_size_min_bytes: agreement.export.block_size_min(),
            read_only: agreement.export.read_only,
            structured_replies: agreement.structured_replies,
            base_allocation: agreement.base_allocation,
        }
    }

    /// Decide what a framed request means, or which errno it gets. The connection stays
    /// usable after any `Err` here.
    pub fn classify(&self, h: &RequestHeader) -> Result<Command, Errno> {
        let fua = h.flags & CMD_FLAG_FUA != 0;
        match h.command {
            CMD_READ => {
                self.check_range(h)?;
                if h.length_bytes > PAYLOAD_MAX_BYTES {
                    return Err(Errno::Invalid);
                }
                Ok(Command::Read {
                    offset_bytes: h.offset_bytes,
                    length_bytes: h.length_bytes,
                })
            }
            CMD_WRITE => {
                self.check_range(h)?;
                self.check_writable()?;
                Ok(Command::Write {
                    offset_bytes: h.offset_bytes,
                    length_bytes: h.length_bytes,
                    fua,
                })
            }
            CMD_FLUSH => Ok(Command::Flush),
            CMD_TRIM => {
                self.check_range(h)?;
                self.check_writable()?;
                Ok(Command::Trim {
                    offset_bytes: h.offset_bytes,
                    length_bytes: h.length_bytes,
                    fua,
                })
            }
            CMD_WRITE_ZEROES => {
                if h.flags & CMD_FLAG_FAST_ZERO != 0 {
                    // Not advertised (no NBD_FLAG_SEND_FAST_ZERO): we cannot promise speed.
                    return Err(Errno::NotSupported);
                }
                self.check_range(h)?;
                self.check_writable()?;
                Ok(Command::WriteZeroes {
                    offset_bytes: h.offset_bytes,
                    length_bytes: h.length_bytes,
                    may_trim: h.flags & CMD_FLAG_NO_HOLE == 0,
                    fua,
                })
            }
            CMD_BLOCK_STATUS => {
                if !self.structured_replies || !self.base_allocation {
                    return Err(Errno::Invalid);
                }
                self.check_range(h)?;
                Ok(Command::BlockStatus {
                    offset_bytes: h.offset_bytes,
                    length_bytes: h.length_bytes,
                    req_one: h.flags & CMD_FLAG_REQ_ONE != 0,
                })
            }
            CMD_DISC => Ok(Command::Disconnect),
            // NBD_CMD_CACHE and anything newer: not advertised.
            _ => Err(Errno::Invalid),
        }
    }

    /// Non-empty, aligned to the export's minimum block size and inside the export.
    fn check_range(&self, h: &RequestHeader) -> Result<(), Errno> {
        // A power of two (`ExportSummary::block_size_min`), so a mask tests alignment; a
        // hand-built session with anything else is treated as the strictest we serve.
        let block = if self.block_size_min_bytes.is_power_of_two() {
            self.block_size_min_bytes.max(BLOCK_SIZE_MIN_BYTES)
        } else {
            BLOCK_SIZE_PREFERRED_BYTES
        };
        let mask = u64::from(block) - 1;
        let length = u64::from(h.length_bytes);
        if length == 0 || (h.offset_bytes | length) & mask != 0 {
            return Err(Errno::Invalid);
        }
        match h.offset_bytes.checked_add(length) {
            Some(end) if end <= self.size_bytes => Ok(()),
            _ => Err(Errno::Invalid),
        }
    }

    fn check_writable(&self) -> Result<(), Errno> {
        if self.read_only {
            Err(Errno::NotPermitted)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests;
