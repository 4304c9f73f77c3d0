//! Checkpoints: the families' maps and block tables, the list of sealed segments and the
//! counters, in one file, so recovery does not replay the whole log.
//!
//! A checkpoint is taken when no family has an open segment, so it reflects exactly the
//! segments with id < `next_segment_id`. Recovery loads it and replays the segments after it.
//! File: magic `WEFTCKP1`, version u32, body length u64, body CRC32C u32, body. The body is
//! little-endian fixed-width fields (below); maps are raw pages, 8 bytes per entry.

use std::collections::BTreeMap;
use std::path::Path;

use crate::block_map::{BlockMap, PAGE_ENTRIES};
use crate::block_table::{BlockEntry, BlockLocation, BlockTable, TableSnapshot};
use crate::error::IoFailure;
use crate::family::Family;
use crate::metastore::write_atomically;
use crate::units::{BlockId, FamilyId, LayerId, SegmentId};

const CHECKPOINT_FILE: &str = "checkpoint";
const CHECKPOINT_MAGIC: [u8; 8] = *b"WEFTCKP1";
const CHECKPOINT_VERSION: u32 = 1;
const CHECKPOINT_PREAMBLE_BYTES: usize = 24;

/// What the engine knows of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    pub family: FamilyId,
    /// Bytes of the block data area (what GC's live fraction is measured against).
    pub data_bytes: u64,
    /// Bytes on disk.
    pub stored_bytes: u64,
}

/// Lifetime counters carried across restarts (write amplification, GC totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LifetimeCounters {
    pub host_written_bytes: u64,
    pub chunk_written_bytes: u64,
    pub gc_runs: u64,
    pub gc_segments_reclaimed: u64,
    pub gc_bytes_moved: u64,
    pub gc_bytes_reclaimed: u64,
}

/// The decoded contents of a checkpoint.
#[derive(Debug, Default)]
pub struct CheckpointImage {
    pub next_segment_id: u64,
    pub families: Vec<Family>,
    pub sealed: BTreeMap<SegmentId, SealedSegment>,
    pub counters: LifetimeCounters,
}

/// What a checkpoint holds of one family, copied from it cheaply (maps and table share their
/// pages and chunks with the live ones), so it is encoded and written without the engine's
/// lock.
#[derive(Debug, Clone)]
pub struct FamilyImage {
    pub id: FamilyId,
    pub journal_hwm: u64,
    pub layers: Vec<(LayerId, BlockMap)>,
    pub table: TableSnapshot,
}

impl FamilyImage {
    /// Copy a family with no open segment.
    pub fn of(family: &Family) -> FamilyImage {
        assert!(
            family.open.is_none(),
            "checkpoints are taken with no open segment"
        );
        FamilyImage {
            id: family.id,
            journal_hwm: family.journal_hwm,
            layers: family.layers.iter().map(|(&l, m)| (l, m.clone())).collect(),
            table: family.table.snapshot(),
        }
    }
}

/// Serialise the state.
pub fn encode(
    next_segment_id: u64,
    families: &[FamilyImage],
    sealed: &BTreeMap<SegmentId, SealedSegment>,
    counters: LifetimeCounters,
) -> Vec<u8> {
    let mut e = Vec::with_capacity(1 << 20);
    put(&mut e, next_segment_id);
    put(&mut e, families.len() as u64);
    for family in families {
        put(&mut e, family.id.0);
        put(&mut e, family.journal_hwm);
        put(&mut e, family.layers.len() as u64);
        for (layer, map) in &family.layers {
            put(&mut e, layer.0);
            let pages = map.raw_pages();
            put(&mut e, pages.len() as u64);
            for (page_no, entries) in pages {
                put(&mut e, page_no);
                for &v in entries.iter() {
                    put(&mut e, v);
                }
            }
        }
        put(&mut e, family.table.live_blocks());
        for (id, entry) in family.table.live_entries() {
            put(&mut e, id.0);
            put(&mut e, entry.location.segment.0);
            e.extend_from_slice(&entry.location.offset_bytes.to_le_bytes());
            e.extend_from_slice(&entry.location.stored_len_bytes.to_le_bytes());
            e.push(u8::from(entry.location.compressed));
            e.extend_from_slice(&entry.location.crc32c.to_le_bytes());
            e.extend_from_slice(&entry.fingerprint.to_le_bytes());
            e.extend_from_slice(&entry.refcount.to_le_bytes());
        }
    }
    put(&mut e, sealed.len() as u64);
    for (id, s) in sealed {
        put(&mut e, id.0);
        put(&mut e, s.family.0);
        put(&mut e, s.data_bytes);
        put(&mut e, s.stored_bytes);
    }
    let c = counters;
    for v in [
        c.host_written_bytes,
        c.chunk_written_bytes,
        c.gc_runs,
        c.gc_segments_reclaimed,
        c.gc_bytes_moved,
        c.gc_bytes_reclaimed,
    ] {
        put(&mut e, v);
    }
    e
}

