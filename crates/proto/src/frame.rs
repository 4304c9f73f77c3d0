//! Framing: the fixed 28-byte header, the payload it announces, and three ways to decode a
//! byte stream into [`Frame`]s. Sans-IO: functions take bytes and return frames or errors; the
//! caller owns the socket.
//!
//! Header layout (all little-endian):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 4 | magic `WFTP` |
//! | 4 | 2 | protocol version |
//! | 6 | 2 | message kind |
//! | 8 | 8 | request id |
//! | 16 | 4 | payload length in bytes |
//! | 20 | 4 | payload CRC32C |
//! | 24 | 4 | header CRC32C over bytes 0..24 |
//!
//! Decoding checks, in order: magic, header CRC (so every later error can name a request id it
//! trusts), version, kind, payload length against [`PAYLOAD_MAX_BYTES`] (before any payload memory
//! is allocated), then, once the payload is all there, its CRC.
//!
//! Decoders:
//! - [`decode_frame`]: one frame from the front of a byte slice (complete / incomplete / invalid).
//!   Copies the payload once, out of the caller's buffer.
//! - [`FrameDecoder`]: push bytes as they arrive; it keeps only the partial frame.
//! - [`FrameHeader::decode`] + [`FrameHeader::into_frame`]: read exactly
//!   [`FRAME_HEADER_LEN_BYTES`], then read the payload straight into its own `Vec` (no copy).

use crate::error::ProtoError;
use crate::kind::MessageKind;
use crate::wire::{
    FRAME_HEADER_LEN_BYTES, FRAME_MAGIC, HEADER_CRC_OFFSET_BYTES, PAYLOAD_MAX_BYTES,
    PROTOCOL_VERSION,
};

/// One decoded frame: its kind, its request id and its payload, CRC already verified. Turn it
/// into a message with [`crate::Request::decode`] or [`crate::Response::decode`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub kind: MessageKind,
    /// Chosen by the c.node, echoed by the d.node in the response.
    pub request_id: u64,
    pub payload: Vec<u8>,
}

/// A verified frame header. Version and kind are checked; the payload length is within
/// [`PAYLOAD_MAX_BYTES`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub kind: MessageKind,
    pub request_id: u64,
    pub payload_len_bytes: u32,
    pub payload_crc32c: u32,
}

/// Accumulates bytes from a stream and yields one frame at a time.
///
/// It holds at most one partial frame: the header bytes so far, then a payload buffer sized
/// exactly to the announced length (allocated only after the header is verified and the length
/// is within [`PAYLOAD_MAX_BYTES`]). After an error it returns that error forever: close the
/// connection.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    state: DecoderState,
}

/// What a [`FrameDecoder`] holds between calls.
#[derive(Debug)]
enum DecoderState {
    /// Reading a header: `filled` bytes of it are in `bytes`. `filled == 0` is a frame boundary.
    Header {
        bytes: [u8; FRAME_HEADER_LEN_BYTES],
        filled: usize,
    },
    /// Header verified; `payload.len()` of `header.payload_len()` bytes are in.
    Payload {
        header: FrameHeader,
        payload: Vec<u8>,
    },
    /// The stream broke the protocol; nothing more is decoded.
    Failed(ProtoError),
}

impl Default for DecoderState {
    fn default() -> Self {
        DecoderState::Header {
            bytes: [0; FRAME_HEADER_LEN_BYTES],
            filled: 0,
        }
    }
}

/// Decodes one frame from the front of `buf`.
///
/// `Ok(Some((frame, consumed)))`: a whole frame, `consumed` bytes of `buf` (header + payload);
/// call again on `&buf[consumed..]` for the next pipelined frame. `Ok(None)`: `buf` is a valid
/// prefix, read more. `Err`: the stream is invalid; close the connection. An oversize length is
/// refused as soon as the header is in, without waiting for or allocating the payload.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, ProtoError> {
    let Some(head) = buf.first_chunk::<FRAME_HEADER_LEN_BYTES>() else {
        return Ok(None);
    };
    let header = FrameHeader::decode(head)?;
    let end = FRAME_HEADER_LEN_BYTES + header.payload_len();
    let Some(payload) = buf.get(FRAME_HEADER_LEN_BYTES..end) else {
        return Ok(None);
    };
    header.check_payload(payload)?;
    Ok(Some((
        Frame {
            kind: header.kind,
            request_id: header.request_id,
            payload: payload.to_vec(),
        },
        end,
    )))
}

