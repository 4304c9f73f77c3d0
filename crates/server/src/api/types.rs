//! The request and response bodies of the management API that are not engine types, shared by
//! the server, the CLI and the tests (`weft_server::api::types`). Each serialises to the JSON
//! the API has always sent; `docs/openapi.json` describes them (see [`super::openapi`]).
//!
//! Request bodies refuse unknown fields; optional ones may be left out.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use weft_engine::{HostInfo, LogicalBlockSize, LunInfo, RepairStatus, SnapshotInfo, VolumeInfo};

use crate::cluster::{NodeState, NodeStatus, PoolStatus};

/// Every error: `{"error": message}`, with the engine's text.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: String,
}

/// `POST /api/v1/volumes`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateVolume {
    pub name: String,
    pub size_bytes: u64,
    /// A pool of the cluster (default: the c.node's pool).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// The sector size hosts see: 512 (the default) or 4096; anything else is a 400.
    #[serde(default)]
    #[schema(default = 512)]
    pub logical_block_size: LogicalBlockSize,
    /// Quality of service from the start (`PUT /api/v1/volumes/{name}/qos` changes it later).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qos: Option<weft_engine::qos_settings::QosSettings>,
}

/// `POST /api/v1/volumes/{name}/resize`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResizeVolume {
    pub size_bytes: u64,
}

/// Body of snapshot create and clone create: the new snapshot's or volume's name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewName {
    pub name: String,
}

/// Body of refresh and rollback: the snapshot the volume is to read.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ToSnapshot {
    pub snapshot: String,
    /// Go on while clients have the volume open (they are disconnected); without it a volume
    /// with sessions is refused with 409.
    #[serde(default)]
    pub force: bool,
}

/// `POST /volumes/{name}/rename`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RenameVolume {
    /// The new name; its snapshots `OLD@x` become `NEW@x`.
    pub name: String,
    /// Go on while clients have the volume or its snapshots open (they are disconnected and
    /// reconnect by the new name); without it a volume with sessions is refused with 409.
    #[serde(default)]
    pub force: bool,
}

/// `POST /hosts/{name}/initiators`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddInitiator {
    /// An iSCSI initiator name (`iqn.`, `eui.` or `naa.`).
    pub iqn: String,
}

/// `PUT /hosts/{name}/chap`: the host's CHAP settings, replacing the old ones. Secrets are
/// 12-255 characters and never shown again.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetChap {
    pub chap_user: String,
    pub chap_secret: String,
    /// The name the target answers mutual CHAP with (default: the CHAP user).
    #[serde(default)]
    pub mutual_chap_user: Option<String>,
    /// Mutual CHAP: the secret the target proves itself with (differs from `chap_secret`).
    #[serde(default)]
    pub mutual_chap_secret: Option<String>,
}

/// `PUT /volumes/{name}/snapshot-schedule`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SetSchedule {
    /// Seconds between snapshots (at least 60).
    pub every_s: u64,
    /// How many of the newest scheduled snapshots to keep (at least 1).
    pub keep: u32,
    /// Also keep the first scheduled snapshot of each of this many newest days.
    #[serde(default)]
    pub daily: u32,
}

/// A snapshot schedule as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Schedule {
    pub volume: String,
    /// Seconds between snapshots.
    pub every_s: u64,
    /// The newest scheduled snapshots kept.
    pub keep: u32,
    /// The first scheduled snapshot of each of this many newest days is kept too.
    pub daily: u32,
    /// When it was set (seconds since the Unix epoch, by the scheduler's clock).
    pub created_unix_s: u64,
    /// When it last fired (`None`: never).
    pub last_run_unix_s: Option<u64>,
    /// When it fires next (seconds since the Unix epoch).
    pub next_run_unix_s: u64,
    /// Its scheduled snapshots now (full names, oldest first).
    pub snapshots: Vec<String>,
}

/// `DELETE /api/v1/volumes/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteVolumeQuery {
    /// Delete its snapshots too (refused without it when it has some).
    #[serde(default)]
    pub with_snapshots: bool,
    /// Go on while clients have the volume (or a snapshot deleted with it) open: they are
    /// disconnected. Without it a volume with sessions is refused with 409.
    #[serde(default)]
    pub force: bool,
}

/// `DELETE /api/v1/snapshots/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DeleteSnapshotQuery {
    /// Hide it instead when clones read through it.
    #[serde(default)]
    pub keep_hidden: bool,
}

