//! One iSCSI connection: the login phase, then the session's full feature phase
//! ([`super::session`]). A discovery session only answers SendTargets.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use weft_iscsi::wire::{LOGIN_AUTH_FAILED, LOGIN_FORBIDDEN, TEXT_MAX_BYTES};
use weft_iscsi::{decode, parse_pdu, Digests, LoggedIn, Login, LoginProgress, Parse, Request};

use super::shared::{ConnError, READ_BUFFER_BYTES};
use super::targets::Viewer;
use super::Portal;
use crate::access::connection_is_open;

/// An initiator has this long to log in.
const LOGIN_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve one connection that came in on the portal with relative target port `port`.
pub(super) async fn serve(
    mut stream: TcpStream,
    portal: Arc<Portal>,
    port: u16,
    shutdown: CancellationToken,
) {
    if let Err(error) = stream.set_nodelay(true) {
        debug!(%error, "set_nodelay failed");
    }
    let open = match stream.local_addr() {
        Ok(local) => connection_is_open(local, portal.open_network),
        Err(_) => return,
    };
    let mut buf = BytesMut::with_capacity(READ_BUFFER_BYTES);
    let logged_in = tokio::select! {
        _ = shutdown.cancelled() => return,
        r = tokio::time::timeout(LOGIN_TIMEOUT, login(&mut stream, &mut buf, &portal, open)) => {
            r.unwrap_or(Err(ConnError::LoginTimeout))
        }
    };
    let logged_in = match logged_in {
        Ok(Some(l)) => l,
        Ok(None) => return,
        // A wrong CHAP secret or an initiator not allowed in is worth an operator's look
        // (a misconfigured host, or someone guessing): warn, with who it was (the span has
        // the peer's address).
        Err(ConnError::LoginRefused {
            status: status @ (LOGIN_AUTH_FAILED | LOGIN_FORBIDDEN),
            initiator,
        }) => {
            warn!(
                initiator = initiator.as_deref().unwrap_or("(unnamed)"),
                status = format_args!("{status:#06x}"),
                reason = if status == LOGIN_AUTH_FAILED {
                    "authentication failed (CHAP)"
                } else {
                    "not authorized for the target"
                },
                "iscsi login refused"
            );
            return;
        }
        Err(error) => {
            info!(%error, "iscsi login failed, disconnecting");
            return;
        }
    };
    info!(
        initiator = %logged_in.initiator,
        target = logged_in.target.as_deref().unwrap_or("(discovery)"),
        header_digest = logged_in.params.header_digest,
        data_digest = logged_in.params.data_digest,
        "iscsi session started"
    );
    match super::session::run(stream, buf, logged_in, &portal, port, open, &shutdown).await {
        Ok(()) => info!("iscsi session ended"),
        Err(error) => info!(%error, "iscsi session ended"),
    }
}

/// Read PDUs until the login completes (`Some`), the peer leaves (`None`) or it fails.
async fn login(
    stream: &mut TcpStream,
    buf: &mut BytesMut,
    portal: &Portal,
    open: bool,
) -> Result<Option<LoggedIn>, ConnError> {
    let mut login = Login::new(
        portal.limits,
        super::PORTAL_GROUP_TAG,
        portal.tsih(),
        rand::random(),
    );
    let table = portal.backend.access();
    let access = Viewer {
        backend: &*portal.backend,
        table: &table,
        array_target: &portal.array_target,
        open,
    };
    let mut out = Vec::new();
    loop {
        let pdu = match parse_pdu(buf, Digests::default(), TEXT_MAX_BYTES) {
            Parse::Complete(pdu, used) => {
                let _ = buf.split_to(used);
                pdu
            }
            Parse::Incomplete => {
                buf.reserve(READ_BUFFER_BYTES);
                if stream.read_buf(buf).await? == 0 {
                    return Ok(None);
                }
                continue;
            }
            Parse::Invalid(e) => return Err(e.into()),
        };
        let Ok(Request::Login(req)) = decode(pdu) else {
            return Err(ConnError::NotLogin);
        };
        out.clear();
        let progress = login.step(&req, &access, &mut out);
        stream.write_all(&out).await?;
        match progress {
            LoginProgress::Continue => {}
            LoginProgress::Complete(done) => return Ok(Some(done)),
            LoginProgress::Failed(status) => {
                let _ = stream.shutdown().await;
                return Err(ConnError::LoginRefused {
                    status,
                    initiator: login.initiator().map(str::to_string),
                });
            }
        }
    }
}
