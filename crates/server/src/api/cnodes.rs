//! `GET /api/v1/cnodes`: the cluster's c.nodes (their registrations in etcd, see
//! [`crate::ha::registry`]), the shard each serves, which one owns each shard (the shard's
//! ownership record, the only authority), how many families the answering owner has and how
//! its write buffer is protected, and which c.node holds its mirror. `POST /api/v1/cnodes/{id}/drain[?force=true]`: the owner hands
//! the cluster over to its standby (a planned switchover, for maintenance).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiState, ErrorBody, QueryArgs};
use crate::ha::ownership::Ownership;
use crate::ha::registry::{self, CnodeRole};
use crate::ha::shard_handover;

/// A c.node as `weft cnode list` shows it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CnodeStatus {
    pub id: String,
    /// The shard it serves (`weft cnode --shard`): a set of families with its own owner.
    pub shard: u16,
    /// The shards it owns besides its own (named at its start or adopted from a drained
    /// c.node), each checked against the shard's ownership record.
    pub shards: Vec<u16>,
    /// What it says it does: owner, standby or waiting.
    pub role: CnodeRole,
    /// It holds its shard's ownership lease now (from the ownership record, not its own
    /// word).
    pub owner: bool,
    /// The c.node answering this request.
    pub this: bool,
    pub api: String,
    pub nbd: String,
    pub iscsi: String,
    pub mirror_listen: Option<String>,
    /// Where it keeps the write-buffer mirrors of shards other c.nodes own besides their
    /// own (each such shard mirrors to one c.node's).
    pub shard_mirror: Option<String>,
    /// Its forward listener: where the owner takes other c.nodes' forwarded requests.
    pub forward: Option<String>,
    /// Its ALUA target port group and that group's state for every LU:
    /// `active/optimized` (the owner) or `active/non-optimized` (it forwards to the owner).
    pub port_group: Option<u16>,
    pub alua_state: Option<String>,
    /// The mirror address it mirrors its write buffer to.
    pub partner: Option<String>,
    /// Volume and snapshot families it owns (every one of its shard, for the owner; `None`:
    /// the owner of another shard than the answering c.node's, which does not know).
    pub families: Option<u64>,
    /// The owner's write buffer: `mirrored`, `degraded` or `single` (only the owner says).
    pub write_buffer: Option<String>,
    /// This c.node is the owner's partner: it holds the owner's write-buffer mirror
    /// (`in sync` when the owner says `mirrored`).
    pub mirror_of: Option<String>,
    pub pid: u32,
    pub version: String,
    pub started_unix_s: u64,
}

