//! PDU framing: cutting PDUs out of a byte stream (BHS, AHS, header digest, data segment and
//! its padding, data digest) with every length checked before use, and writing PDUs the same
//! way. The target takes owned [`Pdu`]s; an initiator's read path borrows them ([`PduRef`]) so
//! read data is not copied twice. What the fields of each PDU mean lives in [`crate::request`]
//! (initiator PDUs), [`crate::response`] (target PDUs, encoded) and [`crate::target_pdu`]
//! (target PDUs, decoded).

use crate::wire::{AHS_MAX_BYTES, BHS_BYTES, DATA_SEGMENT_MAX_BYTES, DIGEST_BYTES};
use crate::Parse;

/// Which digests the connection negotiated (both start off during login).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digests {
    pub header: bool,
    pub data: bool,
}

/// One PDU as it came off the wire, digests checked and padding dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pdu {
    pub bhs: [u8; BHS_BYTES],
    pub ahs: Vec<u8>,
    pub data: Vec<u8>,
}

/// Why bytes can never become a PDU; the connection cannot continue (at error recovery level
/// 0 the initiator recovers by logging in again).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("header digest mismatch")]
    HeaderDigest,
    #[error("data digest mismatch")]
    DataDigest,
    #[error("data segment of {len} bytes exceeds the {max} allowed")]
    DataTooLong { len: usize, max: usize },
}

/// One PDU borrowed from the receive buffer, digests checked and padding dropped: what an
/// initiator's hot path decodes without copying a data segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PduRef<'a> {
    pub bhs: &'a [u8; BHS_BYTES],
    pub ahs: &'a [u8],
    pub data: &'a [u8],
}

impl Pdu {
    /// The same PDU, borrowed.
    pub fn borrowed(&self) -> PduRef<'_> {
        PduRef {
            bhs: &self.bhs,
            ahs: &self.ahs,
            data: &self.data,
        }
    }

    pub fn opcode(&self) -> u8 {
        self.borrowed().opcode()
    }

    pub fn immediate(&self) -> bool {
        self.borrowed().immediate()
    }

    pub fn flags(&self) -> u8 {
        self.borrowed().flags()
    }

    pub fn u16_at(&self, at: usize) -> u16 {
        self.borrowed().u16_at(at)
    }

    pub fn u32_at(&self, at: usize) -> u32 {
        self.borrowed().u32_at(at)
    }

    pub fn u64_at(&self, at: usize) -> u64 {
        self.borrowed().u64_at(at)
    }

    /// Initiator task tag (bytes 16..20 of every PDU).
    pub fn itt(&self) -> u32 {
        self.borrowed().itt()
    }
}

impl PduRef<'_> {
    pub fn opcode(&self) -> u8 {
        self.bhs[0] & 0x3f
    }

    pub fn immediate(&self) -> bool {
        self.bhs[0] & crate::wire::FLAG_IMMEDIATE != 0
    }

    pub fn flags(&self) -> u8 {
        self.bhs[1]
    }

    pub fn u16_at(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.bhs[at], self.bhs[at + 1]])
    }

    pub fn u32_at(&self, at: usize) -> u32 {
        be_u32(&self.bhs[at..at + 4])
    }

    pub fn u64_at(&self, at: usize) -> u64 {
        let mut b = [0u8; 8];
        b.copy_from_slice(&self.bhs[at..at + 8]);
        u64::from_be_bytes(b)
    }

    /// Initiator task tag (bytes 16..20 of every PDU).
    pub fn itt(&self) -> u32 {
        self.u32_at(16)
    }

    /// An owned copy.
    pub fn to_owned_pdu(&self) -> Pdu {
        Pdu {
            bhs: *self.bhs,
            ahs: self.ahs.to_vec(),
            data: self.data.to_vec(),
        }
    }
}

fn be_u32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

fn digest(bytes: &[&[u8]]) -> [u8; DIGEST_BYTES] {
    let mut crc = 0u32;
    for part in bytes {
        crc = crc32c::crc32c_append(crc, part);
    }
    crc.to_le_bytes()
}

