//! CHAP with MD5 (RFC 1994, as iSCSI uses it in RFC 7143 §12.1.3): the response is
//! MD5(identifier || secret || challenge). Binary values travel as `0x` hex or `0b` base64.

use md5::{Digest, Md5};

/// CHAP_A value for MD5, the one algorithm every initiator offers.
pub const CHAP_ALGORITHM_MD5: &str = "5";
/// Challenge length we send (RFC 7143 asks for at least as long as the response: 16).
pub const CHALLENGE_BYTES: usize = 16;
/// Challenges and responses longer than this are refused (a bound on what we decode).
const BINARY_MAX_BYTES: usize = 1024;

/// The CHAP response to `challenge` with identifier `id` under `secret`.
pub fn response(id: u8, secret: &[u8], challenge: &[u8]) -> [u8; 16] {
    let mut h = Md5::new();
    h.update([id]);
    h.update(secret);
    h.update(challenge);
    h.finalize().into()
}

/// Constant-time comparison of a received response with the expected one.
pub fn responses_match(got: &[u8], want: &[u8; 16]) -> bool {
    got.len() == want.len() && got.iter().zip(want).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
}

/// `0x` + lowercase hex.
pub fn encode_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(2 + 2 * bytes.len());
    s.push_str("0x");
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

/// Decode a binary value: `0x`/`0X` hex or `0b`/`0B` base64.
pub fn decode_binary(value: &str) -> Option<Vec<u8>> {
    let (prefix, body) = value.split_at_checked(2)?;
    let out = match prefix {
        "0x" | "0X" => decode_hex(body)?,
        "0b" | "0B" => decode_base64(body)?,
        _ => return None,
    };
    (!out.is_empty() && out.len() <= BINARY_MAX_BYTES).then_some(out)
}

fn decode_hex(body: &str) -> Option<Vec<u8>> {
    if body.len() > 2 * BINARY_MAX_BYTES {
        return None;
    }
    // An odd number of digits has an implied leading zero.
    let padded = if body.len() % 2 == 1 {
        format!("0{body}")
    } else {
        body.to_string()
    };
    padded
        .as_bytes()
        .chunks(2)
        .map(|pair| {
            let s = std::str::from_utf8(pair).ok()?;
            u8::from_str_radix(s, 16).ok()
        })
        .collect()
}

fn decode_base64(body: &str) -> Option<Vec<u8>> {
    if body.len() > 2 * BINARY_MAX_BYTES {
        return None;
    }
    let mut bits = 0u32;
    let mut count = 0;
    let mut out = Vec::new();
    for c in body.bytes().filter(|&c| c != b'=') {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        count += 6;
        if count >= 8 {
            count -= 8;
            out.push((bits >> count) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5_chap_response_matches_a_known_vector() {
        // MD5 of the bytes 0x01 "secret" "challenge", computed independently (python hashlib).
        let r = response(1, b"secret", b"challenge");
        assert_eq!(encode_hex(&r), "0x46e47770030e2b4e26a0db72a7efec00");
        assert!(responses_match(&r, &r));
        assert!(!responses_match(&r[..15], &r));
    }

    #[test]
    fn binary_values_decode_from_hex_and_base64() {
        assert_eq!(decode_binary("0x0aFF"), Some(vec![0x0a, 0xff]));
        assert_eq!(decode_binary("0xabc"), Some(vec![0x0a, 0xbc]));
        assert_eq!(decode_binary("0bAAEC"), Some(vec![0, 1, 2]));
        assert_eq!(decode_binary("0x"), None);
        assert_eq!(decode_binary("12"), None);
        assert_eq!(decode_binary("0xzz"), None);
    }
}
