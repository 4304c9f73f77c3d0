//! Recycled chunk files. A deleted chunk's file is kept under `recycle/` (up to
//! [`RECYCLED_FILES_MAX`]) and a later put writes its chunk over it and renames it into
//! place, so under log-structured churn (a stripe written for every stripe GC deletes) a put
//! allocates no inode and few blocks. Creating files while thousands were just deleted is
//! expensive on ext4 (its inode allocator skips recently freed inodes one by one): a fifth of
//! the server's CPU under sequential overwrite before this.
//!
//! Everything under `recycle/` is garbage: whatever a crash leaves there (a file half
//! written over, or a complete chunk that never got its name) is only ever written over.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::disk::Disk;

/// Directory of the store that holds recycled files.
pub(crate) const RECYCLE_DIR: &str = "recycle";
/// At most this many files wait for reuse: a checkpoint retires every segment GC emptied
/// since the last one in one burst (hundreds under sequential overwrite), and the puts that
/// follow should find them all.
pub(crate) const RECYCLED_FILES_MAX: usize = 1024;
/// And at most this many bytes of disk beyond what the store counts as used (a 32nd of a
/// store's capacity when it has one). A put that finds the disk full frees them all.
pub(crate) const RECYCLED_BYTES_MAX: u64 = 4 << 30;

#[derive(Debug, Default)]
pub(crate) struct RecycledFiles {
    /// Path and length of each file waiting.
    waiting: Mutex<Vec<(String, u64)>>,
    next_name: AtomicU64,
    bytes_max: u64,
}

impl RecycledFiles {
    /// The files a previous run left for reuse.
    pub(crate) fn load(disk: &dyn Disk, capacity_bytes: Option<u64>) -> io::Result<RecycledFiles> {
        let bytes_max =
            capacity_bytes.map_or(RECYCLED_BYTES_MAX, |c| (c / 32).min(RECYCLED_BYTES_MAX));
        disk.create_dir_all(RECYCLE_DIR)?;
        let names = disk.list_dir(RECYCLE_DIR)?;
        let next_name = names
            .iter()
            .filter_map(|n| n.parse::<u64>().ok())
            .max()
            .map_or(0, |n| n + 1);
        let mut waiting = Vec::new();
        for name in names {
            let path = format!("{RECYCLE_DIR}/{name}");
            let len = disk.len(&path)?;
            if has_room(&waiting, len, bytes_max) {
                waiting.push((path, len));
            } else {
                disk.remove(&path)?;
            }
        }
        Ok(RecycledFiles {
            waiting: Mutex::new(waiting),
            next_name: AtomicU64::new(next_name),
            bytes_max,
        })
    }

    /// Take a file to write over, if one waits.
    pub(crate) fn take(&self) -> Option<String> {
        self.waiting.lock().pop().map(|(path, _)| path)
    }

    /// Retire the file at `path` (`len_bytes` long): kept for reuse while there is room, else
    /// removed. Fails like a remove (`NotFound` when there is no such file).
    pub(crate) fn give(&self, disk: &dyn Disk, path: &str, len_bytes: u64) -> io::Result<()> {
        let mut waiting = self.waiting.lock();
        if !has_room(&waiting, len_bytes, self.bytes_max) {
            return disk.remove(path);
        }
        let to = format!(
            "{RECYCLE_DIR}/{}",
            self.next_name.fetch_add(1, Ordering::Relaxed)
        );
        disk.rename(path, &to)?;
        waiting.push((to, len_bytes));
        Ok(())
    }

    /// Remove every waiting file (the disk is full: a put needs their blocks).
    pub(crate) fn release_all(&self, disk: &dyn Disk) {
        for (path, _) in std::mem::take(&mut *self.waiting.lock()) {
            if let Err(e) = disk.remove(&path) {
                tracing::warn!(path, error = %e, "could not remove a recycled chunk file");
            }
        }
    }
}

fn has_room(waiting: &[(String, u64)], len_bytes: u64, bytes_max: u64) -> bool {
    let held: u64 = waiting.iter().map(|(_, len)| len).sum();
    waiting.len() < RECYCLED_FILES_MAX && held + len_bytes <= bytes_max
}