/// Appends one frame (header then `payload`) to `out`. Fails, leaving `out` untouched, only if
/// `payload` is over [`PAYLOAD_MAX_BYTES`].
pub fn encode_frame(
    kind: MessageKind,
    request_id: u64,
    payload: &[u8],
    out: &mut Vec<u8>,
) -> Result<(), ProtoError> {
    let header = FrameHeader::for_payload(kind, request_id, &[payload])?;
    out.reserve(FRAME_HEADER_LEN_BYTES + payload.len());
    out.extend_from_slice(&header.encode());
    out.extend_from_slice(payload);
    Ok(())
}

impl FrameHeader {
    /// Verifies and parses a header: magic, header CRC, version, kind, payload length limit.
    pub fn decode(bytes: &[u8; FRAME_HEADER_LEN_BYTES]) -> Result<Self, ProtoError> {
        let magic = le_u32(bytes, 0);
        if magic != FRAME_MAGIC {
            return Err(ProtoError::BadMagic { magic });
        }
        let computed = crc32c::crc32c(&bytes[..HEADER_CRC_OFFSET_BYTES]);
        let carried = le_u32(bytes, HEADER_CRC_OFFSET_BYTES);
        if computed != carried {
            return Err(ProtoError::HeaderCrcMismatch { carried, computed });
        }
        let version = le_u16(bytes, 4);
        let kind = le_u16(bytes, 6);
        let request_id = le_u64(bytes, 8);
        let payload_len_bytes = le_u32(bytes, 16);
        if version != PROTOCOL_VERSION {
            return Err(ProtoError::VersionMismatch {
                version,
                supported: PROTOCOL_VERSION,
                request_id,
            });
        }
        let Some(kind) = MessageKind::from_code(kind) else {
            return Err(ProtoError::UnknownKind { kind, request_id });
        };
        if u64::from(payload_len_bytes) > PAYLOAD_MAX_BYTES as u64 {
            return Err(ProtoError::PayloadTooLong {
                len_bytes: u64::from(payload_len_bytes),
                max_bytes: PAYLOAD_MAX_BYTES as u64,
                request_id,
            });
        }
        Ok(FrameHeader {
            kind,
            request_id,
            payload_len_bytes,
            payload_crc32c: le_u32(bytes, 20),
        })
    }

    /// The header for a payload made of `parts` concatenated (for vectored writes that keep bulk
    /// data in its own buffer). Fails if their total is over [`PAYLOAD_MAX_BYTES`].
    pub fn for_payload(
        kind: MessageKind,
        request_id: u64,
        parts: &[&[u8]],
    ) -> Result<Self, ProtoError> {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        let too_long = || ProtoError::PayloadTooLong {
            len_bytes: u64::try_from(total).unwrap_or(u64::MAX),
            max_bytes: PAYLOAD_MAX_BYTES as u64,
            request_id,
        };
        if total > PAYLOAD_MAX_BYTES {
            return Err(too_long());
        }
        let payload_len_bytes = u32::try_from(total).map_err(|_| too_long())?;
        let payload_crc32c = parts
            .iter()
            .fold(0, |crc, part| crc32c::crc32c_append(crc, part));
        Ok(FrameHeader {
            kind,
            request_id,
            payload_len_bytes,
            payload_crc32c,
        })
    }

