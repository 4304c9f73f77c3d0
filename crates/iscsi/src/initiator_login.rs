//! The login phase from the initiator's side (RFC 7143 §6.3, §13), sans-IO: what weft's
//! benchmark says to a target to reach full feature phase on one connection of a normal
//! session. Feed it each Login Response; it appends the next Login Request and, at the end,
//! hands back the negotiated [`SessionParams`] and sequence numbers.
//!
//! Security stage: `AuthMethod=None`, or one-way CHAP with MD5 when credentials are given
//! (mutual CHAP is not offered). Operational stage: no digests, one connection, error
//! recovery level 0, and the data-transfer keys of [`InitiatorOffer`]; the target's answers
//! are what count. Keys the target offers on its own are answered (accepting its value);
//! ones this module does not know are answered `NotUnderstood`.
//!
//! Not here: discovery sessions, redirection (status 01xxh is reported as refused), adding
//! a connection to a session (TSIH), session reinstatement.

use crate::chap;
use crate::initiator::{login_request, LoginRequestPdu};
use crate::negotiate::SessionParams;
use crate::pdu::PduRef;
use crate::target_pdu::{decode_target_pdu, LoginResponse, TargetPdu};
use crate::text::{get, parse_pairs, push_pair, Pairs};
use crate::wire::*;

/// Login Requests one login may send before we call the target's negotiation endless.
const LOGIN_ROUNDS_MAX: u32 = 16;
/// The task tag of every Login Request of a login (one task: the login).
const LOGIN_ITT: u32 = 0;
/// Defaults of RFC 7143 §13 for what a target that does not answer a key ends up with.
const MAX_RECV_DATA_SEGMENT_DEFAULT_BYTES: u32 = 8192;
const MAX_BURST_DEFAULT_BYTES: u32 = 256 << 10;
const FIRST_BURST_DEFAULT_BYTES: u32 = 64 << 10;
/// The range RFC 7143 allows for the burst and segment lengths.
pub const LENGTH_MIN_BYTES: u32 = 512;
pub const LENGTH_MAX_BYTES: u32 = (1 << 24) - 1;

/// Keys a target declares for itself: they need no answer.
const TARGET_DECLARATIONS: &[&str] = &[
    "TargetAlias",
    "TargetAddress",
    "TargetPortalGroupTag",
    "MaxRecvDataSegmentLength",
];

/// Who we are, what we log in to, and what we would like.
#[derive(Clone, PartialEq, Eq)]
pub struct InitiatorOffer {
    pub initiator_name: String,
    pub target_name: String,
    /// Our half of the session identifier (type 2, random, in the top two bits: 80h).
    pub isid: [u8; 6],
    /// One-way CHAP: (user name, secret).
    pub chap: Option<(String, Vec<u8>)>,
    /// CmdSN of the first command after login (login requests carry it without using it).
    pub cmd_sn: u32,
    /// The largest data segment we take (declared as our MaxRecvDataSegmentLength).
    pub max_recv_data_segment_bytes: u32,
    pub max_burst_bytes: u32,
    pub first_burst_bytes: u32,
    /// We ask for InitialR2T=No and ImmediateData=Yes when these are false and true.
    pub initial_r2t: bool,
    pub immediate_data: bool,
}

impl std::fmt::Debug for InitiatorOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InitiatorOffer")
            .field("initiator_name", &self.initiator_name)
            .field("target_name", &self.target_name)
            .field("chap_user", &self.chap.as_ref().map(|(user, _)| user))
            .finish_non_exhaustive()
    }
}

/// A login in progress.
#[derive(Debug)]
pub struct InitiatorLogin {
    offer: InitiatorOffer,
    stage: Stage,
    params: SessionParams,
    /// StatSN of the next response we expect (0 until the first response).
    exp_stat_sn: u32,
    rounds: u32,
    /// Text of responses sent with C (continue), waiting for the rest.
    partial_text: Vec<u8>,
    /// Keys we offered in the operational stage: any others the target raises are its own
    /// offers and get an answer.
    offered: Vec<&'static str>,
}

