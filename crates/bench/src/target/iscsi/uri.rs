//! The iSCSI target URI, in libiscsi's form:
//! `iscsi://[USER[%SECRET]@]HOST[:PORT]/TARGET-IQN/LUN[?initiator=IQN]`.
//!
//! The first `%` of the user part separates the CHAP user from the secret; after that, `%XX`
//! escapes are decoded in the secret (and in the initiator name), so a secret may hold any
//! byte: `%25` for `%`, `%2F` for `/`, `%3F` for `?`. A literal `@` in the secret needs no
//! escape (the host starts after the last `@`). [`redact_uri`] hides the secret wherever the
//! URI is shown or recorded.

use crate::target::{TargetError, ISCSI_URI_FORM};

/// The iSCSI port (IANA).
const ISCSI_PORT_DEFAULT: u16 = 3260;
/// iSCSI names are at most 223 bytes (RFC 7143 §4.2.7.1).
const ISCSI_NAME_BYTES_MAX: usize = 223;
/// Flat space LUN addressing carries 14 bits; we address no more.
const LUN_MAX: u64 = weft_scsi::LUN_MAX;
/// The initiator name used when the URI names none.
pub(crate) const INITIATOR_DEFAULT: &str = "iqn.2026-11.dev.weft:bench";
/// What a redacted secret shows as.
const REDACTED: &str = "***";

/// A parsed `iscsi://` URI.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct IscsiUri {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) target: String,
    pub(crate) lun: u64,
    /// One-way CHAP: (user, secret).
    pub(crate) chap: Option<(String, Vec<u8>)>,
    pub(crate) initiator: String,
}

impl std::fmt::Debug for IscsiUri {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IscsiUri")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("target", &self.target)
            .field("lun", &self.lun)
            .field("chap_user", &self.chap.as_ref().map(|(user, _)| user))
            .field("initiator", &self.initiator)
            .finish()
    }
}

impl IscsiUri {
    pub(crate) fn parse(uri: &str) -> Result<IscsiUri, TargetError> {
        let bad = |reason| TargetError::BadUri {
            uri: redact_uri(uri),
            scheme: "iSCSI",
            reason,
            form: ISCSI_URI_FORM,
        };
        let rest = uri
            .strip_prefix("iscsi://")
            .ok_or_else(|| bad("missing iscsi://"))?;
        let (authority, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("missing /TARGET-IQN/LUN"))?;
        let (path, query) = match path.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path, None),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let chap = match userinfo {
            None => None,
            Some(u) => {
                let (user, secret) = u
                    .split_once('%')
                    .ok_or_else(|| bad("a CHAP user needs a secret: USER%SECRET@"))?;
                if user.is_empty() {
                    return Err(bad("empty CHAP user"));
                }
                let secret =
                    percent_decode(secret).ok_or_else(|| bad("bad %-escape in the secret"))?;
                if secret.is_empty() {
                    return Err(bad("empty CHAP secret"));
                }
                Some((user.to_string(), secret))
            }
        };
        let (host, port) = split_host_port(hostport).map_err(bad)?;
        let (target, lun) = path
            .rsplit_once('/')
            .ok_or_else(|| bad("missing LUN after the target name: /TARGET-IQN/LUN"))?;
        if target.is_empty() {
            return Err(bad("missing target name"));
        }
        if target.len() > ISCSI_NAME_BYTES_MAX {
            return Err(bad("target name longer than 223 bytes"));
        }
        let lun: u64 = lun
            .parse()
            .ok()
            .filter(|&l| l <= LUN_MAX)
            .ok_or_else(|| bad("the LUN must be a number from 0 to 16383"))?;
        let mut initiator = INITIATOR_DEFAULT.to_string();
        for pair in query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|p| !p.is_empty())
        {
            match pair.split_once('=') {
                Some(("initiator", value)) => {
                    initiator = percent_decode(value)
                        .and_then(|v| String::from_utf8(v).ok())
                        .filter(|v| !v.is_empty() && v.len() <= ISCSI_NAME_BYTES_MAX)
                        .ok_or_else(|| bad("bad initiator name"))?;
                }
                _ => return Err(bad("unknown query parameter (only initiator=IQN)")),
            }
        }
        Ok(IscsiUri {
            host,
            port,
            target: target.to_string(),
            lun,
            chap,
            initiator,
        })
    }

    /// `host:port`, as errors show it.
    pub(crate) fn addr_text(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

/// `uri` with the CHAP secret of an `iscsi://` URI replaced by `***`; other URIs unchanged.
pub(crate) fn redact_uri(uri: &str) -> String {
    let Some(rest) = uri.strip_prefix("iscsi://") else {
        return uri.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    let Some(at) = authority.rfind('@') else {
        return uri.to_string();
    };
    let Some(percent) = authority[..at].find('%') else {
        return uri.to_string();
    };
    format!(
        "iscsi://{}%{REDACTED}{}",
        &authority[..percent],
        &rest[at..]
    )
}

fn split_host_port(hostport: &str) -> Result<(String, u16), &'static str> {
    let port = |p: &str| p.parse::<u16>().map_err(|_| "bad port");
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (h, tail) = v6.split_once(']').ok_or("unclosed '[' in host")?;
        match tail.strip_prefix(':') {
            Some(p) => (h, port(p)?),
            None if tail.is_empty() => (h, ISCSI_PORT_DEFAULT),
            None => return Err("junk after host"),
        }
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => (h, port(p)?),
            None => (hostport, ISCSI_PORT_DEFAULT),
        }
    };
    if host.is_empty() {
        return Err("missing host");
    }
    Ok((host.to_string(), port))
}

