//! The login phase of one connection (RFC 7143 §6.3, §11.12-11.13): security negotiation
//! with CHAP or none, operational negotiation, and the transition to full feature phase.
//! Who may log in to what, and with which secrets, is asked of an [`Access`]; the random
//! bytes of our CHAP challenge come from the caller.

use crate::chap;
use crate::negotiate::{negotiate, SessionParams, TargetLimits};
use crate::request::LoginRequest;
use crate::response::{login_response, LoginReply, Numbers};
use crate::text::{get, parse_pairs, push_pair, Pairs};
use crate::wire::*;

/// Secrets an initiator must prove it knows (and, for mutual CHAP, ours it may ask for).
#[derive(Clone, PartialEq, Eq)]
pub struct ChapCredentials {
    pub user: String,
    pub secret: Vec<u8>,
    /// (our name, our secret) for mutual CHAP: when set, the initiator must ask for it.
    pub mutual: Option<(String, Vec<u8>)>,
}

impl std::fmt::Debug for ChapCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChapCredentials")
            .field("user", &self.user)
            .field("mutual", &self.mutual.as_ref().map(|(name, _)| name))
            .finish_non_exhaustive()
    }
}

/// The target's answers about initiators.
pub trait Access {
    /// Whether `initiator` may log in: to `target`, or for discovery when `None`. `Ok(None)`
    /// needs no authentication; `Err` is the login status to refuse with.
    fn authorize(
        &self,
        initiator: &str,
        target: Option<&str>,
    ) -> Result<Option<ChapCredentials>, u16>;
}

/// A connection's login, fed one Login Request at a time.
#[derive(Debug)]
pub struct Login {
    limits: TargetLimits,
    portal_group_tag: u16,
    tsih: u16,
    /// Random bytes for our CHAP identifier and challenge.
    random: [u8; 1 + chap::CHALLENGE_BYTES],
    params: SessionParams,
    stat_sn: u32,
    started: Option<Started>,
    /// Text of requests sent with C (continue), waiting for the rest.
    partial_text: Vec<u8>,
    chap: ChapStage,
    operational_seen: bool,
}

#[derive(Debug)]
struct Started {
    initiator: String,
    target: Option<String>,
    isid: [u8; 6],
    credentials: Option<ChapCredentials>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ChapStage {
    /// No method agreed yet.
    Unagreed,
    /// AuthMethod=None agreed (or nothing to prove).
    NotNeeded,
    AwaitAlgorithm,
    AwaitResponse,
    Proven,
}

/// What a login step leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginProgress {
    /// More Login Requests are expected.
    Continue,
    /// The connection is in full feature phase.
    Complete(LoggedIn),
    /// The login was refused (the response says why): close the connection.
    Failed(u16),
}

/// A finished login.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedIn {
    pub initiator: String,
    /// `None` for a discovery session.
    pub target: Option<String>,
    pub params: SessionParams,
    pub isid: [u8; 6],
    pub tsih: u16,
    /// StatSN of the next response, and the CmdSN expected next.
    pub next_stat_sn: u32,
    pub exp_cmd_sn: u32,
}

/// Commands the initiator may have outstanding (MaxCmdSN - ExpCmdSN + 1).
pub const COMMAND_WINDOW: u32 = 64;

impl Login {
    /// `tsih`: the session handle to give a new session (non-zero, unique among live ones).
    pub fn new(
        limits: TargetLimits,
        portal_group_tag: u16,
        tsih: u16,
        random: [u8; 1 + chap::CHALLENGE_BYTES],
    ) -> Login {
        Login {
            limits,
            portal_group_tag,
            tsih,
            random,
            params: SessionParams::new(&limits),
            stat_sn: 0,
            started: None,
            partial_text: Vec::new(),
            chap: ChapStage::Unagreed,
            operational_seen: false,
        }
    }

    /// The initiator's name, once its first Login Request said it (for logs of a refusal).
    pub fn initiator(&self) -> Option<&str> {
        self.started.as_ref().map(|s| s.initiator.as_str())
    }