/// Where the login is: each state names the request last sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Nothing sent yet.
    Idle,
    /// Security stage: AuthMethod offered.
    AuthMethod,
    /// CHAP_A offered.
    ChapAlgorithm,
    /// CHAP_N and CHAP_R sent, asking to move on.
    ChapResponse,
    /// Security done (or skipped), asking to move to the operational stage.
    SecurityTransit,
    /// Operational keys sent, asking for full feature phase.
    Operational,
    Done,
}

/// What a Login Response leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginStep {
    /// The next Login Request is in `out`: send it and feed the next response.
    Continue,
    /// Full feature phase.
    Complete(LoginOutcome),
}

/// A finished login: the parameters both sides settled on and where the numbers stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoginOutcome {
    /// From the initiator's side: `target_max_recv` is the most we may put in one PDU,
    /// `initiator_max_recv` what we declared.
    pub params: SessionParams,
    pub tsih: u16,
    /// CmdSN of the first command.
    pub cmd_sn: u32,
    pub exp_stat_sn: u32,
    pub exp_cmd_sn: u32,
    pub max_cmd_sn: u32,
}

/// Why a login ends without full feature phase.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InitiatorLoginError {
    /// The target answered with a status other than success.
    #[error("login refused with status {status:#06x} ({})", login_status_text(*status))]
    Refused { status: u16 },
    /// The target needs CHAP but we have no credentials.
    #[error("the target requires CHAP authentication")]
    ChapRequired,
    /// We offered CHAP (and None) and the target chose something else.
    #[error("the target chose AuthMethod={0}, not one we offered")]
    AuthMethod(String),
    #[error("the target offered CHAP algorithm {0:?}; only MD5 (5) is supported")]
    ChapAlgorithm(String),
    #[error("the target's CHAP challenge is missing or malformed")]
    ChapChallenge,
    /// Anything else the target did that RFC 7143 does not allow.
    #[error("protocol violation during login: {0}")]
    Protocol(String),
}

/// The meaning of a login status (RFC 7143 §11.13.5).
pub fn login_status_text(status: u16) -> &'static str {
    match status {
        LOGIN_SUCCESS => "success",
        0x0101 | 0x0102 => "target moved (redirection is not supported)",
        LOGIN_INITIATOR_ERROR => "initiator error",
        LOGIN_AUTH_FAILED => "authentication failure",
        LOGIN_FORBIDDEN => "authorization failure",
        LOGIN_TARGET_NOT_FOUND => "target not found",
        0x0204 => "target removed",
        LOGIN_UNSUPPORTED_VERSION => "unsupported version",
        0x0206 => "too many connections",
        LOGIN_MISSING_PARAMETER => "missing parameter",
        0x0208 => "cannot include in session",
        LOGIN_SESSION_TYPE_UNSUPPORTED => "session type not supported",
        0x020a => "session does not exist",
        LOGIN_INVALID_REQUEST => "invalid request during login",
        LOGIN_TARGET_ERROR => "target error",
        0x0301 => "service unavailable",
        0x0302 => "out of resources",
        _ => "unknown status",
    }
}

impl InitiatorLogin {
    /// Panics when a length in `offer` is outside what RFC 7143 allows (512 to 2^24 - 1).
    pub fn new(offer: InitiatorOffer) -> InitiatorLogin {
        for len in [
            offer.max_recv_data_segment_bytes,
            offer.max_burst_bytes,
            offer.first_burst_bytes,
        ] {
            assert!(
                (LENGTH_MIN_BYTES..=LENGTH_MAX_BYTES).contains(&len),
                "offered length {len} is outside 512..2^24"
            );
        }
        let params = SessionParams {
            header_digest: false,
            data_digest: false,
            initial_r2t: true,
            immediate_data: true,
            max_burst: MAX_BURST_DEFAULT_BYTES,
            first_burst: FIRST_BURST_DEFAULT_BYTES,
            initiator_max_recv: offer.max_recv_data_segment_bytes,
            target_max_recv: MAX_RECV_DATA_SEGMENT_DEFAULT_BYTES,
            max_outstanding_r2t: 1,
        };
        InitiatorLogin {
            offer,
            stage: Stage::Idle,
            params,
            exp_stat_sn: 0,
            rounds: 0,
            partial_text: Vec::new(),
            offered: Vec::new(),
        }
    }

