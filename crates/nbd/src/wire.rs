//! Numbers from the NBD protocol specification (`doc/proto.md` in NetworkBlockDevice/nbd) and the
//! limits this server applies to what a client may send.
//!
//! Everything on the wire is big-endian. Only constants live here: no parsing, no I/O.

/// First 8 bytes the server sends: ASCII `NBDMAGIC`.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// Newstyle negotiation magic, also the prefix of every client option: ASCII `IHAVEOPT`.
pub const IHAVEOPT_MAGIC: u64 = 0x4948_4156_454f_5054;
/// Prefix of every fixed-newstyle option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Prefix of every transmission-phase request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Prefix of a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Prefix of a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

// Handshake flags (server, 16 bits) and client flags (32 bits).
pub const HANDSHAKE_FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const HANDSHAKE_FLAG_NO_ZEROES: u16 = 1 << 1;
pub const CLIENT_FLAG_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const CLIENT_FLAG_NO_ZEROES: u32 = 1 << 1;

// Option codes.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;
pub const OPT_EXTENDED_HEADERS: u32 = 11;

// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR_BIT: u32 = 1 << 31;
pub const REP_ERR_UNSUP: u32 = REP_ERR_BIT | 1;
pub const REP_ERR_POLICY: u32 = REP_ERR_BIT | 2;
pub const REP_ERR_INVALID: u32 = REP_ERR_BIT | 3;
pub const REP_ERR_TLS_REQD: u32 = REP_ERR_BIT | 5;
pub const REP_ERR_UNKNOWN: u32 = REP_ERR_BIT | 6;
pub const REP_ERR_SHUTDOWN: u32 = REP_ERR_BIT | 7;
pub const REP_ERR_TOO_BIG: u32 = REP_ERR_BIT | 9;

// NBD_INFO_* types inside NBD_REP_INFO.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_NAME: u16 = 1;
pub const INFO_DESCRIPTION: u16 = 2;
pub const INFO_BLOCK_SIZE: u16 = 3;

// Transmission flags (16 bits).
pub const FLAG_HAS_FLAGS: u16 = 1 << 0;
pub const FLAG_READ_ONLY: u16 = 1 << 1;
pub const FLAG_SEND_FLUSH: u16 = 1 << 2;
pub const FLAG_SEND_FUA: u16 = 1 << 3;
pub const FLAG_ROTATIONAL: u16 = 1 << 4;
pub const FLAG_SEND_TRIM: u16 = 1 << 5;
pub const FLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const FLAG_SEND_DF: u16 = 1 << 7;
pub const FLAG_CAN_MULTI_CONN: u16 = 1 << 8;
pub const FLAG_SEND_FAST_ZERO: u16 = 1 << 11;

// Command types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_CACHE: u16 = 5;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

// Command flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
pub const CMD_FLAG_NO_HOLE: u16 = 1 << 1;
pub const CMD_FLAG_DF: u16 = 1 << 2;
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;
pub const CMD_FLAG_FAST_ZERO: u16 = 1 << 4;

// Structured reply chunk flags and types.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) | 1;
pub const REPLY_TYPE_ERROR_OFFSET: u16 = (1 << 15) | 2;

// `base:allocation` extent flags.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// The one metadata context we serve.
pub const BASE_ALLOCATION_CONTEXT: &str = "base:allocation";
/// The id we give `base:allocation` in NBD_REP_META_CONTEXT and block-status chunks. Any
/// non-zero value works; 1 keeps traces readable.
pub const BASE_ALLOCATION_CONTEXT_ID: u32 = 1;

// ---- Sizes of fixed wire structures ----

/// Server greeting: NBDMAGIC, IHAVEOPT, handshake flags.
pub const GREETING_LEN_BYTES: usize = 8 + 8 + 2;
/// Client flags after the greeting.
pub const CLIENT_FLAGS_LEN_BYTES: usize = 4;
/// Option header: IHAVEOPT, option code, payload length.
pub const OPTION_HEADER_LEN_BYTES: usize = 8 + 4 + 4;
/// Option reply header: magic, option, reply type, payload length.
pub const OPTION_REPLY_HEADER_LEN_BYTES: usize = 8 + 4 + 4 + 4;
/// Request header: magic, flags, type, handle, offset, length.
pub const REQUEST_HEADER_LEN_BYTES: usize = 4 + 2 + 2 + 8 + 8 + 4;
/// Simple reply header: magic, error, handle.
pub const SIMPLE_REPLY_HEADER_LEN_BYTES: usize = 4 + 4 + 8;
/// Structured reply chunk header: magic, flags, type, handle, payload length.
pub const STRUCTURED_REPLY_HEADER_LEN_BYTES: usize = 4 + 2 + 2 + 8 + 4;
/// Reserved zeroes after the NBD_OPT_EXPORT_NAME reply unless NO_ZEROES was agreed.
pub const EXPORT_NAME_REPLY_ZEROES_LEN_BYTES: usize = 124;

