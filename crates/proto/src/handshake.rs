//! The protocol version, the rule that keeps it honest, and the connection handshake. Sans-IO:
//! functions take the first request or response and say what to send or whether to go on.
//!
//! Handshake: the c.node's first frame is `Hello { protocol_version, cluster_id, client_name }`
//! ([`hello`]). The d.node answers `HelloOk` and serves the connection, or an `Error`
//! (`VersionMismatch`, `WrongCluster`, or `BadRequest` if the first frame is not `Hello`) and
//! closes ([`answer_hello`]). The client checks the answer with [`check_hello_ok`]. Requests
//! may be pipelined behind `Hello`; a refusing d.node does not answer them.
//!
//! Version rule: every frame header carries [`PROTOCOL_VERSION`] and a decoder refuses any other
//! ([`ProtoError::VersionMismatch`]). Any change to the message set, a message's fields or
//! encoding, an error code, the frame layout or a limit bumps the version. The frame header
//! layout itself never changes, so peers of different versions can always read each other's
//! headers: a d.node that gets a foreign-version frame answers (see [`refusal_for`]) with an
//! `Error { VersionMismatch }` in its own version and closes; the client's decoder reports that
//! frame as `VersionMismatch` naming the d.node's version. The fingerprint test fails when the
//! protocol changes without a bump.

use crate::error::ProtoError;
use crate::kind::{MessageKind, MESSAGE_KINDS};
use crate::message::{ErrorCode, Request, Response};
use crate::samples;
use crate::wire::{
    BULK_TRAILER_LEN_BYTES, CHUNK_MAX_BYTES, DISKS_MAX, ERROR_MESSAGE_MAX_BYTES, FAMILIES_MAX,
    FRAME_HEADER_LEN_BYTES, FRAME_MAGIC, LIST_LIMIT_MAX, NAME_MAX_BYTES, PATH_MAX_BYTES,
    PAYLOAD_MAX_BYTES, SCRUB_CORRUPT_MAX, SYNC_KEYS_MAX,
};

pub use crate::wire::PROTOCOL_VERSION;

/// `(version, fingerprint)` of every protocol version, oldest first. Append only: a recorded
/// entry is what peers of that version speak, never edit it. The last entry is
/// [`PROTOCOL_VERSION`] and [`protocol_fingerprint`] must equal its fingerprint.
pub const FINGERPRINTS: &[(u16, u64)] = &[(1, 0x25d5_9044_fa02_00e2), (2, 0xa0d5_89c7_2776_1997)];

/// A stable hash (64-bit FNV-1a) of everything that makes up the protocol: the frame magic and
/// header length, every limit, the (kind number, name) table, and the full frame bytes of every
/// sample message in [`samples`]. Computed, so it can be compared with [`FINGERPRINTS`].
pub fn protocol_fingerprint() -> u64 {
    let mut h = Fnv::new();
    h.item(&FRAME_MAGIC.to_le_bytes());
    for limit in [
        FRAME_HEADER_LEN_BYTES,
        PAYLOAD_MAX_BYTES,
        CHUNK_MAX_BYTES,
        NAME_MAX_BYTES,
        PATH_MAX_BYTES,
        ERROR_MESSAGE_MAX_BYTES,
        FAMILIES_MAX,
        DISKS_MAX,
        SCRUB_CORRUPT_MAX,
        BULK_TRAILER_LEN_BYTES,
        SYNC_KEYS_MAX,
    ] {
        h.item(&u64::try_from(limit).unwrap_or(u64::MAX).to_le_bytes());
    }
    h.item(&LIST_LIMIT_MAX.to_le_bytes());
    for (code, name) in MESSAGE_KINDS {
        h.item(&code.to_le_bytes());
        h.item(name.as_bytes());
    }
    let mut out = Vec::new();
    for (id, request) in (0u64..).zip(samples::requests()) {
        out.clear();
        request
            .encode(id, &mut out)
            .expect("samples are within limits");
        h.item(&out);
    }
    for (id, response) in (0u64..).zip(samples::responses()) {
        out.clear();
        response
            .encode(id, &mut out)
            .expect("samples are within limits");
        h.item(&out);
    }
    h.0
}