    /// Append the first Login Request.
    pub fn start(&mut self, out: &mut Vec<u8>) {
        assert_eq!(self.stage, Stage::Idle, "a login starts once");
        let mut text = Vec::new();
        push_pair(&mut text, "InitiatorName", &self.offer.initiator_name);
        push_pair(&mut text, "SessionType", "Normal");
        push_pair(&mut text, "TargetName", &self.offer.target_name);
        if self.offer.chap.is_some() {
            push_pair(&mut text, "AuthMethod", "CHAP,None");
            self.stage = Stage::AuthMethod;
            self.send(STAGE_SECURITY, false, &text, out);
        } else {
            push_pair(&mut text, "AuthMethod", "None");
            self.stage = Stage::SecurityTransit;
            self.send(STAGE_SECURITY, true, &text, out);
        }
    }

    /// Handle one PDU from the target; the next Login Request, if any, goes to `out`.
    pub fn receive(
        &mut self,
        pdu: &PduRef<'_>,
        out: &mut Vec<u8>,
    ) -> Result<LoginStep, InitiatorLoginError> {
        let protocol = |what: &str| InitiatorLoginError::Protocol(what.to_string());
        let response = match decode_target_pdu(pdu) {
            Ok(TargetPdu::Login(r)) => r,
            Ok(_) => return Err(protocol("a PDU other than a Login Response")),
            Err(e) => return Err(InitiatorLoginError::Protocol(e.to_string())),
        };
        if matches!(self.stage, Stage::Idle | Stage::Done) {
            return Err(protocol("a Login Response nobody asked for"));
        }
        if response.status != LOGIN_SUCCESS {
            return Err(self.refusal(response.status));
        }
        if response.itt != LOGIN_ITT || response.isid != self.offer.isid {
            return Err(protocol("a Login Response for another login"));
        }
        if response.version_active != 0 {
            return Err(protocol("a protocol version other than 0"));
        }
        self.exp_stat_sn = response.numbers.stat_sn.wrapping_add(1);
        self.partial_text.extend_from_slice(response.text);
        if self.partial_text.len() > TEXT_MAX_BYTES {
            return Err(protocol("login text beyond 64 KiB"));
        }
        if response.continue_ {
            // More text follows: ask for it with an empty request in the same stage.
            let stage = self.current_stage();
            self.send(stage, false, &[], out);
            return Ok(LoginStep::Continue);
        }
        let text = std::mem::take(&mut self.partial_text);
        let pairs = parse_pairs(&text).map_err(|e| InitiatorLoginError::Protocol(e.to_string()))?;
        match self.stage {
            Stage::AuthMethod | Stage::ChapAlgorithm | Stage::ChapResponse => {
                self.security(&response, &pairs, out)
            }
            Stage::SecurityTransit => self.after_security(&response, &pairs, out),
            Stage::Operational => self.operational(&response, &pairs, out),
            Stage::Idle | Stage::Done => unreachable!("checked above"),
        }
    }

    fn refusal(&self, status: u16) -> InitiatorLoginError {
        if status == LOGIN_AUTH_FAILED && self.offer.chap.is_none() {
            InitiatorLoginError::ChapRequired
        } else {
            InitiatorLoginError::Refused { status }
        }
    }

    fn current_stage(&self) -> u8 {
        match self.stage {
            Stage::Operational => STAGE_OPERATIONAL,
            _ => STAGE_SECURITY,
        }
    }

