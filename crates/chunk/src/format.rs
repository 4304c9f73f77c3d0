//! The on-disk layout of one chunk file. No I/O here.
//!
//! | offset | size | field |
//! | --- | --- | --- |
//! | 0 | 8 | magic `WEFTCHK1` |
//! | 8 | 2 | format version (1) |
//! | 10 | 1 | erasure codec id |
//! | 11 | 1 | k data chunks |
//! | 12 | 1 | m parity chunks |
//! | 13 | 1 | this chunk's index in the stripe |
//! | 14 | 2 | reserved, zero |
//! | 16 | 8 | family id |
//! | 24 | 8 | segment id |
//! | 32 | 8 | epoch of the writer |
//! | 40 | 8 | stripe data length in bytes |
//! | 48 | 8 | chunk data length in bytes |
//! | 56 | 4 | offset of the data (a multiple of 4096) |
//! | 60 | 4 | number of pages (4 KiB each, the last may be short) |
//! | 64 | 4 | CRC32C of bytes 0..64 and of the page table |
//! | 68 | 4 × pages | page table: CRC32C of each data page, seeded by (family, segment, index, page number) |
//! | .. | .. | zero up to the data offset |
//! | data offset | data length | chunk data |
//!
//! Integers are little-endian. Seeding each page's checksum with its position means a page
//! written to or read from the wrong place (a misdirected write or read) fails its check just
//! as a torn or rotten one does. The header names the chunk, so a whole misdirected file is
//! caught too.

use crate::error::ChunkError;
use crate::key::{ChunkKey, ChunkMeta};

pub const CHUNK_MAGIC: [u8; 8] = *b"WEFTCHK1";
pub const CHUNK_FORMAT_VERSION: u16 = 1;
/// Checksum granularity, and the O_DIRECT alignment of the data area.
pub const PAGE_BYTES: usize = 4096;
/// Bytes of the fixed header fields before the page table.
pub const FIXED_HEADER_BYTES: usize = 68;
/// Largest chunk: a 32 MiB segment on one d.node, with room to spare; bounds the page table
/// (64 KiB) a reader allocates from a header it has not verified yet.
pub const CHUNK_DATA_MAX_BYTES: u64 = 64 << 20;
const PAGES_MAX: u64 = CHUNK_DATA_MAX_BYTES / PAGE_BYTES as u64;

/// A parsed, verified chunk header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkHeader {
    pub meta: ChunkMeta,
    pub data_len_bytes: u64,
    pub data_offset_bytes: u64,
    pub page_crcs: Vec<u32>,
}

/// The header region (fixed fields, page table, padding) for a chunk holding `data`.
pub fn encode_header(meta: &ChunkMeta, data: &[u8]) -> Vec<u8> {
    encode_header_known(meta, data, &[])
}

/// [`encode_header`] for data whose pages' plain CRC32C the caller already computed:
/// `known[i]`, when present, is `crc32c(page i)` of a full page, and that page's table entry is
/// derived from it ([`page_crc_from`]) instead of reading the page again. The table is the
/// same as [`encode_header`]'s. Debug builds check every known value against the bytes.
pub fn encode_header_known(meta: &ChunkMeta, data: &[u8], known: &[Option<u32>]) -> Vec<u8> {
    let pages = data.len().div_ceil(PAGE_BYTES);
    let data_offset = data_offset_for(pages as u64);
    let mut h = Vec::with_capacity(data_offset as usize);
    h.extend_from_slice(&CHUNK_MAGIC);
    h.extend_from_slice(&CHUNK_FORMAT_VERSION.to_le_bytes());
    h.extend_from_slice(&[
        meta.codec_id,
        meta.data_chunks,
        meta.parity_chunks,
        meta.key.index,
        0,
        0,
    ]);
    for v in [
        meta.key.family,
        meta.key.segment,
        meta.epoch,
        meta.stripe_len_bytes,
        data.len() as u64,
    ] {
        h.extend_from_slice(&v.to_le_bytes());
    }
    h.extend_from_slice(&u32::try_from(data_offset).expect("bounded").to_le_bytes());
    h.extend_from_slice(&u32::try_from(pages).expect("bounded").to_le_bytes());
    let table: Vec<u8> = data
        .chunks(PAGE_BYTES)
        .enumerate()
        .flat_map(|(i, page)| {
            let crc = match known.get(i).copied().flatten() {
                Some(plain) if page.len() == PAGE_BYTES => {
                    debug_assert_eq!(plain, crc32c::crc32c(page), "known CRC of page {i}");
                    page_crc_from(&meta.key, i as u64, plain)
                }
                _ => page_crc(&meta.key, i as u64, page),
            };
            crc.to_le_bytes()
        })
        .collect();
    let crc = crc32c::crc32c_append(crc32c::crc32c(&h), &table);
    h.extend_from_slice(&crc.to_le_bytes());
    h.extend_from_slice(&table);
    h.resize(data_offset as usize, 0);
    h
}