/// Decodes `%XX` escapes; `None` for a `%` not followed by two hex digits.
fn percent_decode(s: &str) -> Option<Vec<u8>> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reason(uri: &str) -> &'static str {
        match IscsiUri::parse(uri) {
            Err(TargetError::BadUri { reason, .. }) => reason,
            other => panic!("{uri}: expected a bad URI, got {other:?}"),
        }
    }

    #[test]
    fn plain_uris_parse_with_defaults() {
        let u = IscsiUri::parse("iscsi://127.0.0.1:3261/iqn.2026-11.dev.weft:vol0/0").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 3261));
        assert_eq!((u.target.as_str(), u.lun), ("iqn.2026-11.dev.weft:vol0", 0));
        assert_eq!((u.chap, u.initiator.as_str()), (None, INITIATOR_DEFAULT));
        let u = IscsiUri::parse("iscsi://[::1]/iqn.x:y/3").unwrap();
        assert_eq!((u.host.as_str(), u.port, u.lun), ("::1", 3260, 3));
        assert_eq!(u.addr_text(), "[::1]:3260");
    }

    #[test]
    fn chap_credentials_and_the_initiator_name_are_percent_decoded() {
        let u = IscsiUri::parse(
            "iscsi://b1%s3cret%25x%2F@y@host/iqn.t:a/7?initiator=iqn.2026-11.x%3Ay",
        )
        .unwrap();
        assert_eq!(u.chap, Some(("b1".into(), b"s3cret%x/@y".to_vec())));
        assert_eq!((u.host.as_str(), u.lun), ("host", 7));
        assert_eq!(u.initiator, "iqn.2026-11.x:y");
    }

    #[test]
    fn bad_uris_say_what_is_wrong() {
        assert_eq!(reason("iscsi://host"), "missing /TARGET-IQN/LUN");
        assert_eq!(
            reason("iscsi://host/iqn.x"),
            "missing LUN after the target name: /TARGET-IQN/LUN"
        );
        assert_eq!(reason("iscsi://host//0"), "missing target name");
        assert_eq!(
            reason("iscsi://host/iqn.x/lun"),
            "the LUN must be a number from 0 to 16383"
        );
        assert_eq!(
            reason("iscsi://host/iqn.x/16384"),
            "the LUN must be a number from 0 to 16383"
        );
        assert_eq!(reason("iscsi://:1/iqn.x/0"), "missing host");
        assert_eq!(reason("iscsi://h:p/iqn.x/0"), "bad port");
        assert_eq!(
            reason("iscsi://user@h/iqn.x/0"),
            "a CHAP user needs a secret: USER%SECRET@"
        );
        assert_eq!(reason("iscsi://%s@h/iqn.x/0"), "empty CHAP user");
        assert_eq!(
            reason("iscsi://u%a%zz@h/iqn.x/0"),
            "bad %-escape in the secret"
        );
        assert_eq!(
            reason("iscsi://h/iqn.x/0?x=1"),
            "unknown query parameter (only initiator=IQN)"
        );
    }

    #[test]
    fn secrets_never_show() {
        assert_eq!(
            redact_uri("iscsi://b1%bench-secret-123@127.0.0.1:3260/iqn.a:b/0"),
            "iscsi://b1%***@127.0.0.1:3260/iqn.a:b/0"
        );
        assert_eq!(redact_uri("iscsi://h/iqn.a:b/0"), "iscsi://h/iqn.a:b/0");
        assert_eq!(redact_uri("nbd://u%x@h/e"), "nbd://u%x@h/e");
        let Err(e) = IscsiUri::parse("iscsi://b1%hush@h/iqn.x/nope") else {
            panic!("bad LUN");
        };
        assert!(!e.to_string().contains("hush"), "{e}");
    }
}
