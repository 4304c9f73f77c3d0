//! The versioned 4 KiB block the thrasher writes: its content says which image wrote it (a
//! tag), at which block and which version, and the rest is derived from those, so any read is
//! decoded into exactly one (tag, lba, version) or found torn, corrupt or misplaced.
//!
//! Layout (little-endian): `WEFTTHR1`, tag, lba, version, salt (the run's), then pseudo-random
//! bytes from all of them. Decoding recomputes the whole block: that is the checksum, and it is
//! stronger than a CRC (a single flipped bit anywhere is caught).

pub const BLOCK_BYTES: usize = 4096;
const MAGIC: &[u8; 8] = b"WEFTTHR1";
const HEADER_BYTES: usize = 40;

/// What a block read back holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decoded {
    /// All zeroes: never written.
    Zero,
    /// A block written by the image with this tag, at this lba, this version.
    Version { tag: u64, lba: u64, version: u64 },
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The full content of block `lba` of image `tag` at `version` (version 1 and up).
pub fn content(salt: u64, tag: u64, lba: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; BLOCK_BYTES];
    b[0..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&tag.to_le_bytes());
    b[16..24].copy_from_slice(&lba.to_le_bytes());
    b[24..32].copy_from_slice(&version.to_le_bytes());
    b[32..40].copy_from_slice(&salt.to_le_bytes());
    let mut st =
        salt ^ tag.rotate_left(48) ^ lba.wrapping_mul(0x1000_0001) ^ version.rotate_left(24);
    for chunk in b[HEADER_BYTES..].chunks_mut(8) {
        let v = splitmix(&mut st).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    b
}

/// Decodes a block read back, or says why it is no block we ever wrote (torn, corrupt, another
/// run's, garbage). A block of another image or lba decodes fine: the caller checks those.
pub fn decode(salt: u64, data: &[u8]) -> Result<Decoded, String> {
    assert_eq!(data.len(), BLOCK_BYTES, "decode takes one block");
    if data.iter().all(|&x| x == 0) {
        return Ok(Decoded::Zero);
    }
    if &data[0..8] != MAGIC {
        return Err(format!("no block of ours: starts {:02x?}", &data[0..16]));
    }
    let word = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
    let (tag, lba, version, s) = (word(8), word(16), word(24), word(32));
    if s != salt {
        return Err(format!(
            "salt {s:#x} of another run (tag {tag}, lba {lba}, version {version})"
        ));
    }
    let want = content(salt, tag, lba, version);
    if data != want.as_slice() {
        let at = data
            .iter()
            .zip(&want)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "header says tag {tag} lba {lba} version {version} but the content differs from byte {at} (torn or corrupt)"
        ));
    }
    Ok(Decoded::Version { tag, lba, version })
}
