//! The heat in etcd too, so a c.node that takes a shard over after a failover finds the heat
//! the old owner counted instead of starting cold: one key per shard, `weft/heat/<shard>`,
//! written by the shard's owner every persist interval (when it changed) and at shutdown,
//! and read by a new owner when it takes the shard over; per volume, the copy folded later
//! (etcd's or the local heat file's) wins.
//!
//! Value: `WEFTHEZ1`, then the heat file's encoding (`super::heat_file`, BLAKE3 included)
//! compressed with LZ4 (the size prepended, u32 little-endian). It is kept under
//! [`HEAT_VALUE_MAX_BYTES`]: past it, the coldest extents' heat is left out of the value (they
//! read as cold after a failover; the local heat file keeps them).
//!
//! Who writes: only the owner, and only while its lease is surely alive (`may_write`); each
//! write is a compare-and-put on the revision this c.node last saw, so a deposed owner whose
//! late write lands after the new owner wrote is refused. A deposed owner's write landing
//! between the new owner's read and its first write replaces the value with heat at most one
//! persist interval older, until the new owner's next write: statistics, never data. Nothing
//! deletes the key (heat of deleted volumes leaves the value at the next write).

use std::sync::Arc;

use parking_lot::Mutex;
use weft_meta::{MetaError, MetaStore, Revision};

use super::heat::{Rings, Slot};
use super::heat_file::{self, SavedVolume};

pub const HEAT_PREFIX: &str = "weft/heat/";
/// Largest value written: well under etcd's 1.5 MiB request limit, with room for the rest of
/// the request.
pub const HEAT_VALUE_MAX_BYTES: usize = 1 << 20;
/// Largest decompressed value read (a corrupt size must not allocate without bound): the
/// heat file of 256 TiB of volumes, every extent warm at 64 MiB.
const HEAT_RAW_MAX_BYTES: usize = 2 << 30;
const MAGIC: &[u8; 8] = b"WEFTHEZ1";
/// Extents left out per round when the value is too large: a tenth of the warm ones.
const FIT_ROUND_SHARE: usize = 10;

/// The key of a shard's heat.
pub fn key(shard: u16) -> String {
    format!("{HEAT_PREFIX}{shard}")
}

/// The value for `volumes`, and how many warm extents were left out to fit it.
pub fn encode(volumes: &[SavedVolume]) -> (Vec<u8>, usize) {
    let mut volumes = volumes.to_vec();
    let mut left_out = 0;
    loop {
        let value = compress(&heat_file::encode(&volumes));
        if value.len() <= HEAT_VALUE_MAX_BYTES {
            return (value, left_out);
        }
        let dropped = drop_coldest(&mut volumes);
        if dropped == 0 {
            return (value, left_out); // nothing warm left: cannot happen below the limit
        }
        left_out += dropped;
    }
}

pub fn decode(bytes: &[u8]) -> Result<Vec<SavedVolume>, String> {
    let body = bytes.strip_prefix(MAGIC).ok_or("not a heat value")?;
    let raw_len = body
        .get(..4)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes)
        .ok_or("truncated")?;
    if usize::try_from(raw_len).unwrap_or(usize::MAX) > HEAT_RAW_MAX_BYTES {
        return Err(format!("{raw_len} bytes decompressed: too large"));
    }
    let raw = lz4_flex::block::decompress_size_prepended(body).map_err(|e| e.to_string())?;
    heat_file::decode(&raw)
}

fn compress(raw: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&lz4_flex::block::compress_prepend_size(raw));
    out
}

/// Clears the rings of the coldest tenth of the warm extents (by week counts); how many.
fn drop_coldest(volumes: &mut [SavedVolume]) -> usize {
    let mut warm: Vec<(u64, usize, usize)> = Vec::new();
    for (v, saved) in volumes.iter().enumerate() {
        for (e, rings) in saved.folded.rings.iter().enumerate() {
            if *rings != Rings::default() || saved.folded.bytes.get(e) != Some(&Slot::default()) {
                let week = rings.sum(super::Window::Week);
                warm.push((week.reads.saturating_add(week.writes), v, e));
            }
        }
    }
    warm.sort_unstable();
    let count = warm.len().div_ceil(FIT_ROUND_SHARE);
    for &(_, v, e) in &warm[..count] {
        volumes[v].folded.rings[e] = Rings::default();
        if let Some(b) = volumes[v].folded.bytes.get_mut(e) {
            *b = Slot::default();
        }
    }
    count
}

/// Whether this c.node may write the shard's heat now (it owns the shard, its lease surely
/// alive).
pub type MayWrite = Box<dyn Fn() -> bool + Send + Sync>;

/// A shard's heat in etcd, as its owner reads and writes it.
pub struct HeatMirror {
    kv: Arc<dyn MetaStore>,
    key: String,
    may_write: MayWrite,
    /// The key's revision as this c.node last read or wrote it (0: absent), and the hash of
    /// the value it last wrote (an unchanged heat is not written again).
    last: Mutex<(Revision, Option<blake3::Hash>)>,
}

impl std::fmt::Debug for HeatMirror {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeatMirror")
            .field("key", &self.key)
            .finish_non_exhaustive()
    }
}

