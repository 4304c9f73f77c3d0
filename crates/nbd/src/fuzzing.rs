//! Fuzz entry points and their seed corpus, shared by `fuzz/` (cargo-fuzz, nightly), the
//! proptests, and the stable-toolchain corpus replay in `tests/corpus_replay.rs`.
//!
//! Each entry point drives a parser or state machine over arbitrary bytes and asserts the
//! invariants that must hold for any input: no panic, progress on every `Continue`, consumed
//! counts inside the input, headers that re-encode to the bytes they came from.

use crate::negotiation::{encode_info_request, encode_meta_context_request, encode_option};
use crate::wire::{
    CLIENT_FLAG_FIXED_NEWSTYLE, CLIENT_FLAG_NO_ZEROES, CMD_BLOCK_STATUS, CMD_DISC, CMD_FLAG_FUA,
    CMD_FLAG_NO_HOLE, CMD_FLUSH, CMD_READ, CMD_TRIM, CMD_WRITE, CMD_WRITE_ZEROES, IHAVEOPT_MAGIC,
    INFO_NAME, OPT_ABORT, OPT_EXPORT_NAME, OPT_GO, OPT_INFO, OPT_LIST, OPT_LIST_META_CONTEXT,
    OPT_SET_META_CONTEXT, OPT_STARTTLS, OPT_STRUCTURED_REPLY, REQUEST_HEADER_LEN_BYTES, STATE_HOLE,
};
use crate::{
    encode_reply, parse_request_header, ExportSummary, Extent, Negotiation, Parse, ReplyHead,
    RequestHeader, Session, Step, TlsMode,
};

/// Target names; also the directory names under `fuzz/corpus/`.
pub const NEGOTIATION_TARGET: &str = "nbd_negotiation";
pub const REQUEST_TARGET: &str = "nbd_request";

/// Output one negotiation step may produce: a LIST of our few exports is far below this.
const STEP_OUTPUT_MAX_BYTES: usize = 64 * 1024;

fn fuzz_exports() -> Vec<ExportSummary> {
    vec![
        ExportSummary {
            name: "disk".into(),
            description: "d".into(),
            size_bytes: 1 << 20,
            read_only: false,
            block_size_min_bytes: 512,
        },
        ExportSummary {
            name: "ro".into(),
            description: String::new(),
            size_bytes: 1 << 16,
            read_only: true,
            block_size_min_bytes: 4096,
        },
    ]
}

/// First byte picks how the rest is chopped into reads (1..=64 bytes each, low six bits) and
/// whether STARTTLS is off, offered or required (top two bits); the rest is what a client
/// sends from the first byte after our greeting (after STARTTLS, as if decrypted). After Go,
/// the remaining bytes are fed to the request parser under the agreed session.
pub fn fuzz_negotiation(data: &[u8]) {
    let Some((&split, data)) = data.split_first() else {
        return;
    };
    let chunk = usize::from(split % 64) + 1;
    let exports = fuzz_exports();
    let tls = match split >> 6 {
        0 | 1 => TlsMode::Off,
        2 => TlsMode::Optional,
        _ => TlsMode::Required,
    };
    let mut n = Negotiation::with_tls(tls);
    let mut pending: Vec<u8> = Vec::new();
    let mut out = Vec::new();
    n.greeting(&mut out);
    let mut fed = 0;
    while fed < data.len() {
        let end = (fed + chunk).min(data.len());
        pending.extend_from_slice(&data[fed..end]);
        fed = end;
        loop {
            out.clear();
            match n.advance(&pending, &exports, &mut out) {
                Ok(Step::Incomplete) => break,
                Ok(Step::Continue { consumed }) => {
                    assert!(
                        consumed > 0 && consumed <= pending.len(),
                        "progress inside input"
                    );
                    assert!(out.len() <= STEP_OUTPUT_MAX_BYTES);
                    pending.drain(..consumed);
                }
                Ok(Step::Abort { consumed }) => {
                    assert!(consumed <= pending.len());
                    return;
                }
                Ok(Step::StartTls { consumed }) => {
                    assert!(consumed > 0 && consumed <= pending.len());
                    assert!(tls != TlsMode::Off && !n.tls_active());
                    pending.drain(..consumed);
                    n.tls_started();
                }
                Ok(Step::Go {
                    consumed,
                    agreement,
                }) => {
                    assert!(consumed <= pending.len());
                    assert!(exports.contains(&agreement.export));
                    pending.drain(..consumed);
                    pending.extend_from_slice(&data[fed..]);
                    run_requests(&Session::new(&agreement), &pending);
                    return;
                }
                Err(_) => return,
            }
        }
    }
}