fn padded(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// Cut one PDU from the front of `buf`. `data_max` is the largest data segment accepted
/// (what we declared as MaxRecvDataSegmentLength, or the login limit); anything above it,
/// or above [`DATA_SEGMENT_MAX_BYTES`], is refused before it is buffered.
pub fn parse_pdu(buf: &[u8], digests: Digests, data_max: usize) -> Parse<Pdu, FrameError> {
    match parse_pdu_ref(buf, digests, data_max) {
        Parse::Complete(pdu, len) => Parse::Complete(pdu.to_owned_pdu(), len),
        Parse::Incomplete => Parse::Incomplete,
        Parse::Invalid(e) => Parse::Invalid(e),
    }
}

/// [`parse_pdu`] without copying: the PDU borrows `buf`.
pub fn parse_pdu_ref(
    buf: &[u8],
    digests: Digests,
    data_max: usize,
) -> Parse<PduRef<'_>, FrameError> {
    match frame_len(buf, digests, data_max) {
        Ok(Some(len)) => match cut(&buf[..len], digests) {
            Ok(pdu) => Parse::Complete(pdu, len),
            Err(e) => Parse::Invalid(e),
        },
        Ok(None) => Parse::Incomplete,
        Err(e) => Parse::Invalid(e),
    }
}

/// How long the PDU at the front of `buf` is on the wire (`None` until its BHS is there).
pub fn frame_len(
    buf: &[u8],
    digests: Digests,
    data_max: usize,
) -> Result<Option<usize>, FrameError> {
    if buf.len() < BHS_BYTES {
        return Ok(None);
    }
    let ahs_len = usize::from(buf[4]) * 4;
    let data_len = (usize::from(buf[5]) << 16) | (usize::from(buf[6]) << 8) | usize::from(buf[7]);
    let max = data_max.min(DATA_SEGMENT_MAX_BYTES);
    if data_len > max {
        return Err(FrameError::DataTooLong { len: data_len, max });
    }
    debug_assert!(ahs_len <= AHS_MAX_BYTES);
    let header_digest = if digests.header { DIGEST_BYTES } else { 0 };
    let data_digest = if digests.data && data_len > 0 {
        DIGEST_BYTES
    } else {
        0
    };
    let total = BHS_BYTES + ahs_len + header_digest + padded(data_len) + data_digest;
    Ok((buf.len() >= total).then_some(total))
}

/// Split a whole frame and check its digests.
fn cut(frame: &[u8], digests: Digests) -> Result<PduRef<'_>, FrameError> {
    let bhs: &[u8; BHS_BYTES] = frame[..BHS_BYTES]
        .try_into()
        .expect("frame_len counted the BHS");
    let ahs_len = usize::from(bhs[4]) * 4;
    let data_len = (usize::from(bhs[5]) << 16) | (usize::from(bhs[6]) << 8) | usize::from(bhs[7]);
    let mut at = BHS_BYTES + ahs_len;
    let ahs = &frame[BHS_BYTES..at];
    if digests.header {
        let got = &frame[at..at + DIGEST_BYTES];
        if digest(&[&frame[..at]]) != got {
            return Err(FrameError::HeaderDigest);
        }
        at += DIGEST_BYTES;
    }
    let data = &frame[at..at + data_len];
    let padded_end = at + padded(data_len);
    if digests.data && data_len > 0 {
        let got = &frame[padded_end..padded_end + DIGEST_BYTES];
        if digest(&[&frame[at..padded_end]]) != got {
            return Err(FrameError::DataDigest);
        }
    }
    Ok(PduRef { bhs, ahs, data })
}

/// Append a PDU: `bhs` with its data segment length filled in, the header digest, `data`
/// padded to 4 bytes, and the data digest. Data segments are at most 16 MiB (24-bit field).
pub fn encode_pdu(bhs: [u8; BHS_BYTES], data: &[u8], digests: Digests, out: &mut Vec<u8>) {
    out.reserve(BHS_BYTES + 2 * DIGEST_BYTES + padded(data.len()));
    encode_header(bhs, data.len(), digests, out);
    out.extend_from_slice(data);
    encode_trailer(data, digests, out);
}

/// Append what goes before a PDU's data segment: `bhs` with its data segment length set to
/// `data_len`, then the header digest. With the data and then [`encode_trailer`] it is
/// [`encode_pdu`]; a sender that writes the data segment from its own buffer (vectored)
/// uses the two halves and never copies the data.
pub fn encode_header(
    mut bhs: [u8; BHS_BYTES],
    data_len: usize,
    digests: Digests,
    out: &mut Vec<u8>,
) {
    let len = u32::try_from(data_len)
        .ok()
        .filter(|&l| l < 1 << 24)
        .expect("data segments are cut below 16 MiB by the caller");
    bhs[4] = 0;
    bhs[5..8].copy_from_slice(&len.to_be_bytes()[1..]);
    out.extend_from_slice(&bhs);
    if digests.header {
        out.extend_from_slice(&digest(&[&bhs]));
    }
}

