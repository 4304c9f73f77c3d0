//! Sizes on the command line: `4096`, `64K`, `100G`, `1.5T`, `10GiB` (binary units).

/// Parse a size in bytes.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, shift) = match t.chars().last() {
        Some('K' | 'k') => (&t[..t.len() - 1], 10),
        Some('M' | 'm') => (&t[..t.len() - 1], 20),
        Some('G' | 'g') => (&t[..t.len() - 1], 30),
        Some('T' | 't') => (&t[..t.len() - 1], 40),
        Some('P' | 'p') => (&t[..t.len() - 1], 50),
        _ => (t, 0),
    };
    let bad = || format!("{text:?} is not a size (examples: 4096, 64K, 100G, 1.5T)");
    if let Ok(n) = number.parse::<u64>() {
        return n
            .checked_shl(shift)
            .filter(|v| v >> shift == n)
            .ok_or_else(bad);
    }
    let f: f64 = number.parse().map_err(|_| bad())?;
    if !(f.is_finite() && f >= 0.0) {
        return Err(bad());
    }
    let bytes = f * (1u64 << shift) as f64;
    if bytes > u64::MAX as f64 {
        return Err(bad());
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("100G"), Ok(100 << 30));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("1.5T"), Ok(3 << 39));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("99999999999999999999P").is_err());
    }
}
