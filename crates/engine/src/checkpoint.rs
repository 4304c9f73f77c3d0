//! Checkpoints, one per family: its maps and block table, its sealed-segment list and its next
//! segment id, so recovery does not replay the family's whole log. No I/O here: the
//! checkpointer writes the encoded image as stripes of the family through the stripe store
//! (so it lives on d.nodes, like the segments), and the cluster state points at it
//! ([`CheckpointRef`]), so a c.node on an empty machine finds it.
//!
//! A checkpoint is taken when the family has no open segment, so it reflects exactly its
//! segments with id < `next_segment_id`; recovery loads it and replays the segments after it.
//! Image: magic `WEFTCKP2`, version u32, body length u64, body CRC32C u32, body. The body is
//! little-endian fixed-width fields (below); maps are raw pages, 8 bytes per entry.
//! Checkpoint stripes use segment ids from [`CHECKPOINT_SEGMENT_BASE`] up (data segments stay
//! below it): generation << 20 | part.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weft_ec::Redundancy;

use crate::block_map::{BlockMap, PAGE_ENTRIES};
use crate::block_table::{BlockEntry, BlockLocation, BlockTable, TableSnapshot};
use crate::family::Family;
use crate::units::{BlockId, FamilyId, LayerId, SegmentId};

const CHECKPOINT_MAGIC: [u8; 8] = *b"WEFTCKP2";
const CHECKPOINT_VERSION: u32 = 2;
const CHECKPOINT_PREAMBLE_BYTES: usize = 24;
/// Segment ids at and above this name checkpoint stripes, not log segments.
pub const CHECKPOINT_SEGMENT_BASE: u64 = 1 << 62;
/// A checkpoint image is cut into stripes of at most this many bytes.
pub const CHECKPOINT_PART_MAX_BYTES: u64 = 16 << 20;
const PARTS_PER_GENERATION_MAX: u64 = 1 << 20;

/// Where a family's latest durable checkpoint is; kept in the cluster state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointRef {
    pub generation: u64,
    pub len_bytes: u64,
    pub crc32c: u32,
    /// The redundancy its stripes were written with, as text ("none", "4+2").
    pub redundancy: RedundancyText,
    /// Segments below this id are reflected in it.
    pub segments_below: u64,
}

/// A redundancy as it is stored in JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct RedundancyText(pub Redundancy);

impl From<RedundancyText> for String {
    fn from(r: RedundancyText) -> String {
        r.0.to_string()
    }
}

impl TryFrom<String> for RedundancyText {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Redundancy::parse(&s)
            .map(RedundancyText)
            .map_err(|e| e.to_string())
    }
}

impl CheckpointRef {
    /// The stripe segment ids of its parts, with each part's length.
    pub fn parts(&self) -> Vec<(SegmentId, u64)> {
        checkpoint_parts(self.generation, self.len_bytes)
    }
}

/// The parts of a checkpoint image of `len_bytes` in generation `generation`.
pub fn checkpoint_parts(generation: u64, len_bytes: u64) -> Vec<(SegmentId, u64)> {
    let count = len_bytes.div_ceil(CHECKPOINT_PART_MAX_BYTES).max(1);
    assert!(
        count < PARTS_PER_GENERATION_MAX,
        "checkpoint image too large"
    );
    (0..count)
        .map(|p| {
            let start = p * CHECKPOINT_PART_MAX_BYTES;
            let len = (len_bytes - start).min(CHECKPOINT_PART_MAX_BYTES);
            (
                SegmentId(CHECKPOINT_SEGMENT_BASE | (generation << 20) | p),
                len,
            )
        })
        .collect()
}

/// What the engine knows of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SealedSegment {
    pub family: FamilyId,
    /// How its stripe is protected (what it was written with).
    pub redundancy: Redundancy,
    /// Bytes of the block data area (what GC's live fraction is measured against).
    pub data_bytes: u64,
    /// Bytes on disk.
    pub stored_bytes: u64,
}

/// Lifetime counters carried across restarts (write amplification, GC totals).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LifetimeCounters {
    pub host_written_bytes: u64,
    pub chunk_written_bytes: u64,
    pub gc_runs: u64,
    pub gc_segments_reclaimed: u64,
    pub gc_bytes_moved: u64,
    pub gc_bytes_reclaimed: u64,
}

/// The decoded checkpoint of one family.
#[derive(Debug)]
pub struct FamilyCheckpoint {
    pub next_segment_id: u64,
    pub family: Family,
    pub sealed: BTreeMap<SegmentId, SealedSegment>,
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

/// Serialise one family's checkpoint, with its preamble (magic, version, length, CRC).
pub fn encode(
    next_segment_id: u64,
    family: &FamilyImage,
    sealed: &BTreeMap<SegmentId, SealedSegment>,
) -> Vec<u8> {
    let mut e = Vec::with_capacity(1 << 20);
    put(&mut e, next_segment_id);
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
    put(&mut e, sealed.len() as u64);
    for (id, s) in sealed {
        put(&mut e, id.0);
        put(&mut e, s.data_bytes);
        put(&mut e, s.stored_bytes);
        let r = s.redundancy;
        e.extend_from_slice(&[r.codec_id().to_u8(), r.data_chunks(), r.parity_chunks()]);
    }
    let mut out = Vec::with_capacity(e.len() + CHECKPOINT_PREAMBLE_BYTES);
    out.extend_from_slice(&CHECKPOINT_MAGIC);
    out.extend_from_slice(&CHECKPOINT_VERSION.to_le_bytes());
    out.extend_from_slice(&(e.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32c::crc32c(&e).to_le_bytes());
    out.extend_from_slice(&e);
    out
}

/// Decode one family's checkpoint image; the error says what is wrong.
pub fn decode(bytes: &[u8]) -> Result<FamilyCheckpoint, String> {
    if bytes.len() < CHECKPOINT_PREAMBLE_BYTES || bytes[..8] != CHECKPOINT_MAGIC {
        return Err("bad magic".into());
    }
    let mut d = Decoder {
        b: &bytes[8..],
        at: 0,
    };
    let version = d.u32().ok_or("short")?;
    if version != CHECKPOINT_VERSION {
        return Err(format!("unsupported version {version}"));
    }
    let len = d.u64().ok_or("short")?;
    let crc = d.u32().ok_or("short")?;
    let body = &bytes[CHECKPOINT_PREAMBLE_BYTES..];
    if body.len() as u64 != len || crc32c::crc32c(body) != crc {
        return Err("checksum mismatch".into());
    }
    decode_body(body).ok_or_else(|| "body does not decode".into())
}

fn decode_body(body: &[u8]) -> Option<FamilyCheckpoint> {
    let mut d = Decoder { b: body, at: 0 };
    let next_segment_id = d.u64()?;
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
    let mut sealed = BTreeMap::new();
    for _ in 0..d.u64()? {
        let id = SegmentId(d.u64()?);
        let data_bytes = d.u64()?;
        let stored_bytes = d.u64()?;
        let redundancy = Redundancy::from_parts(d.u8()?, d.u8()?, d.u8()?).ok()?;
        sealed.insert(
            id,
            SealedSegment {
                family: family.id,
                redundancy,
                data_bytes,
                stored_bytes,
            },
        );
    }
    (d.at == body.len()).then_some(FamilyCheckpoint {
        next_segment_id,
        family,
        sealed,
    })
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
