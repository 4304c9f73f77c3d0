//! Opening one iSCSI session: a blocking TCP connection to the portal and the login
//! (`weft_iscsi::initiator_login` decides what to say; this module only moves its bytes and
//! turns its refusals into errors that say what to change).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use weft_iscsi::initiator_login::{
    login_status_text, InitiatorLogin, InitiatorLoginError, InitiatorOffer, LoginOutcome, LoginStep,
};
use weft_iscsi::wire::{
    LOGIN_AUTH_FAILED, LOGIN_FORBIDDEN, LOGIN_TARGET_NOT_FOUND, TEXT_MAX_BYTES,
};
use weft_iscsi::{parse_pdu_ref, Digests, Parse};

use super::uri::IscsiUri;
use crate::target::{TargetError, ISCSI_TARGET};

/// How long to wait for a TCP connection before declaring the portal unreachable.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the target may take to answer one Login Request.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest data segment we take (our MaxRecvDataSegmentLength): 256 KiB, so one Data-In
/// carries a 256 KiB read and larger reads need few PDUs.
pub(super) const RECV_DATA_SEGMENT_MAX_BYTES: u32 = 256 << 10;
/// What we offer as MaxBurstLength: the largest the protocol allows, so the target's limit is
/// the one that counts.
const MAX_BURST_OFFER_BYTES: u32 = weft_iscsi::initiator_login::LENGTH_MAX_BYTES;
/// What we offer as FirstBurstLength (unsolicited data per write): 1 MiB; the target
/// usually answers with less.
const FIRST_BURST_OFFER_BYTES: u32 = 1 << 20;
/// CmdSN of the first command of every session (any value works; 1 reads well in traces).
const FIRST_CMD_SN: u32 = 1;
/// ISID type 2 ("random") in the top two bits of its first byte (RFC 7143 §11.12.5).
const ISID_TYPE_RANDOM: u8 = 0x80;

/// A logged-in connection and anything the target sent after its last Login Response.
#[derive(Debug)]
pub(super) struct Session {
    pub(super) stream: TcpStream,
    pub(super) login: LoginOutcome,
    pub(super) leftover: Vec<u8>,
}

/// Connects to the portal and logs in to the URI's target.
pub(super) fn open_session(
    addr: &SocketAddr,
    addr_text: &str,
    uri: &IscsiUri,
) -> Result<Session, TargetError> {
    let connection_error = |source| TargetError::Connection {
        peer: ISCSI_TARGET,
        addr: addr_text.to_string(),
        source,
    };
    let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT).map_err(|source| {
        TargetError::Connect {
            peer: ISCSI_TARGET,
            addr: addr_text.to_string(),
            source,
        }
    })?;
    stream.set_nodelay(true).map_err(connection_error)?;
    stream
        .set_read_timeout(Some(LOGIN_TIMEOUT))
        .map_err(connection_error)?;
    let mut isid = [0u8; 6];
    isid[0] = ISID_TYPE_RANDOM;
    isid[1..].copy_from_slice(&rand::random::<[u8; 5]>());
    let mut login = InitiatorLogin::new(InitiatorOffer {
        initiator_name: uri.initiator.clone(),
        target_name: uri.target.clone(),
        isid,
        chap: uri.chap.clone(),
        cmd_sn: FIRST_CMD_SN,
        max_recv_data_segment_bytes: RECV_DATA_SEGMENT_MAX_BYTES,
        max_burst_bytes: MAX_BURST_OFFER_BYTES,
        first_burst_bytes: FIRST_BURST_OFFER_BYTES,
        initial_r2t: false,
        immediate_data: true,
    });
    let protocol = |reason: String| TargetError::Protocol {
        peer: ISCSI_TARGET,
        addr: addr_text.to_string(),
        reason,
    };
    let mut out = Vec::new();
    login.start(&mut out);
    stream.write_all(&out).map_err(connection_error)?;
    let mut buf: Vec<u8> = Vec::with_capacity(TEXT_MAX_BYTES);
    let mut chunk = [0u8; 4096];
    loop {
        let (step, used) = match parse_pdu_ref(&buf, Digests::default(), TEXT_MAX_BYTES) {
            Parse::Complete(pdu, used) => {
                out.clear();
                let step = login
                    .receive(&pdu, &mut out)
                    .map_err(|e| login_error(e, addr_text, uri))?;
                (step, used)
            }
            Parse::Incomplete => {
                let n = match stream.read(&mut chunk) {
                    Ok(0) => {
                        return Err(protocol(
                            "the target closed the connection during login".into(),
                        ))
                    }
                    Ok(n) => n,
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Err(protocol(format!(
                            "no Login Response within {} s",
                            LOGIN_TIMEOUT.as_secs()
                        )))
                    }
                    Err(e) => return Err(connection_error(e)),
                };
                buf.extend_from_slice(&chunk[..n]);
                continue;
            }
            Parse::Invalid(e) => return Err(protocol(format!("login framing: {e}"))),
        };
        buf.drain(..used);
        match step {
            LoginStep::Continue => {
                if login.too_many_rounds() {
                    return Err(protocol("the login does not converge".into()));
                }
                stream.write_all(&out).map_err(connection_error)?;
            }
            LoginStep::Complete(outcome) => {
                stream.set_read_timeout(None).map_err(connection_error)?;
                return Ok(Session {
                    stream,
                    login: outcome,
                    leftover: buf,
                });
            }
        }
    }
}

/// A refused login, with what to change.
fn login_error(e: InitiatorLoginError, addr: &str, uri: &IscsiUri) -> TargetError {
    let refused = |status: u16, reason: String| TargetError::LoginRefused {
        addr: addr.to_string(),
        target: uri.target.clone(),
        status,
        reason,
    };
    match e {
        InitiatorLoginError::ChapRequired => refused(
            LOGIN_AUTH_FAILED,
            "the target requires CHAP: put USER%SECRET@ before the host in the URI".into(),
        ),
        InitiatorLoginError::Refused { status } => {
            let text = login_status_text(status);
            let hint = match status {
                LOGIN_AUTH_FAILED => {
                    let user = uri.chap.as_ref().map_or("", |(u, _)| u.as_str());
                    format!("; the target did not accept CHAP user '{user}' with that secret")
                }
                LOGIN_FORBIDDEN => format!(
                    "; initiator '{}' may not use this target (name the host's IQN with \
                     ?initiator=IQN, or map the volume to that host)",
                    uri.initiator
                ),
                LOGIN_TARGET_NOT_FOUND => {
                    "; check the target name (iscsi-ls iscsi://HOST lists them)".into()
                }
                _ => String::new(),
            };
            refused(status, format!("{text} (status {status:#06x}){hint}"))
        }
        other => TargetError::Protocol {
            peer: ISCSI_TARGET,
            addr: addr.to_string(),
            reason: other.to_string(),
        },
    }
}
