//! Numbers of the c.node <-> d.node wire protocol and the limits both sides enforce on what a
//! peer may send. Everything on the wire is little-endian.
//!
//! Only constants live here: no parsing, no I/O. Every limit is part of the protocol (it is in
//! [`crate::handshake::protocol_fingerprint`]): changing one changes what a peer accepts, so it
//! needs a [`crate::PROTOCOL_VERSION`] bump like any message change.

/// The protocol version this crate speaks, in every frame header and in `Hello`/`HelloOk`.
pub const PROTOCOL_VERSION: u16 = 2;

/// First 4 bytes of every frame: ASCII `WFTP` (the u32 is read little-endian, so the bytes on the
/// wire are literally `W F T P`).
pub const FRAME_MAGIC: u32 = u32::from_le_bytes(*b"WFTP");

/// Fixed frame header: magic u32, version u16, kind u16, request id u64, payload length u32,
/// payload CRC32C u32, header CRC32C u32.
pub const FRAME_HEADER_LEN_BYTES: usize = 4 + 2 + 2 + 8 + 4 + 4 + 4;

/// Offset of the header CRC32C, which covers every header byte before it.
pub(crate) const HEADER_CRC_OFFSET_BYTES: usize = FRAME_HEADER_LEN_BYTES - 4;

/// Largest chunk a c.node writes and the largest read a d.node serves. Segments are 8 MiB today;
/// 32 MiB leaves room for larger segments and k=1 stripes of them without a protocol change.
pub const CHUNK_MAX_BYTES: usize = 32 * 1024 * 1024;

/// Largest frame payload a decoder accepts. It must hold a [`CHUNK_MAX_BYTES`] chunk plus the
/// small postcard-encoded fixed part of `PutChunk`/`Data`; the rest is slack, not an invitation.
/// Checked against the header's length field before any payload memory is allocated.
pub const PAYLOAD_MAX_BYTES: usize = 40 * 1024 * 1024;

/// Longest cluster id, node id or client name. Ids are short tokens (uuids, host names); a bound
/// keeps a hostile Hello from making the d.node log or compare megabytes.
pub const NAME_MAX_BYTES: usize = 255;

/// Longest disk path in a `NodeStat` (Linux `PATH_MAX`).
pub const PATH_MAX_BYTES: usize = 4096;

/// Longest human-readable text in an `Error` response. Enough for a path and an OS error;
/// [`crate::Response::error`] truncates to it so a d.node can always send its error.
pub const ERROR_MESSAGE_MAX_BYTES: usize = 4096;

/// Most entries one `ListChunks` may ask for and one `ChunkList` may carry. A `ChunkInfo` is at
/// most ~55 bytes encoded, so a page stays under ~250 KiB: a listing never holds up pipelined
/// chunk traffic for long and the d.node builds one page at a time.
pub const LIST_LIMIT_MAX: u32 = 4096;

/// Most families in one `Families` response (at most 10 bytes each encoded: 10 MiB). A d.node
/// holds chunks of far fewer families; the bound only caps what a decoder accepts.
pub const FAMILIES_MAX: usize = 1 << 20;

/// Most disks in one `NodeStat`: a large JBOD has ~100.
pub const DISKS_MAX: usize = 256;

/// Most corrupt chunk keys in one `ScrubReport` (at most 21 bytes each: ~1.4 MiB). A d.node that
/// finds more reports the first ones; `checked` still counts everything it read.
pub const SCRUB_CORRUPT_MAX: usize = 65_536;

/// Most chunk keys in one `SyncChunks` (at most 21 bytes each encoded: ~84 KiB). A c.node syncs
/// the chunks of a few stripes at a time; a bigger group is sent as several requests.
pub const SYNC_KEYS_MAX: usize = 4096;

/// Bytes of the trailer that ends a payload carrying bulk data (`PutChunk`, `Data`): the length
/// of the postcard-encoded fixed part that precedes it, u32 little-endian.
pub const BULK_TRAILER_LEN_BYTES: usize = 4;

/// Generous bound on the encoded fixed part of `PutChunk`/`Data` (the real size is under 60
/// bytes); only used to check the payload limit leaves room for it.
const BULK_META_MAX_BYTES: usize = 1024;

const _: () =
    assert!(CHUNK_MAX_BYTES + BULK_META_MAX_BYTES + BULK_TRAILER_LEN_BYTES <= PAYLOAD_MAX_BYTES);
const _: () = assert!(PAYLOAD_MAX_BYTES <= u32::MAX as usize);
const _: () = assert!(CHUNK_MAX_BYTES <= u32::MAX as usize);
// The largest list responses must fit in a payload too.
const _: () = assert!(FAMILIES_MAX * 10 + 8 <= PAYLOAD_MAX_BYTES);
const _: () = assert!(SCRUB_CORRUPT_MAX * 21 + 20 <= PAYLOAD_MAX_BYTES);
const _: () = assert!(SYNC_KEYS_MAX * 21 + 8 <= PAYLOAD_MAX_BYTES);
const _: () = assert!(DISKS_MAX * (PATH_MAX_BYTES + 40) + NAME_MAX_BYTES + 8 <= PAYLOAD_MAX_BYTES);
