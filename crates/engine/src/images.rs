//! The images a front end can open (volumes read-write, snapshots read-only), under keys that
//! live as long as an image keeps its contents: refresh and rollback give a volume a new key,
//! so requests of clients that still hold the old one fail ([`EngineError::Gone`]). The
//! catalog switches them; reads and writes look them up. Fields are private: a key and its
//! name change together.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::EngineError;
use crate::metastore::{ClusterState, SnapshotRecord, VolumeRecord};
use crate::units::{FamilyId, LayerId, LogicalBlockSize, VolumeId};

/// An open-able image (a volume, or a snapshot exported read-only).
#[derive(Debug)]
pub(crate) struct Image {
    pub name: String,
    pub family: FamilyId,
    pub size_bytes: u64,
    /// The layer reads start from: a volume's top, a snapshot's own layer.
    pub layer: LayerId,
    /// Writes go to `layer`; false for snapshots.
    pub writable: bool,
    /// Set when the image is deleted, refreshed or rolled back: front ends disconnect.
    pub gone: Arc<AtomicBool>,
    /// The sector size front ends present (metadata: the engine works in 4 KiB blocks).
    pub logical_block_size: LogicalBlockSize,
}

impl Image {
    /// A volume as an open-able image.
    pub fn of_volume(r: &VolumeRecord) -> Image {
        Image {
            name: r.name.clone(),
            family: r.family,
            size_bytes: r.size_bytes,
            layer: r.layer,
            writable: true,
            gone: Arc::new(AtomicBool::new(false)),
            logical_block_size: r.logical_block_size,
        }
    }

    /// A snapshot as a read-only image.
    pub fn of_snapshot(s: &SnapshotRecord) -> Image {
        Image {
            name: s.name.clone(),
            family: s.family,
            size_bytes: s.size_bytes,
            layer: s.layer,
            writable: false,
            gone: Arc::new(AtomicBool::new(false)),
            logical_block_size: s.logical_block_size,
        }
    }
}

/// The images of a cluster state (volumes and visible snapshots), for recovery.
pub(crate) fn images_of(state: &ClusterState) -> Vec<Image> {
    let volumes = state.volumes.iter().map(Image::of_volume);
    let snapshots = state
        .snapshots
        .iter()
        .filter(|s| !s.hidden)
        .map(Image::of_snapshot);
    volumes.chain(snapshots).collect()
}

/// Every open-able image, by key and by name.
#[derive(Debug, Default)]
pub(crate) struct Images {
    by_key: HashMap<VolumeId, Image>,
    keys: HashMap<String, VolumeId>,
    next_key: u64,
}

impl Images {
    /// The image a client opened; `Gone` once it was deleted, refreshed or rolled back.
    pub fn get(&self, key: VolumeId) -> Result<&Image, EngineError> {
        self.by_key.get(&key).ok_or(EngineError::Gone)
    }

    /// The current key of the image with this exact name.
    pub fn key_of(&self, name: &str) -> Option<VolumeId> {
        self.keys.get(name).copied()
    }

    pub fn by_name_mut(&mut self, name: &str) -> Option<&mut Image> {
        let key = self.keys.get(name)?;
        self.by_key.get_mut(key)
    }

    /// Make an image open-able under a new key; returns the key.
    pub fn insert(&mut self, image: Image) -> VolumeId {
        self.next_key += 1;
        let key = VolumeId(self.next_key);
        self.keys.insert(image.name.clone(), key);
        self.by_key.insert(key, image);
        key
    }

    /// Remove an image by name; its clients are told it is gone.
    pub fn remove(&mut self, name: &str) {
        if let Some(key) = self.keys.remove(name) {
            if let Some(image) = self.by_key.remove(&key) {
                image.gone.store(true, Ordering::Release);
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = &Image> {
        self.by_key.values()
    }

    pub fn len(&self) -> usize {
        self.by_key.len()
    }
}
