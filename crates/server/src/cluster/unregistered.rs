//! D.nodes the placement-group maps name but that have not registered since this c.node
//! started: finding them ([`named_in_pgmaps`]) and their stand-in chunk store
//! ([`UnreachableStore`], every request fails at once).

use weft_chunk::ChunkStore;
use weft_meta::{get_json, list_json, MetaStore};

use crate::cluster::records::{pgmap_key, PgMap, PoolRecord, POOLS_PREFIX};

/// Every d.node id any stored placement-group map gives a position.
pub(crate) fn named_in_pgmaps(
    kv: &dyn MetaStore,
) -> anyhow::Result<std::collections::BTreeSet<String>> {
    let mut ids = std::collections::BTreeSet::new();
    for (_, record, _) in list_json::<PoolRecord>(kv, POOLS_PREFIX)? {
        if let Some((map, _)) = get_json::<PgMap>(kv, &pgmap_key(&record.name))? {
            ids.extend(map.pgs.into_iter().flatten().flatten());
        }
    }
    Ok(ids)
}

/// The chunk store of a d.node that has not registered since this c.node started: every
/// request fails as unavailable, so reads reconstruct from the others and listings count it
/// as not answering. Replaced by a real connection when the d.node registers.
#[derive(Debug)]
pub(crate) struct UnreachableStore(pub(crate) String);

impl UnreachableStore {
    fn down(&self) -> weft_chunk::ChunkError {
        weft_chunk::ChunkError::Unavailable {
            node: self.0.clone(),
            detail: "not registered since this c.node started".into(),
        }
    }
}

impl ChunkStore for UnreachableStore {
    fn name(&self) -> String {
        self.0.clone()
    }
    fn put(&self, _: &weft_chunk::ChunkMeta, _: &[u8]) -> Result<(), weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn read(
        &self,
        _: &weft_chunk::ChunkKey,
        _: u64,
        _: &mut [u8],
    ) -> Result<(), weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn info(
        &self,
        _: &weft_chunk::ChunkKey,
    ) -> Result<weft_chunk::ChunkInfo, weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn delete(
        &self,
        _: &weft_chunk::ChunkKey,
        _: weft_chunk::Epoch,
    ) -> Result<(), weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn list(&self, _: u64) -> Result<Vec<weft_chunk::ChunkInfo>, weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn families(&self) -> Result<Vec<u64>, weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn fence(&self, _: u64, _: weft_chunk::Epoch) -> Result<(), weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn stat(&self) -> Result<weft_chunk::StoreStat, weft_chunk::ChunkError> {
        Err(self.down())
    }
    fn scrub(&self, _: Option<u64>) -> Result<weft_chunk::ScrubReport, weft_chunk::ChunkError> {
        Err(self.down())
    }
}
