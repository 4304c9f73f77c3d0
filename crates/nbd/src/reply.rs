//! Reply encoders for the transmission phase, plus a client-side reply-header parser used by
//! tests and tools.
//!
//! Encoders write only headers and small payloads into a caller-owned buffer; bulk read data
//! is written by the caller straight after the header, so payloads are never copied here.

use crate::wire::{
    Errno, REPLY_FLAG_DONE, REPLY_TYPE_BLOCK_STATUS, REPLY_TYPE_ERROR, REPLY_TYPE_OFFSET_DATA,
    SIMPLE_REPLY_HEADER_LEN_BYTES, SIMPLE_REPLY_MAGIC, STRUCTURED_REPLY_HEADER_LEN_BYTES,
    STRUCTURED_REPLY_MAGIC,
};
use crate::{Cursor, Parse};

/// One block-status descriptor of `base:allocation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extent {
    pub length_bytes: u32,
    /// `STATE_HOLE` / `STATE_ZERO` bits.
    pub flags: u32,
}

/// What to answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyHead<'a> {
    /// Success without data.
    Done,
    /// Failure with this errno.
    Error(Errno),
    /// Success of a read: the caller sends `length_bytes` of data right after the header.
    ReadData {
        offset_bytes: u64,
        length_bytes: u32,
    },
    /// Success of a block-status request (structured replies only).
    BlockStatus {
        context_id: u32,
        extents: &'a [Extent],
    },
}

/// Append the reply for `handle` to `out`. With structured replies, reads get one
/// OFFSET_DATA chunk and errors an ERROR chunk, both flagged DONE; other successes get a simple
/// reply, which the spec allows for replies without payload.
pub fn encode_reply(handle: u64, head: &ReplyHead<'_>, structured: bool, out: &mut Vec<u8>) {
    match (*head, structured) {
        (ReplyHead::Done, _) => put_simple(out, handle, 0),
        (ReplyHead::Error(errno), false) => put_simple(out, handle, errno.code()),
        (ReplyHead::ReadData { .. }, false) => put_simple(out, handle, 0),
        (ReplyHead::Error(errno), true) => {
            put_chunk_header(out, REPLY_TYPE_ERROR, handle, 4 + 2);
            out.extend_from_slice(&errno.code().to_be_bytes());
            out.extend_from_slice(&0u16.to_be_bytes());
        }
        (
            ReplyHead::ReadData {
                offset_bytes,
                length_bytes,
            },
            true,
        ) => {
            put_chunk_header(
                out,
                REPLY_TYPE_OFFSET_DATA,
                handle,
                8 + u64::from(length_bytes),
            );
            out.extend_from_slice(&offset_bytes.to_be_bytes());
        }
        (
            ReplyHead::BlockStatus {
                context_id,
                extents,
            },
            structured,
        ) => {
            assert!(
                structured,
                "block status is only classified with structured replies"
            );
            let len = 4 + 8 * u64::try_from(extents.len()).expect("extent count fits u64");
            put_chunk_header(out, REPLY_TYPE_BLOCK_STATUS, handle, len);
            out.extend_from_slice(&context_id.to_be_bytes());
            for e in extents {
                out.extend_from_slice(&e.length_bytes.to_be_bytes());
                out.extend_from_slice(&e.flags.to_be_bytes());
            }
        }
    }
}

fn put_simple(out: &mut Vec<u8>, handle: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
}

fn put_chunk_header(out: &mut Vec<u8>, reply_type: u16, handle: u64, payload_len_bytes: u64) {
    // Payloads are bounded by PAYLOAD_MAX_BYTES + 8 or by BLOCK_STATUS_EXTENTS_MAX * 8 + 4.
    let len = u32::try_from(payload_len_bytes).expect("chunk payload fits u32");
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&REPLY_FLAG_DONE.to_be_bytes());
    out.extend_from_slice(&reply_type.to_be_bytes());
    out.extend_from_slice(&handle.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}