    /// The 28 header bytes, at [`PROTOCOL_VERSION`], header CRC filled in.
    pub fn encode(&self) -> [u8; FRAME_HEADER_LEN_BYTES] {
        let mut b = [0u8; FRAME_HEADER_LEN_BYTES];
        b[0..4].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        b[4..6].copy_from_slice(&PROTOCOL_VERSION.to_le_bytes());
        b[6..8].copy_from_slice(&self.kind.code().to_le_bytes());
        b[8..16].copy_from_slice(&self.request_id.to_le_bytes());
        b[16..20].copy_from_slice(&self.payload_len_bytes.to_le_bytes());
        b[20..24].copy_from_slice(&self.payload_crc32c.to_le_bytes());
        let crc = crc32c::crc32c(&b[..HEADER_CRC_OFFSET_BYTES]);
        b[HEADER_CRC_OFFSET_BYTES..].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// The announced payload length (at most [`PAYLOAD_MAX_BYTES`] once decoded).
    pub fn payload_len(&self) -> usize {
        // u32 -> usize is lossless on the 32- and 64-bit targets we build for.
        self.payload_len_bytes as usize
    }

    /// Joins the header with its payload, read separately: checks length and CRC.
    pub fn into_frame(self, payload: Vec<u8>) -> Result<Frame, ProtoError> {
        self.check_payload(&payload)?;
        Ok(Frame {
            kind: self.kind,
            request_id: self.request_id,
            payload,
        })
    }

    fn check_payload(&self, payload: &[u8]) -> Result<(), ProtoError> {
        if payload.len() != self.payload_len() {
            return Err(ProtoError::PayloadLenMismatch {
                expected_bytes: u64::from(self.payload_len_bytes),
                actual_bytes: u64::try_from(payload.len()).unwrap_or(u64::MAX),
                request_id: self.request_id,
            });
        }
        let computed = crc32c::crc32c(payload);
        if computed != self.payload_crc32c {
            return Err(ProtoError::PayloadCrcMismatch {
                carried: self.payload_crc32c,
                computed,
                request_id: self.request_id,
            });
        }
        Ok(())
    }
}

impl FrameDecoder {
    pub fn new() -> Self {
        FrameDecoder::default()
    }

    /// Takes bytes from the front of `input` until one frame is complete or `input` is used up.
    ///
    /// Returns how many bytes of `input` it took and the frame if one completed. It never takes
    /// bytes past the end of the frame it completes: call again with `&input[consumed..]` until
    /// it returns `None` (then `consumed == input.len()`). `Err`: the stream is invalid, close it.
    pub fn decode(&mut self, input: &[u8]) -> Result<(usize, Option<Frame>), ProtoError> {
        let mut used = 0;
        if let DecoderState::Header { bytes, filled } = &mut self.state {
            let take = (FRAME_HEADER_LEN_BYTES - *filled).min(input.len());
            bytes[*filled..*filled + take].copy_from_slice(&input[..take]);
            *filled += take;
            used = take;
            if *filled < FRAME_HEADER_LEN_BYTES {
                return Ok((used, None));
            }
            self.state = match FrameHeader::decode(bytes) {
                // The length is within PAYLOAD_MAX_BYTES here: the only allocation a peer causes.
                Ok(header) => DecoderState::Payload {
                    header,
                    payload: Vec::with_capacity(header.payload_len()),
                },
                Err(e) => DecoderState::Failed(e),
            };
        }
        match &mut self.state {
            DecoderState::Header { .. } => Ok((used, None)),
            DecoderState::Failed(e) => Err(e.clone()),
            DecoderState::Payload { header, payload } => {
                let rest = &input[used..];
                let take = (header.payload_len() - payload.len()).min(rest.len());
                payload.extend_from_slice(&rest[..take]);
                used += take;
                if payload.len() < header.payload_len() {
                    return Ok((used, None));
                }
                let header = *header;
                let payload = std::mem::take(payload);
                match header.into_frame(payload) {
                    Ok(frame) => {
                        self.state = DecoderState::default();
                        Ok((used, Some(frame)))
                    }
                    Err(e) => {
                        self.state = DecoderState::Failed(e.clone());
                        Err(e)
                    }
                }
            }
        }
    }

    /// True between frames: no partial frame is buffered, so an end of stream here is clean.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, DecoderState::Header { filled: 0, .. })
    }

    /// Bytes of the current partial frame held (header bytes plus payload bytes so far).
    pub fn buffered_bytes(&self) -> usize {
        match &self.state {
            DecoderState::Header { filled, .. } => *filled,
            DecoderState::Payload { payload, .. } => FRAME_HEADER_LEN_BYTES + payload.len(),
            DecoderState::Failed(_) => 0,
        }
    }
}

fn le_u16(b: &[u8; FRAME_HEADER_LEN_BYTES], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_u32(b: &[u8; FRAME_HEADER_LEN_BYTES], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn le_u64(b: &[u8; FRAME_HEADER_LEN_BYTES], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[cfg(test)]
mod tests;
