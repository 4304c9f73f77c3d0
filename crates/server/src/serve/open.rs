//! Opening what a c.node serves from: its engine (on the local store, or in a cluster with
//! its placement, ownership and epoch) and its SCSI reservation records.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use weft_dnode_client::{ClientOptions, RemoteChunkStore};
use weft_engine::{Engine, EngineConfig};

use super::Backend;
use crate::cluster::ClusterPlacement;
use crate::ha::takeover::{own_the_cluster, Who};
use crate::reservation_records::ReservationRecords;

/// The SCSI reservation records: in the cluster's metadata store (`cluster_kv`), or in the
/// data dir of a single-process server. A single-process start is a power-on for the LUs, so
/// records without APTPL go; a c.node start is a failover (another c.node served the LUs, or
/// will after it), so they stay.
pub(super) async fn open_reservation_records(
    data_dir: &Path,
    cluster: Option<ReservationRecords>,
    cluster_kv: Option<(Arc<dyn weft_meta::MetaStore>, weft_engine::ShardId)>,
    engine: &Arc<Engine>,
) -> anyhow::Result<ReservationRecords> {
    let data_dir = data_dir.to_path_buf();
    let engine = Arc::clone(engine);
    tokio::task::spawn_blocking(move || {
        let failover = cluster.is_some();
        let records = match cluster {
            Some(records) => records,
            None => ReservationRecords::open_local(&data_dir).with_context(|| {
                format!(
                    "opening the reservation records in {}",
                    data_dir
                        .join(crate::reservation_records::RESERVATIONS_DIR)
                        .display()
                )
            })?,
        };
        let exports = engine.list_images().into_iter().map(|i| i.name).collect();
        // In a cluster, another shard's exports are not this engine's to power on.
        let foreign = |export: &str| match &cluster_kv {
            Some((kv, shard)) => {
                let volume = export.split('@').next().unwrap_or(export);
                weft_engine::name_claims::shard_of(&**kv, volume)
                    .map_or(true, |claim| claim.is_some_and(|s| s != *shard))
            }
            None => false,
        };
        let dropped = records
            .power_on(&exports, failover, &foreign)
            .context("clearing the SCSI reservations a restart ends")?;
        if dropped > 0 {
            tracing::info!(
                records = dropped,
                "scsi reservations without APTPL (or of deleted volumes) cleared at start"
            );
        }
        Ok(records)
    })
    .await?
}

/// Open the engine on its backend; in cluster mode also the placement, the ownership and
/// the cluster's metadata store.
pub(super) fn open_engine(
    config: EngineConfig,
    backend: Backend,
    kv: Option<Arc<dyn weft_meta::MetaStore>>,
    placement_slot: &crate::recovering::PlacementSlot,
    who: Who,
) -> anyhow::Result<Opened> {
    let data_dir = config.data_dir.clone();
    let c = match backend {
        Backend::Local(store) => {
            let engine = Engine::open_local(config, store)
                .with_context(|| format!("opening the datastore in {}", data_dir.display()))?;
            return Ok(Opened {
                engine,
                cluster: None,
                ownership: None,
                compute: None,
            });
        }
        Backend::Cluster(c) => c,
    };
    let kv = match kv {
        Some(kv) => kv,
        None => {
            weft_meta::connect_etcd(&c.url).with_context(|| format!("connecting to {}", c.url))?
        }
    };
    let crate::ha::takeover::Owned {
        ownership,
        write_log,
        compute,
    } = own_the_cluster(&kv, &c.ha, &config, who, None)?;
    let epoch = crate::shard_host::take_epoch(&*kv)?;
    let cluster_id = c.cluster_id.clone();
    let connect: Box<crate::cluster::placement::Connector> = Box::new(move |id, addr| {
        Arc::new(RemoteChunkStore::new(
            id.to_string(),
            addr,
            cluster_id.clone(),
            ClientOptions::default(),
        ))
    });
    let placement = ClusterPlacement::start(kv.clone(), c.options, connect, c.wait_for_dnodes)
        .context("joining the cluster")?;
    let _ = placement_slot.set(Arc::clone(&placement));
    let engine =
        crate::shard_host::fence_and_open(&kv, &placement, c.ha.shard, epoch, write_log, config)?;
    Ok(Opened {
        engine,
        cluster: Some(placement),
        ownership: Some(ownership),
        compute: Some(compute),
    })
}

/// What `open_engine` opened.
pub(super) struct Opened {
    pub engine: Engine,
    pub cluster: Option<Arc<ClusterPlacement>>,
    pub ownership: Option<Arc<crate::ha::ownership::Ownership>>,
    pub compute: Option<Arc<crate::ha::ComputeInfo>>,
}
