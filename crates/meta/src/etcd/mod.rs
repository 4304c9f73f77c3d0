//! `EtcdMetaStore`: the [`MetaStore`] on an etcd v3 cluster, spoken to through etcd's JSON gRPC
//! gateway (`POST /v3/...`) over plain HTTP with `ureq`: no protobuf, no async runtime.
//!
//! Every request has a deadline (the store's timeout). Endpoints are tried in order starting
//! with the last one that answered: reads, keep-alives and revokes fail over on any transport
//! error; writes (put, delete, txn, grant) fail over only when the request surely never left
//! (connection refused, connect timeout), since a write that timed out may have been applied.
//! Watches stream over their own connection, see `watch`.
//!
//! Gateway behaviour this relies on (checked against etcd 3.4.23):
//! - A txn compare `{"target":"MOD","mod_revision":"0"}` holds for an absent key (as does
//!   `CREATE` = 0), so one txn shape serves create-if-absent and compare-and-swap.
//! - proto3 defaults are omitted: `succeeded: false`, event `type: PUT`, empty values, `kvs: []`.
//! - `/v3/lease/keepalive` is a stream: one `{"result": ...}` line per request message, ended
//!   when the request body ends; an expired lease answers without a `TTL`.
//! - `/v3/lease/revoke` exists in 3.4 (as does `/v3/kv/lease/revoke`); an unknown lease is
//!   HTTP 404 with gRPC code 5, as is a put with one.
//! - Lease TTLs below the minimum (2 s with default election settings) are raised to it.
//! - Errors are `{"error", "code", "message"}` with an HTTP status (400, 404, 503...).

mod url;
mod watch;
mod wire;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

pub use url::{parse_cluster_url, CLUSTER_URL_SCHEME, DEFAULT_ETCD_PORT};

use crate::{check_key, check_ttl, LeaseId, MetaError, MetaStore, Revision, Versioned, Watch};
use wire::{b64, prefix_range, ErrorBody, HeaderOnly, RangeResponse, TxnResponse};

/// The longest a TCP connect to one endpoint may take before failing over to the next.
const CONNECT_TIMEOUT_MAX: Duration = Duration::from_millis(2_000);
/// The largest gateway response read.
const RESPONSE_MAX_BYTES: u64 = 64 << 20;

/// An etcd v3 cluster as a [`MetaStore`]. Cloning shares the connection pool.
#[derive(Debug, Clone)]
pub struct EtcdMetaStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
pub(crate) struct Shared {
    endpoints: Vec<String>,
    timeout: Duration,
    agent: ureq::Agent,
    /// Index of the endpoint that answered last: tried first.
    preferred: AtomicUsize,
}

/// When a failed request may be sent to the next endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Retry {
    /// Whatever happened: sending it twice does no harm.
    Always,
    /// Only if it surely never reached a server.
    IfNotSent,
}

/// One failed attempt at one endpoint.
struct Failed {
    error: MetaError,
    /// The request never reached the server.
    not_sent: bool,
    /// The failure is the endpoint's, not the request's: another endpoint may do better.
    endpoint_fault: bool,
}

impl EtcdMetaStore {
    /// A store on these gateway endpoints (`http://host:port`, see [`parse_cluster_url`]);
    /// checks that one of them answers within `timeout`, the deadline of every request.
    pub fn connect(endpoints: &[String], timeout: Duration) -> Result<EtcdMetaStore, MetaError> {
        if endpoints.is_empty() {
            return Err(MetaError::InvalidArgument {
                what: "etcd endpoints".into(),
                reason: "the list is empty".into(),
            });
        }
        if let Some(e) = endpoints.iter().find(|e| !e.starts_with("http://")) {
            return Err(MetaError::InvalidArgument {
                what: "etcd endpoint".into(),
                reason: format!("{e:?} is not http://host:port"),
            });
        }
        if timeout.is_zero() {
            return Err(MetaError::InvalidArgument {
                what: "etcd request timeout".into(),
                reason: "must be positive".into(),
            });
        }
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .proxy(None)
            .timeout_global(Some(timeout))
            .timeout_connect(Some(timeout.min(CONNECT_TIMEOUT_MAX)))
            .build();
        let store = EtcdMetaStore {
            shared: Arc::new(Shared {
                endpoints: endpoints
                    .iter()
                    .map(|e| e.trim_end_matches('/').into())
                    .collect(),
                timeout,
                agent: ureq::Agent::new_with_config(config),
                preferred: AtomicUsize::new(0),
            }),
        };
        store.shared.probe_any()?;
        Ok(store)
    }

