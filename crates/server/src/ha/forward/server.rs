//! The owner's side of forwarding: a listener (`--forward-listen`) that serves other
//! c.nodes' clients from this c.node's engine. A connection must first prove it belongs to the
//! cluster (the forwarding secret in etcd); it then opens one export and sends requests, which
//! run concurrently on the blocking pool and are answered by id. Access rules are not checked
//! here: the forwarder's front end checked them against the same cluster state. Each open is
//! one of this c.node's sessions (protocol `forwarded`, client `c.node ID`), so a delete or
//! refresh here sees that other c.nodes have clients on the export.
//!
//! Before this c.node owns the cluster the listener holds connections without answering; once
//! it stops (drain, lost lease) it closes them without answering what is in flight, so the
//! forwarder sends those requests to the next owner.

use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;

use super::local::LocalSlot;
use super::wire::{self, Answer, Op};
use crate::api::types::SessionProtocol;
use crate::backend::{ExportHandle, ExportIoError};
use crate::qos::serve_received;
use crate::sessions::{SessionOrigin, Sessions};

/// Requests of one connection running at once; more wait to be read.
const IN_FLIGHT_MAX: usize = 64;
/// The largest read or write a forwarder may ask for (the front ends' own limit is 32 MiB).
const REQUEST_MAX_BYTES: u64 = 32 << 20;
/// Largest frame body accepted: a write of the largest size plus its head.
const BODY_MAX_BYTES: u32 = (REQUEST_MAX_BYTES as u32) + 64;

/// What every forwarded connection of this c.node shares.
#[derive(Clone)]
pub struct ForwardService {
    pub local: Arc<LocalSlot>,
    pub secret: Arc<str>,
    /// This c.node's id, told to forwarders.
    pub id: Arc<str>,
    pub sessions: Arc<Sessions>,
}

/// Accept forwarders until `shutdown`.
pub async fn run(listener: TcpListener, service: ForwardService, shutdown: CancellationToken) {
    loop {
        let (stream, peer) = tokio::select! {
            () = shutdown.cancelled() => return,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "forward listener: accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (service, shutdown) = (service.clone(), shutdown.clone());
        tokio::spawn(async move {
            if let Err(e) = connection(stream, &service, &shutdown).await {
                tracing::debug!(%peer, error = %e, "forwarded connection ended");
            }
        });
    }
}

async fn connection(
    stream: TcpStream,
    service: &ForwardService,
    shutdown: &CancellationToken,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let peer = stream.peer_addr()?;
    let (mut rd, mut wr) = stream.into_split();
    let (kind, body) = read_frame(&mut rd).await?;
    let hello: Option<wire::Hello> = (kind == wire::HELLO)
        .then(|| serde_json::from_slice(&body).ok())
        .flatten();
    let Some(hello) = hello.filter(|h| h.secret.as_str() == &*service.secret) else {
        tracing::warn!(%peer, "forward listener: refused a connection without the cluster's forwarding secret");
        wr.write_all(&wire::frame(wire::REFUSED, b"not a c.node of this cluster"))
            .await?;
        return Ok(());
    };
    let backend = tokio::select! {
        () = shutdown.cancelled() => return Ok(()),
        b = service.local.wait() => b,
    };
    wr.write_all(&wire::frame(wire::WELCOME, service.id.as_bytes()))
        .await?;
    let (kind, body) = read_frame(&mut rd).await?;
    let open: wire::Open = match (kind == wire::OPEN)
        .then(|| serde_json::from_slice(&body).ok())
        .flatten()
    {
        Some(o) => o,
        None => return Err(invalid("expected OPEN")),
    };
    let opened = {
        let (backend, name) = (Arc::clone(&backend), open.export.clone());
        tokio::task::spawn_blocking(move || backend.open(&name))
            .await
            .map_err(std::io::Error::other)?
    };
    let handle = match opened {
        Ok(h) => h,
        Err(e) => {
            wr.write_all(&wire::frame(wire::REFUSED, e.to_string().as_bytes()))
                .await?;
            return Ok(());
        }
    };
    let handle = service.sessions.track(
        handle,
        SessionOrigin {
            protocol: SessionProtocol::Forwarded,
            client: format!("c.node {}", hello.cnode),
            address: peer,
            host: None,
        },
    );
    let info = serde_json::to_vec(&wire::Opened::from(handle.info())).map_err(invalid_json)?;
    wr.write_all(&wire::frame(wire::OPENED, &info)).await?;

    let (tx, mut replies) = mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(reply) = replies.recv().await {
            if wr.write_all(&reply).await.is_err() {
                break;
            }
        }
    });
    let slots = Arc::new(Semaphore::new(IN_FLIGHT_MAX));
    let result = loop {
        let read = tokio::select! {
            () = shutdown.cancelled() => break Ok(()),
            read = read_frame(&mut rd) => read,
        };
        let (kind, body) = match read {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break Ok(()),
            Err(e) => break Err(e),
        };
        if kind != wire::REQUEST {
            break Err(invalid("expected REQUEST"));
        }
        // The owner's QoS latency target counts from here.
        let received = Instant::now();
        let permit = Arc::clone(&slots)
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let (handle, tx, shutdown) = (Arc::clone(&handle), tx.clone(), shutdown.clone());
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let Ok((head, data)) = wire::parse_request(&body) else {
                return;
            };
            let result = serve_received(received, || execute(&*handle, head, data));
            // A stopping owner does not answer: the forwarder asks the next owner.
            if shutdown.is_cancelled() && result.is_err() {
                return;
            }
            let _ = tx.send(wire::reply_frame(head.id, &result));
        });
    };
    drop(tx);
    if shutdown.is_cancelled() {
        writer.abort();
    } else {
        // Requests still running answer before the connection closes.
        let _ = slots.acquire_many(IN_FLIGHT_MAX as u32).await;
        let _ = writer.await;
    }
    result
}