// ---- Limits ----

/// Smallest minimum block size an export may advertise: one 512-byte sector (a "512e"
/// volume). Each export has its own minimum ([`crate::ExportSummary::block_size_min_bytes`]:
/// 512 or 4096); offsets and lengths of every data command must be multiples of it, or the
/// request gets EINVAL.
pub const BLOCK_SIZE_MIN_BYTES: u32 = 512;
/// The block size we ask clients to use: 4 KiB, the unit of mapping and dedup (smaller writes
/// cost a read-modify-write).
pub const BLOCK_SIZE_PREFERRED_BYTES: u32 = 4096;
/// Largest payload of one READ or WRITE: 32 MiB, the de-facto limit of qemu and the kernel
/// client, and large enough that a bigger request would not go faster.
pub const PAYLOAD_MAX_BYTES: u32 = 32 * 1024 * 1024;
/// Largest option payload we buffer. Real options are a name plus a few queries (strings are
/// limited to 4 KiB by the spec); 64 KiB leaves room for many meta-context queries. Longer
/// options are skipped without buffering and answered with NBD_REP_ERR_TOO_BIG.
pub const OPTION_PAYLOAD_MAX_BYTES: u32 = 64 * 1024;
/// The spec's limit for any string (export names, queries).
pub const STRING_MAX_BYTES: u32 = 4096;
/// Options one connection may send before we call it abuse and hang up. Real clients send
/// fewer than ten.
pub const OPTIONS_PER_CONNECTION_MAX: u32 = 4096;
/// Extents we put in one block-status chunk; bounds the reply to 8 bytes each.
pub const BLOCK_STATUS_EXTENTS_MAX: usize = 64 * 1024;

const _: () = assert!(BLOCK_SIZE_MIN_BYTES.is_power_of_two());
// Multiples, written as masks (both divisors are powers of two).
const _: () = assert!(BLOCK_SIZE_PREFERRED_BYTES & (BLOCK_SIZE_MIN_BYTES - 1) == 0);
const _: () = assert!(BLOCK_SIZE_PREFERRED_BYTES.is_power_of_two());
const _: () = assert!(PAYLOAD_MAX_BYTES & (BLOCK_SIZE_PREFERRED_BYTES - 1) == 0);
const _: () = assert!(STRING_MAX_BYTES < OPTION_PAYLOAD_MAX_BYTES);

/// Error numbers of the transmission phase. The spec fixes these values (they are the Linux
/// ones) whatever the server's platform.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Errno {
    /// EPERM: write to a read-only export.
    NotPermitted,
    /// EIO: the backend failed.
    Io,
    /// ENOMEM.
    NoMemory,
    /// EINVAL: malformed, misaligned or out-of-range request.
    Invalid,
    /// ENOSPC: the datastore is full.
    NoSpace,
    /// EOVERFLOW: request longer than we can answer.
    Overflow,
    /// ENOTSUP: a flag or command we do not implement.
    NotSupported,
    /// ESHUTDOWN: the export is gone or the server is stopping.
    Shutdown,
}

impl Errno {
    /// The value sent on the wire.
    pub fn code(self) -> u32 {
        match self {
            Errno::NotPermitted => 1,
            Errno::Io => 5,
            Errno::NoMemory => 12,
            Errno::Invalid => 22,
            Errno::NoSpace => 28,
            Errno::Overflow => 75,
            Errno::NotSupported => 95,
            Errno::Shutdown => 108,
        }
    }

    /// Every errno the server sends.
    pub const ALL: [Errno; 8] = [
        Errno::NotPermitted,
        Errno::Io,
        Errno::NoMemory,
        Errno::Invalid,
        Errno::NoSpace,
        Errno::Overflow,
        Errno::NotSupported,
        Errno::Shutdown,
    ];

    /// The inverse of [`Errno::code`], for client-side decoding in tests and tools.
    pub fn from_code(code: u32) -> Option<Errno> {
        Errno::ALL.into_iter().find(|e| e.code() == code)
    }
}
