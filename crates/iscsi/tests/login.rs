//! The login phase end to end through the public API: requests as an initiator would frame
//! them, responses parsed back.

use weft_iscsi::chap;
use weft_iscsi::initiator::{login_request, LoginRequestPdu};
use weft_iscsi::text::{get, parse_pairs, push_pair, Pairs};
use weft_iscsi::wire::*;
use weft_iscsi::{
    decode, parse_pdu, Access, ChapCredentials, Digests, Login, LoginProgress, Parse, Request,
    TargetLimits,
};

const RANDOM: [u8; 17] = [9; 17];

struct Acl {
    mutual: bool,
}

impl Access for Acl {
    fn authorize(
        &self,
        initiator: &str,
        target: Option<&str>,
    ) -> Result<Option<ChapCredentials>, u16> {
        if initiator == "iqn.2026-11.test:stranger" {
            return Err(LOGIN_FORBIDDEN);
        }
        match target {
            None | Some("iqn.t:open") => Ok(None),
            Some("iqn.t:chap") => Ok(Some(ChapCredentials {
                user: "dba".into(),
                secret: b"0123456789ab".to_vec(),
                mutual: self
                    .mutual
                    .then(|| ("weft".to_string(), b"target-secret".to_vec())),
            })),
            Some(_) => Err(LOGIN_TARGET_NOT_FOUND),
        }
    }
}

struct Reply {
    status: u16,
    transit: bool,
    next_stage: u8,
    tsih: u16,
    pairs: Pairs,
}

fn send(
    login: &mut Login,
    acl: &Acl,
    stage: (u8, u8, bool),
    pairs: &[(&str, &str)],
) -> (Reply, LoginProgress) {
    let mut text = Vec::new();
    for (k, v) in pairs {
        push_pair(&mut text, k, v);
    }
    let mut wire = Vec::new();
    login_request(
        &LoginRequestPdu {
            transit: stage.2,
            current_stage: stage.0,
            next_stage: stage.1,
            isid: [0x80, 1, 2, 3, 4, 5],
            itt: 7,
            cmd_sn: 1,
            exp_stat_sn: 0,
            text: &text,
        },
        &mut wire,
    );
    let Parse::Complete(pdu, _) = parse_pdu(&wire, Digests::default(), 1 << 16) else {
        panic!()
    };
    let Ok(Request::Login(req)) = decode(pdu) else {
        panic!()
    };
    let mut out = Vec::new();
    let progress = login.step(&req, acl, &mut out);
    let Parse::Complete(resp, _) = parse_pdu(&out, Digests::default(), 1 << 16) else {
        panic!()
    };
    assert_eq!(resp.opcode(), OP_LOGIN_RESPONSE);
    assert_eq!(resp.itt(), 7);
    let reply = Reply {
        status: resp.u16_at(36),
        transit: resp.flags() & FLAG_TRANSIT != 0,
        next_stage: resp.flags() & 3,
        tsih: resp.u16_at(14),
        pairs: parse_pairs(&resp.data).unwrap(),
    };
    (reply, progress)
}

fn new_login() -> Login {
    Login::new(TargetLimits::default(), 3, 42, RANDOM)
}

const SEC_TO_OP: (u8, u8, bool) = (STAGE_SECURITY, STAGE_OPERATIONAL, true);
const SEC_STAY: (u8, u8, bool) = (STAGE_SECURITY, STAGE_OPERATIONAL, false);
const OP_TO_FF: (u8, u8, bool) = (STAGE_OPERATIONAL, STAGE_FULL_FEATURE, true);

