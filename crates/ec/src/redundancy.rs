//! Redundancy schemes: what a pool asks for (`none`, replication `xN`, erasure coding `k+m`),
//! their validation, their text form (config, CLI, API), the codec id each is stored under, and
//! the durability rule (`min_durable_chunks`). Pure values: no I/O.

use std::fmt;
use std::str::FromStr;

/// Most data chunks of an erasure-coded stripe. 21+3 is the wide default of a large cluster
/// (12.5% overhead, any 3 losses survived); wider stripes mean more d.nodes per read repair.
pub const DATA_CHUNKS_MAX: u8 = 21;
/// Most parity chunks of an erasure-coded stripe: 3 losses survived is the design's ceiling.
pub const PARITY_CHUNKS_MAX: u8 = 3;
/// Fewest copies of a replicated stripe (one copy is [`Redundancy::None`]).
pub const COPIES_MIN: u8 = 2;
/// Most copies of a replicated stripe: beyond x4, erasure coding is cheaper for the same safety.
pub const COPIES_MAX: u8 = 4;

/// Most digits in one number of the text form: every count fits in two, three leaves room for
/// a clear range error ("100+2") rather than a syntax error.
const COUNT_DIGITS_MAX: usize = 3;
/// How much of a refused input a syntax error keeps: enough to recognise it in a log.
const SYNTAX_INPUT_KEPT_CHARS: usize = 32;

// Chunk indexes are u8 (in headers and in `ChunkRange`), so a stripe has at most 255 chunks.
const _: () = assert!(DATA_CHUNKS_MAX as u16 + PARITY_CHUNKS_MAX as u16 <= u8::MAX as u16);
const _: () = assert!(COPIES_MAX as u16 <= u8::MAX as u16 && COPIES_MIN >= 2);

/// How a stripe is protected. Build it with [`Redundancy::replicated`],
/// [`Redundancy::erasure`], [`Redundancy::from_parts`] or [`Redundancy::parse`], which validate;
/// a value built by hand is checked again by [`StripeGeometry`](crate::StripeGeometry).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Redundancy {
    /// One chunk, no protection (`k = 1`, `m = 0`). Text form `none`.
    None,
    /// `copies` identical chunks, `copies` in [`COPIES_MIN`]..=[`COPIES_MAX`]. Text form `x3`.
    Replicated {
        /// Number of copies, the original included.
        copies: u8,
    },
    /// `k` data chunks and `m` parity chunks, `k` in 1..=[`DATA_CHUNKS_MAX`], `m` in
    /// 1..=[`PARITY_CHUNKS_MAX`]. Text form `4+2`. Plain striping (`m = 0`) is refused: it
    /// loses the stripe when any one of `k` d.nodes is lost.
    Erasure {
        /// Data chunks.
        k: u8,
        /// Parity chunks.
        m: u8,
    },
}

/// The parity format of a stripe, stored as a `u8` in on-disk headers. Part of the format:
/// never renumber. See the table in the crate documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[repr(u8)]
pub enum CodecId {
    /// 0: one chunk, no parity.
    None = 0,
    /// 1: identical copies.
    Replication = 1,
    /// 2: Reed-Solomon over GF(2^16) (Leopard-RS), as computed by `reed-solomon-simd` 3.x.
    ReedSolomonLeopard = 2,
}

/// Why a redundancy scheme was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedundancyError {
    /// Replication with a number of copies out of range.
    #[error("replication needs {min}..={max} copies, got {copies}")]
    Copies {
        /// Requested copies.
        copies: u8,
        /// [`COPIES_MIN`].
        min: u8,
        /// [`COPIES_MAX`].
        max: u8,
    },
    /// Erasure coding with a number of data chunks out of range.
    #[error("erasure coding needs 1..={max} data chunks, got {data_chunks}")]
    DataChunks {
        /// Requested `k`.
        data_chunks: u8,
        /// [`DATA_CHUNKS_MAX`].
        max: u8,
    },
    /// Erasure coding with a number of parity chunks out of range.
    #[error("erasure coding needs 1..={max} parity chunks, got {parity_chunks}")]
    ParityChunks {
        /// Requested `m`.
        parity_chunks: u8,
        /// [`PARITY_CHUNKS_MAX`].
        max: u8,
    },
    /// A codec id this version does not know.
    #[error("unknown codec id {codec_id}")]
    UnknownCodec {
        /// The id read.
        codec_id: u8,
    },
    /// A known codec id with chunk counts it cannot have (for example codec 0 with `k = 2`).
    #[error("codec {codec_id} cannot have {data_chunks} data and {parity_chunks} parity chunks")]
    CodecShape {
        /// The id read.
        codec_id: u8,
        /// `k` read.
        data_chunks: u8,
        /// `m` read.
        parity_chunks: u8,
    },
    /// Text that is not `none`, `xN` or `k+m`.
    #[error("redundancy {input:?} is not `none`, `xN` or `k+m`")]
    Syntax {
        /// The refused text (its first 32 characters).
        input: String,
    },
}