/// How many bytes of the file hold the header: read this much, then [`parse_header`].
/// Fails when the fixed fields are not a chunk header.
pub fn header_len(fixed: &[u8]) -> Result<u64, String> {
    if fixed.len() < FIXED_HEADER_BYTES || fixed[..8] != CHUNK_MAGIC {
        return Err("not a chunk header (bad magic)".into());
    }
    let pages = u64::from(u32_at(fixed, 60));
    if pages > PAGES_MAX {
        return Err(format!("page count {pages} over the limit"));
    }
    let offset = u64::from(u32_at(fixed, 56));
    if offset != data_offset_for(pages) {
        return Err("data offset does not match the page count".into());
    }
    Ok(offset)
}

/// Parse and verify a header region; `expected` names the chunk the caller asked for.
pub fn parse_header(region: &[u8], expected: Option<&ChunkKey>) -> Result<ChunkHeader, String> {
    let len = header_len(region)?;
    if (region.len() as u64) < len {
        return Err("header region short".into());
    }
    let version = u16::from_le_bytes([region[8], region[9]]);
    if version != CHUNK_FORMAT_VERSION {
        return Err(format!(
            "chunk format {version} is not {CHUNK_FORMAT_VERSION}"
        ));
    }
    let pages = u32_at(region, 60) as usize;
    let table = &region[FIXED_HEADER_BYTES..FIXED_HEADER_BYTES + 4 * pages];
    let crc = crc32c::crc32c_append(crc32c::crc32c(&region[..64]), table);
    if crc != u32_at(region, 64) {
        return Err("header checksum mismatch".into());
    }
    let key = ChunkKey {
        family: u64_at(region, 16),
        segment: u64_at(region, 24),
        index: region[13],
    };
    if let Some(expected) = expected {
        if key != *expected {
            return Err(format!(
                "header names chunk {key}, not {expected} (misdirected)"
            ));
        }
    }
    let data_len = u64_at(region, 48);
    if data_len.div_ceil(PAGE_BYTES as u64) != pages as u64 {
        return Err("data length does not match the page count".into());
    }
    Ok(ChunkHeader {
        meta: ChunkMeta {
            key,
            epoch: u64_at(region, 32),
            codec_id: region[10],
            data_chunks: region[11],
            parity_chunks: region[12],
            stripe_len_bytes: u64_at(region, 40),
        },
        data_len_bytes: data_len,
        data_offset_bytes: len,
        page_crcs: table
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    })
}

impl ChunkHeader {
    /// The page-aligned span of data `[start, end)` that covers `offset..offset+len`.
    pub fn covering_pages(&self, offset_bytes: u64, len_bytes: u64) -> (u64, u64) {
        let page = PAGE_BYTES as u64;
        let start = offset_bytes / page * page;
        let end = ((offset_bytes + len_bytes).div_ceil(page) * page).min(self.data_len_bytes);
        (start, end)
    }

    /// Verify whole pages of data read from `start` (page aligned) against the page table.
    pub fn verify_pages(&self, start_bytes: u64, bytes: &[u8]) -> Result<(), ChunkError> {
        let first = start_bytes / PAGE_BYTES as u64;
        for (i, page) in bytes.chunks(PAGE_BYTES).enumerate() {
            let no = first + i as u64;
            let expected = self.page_crcs.get(no as usize).copied();
            if expected != Some(page_crc(&self.meta.key, no, page)) {
                return Err(ChunkError::Corrupt {
                    key: self.meta.key,
                    offset_bytes: no * PAGE_BYTES as u64,
                    detail: "page checksum mismatch".into(),
                });
            }
        }
        Ok(())
    }
}

/// A page's checksum, seeded by where it belongs.
pub fn page_crc(key: &ChunkKey, page_no: u64, page: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&page_seed(key, page_no)), page)
}

/// A full page's checksum (what [`page_crc`] returns) from the page's plain CRC32C, without
/// its bytes: CRC32C(seed ‖ page) = shift(CRC32C(seed), 4096 bytes) xor CRC32C(page), the
/// shift being a fixed linear map applied with four table lookups.
pub fn page_crc_from(key: &ChunkKey, page_no: u64, page_crc32c: u32) -> u32 {
    page_shift(crc32c::crc32c(&page_seed(key, page_no))) ^ page_crc32c
}

/// The bytes a page's checksum starts from: where the page belongs.
fn page_seed(key: &ChunkKey, page_no: u64) -> [u8; 25] {
    let mut seed = [0u8; 25];
    seed[..8].copy_from_slice(&key.family.to_le_bytes());
    seed[8..16].copy_from_slice(&key.segment.to_le_bytes());
    seed[16] = key.index;
    seed[17..25].copy_from_slice(&page_no.to_le_bytes());
    seed
}

