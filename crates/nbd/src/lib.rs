//! NBD protocol, server side, sans-IO.
//!
//! This crate owns the bytes of the NBD protocol: the fixed-newstyle handshake and option
//! haggling ([`negotiation`]), the transmission-phase request parser and its validation against
//! the agreed export ([`request`]), and the reply encoders ([`reply`]). It never touches a
//! socket, a clock or a thread: parsers take a byte slice and return [`Parse`], state machines
//! take client bytes and append the bytes to send to a caller-owned buffer. The tokio glue lives
//! in `weft-server`'s `nbd_listener`.
//!
//! Invariants kept here: nothing a client sends can make these functions panic or allocate more
//! than the named limits in [`wire`]; every length field is checked before it is used.

pub mod fuzzing;
pub mod negotiation;
pub mod reply;
pub mod request;
pub mod wire;

pub use negotiation::{Agreement, ExportSummary, Negotiation, NegotiationError, Step, TlsMode};
pub use reply::{encode_reply, Extent, ReplyHead};
pub use request::{parse_request_header, Command, RequestError, RequestHeader, Session};
pub use wire::Errno;

/// The result of parsing a message from the front of a byte slice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parse<T, E> {
    /// A whole message, and how many bytes of the input it used.
    Complete(T, usize),
    /// The input is a valid prefix; call again with more bytes.
    Incomplete,
    /// The input can never become a valid message.
    Invalid(E),
}

/// A big-endian reader over a complete payload. Every getter returns `None` past the end, so
/// payload decoders are written as `?` chains without index arithmetic.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    rest: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Cursor { rest: bytes }
    }

    pub(crate) fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_be_bytes(a))
    }

    pub(crate) fn remaining(&self) -> usize {
        self.rest.len()
    }
}
