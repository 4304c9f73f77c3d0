//! weft-ec: stripe geometry and the erasure codecs.
//!
//! A c.node seals a log segment into one *stripe*: `k` data chunks plus `m` parity chunks, each
//! stored on a different d.node. This crate owns the pure part of that:
//!
//! - [`Redundancy`]: what a pool asks for (`none`, `xN`, `k+m`), validated, with its text form;
//! - [`StripeGeometry`]: the chunk length for a stripe and where a byte range of the stripe's
//!   data lives ([`StripeGeometry::locate`]);
//! - [`encode`], [`reconstruct`] and [`reconstruct_data`]: chunks from data, and missing chunks
//!   from any `k` present ones.
//!
//! It does no I/O: no files, no threads, no async. Callers read and write the chunks.
//!
//! # Data layout
//!
//! Data is laid out contiguously: data chunk `i` holds stripe bytes `[i*L, (i+1)*L)` where `L`
//! is the chunk length, and the last data bytes are followed by zeroes. A small read therefore
//! touches one data chunk, that is one d.node. `L` is a multiple of
//! [`CHUNK_ALIGN_BYTES`] (O_DIRECT). A replicated stripe stores the whole data in every copy.
//!
//! Every codec computes parity position by position (Reed-Solomon over 64-byte blocks of
//! 16-bit symbols), so the same window `[a, b)` of every chunk, with `a` and `b` multiples of
//! [`CHUNK_ALIGN_BYTES`], is itself a stripe of the same redundancy with chunk length `b - a`
//! (`StripeGeometry::new(redundancy, b - a)`). A degraded read rebuilds only the pages it needs
//! from that window of `k` other chunks. Tests pin this property.
//!
//! # Codec ids
//!
//! A stripe's header records the codec id (a `u8`) with `k` and `m`. Parity bytes differ between
//! Reed-Solomon libraries, so the id names the exact parity format. These ids are part of the
//! on-disk format: never renumber one; a new library or format gets a new id.
//!
//! | id | [`CodecId`] | chunks | parity |
//! | --- | --- | --- | --- |
//! | 0 | `None` | `k = 1`, `m = 0` | none: one chunk holds the data |
//! | 1 | `Replication` | `k = 1`, `m = copies - 1` | every chunk is a copy of the data |
//! | 2 | `ReedSolomonLeopard` | `k` in 1..=21, `m` in 1..=3 | Reed-Solomon over GF(2^16), Leopard-RS construction, as computed by `reed-solomon-simd` 3.x (systematic: data chunks are the data) |

mod codec;
mod error;
mod geometry;
mod redundancy;
mod stripe;

pub use crate::error::EcError;
pub use crate::geometry::{ChunkRange, StripeGeometry, CHUNK_ALIGN_BYTES, STRIPE_DATA_MAX_BYTES};
pub use crate::redundancy::{
    CodecId, Redundancy, RedundancyError, COPIES_MAX, COPIES_MIN, DATA_CHUNKS_MAX,
    PARITY_CHUNKS_MAX,
};
pub use crate::stripe::{encode, reconstruct, reconstruct_data};
