//! Watches on etcd: `POST /v3/watch` with one create request, answered by an endless chunked
//! HTTP response of newline-separated JSON messages (`{"result": WatchResponse}`).
//!
//! The stream is read over a plain `TcpStream` rather than `ureq`, because the reader must wake
//! up regularly (every `POLL_INTERVAL`) to notice that its `Watch` was dropped, and a
//! timed-out read must not end the stream: `ureq`'s timeouts are fatal to a response. The
//! watcher thread checks an idle connection's server every `IDLE_PROBE_INTERVAL` (a cheap range
//! request) and, when the stream breaks, reconnects to the next endpoint and resumes from the
//! revision after the last event it delivered, so no event is lost or repeated. It gives up
//! only if that history was compacted ([`MetaError::Compacted`] in [`Watch::error`]).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::wire::{b64, prefix_range, ErrorBody, StreamMessage, WatchResponse, GRPC_OUT_OF_RANGE};
use super::Shared;
use crate::{MetaError, Revision, Watch, WatchControl, WatchEvent};

/// How often a blocked watch read wakes up to check whether the Watch was dropped.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// How long a watch stream may stay silent before the thread checks that its server is alive.
const IDLE_PROBE_INTERVAL: Duration = Duration::from_millis(5_000);
/// Backoff between reconnection attempts, doubling from MIN to MAX.
const RECONNECT_BACKOFF_MIN: Duration = Duration::from_millis(100);
const RECONNECT_BACKOFF_MAX: Duration = Duration::from_millis(2_000);
/// The largest response head or single message accepted.
const HEAD_MAX_BYTES: usize = 64 << 10;
const MESSAGE_MAX_BYTES: usize = 64 << 20;
const READ_CHUNK_BYTES: usize = 64 << 10;

/// Open a watch (synchronously, so that an unreachable cluster or compacted history fails the
/// call) and hand its stream to a watcher thread.
pub(super) fn start(
    shared: Arc<Shared>,
    prefix: &str,
    after: Revision,
) -> Result<Watch, MetaError> {
    let (stream, endpoint_idx) = open_any(&shared, prefix, after)?;
    let (watch, tx, control) = Watch::channel();
    let prefix = prefix.to_string();
    let thread = Watcher {
        shared,
        prefix,
        after,
        tx,
        control,
        endpoint_idx,
    };
    std::thread::Builder::new()
        .name("weft-meta-watch".into())
        .spawn(move || thread.run(stream))
        .map_err(|e| MetaError::io("<watch thread>", e))?;
    Ok(watch)
}

/// Try every endpoint, starting with the preferred one.
fn open_any(shared: &Shared, prefix: &str, after: Revision) -> Result<(Stream, usize), MetaError> {
    let n = shared.endpoints().len();
    let start = shared.preferred();
    let mut last = None;
    for i in 0..n {
        let idx = (start + i) % n;
        match open(shared, &shared.endpoints()[idx], prefix, after) {
            Ok(s) => return Ok((s, idx)),
            Err(e @ (MetaError::Compacted { .. } | MetaError::Rejected { .. })) => return Err(e),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| MetaError::Unavailable {
        endpoint: String::new(),
        detail: "no endpoint".into(),
    }))
}

/// Open a watch on one endpoint and read until etcd confirms its creation.
fn open(
    shared: &Shared,
    endpoint: &str,
    prefix: &str,
    after: Revision,
) -> Result<Stream, MetaError> {
    let (key, end) = prefix_range(prefix);
    let body = json!({"create_request": {
        "key": b64(&key), "range_end": b64(&end), "start_revision": (after + 1).to_string(),
    }});
    // etcd confirms a watch before it checks the history it needs, and cancels it a moment
    // later if that was compacted: ask first, so that the caller hears of it synchronously.
    let compacted = history_compacted(shared, endpoint, &key, &end, after)?;
    let mut stream = Stream::connect(endpoint, &body.to_string(), shared.timeout())?;
    let deadline = Instant::now() + shared.timeout();
    loop {
        match stream.next_message()? {
            Some(msg) => {
                let r = result_of(endpoint, msg)?;
                if r.canceled {
                    return Err(canceled(endpoint, after, &r));
                }
                if r.created && !compacted {
                    // Events can come in the same message as the confirmation.
                    stream.pending = Some(r);
                    return Ok(stream);
                }
            }
            None if Instant::now() >= deadline && compacted => {
                // The cancel that names the compaction revision did not come.
                return Err(MetaError::Compacted {
                    requested: after + 1,
                    compact_revision: 0,
                });
            }
            None if Instant::now() >= deadline => {
                return Err(MetaError::Timeout {
                    endpoint: endpoint.into(),
                    operation: "watch".into(),
                    timeout_ms: u64::try_from(shared.timeout().as_millis()).unwrap_or(u64::MAX),
                })
            }
            None => {}
        }
    }
}