/// `crc` advanced over [`PAGE_BYTES`] more bytes, as the CRC of `A ‖ B` is
/// `shift(crc(A), len(B)) xor crc(B)`. The shift is linear in `crc` over GF(2), so it is
/// tabulated per byte of `crc` once (1024 entries), built by xor from the shifts of the 32
/// single bits: `crc32c_combine` gives those, and is too slow to call per page (it builds
/// the shift by repeated matrix squaring).
fn page_shift(crc: u32) -> u32 {
    static TABLE: std::sync::OnceLock<Box<[[u32; 256]; 4]>> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let bit: Vec<u32> = (0..32)
            .map(|i| crc32c::crc32c_combine(1 << i, 0, PAGE_BYTES))
            .collect();
        let mut t = Box::new([[0u32; 256]; 4]);
        for (byte, row) in t.iter_mut().enumerate() {
            for (v, entry) in row.iter_mut().enumerate() {
                *entry = (0..8)
                    .filter(|b| v >> b & 1 == 1)
                    .fold(0, |acc, b| acc ^ bit[8 * byte + b]);
            }
        }
        t
    });
    let b = crc.to_le_bytes();
    table[0][usize::from(b[0])]
        ^ table[1][usize::from(b[1])]
        ^ table[2][usize::from(b[2])]
        ^ table[3][usize::from(b[3])]
}

fn data_offset_for(pages: u64) -> u64 {
    (FIXED_HEADER_BYTES as u64 + 4 * pages).div_ceil(PAGE_BYTES as u64) * PAGE_BYTES as u64
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> ChunkMeta {
        ChunkMeta {
            key: ChunkKey::new(7, 42, 3),
            epoch: 9,
            codec_id: 2,
            data_chunks: 4,
            parity_chunks: 2,
            stripe_len_bytes: 4 * 12288,
        }
    }

    #[test]
    fn header_round_trips_and_catches_corrupt_torn_and_misdirected_pages() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let m = meta();
        let region = encode_header(&m, &data);
        assert_eq!(region.len() % PAGE_BYTES, 0);
        let h = parse_header(&region, Some(&m.key)).unwrap();
        assert_eq!(h.meta, m);
        assert_eq!(h.data_len_bytes, 10_000);
        h.verify_pages(0, &data).unwrap();
        h.verify_pages(4096, &data[4096..8192]).unwrap();
        // A flipped bit.
        let mut bad = data.clone();
        bad[5000] ^= 1;
        assert!(h.verify_pages(0, &bad).is_err());
        // The right bytes at the wrong place.
        assert!(h.verify_pages(0, &data[4096..8192]).is_err());
        // Another chunk's header.
        assert!(parse_header(&region, Some(&ChunkKey::new(7, 42, 4))).is_err());
        // A corrupt header.
        let mut r2 = region.clone();
        r2[33] ^= 0x10;
        assert!(parse_header(&r2, None).is_err());
        // Zeroes (a torn, never written header).
        assert!(parse_header(&vec![0u8; 4096], None).is_err());
    }

    #[test]
    fn page_checksums_derived_from_plain_crcs_equal_those_read_from_the_bytes() {
        let data: Vec<u8> = (0..5 * PAGE_BYTES + 100)
            .map(|i| (i * 31 % 253) as u8)
            .collect();
        let key = ChunkKey::new(3, 1 << 62 | 5, 1);
        for (no, page) in data.chunks(PAGE_BYTES).enumerate().take(5) {
            assert_eq!(
                page_crc_from(&key, no as u64, crc32c::crc32c(page)),
                page_crc(&key, no as u64, page)
            );
        }
        // Some pages known, some not, the short last page never: the same header.
        let m = meta();
        let mut known: Vec<Option<u32>> = data
            .chunks(PAGE_BYTES)
            .map(|p| Some(crc32c::crc32c(p)))
            .collect();
        known[1] = None;
        known.truncate(4);
        assert_eq!(
            encode_header_known(&m, &data, &known),
            encode_header(&m, &data)
        );
        let h = parse_header(&encode_header_known(&m, &data, &known), Some(&m.key)).unwrap();
        h.verify_pages(0, &data).unwrap();
        // A derived checksum still tells a page from its neighbour and from a flipped bit.
        let mut bad = data.clone();
        bad[3 * PAGE_BYTES + 7] ^= 0x40;
        assert!(h.verify_pages(0, &bad).is_err());
        assert!(h
            .verify_pages(2 * PAGE_BYTES as u64, &data[3 * PAGE_BYTES..4 * PAGE_BYTES])
            .is_err());
    }

    #[test]
    fn covering_pages_clip_at_the_data_end() {
        let data = vec![1u8; 10_000];
        let h = parse_header(&encode_header(&meta(), &data), None).unwrap();
        assert_eq!(h.covering_pages(5000, 100), (4096, 8192));
        assert_eq!(h.covering_pages(9000, 1000), (8192, 10_000));
    }
}
