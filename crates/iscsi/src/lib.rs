//! iSCSI (RFC 7143), target side, sans-IO.
//!
//! This crate owns the bytes of iSCSI: framing PDUs out of a byte stream with their digests
//! ([`pdu`]), what each initiator PDU says ([`request`]), the target PDUs ([`response`]), the
//! `key=value` text of login and discovery ([`text`]), operational negotiation
//! ([`negotiate`]), the login phase with CHAP ([`login`], [`chap`]) and the session's sequence
//! numbers ([`session`]). For tests and weft's own benchmark initiator (`weft bench
//! iscsi://...`) it also speaks the other side: [`initiator`] encodes initiator PDUs,
//! [`target_pdu`] decodes target PDUs and [`initiator_login`] logs in. It never touches a
//! socket, a clock, a thread or a random source: callers feed bytes and get bytes to send.
//! SCSI itself is `weft-scsi`'s; the tokio glue is `weft-server`'s `iscsi_listener`.
//!
//! Invariants kept here: nothing an initiator sends can make these functions panic or
//! allocate more than the limits in [`wire`]; every length field is checked before it is used.

pub mod chap;
pub mod fuzzing;
pub mod initiator;
pub mod initiator_login;
pub mod login;
pub mod negotiate;
pub mod pdu;
pub mod request;
pub mod response;
pub mod session;
pub mod target_pdu;
pub mod text;
pub mod wire;

pub use login::{Access, ChapCredentials, LoggedIn, Login, LoginProgress};
pub use negotiate::{SessionParams, TargetLimits};
pub use pdu::{
    encode_header, encode_pdu, encode_trailer, parse_pdu, parse_pdu_ref, Digests, FrameError, Pdu,
    PduRef,
};
pub use request::{decode, Request, RequestError};
pub use response::Numbers;

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
