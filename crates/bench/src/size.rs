//! Sizes on the command line, for `weft bench` and the rest of the `weft` CLI alike: `4096`,
//! `512b`, `64k`, `64K`, `8KiB`, `1m`, `100G`, `1.5T`, `10GiB`. Units are binary (k = 1024) and
//! case does not matter; `b`, `B`, `iB` and `ib` after a unit are optional. Decimals are exact
//! (no floating point): `1.5k` is 1536 bytes, and a result that falls between two bytes is
//! rounded to the nearest; a leading `+` and an exponent (`1e3`) are taken too, as the `weft`
//! CLI did before. Pure: no I/O.

/// Most digits after the decimal point that count: enough for any unit, and
/// `fraction << 60` stays below `u128::MAX` (10^18 * 2^60 is about 1.2e36). Digits past
/// these change the result by less than a thousandth of a byte.
const FRACTION_DIGITS_MAX: usize = 18;
/// Largest power-of-ten exponent (`1e3k`): 10^30 bytes is far past any size already.
const EXPONENT_MAX: usize = 30;

/// Bytes in binary units, as the `weft` CLI prints them: `512 B`, `1.5 GiB`.
pub(crate) fn human(bytes: u64) -> String {
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    #[allow(clippy::cast_precision_loss)] // shown to one decimal
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Parses a size in bytes. The error says what was wrong and shows examples.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let examples = "e.g. 4096, 64k, 8KiB, 1m, 100G, 1.5T";
    let not_a_size = || format!("{text:?} is not a size ({examples})");
    let too_large = || format!("{text:?} is too large (at most 16 EiB)");
    let t = text.trim();
    let t = t.strip_prefix('+').unwrap_or(t);
    let mantissa_end = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let mantissa = &t[..mantissa_end];
    let (exponent, unit) = split_exponent(&t[mantissa_end..]).ok_or_else(not_a_size)?;
    let unit = unit.trim();
    if mantissa.is_empty() || mantissa == "." || mantissa.matches('.').count() > 1 {
        return Err(not_a_size());
    }
    let shift = unit_shift(unit).ok_or_else(|| {
        format!("unknown size unit {unit:?} in {text:?} (use b, k, m, g, t, p or e, {examples})")
    })?;
    let (whole, fraction) = shift_point(mantissa, exponent);
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    if whole > u128::from(u64::MAX) {
        return Err(too_large());
    }
    // Cannot overflow: whole < 2^64 and shift <= 60.
    let mut bytes = whole << shift;
    let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS_MAX)];
    if !fraction.is_empty() {
        let digits = u32::try_from(fraction.len()).expect("bounded by FRACTION_DIGITS_MAX");
        let scale = 10u128.pow(digits);
        let numerator = fraction.parse::<u128>().expect("only ASCII digits remain") << shift;
        // Round half up to the nearest byte.
        bytes += (numerator + scale / 2) / scale;
    }
    u64::try_from(bytes).map_err(|_| too_large())
}

/// Splits an optional exponent (`e3`, `E-2`, `e+1`) off the front of what follows the number.
/// An `e` without digits is left to the unit (and refused there). None: exponent too large.
fn split_exponent(rest: &str) -> Option<(i32, &str)> {
    let Some(after_e) = rest.strip_prefix(['e', 'E']) else {
        return Some((0, rest));
    };
    let (negative, digits) = match after_e.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, after_e.strip_prefix('+').unwrap_or(after_e)),
    };
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    if end == 0 {
        return Some((0, rest));
    }
    let magnitude: usize = digits[..end].parse().ok().filter(|&m| m <= EXPONENT_MAX)?;
    let e = i32::try_from(magnitude).expect("bounded by EXPONENT_MAX");
    Some((if negative { -e } else { e }, &digits[end..]))
}

