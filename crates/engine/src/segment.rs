//! Log segments: the append-only unit of one family, self-describing so that recovery can
//! replay it without any other metadata.
//!
//! Layout of a sealed segment (all integers little-endian):
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `WEFTSEG\0` |
//! | 8 | 2 | format version (1) |
//! | 10 | 1 | erasure codec id (0 = none) |
//! | 11 | 1 | k data chunks |
//! | 12 | 1 | m parity chunks |
//! | 13 | 3 | reserved, zero |
//! | 16 | 8 | segment id |
//! | 24 | 8 | family id |
//! | 32 | 4 | end of the block data area (bytes from the start) |
//! | 36 | 4 | summary length in bytes |
//! | 40 | 8 | journal high-water mark: every journal record with seq <= this is reflected in this family's segments up to this one |
//! | 48 | 4 | CRC32C of the summary |
//! | 52 | 4 | CRC32C of bytes 0..52 |
//! | 56 | 8 | previous high-water mark: the journal high-water mark of the family's segment before this one (what this one's records follow) |
//! | 64 | 4 | CRC32C of bytes 56..64 |
//! | 68 | 4028 | zero |
//! | 4096 | .. | stored blocks, back to back (each has its own CRC32C in the summary) |
//! | data end | .. | summary: postcard-encoded `Vec<SummaryEntry>` |
//! | .. | .. | zero padding to a multiple of 4096 |
//!
//! A segment whose header or summary checksum fails was torn by a crash before it became
//! durable; recovery ignores it (its writes are still in the journal). Bytes 56..68 are zero
//! in segments written before the previous high-water mark existed (same version: readers
//! of either ignore what they do not know, and a zero field reads as unknown); with it,
//! recovery replays a segment only when the segments before it are replayed up to that mark,
//! so one that a power cut left whole after a lost one is not replayed. No I/O here.

use serde::{Deserialize, Serialize};
use weft_chunk::AlignedBuf;

use crate::layers::LayerOp;
use crate::units::{BlockId, FamilyId, Fingerprint, LayerId, SegmentId};

pub const SEGMENT_MAGIC: [u8; 8] = *b"WEFTSEG\0";
pub const SEGMENT_FORMAT_VERSION: u16 = 1;
/// Block data starts here so that O_DIRECT reads of the data area stay aligned.
pub const SEGMENT_HEADER_BYTES: usize = 4096;
/// Sealed segments are padded to this, the O_DIRECT alignment.
pub const SEGMENT_ALIGN_BYTES: usize = 4096;
const HEADER_FIELDS_BYTES: usize = 52;

/// How a segment is cut into chunks. One d.node: k=1, m=0, codec none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StripeLayout {
    pub codec_id: u8,
    pub data_chunks: u8,
    pub parity_chunks: u8,
}

impl StripeLayout {
    pub const SINGLE: StripeLayout = StripeLayout {
        codec_id: 0,
        data_chunks: 1,
        parity_chunks: 0,
    };
}

/// Where a new block's stored bytes are inside its segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBlock {
    pub block: BlockId,
    pub offset_bytes: u32,
    pub stored_len_bytes: u16,
    pub compressed: bool,
    pub crc32c: u32,
}

/// One change recorded in a segment summary; replaying them in order rebuilds the family's
/// maps and block table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum SummaryEntry {
    /// `lba` of `layer` now holds a block stored in this segment.
    MapNew {
        layer: LayerId,
        lba: u64,
        stored: StoredBlock,
        fingerprint: Fingerprint,
    },
    /// `lba` of `layer` now references an existing block (a dedup hit).
    MapExisting {
        layer: LayerId,
        lba: u64,
        block: BlockId,
    },
    /// `count` blocks from `lba` of `layer` read as zeroes (written zeroes, kept allocated).
    MapZero {
        layer: LayerId,
        lba: u64,
        count: u64,
    },
    /// `count` blocks from `lba` of `layer` are unmapped (trim).
    Unmap {
        layer: LayerId,
        lba: u64,
        count: u64,
    },
    /// GC moved a live block into this segment.
    Relocate { stored: StoredBlock },
    /// A layer was dropped or merged (refresh, rollback, delete).
    Layer(LayerOp),
    /// A slice of a big layer's drop: entries of `layer` in `[lba, lba + count)` released
    /// and removed (a `Layer(Drop)` entry ends it).
    DropPart {
        layer: LayerId,
        lba: u64,
        count: u64,
    },
}