    /// The CHAP exchange: AuthMethod, then CHAP_A, then our answer to the challenge.
    fn security(
        &mut self,
        response: &LoginResponse<'_>,
        pairs: &Pairs,
        out: &mut Vec<u8>,
    ) -> Result<LoginStep, InitiatorLoginError> {
        let (user, secret) = self
            .offer
            .chap
            .clone()
            .expect("CHAP stages need credentials");
        match self.stage {
            Stage::AuthMethod => match get(pairs, "AuthMethod") {
                Some("CHAP") => {
                    let mut text = Vec::new();
                    push_pair(&mut text, "CHAP_A", chap::CHAP_ALGORITHM_MD5);
                    self.stage = Stage::ChapAlgorithm;
                    self.send(STAGE_SECURITY, false, &text, out);
                }
                Some("None") => {
                    // The target needs no proof: move on without using the secret.
                    self.stage = Stage::SecurityTransit;
                    if response.transit {
                        return self.after_security(response, pairs, out);
                    }
                    self.send(STAGE_SECURITY, true, &[], out);
                }
                Some(other) => return Err(InitiatorLoginError::AuthMethod(other.to_string())),
                None => {
                    return Err(InitiatorLoginError::Protocol(
                        "the target did not answer AuthMethod".into(),
                    ))
                }
            },
            Stage::ChapAlgorithm => {
                let algorithm = get(pairs, "CHAP_A").unwrap_or("");
                if algorithm != chap::CHAP_ALGORITHM_MD5 {
                    return Err(InitiatorLoginError::ChapAlgorithm(algorithm.to_string()));
                }
                let id: u8 = get(pairs, "CHAP_I")
                    .and_then(|i| i.parse().ok())
                    .ok_or(InitiatorLoginError::ChapChallenge)?;
                let challenge = get(pairs, "CHAP_C")
                    .and_then(chap::decode_binary)
                    .ok_or(InitiatorLoginError::ChapChallenge)?;
                let mut text = Vec::new();
                push_pair(&mut text, "CHAP_N", &user);
                push_pair(
                    &mut text,
                    "CHAP_R",
                    &chap::encode_hex(&chap::response(id, &secret, &challenge)),
                );
                self.stage = Stage::ChapResponse;
                self.send(STAGE_SECURITY, true, &text, out);
            }
            Stage::ChapResponse => {
                self.stage = Stage::SecurityTransit;
                return self.after_security(response, pairs, out);
            }
            _ => unreachable!("only the CHAP stages come here"),
        }
        Ok(LoginStep::Continue)
    }

    /// We asked to leave the security stage: go on once the target agrees.
    fn after_security(
        &mut self,
        response: &LoginResponse<'_>,
        pairs: &Pairs,
        out: &mut Vec<u8>,
    ) -> Result<LoginStep, InitiatorLoginError> {
        if let Some(method) = get(pairs, "AuthMethod") {
            if method != "None" && method != "CHAP" {
                return Err(InitiatorLoginError::AuthMethod(method.to_string()));
            }
        }
        if !response.transit {
            // The target wants another round in this stage; ask again.
            self.send(STAGE_SECURITY, true, &[], out);
            return Ok(LoginStep::Continue);
        }
        if response.current_stage != STAGE_SECURITY {
            return Err(InitiatorLoginError::Protocol(format!(
                "answered security stage in stage {}",
                response.current_stage
            )));
        }
        match response.next_stage {
            STAGE_OPERATIONAL => {
                let text = self.operational_offer();
                self.stage = Stage::Operational;
                self.send(STAGE_OPERATIONAL, true, &text, out);
                Ok(LoginStep::Continue)
            }
            // A target may skip the operational stage; then every key keeps its default.
            STAGE_FULL_FEATURE => Ok(LoginStep::Complete(self.complete(response))),
            other => Err(InitiatorLoginError::Protocol(format!(
                "transit to stage {other}"
            ))),
        }
    }