#[test]
fn an_open_target_logs_in_without_authentication() {
    let acl = Acl { mutual: false };
    let mut login = new_login();
    let (r, p) = send(
        &mut login,
        &acl,
        SEC_TO_OP,
        &[
            ("InitiatorName", "iqn.2026-11.test:a"),
            ("TargetName", "iqn.t:open"),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(
        (r.status, r.transit, r.next_stage),
        (LOGIN_SUCCESS, true, STAGE_OPERATIONAL)
    );
    assert_eq!(get(&r.pairs, "AuthMethod"), Some("None"));
    assert_eq!(get(&r.pairs, "TargetPortalGroupTag"), Some("3"));
    assert_eq!(p, LoginProgress::Continue);
    let (r, p) = send(
        &mut login,
        &acl,
        OP_TO_FF,
        &[
            ("HeaderDigest", "CRC32C,None"),
            ("MaxRecvDataSegmentLength", "131072"),
        ],
    );
    assert_eq!(
        (r.status, r.transit, r.next_stage, r.tsih),
        (LOGIN_SUCCESS, true, STAGE_FULL_FEATURE, 42)
    );
    let LoginProgress::Complete(done) = p else {
        panic!("{p:?}")
    };
    assert_eq!(done.target.as_deref(), Some("iqn.t:open"));
    assert!(done.params.header_digest);
    assert_eq!(done.params.initiator_max_recv, 131072);
}

fn chap_login(acl: &Acl, secret: &[u8], mutual: Option<&[u8]>) -> (Reply, LoginProgress) {
    let mut login = new_login();
    let (r, _) = send(
        &mut login,
        acl,
        SEC_STAY,
        &[
            ("InitiatorName", "iqn.2026-11.test:a"),
            ("TargetName", "iqn.t:chap"),
            ("AuthMethod", "CHAP,None"),
        ],
    );
    assert_eq!(get(&r.pairs, "AuthMethod"), Some("CHAP"));
    let (r, _) = send(&mut login, acl, SEC_STAY, &[("CHAP_A", "7,5")]);
    assert_eq!(get(&r.pairs, "CHAP_A"), Some("5"));
    let id: u8 = get(&r.pairs, "CHAP_I").unwrap().parse().unwrap();
    let challenge = chap::decode_binary(get(&r.pairs, "CHAP_C").unwrap()).unwrap();
    let answer = chap::encode_hex(&chap::response(id, secret, &challenge));
    let mut pairs = vec![("CHAP_N", "dba"), ("CHAP_R", answer.as_str())];
    if mutual.is_some() {
        pairs.push(("CHAP_I", "77"));
        pairs.push(("CHAP_C", "0x0102030405060708090a0b0c0d0e0f10"));
    }
    let (r, p) = send(&mut login, acl, SEC_TO_OP, &pairs);
    if let (Some(mutual_secret), LOGIN_SUCCESS) = (mutual, r.status) {
        let expected = chap::response(77, mutual_secret, &(1..=16).collect::<Vec<u8>>());
        assert_eq!(get(&r.pairs, "CHAP_N"), Some("weft"));
        assert_eq!(
            get(&r.pairs, "CHAP_R"),
            Some(chap::encode_hex(&expected).as_str())
        );
    }
    (r, p)
}

#[test]
fn chap_admits_the_right_secret_and_refuses_a_wrong_one() {
    let acl = Acl { mutual: false };
    let (r, p) = chap_login(&acl, b"0123456789ab", None);
    assert_eq!((r.status, r.transit), (LOGIN_SUCCESS, true));
    assert_eq!(p, LoginProgress::Continue);
    let (r, p) = chap_login(&acl, b"wrong-secret", None);
    assert_eq!(r.status, LOGIN_AUTH_FAILED);
    assert_eq!(p, LoginProgress::Failed(LOGIN_AUTH_FAILED));
}

#[test]
fn mutual_chap_proves_the_target_and_is_required_when_configured() {
    let acl = Acl { mutual: true };
    let (r, _) = chap_login(&acl, b"0123456789ab", Some(b"target-secret"));
    assert_eq!(r.status, LOGIN_SUCCESS);
    // Configured for mutual CHAP, the initiator must ask for it.
    let (r, _) = chap_login(&acl, b"0123456789ab", None);
    assert_eq!(r.status, LOGIN_AUTH_FAILED);
    // And without a mutual secret we cannot prove ourselves.
    let (r, _) = chap_login(&Acl { mutual: false }, b"0123456789ab", Some(b"x"));
    assert_eq!(r.status, LOGIN_AUTH_FAILED);
}

#[test]
fn skipping_chap_or_asking_for_none_is_refused() {
    let acl = Acl { mutual: false };
    let mut login = new_login();
    let (r, _) = send(
        &mut login,
        &acl,
        SEC_TO_OP,
        &[
            ("InitiatorName", "iqn.2026-11.test:a"),
            ("TargetName", "iqn.t:chap"),
            ("AuthMethod", "None"),
        ],
    );
    assert_eq!(r.status, LOGIN_AUTH_FAILED);
    let mut login = new_login();
    let (r, _) = send(
        &mut login,
        &acl,
        OP_TO_FF,
        &[
            ("InitiatorName", "iqn.2026-11.test:a"),
            ("TargetName", "iqn.t:chap"),
        ],
    );
    assert_eq!(r.status, LOGIN_AUTH_FAILED);
}

#[test]
fn unknown_targets_strangers_and_missing_names_get_their_status() {
    let acl = Acl { mutual: false };
    for (pairs, status) in [
        (
            vec![
                ("InitiatorName", "iqn.2026-11.test:a"),
                ("TargetName", "iqn.t:nope"),
            ],
            LOGIN_TARGET_NOT_FOUND,
        ),
        (
            vec![
                ("InitiatorName", "iqn.2026-11.test:stranger"),
                ("TargetName", "iqn.t:open"),
            ],
            LOGIN_FORBIDDEN,
        ),
        (vec![("TargetName", "iqn.t:open")], LOGIN_MISSING_PARAMETER),
        (
            vec![("InitiatorName", "iqn.2026-11.test:a")],
            LOGIN_MISSING_PARAMETER,
        ),
        (
            vec![
                ("InitiatorName", "iqn.2026-11.test:a"),
                ("SessionType", "Weird"),
            ],
            LOGIN_SESSION_TYPE_UNSUPPORTED,
        ),
    ] {
        let mut login = new_login();
        let (r, p) = send(&mut login, &acl, SEC_TO_OP, &pairs);
        assert_eq!(r.status, status, "{pairs:?}");
        assert_eq!(p, LoginProgress::Failed(status));
    }
}

#[test]
fn a_discovery_session_needs_no_target_name() {
    let acl = Acl { mutual: false };
    let mut login = new_login();
    let (r, p) = send(
        &mut login,
        &acl,
        OP_TO_FF,
        &[
            ("InitiatorName", "iqn.2026-11.test:a"),
            ("SessionType", "Discovery"),
        ],
    );
    assert_eq!(r.status, LOGIN_SUCCESS);
    assert_eq!(get(&r.pairs, "TargetPortalGroupTag"), None);
    let LoginProgress::Complete(done) = p else {
        panic!()
    };
    assert_eq!(done.target, None);
}