    /// The gateway endpoints, in failover order.
    pub fn endpoints(&self) -> &[String] {
        &self.shared.endpoints
    }

    fn txn(&self, key: &str, expected: Revision, success: Value) -> Result<TxnResponse, MetaError> {
        let k = b64(key.as_bytes());
        let body = json!({
            "compare": [{"key": k, "target": "MOD", "result": "EQUAL", "mod_revision": expected.to_string()}],
            "success": [success],
            "failure": [{"request_range": {"key": k}}],
        });
        self.shared.call("/v3/kv/txn", &body, Retry::IfNotSent)
    }
}

fn conflict(key: &str, txn: &TxnResponse) -> MetaError {
    let current = txn
        .responses
        .first()
        .and_then(|r| r.response_range.as_ref())
        .and_then(|r| r.kvs.first())
        .map(|kv| kv.mod_revision);
    MetaError::Conflict {
        key: key.into(),
        current,
    }
}

impl Shared {
    pub(crate) fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(crate) fn preferred(&self) -> usize {
        self.preferred.load(Ordering::Relaxed) % self.endpoints.len()
    }

    /// A cheap read, to see that some endpoint answers.
    fn probe_any(&self) -> Result<(), MetaError> {
        let body = json!({"key": b64(b"\0"), "count_only": true});
        self.call::<HeaderOnly>("/v3/kv/range", &body, Retry::Always)
            .map(drop)
    }

    /// The same cheap read against one endpoint (a watch checking its connection's server).
    pub(crate) fn probe(&self, endpoint: &str) -> Result<(), MetaError> {
        let body = json!({"key": b64(b"\0"), "count_only": true});
        self.post(endpoint, "/v3/kv/range", &body, None)
            .map(drop)
            .map_err(|f| f.error)
    }

    /// POST `body` to `path`, failing over between endpoints as `retry` allows.
    fn call<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        retry: Retry,
    ) -> Result<T, MetaError> {
        self.call_with_lease(path, body, retry, None)
    }

    fn call_with_lease<T: DeserializeOwned>(
        &self,
        path: &str,
        body: &Value,
        retry: Retry,
        lease: Option<LeaseId>,
    ) -> Result<T, MetaError> {
        let n = self.endpoints.len();
        let start = self.preferred();
        let mut last = None;
        for i in 0..n {
            let idx = (start + i) % n;
            let endpoint = &self.endpoints[idx];
            match self.post(endpoint, path, body, lease) {
                Ok(bytes) => {
                    self.preferred.store(idx, Ordering::Relaxed);
                    return serde_json::from_slice(&bytes).map_err(|e| MetaError::Corrupt {
                        origin: format!("{endpoint}{path}"),
                        detail: format!("unexpected response: {e}"),
                    });
                }
                Err(f) => {
                    let may_retry = f.endpoint_fault && (f.not_sent || retry == Retry::Always);
                    if !may_retry {
                        return Err(f.error);
                    }
                    tracing::debug!(%endpoint, error = %f.error, "etcd endpoint failed, trying the next");
                    last = Some(f.error);
                }
            }
        }
        Err(last.unwrap_or_else(|| MetaError::Unavailable {
            endpoint: self.endpoints.join(","),
            detail: "no endpoint".into(),
        }))
    }

    /// One POST to one endpoint; the body of a 200 answer.
    fn post(
        &self,
        endpoint: &str,
        path: &str,
        body: &Value,
        lease: Option<LeaseId>,
    ) -> Result<Vec<u8>, Failed> {
        let operation = path.trim_start_matches("/v3/");
        let url = format!("{endpoint}{path}");
        let transport = |e: ureq::Error| self.transport_failure(endpoint, operation, e);
        let mut response = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response
            .body_mut()
            .with_config()
            .limit(RESPONSE_MAX_BYTES)
            .read_to_vec()
            .map_err(transport)?;
        if status == 200 {
            return Ok(bytes);
        }
        Err(status_failure(endpoint, status, &bytes, lease))
    }

    fn transport_failure(&self, endpoint: &str, operation: &str, e: ureq::Error) -> Failed {
        use std::io::ErrorKind;
        let not_sent = match &e {
            ureq::Error::ConnectionFailed | ureq::Error::HostNotFound => true,
            ureq::Error::Timeout(t) => {
                matches!(t, ureq::Timeout::Connect | ureq::Timeout::Resolve)
            }
            ureq::Error::Io(io) => io.kind() == ErrorKind::ConnectionRefused,
            _ => false,
        };
        let error = match e {
            ureq::Error::Timeout(_) => MetaError::Timeout {
                endpoint: endpoint.into(),
                operation: operation.into(),
                timeout_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
            },
            other => MetaError::Unavailable {
                endpoint: endpoint.into(),
                detail: other.to_string(),
            },
        };
        Failed {
            error,
            not_sent,
            endpoint_fault: true,
        }
    }
}

