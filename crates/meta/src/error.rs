//! `MetaError`: every way a metadata store call can fail, with the fields a caller needs to
//! decide whether to retry, re-read, or give up.

use std::path::PathBuf;

use crate::{LeaseId, Revision};

/// Why a metadata store call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetaError {
    /// A compare-and-swap lost: the key's mod revision is not the expected one.
    #[error("compare-and-swap on {key:?} lost: the key is now {}; re-read it and retry",
        match current { Some(r) => format!("at revision {r}"), None => "absent".to_string() })]
    Conflict {
        key: String,
        /// The key's mod revision when the compare failed (None: absent), if the store said.
        current: Option<Revision>,
    },
    /// No endpoint could be reached, or the store said it cannot serve now (no leader...).
    /// For a write, the request may or may not have been applied.
    #[error("metadata store at {endpoint} is unavailable: {detail}")]
    Unavailable { endpoint: String, detail: String },
    /// The store did not answer in time; for a write, it may or may not have been applied.
    #[error("metadata store at {endpoint} did not answer {operation} within {timeout_ms} ms; a write may or may not have been applied")]
    Timeout {
        endpoint: String,
        operation: String,
        timeout_ms: u64,
    },
    /// The store (or the embedded store's file) returned data that does not parse.
    #[error("corrupt metadata from {origin}: {detail}")]
    Corrupt { origin: String, detail: String },
    /// The embedded store could not read or persist its file.
    #[error("metadata file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The lease is gone (expired, revoked, or lost in a restart): its keys were deleted.
    #[error("lease {lease} has expired or was revoked; grant a new lease and re-create its keys")]
    LeaseExpired { lease: LeaseId },
    /// A watch asked for history the store no longer keeps.
    #[error("revision {requested} has been compacted (the oldest watchable revision is {compact_revision}); list again and watch from the listing's revision")]
    Compacted {
        requested: Revision,
        compact_revision: Revision,
    },
    /// The store refused the request (an error status other than the ones above).
    #[error("metadata store at {endpoint} rejected the request (gRPC code {code}): {message}")]
    Rejected {
        endpoint: String,
        code: i64,
        message: String,
    },
    /// An argument the store cannot accept (empty key, zero TTL...).
    #[error("invalid {what}: {reason}")]
    InvalidArgument { what: String, reason: String },
    /// A cluster URL that does not parse.
    #[error(
        "invalid metadata cluster URL {url:?}: {reason}; expected etcd://host:port[,host:port...]"
    )]
    InvalidUrl { url: String, reason: String },
    /// A stored value is not valid JSON for the type a helper decodes it into.
    #[error("value of {key:?} is not a valid {type_name}: {detail}")]
    Decode {
        key: String,
        type_name: &'static str,
        detail: String,
    },
    /// A value could not be encoded as JSON.
    #[error("cannot encode the value for {key:?} as JSON: {detail}")]
    Encode { key: String, detail: String },
    /// A read-modify-write loop lost its compare-and-swap too many times in a row.
    #[error("gave up updating {key:?} after {attempts} attempts lost to concurrent writers")]
    Contended { key: String, attempts: u32 },
}

impl MetaError {
    /// True for failures that may go away by themselves (the store is down, slow or busy):
    /// the caller may retry the same call later. A retried write may apply twice.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            MetaError::Unavailable { .. } | MetaError::Timeout { .. } | MetaError::Contended { .. }
        )
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> MetaError {
        MetaError::Io {
            path: path.into(),
            source,
        }
    }
}
