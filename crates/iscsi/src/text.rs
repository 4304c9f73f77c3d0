//! Login and Text PDU payloads: `key=value` pairs, each ended by a NUL byte (RFC 7143 §6).

use crate::wire::TEXT_MAX_BYTES;

/// Keys and values in the order they came.
pub type Pairs = Vec<(String, String)>;

/// Why a text payload cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("text of {0} bytes exceeds the limit")]
    TooLong(usize),
    #[error("a text item is not key=value")]
    Malformed,
    #[error("key {0} given twice")]
    Duplicate(String),
}

/// Key names are at most 63 bytes, values at most 8192 (RFC 7143 §6.1; CHAP values are hex
/// and stay far below).
const KEY_MAX_BYTES: usize = 63;
const VALUE_MAX_BYTES: usize = 8192;

/// Parse `key=value\0...`. A missing final NUL is tolerated; empty items (padding) are skipped.
pub fn parse_pairs(text: &[u8]) -> Result<Pairs, TextError> {
    if text.len() > TEXT_MAX_BYTES {
        return Err(TextError::TooLong(text.len()));
    }
    let mut pairs: Pairs = Vec::new();
    for item in text.split(|&b| b == 0).filter(|i| !i.is_empty()) {
        let item = std::str::from_utf8(item).map_err(|_| TextError::Malformed)?;
        let (key, value) = item.split_once('=').ok_or(TextError::Malformed)?;
        if key.is_empty() || key.len() > KEY_MAX_BYTES || value.len() > VALUE_MAX_BYTES {
            return Err(TextError::Malformed);
        }
        if pairs.iter().any(|(k, _)| k == key) {
            return Err(TextError::Duplicate(key.to_string()));
        }
        pairs.push((key.to_string(), value.to_string()));
    }
    Ok(pairs)
}

/// Append `key=value\0`.
pub fn push_pair(out: &mut Vec<u8>, key: &str, value: &str) {
    out.extend_from_slice(key.as_bytes());
    out.push(b'=');
    out.extend_from_slice(value.as_bytes());
    out.push(0);
}

/// The value of `key`, if given.
pub fn get<'a>(pairs: &'a Pairs, key: &str) -> Option<&'a str> {
    pairs
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_parse_and_encode() {
        let mut out = Vec::new();
        push_pair(&mut out, "InitiatorName", "iqn.2026-11.test:a");
        push_pair(&mut out, "SessionType", "Normal");
        let pairs = parse_pairs(&out).unwrap();
        assert_eq!(get(&pairs, "SessionType"), Some("Normal"));
        assert_eq!(pairs.len(), 2);
        assert_eq!(parse_pairs(b"A=1\0\0\0").unwrap().len(), 1);
        assert_eq!(parse_pairs(b"A=1").unwrap().len(), 1);
    }

    #[test]
    fn bad_text_is_refused() {
        assert_eq!(parse_pairs(b"novalue\0"), Err(TextError::Malformed));
        assert_eq!(parse_pairs(b"=v\0"), Err(TextError::Malformed));
        assert_eq!(parse_pairs(b"\xff=1\0"), Err(TextError::Malformed));
        assert_eq!(
            parse_pairs(b"A=1\0A=2\0"),
            Err(TextError::Duplicate("A".into()))
        );
        assert!(matches!(
            parse_pairs(&vec![b'a'; TEXT_MAX_BYTES + 1]),
            Err(TextError::TooLong(_))
        ));
    }
}