/// `GET /api/v1/snapshots`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ListSnapshotsQuery {
    /// Only this volume's snapshots.
    pub volume: Option<String>,
}

/// A volume with the NBD URI it is exported under (its name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Volume {
    #[serde(flatten)]
    pub info: VolumeInfo,
    pub nbd_uri: String,
    /// LUN 0 of the volume's own iSCSI target, when iSCSI is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi_uri: Option<String>,
    /// The clients that have the volume open now (NBD connections, iSCSI sessions).
    #[serde(default)]
    pub sessions: Vec<ExportSession>,
    /// The hosts it is mapped to (`weft volume map`), with the LUN each sees it under.
    #[serde(default)]
    pub hosts: Vec<HostMapping>,
    /// The c.node that owns its family, and the partner holding that c.node's write-buffer
    /// mirror (cluster mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<ServedBy>,
}

/// Which c.node serves an export, and how the writes it acknowledges are protected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ServedBy {
    /// The owner c.node's id (`weft cnode list`).
    pub owner: String,
    /// Its partner's mirror address (`None`: no partner).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partner: Option<String>,
    /// `mirrored`, `degraded` or `single`.
    pub write_buffer: String,
}

/// A host an export is mapped to: the LUN it sees it under on the array target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HostMapping {
    pub host: String,
    pub lun: u64,
    /// `iscsi://PORTAL/ARRAY-TARGET/LUN`, when iSCSI is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi_uri: Option<String>,
}

impl HostMapping {
    /// Every mapping of `export` among `hosts`, by host name.
    pub fn of(
        export: &str,
        hosts: &[HostInfo],
        iscsi_target: &str,
        iscsi_portal: Option<&str>,
    ) -> Vec<HostMapping> {
        hosts
            .iter()
            .flat_map(|h| {
                h.luns
                    .iter()
                    .filter(|l| l.export == export)
                    .map(|l| HostMapping {
                        host: h.name.clone(),
                        lun: l.lun,
                        iscsi_uri: iscsi_portal
                            .map(|p| format!("iscsi://{p}/{iscsi_target}/{}", l.lun)),
                    })
            })
            .collect()
    }
}

/// A snapshot with the NBD URI it is exported under, read-only (its name).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Snapshot {
    #[serde(flatten)]
    pub info: SnapshotInfo,
    pub nbd_uri: String,
    /// LUN 0 of the snapshot's own iSCSI target (`VOLUME:SNAPSHOT`), when iSCSI is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi_uri: Option<String>,
    /// The clients that have the snapshot open now (NBD connections, iSCSI sessions).
    #[serde(default)]
    pub sessions: Vec<ExportSession>,
    /// The hosts it is mapped to, read-only, with the LUN each sees it under.
    #[serde(default)]
    pub hosts: Vec<HostMapping>,
    /// The c.node that owns its family, and its partner (cluster mode only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub served_by: Option<ServedBy>,
}

/// The protocol a client session came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SessionProtocol {
    Nbd,
    Iscsi,
    /// Another c.node serving its clients through this one (the owner).
    Forwarded,
}

impl SessionProtocol {
    pub fn name(self) -> &'static str {
        match self {
            SessionProtocol::Nbd => "nbd",
            SessionProtocol::Iscsi => "iscsi",
            SessionProtocol::Forwarded => "forwarded",
        }
    }
}

/// One client that has an export open: an NBD connection, or an iSCSI session's LUN.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ExportSession {
    /// Unique while the server runs.
    pub id: u64,
    /// The volume or snapshot (full name) it has open.
    pub export: String,
    pub protocol: SessionProtocol,
    /// NBD: the client's address and port; iSCSI: the initiator name.
    pub client: String,
    /// The client's address and port.
    pub address: String,
    /// The host the client was recognised as (by address, TLS name or initiator name).
    pub host: Option<String>,
    /// When it opened the export, RFC 3339 in UTC.
    pub since: String,
    /// The same, in seconds since the Unix epoch.
    pub since_unix_s: u64,
    /// Read requests since it opened the export.
    pub reads: u64,
    /// Write requests since it opened the export.
    pub writes: u64,
    pub read_bytes: u64,
    pub written_bytes: u64,
}

