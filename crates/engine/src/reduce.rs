//! Data reduction of one 4 KiB block: zero elimination, dedup fingerprint, lz4 compression.
//! Pure CPU work, done by the destager outside the engine lock. No I/O here.

use crate::units::{Fingerprint, BLOCK_SIZE_BYTES};

/// A block is stored compressed only when lz4 saves at least this much; below it the
/// decompression cost on every read buys too little space.
pub const COMPRESSION_MIN_SAVING_BYTES: usize = 256;

/// The outcome of reducing one block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reduced {
    /// All zero: the map records a zero, nothing is stored.
    Zero,
    /// Store (or dedup) the block: lz4-compressed when `compressed` is set, else raw (the
    /// caller still holds the raw bytes, so they are not copied here). `crc32c` is the
    /// checksum of the bytes to store (compressed or raw), computed here off the engine lock:
    /// the only pass of a checksum over them on the write path (a raw block that fills a
    /// page of the segment gives that page's chunk checksum too, see `SegmentBuilder`).
    Data {
        fingerprint: Fingerprint,
        compressed: Option<Vec<u8>>,
        crc32c: u32,
    },
}

pub fn is_zero(block: &[u8]) -> bool {
    // Word-at-a-time comparison; the compiler vectorises it.
    let words = block.chunks_exact(8);
    let tail = words.remainder();
    words
        .into_iter()
        .all(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) == 0)
        && tail.iter().all(|&b| b == 0)
}

pub fn fingerprint(block: &[u8]) -> Fingerprint {
    let hash = blake3::hash(block);
    let bytes: [u8; 16] = hash.as_bytes()[..16].try_into().expect("16 bytes");
    u128::from_le_bytes(bytes)
}

/// Reduce one block of exactly [`BLOCK_SIZE_BYTES`].
pub fn reduce(block: &[u8]) -> Reduced {
    assert_eq!(
        block.len(),
        BLOCK_SIZE_BYTES,
        "reduce works on whole blocks"
    );
    if is_zero(block) {
        return Reduced::Zero;
    }
    let fingerprint = fingerprint(block);
    if looks_incompressible(block) {
        return Reduced::Data {
            fingerprint,
            compressed: None,
            crc32c: crc32c::crc32c(block),
        };
    }
    let compressed = lz4_flex::block::compress(block);
    let saves_enough = compressed.len() + COMPRESSION_MIN_SAVING_BYTES <= BLOCK_SIZE_BYTES;
    let compressed = saves_enough.then_some(compressed);
    let crc32c = crc32c::crc32c(compressed.as_deref().unwrap_or(block));
    Reduced::Data {
        fingerprint,
        compressed,
        crc32c,
    }
}

/// One byte of every this many is sampled to judge whether a block compresses.
const SAMPLE_STRIDE_BYTES: usize = 8;
/// A sample with at least this many distinct byte values (of 512 sampled bytes; random data
/// gives about 221, text under 100, a block 60% zeroes about 140) is not worth an lz4 run.
const INCOMPRESSIBLE_DISTINCT_BYTES_MIN: u32 = 200;

/// Whether a sample of the block says lz4 would save nothing: a byte histogram of one byte
/// in eight, about a tenth of an lz4 run. Blocks it passes are compressed and kept
/// uncompressed when lz4 saves too little, as before. The sampled byte moves through the
/// eight positions of each 8-byte word: data written a word at a time often has a
/// low-entropy byte at one position (fio's random buffers do), and sampling only that
/// position sent every such block through lz4 for nothing.
pub fn looks_incompressible(block: &[u8]) -> bool {
    let mut seen = [false; 256];
    let mut distinct = 0u32;
    let samples = block.len() / SAMPLE_STRIDE_BYTES;
    for i in 0..samples {
        let b = block[i * SAMPLE_STRIDE_BYTES + i % SAMPLE_STRIDE_BYTES];
        let slot = &mut seen[b as usize];
        distinct += u32::from(!*slot);
        *slot = true;
    }
    distinct >= INCOMPRESSIBLE_DISTINCT_BYTES_MIN
}

/// Restore a block's bytes from what was stored; `None` when the stored bytes do not
/// decompress to exactly one block (corruption that slipped past the checksum).
pub fn restore(stored: &[u8], compressed: bool, out: &mut [u8]) -> Option<()> {
    if !compressed {
        (stored.len() == out.len()).then(|| out.copy_from_slice(stored))
    } else {
        match lz4_flex::block::decompress_into(stored, out) {
            Ok(n) if n == out.len() => Some(()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sample_tells_random_from_compressible_blocks() {
        let mut random = [0u8; BLOCK_SIZE_BYTES];
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for b in random.iter_mut() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            *b = (x >> 24) as u8;
        }
        assert!(looks_incompressible(&random));
        // Random but for one byte of each 8-byte word, as fio's buffers come.
        let mut word_patterned = random;
        for word in word_patterned.chunks_mut(8) {
            word[0] = 0;
        }
        assert!(looks_incompressible(&word_patterned));
        let mut mostly_zero = random;
        mostly_zero[..BLOCK_SIZE_BYTES * 6 / 10].fill(0);
        assert!(!looks_incompressible(&mostly_zero));
        let text: Vec<u8> = b"INSERT INTO orders VALUES (42, 'widget', 3.50);\n"
            .iter()
            .copied()
            .cycle()
            .take(BLOCK_SIZE_BYTES)
            .collect();
        assert!(!looks_incompressible(&text));
        assert!(matches!(
            reduce(&random),
            Reduced::Data {
                compressed: None,
                ..
            }
        ));
        assert!(matches!(
            reduce(&text),
            Reduced::Data {
                compressed: Some(_),
                ..
            }
        ));
    }

    #[test]
    fn zero_blocks_are_eliminated() {
        assert_eq!(reduce(&[0u8; BLOCK_SIZE_BYTES]), Reduced::Zero);
        let mut b = [0u8; BLOCK_SIZE_BYTES];
        b[4095] = 1;
        assert!(!is_zero(&b));
    }

    #[test]
    fn compressible_blocks_round_trip_and_random_ones_stay_raw() {
        let mut text = vec![0u8; BLOCK_SIZE_BYTES];
        for (i, b) in text.iter_mut().enumerate() {
            *b = b"weft stores blocks "[i % 19];
        }
        let Reduced::Data {
            compressed: Some(stored),
            crc32c,
            ..
        } = reduce(&text)
        else {
            panic!()
        };
        assert!(stored.len() < 512);
        assert_eq!(
            crc32c,
            crc32c::crc32c(&stored),
            "the checksum is of the stored bytes"
        );
        let mut out = vec![0u8; BLOCK_SIZE_BYTES];
        restore(&stored, true, &mut out).unwrap();
        assert_eq!(out, text);

        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..BLOCK_SIZE_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()[0]
            })
            .collect();
        let Reduced::Data {
            compressed, crc32c, ..
        } = reduce(&random)
        else {
            panic!()
        };
        assert!(compressed.is_none(), "random data is stored raw");
        assert_eq!(crc32c, crc32c::crc32c(&random));
    }

    #[test]
    fn garbage_does_not_restore() {
        let mut out = vec![0u8; BLOCK_SIZE_BYTES];
        assert!(restore(&[0xff; 40], true, &mut out).is_none());
        assert!(restore(&[1; 10], false, &mut out).is_none());
    }
}
