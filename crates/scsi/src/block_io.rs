//! What the command modules share to turn CDB fields into storage I/O: the byte range of a
//! block range (checked against the LU), the part of the data-out buffer a command names, a
//! data-in buffer, and whether a write must be durable on return. Below [`crate::execute`],
//! the `compare`, `provisioning` and `persistent_reserve_out` modules; it calls none of them.

use crate::lun::LunState;
use crate::medium::Geometry;
use crate::sense::{asc, Sense};

/// Byte offset and length of `count` blocks from `lba`, checked to lie inside the LU.
pub(crate) fn byte_range(geometry: &Geometry, lba: u64, count: u64) -> Result<(u64, u64), Sense> {
    if !geometry.contains(lba, count) {
        return Err(Sense::lba_out_of_range());
    }
    // Inside the LU, so inside u64 bytes for any real LU; checked anyway.
    let offset = geometry.offset_bytes(lba);
    let len = geometry.len_bytes(count);
    offset.zip(len).ok_or_else(Sense::lba_out_of_range)
}

/// A buffer for `len` bytes of data-in; `len` is bounded by the transfer limits.
pub(crate) fn buffer(len: u64) -> Result<Vec<u8>, Sense> {
    usize::try_from(len)
        .map(|len| vec![0u8; len])
        .map_err(|_| Sense::illegal_request(asc::INVALID_FIELD_IN_CDB))
}

/// The first `len` bytes of the data-out buffer, or INVALID FIELD IN CDB (pointing at the
/// transfer length field `count_at` when given) if the initiator sent fewer.
pub(crate) fn data_out_prefix(
    data_out: &[u8],
    len: u64,
    count_at: Option<u16>,
) -> Result<&[u8], Sense> {
    usize::try_from(len)
        .ok()
        .and_then(|len| data_out.get(..len))
        .ok_or_else(|| match count_at {
            Some(at) => Sense::invalid_cdb_field(at, None),
            None => Sense::illegal_request(asc::INVALID_FIELD_IN_CDB),
        })
}

/// Whether writes must be durable against power loss on return: FUA, or the write cache
/// disabled through MODE SELECT.
pub(crate) fn write_through(state: &LunState, fua: bool) -> bool {
    fua || !state.write_cache_enabled()
}