    fn operational_offer(&mut self) -> Vec<u8> {
        let o = &self.offer;
        let offers: [(&'static str, String); 12] = [
            ("HeaderDigest", "None".into()),
            ("DataDigest", "None".into()),
            ("MaxConnections", "1".into()),
            ("ErrorRecoveryLevel", "0".into()),
            ("InitialR2T", yes_no(o.initial_r2t).into()),
            ("ImmediateData", yes_no(o.immediate_data).into()),
            (
                "MaxRecvDataSegmentLength",
                o.max_recv_data_segment_bytes.to_string(),
            ),
            ("MaxBurstLength", o.max_burst_bytes.to_string()),
            ("FirstBurstLength", o.first_burst_bytes.to_string()),
            ("MaxOutstandingR2T", "1".into()),
            ("DataPDUInOrder", "Yes".into()),
            ("DataSequenceInOrder", "Yes".into()),
        ];
        let mut text = Vec::new();
        for (key, value) in &offers {
            push_pair(&mut text, key, value);
        }
        self.offered = offers.iter().map(|(k, _)| *k).collect();
        text
    }

    fn operational(
        &mut self,
        response: &LoginResponse<'_>,
        pairs: &Pairs,
        out: &mut Vec<u8>,
    ) -> Result<LoginStep, InitiatorLoginError> {
        let mut answers = Vec::new();
        for (key, value) in pairs {
            self.apply(key, value, &mut answers)?;
        }
        if !response.transit {
            self.send(STAGE_OPERATIONAL, true, &answers, out);
            return Ok(LoginStep::Continue);
        }
        if response.next_stage != STAGE_FULL_FEATURE {
            return Err(InitiatorLoginError::Protocol(format!(
                "transit to stage {} instead of full feature phase",
                response.next_stage
            )));
        }
        Ok(LoginStep::Complete(self.complete(response)))
    }

    /// Take one key of the target's answer; keys it raised itself get an answer in `answers`.
    fn apply(
        &mut self,
        key: &str,
        value: &str,
        answers: &mut Vec<u8>,
    ) -> Result<(), InitiatorLoginError> {
        let bad = || InitiatorLoginError::Protocol(format!("bad answer {key}={value}"));
        let unanswered = matches!(value, "NotUnderstood" | "Irrelevant" | "Reject");
        let length = || {
            value
                .parse::<u32>()
                .ok()
                .filter(|v| (LENGTH_MIN_BYTES..=LENGTH_MAX_BYTES).contains(v))
                .ok_or_else(bad)
        };
        let ours = self.offered.contains(&key);
        if !ours && !TARGET_DECLARATIONS.contains(&key) {
            // The target's own offer: accept what it proposes where we know the key.
            let known = matches!(
                key,
                "MaxBurstLength"
                    | "FirstBurstLength"
                    | "InitialR2T"
                    | "ImmediateData"
                    | "DefaultTime2Wait"
                    | "DefaultTime2Retain"
                    | "MaxOutstandingR2T"
                    | "DataPDUInOrder"
                    | "DataSequenceInOrder"
                    | "IFMarker"
                    | "OFMarker"
            );
            let answer = if known {
                value.split(',').next().unwrap_or(value)
            } else {
                "NotUnderstood"
            };
            push_pair(answers, key, answer);
        }
        if unanswered {
            return Ok(());
        }
        match key {
            "HeaderDigest" | "DataDigest" if value != "None" => {
                return Err(InitiatorLoginError::Protocol(format!(
                    "the target chose {key}={value}; only None is supported"
                )))
            }
            "ErrorRecoveryLevel" if value != "0" => {
                return Err(InitiatorLoginError::Protocol(format!(
                    "the target chose ErrorRecoveryLevel={value}; only 0 is supported"
                )))
            }
            "MaxConnections" if value != "1" => {
                return Err(InitiatorLoginError::Protocol(format!(
                    "the target chose MaxConnections={value}"
                )))
            }
            "MaxRecvDataSegmentLength" => self.params.target_max_recv = length()?,
            "MaxBurstLength" => {
                self.params.max_burst = length()?.min(self.offer.max_burst_bytes);
            }
            "FirstBurstLength" => {
                self.params.first_burst = length()?.min(self.offer.first_burst_bytes);
            }
            "InitialR2T" => self.params.initial_r2t = boolean(value).ok_or_else(bad)?,
            "ImmediateData" => {
                self.params.immediate_data =
                    self.offer.immediate_data && boolean(value).ok_or_else(bad)?;
            }
            "MaxOutstandingR2T" => {
                self.params.max_outstanding_r2t = value
                    .parse::<u32>()
                    .ok()
                    .filter(|v| (1..=65535).contains(v))
                    .ok_or_else(bad)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn complete(&mut self, response: &LoginResponse<'_>) -> LoginOutcome {
        self.stage = Stage::Done;
        // FirstBurstLength never exceeds MaxBurstLength (RFC 7143 §13.14).
        self.params.first_burst = self.params.first_burst.min(self.params.max_burst);
        LoginOutcome {
            params: self.params,
            tsih: response.tsih,
            cmd_sn: self.offer.cmd_sn,
            exp_stat_sn: self.exp_stat_sn,
            exp_cmd_sn: response.numbers.exp_cmd_sn,
            max_cmd_sn: response.numbers.max_cmd_sn,
        }
    }

    fn send(&mut self, current_stage: u8, transit: bool, text: &[u8], out: &mut Vec<u8>) {
        self.rounds += 1;
        let next_stage = match (transit, current_stage) {
            (false, stage) => stage,
            (true, STAGE_SECURITY) => STAGE_OPERATIONAL,
            (true, _) => STAGE_FULL_FEATURE,
        };
        login_request(
            &LoginRequestPdu {
                transit,
                current_stage,
                next_stage: if transit { next_stage } else { 0 },
                isid: self.offer.isid,
                itt: LOGIN_ITT,
                cmd_sn: self.offer.cmd_sn,
                exp_stat_sn: self.exp_stat_sn,
                text,
            },
            out,
        );
    }

    /// Whether the login has gone on for more rounds than any sane target needs.
    pub fn too_many_rounds(&self) -> bool {
        self.rounds > LOGIN_ROUNDS_MAX
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::login::{Access, ChapCredentials, Login, LoginProgress};
    use crate::negotiate::TargetLimits;
    use crate::pdu::{parse_pdu, parse_pdu_ref, Digests};
    use crate::request::{decode, Request};
    use crate::Parse;

    const OPEN_TARGET: &str = "iqn.2026-11.dev.weft:open";
    const CHAP_TARGET: &str = "iqn.2026-11.dev.weft:chap";
    const SECRET: &[u8] = b"bench-secret-123";

    /// One open target and one that wants CHAP from user "b1".
    struct Acl;

    impl Access for Acl {
        fn authorize(
            &self,
            _initiator: &str,
            target: Option<&str>,
        ) -> Result<Option<ChapCredentials>, u16> {
            match target {
                Some(OPEN_TARGET) => Ok(None),
                Some(CHAP_TARGET) => Ok(Some(ChapCredentials {
                    user: "b1".into(),
                    secret: SECRET.to_vec(),
                    mutual: None,
                })),
                _ => Err(LOGIN_TARGET_NOT_FOUND),
            }
        }
    }

    fn offer(target: &str, chap: Option<&[u8]>) -> InitiatorOffer {
        InitiatorOffer {
            initiator_name: "iqn.2026-11.dev.weft:bench".into(),
            target_name: target.into(),
            isid: [0x80, 0, 0, 0, 0, 7],
            chap: chap.map(|s| ("b1".to_string(), s.to_vec())),
            cmd_sn: 1,
            max_recv_data_segment_bytes: 256 << 10,
            max_burst_bytes: LENGTH_MAX_BYTES,
            first_burst_bytes: 1 << 20,
            initial_r2t: false,
            immediate_data: true,
        }
    }

    /// Runs a whole login against weft's own target state machine, in memory.
    fn log_in(
        target: &str,
        chap: Option<&[u8]>,
        limits: TargetLimits,
    ) -> Result<LoginOutcome, InitiatorLoginError> {
        let mut initiator = InitiatorLogin::new(offer(target, chap));
        let mut to_target = Vec::new();
        initiator.start(&mut to_target);
        let mut login = Login::new(limits, 1, 5, [3; 17]);
        loop {
            assert!(!initiator.too_many_rounds(), "login does not converge");
            let Parse::Complete(pdu, used) = parse_pdu(&to_target, Digests::default(), 1 << 16)
            else {
                panic!("the initiator sent one whole PDU");
            };
            assert_eq!(used, to_target.len());
            let Ok(Request::Login(req)) = decode(pdu) else {
                panic!("a Login Request");
            };
            let mut to_initiator = Vec::new();
            let progress = login.step(&req, &Acl, &mut to_initiator);
            let Parse::Complete(reply, _) =
                parse_pdu_ref(&to_initiator, Digests::default(), 1 << 16)
            else {
                panic!("the target sent one whole PDU");
            };
            to_target.clear();
            let step = initiator.receive(&reply, &mut to_target);
            match (&progress, step?) {
                (LoginProgress::Complete(done), LoginStep::Complete(outcome)) => {
                    assert_eq!(outcome.tsih, done.tsih);
                    assert_eq!(outcome.exp_stat_sn, done.next_stat_sn);
                    assert_eq!(outcome.exp_cmd_sn, done.exp_cmd_sn);
                    return Ok(outcome);
                }
                (LoginProgress::Continue, LoginStep::Continue) => {}
                (p, s) => panic!("target {p:?} while initiator {s:?}"),
            }
        }
    }

    #[test]
    fn an_open_target_logs_in_and_its_answers_are_honoured() {
        let limits = TargetLimits {
            max_recv_data_segment: 128 << 10,
            max_burst: 1 << 20,
            first_burst: 64 << 10,
        };
        let outcome = log_in(OPEN_TARGET, None, limits).unwrap();
        let p = outcome.params;
        assert!(!p.header_digest && !p.data_digest);
        assert!(!p.initial_r2t && p.immediate_data);
        assert_eq!(p.target_max_recv, 128 << 10, "the target's declaration");
        assert_eq!(p.initiator_max_recv, 256 << 10, "ours");
        assert_eq!((p.max_burst, p.first_burst), (1 << 20, 64 << 10));
        assert_eq!(outcome.cmd_sn, 1);
        assert_eq!(outcome.exp_cmd_sn, 1);
        assert!(outcome.max_cmd_sn > outcome.exp_cmd_sn);
    }

    #[test]
    fn chap_with_the_right_secret_logs_in_and_a_wrong_one_is_refused() {
        let limits = TargetLimits::default();
        log_in(CHAP_TARGET, Some(SECRET), limits).unwrap();
        assert_eq!(
            log_in(CHAP_TARGET, Some(b"not-the-secret-00"), limits),
            Err(InitiatorLoginError::Refused {
                status: LOGIN_AUTH_FAILED
            })
        );
        assert_eq!(
            log_in(CHAP_TARGET, None, limits),
            Err(InitiatorLoginError::ChapRequired)
        );
    }

    #[test]
    fn credentials_for_an_open_target_are_not_needed() {
        log_in(OPEN_TARGET, Some(SECRET), TargetLimits::default()).unwrap();
    }

    #[test]
    fn an_unknown_target_is_refused_with_its_status() {
        let err = log_in("iqn.2026-11.dev.weft:nope", None, TargetLimits::default());
        assert_eq!(
            err,
            Err(InitiatorLoginError::Refused {
                status: LOGIN_TARGET_NOT_FOUND
            })
        );
        assert_eq!(
            err.unwrap_err().to_string(),
            "login refused with status 0x0203 (target not found)"
        );
    }

    #[test]
    fn target_offers_are_answered_and_digests_are_refused() {
        let mut login = InitiatorLogin::new(offer(OPEN_TARGET, None));
        login.offered = vec!["MaxBurstLength"];
        let mut answers = Vec::new();
        login.apply("DefaultTime2Wait", "2", &mut answers).unwrap();
        login.apply("X-vendor.Key", "1", &mut answers).unwrap();
        login.apply("TargetAlias", "weft", &mut answers).unwrap();
        login
            .apply("MaxBurstLength", "65536", &mut answers)
            .unwrap();
        let pairs = parse_pairs(&answers).unwrap();
        assert_eq!(get(&pairs, "DefaultTime2Wait"), Some("2"));
        assert_eq!(get(&pairs, "X-vendor.Key"), Some("NotUnderstood"));
        assert_eq!(pairs.len(), 2);
        assert_eq!(login.params.max_burst, 65536);
        assert!(login.apply("HeaderDigest", "CRC32C", &mut answers).is_err());
        assert!(login.apply("MaxBurstLength", "12", &mut answers).is_err());
    }
}
