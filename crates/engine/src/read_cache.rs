//! [`ReadCache`]: the c.node's RAM cache of stored blocks read from chunks, bounded in bytes.
//!
//! Keyed by what a stored block *is*, not where it is: its BLAKE3 fingerprint (of the 4 KiB
//! as written) and the CRC32C of its stored bytes. Every image that maps the block (a volume,
//! its snapshots, its clones, every dedup reference) finds the same entry, and an entry can
//! never be stale: the bytes of a fingerprint never change. GC moving a block to another
//! segment keeps its entry valid; a block freed and later written again with other bytes has
//! another fingerprint. The CRC in the key guards against a table entry whose fingerprint
//! does not describe its bytes: both would have to agree by accident.
//!
//! Entries are inserted only by the read path after the normal checks (the stored bytes'
//! CRC32C against the block table, then decompression), and hold the block as restored
//! (4 KiB), so a hit is a copy: no checksum, no decompression, no chunk read.
//!
//! Eviction is CLOCK (second chance) per shard: a hit marks the entry, the hand clears
//! marks and evicts the first unmarked entry. Shards (by fingerprint) keep the lock of one
//! lookup away from the others. No I/O here.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::units::{Fingerprint, BLOCK_SIZE_BYTES};

/// Shards of the cache: enough that 16 NBD workers rarely meet on one lock.
const SHARDS: usize = 16;
/// Bytes an entry is charged: the block plus its key, map slot and ring slot, rounded up.
pub const ENTRY_COST_BYTES: u64 = BLOCK_SIZE_BYTES as u64 + 64;

/// The identity of a stored block: see the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub fingerprint: Fingerprint,
    /// CRC32C of the stored (possibly compressed) bytes.
    pub stored_crc32c: u32,
}

/// The cache's figures for stats and `/metrics`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq, utoipa::ToSchema)]
pub struct ReadCacheStats {
    /// The bound (0: the cache is off).
    pub capacity_bytes: u64,
    /// Bytes charged by the entries held now.
    pub bytes: u64,
    pub entries: u64,
    /// Since start: block reads served from the cache.
    pub hits: u64,
    /// Since start: block reads from chunks that the cache could have served.
    pub misses: u64,
    /// Since start: entries evicted to make room.
    pub evictions: u64,
}