impl ExportSession {
    /// `nbd 127.0.0.1:53010`, `iscsi iqn.1994-05.com.redhat:db1 from 10.0.0.5:40312 (host db1)`.
    pub fn describe(&self) -> String {
        let mut out = format!("{} {}", self.protocol.name(), self.client);
        if self.protocol == SessionProtocol::Iscsi {
            out.push_str(&format!(" from {}", self.address));
        }
        if let Some(host) = &self.host {
            out.push_str(&format!(" (host {host})"));
        }
        out
    }
}

/// `GET /api/v1/version`: the server's version.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Version {
    /// The `weft` release the server runs, e.g. `0.1.0`.
    pub version: String,
}

/// `POST /api/v1/sync`: every acknowledged write is in sealed segments.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Synced {
    /// Always true.
    pub synced: bool,
}

/// `POST /api/v1/checkpoint`: the maps are checkpointed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Checkpointed {
    /// Always true.
    pub checkpointed: bool,
}

/// `GET /api/v1/cluster`, by `mode`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum ClusterStatus {
    /// `weft serve`: one local d.node, no pools.
    SingleProcess(SingleProcessStatus),
    /// `weft cnode`: the cluster's d.nodes and pools.
    Cluster(ClusterWideStatus),
}

/// The status of a single-process datastore (`"mode": "single-process"`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SingleProcessStatus {
    /// The local d.node, alone.
    pub nodes: Vec<LocalNode>,
    /// Always empty.
    pub pools: Vec<PoolStatus>,
    pub repair: RepairStatus,
    pub degraded_reads: u64,
}

/// The local d.node of a single-process datastore.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LocalNode {
    /// `local`.
    pub id: String,
    /// `up`.
    pub state: NodeState,
    /// The `--capacity` limit, else the size of the file system under the local store (as
    /// a cluster d.node reports its disk); null when neither is known.
    pub capacity_bytes: Option<u64>,
    pub used_bytes: u64,
}

/// The status of a cluster (`"mode": "cluster"`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ClusterWideStatus {
    /// Every PG on up d.nodes, and a repair scan started after the last change of the
    /// cluster found nothing left to rebuild.
    pub healthy: bool,
    pub nodes: Vec<NodeStatus>,
    pub pools: Vec<PoolStatus>,
    pub repair: RepairStatus,
    pub degraded_reads: u64,
    pub chunks_missed_at_write: u64,
    pub capacity_bytes: Option<u64>,
    pub used_bytes: u64,
    pub compute: ComputeStatus,
}

/// The compute layer as this c.node (the owner) sees it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ComputeStatus {
    /// This c.node's id: it owns the cluster.
    pub owner: String,
    /// Its partner's mirror address (`None`: no partner).
    pub partner: Option<String>,
    /// `mirrored`: acknowledged writes are in two c.nodes; `degraded`: the partner does not
    /// hold them now; `single`: no partner.
    pub write_buffer: String,
    /// For people: how acknowledged writes are protected, and what losing this machine costs.
    pub detail: String,
    /// Acknowledged bytes in the write buffer not yet destaged (plus up to one open segment
    /// per volume family, also not yet in stripes).
    pub write_buffer_bytes: u64,
    /// A dead owner's partner takes over this long after its last lease renewal.
    pub lease_ttl_ms: u64,
}

/// `POST /api/v1/dnodes/{id}/out` and `/in`: the d.node's new mark.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DnodeOut {
    pub id: String,
    pub out: bool,
}

/// `POST /api/v1/pools`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreatePool {
    pub name: String,
    /// `none`, `x3`, `4+2`, ...
    pub redundancy: String,
    /// Placement groups (default 64).
    pub pg_count: Option<u32>,
    /// Chunks durable before a stripe is (default min(k+1, k+m)).
    pub min_size: Option<u8>,
    /// The storage tier of its d.nodes (default: untiered, on every d.node). Once d.nodes
    /// say their tier (`weft dnode --tier`), the pool is placed on that tier's only.
    #[serde(default)]
    pub tier: Option<String>,
    /// The tier's price, dollars per GB-month (with `price_iops`; default: the tier book's).
    #[serde(default)]
    pub price_gb: Option<f64>,
    /// The tier's price, dollars per IOPS-month (with `price_gb`).
    #[serde(default)]
    pub price_iops: Option<f64>,
}