/// The fixed header of a sealed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub segment: SegmentId,
    pub family: FamilyId,
    pub layout: StripeLayout,
    pub data_end_bytes: u32,
    pub summary_len_bytes: u32,
    pub journal_hwm: u64,
    pub summary_crc32c: u32,
    /// The journal high-water mark of the family's segment before this one; `None` in
    /// segments written before the field existed.
    pub previous_hwm: Option<u64>,
}

/// Why a segment could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentFormatError {
    #[error("too short for a segment header")]
    Short,
    #[error("bad magic")]
    BadMagic,
    #[error("unsupported segment format version {0}")]
    Version(u16),
    #[error("header checksum mismatch")]
    HeaderChecksum,
    #[error("summary outside the segment")]
    SummaryBounds,
    #[error("summary checksum mismatch")]
    SummaryChecksum,
    #[error("summary does not decode")]
    SummaryDecode,
}

/// The open segment of a family: blocks appended in memory until sealed.
#[derive(Debug)]
pub struct SegmentBuilder {
    pub id: SegmentId,
    pub family: FamilyId,
    /// Header space followed by the stored blocks; page-aligned, so the stripe write of a
    /// single-chunk layout hands it to O_DIRECT as it is.
    data: AlignedBuf,
    entries: Vec<SummaryEntry>,
    /// Per 4 KiB page of `data`: the plain CRC32C of the page when one raw block fills it
    /// exactly (its block checksum), so the chunk's page table is derived, not recomputed.
    known_page_crcs: Vec<Option<u32>>,
}

/// A sealed segment's bytes, with what its builder knows of their page checksums.
#[derive(Debug)]
pub struct SealedBytes {
    pub bytes: AlignedBuf,
    /// `known_page_crcs[i]`: the plain CRC32C of page i of `bytes`, where a raw block is
    /// exactly that page (see [`weft_chunk::format::encode_header_known`]).
    pub known_page_crcs: Vec<Option<u32>>,
}

impl SegmentBuilder {
    pub fn new(id: SegmentId, family: FamilyId, capacity_bytes: usize) -> SegmentBuilder {
        SegmentBuilder::with_buffer(id, family, capacity_bytes, None)
    }

    /// A builder that fills `spare` (a sealed segment's buffer whose stripe is durable), when
    /// it is big enough, instead of a new allocation: a new one is memory the kernel must
    /// fault in and zero page by page as blocks are appended (3-4% of ingest CPU).
    pub fn with_buffer(
        id: SegmentId,
        family: FamilyId,
        capacity_bytes: usize,
        spare: Option<AlignedBuf>,
    ) -> SegmentBuilder {
        // Room for the summary and its padding too, so sealing never moves the data.
        let summary_room = capacity_bytes / 16 + 2 * SEGMENT_ALIGN_BYTES;
        let needed = capacity_bytes + SEGMENT_HEADER_BYTES + summary_room;
        let mut data = match spare {
            Some(mut b) if b.capacity() >= needed => {
                b.clear();
                b
            }
            _ => AlignedBuf::with_capacity(needed),
        };
        data.resize(SEGMENT_HEADER_BYTES, 0);
        SegmentBuilder {
            id,
            family,
            data,
            entries: Vec::new(),
            known_page_crcs: Vec::new(),
        }
    }