/// A reply header as a client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyHeader {
    Simple {
        error: u32,
        handle: u64,
    },
    /// A structured chunk; `length_bytes` of chunk payload follow.
    Chunk {
        flags: u16,
        reply_type: u16,
        handle: u64,
        length_bytes: u32,
    },
}

/// Client side: frame one reply header. A simple reply to a successful read is followed by
/// data whose length only the client knows.
pub fn parse_reply_header(input: &[u8]) -> Parse<ReplyHeader, u32> {
    let mut c = Cursor::new(input);
    let Some(magic) = c.u32() else {
        return Parse::Incomplete;
    };
    match magic {
        SIMPLE_REPLY_MAGIC => match (c.u32(), c.u64()) {
            (Some(error), Some(handle)) => Parse::Complete(
                ReplyHeader::Simple { error, handle },
                SIMPLE_REPLY_HEADER_LEN_BYTES,
            ),
            _ => Parse::Incomplete,
        },
        STRUCTURED_REPLY_MAGIC => match (c.u16(), c.u16(), c.u64(), c.u32()) {
            (Some(flags), Some(reply_type), Some(handle), Some(length_bytes)) => Parse::Complete(
                ReplyHeader::Chunk {
                    flags,
                    reply_type,
                    handle,
                    length_bytes,
                },
                STRUCTURED_REPLY_HEADER_LEN_BYTES,
            ),
            _ => Parse::Incomplete,
        },
        other => Parse::Invalid(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::STATE_HOLE;

    #[test]
    fn simple_error_reply_carries_errno_and_handle() {
        let mut out = Vec::new();
        encode_reply(7, &ReplyHead::Error(Errno::Invalid), false, &mut out);
        assert_eq!(
            parse_reply_header(&out),
            Parse::Complete(
                ReplyHeader::Simple {
                    error: 22,
                    handle: 7
                },
                16
            )
        );
    }

    #[test]
    fn structured_read_reply_is_one_done_chunk_with_offset() {
        let mut out = Vec::new();
        encode_reply(
            9,
            &ReplyHead::ReadData {
                offset_bytes: 4096,
                length_bytes: 512,
            },
            true,
            &mut out,
        );
        let Parse::Complete(h, n) = parse_reply_header(&out) else {
            panic!("complete")
        };
        assert_eq!(
            h,
            ReplyHeader::Chunk {
                flags: REPLY_FLAG_DONE,
                reply_type: REPLY_TYPE_OFFSET_DATA,
                handle: 9,
                length_bytes: 520
            }
        );
        assert_eq!(&out[n..], &4096u64.to_be_bytes());
    }

    #[test]
    fn structured_error_chunk_has_errno_and_empty_message() {
        let mut out = Vec::new();
        encode_reply(1, &ReplyHead::Error(Errno::NoSpace), true, &mut out);
        assert_eq!(out.len(), 20 + 6);
        assert_eq!(&out[20..24], &28u32.to_be_bytes());
        assert_eq!(&out[24..26], &[0, 0]);
    }

    #[test]
    fn block_status_chunk_lists_descriptors() {
        let extents = [Extent {
            length_bytes: 8192,
            flags: STATE_HOLE,
        }];
        let mut out = Vec::new();
        encode_reply(
            3,
            &ReplyHead::BlockStatus {
                context_id: 1,
                extents: &extents,
            },
            true,
            &mut out,
        );
        assert_eq!(out.len(), 20 + 4 + 8);
        assert_eq!(&out[24..28], &8192u32.to_be_bytes());
        assert_eq!(&out[28..32], &STATE_HOLE.to_be_bytes());
    }

    #[test]
    fn garbage_reply_magic_is_invalid() {
        assert_eq!(
            parse_reply_header(&[1, 2, 3, 4, 5]),
            Parse::Invalid(0x0102_0304)
        );
        assert_eq!(
            parse_reply_header(&SIMPLE_REPLY_MAGIC.to_be_bytes()),
            Parse::Incomplete
        );
    }
}
