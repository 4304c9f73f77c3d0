//! What a host definition may hold: initiator names (RFC 3720 §3.2.6: `iqn.`, `eui.` or
//! `naa.` names, compared case-insensitively), NBD client addresses (an IP address or a
//! CIDR network), TLS client names, CHAP user names and secrets (RFC 7143 §12.1.3 asks for at least 96 bits
//! of secret; Windows' initiator takes 12 to 16 characters, so 12 is the minimum here).

use std::net::IpAddr;

use crate::error::EngineError;

/// RFC 3720 limits an iSCSI name to 223 bytes.
const IQN_MAX_BYTES: usize = 223;
/// At least 96 bits, as RFC 7143 §12.1.3 recommends.
pub const SECRET_MIN_BYTES: usize = 12;
/// A CHAP secret or user name travels in one text key (at most 255 bytes of value).
const SECRET_MAX_BYTES: usize = 255;
/// A CHAP user name is printable and at most this long.
const CHAP_USER_MAX_BYTES: usize = 255;
/// A host lists at most this many initiator names and this many NBD address ranges.
pub const HOST_NAMES_MAX: usize = 32;

fn invalid(reason: String) -> EngineError {
    EngineError::InvalidHost { reason }
}

/// An initiator name, lowercased (iSCSI names compare case-insensitively).
pub fn initiator_name(name: &str) -> Result<String, EngineError> {
    let lower = name.trim().to_ascii_lowercase();
    let prefixed = ["iqn.", "eui.", "naa."]
        .iter()
        .any(|p| lower.starts_with(p) && lower.len() > p.len());
    let chars_ok = lower
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b".:-".contains(&b));
    if !prefixed || !chars_ok || lower.len() > IQN_MAX_BYTES {
        return Err(invalid(format!(
            "{name:?} is not an iSCSI initiator name: use iqn.YYYY-MM.reversed.domain[:id] (or eui./naa.), at most {IQN_MAX_BYTES} characters from [a-z0-9.:-]; a Linux host's is in /etc/iscsi/initiatorname.iscsi"
        )));
    }
    Ok(lower)
}

/// An NBD client address: `10.0.0.5` or `10.0.0.0/24` (IPv6 too), returned in canonical form.
pub fn client_address(text: &str) -> Result<String, EngineError> {
    parse_network(text)
        .map(|(ip, prefix)| format!("{ip}/{prefix}"))
        .ok_or_else(|| {
            invalid(format!(
                "{text:?} is not an IP address or network (like 10.0.0.5 or 10.0.0.0/24)"
            ))
        })
}

/// An address or network and its prefix length (32 or 128 for a single address).
pub fn parse_network(text: &str) -> Option<(IpAddr, u8)> {
    let (ip, prefix) = match text.trim().split_once('/') {
        Some((ip, prefix)) => (ip.parse::<IpAddr>().ok()?, Some(prefix.parse::<u8>().ok()?)),
        None => (text.trim().parse::<IpAddr>().ok()?, None),
    };
    let width = if ip.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.unwrap_or(width);
    (prefix <= width).then_some((ip, prefix))
}

/// Whether `addr` lies in the network `text` (as [`client_address`] stored it). An IPv4
/// client reaching an IPv6 socket appears as `::ffff:a.b.c.d` and is compared as IPv4.
pub fn network_contains(text: &str, addr: IpAddr) -> bool {
    let Some((net, prefix)) = parse_network(text) else {
        return false;
    };
    let addr = match addr {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        v4 => v4,
    };
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// A TLS client name: what a client certificate's subject CN or DNS name must equal
/// (compared as given; DNS names are lowercased). Printable ASCII, 1-255 characters.
pub fn tls_name(name: &str) -> Result<String, EngineError> {
    let name = name.trim();
    let ok = !name.is_empty()
        && name.len() <= CHAP_USER_MAX_BYTES
        && name.bytes().all(|b| b.is_ascii_graphic() || b == b' ');
    if ok {
        Ok(name.to_string())
    } else {
        Err(invalid(format!(
            "TLS client name {name:?}: use 1-255 printable characters (a certificate's CN or DNS name)"
        )))
    }
}

/// A CHAP user name: printable ASCII without spaces.
pub fn chap_user(user: &str) -> Result<String, EngineError> {
    let ok = !user.is_empty()
        && user.len() <= CHAP_USER_MAX_BYTES
        && user.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(user.to_string())
    } else {
        Err(invalid(format!(
            "CHAP user {user:?}: use 1-{CHAP_USER_MAX_BYTES} printable characters without spaces"
        )))
    }
}

/// A CHAP secret: printable ASCII without spaces, 12 to 255 characters. `what` names it in
/// the error (the secret itself is never echoed).
pub fn chap_secret(secret: &str, what: &str) -> Result<String, EngineError> {
    let ok = (SECRET_MIN_BYTES..=SECRET_MAX_BYTES).contains(&secret.len())
        && secret.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(secret.to_string())
    } else {
        Err(invalid(format!(
            "the {what} must be {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} printable characters without spaces (it has {})",
            secret.len()
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initiator_names() {
        assert_eq!(
            initiator_name("iqn.1994-05.com.RedHat:db1").unwrap(),
            "iqn.1994-05.com.redhat:db1"
        );
        assert!(initiator_name("eui.02004567A425678D").is_ok());
        for bad in [
            "",
            "iqn.",
            "db1",
            "iqn.x y",
            "iqn.a/b",
            &"iqn.a".repeat(100),
        ] {
            assert!(initiator_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn networks() {
        assert_eq!(client_address("10.0.0.5").unwrap(), "10.0.0.5/32");
        assert_eq!(client_address("10.0.0.0/8").unwrap(), "10.0.0.0/8");
        assert_eq!(client_address("::1").unwrap(), "::1/128");
        for bad in ["10.0.0", "10.0.0.0/33", "host", "::1/129", ""] {
            assert!(client_address(bad).is_err(), "{bad:?}");
        }
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(network_contains("10.0.0.0/8", ip("10.2.3.4")));
        assert!(!network_contains("10.0.0.0/8", ip("11.2.3.4")));
        assert!(network_contains("10.0.0.5/32", ip("::ffff:10.0.0.5")));
        assert!(network_contains("0.0.0.0/0", ip("192.168.1.1")));
        assert!(!network_contains("10.0.0.5/32", ip("10.0.0.6")));
        assert!(network_contains("fd00::/8", ip("fd12::1")));
        assert!(!network_contains("fd00::/8", ip("10.0.0.1")));
    }

    #[test]
    fn secrets() {
        assert!(chap_secret("twelve-chars", "CHAP secret").is_ok());
        let short = chap_secret("short", "CHAP secret").unwrap_err().to_string();
        assert!(
            short.contains("12 to 255") && !short.contains("short\""),
            "{short}"
        );
        assert!(chap_secret("has a space in it", "CHAP secret").is_err());
        assert!(chap_user("db1").is_ok());
        assert!(chap_user("a b").is_err());
    }
}
