//! The cluster URL users write, `etcd://host:port[,host:port...]`, and the gateway endpoints
//! (`http://host:port`) it names.

use crate::MetaError;

/// The scheme of a cluster URL: `etcd://host:port[,host:port...]`.
pub const CLUSTER_URL_SCHEME: &str = "etcd";
/// etcd's client port, used when a cluster URL names a host without a port.
pub const DEFAULT_ETCD_PORT: u16 = 2379;

/// Parse `etcd://host:port[,host:port...]` into gateway endpoints (`http://host:port`), in the
/// given order (the order failover tries them in). A port defaults to [`DEFAULT_ETCD_PORT`];
/// IPv6 hosts go in brackets (`[::1]:2379`).
pub fn parse_cluster_url(url: &str) -> Result<Vec<String>, MetaError> {
    let bad = |reason: &str| MetaError::InvalidUrl {
        url: url.into(),
        reason: reason.into(),
    };
    let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("no scheme"))?;
    if !scheme.eq_ignore_ascii_case(CLUSTER_URL_SCHEME) {
        return Err(bad(&format!("the scheme is {scheme:?}, not etcd")));
    }
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() {
        return Err(bad("no host"));
    }
    rest.split(',')
        .map(|member| {
            let member = member.trim();
            let (host, port) = split_host_port(member).map_err(|r| bad(&r))?;
            Ok(format!("http://{host}:{port}"))
        })
        .collect()
}

fn split_host_port(member: &str) -> Result<(&str, u16), String> {
    if member.is_empty() {
        return Err("an empty member between commas".into());
    }
    if member.contains(['/', '?', '#', '@']) {
        return Err(format!(
            "{member:?} is not host:port (no paths, queries or users)"
        ));
    }
    let (host, port) = if let Some(v6) = member.strip_prefix('[') {
        let (inside, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{member:?} has an unclosed '['"))?;
        let host = &member[..inside.len() + 2];
        match after {
            "" => (host, None),
            p => match p.strip_prefix(':') {
                Some(p) => (host, Some(p)),
                None => return Err(format!("{member:?}: junk after ']'")),
            },
        }
    } else {
        match member.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (member, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(format!("{member:?} has no host"));
    }
    let port = match port {
        None => DEFAULT_ETCD_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(port) if port > 0 => port,
            _ => return Err(format!("{member:?} has a bad port {p:?}")),
        },
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_members_in_order() {
        assert_eq!(
            parse_cluster_url("etcd://10.0.0.1:2379,etcd-b:2380/").unwrap(),
            vec!["http://10.0.0.1:2379", "http://etcd-b:2380"]
        );
        assert_eq!(
            parse_cluster_url("ETCD://h").unwrap(),
            vec!["http://h:2379"]
        );
        assert_eq!(
            parse_cluster_url("etcd://[::1]:4000,[fe80::1]").unwrap(),
            vec!["http://[::1]:4000", "http://[fe80::1]:2379"]
        );
    }

    #[test]
    fn rejects_bad_urls() {
        for url in [
            "http://h:2379",
            "h:2379",
            "etcd://",
            "etcd://h:0",
            "etcd://h:99999",
            "etcd://h:x",
            "etcd://a,,b",
            "etcd://h:1/path",
            "etcd://[::1",
            "etcd://:2379",
        ] {
            assert!(
                matches!(parse_cluster_url(url), Err(MetaError::InvalidUrl { .. })),
                "{url} should be rejected"
            );
        }
    }
}