/// Arbitrary bytes as a transmission-phase stream. The first byte picks the session shape.
pub fn fuzz_requests(data: &[u8]) {
    let Some((&shape, data)) = data.split_first() else {
        return;
    };
    let session = Session {
        size_bytes: 1 << 20,
        block_size_min_bytes: if shape & 8 != 0 { 512 } else { 4096 },
        read_only: shape & 1 != 0,
        structured_replies: shape & 2 != 0,
        base_allocation: shape & 6 == 6,
    };
    run_requests(&session, data);
}

fn run_requests(session: &Session, mut rest: &[u8]) {
    let mut out = Vec::new();
    loop {
        let header = match parse_request_header(rest) {
            Parse::Complete(header, consumed) => {
                assert_eq!(consumed, REQUEST_HEADER_LEN_BYTES);
                assert_eq!(
                    header.encode()[..],
                    rest[..consumed],
                    "header re-encodes to its bytes"
                );
                rest = &rest[consumed..];
                header
            }
            Parse::Incomplete | Parse::Invalid(_) => return,
        };
        let payload = usize::try_from(header.payload_len_bytes()).expect("bounded payload");
        rest = &rest[payload.min(rest.len())..];
        out.clear();
        let extents = [Extent {
            length_bytes: 4096,
            flags: STATE_HOLE,
        }];
        let head = match session.classify(&header) {
            Ok(crate::Command::Read {
                offset_bytes,
                length_bytes,
            }) => ReplyHead::ReadData {
                offset_bytes,
                length_bytes,
            },
            Ok(crate::Command::BlockStatus { .. }) => {
                assert!(session.structured_replies && session.base_allocation);
                ReplyHead::BlockStatus {
                    context_id: 1,
                    extents: &extents,
                }
            }
            Ok(_) => ReplyHead::Done,
            Err(errno) => ReplyHead::Error(errno),
        };
        encode_reply(header.handle, &head, session.structured_replies, &mut out);
        assert!(!out.is_empty());
    }
}

/// Seed inputs per target, as (file name, bytes).
pub fn seed_corpus(target: &str) -> Vec<(&'static str, Vec<u8>)> {
    match target {
        NEGOTIATION_TARGET => negotiation_seeds(),
        REQUEST_TARGET => request_seeds(),
        _ => Vec::new(),
    }
}

fn client_flags() -> Vec<u8> {
    (CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES)
        .to_be_bytes()
        .to_vec()
}

fn request(command: u16, flags: u16, offset_bytes: u64, length_bytes: u32) -> Vec<u8> {
    RequestHeader {
        flags,
        command,
        handle: 7,
        offset_bytes,
        length_bytes,
    }
    .encode()
    .to_vec()
}