/// Every registered c.node.
#[utoipa::path(
    get,
    path = "/api/v1/cnodes",
    operation_id = "list_cnodes",
    tag = "cluster",
    security(("bearer" = [])),
    responses(
        (status = 200, description = "Every registered c.node, the owner first", body = Vec<CnodeStatus>),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 409, description = "Single-process datastore: no cluster", body = ErrorBody),
        (status = 503, description = "etcd did not answer", body = ErrorBody),
    ),
)]
pub(super) async fn list(
    State(state): State<ApiState>,
) -> Result<Json<Vec<CnodeStatus>>, ApiError> {
    let (Some(cluster), Some(compute)) = (state.cluster.clone(), state.compute.clone()) else {
        return Err(ApiError(
            StatusCode::CONFLICT,
            "this is a single-process datastore (weft serve): c.nodes belong to a cluster (weft cnode)".into(),
        ));
    };
    let engine = state.engine.clone();
    let my_shard = compute.shard;
    let answer = tokio::task::spawn_blocking(move || {
        let kv = cluster.kv();
        let records = registry::list(&**kv).map_err(|e| e.to_string())?;
        // Each shard's owner, for the shards the c.nodes serve.
        let mut owners = std::collections::BTreeMap::new();
        let named = records
            .iter()
            .flat_map(|r| std::iter::once(r.shard).chain(r.shards.iter().copied()));
        for shard in named.chain([my_shard]) {
            if let std::collections::btree_map::Entry::Vacant(e) = owners.entry(shard) {
                e.insert(Ownership::owner(&**kv, shard).map_err(|e| format!("{e:#}"))?);
            }
        }
        Ok::<_, String>((owners, records, engine.family_ids().len() as u64))
    })
    .await
    .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    let (owners, records, families) =
        answer.map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e))?;
    let owner_of = |shard| owners.get(&shard).and_then(Option::as_ref);
    let mut out: Vec<CnodeStatus> = records
        .into_iter()
        .map(|r| {
            let owner = owner_of(r.shard);
            let owner_id = owner.map(|o| o.id.clone());
            let owner_partner = owner.map(|o| o.partner.clone()).filter(|p| !p.is_empty());
            // This c.node owns the shard of `r` (so it knows the mirror's state).
            let answering_is_owner =
                r.shard == compute.shard && owner_id.as_deref() == Some(compute.id.as_str());
            let is_owner = owner_id.as_deref() == Some(r.id.as_str());
            let this = r.id == compute.id;
            let holds_mirror =
                !is_owner && r.mirror_listen.is_some() && r.mirror_listen == owner_partner;
            let also: Vec<u16> = r
                .shards
                .iter()
                .filter(|s| owner_of(**s).is_some_and(|o| o.id == r.id))
                .map(|s| s.0)
                .collect();
            CnodeStatus {
                shard: r.shard.0,
                shards: also,
                owner: is_owner,
                this,
                families: match (is_owner, this) {
                    (true, true) => Some(families),
                    (true, false) => None,
                    (false, _) => Some(0),
                },
                write_buffer: (is_owner && this).then(|| compute.write_buffer().to_string()),
                mirror_of: holds_mirror.then(|| {
                    let id = owner_id.clone().unwrap_or_default();
                    match (answering_is_owner, compute.write_buffer()) {
                        (false, _) => id,
                        (true, "mirrored") => format!("{id} (in sync)"),
                        (true, _) => format!("{id} (NOT in sync: the owner's mirror is degraded)"),
                    }
                }),
                id: r.id,
                role: r.role,
                api: r.api,
                nbd: r.nbd,
                iscsi: r.iscsi,
                mirror_listen: r.mirror_listen,
                shard_mirror: r.shard_mirror,
                forward: r.forward,
                alua_state: r.port_group.map(|_| {
                    if is_owner {
                        "active/optimized".to_string()
                    } else {
                        "active/non-optimized".to_string()
                    }
                }),
                port_group: r.port_group,
                partner: r.partner,
                pid: r.pid,
                version: r.version,
                started_unix_s: r.started_unix_s,
            }
        })
        .collect();
    out.sort_by(|a, b| (a.shard, !a.owner, &a.id).cmp(&(b.shard, !b.owner, &b.id)));
    Ok(Json(out))
}

/// `POST /api/v1/cnodes/{id}/drain`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct DrainQuery {
    /// Drain the owner even though no standby holds an in-sync mirror: I/O then stops until
    /// a c.node takes over (this one restarted, or a standby once it caught up).
    #[serde(default)]
    pub force: bool,
}

/// What a drain did.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DrainAnswer {
    pub id: String,
    /// The c.node is stopping to hand the cluster over.
    pub draining: bool,
    pub message: String,
    /// The shards handed to other c.nodes (those no standby takes over).
    #[serde(default)]
    pub handovers: Vec<Handover>,
}