    /// Handle one Login Request; the Login Response goes to `out`.
    pub fn step(
        &mut self,
        req: &LoginRequest,
        access: &dyn Access,
        out: &mut Vec<u8>,
    ) -> LoginProgress {
        if self.started.is_none() {
            self.stat_sn = req.exp_stat_sn;
        }
        let numbers = Numbers {
            stat_sn: self.stat_sn,
            exp_cmd_sn: req.cmd_sn,
            max_cmd_sn: req.cmd_sn.wrapping_add(COMMAND_WINDOW - 1),
        };
        self.stat_sn = self.stat_sn.wrapping_add(1);
        let mut reply = LoginReply {
            transit: false,
            current_stage: req.current_stage,
            next_stage: 0,
            isid: req.isid,
            tsih: 0,
            itt: req.itt,
            status: LOGIN_SUCCESS,
            text: Vec::new(),
        };
        match self.handle(req, access, &mut reply) {
            Ok(done) => {
                login_response(&reply, numbers, out);
                match done {
                    Some(logged_in) => LoginProgress::Complete(logged_in),
                    None => LoginProgress::Continue,
                }
            }
            Err(status) => {
                let failed = LoginReply {
                    transit: false,
                    current_stage: 0,
                    next_stage: 0,
                    status,
                    text: Vec::new(),
                    ..reply
                };
                login_response(&failed, numbers, out);
                LoginProgress::Failed(status)
            }
        }
    }

    fn handle(
        &mut self,
        req: &LoginRequest,
        access: &dyn Access,
        reply: &mut LoginReply,
    ) -> Result<Option<LoggedIn>, u16> {
        if req.version_min > 0 {
            return Err(LOGIN_UNSUPPORTED_VERSION);
        }
        if req.tsih != 0 {
            // Adding a connection to an existing session (MC/S) or reinstatement by TSIH.
            return Err(LOGIN_SESSION_TYPE_UNSUPPORTED);
        }
        if req.current_stage == 2
            || (req.transit && req.next_stage <= req.current_stage)
            || req.next_stage == 2
        {
            return Err(LOGIN_INVALID_REQUEST);
        }
        self.partial_text.extend_from_slice(&req.text);
        if self.partial_text.len() > TEXT_MAX_BYTES {
            return Err(LOGIN_INITIATOR_ERROR);
        }
        if req.continue_ {
            // More text follows: answer with an empty response and wait.
            return Ok(None);
        }
        let text = std::mem::take(&mut self.partial_text);
        let pairs = parse_pairs(&text).map_err(|_| LOGIN_INITIATOR_ERROR)?;
        if self.started.is_none() {
            self.start(req, &pairs, access)?;
            if self.started.as_ref().is_some_and(|s| s.target.is_some()) {
                push_pair(
                    &mut reply.text,
                    "TargetPortalGroupTag",
                    &self.portal_group_tag.to_string(),
                );
            }
        }
        match req.current_stage {
            STAGE_SECURITY => self.security(&pairs, &mut reply.text)?,
            _ => {
                if !self.authenticated() {
                    if self.needs_chap() {
                        return Err(LOGIN_AUTH_FAILED);
                    }
                    self.chap = ChapStage::NotNeeded;
                }
                self.operational_seen = true;
            }
        }
        negotiate(&pairs, &self.limits, &mut self.params, &mut reply.text)
            .map_err(|_| LOGIN_INITIATOR_ERROR)?;
        if !req.transit || (req.current_stage == STAGE_SECURITY && !self.authenticated()) {
            return Ok(None);
        }
        reply.transit = true;
        reply.next_stage = req.next_stage;
        if req.next_stage != STAGE_FULL_FEATURE {
            return Ok(None);
        }
        let started = self.started.as_ref().expect("started above");
        reply.tsih = self.tsih;
        Ok(Some(LoggedIn {
            initiator: started.initiator.clone(),
            target: started.target.clone(),
            params: self.params,
            isid: started.isid,
            tsih: self.tsih,
            next_stat_sn: self.stat_sn,
            exp_cmd_sn: req.cmd_sn,
        }))
    }

    /// The first request: who is this, what do they want, may they.
    fn start(&mut self, req: &LoginRequest, pairs: &Pairs, access: &dyn Access) -> Result<(), u16> {
        let initiator = get(pairs, "InitiatorName").ok_or(LOGIN_MISSING_PARAMETER)?;
        let target = match get(pairs, "SessionType").unwrap_or("Normal") {
            "Normal" => Some(
                get(pairs, "TargetName")
                    .ok_or(LOGIN_MISSING_PARAMETER)?
                    .to_string(),
            ),
            "Discovery" => None,
            _ => return Err(LOGIN_SESSION_TYPE_UNSUPPORTED),
        };
        let credentials = access.authorize(initiator, target.as_deref())?;
        self.started = Some(Started {
            initiator: initiator.to_string(),
            target,
            isid: req.isid,
            credentials,
        });
        Ok(())
    }