/// Write an encoded body as the current checkpoint.
pub fn store(dir: &Path, body: &[u8]) -> Result<(), IoFailure> {
    let mut file = Vec::with_capacity(body.len() + CHECKPOINT_PREAMBLE_BYTES);
    file.extend_from_slice(&CHECKPOINT_MAGIC);
    file.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    file.extend_from_slice(&(body.len() as u64).to_le_bytes());
    file.extend_from_slice(&crc32c::crc32c(body).to_le_bytes());
    file.extend_from_slice(body);
    write_atomically(dir, CHECKPOINT_FILE, &file)
}

/// Load the current checkpoint, if there is one.
pub fn load(dir: &Path) -> Result<Option<CheckpointImage>, IoFailure> {
    let path = dir.join(CHECKPOINT_FILE);
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoFailure::disk(path.display().to_string(), e)),
    };
    let corrupt = |detail: &str| IoFailure::CorruptMetadata {
        what: path.display().to_string(),
        detail: detail.to_string(),
    };
    if bytes.len() < CHECKPOINT_PREAMBLE_BYTES || bytes[..8] != CHECKPOINT_MAGIC {
        return Err(corrupt("bad magic"));
    }
    let mut d = Decoder {
        b: &bytes[8..],
        at: 0,
    };
    let version = d.u32().ok_or_else(|| corrupt("short"))?;
    if version != CHECKPOINT_VERSION {
        return Err(corrupt("unsupported version"));
    }
    let len = d.u64().ok_or_else(|| corrupt("short"))?;
    let crc = d.u32().ok_or_else(|| corrupt("short"))?;
    let body = &bytes[CHECKPOINT_PREAMBLE_BYTES..];
    if body.len() as u64 != len || crc32c::crc32c(body) != crc {
        return Err(corrupt("checksum mismatch"));
    }
    decode(body)
        .map(Some)
        .ok_or_else(|| corrupt("body does not decode"))
}

fn decode(body: &[u8]) -> Option<CheckpointImage> {
    let mut d = Decoder { b: body, at: 0 };
    let mut image = CheckpointImage {
        next_segment_id: d.u64()?,
        ..CheckpointImage::default()
    };
    for _ in 0..d.u64()? {
        let mut family = Family::new(FamilyId(d.u64()?));
        family.journal_hwm = d.u64()?;
        for _ in 0..d.u64()? {
            let layer = LayerId(d.u64()?);
            let mut pages = Vec::new();
            for _ in 0..d.u64()? {
                let page_no = d.u64()?;
                let mut entries = Box::new([0u64; PAGE_ENTRIES]);
                for v in entries.iter_mut() {
                    *v = d.u64()?;
                }
                pages.push((page_no, entries));
            }
            family.layers.insert(layer, BlockMap::from_raw_pages(pages));
        }
        let mut entries = Vec::new();
        for _ in 0..d.u64()? {
            let id = BlockId(d.u64()?);
            let location = BlockLocation {
                segment: SegmentId(d.u64()?),
                offset_bytes: d.u32()?,
                stored_len_bytes: d.u16()?,
                compressed: d.u8()? != 0,
                crc32c: d.u32()?,
            };
            let fingerprint = d.u128()?;
            let refcount = d.u32()?;
            entries.push((
                id,
                BlockEntry {
                    location,
                    fingerprint,
                    refcount,
                },
            ));
        }
        family.table = BlockTable::from_entries(entries);
        image.families.push(family);
    }
    for _ in 0..d.u64()? {
        let id = SegmentId(d.u64()?);
        let s = SealedSegment {
            family: FamilyId(d.u64()?),
            data_bytes: d.u64()?,
            stored_bytes: d.u64()?,
        };
        image.sealed.insert(id, s);
    }
    image.counters = LifetimeCounters {
        host_written_bytes: d.u64()?,
        chunk_written_bytes: d.u64()?,
        gc_runs: d.u64()?,
        gc_segments_reclaimed: d.u64()?,
        gc_bytes_moved: d.u64()?,
        gc_bytes_reclaimed: d.u64()?,
    };
    (d.at == body.len()).then_some(image)
}

fn put(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

struct Decoder<'a> {
    b: &'a [u8],
    at: usize,
}

impl Decoder<'_> {
    fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let bytes = self.b.get(self.at..self.at + N)?;
        self.at += N;
        bytes.try_into().ok()
    }
    fn u8(&mut self) -> Option<u8> {
        self.take::<1>().map(|b| b[0])
    }
    fn u16(&mut self) -> Option<u16> {
        self.take().map(u16::from_le_bytes)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take().map(u32::from_le_bytes)
    }
    fn u64(&mut self) -> Option<u64> {
        self.take().map(u64::from_le_bytes)
    }
    fn u128(&mut self) -> Option<u128> {
        self.take().map(u128::from_le_bytes)
    }
}
