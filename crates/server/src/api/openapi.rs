//! The management API's OpenAPI document, generated from the handlers' `#[utoipa::path]`
//! annotations and the body types' `ToSchema` derives. It is checked in as `docs/openapi.json`
//! (`crates/server/tests/openapi.rs` fails when that file is stale; run
//! `WEFT_UPDATE_OPENAPI=1 cargo test -p weft-server --test openapi` to rewrite it) and served
//! at `GET /api/v1/openapi.json`, without a token: it holds no data.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::{
    audit, cluster, cnodes, groups, hosts, qos, rename, schedules, sessions, shard_moves,
    snapshots, stats, tiers,
};

/// The document (see [`document`]).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "weft management API",
        description = "Volumes, snapshots, clones, hosts and LUN mappings, statistics and the \
                       cluster of a weft datastore. Every route under `/api/v1/` but \
                       `/api/v1/openapi.json` needs the bearer token (`weft-data/api-token`). \
                       Errors are `{\"error\": message}`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    paths(
        super::healthz,
        super::readyz,
        super::version,
        serve,
        super::volumes::list_volumes,
        super::volumes::create_volume,
        super::volumes::volume_info,
        super::volumes::delete_volume,
        super::volumes::resize_volume,
        rename::rename_volume,
        qos::get,
        qos::put,
        qos::clear,
        qos::list,
        qos::get_group,
        qos::put_group,
        qos::clear_group,
        schedules::list,
        schedules::set,
        schedules::remove,
        snapshots::create_snapshot,
        snapshots::refresh_volume,
        snapshots::rollback_volume,
        sessions::of_volume,
        sessions::all,
        snapshots::list_snapshots,
        snapshots::snapshot_info,
        snapshots::delete_snapshot,
        snapshots::create_clone,
        sessions::of_snapshot,
        groups::list,
        groups::create,
        groups::info,
        groups::delete,
        groups::add_members,
        groups::remove_member,
        groups::create_snapshot,
        groups::snapshot_info,
        groups::delete_snapshot,
        groups::clone,
        groups::refresh,
        groups::rollback,
        super::stats,
        super::capacity,
        audit::list,
        stats::volumes,
        stats::stream,
        stats::series,
        super::sync,
        super::gc,
        super::checkpoint,
        cluster::status,
        cluster::repair_now,
        cluster::set_repair_rate,
        cluster::scrub,
        cluster::dnodes,
        cnodes::list,
        cnodes::drain,
        shard_moves::move_shard,
        shard_moves::unpin,
        cluster::dnode_info,
        cluster::dnode_out,
        cluster::dnode_in,
        cluster::pools,
        cluster::create_pool,
        cluster::pool_info,
        tiers::list,
        tiers::set,
        tiers::advice,
        hosts::list,
        hosts::create,
        hosts::info,
        hosts::delete,
        hosts::map,
        hosts::unmap,
        hosts::add_initiator,
        hosts::remove_initiator,
        hosts::set_chap,
        hosts::remove_chap,
    ),
    // Reached by no operation's body: the payload of the `sample` events of the stream.
    components(schemas(stats::NamedSample)),
    modifiers(&BearerToken),
    tags(
        (name = "volumes", description = "Thin volumes, exported over NBD and iSCSI under their name"),
        (name = "snapshots", description = "Read-only snapshots and the thin clones made from them"),
        (name = "groups", description = "Consistency groups: volumes snapshotted, cloned, refreshed and rolled back at one point"),
        (name = "hosts", description = "Database hosts and the LUNs mapped to them"),
        (name = "stats", description = "Engine figures and live per-volume I/O statistics"),
        (name = "maintenance", description = "Sync, GC and checkpoint on demand"),
        (name = "tiering", description = "Tiers and their prices, heat per extent and the advisor's cost model"),
        (name = "cluster", description = "d.nodes, pools, repair and scrub (`weft cnode`)"),
        (name = "probes", description = "Liveness, readiness and this document: no token"),
    ),
)]
pub struct ApiDoc;

/// The `bearer` security scheme the API's operations name.
struct BearerToken;

impl Modify for BearerToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "The token weft writes to `api-token` in its data dir at first start",
                    ))
                    .build(),
            ),
        );
    }
}

/// The management API's OpenAPI document.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}

/// The document as `docs/openapi.json` holds it: pretty-printed JSON (maps in key order) and a
/// final newline.
pub fn document_json() -> String {
    let mut json = document()
        .to_pretty_json()
        .expect("the OpenAPI document serialises");
    json.push('\n');
    json
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    operation_id = "openapi_document",
    tag = "probes",
    responses((status = 200, description = "The OpenAPI document", body = Object, content_type = "application/json")),
)]
pub(super) async fn serve() -> impl IntoResponse {
    static JSON: OnceLock<String> = OnceLock::new();
    (
        [(header::CONTENT_TYPE, "application/json")],
        JSON.get_or_init(document_json).as_str(),
    )
}
