//! Operational parameter negotiation (RFC 7143 §13): for each key the initiator offers, the
//! value both sides end up with and the answer to send. Keys we do not know are answered
//! `NotUnderstood`; declarative keys (names, aliases) need no answer.

use crate::text::{push_pair, Pairs};

/// What this target is willing to do; the listener sets it per portal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TargetLimits {
    /// The largest data segment we accept (declared as our MaxRecvDataSegmentLength).
    pub max_recv_data_segment: u32,
    pub max_burst: u32,
    pub first_burst: u32,
}

impl Default for TargetLimits {
    fn default() -> Self {
        TargetLimits {
            max_recv_data_segment: 256 << 10,
            max_burst: 16 << 20,
            first_burst: 256 << 10,
        }
    }
}

/// The session's negotiated parameters (RFC 7143 defaults until negotiated).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionParams {
    pub header_digest: bool,
    pub data_digest: bool,
    /// Unsolicited Data-Out is not allowed: every write byte beyond immediate data waits
    /// for an R2T.
    pub initial_r2t: bool,
    pub immediate_data: bool,
    pub max_burst: u32,
    pub first_burst: u32,
    /// The largest data segment we may send the initiator.
    pub initiator_max_recv: u32,
    /// The largest data segment the initiator may send us.
    pub target_max_recv: u32,
    pub max_outstanding_r2t: u32,
}

impl SessionParams {
    pub fn new(limits: &TargetLimits) -> Self {
        SessionParams {
            header_digest: false,
            data_digest: false,
            initial_r2t: true,
            immediate_data: true,
            max_burst: 256 << 10,
            first_burst: 64 << 10,
            initiator_max_recv: 8192,
            target_max_recv: limits.max_recv_data_segment,
            max_outstanding_r2t: 1,
        }
    }
}

/// A value the initiator sent that the protocol does not allow; the login fails with
/// "initiator error".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad value {value:?} for {key}")]
pub struct BadValue {
    pub key: String,
    pub value: String,
}

/// Keys that only declare something about the initiator or the session: no answer.
const DECLARATIVE: &[&str] = &[
    "InitiatorName",
    "InitiatorAlias",
    "TargetName",
    "SessionType",
    "AuthMethod",
    "CHAP_A",
    "CHAP_N",
    "CHAP_R",
    "CHAP_I",
    "CHAP_C",
];