/// The answer to `POST /api/v1/pools`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PoolCreated {
    pub name: String,
    pub redundancy: String,
    pub pg_count: u32,
    /// Its storage tier (absent: untiered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
}

/// `PUT /api/v1/cluster/repair`, and its answer: the rebuild rate limit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RepairRate {
    /// Above 0.
    pub rate_bytes_per_s: u64,
}

/// `POST /api/v1/cluster/repair`: a repair scan was asked for.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct RepairScan {
    pub scan: ScanState,
}

/// What became of the scan asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ScanState {
    Started,
}

/// `POST /api/v1/cluster/scrub`: what the scrub found (corrupt chunks are being rebuilt).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ScrubReport {
    /// Chunks verified.
    pub checked: u64,
    /// Chunks found corrupt.
    pub corrupt: Vec<String>,
    /// Stores (d.nodes) that could not be scrubbed.
    pub failed_stores: Vec<String>,
}

/// `POST /api/v1/hosts`. CHAP secrets go in here and never come out.
#[derive(Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateHost {
    pub name: String,
    /// iSCSI initiator names.
    #[serde(default)]
    pub iqns: Vec<String>,
    /// Addresses or networks (`10.0.0.0/24`) its NBD connections come from.
    #[serde(default)]
    pub nbd_addresses: Vec<String>,
    /// Names (CN or DNS) of its TLS client certificates.
    #[serde(default)]
    pub tls_names: Vec<String>,
    pub chap_user: Option<String>,
    /// 12-255 characters.
    pub chap_secret: Option<String>,
    /// The name the target answers mutual CHAP with (default: the CHAP user).
    pub mutual_chap_user: Option<String>,
    pub mutual_chap_secret: Option<String>,
}

/// `POST /api/v1/hosts/{name}/luns`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct MapExport {
    /// A volume or snapshot (snapshots are mapped read-only).
    pub export: String,
    /// The LUN (default: the lowest free).
    pub lun: Option<u64>,
}

/// A host, with how to reach its LUNs: everything but the CHAP secrets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Host {
    pub name: String,
    pub iqns: Vec<String>,
    pub nbd_addresses: Vec<String>,
    pub tls_names: Vec<String>,
    /// The CHAP user the initiator must log in as (`null`: no CHAP).
    pub chap_user: Option<String>,
    /// The name the target answers mutual CHAP with (`null`: one-way or no CHAP).
    pub mutual_chap_user: Option<String>,
    pub luns: Vec<Lun>,
    pub created_unix_s: u64,
    /// The array target the host logs in to.
    pub iscsi_target: String,
    /// `host:port` of the first iSCSI portal (`null`: iSCSI is off).
    pub iscsi_portal: Option<String>,
}

/// One LUN of a host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Lun {
    #[serde(flatten)]
    pub info: LunInfo,
    /// `iscsi://portal/target/lun` (absent when iSCSI is off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iscsi_uri: Option<String>,
    /// The shard whose catalog maps it (a cluster of several shards; absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<u16>,
}

/// The answer to `POST /api/v1/hosts/{name}/luns`: the LUN and its host.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MappedLun {
    #[serde(flatten)]
    pub lun: Lun,
    pub host: String,
}

impl Host {
    /// `info` with its LUNs' URIs and the target and portal that serve them.
    pub fn new(info: HostInfo, iscsi_target: &str, iscsi_portal: Option<&str>) -> Host {
        let HostInfo {
            name,
            iqns,
            nbd_addresses,
            tls_names,
            chap_user,
            mutual_chap_user,
            luns,
            created_unix_s,
        } = info;
        Host {
            name,
            iqns,
            nbd_addresses,
            tls_names,
            chap_user,
            mutual_chap_user,
            luns: luns
                .into_iter()
                .map(|l| Lun::new(l, iscsi_target, iscsi_portal))
                .collect(),
            created_unix_s,
            iscsi_target: iscsi_target.to_string(),
            iscsi_portal: iscsi_portal.map(str::to_string),
        }
    }
}

impl Lun {
    /// `info` with its `iscsi://` URI when there is a portal.
    pub fn new(info: LunInfo, iscsi_target: &str, iscsi_portal: Option<&str>) -> Lun {
        Lun {
            iscsi_uri: iscsi_portal.map(|p| format!("iscsi://{p}/{iscsi_target}/{}", info.lun)),
            info,
            shard: None,
        }
    }
}
