//! Fuzz entry points and their seed corpus, shared by `fuzz/` (cargo-fuzz, nightly), the
//! proptests, and the stable-toolchain corpus replay in `tests/corpus_replay.rs`.
//!
//! Each entry point drives the PDU parser or the login state machine over arbitrary bytes
//! and asserts what must hold for any input: no panic, consumed counts inside the input,
//! PDUs that re-encode to the bytes they came from, a login that ends at most once.

use crate::chap;
use crate::initiator::{login_request, LoginRequestPdu};
use crate::login::{Access, ChapCredentials, Login, LoginProgress};
use crate::negotiate::TargetLimits;
use crate::pdu::{encode_pdu, parse_pdu, Digests};
use crate::request::{decode, Request};
use crate::text::push_pair;
use crate::wire::*;
use crate::Parse;

/// Target names; also the directory names under `fuzz/corpus/`.
pub const PDU_TARGET: &str = "iscsi_pdu";
pub const LOGIN_TARGET: &str = "iscsi_login";

/// The fuzz target's fixed CHAP randomness (identifier, then challenge).
const FUZZ_RANDOM: [u8; 1 + chap::CHALLENGE_BYTES] = [7; 1 + chap::CHALLENGE_BYTES];
const OPEN_TARGET: &str = "iqn.2026-11.dev.weft:open";
const CHAP_TARGET: &str = "iqn.2026-11.dev.weft:chap";
const CHAP_USER: &str = "user";
const CHAP_SECRET: &[u8] = b"secret-of-12+";

struct FuzzAccess;

impl Access for FuzzAccess {
    fn authorize(
        &self,
        _initiator: &str,
        target: Option<&str>,
    ) -> Result<Option<ChapCredentials>, u16> {
        match target {
            None | Some(OPEN_TARGET) => Ok(None),
            Some(CHAP_TARGET) => Ok(Some(ChapCredentials {
                user: CHAP_USER.into(),
                secret: CHAP_SECRET.to_vec(),
                mutual: None,
            })),
            Some(_) => Err(LOGIN_TARGET_NOT_FOUND),
        }
    }
}

/// First byte: bit 0 header digest, bit 1 data digest. The rest: PDUs back to back, each
/// decoded both as an initiator PDU (the target's side) and as a target PDU (the initiator's).
pub fn fuzz_pdu(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let digests = Digests {
        header: flags & 1 != 0,
        data: flags & 2 != 0,
    };
    while let Parse::Complete(pdu, used) = parse_pdu(rest, digests, 64 << 10) {
        assert!(used >= BHS_BYTES && used <= rest.len());
        if pdu.ahs.is_empty() {
            let mut again = Vec::new();
            encode_pdu(pdu.bhs, &pdu.data, digests, &mut again);
            assert_eq!(&again[..BHS_BYTES], &rest[..BHS_BYTES]);
            assert_eq!(again.len(), used);
        }
        // The same bytes as a target PDU, as weft's benchmark initiator decodes them.
        let _ = crate::target_pdu::decode_target_pdu(&pdu.borrowed());
        let _ = decode(pdu);
        rest = &rest[used..];
    }
}

/// Login Requests back to back (anything else is skipped), into one login.
pub fn fuzz_login(data: &[u8]) {
    let mut login = Login::new(TargetLimits::default(), 1, 1, FUZZ_RANDOM);
    let mut rest = data;
    let mut out = Vec::new();
    while let Parse::Complete(pdu, used) = parse_pdu(rest, Digests::default(), TEXT_MAX_BYTES) {
        rest = &rest[used..];
        let Ok(Request::Login(req)) = decode(pdu) else {
            continue;
        };
        out.clear();
        let progress = login.step(&req, &FuzzAccess, &mut out);
        let Parse::Complete(reply, used) = parse_pdu(&out, Digests::default(), usize::MAX) else {
            panic!("every step answers with one whole PDU");
        };
        assert_eq!(used, out.len());
        assert_eq!(reply.opcode(), OP_LOGIN_RESPONSE);
        match progress {
            LoginProgress::Continue => {}
            LoginProgress::Complete(done) => {
                assert!(
                    done.target.as_deref() != Some(CHAP_TARGET)
                        || data.windows(6).any(|w| w == b"CHAP_R")
                );
                return;
            }
            LoginProgress::Failed(status) => {
                assert_ne!(status, LOGIN_SUCCESS);
                return;
            }
        }
    }
}

