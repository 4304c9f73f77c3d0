//! Engine errors, split by who must act: the client (bad request), the environment (disk, space,
//! corruption), or nobody (the object is gone).

use crate::units::{BlockId, SegmentId};

/// Why an engine call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    #[error("no volume named {name:?}")]
    UnknownVolume { name: String },
    #[error("a volume named {name:?} already exists")]
    VolumeExists { name: String },
    #[error("the name {name:?} is taken by a {by}: volume names and the names of snapshots made before VOLUME@SNAPSHOT naming share one namespace (they are NBD export names)")]
    NameTaken { name: String, by: &'static str },
    #[error("a snapshot named {name:?} already exists")]
    SnapshotExists { name: String },
    #[error("no snapshot named {name:?}")]
    UnknownSnapshot { name: String },
    #[error("snapshot name {name:?} is ambiguous: it names {}; give the full name VOLUME@SNAPSHOT", candidates.join(", "))]
    AmbiguousSnapshot {
        name: String,
        /// The full names of the snapshots it could mean.
        candidates: Vec<String>,
    },
    #[error("invalid snapshot name {name:?}: {reason}")]
    InvalidSnapshotName { name: String, reason: String },
    #[error("snapshot {snapshot:?} belongs to another family than volume {volume:?}: a volume can only be refreshed to a snapshot of its own family")]
    WrongFamily { snapshot: String, volume: String },
    #[error("snapshot {snapshot:?} was not taken of volume {volume:?}: roll a volume back to one of its own snapshots, or refresh it to another snapshot of its family")]
    NotOwnSnapshot { snapshot: String, volume: String },
    #[error("no consistency group named {name:?}")]
    UnknownGroup { name: String },
    #[error("invalid consistency group request: {reason}")]
    InvalidGroup { reason: String },
    #[error("consistency group {group:?}: {reason}")]
    GroupConflict { group: String, reason: String },
    #[error("no host named {name:?}")]
    UnknownHost { name: String },
    #[error("a host named {name:?} already exists")]
    HostExists { name: String },
    #[error("invalid host definition: {reason}")]
    InvalidHost { reason: String },
    #[error("{export:?} is not mapped to host {host:?}")]
    NotMapped { export: String, host: String },
    #[error("{export:?} is mapped to {}: unmap it first (weft volume unmap {export} --host HOST)", hosts.join(", "))]
    Mapped { export: String, hosts: Vec<String> },
    #[error("{what} is in use: {detail}")]
    InUse { what: String, detail: String },
    #[error("volume {volume:?} has snapshots ({}): delete them first (weft snapshot delete), or delete the volume with its snapshots (weft volume delete --with-snapshots){detail}", snapshots.join(", "))]
    HasSnapshots {
        volume: String,
        snapshots: Vec<String>,
        /// What would stay behind (snapshots clones still use), with a leading separator.
        detail: String,
    },
    #[error("layer chain too deep: {what} would read through more than {max} layers; delete old snapshots (their layers merge into the next one)")]
    ChainTooDeep { what: String, max: usize },
    /// Internal: a trim waits for a queued snapshot merge; never returned to callers.
    #[error("a snapshot merge into this volume is in progress")]
    LayerBusy,
    #[error("invalid volume name {name:?}: use 1-64 characters from [A-Za-z0-9._-], not starting with '.' or '-'")]
    InvalidName { name: String },
    #[error("pool {pool:?}: {reason}")]
    InvalidPool { pool: String, reason: String },
    #[error("volume {volume:?} has no snapshot schedule")]
    NoSchedule { volume: String },
    #[error("invalid snapshot schedule: {reason}")]
    InvalidSchedule { reason: String },
    #[error("invalid size: {reason}")]
    InvalidSize { reason: String },
    #[error("invalid QoS settings: {reason}")]
    InvalidQos { reason: String },
    #[error("request outside the volume or not 4 KiB aligned: offset {offset_bytes}, length {length_bytes}")]
    OutOfRange {
        offset_bytes: u64,
        length_bytes: u64,
    },
    #[error("volume is read-only")]
    ReadOnly,
    #[error("the volume was deleted")]
    Gone,
    #[error("no space left in the datastore")]
    NoSpace,
    #[error("data dir {path} is in use by another weft process")]
    DataDirInUse { path: String },
    #[error("{what} could not finish now: {detail}")]
    MaintenanceFailed { what: &'static str, detail: String },
    #[error("recovery gave up waiting: {0}")]
    RecoveryBlocked(crate::recovery_status::RecoveryWait),
    #[error(transparent)]
    Io(IoFailure),
}

impl From<crate::stripe::StripeError> for EngineError {
    fn from(e: crate::stripe::StripeError) -> EngineError {
        IoFailure::Stripe(e).into()
    }
}

impl From<IoFailure> for EngineError {
    /// A full disk is the client's ENOSPC, not an I/O error.
    fn from(e: IoFailure) -> EngineError {
        if e.is_no_space() {
            EngineError::NoSpace
        } else {
            EngineError::Io(e)
        }
    }
}

/// An environment failure on the data path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IoFailure {
    #[error("disk i/o on {what}: {source}")]
    Disk {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("checksum mismatch in block {block} of segment {segment} (offset {offset_bytes})")]
    Corrupt {
        block: BlockId,
        segment: SegmentId,
        offset_bytes: u64,
    },
    #[error("corrupt metadata in {what}: {detail}")]
    CorruptMetadata { what: String, detail: String },
    #[error(transparent)]
    Stripe(#[from] crate::stripe::StripeError),
    /// A block's segment was moved by GC between lookup and read: look it up again.
    #[error("segment {segment} of family {family} moved while it was read")]
    Moved { family: u64, segment: SegmentId },
}

impl IoFailure {
    pub fn disk(what: impl Into<String>, source: std::io::Error) -> IoFailure {
        IoFailure::Disk {
            what: what.into(),
            source,
        }
    }

    /// True when the underlying error is a full disk.
    pub fn is_no_space(&self) -> bool {
        match self {
            IoFailure::Disk { source, .. } => source.raw_os_error() == Some(libc::ENOSPC),
            IoFailure::Stripe(s) => s.is_no_space(),
            _ => false,
        }
    }

    /// The data moved (GC) or its stripe is gone: worth looking the block up again.
    pub fn is_moved(&self) -> bool {
        match self {
            IoFailure::Moved { .. } => true,
            IoFailure::Stripe(s) => s.is_missing(),
            _ => false,
        }
    }
}