/// Whether the history from `after + 1` on is compacted, by a range read at that revision
/// (which fails with "required revision has been compacted" if so).
fn history_compacted(
    shared: &Shared,
    endpoint: &str,
    key: &[u8],
    end: &[u8],
    after: Revision,
) -> Result<bool, MetaError> {
    let body = json!({
        "key": b64(key), "range_end": b64(end), "count_only": true,
        "revision": (after + 1).to_string(),
    });
    match shared.post(endpoint, "/v3/kv/range", &body, None) {
        Ok(_) => Ok(false),
        Err(f) => match f.error {
            // The other OUT_OF_RANGE: "required revision is a future revision".
            MetaError::Rejected { code, message, .. } if code == GRPC_OUT_OF_RANGE => {
                Ok(message.contains("compacted"))
            }
            e => Err(e),
        },
    }
}

fn result_of(
    endpoint: &str,
    msg: StreamMessage<WatchResponse>,
) -> Result<WatchResponse, MetaError> {
    if let Some(error) = msg.error {
        let body: ErrorBody = serde_json::from_value(error).unwrap_or_default();
        return Err(MetaError::Unavailable {
            endpoint: endpoint.into(),
            detail: format!("watch stream error {}: {}", body.code(), body.message),
        });
    }
    msg.result.ok_or_else(|| MetaError::Corrupt {
        origin: format!("{endpoint}/v3/watch"),
        detail: "a message with neither result nor error".into(),
    })
}

fn canceled(endpoint: &str, after: Revision, r: &WatchResponse) -> MetaError {
    if r.compact_revision > 0 {
        MetaError::Compacted {
            requested: after + 1,
            compact_revision: r.compact_revision,
        }
    } else {
        MetaError::Rejected {
            endpoint: endpoint.into(),
            code: -1,
            message: format!("watch canceled: {}", r.cancel_reason),
        }
    }
}

struct Watcher {
    shared: Arc<Shared>,
    prefix: String,
    /// Every event up to this revision has been delivered.
    after: Revision,
    tx: Sender<WatchEvent>,
    control: WatchControl,
    endpoint_idx: usize,
}

/// Why a stream ended.
enum End {
    /// The Watch was dropped.
    Stopped,
    /// The connection broke or the server went quiet: reconnect.
    Broken(MetaError),
    /// The watch cannot go on.
    Fatal(MetaError),
}

impl Watcher {
    fn run(mut self, first: Stream) {
        let mut stream = Some(first);
        let mut backoff = RECONNECT_BACKOFF_MIN;
        loop {
            if let Some(s) = stream.take() {
                match self.pump(s) {
                    End::Stopped => return,
                    End::Fatal(e) => return self.control.fail(e),
                    End::Broken(e) => {
                        tracing::info!(error = %e, "etcd watch stream broke; reconnecting");
                        self.endpoint_idx += 1;
                    }
                }
            }
            // Reconnect: wait (watching for a drop), then try each endpoint once.
            let wake = Instant::now() + backoff;
            while Instant::now() < wake {
                if self.control.is_stopped() {
                    return;
                }
                std::thread::sleep(POLL_INTERVAL.min(backoff));
            }
            let n = self.shared.endpoints().len();
            for i in 0..n {
                let idx = (self.endpoint_idx + i) % n;
                let endpoint = &self.shared.endpoints()[idx];
                match open(&self.shared, endpoint, &self.prefix, self.after) {
                    Ok(s) => {
                        self.endpoint_idx = idx;
                        stream = Some(s);
                        backoff = RECONNECT_BACKOFF_MIN;
                        break;
                    }
                    Err(e @ (MetaError::Compacted { .. } | MetaError::Rejected { .. })) => {
                        return self.control.fail(e)
                    }
                    Err(e) => tracing::debug!(%endpoint, error = %e, "watch reconnect failed"),
                }
            }
            if stream.is_none() {
                backoff = (backoff * 2).min(RECONNECT_BACKOFF_MAX);
            }
        }
    }