/// Append what goes after the data segment `data`: its padding to 4 bytes and the data
/// digest (CRC32C over the data and the padding). Nothing for an empty segment.
pub fn encode_trailer(data: &[u8], digests: Digests, out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    let pad = padded(data.len()) - data.len();
    out.extend_from_slice(&[0u8; 3][..pad]);
    if digests.data {
        out.extend_from_slice(&digest(&[data, &[0u8; 3][..pad]]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(data: &[u8], digests: Digests) -> Vec<u8> {
        let mut bhs = [0u8; BHS_BYTES];
        bhs[0] = 0x01;
        bhs[16..20].copy_from_slice(&0x1234_5678u32.to_be_bytes());
        let mut out = Vec::new();
        encode_pdu(bhs, data, digests, &mut out);
        out
    }

    #[test]
    fn pdus_round_trip_with_and_without_digests_byte_by_byte() {
        for digests in [
            Digests::default(),
            Digests {
                header: true,
                data: true,
            },
        ] {
            for data in [&b""[..], b"a", b"abcd", b"abcde"] {
                let wire = sample(data, digests);
                assert_eq!(wire.len() % 4, 0);
                for cut_at in 0..wire.len() {
                    assert_eq!(parse_pdu(&wire[..cut_at], digests, 1024), Parse::Incomplete);
                }
                let Parse::Complete(pdu, used) = parse_pdu(&wire, digests, 1024) else {
                    panic!("complete");
                };
                assert_eq!(used, wire.len());
                assert_eq!(pdu.data, data);
                assert_eq!(pdu.itt(), 0x1234_5678);
                assert_eq!(pdu.opcode(), 0x01);
            }
        }
    }

    #[test]
    fn a_flipped_bit_fails_its_digest_and_oversize_data_is_refused_early() {
        let digests = Digests {
            header: true,
            data: true,
        };
        let wire = sample(b"payload!", digests);
        let mut bad_header = wire.clone();
        bad_header[20] ^= 1;
        assert_eq!(
            parse_pdu(&bad_header, digests, 1024),
            Parse::Invalid(FrameError::HeaderDigest)
        );
        let mut bad_data = wire.clone();
        bad_data[BHS_BYTES + DIGEST_BYTES] ^= 1;
        assert_eq!(
            parse_pdu(&bad_data, digests, 1024),
            Parse::Invalid(FrameError::DataDigest)
        );
        // Only the BHS is needed to refuse a data segment that is too long.
        assert!(matches!(
            parse_pdu(&wire[..BHS_BYTES], digests, 4),
            Parse::Invalid(FrameError::DataTooLong { len: 8, max: 4 })
        ));
    }

    #[test]
    fn header_data_and_trailer_are_the_whole_pdu() {
        for digests in [
            Digests::default(),
            Digests {
                header: true,
                data: false,
            },
            Digests {
                header: true,
                data: true,
            },
        ] {
            for data in [&b""[..], b"a", b"ab", b"abc", b"abcd", b"abcdefg"] {
                let mut bhs = [0u8; BHS_BYTES];
                bhs[0] = 0x25;
                bhs[16..20].copy_from_slice(&7u32.to_be_bytes());
                let mut split = Vec::new();
                encode_header(bhs, data.len(), digests, &mut split);
                split.extend_from_slice(data);
                encode_trailer(data, digests, &mut split);
                let mut whole = Vec::new();
                encode_pdu(bhs, data, digests, &mut whole);
                assert_eq!(split, whole);
                let Parse::Complete(pdu, used) = parse_pdu_ref(&split, digests, 1024) else {
                    panic!("a whole PDU");
                };
                assert_eq!((used, pdu.data), (split.len(), data));
            }
        }
    }

    #[test]
    fn the_digest_is_crc32c_least_significant_byte_first() {
        // RFC 7143 appendix B.4: 32 bytes of zeroes give CRC32C 0x8a9136aa.
        assert_eq!(digest(&[&[0u8; 32]]), [0xaa, 0x36, 0x91, 0x8a]);
    }
}