/// Why a client's handshake failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum HandshakeError {
    /// The d.node answered `Hello` with an error (it closes the connection).
    #[error("d.node refused the connection: {code:?}: {message}")]
    Refused { code: ErrorCode, message: String },
    /// `HelloOk` names another protocol version.
    #[error("d.node speaks protocol version {theirs}, we speak {ours}")]
    VersionMismatch { ours: u16, theirs: u16 },
    /// `HelloOk` names another cluster.
    #[error("d.node belongs to cluster {got:?}, we are in {expected:?}")]
    WrongCluster { expected: String, got: String },
    /// The first response is neither `HelloOk` nor `Error`.
    #[error("d.node answered Hello with {kind}")]
    UnexpectedResponse { kind: MessageKind },
}

/// What a d.node does with the first request of a connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HelloOutcome {
    /// Send this `HelloOk` and serve the connection.
    Accept(Response),
    /// Send this `Error` and close the connection.
    Refuse(Response),
}

/// The `Hello` a c.node sends first, at [`PROTOCOL_VERSION`].
pub fn hello(cluster_id: impl Into<String>, client_name: impl Into<String>) -> Request {
    Request::Hello {
        protocol_version: PROTOCOL_VERSION,
        cluster_id: cluster_id.into(),
        client_name: client_name.into(),
    }
}

/// The d.node's answer to the first request of a connection: `HelloOk` for a `Hello` of our
/// version and cluster, an `Error` to send before closing otherwise.
pub fn answer_hello(first: &Request, node_id: &str, cluster_id: &str) -> HelloOutcome {
    let Request::Hello {
        protocol_version,
        cluster_id: theirs,
        ..
    } = first
    else {
        return HelloOutcome::Refuse(Response::error(
            ErrorCode::BadRequest,
            format!("first request must be Hello, got {}", first.kind()),
        ));
    };
    if *protocol_version != PROTOCOL_VERSION {
        return HelloOutcome::Refuse(Response::error(
            ErrorCode::VersionMismatch,
            format!("d.node speaks protocol version {PROTOCOL_VERSION}, client {protocol_version}"),
        ));
    }
    if theirs != cluster_id {
        return HelloOutcome::Refuse(Response::error(
            ErrorCode::WrongCluster,
            format!("d.node is in cluster {cluster_id:?}, client in {theirs:?}"),
        ));
    }
    HelloOutcome::Accept(Response::HelloOk {
        protocol_version: PROTOCOL_VERSION,
        node_id: node_id.to_owned(),
        cluster_id: cluster_id.to_owned(),
    })
}

/// Checks the d.node's answer to our `Hello`; returns its node id.
pub fn check_hello_ok(response: &Response, cluster_id: &str) -> Result<String, HandshakeError> {
    match response {
        Response::HelloOk {
            protocol_version,
            node_id,
            cluster_id: theirs,
        } => {
            if *protocol_version != PROTOCOL_VERSION {
                Err(HandshakeError::VersionMismatch {
                    ours: PROTOCOL_VERSION,
                    theirs: *protocol_version,
                })
            } else if theirs != cluster_id {
                Err(HandshakeError::WrongCluster {
                    expected: cluster_id.to_owned(),
                    got: theirs.clone(),
                })
            } else {
                Ok(node_id.clone())
            }
        }
        Response::Error { code, message } => Err(HandshakeError::Refused {
            code: *code,
            message: message.clone(),
        }),
        other => Err(HandshakeError::UnexpectedResponse { kind: other.kind() }),
    }
}

/// What a d.node may send, with which request id, before closing a connection whose bytes
/// failed to decode: `Error { VersionMismatch }` for a frame of another version, `Error {
/// BadRequest }` for any other error found after the header CRC checked out. `None` when the
/// header itself is broken (bad magic or header CRC): nothing in it can be trusted.
pub fn refusal_for(err: &ProtoError) -> Option<(u64, Response)> {
    let request_id = err.request_id()?;
    let code = match err {
        ProtoError::VersionMismatch { .. } => ErrorCode::VersionMismatch,
        _ => ErrorCode::BadRequest,
    };
    Some((request_id, Response::error(code, err.to_string())))
}

/// 64-bit FNV-1a with each item length-prefixed, so item boundaries are part of the hash.
struct Fnv(u64);

impl Fnv {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Self {
        Fnv(Self::OFFSET_BASIS)
    }

