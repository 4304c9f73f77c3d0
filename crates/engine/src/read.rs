//! The read path: resolve each block through the write buffer and the image's layers, copy
//! buffered or in-memory segment data (and blocks the read cache holds) under the state lock,
//! then read the rest from chunks with the lock released (runs of adjacent blocks coalesced),
//! CRC-checked and decompressed, and offer them to the read cache.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use crate::block_map::Mapping;
use crate::block_table::BlockLocation;
use crate::error::{EngineError, IoFailure};
use crate::read_cache::{CacheKey, ReadCache};
use crate::reduce::{self};
use crate::state::Shared;
use crate::units::{LayerId, SegmentId, VolumeId, BLOCK_SIZE_BYTES};

/// Where one block of an image reads from.
pub(crate) enum Resolved<'a> {
    Buffered(&'a [u8]),
    Mapped(Mapping),
}

/// Resolve a block through a chain of layers: each layer's buffered writes, then its map.
pub(crate) fn resolve<'a>(
    buffer: &'a crate::write_buffer::WriteBuffer,
    family: &crate::family::Family,
    chain: &[LayerId],
    lba: u64,
) -> Resolved<'a> {
    for &layer in chain {
        if let Some(data) = buffer.lookup(layer, lba) {
            return Resolved::Buffered(data);
        }
        match family
            .layers
            .get(&layer)
            .map(|m| m.get(crate::units::Lba(lba)))
        {
            Some(Mapping::Absent) | None => continue,
            Some(found) => return Resolved::Mapped(found),
        }
    }
    Resolved::Mapped(Mapping::Absent)
}

/// Where a block to read comes from, decided under the lock.
enum Source {
    Ready,
    Disk {
        index: usize,
        location: BlockLocation,
        key: CacheKey,
        redundancy: weft_ec::Redundancy,
        stripe_len_bytes: u64,
    },
}

/// Read `count` blocks from `lba` into `buf`: buffer, then map, then chunk.
pub(crate) fn read_blocks(
    shared: &Shared,
    cache: &ReadCache,
    volume: VolumeId,
    lba: u64,
    count: u64,
    buf: &mut [u8],
) -> Result<(), EngineError> {
    let mut disk = Vec::new();
    let mut stripes: HashMap<SegmentId, (weft_ec::Redundancy, u64)> = HashMap::new();
    let family_id;
    {
        let st = shared.state.lock();
        let image = st.image(volume)?;
        let family = st.families.get(&image.family).ok_or(EngineError::Gone)?;
        let chain = st.chain(image);
        for i in 0..count as usize {
            let out = &mut buf[i * BLOCK_SIZE_BYTES..(i + 1) * BLOCK_SIZE_BYTES];
            let l = lba + i as u64;
            let source = match resolve(&st.buffer, family, &chain, l) {
                Resolved::Buffered(data) => {
                    out.copy_from_slice(data);
                    Source::Ready
                }
                Resolved::Mapped(mapping) => match mapping {
                    Mapping::Absent | Mapping::Zero => {
                        out.fill(0);
                        Source::Ready
                    }
                    Mapping::Block(b) => {
                        let entry = family.table.get(b).expect("mapped blocks are live");
                        let location = entry.location;
                        let in_memory = match (
                            &family.open,
                            st.segments.sealing((image.family, location.segment)),
                        ) {
                            (Some(open), _) if open.id == location.segment => {
                                Some(open.bytes(location.offset_bytes, location.stored_len_bytes))
                            }
                            (_, Some(s)) => {
                                let start = location.offset_bytes as usize;
                                Some(
                                    &s.bytes[start..start + usize::from(location.stored_len_bytes)],
                                )
                            }
                            _ => None,
                        };
                        match in_memory {
                            Some(stored) => {
                                restore_block(shared, stored, location, out)?;
                                Source::Ready
                            }
                            None if cache.get(
                                &CacheKey {
                                    fingerprint: entry.fingerprint,
                                    stored_crc32c: location.crc32c,
                                },
                                out,
                            ) =>
                            {
                                Source::Ready
                            }
                            None => {
                                let Some(sealed) =
                                    st.segments.sealed((image.family, location.segment))
                                else {
                                    // GC moved it between the map lookup and here.
                                    return Err(EngineError::Io(IoFailure::Moved {
                                        family: image.family.0,
                                        segment: location.segment,
                                    }));
                                };
                                Source::Disk {
                                    index: i,
                                    location,
                                    key: CacheKey {
                                        fingerprint: entry.fingerprint,
                                        stored_crc32c: location.crc32c,
                                    },
                                    redundancy: sealed.redundancy,
                                    stripe_len_bytes: sealed.stored_bytes,
                                }
                            }
                        }
                    }
                },
            };
            if let Source::Disk {
                index,
                location,
                key,
                redundancy,
                stripe_len_bytes,
            } = source
            {
                disk.push((index, location, key));
                stripes.insert(location.segment, (redundancy, stripe_len_bytes));
            }
        }
        family_id = image.family.0;
    }
    // Coalesce runs of blocks stored back to back in one segment into one chunk read.
    let mut i = 0;
    let mut scratch = Vec::new();
    while i < disk.len() {
        let (_, first, _) = disk[i];
        let mut j = i + 1;
        let mut end = u64::from(first.offset_bytes) + u64::from(first.stored_len_bytes);
        while j < disk.len()
            && disk[j].1.segment == first.segment
            && u64::from(disk[j].1.offset_bytes) == end
            && end - u64::from(first.offset_bytes) < (1 << 20)
        {
            end += u64::from(disk[j].1.stored_len_bytes);
            j += 1;
        }
        let start = u64::from(first.offset_bytes);
        scratch.resize(usize::try_from(end - start).expect("bounded run"), 0);
        let (redundancy, stripe_len) = stripes[&first.segment];
        shared
            .stripes
            .read(
                family_id,
                first.segment.0,
                redundancy,
                stripe_len,
                start,
                &mut scratch,
            )
            .map_err(|e| EngineError::Io(IoFailure::Stripe(e)))?;
        for &(index, loc, key) in &disk[i..j] {
            let at = usize::try_from(u64::from(loc.offset_bytes) - start).expect("inside run");
            let stored = &scratch[at..at + usize::from(loc.stored_len_bytes)];
            let out = &mut buf[index * BLOCK_SIZE_BYTES..(index + 1) * BLOCK_SIZE_BYTES];
            restore_block(shared, stored, loc, out)?;
            // Only now, checked and restored as every read is.
            cache.insert(key, out);
        }
        i = j;
    }
    Ok(())
}

pub(crate) fn restore_block(
    shared: &Shared,
    stored: &[u8],
    loc: BlockLocation,
    out: &mut [u8],
) -> Result<(), EngineError> {
    let corrupt = || {
        shared
            .counters
            .corrupt_reads
            .fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            segment = loc.segment.0,
            offset = loc.offset_bytes,
            "checksum mismatch: block not served"
        );
        EngineError::Io(IoFailure::Corrupt {
            block: crate::units::BlockId(u64::MAX),
            segment: loc.segment,
            offset_bytes: u64::from(loc.offset_bytes),
        })
    };
    if crc32c::crc32c(stored) != loc.crc32c {
        return Err(corrupt());
    }
    reduce::restore(stored, loc.compressed, out).ok_or_else(corrupt)
}