impl Redundancy {
    /// Replication with `copies` copies (2..=4).
    pub fn replicated(copies: u8) -> Result<Self, RedundancyError> {
        if !(COPIES_MIN..=COPIES_MAX).contains(&copies) {
            return Err(RedundancyError::Copies {
                copies,
                min: COPIES_MIN,
                max: COPIES_MAX,
            });
        }
        Ok(Self::Replicated { copies })
    }

    /// Erasure coding with `k` data (1..=21) and `m` parity (1..=3) chunks.
    pub fn erasure(k: u8, m: u8) -> Result<Self, RedundancyError> {
        if !(1..=DATA_CHUNKS_MAX).contains(&k) {
            return Err(RedundancyError::DataChunks {
                data_chunks: k,
                max: DATA_CHUNKS_MAX,
            });
        }
        if !(1..=PARITY_CHUNKS_MAX).contains(&m) {
            return Err(RedundancyError::ParityChunks {
                parity_chunks: m,
                max: PARITY_CHUNKS_MAX,
            });
        }
        Ok(Self::Erasure { k, m })
    }

    /// The scheme a stripe header describes: the inverse of
    /// (`codec_id().to_u8()`, `data_chunks()`, `parity_chunks()`).
    pub fn from_parts(
        codec_id: u8,
        data_chunks: u8,
        parity_chunks: u8,
    ) -> Result<Self, RedundancyError> {
        let shape = RedundancyError::CodecShape {
            codec_id,
            data_chunks,
            parity_chunks,
        };
        match CodecId::from_u8(codec_id)? {
            CodecId::None if data_chunks == 1 && parity_chunks == 0 => Ok(Self::None),
            CodecId::Replication if data_chunks == 1 && parity_chunks > 0 => {
                Self::replicated(parity_chunks.saturating_add(1))
            }
            CodecId::ReedSolomonLeopard => Self::erasure(data_chunks, parity_chunks),
            CodecId::None | CodecId::Replication => Err(shape),
        }
    }

    /// Parses the text form: `none`, `xN` (replication) or `k+m` (erasure coding). Exact:
    /// lowercase, no spaces, no leading zeroes.
    pub fn parse(text: &str) -> Result<Self, RedundancyError> {
        let syntax = || RedundancyError::Syntax {
            input: text.chars().take(SYNTAX_INPUT_KEPT_CHARS).collect(),
        };
        if text == "none" {
            return Ok(Self::None);
        }
        if let Some(copies) = text.strip_prefix('x') {
            return Self::replicated(parse_count(copies).ok_or_else(syntax)?);
        }
        let (k, m) = text.split_once('+').ok_or_else(syntax)?;
        Self::erasure(
            parse_count(k).ok_or_else(syntax)?,
            parse_count(m).ok_or_else(syntax)?,
        )
    }

    /// Checks a value that may have been built by hand; returns it unchanged when valid.
    pub fn validate(self) -> Result<Self, RedundancyError> {
        match self {
            Self::None => Ok(self),
            Self::Replicated { copies } => Self::replicated(copies),
            Self::Erasure { k, m } => Self::erasure(k, m),
        }
    }

    /// `k`: chunks that hold data (1 for `none` and replication: each copy holds all of it).
    pub fn data_chunks(self) -> u8 {
        match self {
            Self::None | Self::Replicated { .. } => 1,
            Self::Erasure { k, .. } => k,
        }
    }

    /// `m`: chunks beyond the data chunks (`copies - 1` for replication).
    pub fn parity_chunks(self) -> u8 {
        match self {
            Self::None => 0,
            Self::Replicated { copies } => copies.saturating_sub(1),
            Self::Erasure { m, .. } => m,
        }
    }

    /// `k + m`: chunks stored, one per d.node.
    pub fn total_chunks(self) -> u8 {
        self.data_chunks().saturating_add(self.parity_chunks())
    }

    /// The codec that computes this scheme's parity.
    pub fn codec_id(self) -> CodecId {
        match self {
            Self::None => CodecId::None,
            Self::Replicated { .. } => CodecId::Replication,
            Self::Erasure { .. } => CodecId::ReedSolomonLeopard,
        }
    }