/// Run one forwarded request against the owner's export.
fn execute(
    handle: &dyn ExportHandle,
    head: wire::RequestHead,
    data: &[u8],
) -> Result<Answer, ExportIoError> {
    let fua = head.flags & wire::FLAG_FUA != 0;
    if matches!(head.op, Op::Read | Op::Write | Op::CompareAndWrite)
        && head.length_bytes > REQUEST_MAX_BYTES
    {
        return Err(ExportIoError::Invalid {
            reason: "forwarded request larger than 32 MiB",
        });
    }
    match head.op {
        Op::Read => {
            let mut buf = vec![0u8; head.length_bytes as usize];
            handle.read(head.offset_bytes, &mut buf)?;
            Ok(Answer::Data(buf))
        }
        Op::Write => handle
            .write(head.offset_bytes, data, fua)
            .map(|()| Answer::Done),
        Op::Flush => handle.flush().map(|()| Answer::Done),
        Op::Trim => handle
            .trim(head.offset_bytes, head.length_bytes, fua)
            .map(|()| Answer::Done),
        Op::WriteZeroes => handle
            .write_zeroes(
                head.offset_bytes,
                head.length_bytes,
                head.flags & wire::FLAG_MAY_TRIM != 0,
                fua,
            )
            .map(|()| Answer::Done),
        Op::BlockStatus => handle
            .block_status(head.offset_bytes, head.length_bytes)
            .map(Answer::Extents),
        Op::CompareAndWrite => {
            let (compare, new) = data.split_at(data.len() / 2);
            Ok(
                match handle.compare_and_write(head.offset_bytes, compare, new, fua)? {
                    Some(at) => Answer::Miscompare(at),
                    None => Answer::Done,
                },
            )
        }
    }
}

async fn read_frame(r: &mut (impl AsyncRead + Unpin)) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 5];
    r.read_exact(&mut head).await?;
    let len = u32::from_le_bytes(head[1..].try_into().expect("4 bytes"));
    if len > BODY_MAX_BYTES {
        return Err(invalid("forwarded frame too large"));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body).await?;
    Ok((head[0], body))
}

fn invalid(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why.to_string())
}

fn invalid_json(e: serde_json::Error) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e)
}