    fn item(&mut self, bytes: &[u8]) {
        let len = u64::try_from(bytes.len()).unwrap_or(u64::MAX);
        for b in len.to_le_bytes().iter().chain(bytes) {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(Self::PRIME);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::decode_frame;

    /// The guard of the version rule: changing any message, kind number, error code, frame
    /// layout or limit changes the fingerprint. Then bump PROTOCOL_VERSION, append
    /// `(new version, new fingerprint)` to FINGERPRINTS and update docs/design/protocol.md.
    #[test]
    fn message_set_changes_bump_the_protocol_version() {
        let computed = protocol_fingerprint();
        let &(version, recorded) = FINGERPRINTS.last().expect("at least one version");
        assert!(
            FINGERPRINTS.windows(2).all(|w| w[0].0 < w[1].0),
            "FINGERPRINTS versions strictly increase"
        );
        assert_eq!(
            version, PROTOCOL_VERSION,
            "the last FINGERPRINTS entry is PROTOCOL_VERSION"
        );
        assert_eq!(
            recorded,
            computed,
            "the protocol changed: bump PROTOCOL_VERSION to {} and append ({}, {computed:#018x}) \
             to FINGERPRINTS (never edit a recorded entry), then update docs/design/protocol.md",
            PROTOCOL_VERSION + 1,
            PROTOCOL_VERSION + 1,
        );
    }

    #[test]
    fn fingerprint_items_keep_their_boundaries() {
        let mut h = Fnv::new();
        h.item(b"ab");
        h.item(b"c");
        let mut g = Fnv::new();
        g.item(b"a");
        g.item(b"bc");
        assert_ne!(h.0, g.0, "item boundaries count");
    }

    #[test]
    fn matching_hello_is_accepted_and_checked_by_the_client() {
        let outcome = answer_hello(&hello("c1", "cnode"), "d7", "c1");
        let HelloOutcome::Accept(reply) = outcome else {
            panic!("refused: {outcome:?}");
        };
        assert_eq!(check_hello_ok(&reply, "c1"), Ok("d7".to_owned()));
        assert_eq!(
            check_hello_ok(&reply, "c2"),
            Err(HandshakeError::WrongCluster {
                expected: "c2".into(),
                got: "c1".into()
            })
        );
    }

    #[test]
    fn mismatched_version_cluster_or_first_request_is_refused() {
        let refused_with = |req: &Request| match answer_hello(req, "d7", "c1") {
            HelloOutcome::Refuse(Response::Error { code, .. }) => code,
            other => panic!("not refused: {other:?}"),
        };
        let mut old = hello("c1", "cnode");
        if let Request::Hello {
            protocol_version, ..
        } = &mut old
        {
            *protocol_version = PROTOCOL_VERSION + 1;
        }
        assert_eq!(refused_with(&old), ErrorCode::VersionMismatch);
        assert_eq!(refused_with(&hello("c2", "cnode")), ErrorCode::WrongCluster);
        assert_eq!(refused_with(&Request::Ping), ErrorCode::BadRequest);

        let HelloOutcome::Refuse(reply) = answer_hello(&hello("c2", "x"), "d7", "c1") else {
            panic!("accepted");
        };
        assert!(matches!(
            check_hello_ok(&reply, "c2"),
            Err(HandshakeError::Refused {
                code: ErrorCode::WrongCluster,
                ..
            })
        ));
        assert_eq!(
            check_hello_ok(&Response::Pong, "c1"),
            Err(HandshakeError::UnexpectedResponse {
                kind: MessageKind::Pong
            })
        );
    }

    #[test]
    fn foreign_version_frame_gets_a_version_mismatch_reply() {
        let mut bytes = Vec::new();
        hello("c1", "cnode").encode(9, &mut bytes).expect("encode");
        // Rewrite the version and fix the header CRC, as a v2 client would send it.
        bytes[4..6].copy_from_slice(&(PROTOCOL_VERSION + 1).to_le_bytes());
        let crc = crc32c::crc32c(&bytes[..24]);
        bytes[24..28].copy_from_slice(&crc.to_le_bytes());
        let err = decode_frame(&bytes).expect_err("foreign version");
        let (id, reply) = refusal_for(&err).expect("header intact");
        assert_eq!(id, 9);
        assert!(matches!(
            reply,
            Response::Error {
                code: ErrorCode::VersionMismatch,
                ..
            }
        ));
        assert_eq!(
            refusal_for(&ProtoError::BadMagic { magic: 0 }),
            None,
            "nothing to answer when the header is garbage"
        );
    }
}
