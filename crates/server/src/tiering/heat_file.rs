//! The heat of every volume on disk: `heat` in the data dir, rewritten atomically (temporary
//! file, fsync, rename) every persist interval and at shutdown, so a restart keeps it and a
//! kill -9 loses at most the counts since the last write.
//!
//! Format (little-endian): `WEFTHEAT`, version (u32), volume count (u32), then per volume:
//! name (u16 length + UTF-8), extent size, started, folded (u64 each), extent count (u32),
//! the count of extents with anything in their rings (u32), and for each of those: its index
//! (u32), the hour ring (12 x 2 u32), the day ring (24 x 2 u32), the week ring (7 x 2 u64)
//! and its cumulative read and write bytes (2 u64): 420 bytes per warm extent; cold extents
//! take nothing. The BLAKE3 hash of all that ends the file: a torn or damaged file is
//! refused (and the heat starts afresh) rather than misread.

use std::path::Path;

use super::heat::{Folded, Rings, Slot};

pub const HEAT_FILE: &str = "heat";
const MAGIC: &[u8; 8] = b"WEFTHEAT";
const VERSION: u32 = 1;

/// One volume's saved heat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedVolume {
    pub name: String,
    pub extent_bytes: u64,
    pub folded: Folded,
}

pub fn encode(volumes: &[SavedVolume]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    put_u32(&mut out, volumes.len());
    for v in volumes {
        let name = v.name.as_bytes();
        out.extend_from_slice(&u16::try_from(name.len()).unwrap_or(u16::MAX).to_le_bytes());
        out.extend_from_slice(&name[..name.len().min(usize::from(u16::MAX))]);
        for n in [v.extent_bytes, v.folded.started_s, v.folded.folded_s] {
            out.extend_from_slice(&n.to_le_bytes());
        }
        put_u32(&mut out, v.folded.rings.len());
        let warm: Vec<usize> = (0..v.folded.rings.len())
            .filter(|&i| {
                v.folded.rings[i] != Rings::default()
                    || v.folded.bytes.get(i).is_some_and(|b| *b != Slot::default())
            })
            .collect();
        put_u32(&mut out, warm.len());
        for i in warm {
            put_u32(&mut out, i);
            let r = &v.folded.rings[i];
            for s in r.hour.iter().chain(&r.day) {
                out.extend_from_slice(&s.reads.to_le_bytes());
                out.extend_from_slice(&s.writes.to_le_bytes());
            }
            let bytes = v.folded.bytes.get(i).copied().unwrap_or_default();
            for s in r.week.iter().chain([&bytes]) {
                out.extend_from_slice(&s.reads.to_le_bytes());
                out.extend_from_slice(&s.writes.to_le_bytes());
            }
        }
    }
    let hash = blake3::hash(&out);
    out.extend_from_slice(hash.as_bytes());
    out
}

pub fn decode(bytes: &[u8]) -> Result<Vec<SavedVolume>, String> {
    let body_len = bytes.len().checked_sub(32).ok_or("too short")?;
    let (body, hash) = bytes.split_at(body_len);
    if blake3::hash(body).as_bytes() != hash {
        return Err("its checksum does not match (torn or damaged)".into());
    }
    let mut r = Reader(body);
    if r.take(8)? != MAGIC {
        return Err("not a heat file".into());
    }
    let version = r.u32()?;
    if version != VERSION {
        return Err(format!("version {version}, this weft reads {VERSION}"));
    }
    let count = r.u32()?;
    let mut out = Vec::new();
    for _ in 0..count {
        let len = usize::from(u16::from_le_bytes(
            r.take(2)?.try_into().unwrap_or_default(),
        ));
        let name = String::from_utf8(r.take(len)?.to_vec()).map_err(|e| e.to_string())?;
        let (extent_bytes, started_s, folded_s) = (r.u64()?, r.u64()?, r.u64()?);
        let extents = r.u32()? as usize;
        if extents > 1 << 28 {
            return Err(format!("{name}: {extents} extents"));
        }
        let mut folded = Folded {
            started_s,
            folded_s,
            rings: vec![Rings::default(); extents],
            bytes: vec![Slot::default(); extents],
        };
        for _ in 0..r.u32()? {
            let i = r.u32()? as usize;
            if i >= extents {
                return Err(format!("{name}: extent {i} of {extents}"));
            }
            let rings = &mut folded.rings[i];
            for s in rings.hour.iter_mut().chain(rings.day.iter_mut()) {
                *s = Slot {
                    reads: r.u32()?,
                    writes: r.u32()?,
                };
            }
            for s in rings.week.iter_mut().chain([&mut folded.bytes[i]]) {
                *s = Slot {
                    reads: r.u64()?,
                    writes: r.u64()?,
                };
            }
        }
        out.push(SavedVolume {
            name,
            extent_bytes,
            folded,
        });
    }
    Ok(out)
}

/// Writes the heat file in `dir`.
pub fn save(dir: &Path, volumes: &[SavedVolume]) -> anyhow::Result<()> {
    crate::data_files::write_atomically(dir, HEAT_FILE, &encode(volumes))
}

/// The heat file in `dir`: none when there is none yet; a damaged one is reported and
/// ignored (heat is statistics: starting afresh loses advice, not data).
pub fn load(dir: &Path) -> Vec<SavedVolume> {
    match std::fs::read(dir.join(HEAT_FILE)) {
        Ok(bytes) => decode(&bytes).unwrap_or_else(|e| {
            tracing::warn!(
                "ignoring the heat file {}: {e}",
                dir.join(HEAT_FILE).display()
            );
            Vec::new()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!("cannot read the heat file: {e}");
            Vec::new()
        }
    }
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::super::heat::VolumeHeat;
    use super::*;

    #[test]
    fn the_file_round_trips_and_refuses_damage() {
        let h = VolumeHeat::new(1 << 20, 8 << 20, 1_000_000);
        for i in 0..50 {
            h.record(i % 3 == 0, (i % 5) << 20, 4096);
        }
        let saved = vec![
            SavedVolume {
                name: "pgdata".into(),
                extent_bytes: 1 << 20,
                folded: h.snapshot(1_000_100),
            },
            SavedVolume {
                name: "empty".into(),
                extent_bytes: 1 << 20,
                folded: VolumeHeat::new(1 << 20, 2 << 20, 5).snapshot(6),
            },
        ];
        let bytes = encode(&saved);
        // Five warm extents of 420 bytes: the cold ones cost nothing.
        assert!(bytes.len() < 5 * 420 + 200, "{}", bytes.len());
        assert_eq!(decode(&bytes).unwrap(), saved);
        let mut torn = bytes.clone();
        torn.truncate(bytes.len() - 1);
        assert!(decode(&torn).is_err());
        let mut flipped = bytes;
        flipped[20] ^= 1;
        assert!(decode(&flipped).is_err());

        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).is_empty());
        save(dir.path(), &saved).unwrap();
        assert_eq!(load(dir.path()), saved);
    }
}