/// Map a non-200 gateway answer to an error.
fn status_failure(endpoint: &str, status: u16, bytes: &[u8], lease: Option<LeaseId>) -> Failed {
    let Ok(body) = serde_json::from_slice::<ErrorBody>(bytes) else {
        // Not the gateway speaking (a proxy, or a server that is not etcd).
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(200)]).into_owned();
        return Failed {
            error: MetaError::Unavailable {
                endpoint: endpoint.into(),
                detail: format!("HTTP {status}: {}", text.trim()),
            },
            not_sent: false,
            endpoint_fault: status >= 500 || status == 404,
        };
    };
    let code = body.code();
    let message = body.message;
    let (error, endpoint_fault) = match code {
        wire::GRPC_UNAVAILABLE => (
            MetaError::Unavailable {
                endpoint: endpoint.into(),
                detail: message,
            },
            true,
        ),
        wire::GRPC_DEADLINE_EXCEEDED => (
            MetaError::Unavailable {
                endpoint: endpoint.into(),
                detail: format!("deadline exceeded: {message}"),
            },
            true,
        ),
        wire::GRPC_NOT_FOUND if message.contains("lease not found") && lease.is_some() => {
            let lease = lease.unwrap_or(LeaseId(0));
            (MetaError::LeaseExpired { lease }, false)
        }
        _ => (
            MetaError::Rejected {
                endpoint: endpoint.into(),
                code,
                message,
            },
            false,
        ),
    };
    Failed {
        error,
        not_sent: false,
        endpoint_fault,
    }
}

impl MetaStore for EtcdMetaStore {
    fn get(&self, key: &str) -> Result<Option<Versioned>, MetaError> {
        check_key(key)?;
        let body = json!({"key": b64(key.as_bytes())});
        let r: RangeResponse = self.shared.call("/v3/kv/range", &body, Retry::Always)?;
        match r.kvs.first() {
            Some(kv) => Ok(Some(kv.decode("etcd range")?.1)),
            None => Ok(None),
        }
    }

    fn list_with_revision(
        &self,
        prefix: &str,
    ) -> Result<(Vec<(String, Versioned)>, Revision), MetaError> {
        let (key, end) = prefix_range(prefix);
        let body = json!({"key": b64(&key), "range_end": b64(&end)});
        let r: RangeResponse = self.shared.call("/v3/kv/range", &body, Retry::Always)?;
        let items = r
            .kvs
            .iter()
            .map(|kv| kv.decode("etcd range"))
            .collect::<Result<Vec<_>, _>>()?;
        Ok((items, r.header.revision))
    }