/// Drain a c.node: the owner destages, checkpoints, releases its ownership lease and exits,
/// so its standby takes the cluster over at once (no lease time-out); clients reconnect to
/// the standby. A c.node that owns nothing has nothing to drain.
#[utoipa::path(
    post,
    path = "/api/v1/cnodes/{id}/drain",
    operation_id = "drain_cnode",
    tag = "cluster",
    security(("bearer" = [])),
    params(("id" = String, Path, description = "The c.node (weft cnode list)"), DrainQuery),
    responses(
        (status = 202, description = "The owner is handing the cluster over", body = DrainAnswer),
        (status = 200, description = "The c.node owns nothing: nothing to drain", body = DrainAnswer),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such c.node", body = ErrorBody),
        (status = 409, description = "Single-process datastore; or the owner has no standby with an in-sync mirror (without force); or asked of another owner than this c.node", body = ErrorBody),
        (status = 503, description = "etcd did not answer", body = ErrorBody),
    ),
)]
pub(super) async fn drain(
    State(state): State<ApiState>,
    Path(id): Path<String>,
    QueryArgs(query): QueryArgs<DrainQuery>,
) -> Result<(StatusCode, Json<DrainAnswer>), ApiError> {
    let (Some(cluster), Some(compute)) = (state.cluster.clone(), state.compute.clone()) else {
        return Err(ApiError(
            StatusCode::CONFLICT,
            "this is a single-process datastore (weft serve): nothing to hand over".into(),
        ));
    };
    let records = tokio::task::spawn_blocking(move || registry::list(&**cluster.kv()))
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    if id != compute.id {
        let Some(r) = records.iter().find(|r| r.id == id) else {
            return Err(ApiError(
                StatusCode::NOT_FOUND,
                format!("no c.node {id} is registered"),
            ));
        };
        if r.role == CnodeRole::Owner || !r.shards.is_empty() {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!("c.node {id} says it owns the cluster, but this c.node ({}) does: ask the owner", compute.id),
            ));
        }
        return Ok((
            StatusCode::OK,
            Json(DrainAnswer {
                id,
                draining: false,
                message: "it owns no family: nothing to drain. Stopping it leaves the owner's write buffer unmirrored until it is back (or another standby caught up)".into(),
                handovers: Vec::new(),
            }),
        ));
    }
    // The shards no standby takes over: each is handed to another running c.node.
    let mirrored = compute.write_buffer() == "mirrored";
    let mut to_hand: Vec<weft_engine::ShardId> = Vec::new();
    if !mirrored {
        to_hand.push(compute.shard);
    }
    to_hand.extend(compute.registration.extra_shards());
    let plan = match shard_handover::plan_drain(&records, &id, &to_hand, now_unix_s()) {
        Ok(plan) => plan,
        Err(_) if query.force => Vec::new(),
        Err(shard) if shard == compute.shard => {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "no standby holds an in-sync mirror of this c.node's write buffer ({}), and no other running c.node owns a shard to adopt shard {shard}: nobody would take over, and I/O would stop until this c.node is back. Start a standby first, or drain with force",
                    compute.write_buffer()
                ),
            ))
        }
        Err(shard) => {
            return Err(ApiError(
                StatusCode::CONFLICT,
                format!(
                    "no other running c.node owns a shard, so none can adopt shard {shard}, which this c.node owns besides its own: I/O to its volumes would stop until this c.node is back. Start another c.node first, or drain with force"
                ),
            ))
        }
    };
    let kv = state
        .cluster
        .as_ref()
        .map(|c| std::sync::Arc::clone(c.kv()));
    if let Some(kv) = kv.filter(|_| !plan.is_empty()) {
        let asked = plan.clone();
        tokio::task::spawn_blocking(move || {
            asked
                .iter()
                .try_for_each(|record| shard_handover::ask(&*kv, record))
        })
        .await
        .map_err(|e| ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
        .map_err(|e| ApiError(StatusCode::SERVICE_UNAVAILABLE, e.to_string()))?;
    }
    tracing::warn!(cnode = %id, force = query.force, handovers = ?plan, "drain requested");
    compute.drain.notify_one();
    let handed: Vec<String> = plan
        .iter()
        .map(|r| format!("shard {} to c.node {}", r.shard, r.to))
        .collect();
    let standby = if mirrored {
        "; the standby takes its own shard over at once and clients reconnect to it"
    } else {
        ""
    };
    let handed = if handed.is_empty() {
        String::new()
    } else {
        format!("; handing over {}", handed.join(", "))
    };
    Ok((
        StatusCode::ACCEPTED,
        Json(DrainAnswer {
            id,
            draining: true,
            message: format!("destaging, checkpointing and releasing the ownership leases{standby}{handed}. This process then exits: start it again to make it a standby or forwarder"),
            handovers: plan
                .into_iter()
                .map(|r| Handover {
                    shard: r.shard.0,
                    to: r.to,
                })
                .collect(),
        }),
    ))
}

/// A shard a drain hands to another c.node.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Handover {
    pub shard: u16,
    /// The c.node that adopts it.
    pub to: String,
}

fn now_unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