    /// Chunks that must be durable before the stripe counts as durable: `min(k+1, k+m)` (the
    /// pool's `min_size`). Acknowledging at exactly `k` would let one more loss right after the
    /// write lose the stripe. 1 for `none`, 2 for `x3`, 5 for `4+2`.
    pub fn min_durable_chunks(self) -> u8 {
        let k = self.data_chunks();
        k.saturating_add(1).min(self.total_chunks())
    }
}

impl fmt::Display for Redundancy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::None => f.write_str("none"),
            Self::Replicated { copies } => write!(f, "x{copies}"),
            Self::Erasure { k, m } => write!(f, "{k}+{m}"),
        }
    }
}

impl FromStr for Redundancy {
    type Err = RedundancyError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Self::parse(text)
    }
}

impl CodecId {
    /// The id of a stripe header's codec byte.
    pub fn from_u8(codec_id: u8) -> Result<Self, RedundancyError> {
        match codec_id {
            0 => Ok(Self::None),
            1 => Ok(Self::Replication),
            2 => Ok(Self::ReedSolomonLeopard),
            _ => Err(RedundancyError::UnknownCodec { codec_id }),
        }
    }

    /// The byte stored in stripe headers.
    pub fn to_u8(self) -> u8 {
        self as u8
    }
}

impl From<CodecId> for u8 {
    fn from(codec_id: CodecId) -> Self {
        codec_id.to_u8()
    }
}

impl TryFrom<u8> for CodecId {
    type Error = RedundancyError;

    fn try_from(codec_id: u8) -> Result<Self, Self::Error> {
        Self::from_u8(codec_id)
    }
}