/// Negotiate every operational key in `pairs`, updating `params` and appending answers.
pub fn negotiate(
    pairs: &Pairs,
    limits: &TargetLimits,
    params: &mut SessionParams,
    reply: &mut Vec<u8>,
) -> Result<(), BadValue> {
    for (key, value) in pairs {
        let bad = || BadValue {
            key: key.clone(),
            value: value.clone(),
        };
        let number = || value.parse::<u32>().map_err(|_| bad());
        match key.as_str() {
            k if DECLARATIVE.contains(&k) => {}
            "HeaderDigest" | "DataDigest" => {
                let choice = value
                    .split(',')
                    .find(|v| *v == "CRC32C" || *v == "None")
                    .ok_or_else(bad)?;
                let on = choice == "CRC32C";
                if key == "HeaderDigest" {
                    params.header_digest = on;
                } else {
                    params.data_digest = on;
                }
                push_pair(reply, key, choice);
            }
            "InitialR2T" => {
                // OR: we would take unsolicited data, the initiator decides.
                params.initial_r2t = boolean(value).ok_or_else(bad)?;
                push_pair(reply, key, yes_no(params.initial_r2t));
            }
            "ImmediateData" => {
                params.immediate_data = boolean(value).ok_or_else(bad)?;
                push_pair(reply, key, yes_no(params.immediate_data));
            }
            "MaxBurstLength" => {
                let v = range(number()?, 512, (1 << 24) - 1).ok_or_else(bad)?;
                params.max_burst = v.min(limits.max_burst);
                params.first_burst = params.first_burst.min(params.max_burst);
                push_pair(reply, key, &params.max_burst.to_string());
            }
            "FirstBurstLength" => {
                let v = range(number()?, 512, (1 << 24) - 1).ok_or_else(bad)?;
                params.first_burst = v.min(limits.first_burst).min(params.max_burst);
                push_pair(reply, key, &params.first_burst.to_string());
            }
            "MaxRecvDataSegmentLength" => {
                // Declarative: the most the initiator takes in one PDU; we declare ours.
                params.initiator_max_recv = range(number()?, 512, (1 << 24) - 1).ok_or_else(bad)?;
                push_pair(reply, key, &limits.max_recv_data_segment.to_string());
            }
            "MaxOutstandingR2T" => {
                range(number()?, 1, 65535).ok_or_else(bad)?;
                params.max_outstanding_r2t = 1;
                push_pair(reply, key, "1");
            }
            "MaxConnections" => {
                range(number()?, 1, 65535).ok_or_else(bad)?;
                push_pair(reply, key, "1");
            }
            "ErrorRecoveryLevel" => {
                range(number()?, 0, 2).ok_or_else(bad)?;
                push_pair(reply, key, "0");
            }
            "DefaultTime2Wait" | "DefaultTime2Retain" => {
                range(number()?, 0, 3600).ok_or_else(bad)?;
                push_pair(
                    reply,
                    key,
                    if key == "DefaultTime2Wait" { "2" } else { "0" },
                );
            }
            "DataPDUInOrder" | "DataSequenceInOrder" => {
                boolean(value).ok_or_else(bad)?;
                // OR with our Yes.
                push_pair(reply, key, "Yes");
            }
            "IFMarker" | "OFMarker" | "RDMAExtensions" => {
                boolean(value).ok_or_else(bad)?;
                push_pair(reply, key, "No");
            }
            "IFMarkInt" | "OFMarkInt" => push_pair(reply, key, "Irrelevant"),
            _ => push_pair(reply, key, "NotUnderstood"),
        }
    }
    Ok(())
}

fn boolean(v: &str) -> Option<bool> {
    match v {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

fn yes_no(v: bool) -> &'static str {
    if v {
        "Yes"
    } else {
        "No"
    }
}

fn range(v: u32, min: u32, max: u32) -> Option<u32> {
    (min..=max).contains(&v).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::{get, parse_pairs};

    fn run(text: &[u8]) -> (SessionParams, Pairs) {
        let limits = TargetLimits::default();
        let mut params = SessionParams::new(&limits);
        let mut reply = Vec::new();
        negotiate(
            &parse_pairs(text).unwrap(),
            &limits,
            &mut params,
            &mut reply,
        )
        .unwrap();
        (params, parse_pairs(&reply).unwrap())
    }

    #[test]
    fn offers_from_a_linux_initiator_settle_as_the_rfc_says() {
        let (p, reply) = run(b"HeaderDigest=CRC32C,None\0DataDigest=None\0InitialR2T=No\0ImmediateData=Yes\0MaxBurstLength=262144\0FirstBurstLength=1048576\0MaxRecvDataSegmentLength=65536\0MaxOutstandingR2T=8\0X-com.example.Foo=1\0InitiatorName=iqn.x\0");
        assert!(p.header_digest && !p.data_digest && !p.initial_r2t && p.immediate_data);
        assert_eq!(p.max_burst, 262144);
        assert_eq!(p.first_burst, 256 << 10);
        assert_eq!(p.initiator_max_recv, 65536);
        assert_eq!(get(&reply, "MaxRecvDataSegmentLength"), Some("262144"));
        assert_eq!(get(&reply, "MaxOutstandingR2T"), Some("1"));
        assert_eq!(get(&reply, "X-com.example.Foo"), Some("NotUnderstood"));
        assert_eq!(get(&reply, "InitiatorName"), None);
    }

    #[test]
    fn values_out_of_range_fail() {
        let limits = TargetLimits::default();
        let mut params = SessionParams::new(&limits);
        for bad in [
            &b"MaxBurstLength=1\0"[..],
            b"InitialR2T=maybe\0",
            b"HeaderDigest=MD5\0",
        ] {
            let pairs = parse_pairs(bad).unwrap();
            assert!(negotiate(&pairs, &limits, &mut params, &mut Vec::new()).is_err());
        }
    }
}