    /// Deliver a stream's events until it ends.
    fn pump(&mut self, mut stream: Stream) -> End {
        let endpoint =
            self.shared.endpoints()[self.endpoint_idx % self.shared.endpoints().len()].clone();
        let mut last_data = Instant::now();
        if let Some(r) = stream.pending.take() {
            if let Err(end) = self.deliver(&endpoint, r) {
                return end;
            }
        }
        loop {
            if self.control.is_stopped() {
                return End::Stopped;
            }
            match stream.next_message() {
                Ok(Some(msg)) => {
                    last_data = Instant::now();
                    let r = match result_of(&endpoint, msg) {
                        Ok(r) => r,
                        Err(e) => return End::Broken(e),
                    };
                    if let Err(end) = self.deliver(&endpoint, r) {
                        return end;
                    }
                }
                Ok(None) if last_data.elapsed() >= IDLE_PROBE_INTERVAL => {
                    if let Err(e) = self.shared.probe(&endpoint) {
                        return End::Broken(e);
                    }
                    last_data = Instant::now();
                }
                Ok(None) => {}
                Err(e) => return End::Broken(e),
            }
        }
    }

    fn deliver(&mut self, endpoint: &str, r: WatchResponse) -> Result<(), End> {
        if r.canceled {
            return Err(End::Fatal(canceled(endpoint, self.after, &r)));
        }
        for event in &r.events {
            let (key, versioned) = event
                .kv
                .decode(&format!("{endpoint}/v3/watch"))
                .map_err(End::Fatal)?;
            let revision = versioned.mod_revision;
            let ev = if event.kind == "DELETE" {
                WatchEvent::Delete { key, revision }
            } else {
                WatchEvent::Put {
                    key,
                    value: versioned.value,
                    revision,
                }
            };
            if self.tx.send(ev).is_err() {
                return Err(End::Stopped);
            }
            self.after = self.after.max(revision);
        }
        Ok(())
    }
}

/// One streaming HTTP/1.1 response on a plain TCP connection.
struct Stream {
    sock: TcpStream,
    /// Raw body bytes not yet de-chunked.
    raw: Vec<u8>,
    /// `Transfer-Encoding: chunked` (the gateway's way); otherwise the body runs to EOF.
    chunked: bool,
    /// De-chunked bytes not yet split into messages.
    payload: Vec<u8>,
    /// The body has ended (last chunk or EOF).
    ended: bool,
    /// A message read while opening, not yet delivered.
    pending: Option<WatchResponse>,
}

