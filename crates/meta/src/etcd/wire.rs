//! The etcd v3 JSON gateway's wire format: base64 keys and values, int64s as JSON strings,
//! proto3 defaults (0, "", false, []) omitted from responses, and `{"error","code","message"}`
//! error bodies (streams wrap messages in `{"result": ...}` or `{"error": ...}`).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde::de::{self, Deserializer};
use serde::Deserialize;

use crate::{MetaError, Revision, Versioned};

/// gRPC status codes the client reacts to.
pub(crate) const GRPC_DEADLINE_EXCEEDED: i64 = 4;
pub(crate) const GRPC_NOT_FOUND: i64 = 5;
pub(crate) const GRPC_OUT_OF_RANGE: i64 = 11;
pub(crate) const GRPC_UNAVAILABLE: i64 = 14;

pub(crate) fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

pub(crate) fn unb64(text: &str, origin: &str) -> Result<Vec<u8>, MetaError> {
    B64.decode(text).map_err(|e| MetaError::Corrupt {
        origin: origin.into(),
        detail: format!("bad base64 from the gateway: {e}"),
    })
}

/// The `[key, range_end)` pair selecting every key that starts with `prefix` (all keys for "").
pub(crate) fn prefix_range(prefix: &str) -> (Vec<u8>, Vec<u8>) {
    if prefix.is_empty() {
        return (vec![0], vec![0]);
    }
    let key = prefix.as_bytes().to_vec();
    let mut end = key.clone();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return (key, end);
        }
    }
    // All 0xff (impossible for UTF-8, kept for completeness): no upper bound.
    (key, vec![0])
}

/// An int64/uint64 the gateway writes as a string (or, leniently, as a number).
fn int_from_json<'de, D: Deserializer<'de>, T: std::str::FromStr>(d: D) -> Result<T, D::Error>
where
    T::Err: std::fmt::Display,
{
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Text(String),
        Number(serde_json::Number),
    }
    let text = match Raw::deserialize(d)? {
        Raw::Text(s) => s,
        Raw::Number(n) => n.to_string(),
    };
    text.parse().map_err(de::Error::custom)
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct Header {
    #[serde(default, deserialize_with = "int_from_json")]
    pub revision: Revision,
}

#[derive(Debug, Deserialize)]
pub(crate) struct KeyValue {
    pub key: String,
    #[serde(default)]
    pub value: String,
    #[serde(default, deserialize_with = "int_from_json")]
    pub mod_revision: Revision,
}

impl KeyValue {
    pub fn decode(&self, origin: &str) -> Result<(String, Versioned), MetaError> {
        let key = String::from_utf8(unb64(&self.key, origin)?).map_err(|e| MetaError::Corrupt {
            origin: origin.into(),
            detail: format!("a key is not UTF-8: {e}"),
        })?;
        let value = unb64(&self.value, origin)?;
        let versioned = Versioned {
            value,
            mod_revision: self.mod_revision,
        };
        Ok((key, versioned))
    }
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct RangeResponse {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub kvs: Vec<KeyValue>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct HeaderOnly {
    #[serde(default)]
    pub header: Header,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct ResponseOp {
    #[serde(default)]
    pub response_range: Option<RangeResponse>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct TxnResponse {
    #[serde(default)]
    pub header: Header,
    #[serde(default)]
    pub succeeded: bool,
    #[serde(default)]
    pub responses: Vec<ResponseOp>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct LeaseGrantResponse {
    #[serde(rename = "ID", default, deserialize_with = "int_from_json")]
    pub id: i64,
    #[serde(default)]
    pub error: String,
}

/// One message of a streamed response (lease keepalive, watch).
#[derive(Debug, Deserialize)]
pub(crate) struct StreamMessage<T> {
    pub result: Option<T>,
    pub error: Option<serde_json::Value>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct KeepAliveResponse {
    #[serde(rename = "TTL", default, deserialize_with = "int_from_json")]
    pub ttl_s: i64,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct WatchResponse {
    #[serde(default)]
    pub created: bool,
    #[serde(default)]
    pub canceled: bool,
    #[serde(default, deserialize_with = "int_from_json")]
    pub compact_revision: Revision,
    #[serde(default)]
    pub cancel_reason: String,
    #[serde(default)]
    pub events: Vec<Event>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct Event {
    /// "PUT" is the proto3 default and so omitted; "DELETE" is spelled out.
    #[serde(rename = "type", default)]
    pub kind: String,
    pub kv: KeyValue,
}

/// The gateway's error body: `{"error": "...", "code": N, "message": "..."}` for unary calls,
/// `{"grpc_code": N, "message": "..."}` inside a stream's `"error"`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ErrorBody {
    #[serde(default)]
    pub code: Option<i64>,
    #[serde(default)]
    pub grpc_code: Option<i64>,
    #[serde(default)]
    pub message: String,
}

impl ErrorBody {
    pub fn code(&self) -> i64 {
        self.code.or(self.grpc_code).unwrap_or(-1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ranges() {
        assert_eq!(prefix_range(""), (vec![0], vec![0]));
        assert_eq!(prefix_range("a/"), (b"a/".to_vec(), b"a0".to_vec()));
        assert_eq!(prefix_range("z"), (b"z".to_vec(), b"{".to_vec()));
    }

    #[test]
    fn ints_as_strings_and_omitted_defaults() {
        let r: RangeResponse = serde_json::from_str(
            r#"{"header":{"revision":"7"},"kvs":[{"key":"YQ==","mod_revision":"5"}]}"#,
        )
        .unwrap();
        assert_eq!(r.header.revision, 7);
        let (k, v) = r.kvs[0].decode("test").unwrap();
        assert_eq!((k.as_str(), v.value.len(), v.mod_revision), ("a", 0, 5));
        let t: TxnResponse = serde_json::from_str(r#"{"header":{"revision":3}}"#).unwrap();
        assert!(!t.succeeded);
        assert_eq!(t.header.revision, 3);
    }
}