/// A decimal count: ASCII digits only (`u8::from_str` would also take a `+` sign), no leading
/// zero, at most [`COUNT_DIGITS_MAX`] digits.
fn parse_count(digits: &str) -> Option<u8> {
    let plain = !digits.is_empty()
        && digits.len() <= COUNT_DIGITS_MAX
        && digits.bytes().all(|b| b.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'));
    if !plain {
        return None;
    }
    digits.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_round_trip_every_valid_scheme() {
        let mut all = vec![Redundancy::None];
        all.extend((COPIES_MIN..=COPIES_MAX).map(|copies| Redundancy::Replicated { copies }));
        for k in 1..=DATA_CHUNKS_MAX {
            all.extend((1..=PARITY_CHUNKS_MAX).map(|m| Redundancy::Erasure { k, m }));
        }
        for redundancy in all {
            let text = redundancy.to_string();
            assert_eq!(Redundancy::parse(&text), Ok(redundancy), "{text}");
            assert_eq!(text.parse::<Redundancy>(), Ok(redundancy));
        }
        assert_eq!(Redundancy::Erasure { k: 4, m: 2 }.to_string(), "4+2");
        assert_eq!(Redundancy::Replicated { copies: 3 }.to_string(), "x3");
        assert_eq!(Redundancy::None.to_string(), "none");
    }

    #[test]
    fn parse_refuses_malformed_text() {
        for text in [
            "", "None", " 4+2", "4+2 ", "4+", "+2", "4++2", "4+-2", "x", "x+3", "X3", "04+2",
            "4+02", "x03", "4 + 2", "4+2+1", "1000+1", "4.0+2", "none ",
        ] {
            assert!(
                matches!(Redundancy::parse(text), Err(RedundancyError::Syntax { .. })),
                "{text:?} was accepted"
            );
        }
    }

    #[test]
    fn parse_refuses_out_of_range_counts() {
        assert!(matches!(
            Redundancy::parse("x1"),
            Err(RedundancyError::Copies { copies: 1, .. })
        ));
        assert!(matches!(
            Redundancy::parse("x5"),
            Err(RedundancyError::Copies { copies: 5, .. })
        ));
        assert!(matches!(
            Redundancy::parse("0+1"),
            Err(RedundancyError::DataChunks { data_chunks: 0, .. })
        ));
        assert!(matches!(
            Redundancy::parse("22+1"),
            Err(RedundancyError::DataChunks {
                data_chunks: 22,
                ..
            })
        ));
        assert!(matches!(
            Redundancy::parse("4+0"),
            Err(RedundancyError::ParityChunks {
                parity_chunks: 0,
                ..
            })
        ));
        assert!(matches!(
            Redundancy::parse("4+4"),
            Err(RedundancyError::ParityChunks {
                parity_chunks: 4,
                ..
            })
        ));
        assert!(matches!(
            Redundancy::parse("255+1"),
            Err(RedundancyError::DataChunks { .. })
        ));
        assert!(matches!(
            Redundancy::parse("256+1"),
            Err(RedundancyError::Syntax { .. })
        ));
    }

    #[test]
    fn syntax_error_keeps_a_bounded_prefix_of_the_input() {
        let long = "y".repeat(1000);
        let Err(RedundancyError::Syntax { input }) = Redundancy::parse(&long) else {
            panic!("accepted");
        };
        assert_eq!(input.len(), SYNTAX_INPUT_KEPT_CHARS);
    }

    #[test]
    fn chunk_counts_and_min_durable_follow_the_design() {
        let none = Redundancy::None;
        assert_eq!(
            (
                none.data_chunks(),
                none.parity_chunks(),
                none.total_chunks()
            ),
            (1, 0, 1)
        );
        assert_eq!(none.min_durable_chunks(), 1);

        let x3 = Redundancy::replicated(3).expect("valid");
        assert_eq!(
            (x3.data_chunks(), x3.parity_chunks(), x3.total_chunks()),
            (1, 2, 3)
        );
        assert_eq!(x3.min_durable_chunks(), 2);

        let ec = Redundancy::erasure(4, 2).expect("valid");
        assert_eq!(
            (ec.data_chunks(), ec.parity_chunks(), ec.total_chunks()),
            (4, 2, 6)
        );
        assert_eq!(ec.min_durable_chunks(), 5);

        let wide = Redundancy::erasure(21, 3).expect("valid");
        assert_eq!(wide.total_chunks(), 24);
        assert_eq!(wide.min_durable_chunks(), 22);

        let one_plus_one = Redundancy::erasure(1, 1).expect("valid");
        assert_eq!(one_plus_one.min_durable_chunks(), 2);
    }

    #[test]
    fn codec_ids_are_pinned() {
        assert_eq!(CodecId::None.to_u8(), 0);
        assert_eq!(CodecId::Replication.to_u8(), 1);
        assert_eq!(CodecId::ReedSolomonLeopard.to_u8(), 2);
        assert_eq!(Redundancy::None.codec_id(), CodecId::None);
        assert_eq!(
            Redundancy::Replicated { copies: 2 }.codec_id(),
            CodecId::Replication
        );
        assert_eq!(
            Redundancy::Erasure { k: 4, m: 2 }.codec_id(),
            CodecId::ReedSolomonLeopard
        );
        for id in 0..=u8::MAX {
            match CodecId::try_from(id) {
                Ok(codec) => assert_eq!(u8::from(codec), id),
                Err(error) => {
                    assert!(id > 2);
                    assert_eq!(error, RedundancyError::UnknownCodec { codec_id: id });
                }
            }
        }
    }

    #[test]
    fn from_parts_inverts_the_header_fields() {
        for text in ["none", "x2", "x3", "x4", "1+1", "4+2", "8+2", "21+3"] {
            let redundancy = Redundancy::parse(text).expect("valid");
            let parts = (
                redundancy.codec_id().to_u8(),
                redundancy.data_chunks(),
                redundancy.parity_chunks(),
            );
            assert_eq!(
                Redundancy::from_parts(parts.0, parts.1, parts.2),
                Ok(redundancy)
            );
        }
    }

    #[test]
    fn from_parts_refuses_impossible_headers() {
        for (codec_id, k, m) in [(0, 2, 0), (0, 1, 1), (1, 2, 1), (1, 1, 0)] {
            assert!(
                matches!(
                    Redundancy::from_parts(codec_id, k, m),
                    Err(RedundancyError::CodecShape { .. })
                ),
                "{codec_id} {k} {m}"
            );
        }
        assert!(matches!(
            Redundancy::from_parts(1, 1, 4),
            Err(RedundancyError::Copies { .. })
        ));
        assert!(matches!(
            Redundancy::from_parts(1, 1, 255),
            Err(RedundancyError::Copies { .. })
        ));
        assert!(matches!(
            Redundancy::from_parts(2, 4, 0),
            Err(RedundancyError::ParityChunks { .. })
        ));
        assert!(matches!(
            Redundancy::from_parts(3, 1, 0),
            Err(RedundancyError::UnknownCodec { codec_id: 3 })
        ));
    }

    #[test]
    fn validate_catches_hand_built_values() {
        assert!(Redundancy::Erasure { k: 0, m: 1 }.validate().is_err());
        assert!(Redundancy::Erasure { k: 255, m: 255 }.validate().is_err());
        assert!(Redundancy::Replicated { copies: 0 }.validate().is_err());
        assert_eq!(Redundancy::Erasure { k: 255, m: 255 }.total_chunks(), 255);
        assert_eq!(Redundancy::None.validate(), Ok(Redundancy::None));
    }
}