impl Stream {
    /// Connect, send the request and read the response head, all within `timeout`.
    fn connect(endpoint: &str, body: &str, timeout: Duration) -> Result<Stream, MetaError> {
        let unavailable = |detail: String| MetaError::Unavailable {
            endpoint: endpoint.into(),
            detail,
        };
        let authority = endpoint.strip_prefix("http://").unwrap_or(endpoint);
        let addr = authority
            .to_socket_addrs()
            .map_err(|e| unavailable(format!("cannot resolve: {e}")))?
            .next()
            .ok_or_else(|| unavailable("resolves to no address".into()))?;
        let sock = TcpStream::connect_timeout(&addr, timeout.min(super::CONNECT_TIMEOUT_MAX))
            .map_err(|e| unavailable(format!("connect: {e}")))?;
        let deadline = Instant::now() + timeout;
        let io = |e: std::io::Error| unavailable(format!("watch request: {e}"));
        sock.set_write_timeout(Some(timeout)).map_err(io)?;
        sock.set_nodelay(true).map_err(io)?;
        let request = format!(
            "POST /v3/watch HTTP/1.1\r\nHost: {authority}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        (&sock).write_all(request.as_bytes()).map_err(io)?;
        let mut stream = Stream {
            sock,
            raw: Vec::new(),
            chunked: false,
            payload: Vec::new(),
            ended: false,
            pending: None,
        };
        let head_end = loop {
            if let Some(pos) = find(&stream.raw, b"\r\n\r\n") {
                break pos;
            }
            if stream.raw.len() > HEAD_MAX_BYTES {
                return Err(unavailable("response head too large".into()));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !stream.fill(left)? {
                return Err(MetaError::Timeout {
                    endpoint: endpoint.into(),
                    operation: "watch".into(),
                    timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                });
            }
            if stream.ended {
                return Err(unavailable("connection closed before a response".into()));
            }
        };
        let head = String::from_utf8_lossy(&stream.raw[..head_end]).into_owned();
        stream.raw.drain(..head_end + 4);
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .unwrap_or(0);
        stream.chunked = head.lines().any(|l| {
            let l = l.to_ascii_lowercase();
            l.starts_with("transfer-encoding:") && l.contains("chunked")
        });
        if status >= 500 {
            return Err(unavailable(format!("HTTP {status} on /v3/watch")));
        }
        if status != 200 {
            let text = String::from_utf8_lossy(&stream.raw).into_owned();
            let body: ErrorBody = serde_json::from_str(&text).unwrap_or_default();
            return Err(MetaError::Rejected {
                endpoint: endpoint.into(),
                code: body.code(),
                message: format!("HTTP {status} on /v3/watch: {}", text.trim()),
            });
        }
        stream.dechunk()?;
        Ok(stream)
    }

    /// Read what arrives within `wait` into `raw`; false if nothing came. Sets `ended` on EOF.
    fn fill(&mut self, wait: Duration) -> Result<bool, MetaError> {
        let io = |e: std::io::Error| MetaError::Unavailable {
            endpoint: self
                .sock
                .peer_addr()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            detail: format!("watch stream: {e}"),
        };
        self.sock.set_read_timeout(Some(wait)).map_err(io)?;
        let mut buf = [0u8; READ_CHUNK_BYTES];
        match (&self.sock).read(&mut buf) {
            Ok(0) => {
                self.ended = true;
                Ok(true)
            }
            Ok(n) => {
                self.raw.extend_from_slice(&buf[..n]);
                Ok(true)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(io(e)),
        }
    }

    /// The next complete message, or None if none arrived within `POLL_INTERVAL`.
    fn next_message(&mut self) -> Result<Option<StreamMessage<WatchResponse>>, MetaError> {
        loop {
            if let Some(line) = self.take_line() {
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return serde_json::from_slice(&line)
                    .map(Some)
                    .map_err(|e| MetaError::Corrupt {
                        origin: "etcd watch stream".into(),
                        detail: e.to_string(),
                    });
            }
            if self.ended {
                return Err(MetaError::Unavailable {
                    endpoint: self
                        .sock
                        .peer_addr()
                        .map(|a| a.to_string())
                        .unwrap_or_default(),
                    detail: "watch stream ended".into(),
                });
            }
            if self.payload.len() > MESSAGE_MAX_BYTES {
                return Err(MetaError::Corrupt {
                    origin: "etcd watch stream".into(),
                    detail: format!("a message over {MESSAGE_MAX_BYTES} bytes"),
                });
            }
            if !self.fill(POLL_INTERVAL)? {
                return Ok(None);
            }
            self.dechunk()?;
        }
    }

    /// Split the first complete line off the payload.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        let pos = self.payload.iter().position(|&b| b == b'\n')?;
        let mut line: Vec<u8> = self.payload.drain(..=pos).collect();
        line.pop();
        Some(line)
    }

    /// Move complete body bytes from `raw` to `payload`.
    fn dechunk(&mut self) -> Result<(), MetaError> {
        if !self.chunked {
            self.payload.append(&mut self.raw);
        } else if dechunk(&mut self.raw, &mut self.payload)? {
            self.ended = true;
        }
        Ok(())
    }
}

/// Move the complete chunks of a chunked body from `raw` to `payload`; true at the last chunk.
fn dechunk(raw: &mut Vec<u8>, payload: &mut Vec<u8>) -> Result<bool, MetaError> {
    let bad = |detail: &str| MetaError::Corrupt {
        origin: "etcd watch stream".into(),
        detail: format!("bad chunked encoding: {detail}"),
    };
    while let Some(line_end) = find(raw, b"\r\n") {
        let size_text = String::from_utf8_lossy(&raw[..line_end]).into_owned();
        let size_hex = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_hex, 16).map_err(|_| bad(&size_text))?;
        if size > MESSAGE_MAX_BYTES {
            return Err(bad("chunk too large"));
        }
        if size == 0 {
            raw.clear();
            return Ok(true);
        }
        let start = line_end + 2;
        if raw.len() < start + size + 2 {
            return Ok(false);
        }
        if &raw[start + size..start + size + 2] != b"\r\n" {
            return Err(bad("a chunk does not end with CRLF"));
        }
        payload.extend_from_slice(&raw[start..start + size]);
        raw.drain(..start + size + 2);
    }
    if raw.len() > HEAD_MAX_BYTES {
        return Err(bad("no chunk size line"));
    }
    Ok(false)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunks_split_input() {
        let body = b"5\r\nhello\r\na;ext=1\r\n world\n{}\n\r\n0\r\n\r\n";
        // Feed it byte by byte: partial size lines and chunks must wait for more.
        let (mut raw, mut payload) = (Vec::new(), Vec::new());
        let mut ended = false;
        for &b in body.iter() {
            raw.push(b);
            if dechunk(&mut raw, &mut payload).unwrap() {
                ended = true;
                break; // The trailer after the last chunk is never parsed.
            }
        }
        assert!(ended);
        assert_eq!(payload, b"hello world\n{}\n");
        for bad in [&b"zz\r\n"[..], b"2\r\nabc\r\n"] {
            assert!(dechunk(&mut bad.to_vec(), &mut Vec::new()).is_err());
        }
    }
}