    fn needs_chap(&self) -> bool {
        self.started
            .as_ref()
            .is_some_and(|s| s.credentials.is_some())
    }

    fn authenticated(&self) -> bool {
        matches!(self.chap, ChapStage::NotNeeded | ChapStage::Proven)
    }

    fn security(&mut self, pairs: &Pairs, reply: &mut Vec<u8>) -> Result<(), u16> {
        if let Some(methods) = get(pairs, "AuthMethod") {
            if self.chap != ChapStage::Unagreed {
                return Err(LOGIN_INITIATOR_ERROR);
            }
            let offered: Vec<&str> = methods.split(',').collect();
            if self.needs_chap() {
                if !offered.contains(&"CHAP") {
                    return Err(LOGIN_AUTH_FAILED);
                }
                push_pair(reply, "AuthMethod", "CHAP");
                self.chap = ChapStage::AwaitAlgorithm;
            } else if offered.contains(&"None") {
                push_pair(reply, "AuthMethod", "None");
                self.chap = ChapStage::NotNeeded;
            } else {
                // We hold no secret to check CHAP against.
                push_pair(reply, "AuthMethod", "Reject");
                return Ok(());
            }
        }
        match self.chap {
            ChapStage::AwaitAlgorithm => {
                let Some(algorithms) = get(pairs, "CHAP_A") else {
                    return Ok(());
                };
                if !algorithms.split(',').any(|a| a == chap::CHAP_ALGORITHM_MD5) {
                    return Err(LOGIN_AUTH_FAILED);
                }
                push_pair(reply, "CHAP_A", chap::CHAP_ALGORITHM_MD5);
                push_pair(reply, "CHAP_I", &self.random[0].to_string());
                push_pair(reply, "CHAP_C", &chap::encode_hex(&self.random[1..]));
                self.chap = ChapStage::AwaitResponse;
            }
            ChapStage::AwaitResponse => self.check_chap(pairs, reply)?,
            ChapStage::Unagreed if !self.needs_chap() && get(pairs, "AuthMethod").is_none() => {
                // An initiator that skips AuthMethod against a target that needs none.
                self.chap = ChapStage::NotNeeded;
            }
            _ => {}
        }
        Ok(())
    }

    fn check_chap(&mut self, pairs: &Pairs, reply: &mut Vec<u8>) -> Result<(), u16> {
        let credentials = self
            .started
            .as_ref()
            .and_then(|s| s.credentials.clone())
            .expect("CHAP is awaited only with credentials");
        let name = get(pairs, "CHAP_N").ok_or(LOGIN_AUTH_FAILED)?;
        let response = get(pairs, "CHAP_R")
            .and_then(chap::decode_binary)
            .ok_or(LOGIN_AUTH_FAILED)?;
        let expected = chap::response(self.random[0], &credentials.secret, &self.random[1..]);
        if name != credentials.user || !chap::responses_match(&response, &expected) {
            return Err(LOGIN_AUTH_FAILED);
        }
        let mutual_request = match (get(pairs, "CHAP_I"), get(pairs, "CHAP_C")) {
            (Some(id), Some(challenge)) => {
                let id: u8 = id.parse().map_err(|_| LOGIN_AUTH_FAILED)?;
                let challenge = chap::decode_binary(challenge).ok_or(LOGIN_AUTH_FAILED)?;
                Some((id, challenge))
            }
            (None, None) => None,
            _ => return Err(LOGIN_AUTH_FAILED),
        };
        match (&credentials.mutual, mutual_request) {
            (None, None) => {}
            (Some((our_name, our_secret)), Some((id, challenge))) => {
                // An initiator replaying our own challenge would have us answer it.
                if challenge == self.random[1..] {
                    return Err(LOGIN_AUTH_FAILED);
                }
                push_pair(reply, "CHAP_N", our_name);
                push_pair(
                    reply,
                    "CHAP_R",
                    &chap::encode_hex(&chap::response(id, our_secret, &challenge)),
                );
            }
            // Asked to prove a secret we do not have, or not asking for one we require.
            _ => return Err(LOGIN_AUTH_FAILED),
        }
        self.chap = ChapStage::Proven;
        Ok(())
    }
}