fn login_pdu(stage: (u8, u8, bool), text: &[u8], out: &mut Vec<u8>) {
    login_request(
        &LoginRequestPdu {
            transit: stage.2,
            current_stage: stage.0,
            next_stage: stage.1,
            isid: [0x80, 0, 0, 0, 0, 1],
            itt: 1,
            cmd_sn: 1,
            exp_stat_sn: 0,
            text,
        },
        out,
    );
}

/// Seeds: whole logins (open, discovery, CHAP) and a few PDUs of each kind.
pub fn seed_corpus() -> Vec<(&'static str, Vec<u8>)> {
    let mut seeds = Vec::new();
    let mut first = Vec::new();
    push_pair(&mut first, "InitiatorName", "iqn.2026-11.dev.weft:fuzz");
    let mut open_text = first.clone();
    push_pair(&mut open_text, "TargetName", OPEN_TARGET);
    push_pair(&mut open_text, "AuthMethod", "None");
    let mut op = Vec::new();
    push_pair(&mut op, "HeaderDigest", "None");
    push_pair(&mut op, "MaxRecvDataSegmentLength", "65536");
    let mut open = Vec::new();
    login_pdu(
        (STAGE_SECURITY, STAGE_OPERATIONAL, true),
        &open_text,
        &mut open,
    );
    login_pdu(
        (STAGE_OPERATIONAL, STAGE_FULL_FEATURE, true),
        &op,
        &mut open,
    );
    seeds.push((LOGIN_TARGET, open.clone()));
    let mut discovery_text = first.clone();
    push_pair(&mut discovery_text, "SessionType", "Discovery");
    let mut discovery = Vec::new();
    login_pdu(
        (STAGE_OPERATIONAL, STAGE_FULL_FEATURE, true),
        &discovery_text,
        &mut discovery,
    );
    seeds.push((LOGIN_TARGET, discovery));
    let mut chap_text = first;
    push_pair(&mut chap_text, "TargetName", CHAP_TARGET);
    push_pair(&mut chap_text, "AuthMethod", "CHAP,None");
    let mut algorithm = Vec::new();
    push_pair(&mut algorithm, "CHAP_A", "5");
    let mut answer = Vec::new();
    push_pair(&mut answer, "CHAP_N", CHAP_USER);
    let r = chap::response(FUZZ_RANDOM[0], CHAP_SECRET, &FUZZ_RANDOM[1..]);
    push_pair(&mut answer, "CHAP_R", &chap::encode_hex(&r));
    let mut chap_login = Vec::new();
    login_pdu(
        (STAGE_SECURITY, STAGE_OPERATIONAL, false),
        &chap_text,
        &mut chap_login,
    );
    login_pdu(
        (STAGE_SECURITY, STAGE_OPERATIONAL, false),
        &algorithm,
        &mut chap_login,
    );
    login_pdu(
        (STAGE_SECURITY, STAGE_OPERATIONAL, true),
        &answer,
        &mut chap_login,
    );
    login_pdu(
        (STAGE_OPERATIONAL, STAGE_FULL_FEATURE, true),
        &op,
        &mut chap_login,
    );
    seeds.push((LOGIN_TARGET, chap_login));
    let mut pdus = vec![3u8];
    let mut digested = Vec::new();
    crate::initiator::text_request(
        1,
        1,
        1,
        b"SendTargets=All\0",
        Digests {
            header: true,
            data: true,
        },
        &mut digested,
    );
    pdus.extend_from_slice(&digested);
    seeds.push((PDU_TARGET, pdus));
    let mut plain = vec![0u8];
    plain.extend_from_slice(&open);
    crate::initiator::data_out(
        &crate::initiator::DataOutPdu {
            lun: 0,
            itt: 1,
            ttt: 2,
            exp_stat_sn: 0,
            data_sn: 0,
            offset: 0,
            final_: true,
            data: &[1, 2, 3, 4, 5],
        },
        Digests::default(),
        &mut plain,
    );
    seeds.push((PDU_TARGET, plain));
    seeds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_run_clean_and_the_chap_seed_logs_in() {
        for (target, seed) in seed_corpus() {
            match target {
                PDU_TARGET => fuzz_pdu(&seed),
                _ => fuzz_login(&seed),
            }
        }
    }
}
