//! The payload codec behind [`super::Request`] and [`super::Response`]: postcard encoding of a
//! message's fields, the bulk trailer, limit checks, and the error context every failure
//! carries. Pure functions over byte slices, no I/O.

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::EncodedFrame;
use crate::error::ProtoError;
use crate::frame::FrameHeader;
use crate::kind::{Direction, MessageKind};
use crate::wire::BULK_TRAILER_LEN_BYTES;

/// The frame a message is being encoded into or decoded from, for error context.
pub(super) struct Cx {
    kind: MessageKind,
    request_id: u64,
}

impl Cx {
    pub(super) fn new(kind: MessageKind, request_id: u64) -> Self {
        Cx { kind, request_id }
    }

    /// Appends the postcard encoding of `fields` to `meta`; returns `bulk` for the caller's match.
    pub(super) fn put<'b, T: Serialize + ?Sized>(
        &self,
        fields: &T,
        meta: &mut Vec<u8>,
        bulk: &'b [u8],
    ) -> Result<&'b [u8], ProtoError> {
        postcard::to_extend(fields, std::mem::take(meta))
            .map(|encoded| *meta = encoded)
            .map_err(|source| self.malformed(source))?;
        Ok(bulk)
    }

    /// Like `put`, then the bulk trailer: the length of the fixed part.
    pub(super) fn put_bulk<'b, T: Serialize + ?Sized>(
        &self,
        fields: &T,
        meta: &mut Vec<u8>,
        bulk: &'b [u8],
    ) -> Result<&'b [u8], ProtoError> {
        self.put(fields, meta, bulk)?;
        let meta_len = u32::try_from(meta.len()).map_err(|_| ProtoError::LimitExceeded {
            kind: self.kind,
            field: "fixed part",
            len: count(meta.len()),
            max: u64::from(u32::MAX),
            request_id: self.request_id,
        })?;
        meta.extend_from_slice(&meta_len.to_le_bytes());
        Ok(bulk)
    }

    pub(super) fn finish<'b>(
        &self,
        bulk: &'b [u8],
        meta: Vec<u8>,
    ) -> Result<EncodedFrame<'b>, ProtoError> {
        let header = FrameHeader::for_payload(self.kind, self.request_id, &[bulk, &meta])?;
        Ok(EncodedFrame {
            header: header.encode(),
            bulk,
            meta,
        })
    }

    /// Decodes `T` from all of `bytes`: leftover bytes are an error, so each value has one
    /// accepted length.
    pub(super) fn take<T: DeserializeOwned>(&self, bytes: &[u8]) -> Result<T, ProtoError> {
        let (value, rest) =
            postcard::take_from_bytes::<T>(bytes).map_err(|source| self.malformed(source))?;
        if !rest.is_empty() {
            return Err(ProtoError::TrailingBytes {
                kind: self.kind,
                request_id: self.request_id,
                extra_bytes: count(rest.len()),
            });
        }
        Ok(value)
    }

    /// Splits a bulk payload into the bulk length and the fixed part, using the trailer.
    pub(super) fn split_bulk<'p>(
        &self,
        payload: &'p [u8],
    ) -> Result<(usize, &'p [u8]), ProtoError> {
        let bad = |meta_len_bytes: u32| ProtoError::BadBulkTrailer {
            kind: self.kind,
            request_id: self.request_id,
            meta_len_bytes,
            payload_len_bytes: count(payload.len()),
        };
        let Some((rest, trailer)) = payload.split_last_chunk::<BULK_TRAILER_LEN_BYTES>() else {
            return Err(bad(0));
        };
        let meta_len_bytes = u32::from_le_bytes(*trailer);
        let bulk_len = usize::try_from(meta_len_bytes)
            .ok()
            .and_then(|meta_len| rest.len().checked_sub(meta_len))
            .ok_or_else(|| bad(meta_len_bytes))?;
        Ok((bulk_len, &rest[bulk_len..]))
    }

    pub(super) fn at_most(
        &self,
        field: &'static str,
        len: usize,
        max: usize,
    ) -> Result<(), ProtoError> {
        if len <= max {
            return Ok(());
        }
        Err(ProtoError::LimitExceeded {
            kind: self.kind,
            field,
            len: count(len),
            max: count(max),
            request_id: self.request_id,
        })
    }

    pub(super) fn malformed(&self, source: postcard::Error) -> ProtoError {
        ProtoError::Malformed {
            kind: self.kind,
            request_id: self.request_id,
            source,
        }
    }

    pub(super) fn wrong_direction(&self, expected: Direction) -> ProtoError {
        ProtoError::WrongDirection {
            kind: self.kind,
            expected,
            request_id: self.request_id,
        }
    }
}

/// A length as the u64 errors carry (lossless on every target we build for).
fn count(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A u32 length or count as usize, for comparing with limits.
pub(super) fn u32_len(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}