impl HeatMirror {
    pub fn new(kv: Arc<dyn MetaStore>, shard: u16, may_write: MayWrite) -> HeatMirror {
        HeatMirror {
            kv,
            key: key(shard),
            may_write,
            last: Mutex::new((0, None)),
        }
    }

    /// The shard's heat as the last owner wrote it (none: no key, or one that does not
    /// decode, reported).
    pub fn load(&self) -> Vec<SavedVolume> {
        match self.kv.get(&self.key) {
            Ok(Some(v)) => {
                self.last.lock().0 = v.mod_revision;
                decode(&v.value).unwrap_or_else(|e| {
                    tracing::warn!(key = %self.key, "ignoring the heat in etcd: {e}");
                    Vec::new()
                })
            }
            Ok(None) => Vec::new(),
            Err(e) => {
                tracing::warn!(key = %self.key, "cannot read the heat in etcd: {e}");
                Vec::new()
            }
        }
    }

    /// Writes `volumes` if this c.node may and they changed since its last write.
    pub fn save(&self, volumes: &[SavedVolume]) -> anyhow::Result<()> {
        if !(self.may_write)() {
            return Ok(());
        }
        let (value, left_out) = encode(volumes);
        if left_out > 0 {
            tracing::warn!(
                key = %self.key,
                extents = left_out,
                "the heat exceeds what etcd keeps: the coldest extents are left out of it"
            );
        }
        let hash = blake3::hash(&value);
        let mut last = self.last.lock();
        if last.1 == Some(hash) {
            return Ok(());
        }
        let revision = match self.kv.compare_and_put(&self.key, last.0, &value, None) {
            Ok(r) => r,
            // Another writer since this c.node's last read: the new owner's (then this
            // c.node was deposed and stays quiet) or a deposed owner's late write (then this
            // c.node, still owner, writes over it).
            Err(MetaError::Conflict { .. }) if (self.may_write)() => {
                let current = self.kv.get(&self.key)?.map_or(0, |v| v.mod_revision);
                self.kv.compare_and_put(&self.key, current, &value, None)?
            }
            Err(e) => return Err(e.into()),
        };
        *last = (revision, Some(hash));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::heat::Folded;
    use super::*;

    const TIB: u64 = 1 << 40;
    const EXTENT: u64 = 64 << 20;

    /// A volume of `size` with every extent read `reads(i)` times in each of the last 24
    /// hours: the rings as a day of hourly folds leaves them.
    fn warm_volume(name: &str, size: u64, reads: impl Fn(u64) -> u64) -> SavedVolume {
        let extents = size / EXTENT;
        let mut rings = Vec::new();
        let mut bytes = Vec::new();
        for i in 0..extents {
            let r = reads(i);
            let small = u32::try_from(r).unwrap();
            let mut ring = Rings::default();
            for s in &mut ring.hour {
                s.reads = small.div_ceil(12);
            }
            for s in &mut ring.day {
                s.reads = small;
            }
            ring.week[0].reads = 24 * r;
            rings.push(ring);
            bytes.push(Slot {
                reads: 24 * r * 4096,
                writes: 0,
            });
        }
        SavedVolume {
            name: name.into(),
            extent_bytes: EXTENT,
            folded: Folded {
                started_s: 1_000_000,
                folded_s: 1_086_400,
                rings,
                bytes,
            },
        }
    }

    #[test]
    fn the_value_round_trips_and_a_damaged_one_is_refused() {
        let saved = vec![warm_volume("pg", 1 << 30, |i| i + 1)];
        let (value, left_out) = encode(&saved);
        assert_eq!(left_out, 0);
        assert_eq!(decode(&value).unwrap(), saved);
        let mut flipped = value.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(decode(&flipped).is_err());
        assert!(decode(b"WEFTHEZ1").is_err());
        assert!(decode(&value[..value.len() / 2]).is_err());
        assert_eq!(key(3), "weft/heat/3");
    }

    #[test]
    fn a_tib_of_warm_extents_fits_and_more_leaves_the_coldest_out() {
        // 1 TiB, every extent warm (its own count each hour): the size per TiB.
        let one = vec![warm_volume("a", TIB, |i| i % 200 + 1)];
        let raw = heat_file::encode(&one).len();
        let (value, left_out) = encode(&one);
        eprintln!(
            "1 TiB every extent warm: heat file {raw} bytes, etcd value {} bytes",
            value.len()
        );
        assert_eq!(left_out, 0, "{} bytes", value.len());
        assert!(value.len() < HEAT_VALUE_MAX_BYTES);
        // 4 TiB warm does not fit: the coldest extents go, the hottest stay.
        let four: Vec<SavedVolume> = (0..4)
            .map(|v| warm_volume(&format!("v{v}"), TIB, move |i| (i + v * 7) % 200 + 1))
            .collect();
        let (value, left_out) = encode(&four);
        assert!(value.len() <= HEAT_VALUE_MAX_BYTES, "{}", value.len());
        assert!(left_out > 0);
        let back = decode(&value).unwrap();
        let hottest = back[0].folded.rings[199].sum(super::super::Window::Week);
        assert_eq!(hottest.reads, 200 * 24);
        let coldest = back[0].folded.rings[0].sum(super::super::Window::Week);
        assert_eq!(coldest.reads, 0, "the coldest extent was kept");
    }
}