    /// Append stored bytes whose CRC32C the caller computed (destage while reducing, off the
    /// engine lock; GC from the block table, after checking it); returns where they went.
    pub fn append(
        &mut self,
        block: BlockId,
        stored: &[u8],
        compressed: bool,
        crc32c: u32,
    ) -> StoredBlock {
        debug_assert_eq!(
            crc32c,
            crc32c::crc32c(stored),
            "the caller's block checksum"
        );
        let offset = self.data.len();
        let offset_bytes = u32::try_from(offset).expect("segments stay below 4 GiB");
        self.data.extend_from_slice(stored);
        if stored.len() == SEGMENT_ALIGN_BYTES && offset.is_multiple_of(SEGMENT_ALIGN_BYTES) {
            let page = offset / SEGMENT_ALIGN_BYTES;
            if self.known_page_crcs.len() <= page {
                self.known_page_crcs.resize(page + 1, None);
            }
            self.known_page_crcs[page] = Some(crc32c);
        }
        StoredBlock {
            block,
            offset_bytes,
            stored_len_bytes: u16::try_from(stored.len()).expect("a stored block is at most 4 KiB"),
            compressed,
            crc32c,
        }
    }

    pub fn record(&mut self, entry: SummaryEntry) {
        self.entries.push(entry);
    }

    /// Bytes of block data appended so far.
    pub fn data_bytes(&self) -> usize {
        self.data.len() - SEGMENT_HEADER_BYTES
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The stored bytes at `offset..offset+len` (a read of a block not yet sealed).
    pub fn bytes(&self, offset_bytes: u32, len_bytes: u16) -> &[u8] {
        let start = offset_bytes as usize;
        &self.data[start..start + usize::from(len_bytes)]
    }

    /// Finish the segment: the bytes to write as its stripe. `previous_hwm`: the journal
    /// high-water mark of the family's segment sealed before it.
    pub fn seal(
        mut self,
        journal_hwm: u64,
        previous_hwm: u64,
        layout: StripeLayout,
    ) -> SealedBytes {
        let data_end = self.data.len();
        let summary = postcard::to_stdvec(&self.entries).expect("summary entries always encode");
        self.data.extend_from_slice(&summary);
        let padded = self.data.len().div_ceil(SEGMENT_ALIGN_BYTES) * SEGMENT_ALIGN_BYTES;
        self.data.resize(padded, 0);
        let header = SegmentHeader {
            segment: self.id,
            family: self.family,
            layout,
            data_end_bytes: u32::try_from(data_end).expect("segments stay below 4 GiB"),
            summary_len_bytes: u32::try_from(summary.len()).expect("summary below 4 GiB"),
            journal_hwm,
            summary_crc32c: crc32c::crc32c(&summary),
            previous_hwm: Some(previous_hwm),
        };
        encode_header(&header, &mut self.data[..SEGMENT_HEADER_BYTES]);
        SealedBytes {
            bytes: self.data,
            known_page_crcs: self.known_page_crcs,
        }
    }
}

fn encode_header(h: &SegmentHeader, out: &mut [u8]) {
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..10].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    out[10] = h.layout.codec_id;
    out[11] = h.layout.data_chunks;
    out[12] = h.layout.parity_chunks;
    out[16..24].copy_from_slice(&h.segment.0.to_le_bytes());
    out[24..32].copy_from_slice(&h.family.0.to_le_bytes());
    out[32..36].copy_from_slice(&h.data_end_bytes.to_le_bytes());
    out[36..40].copy_from_slice(&h.summary_len_bytes.to_le_bytes());
    out[40..48].copy_from_slice(&h.journal_hwm.to_le_bytes());
    out[48..52].copy_from_slice(&h.summary_crc32c.to_le_bytes());
    let crc = crc32c::crc32c(&out[..HEADER_FIELDS_BYTES]);
    out[52..56].copy_from_slice(&crc.to_le_bytes());
    if let Some(previous) = h.previous_hwm {
        out[56..64].copy_from_slice(&previous.to_le_bytes());
        let crc = crc32c::crc32c(&out[56..64]);
        out[64..68].copy_from_slice(&crc.to_le_bytes());
    }
}

fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Parse and verify a segment header (the first bytes of the segment).
pub fn parse_header(bytes: &[u8]) -> Result<SegmentHeader, SegmentFormatError> {
    if bytes.len() < 68 {
        return Err(SegmentFormatError::Short);
    }
    if bytes[0..8] != SEGMENT_MAGIC {
        return Err(SegmentFormatError::BadMagic);
    }
    if crc32c::crc32c(&bytes[..HEADER_FIELDS_BYTES]) != le_u32(bytes, 52) {
        return Err(SegmentFormatError::HeaderChecksum);
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version != SEGMENT_FORMAT_VERSION {
        return Err(SegmentFormatError::Version(version));
    }
    let previous_hwm = if bytes[56..68].iter().all(|&b| b == 0) {
        None
    } else if crc32c::crc32c(&bytes[56..64]) == le_u32(bytes, 64) {
        Some(le_u64(bytes, 56))
    } else {
        return Err(SegmentFormatError::HeaderChecksum);
    };
    Ok(SegmentHeader {
        previous_hwm,
        segment: SegmentId(le_u64(bytes, 16)),
        family: FamilyId(le_u64(bytes, 24)),
        layout: StripeLayout {
            codec_id: bytes[10],
            data_chunks: bytes[11],
            parity_chunks: bytes[12],
        },
        data_end_bytes: le_u32(bytes, 32),
        summary_len_bytes: le_u32(bytes, 36),
        journal_hwm: le_u64(bytes, 40),
        summary_crc32c: le_u32(bytes, 48),
    })
}

/// Verify and decode a summary read from `header.data_end_bytes`.
pub fn parse_summary(
    header: &SegmentHeader,
    summary: &[u8],
) -> Result<Vec<SummaryEntry>, SegmentFormatError> {
    if summary.len() != header.summary_len_bytes as usize {
        return Err(SegmentFormatError::SummaryBounds);
    }
    if crc32c::crc32c(summary) != header.summary_crc32c {
        return Err(SegmentFormatError::SummaryChecksum);
    }
    postcard::from_bytes(summary).map_err(|_| SegmentFormatError::SummaryDecode)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_segment_round_trips_and_detects_damage() {
        let mut b = SegmentBuilder::new(SegmentId(9), FamilyId(3), 1 << 20);
        let stored = b.append(
            BlockId(5),
            b"hello block",
            true,
            crc32c::crc32c(b"hello block"),
        );
        assert_eq!(stored.offset_bytes as usize, SEGMENT_HEADER_BYTES);
        b.record(SummaryEntry::MapNew {
            layer: LayerId(1),
            lba: 77,
            stored,
            fingerprint: 123,
        });
        b.record(SummaryEntry::Unmap {
            layer: LayerId(1),
            lba: 0,
            count: 1 << 30,
        });
        let sealed = b.seal(41, 40, StripeLayout::SINGLE);
        assert!(
            sealed.known_page_crcs.iter().all(Option::is_none),
            "no raw block fills a page"
        );
        let mut bytes = sealed.bytes;
        assert_eq!(bytes.len() % SEGMENT_ALIGN_BYTES, 0);
        let h = parse_header(&bytes).unwrap();
        assert_eq!(
            (h.segment, h.family, h.journal_hwm, h.previous_hwm),
            (SegmentId(9), FamilyId(3), 41, Some(40))
        );
        // Written before the previous high-water mark existed: unknown, not an error.
        let mut old = bytes[..SEGMENT_HEADER_BYTES].to_vec();
        old[56..68].fill(0);
        assert_eq!(parse_header(&old).unwrap().previous_hwm, None);
        old[60] = 1;
        assert_eq!(parse_header(&old), Err(SegmentFormatError::HeaderChecksum));
        let start = h.data_end_bytes as usize;
        let summary = &bytes[start..start + h.summary_len_bytes as usize];
        let entries = parse_summary(&h, summary).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(&bytes[stored.offset_bytes as usize..][..11], b"hello block");

        bytes[start] ^= 1;
        let summary = &bytes[start..start + h.summary_len_bytes as usize];
        assert_eq!(
            parse_summary(&h, summary),
            Err(SegmentFormatError::SummaryChecksum)
        );
        bytes[20] ^= 1;
        assert_eq!(
            parse_header(&bytes),
            Err(SegmentFormatError::HeaderChecksum)
        );
        assert_eq!(
            parse_header(&[0u8; 4096]),
            Err(SegmentFormatError::BadMagic)
        );
    }

    #[test]
    fn a_builder_on_a_recycled_buffer_seals_the_same_bytes() {
        let build = |spare: Option<AlignedBuf>| {
            let mut b = SegmentBuilder::with_buffer(SegmentId(4), FamilyId(2), 1 << 16, spare);
            let placed = b.append(BlockId(1), &[7u8; 300], true, crc32c::crc32c(&[7u8; 300]));
            b.record(SummaryEntry::Relocate { stored: placed });
            b.seal(9, 8, StripeLayout::SINGLE).bytes
        };
        let fresh = build(None);
        // A used buffer full of other bytes, big enough: reused, nothing of it shows.
        let filled = |len: usize| {
            let mut b = AlignedBuf::with_capacity(len);
            b.resize(len, 0xa5);
            b
        };
        let used = filled(1 << 18);
        let ptr = used.as_ptr();
        let reused = build(Some(used));
        assert_eq!(reused, fresh);
        assert_eq!(
            reused.as_ptr(),
            ptr,
            "the spare buffer was reused, not reallocated"
        );
        // Too small: a new allocation, the same bytes.
        assert_eq!(build(Some(filled(100))), fresh);
    }

    #[test]
    fn raw_blocks_on_page_boundaries_give_their_pages_checksums() {
        let raw = |v: u8| vec![v; SEGMENT_ALIGN_BYTES];
        let mut b = SegmentBuilder::new(SegmentId(2), FamilyId(1), 1 << 20);
        let append = |b: &mut SegmentBuilder, id: u64, stored: &[u8], compressed: bool| {
            let placed = b.append(BlockId(id), stored, compressed, crc32c::crc32c(stored));
            b.record(SummaryEntry::Relocate { stored: placed });
        };
        append(&mut b, 1, &raw(1), false); // page 1
        append(&mut b, 2, &raw(2), false); // page 2
        append(&mut b, 3, &[9u8; 100], true); // page 3, part
        append(&mut b, 4, &raw(4), false); // pages 3-4: straddles, unknown
        let sealed = b.seal(1, 0, StripeLayout::SINGLE);
        let pages: Vec<&[u8]> = sealed.bytes.chunks(SEGMENT_ALIGN_BYTES).collect();
        assert_eq!(
            sealed.known_page_crcs,
            vec![
                None,
                Some(crc32c::crc32c(pages[1])),
                Some(crc32c::crc32c(pages[2]))
            ]
        );
        // The chunk page table built from them is the one built from the bytes.
        let meta = weft_chunk::ChunkMeta {
            key: weft_chunk::ChunkKey::new(1, 2, 0),
            epoch: 1,
            codec_id: 0,
            data_chunks: 1,
            parity_chunks: 0,
            stripe_len_bytes: sealed.bytes.len() as u64,
        };
        assert_eq!(
            weft_chunk::format::encode_header_known(&meta, &sealed.bytes, &sealed.known_page_crcs),
            weft_chunk::format::encode_header(&meta, &sealed.bytes)
        );
    }
}