fn negotiation_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let with_split = |split: u8, body: Vec<u8>| {
        let mut v = vec![split];
        v.extend(body);
        v
    };
    let mut go_default = client_flags();
    encode_option(
        OPT_GO,
        &encode_info_request("", &[INFO_NAME]),
        &mut go_default,
    );
    go_default.extend(request(CMD_READ, 0, 0, 4096));

    let mut structured = client_flags();
    encode_option(OPT_STRUCTURED_REPLY, &[], &mut structured);
    encode_option(
        OPT_LIST_META_CONTEXT,
        &encode_meta_context_request("disk", &[]),
        &mut structured,
    );
    encode_option(
        OPT_SET_META_CONTEXT,
        &encode_meta_context_request("disk", &["base:allocation"]),
        &mut structured,
    );
    encode_option(OPT_GO, &encode_info_request("disk", &[]), &mut structured);
    structured.extend(request(CMD_BLOCK_STATUS, 0, 0, 65536));
    structured.extend(request(CMD_READ, 0, 4096, 8192));

    let mut list = client_flags();
    encode_option(OPT_LIST, &[], &mut list);
    encode_option(OPT_INFO, &encode_info_request("ro", &[]), &mut list);
    encode_option(OPT_GO, &encode_info_request("missing", &[]), &mut list);
    encode_option(99, b"unknown", &mut list);
    encode_option(OPT_ABORT, &[], &mut list);

    let mut export_name = client_flags();
    encode_option(OPT_EXPORT_NAME, b"disk", &mut export_name);
    export_name.extend(request(CMD_WRITE, CMD_FLAG_FUA, 0, 4096));
    export_name.extend([0xab; 4096]);
    export_name.extend(request(CMD_DISC, 0, 0, 0));

    let mut too_long = client_flags();
    too_long.extend(IHAVEOPT_MAGIC.to_be_bytes());
    too_long.extend(OPT_GO.to_be_bytes());
    too_long.extend((70_000u32).to_be_bytes());
    too_long.extend([0u8; 300]);

    // TLS required (split's top bits 11): LIST is refused in clear, then STARTTLS, then GO.
    let mut starttls = client_flags();
    encode_option(OPT_LIST, &[], &mut starttls);
    encode_option(OPT_STARTTLS, &[], &mut starttls);
    encode_option(OPT_GO, &encode_info_request("disk", &[]), &mut starttls);
    starttls.extend(request(CMD_READ, 0, 0, 4096));

    vec![
        ("seed-go-default", with_split(63, go_default)),
        ("seed-starttls-required", with_split(0xc0 | 7, starttls)),
        ("seed-structured-block-status", with_split(5, structured)),
        ("seed-list-info-abort", with_split(17, list)),
        ("seed-export-name-write", with_split(63, export_name)),
        ("seed-option-too-long", with_split(0, too_long)),
    ]
}

fn request_seeds() -> Vec<(&'static str, Vec<u8>)> {
    let stream = |shape: u8, parts: Vec<Vec<u8>>| {
        let mut v = vec![shape];
        for p in parts {
            v.extend(p);
        }
        v
    };
    let mut write = request(CMD_WRITE, 0, 8192, 4096);
    write.extend([1u8; 4096]);
    vec![
        (
            "seed-simple-mix",
            stream(
                0,
                vec![
                    request(CMD_READ, 0, 0, 4096),
                    write.clone(),
                    request(CMD_FLUSH, 0, 0, 0),
                    request(CMD_TRIM, CMD_FLAG_FUA, 0, 8192),
                    request(CMD_WRITE_ZEROES, CMD_FLAG_NO_HOLE, 0, 4096),
                    request(CMD_DISC, 0, 0, 0),
                ],
            ),
        ),
        (
            "seed-structured-block-status",
            stream(
                6,
                vec![
                    request(CMD_BLOCK_STATUS, 0, 0, 1 << 20),
                    request(CMD_READ, 0, 4096, 4096),
                ],
            ),
        ),
        ("seed-read-only-write", stream(1, vec![write])),
        (
            "seed-errors",
            stream(
                2,
                vec![
                    request(CMD_READ, 0, 1, 4096),
                    request(CMD_READ, 0, 1 << 20, 4096),
                    request(42, 0, 0, 0),
                    vec![0xde, 0xad, 0xbe, 0xef],
                ],
            ),
        ),
        (
            "seed-write-too-long",
            stream(0, vec![request(CMD_WRITE, 0, 0, u32::MAX)]),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::Errno;

    /// Writes the seed corpus into `fuzz/corpus/<target>/` (only files whose bytes changed), so
    /// the committed corpus always matches the code that defines it.
    #[test]
    fn writes_seed_corpus() {
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus");
        for target in [NEGOTIATION_TARGET, REQUEST_TARGET] {
            let dir = root.join(target);
            std::fs::create_dir_all(&dir).expect("create corpus dir");
            for (name, bytes) in seed_corpus(target) {
                let path = dir.join(name);
                if std::fs::read(&path).ok().as_deref() != Some(&bytes[..]) {
                    std::fs::write(&path, &bytes).expect("write seed");
                }
            }
        }
    }

    #[test]
    fn seeds_run_clean_and_errnos_round_trip() {
        for target in [NEGOTIATION_TARGET, REQUEST_TARGET] {
            for (_, bytes) in seed_corpus(target) {
                match target {
                    NEGOTIATION_TARGET => fuzz_negotiation(&bytes),
                    _ => fuzz_requests(&bytes),
                }
            }
        }
        assert!(Errno::ALL
            .iter()
            .all(|e| Errno::from_code(e.code()) == Some(*e)));
    }
}