/// Moves the decimal point of `mantissa` (digits with at most one '.') by `exponent` places:
/// the whole and fractional digits of mantissa x 10^exponent.
fn shift_point(mantissa: &str, exponent: i32) -> (String, String) {
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let digits = format!("{whole}{fraction}");
    let point = i64::try_from(whole.len()).expect("short") + i64::from(exponent);
    let len = i64::try_from(digits.len()).expect("short");
    if point <= 0 {
        let zeros = "0".repeat(usize::try_from(-point).expect("non-negative"));
        (String::new(), format!("{zeros}{digits}"))
    } else if point >= len {
        let zeros = "0".repeat(usize::try_from(point - len).expect("non-negative"));
        (format!("{digits}{zeros}"), String::new())
    } else {
        let at = usize::try_from(point).expect("within the digits");
        (digits[..at].to_string(), digits[at..].to_string())
    }
}

/// The power of two a unit stands for, or None for an unknown unit.
fn unit_shift(unit: &str) -> Option<u32> {
    let u = unit.to_ascii_lowercase();
    let prefix = u
        .strip_suffix("ib")
        .or_else(|| u.strip_suffix('b'))
        .unwrap_or(&u);
    match prefix {
        "" => Some(0),
        "k" => Some(10),
        "m" => Some(20),
        "g" => Some(30),
        "t" => Some(40),
        "p" => Some(50),
        // Printed as EiB (`human`), so taken back: `16E` is more than a u64 holds, `8E` fits.
        "e" => Some(60),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn plain_numbers_and_byte_suffixes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("512b"), Ok(512));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("0"), Ok(0));
    }

    #[test]
    fn units_are_binary_and_case_blind() {
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("8KiB"), Ok(8 << 10));
        assert_eq!(parse_size("8kib"), Ok(8 << 10));
        assert_eq!(parse_size("8kb"), Ok(8 << 10));
        assert_eq!(parse_size("8 KB"), Ok(8 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("100G"), Ok(100 << 30));
        assert_eq!(parse_size("10GiB"), Ok(10 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert_eq!(parse_size("1P"), Ok(1 << 50));
    }

    #[test]
    fn exbibytes_are_taken_as_they_are_printed() {
        assert_eq!(parse_size("1E"), Ok(1 << 60));
        assert_eq!(parse_size("1EiB"), Ok(1 << 60));
        assert_eq!(parse_size("8e"), Ok(8 << 60));
        assert_eq!(parse_size("1.5EiB"), Ok(3 << 59));
        assert_eq!(parse_size("1e3"), Ok(1000), "an exponent still");
        assert!(parse_size("16EiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn decimals_are_exact_and_round_to_a_byte() {
        assert_eq!(parse_size("1.5T"), Ok(3 << 39));
        assert_eq!(parse_size("1.5k"), Ok(1536));
        assert_eq!(parse_size(".5m"), Ok(512 << 10));
        assert_eq!(parse_size("0.001k"), Ok(1)); // 1.024 bytes
        assert_eq!(parse_size("1.5"), Ok(2));
    }

    #[test]
    fn signs_and_exponents_that_the_old_cli_parser_took_still_parse() {
        assert_eq!(parse_size("+5"), Ok(5));
        assert_eq!(parse_size("1e3"), Ok(1000));
        assert_eq!(parse_size("1E3k"), Ok(1_024_000));
        assert_eq!(parse_size("2.5e-1k"), Ok(256));
        assert_eq!(parse_size("1e+1m"), Ok(10 << 20));
        assert_eq!(parse_size("5."), Ok(5));
    }

    #[test]
    fn bad_sizes_say_why() {
        for bad in [
            "", "k", "lots", ".", "1.2.3k", "-1k", "8q", "16E", "1e99", "++1", "inf",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_size("8q").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("99999999999999999999P")
            .unwrap_err()
            .contains("too large"));
        assert!(parse_size("16384P").unwrap_err().contains("too large"));
        assert_eq!(parse_size("16383P"), Ok(16383 << 50));
        assert!(parse_size("18446744073709551616").is_err());
        assert_eq!(parse_size("18446744073709551615"), Ok(u64::MAX));
    }
}