    fn compare_and_put(
        &self,
        key: &str,
        expected: Revision,
        value: &[u8],
        lease: Option<LeaseId>,
    ) -> Result<Revision, MetaError> {
        check_key(key)?;
        let put = put_request(key, value, lease);
        let txn = match self.txn(key, expected, json!({"request_put": put})) {
            Err(MetaError::Rejected { code, message, .. })
                if code == wire::GRPC_NOT_FOUND && message.contains("lease not found") =>
            {
                return Err(MetaError::LeaseExpired {
                    lease: lease.unwrap_or(LeaseId(0)),
                })
            }
            other => other?,
        };
        if txn.succeeded {
            Ok(txn.header.revision)
        } else {
            Err(conflict(key, &txn))
        }
    }

    fn compare_and_delete(&self, key: &str, expected: Revision) -> Result<(), MetaError> {
        check_key(key)?;
        let delete = json!({"request_delete_range": {"key": b64(key.as_bytes())}});
        let txn = self.txn(key, expected, delete)?;
        if txn.succeeded {
            Ok(())
        } else {
            Err(conflict(key, &txn))
        }
    }

    fn put(&self, key: &str, value: &[u8], lease: Option<LeaseId>) -> Result<Revision, MetaError> {
        check_key(key)?;
        let body = put_request(key, value, lease);
        let r: HeaderOnly =
            self.shared
                .call_with_lease("/v3/kv/put", &body, Retry::IfNotSent, lease)?;
        Ok(r.header.revision)
    }

    fn delete(&self, key: &str) -> Result<(), MetaError> {
        check_key(key)?;
        let body = json!({"key": b64(key.as_bytes())});
        self.shared
            .call::<HeaderOnly>("/v3/kv/deleterange", &body, Retry::IfNotSent)
            .map(drop)
    }

    fn grant_lease(&self, ttl: Duration) -> Result<LeaseId, MetaError> {
        check_ttl(ttl)?;
        let ttl_s = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let body = json!({"TTL": ttl_s.to_string()});
        let r: wire::LeaseGrantResponse =
            self.shared
                .call("/v3/lease/grant", &body, Retry::IfNotSent)?;
        if !r.error.is_empty() || r.id == 0 {
            return Err(MetaError::Rejected {
                endpoint: self.shared.endpoints.join(","),
                code: -1,
                message: format!("lease grant failed: {}", r.error),
            });
        }
        Ok(LeaseId(r.id))
    }

    fn keep_alive(&self, lease: LeaseId) -> Result<bool, MetaError> {
        // A streaming call: the gateway answers one message per request message, then ends
        // the stream when our (single-message) request body ends.
        let body = json!({"ID": lease.0.to_string()});
        let path = "/v3/lease/keepalive";
        let msg: wire::StreamMessage<wire::KeepAliveResponse> =
            self.shared.call(path, &body, Retry::Always)?;
        if let Some(error) = msg.error {
            return Err(MetaError::Rejected {
                endpoint: self.shared.endpoints.join(","),
                code: -1,
                message: format!("lease keepalive failed: {error}"),
            });
        }
        Ok(msg.result.is_some_and(|r| r.ttl_s > 0))
    }

    fn revoke_lease(&self, lease: LeaseId) -> Result<(), MetaError> {
        let body = json!({"ID": lease.0.to_string()});
        match self
            .shared
            .call::<HeaderOnly>("/v3/lease/revoke", &body, Retry::Always)
        {
            Ok(_) => Ok(()),
            Err(MetaError::Rejected { code, .. }) if code == wire::GRPC_NOT_FOUND => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn watch(&self, prefix: &str, after: Revision) -> Result<Watch, MetaError> {
        watch::start(self.shared.clone(), prefix, after)
    }
}

fn put_request(key: &str, value: &[u8], lease: Option<LeaseId>) -> Value {
    let mut put = json!({"key": b64(key.as_bytes()), "value": b64(value)});
    if let Some(lease) = lease {
        put["lease"] = json!(lease.0.to_string());
    }
    put
}