/// See the module doc.
#[derive(Debug)]
pub struct ReadCache {
    capacity_bytes: u64,
    shards: Vec<Mutex<Shard>>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

#[derive(Debug, Default)]
struct Shard {
    map: HashMap<CacheKey, Entry>,
    /// The CLOCK ring: every key of `map` once, oldest first.
    ring: VecDeque<CacheKey>,
    entries_max: usize,
}

#[derive(Debug)]
struct Entry {
    block: Arc<[u8]>,
    /// Read since the hand last passed.
    referenced: bool,
}

impl ReadCache {
    /// A cache of at most `capacity_bytes` (0: off, every call does nothing).
    pub fn new(capacity_bytes: u64) -> ReadCache {
        let entries_per_shard = capacity_bytes / ENTRY_COST_BYTES / SHARDS as u64;
        // A cache smaller than one entry per shard is off, not a cache that thrashes.
        let entries_max = usize::try_from(entries_per_shard).unwrap_or(usize::MAX);
        ReadCache {
            capacity_bytes: if entries_max == 0 { 0 } else { capacity_bytes },
            shards: (0..SHARDS)
                .map(|_| {
                    Mutex::new(Shard {
                        entries_max,
                        ..Shard::default()
                    })
                })
                .collect(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    pub fn is_on(&self) -> bool {
        self.capacity_bytes > 0
    }

    /// Copy the cached block of `key` into `out` (4 KiB); false (a miss) if it is not held.
    pub fn get(&self, key: &CacheKey, out: &mut [u8]) -> bool {
        if !self.is_on() {
            return false;
        }
        let found = {
            let mut shard = self.shard(key).lock();
            shard.map.get_mut(key).map(|e| {
                e.referenced = true;
                e.block.clone()
            })
        };
        match found {
            Some(block) => {
                out.copy_from_slice(&block);
                self.hits.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => {
                self.misses.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// Keep `block` (the restored 4 KiB, verified by the caller) under `key`.
    pub fn insert(&self, key: CacheKey, block: &[u8]) {
        if !self.is_on() {
            return;
        }
        assert_eq!(
            block.len(),
            BLOCK_SIZE_BYTES,
            "the cache holds whole blocks"
        );
        let mut shard = self.shard(&key).lock();
        if shard.map.contains_key(&key) {
            return;
        }
        let mut evicted = 0u64;
        while shard.map.len() >= shard.entries_max {
            let Some(victim) = shard.ring.pop_front() else {
                break;
            };
            let keep = match shard.map.get_mut(&victim) {
                Some(e) if e.referenced => {
                    e.referenced = false;
                    true
                }
                _ => false,
            };
            if keep {
                shard.ring.push_back(victim);
            } else {
                shard.map.remove(&victim);
                evicted += 1;
            }
        }
        shard.map.insert(
            key,
            Entry {
                block: Arc::from(block),
                referenced: false,
            },
        );
        shard.ring.push_back(key);
        drop(shard);
        if evicted > 0 {
            self.evictions.fetch_add(evicted, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> ReadCacheStats {
        let entries: u64 = self.shards.iter().map(|s| s.lock().map.len() as u64).sum();
        ReadCacheStats {
            capacity_bytes: self.capacity_bytes,
            bytes: entries * ENTRY_COST_BYTES,
            entries,
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
        }
    }

    fn shard(&self, key: &CacheKey) -> &Mutex<Shard> {
        // The fingerprint is a cryptographic hash: its low bits are already uniform.
        let index = usize::try_from(key.fingerprint % SHARDS as u128).expect("below SHARDS");
        &self.shards[index]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: u128) -> CacheKey {
        CacheKey {
            fingerprint: n,
            stored_crc32c: n as u32 ^ 0x5a5a,
        }
    }

    fn block(n: u8) -> Vec<u8> {
        vec![n; BLOCK_SIZE_BYTES]
    }

    #[test]
    fn a_hit_returns_the_inserted_block_and_counts() {
        let cache = ReadCache::new(1 << 20);
        let mut out = block(0);
        assert!(!cache.get(&key(7), &mut out));
        cache.insert(key(7), &block(7));
        assert!(cache.get(&key(7), &mut out));
        assert_eq!(out, block(7));
        let other_crc = CacheKey {
            stored_crc32c: 1,
            ..key(7)
        };
        assert!(
            !cache.get(&other_crc, &mut out),
            "the CRC is part of the key"
        );
        let s = cache.stats();
        assert_eq!((s.hits, s.misses, s.entries), (1, 2, 1));
        assert_eq!(s.bytes, ENTRY_COST_BYTES);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_bound() {
        let capacity = 64 * ENTRY_COST_BYTES * SHARDS as u64;
        let cache = ReadCache::new(capacity);
        for n in 0..10_000u32 {
            cache.insert(key(u128::from(n)), &block(n as u8));
            assert!(cache.stats().bytes <= capacity);
        }
        let s = cache.stats();
        assert_eq!(s.entries, 64 * SHARDS as u64, "full, not over");
        assert_eq!(s.evictions, 10_000 - s.entries);
        // The newest entries are the ones kept; each holds its own bytes.
        let mut out = block(0);
        assert!(cache.get(&key(9_999), &mut out));
        assert_eq!(out, block((9_999u32) as u8));
        assert!(!cache.get(&key(0), &mut out));
    }

    #[test]
    fn eviction_gives_read_entries_a_second_chance() {
        // One shard's worth of keys (multiples of SHARDS land in shard 0), 4 entries per shard.
        let cache = ReadCache::new(4 * ENTRY_COST_BYTES * SHARDS as u64);
        let k = |i: u128| key(i * SHARDS as u128);
        for i in 0..4 {
            cache.insert(k(i), &block(i as u8));
        }
        let mut out = block(0);
        assert!(
            cache.get(&k(0), &mut out),
            "k0 is read: it survives the next insert"
        );
        cache.insert(k(4), &block(4));
        assert!(cache.get(&k(0), &mut out));
        assert!(!cache.get(&k(1), &mut out), "the oldest unread entry went");
        assert!(cache.get(&k(4), &mut out));
    }

    #[test]
    fn a_cache_of_size_zero_or_below_one_entry_per_shard_is_off() {
        for capacity in [0, ENTRY_COST_BYTES] {
            let cache = ReadCache::new(capacity);
            assert!(!cache.is_on());
            cache.insert(key(1), &block(1));
            let mut out = block(0);
            assert!(!cache.get(&key(1), &mut out));
            assert_eq!(cache.stats(), ReadCacheStats::default());
        }
    }
}
