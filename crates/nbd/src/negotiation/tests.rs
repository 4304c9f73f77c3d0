use proptest::prelude::*;

use super::*;
use crate::wire::{
    OPTION_REPLY_HEADER_LEN_BYTES, OPT_EXTENDED_HEADERS, OPT_STARTTLS, REP_ERR_UNSUP,
};

fn exports() -> Vec<ExportSummary> {
    vec![
        ExportSummary {
            name: "disk".into(),
            description: "the default".into(),
            size_bytes: 1 << 20,
            read_only: false,
            block_size_min_bytes: 512,
        },
        ExportSummary {
            name: "snap".into(),
            description: String::new(),
            size_bytes: 8192,
            read_only: true,
            block_size_min_bytes: 4096,
        },
    ]
}

/// A negotiation past the client flags, as a fixed-newstyle client with NO_ZEROES.
fn started() -> Negotiation {
    let mut n = Negotiation::new();
    let mut out = Vec::new();
    let flags = (CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES).to_be_bytes();
    assert_eq!(
        n.advance(&flags, &exports(), &mut out),
        Ok(Step::Continue { consumed: 4 })
    );
    assert!(out.is_empty());
    n
}

/// Feed one whole option; returns the step and the option replies as (type, data).
fn send(n: &mut Negotiation, option: u32, payload: &[u8]) -> (Step, Vec<(u32, Vec<u8>)>) {
    let mut input = Vec::new();
    encode_option(option, payload, &mut input);
    let mut out = Vec::new();
    let step = n.advance(&input, &exports(), &mut out).expect("accepted");
    (step, split_replies(option, &out))
}

fn split_replies(option: u32, mut out: &[u8]) -> Vec<(u32, Vec<u8>)> {
    let mut replies = Vec::new();
    while !out.is_empty() {
        let mut c = Cursor::new(out);
        assert_eq!(c.u64(), Some(OPTION_REPLY_MAGIC));
        assert_eq!(c.u32(), Some(option));
        let reply_type = c.u32().expect("type");
        let len = c.u32().expect("len") as usize;
        let data = c.take(len).expect("data").to_vec();
        out = &out[OPTION_REPLY_HEADER_LEN_BYTES + len..];
        replies.push((reply_type, data));
    }
    replies
}

#[test]
fn greeting_offers_fixed_newstyle_and_no_zeroes() {
    let mut out = Vec::new();
    Negotiation::new().greeting(&mut out);
    assert_eq!(&out[0..8], b"NBDMAGIC");
    assert_eq!(&out[8..16], b"IHAVEOPT");
    assert_eq!(&out[16..18], &3u16.to_be_bytes());
}

#[test]
fn unknown_client_flags_hang_up() {
    let mut n = Negotiation::new();
    let err = n.advance(&4u32.to_be_bytes(), &exports(), &mut Vec::new());
    assert_eq!(err, Err(NegotiationError::UnknownClientFlags { flags: 4 }));
}

#[test]
fn partial_option_is_incomplete_until_payload_arrives() {
    let mut n = started();
    let mut input = Vec::new();
    encode_option(OPT_GO, &encode_info_request("disk", &[]), &mut input);
    for cut in 0..input.len() {
        assert_eq!(
            n.advance(&input[..cut], &exports(), &mut Vec::new()),
            Ok(Step::Incomplete)
        );
    }
}

#[test]
fn go_on_default_export_sends_info_block_size_and_ack() {
    let mut n = started();
    let (step, replies) = send(&mut n, OPT_GO, &encode_info_request("", &[INFO_NAME]));
    let Step::Go { agreement, .. } = step else {
        panic!("expected go, got {step:?}")
    };
    assert_eq!(agreement.export.name, "disk");
    assert!(!agreement.structured_replies);
    let types: Vec<u32> = replies.iter().map(|r| r.0).collect();
    assert_eq!(types, vec![REP_INFO, REP_INFO, REP_INFO, REP_ACK]);
    let export = &replies[0].1;
    assert_eq!(&export[0..2], &INFO_EXPORT.to_be_bytes());
    assert_eq!(&export[2..10], &(1u64 << 20).to_be_bytes());
    assert_eq!(&replies[1].1[2..], b"disk");
    let block = &replies[2].1;
    assert_eq!(&block[0..2], &INFO_BLOCK_SIZE.to_be_bytes());
    assert_eq!(&block[2..6], &512u32.to_be_bytes(), "the export's minimum");
    assert_eq!(&block[6..10], &4096u32.to_be_bytes());
    assert_eq!(&block[10..14], &(32u32 << 20).to_be_bytes());
}

#[test]
fn block_size_minimum_is_per_export_and_sanitised() {
    let block_info = |exports: &[ExportSummary], name: &str| {
        let mut n = started();
        let mut input = Vec::new();
        encode_option(OPT_INFO, &encode_info_request(name, &[]), &mut input);
        let mut out = Vec::new();
        n.advance(&input, exports, &mut out).unwrap();
        let replies = split_replies(OPT_INFO, &out);
        let (_, block) = replies
            .iter()
            .find(|(t, data)| *t == REP_INFO && data[0..2] == INFO_BLOCK_SIZE.to_be_bytes())
            .expect("a block size info");
        (
            u32::from_be_bytes(block[2..6].try_into().unwrap()),
            u32::from_be_bytes(block[6..10].try_into().unwrap()),
        )
    };
    assert_eq!(block_info(&exports(), "snap"), (4096, 4096));
    assert_eq!(block_info(&exports(), "disk"), (512, 4096));
    for bad in [0, 1, 256, 1000, 8192] {
        let mut odd = exports();
        odd[0].block_size_min_bytes = bad;
        assert_eq!(block_info(&odd, "disk"), (4096, 4096), "min {bad}");
    }
}

#[test]
fn go_on_unknown_export_errors_and_client_may_retry() {
    let mut n = started();
    let (step, replies) = send(&mut n, OPT_GO, &encode_info_request("nope", &[]));
    assert!(matches!(step, Step::Continue { .. }));
    assert_eq!(replies.len(), 1);
    assert_eq!(replies[0].0, REP_ERR_UNKNOWN);
    // Said once to the listener, for its log.
    assert_eq!(n.take_refused_export().as_deref(), Some("nope"));
    assert_eq!(n.take_refused_export(), None);
    let (step, _) = send(&mut n, OPT_GO, &encode_info_request("snap", &[]));
    let Step::Go { agreement, .. } = step else {
        panic!("retry works")
    };
    assert!(agreement.transmission_flags & FLAG_READ_ONLY != 0);
}

#[test]
fn info_does_not_end_negotiation() {
    let mut n = started();
    let (step, replies) = send(
        &mut n,
        OPT_INFO,
        &encode_info_request("snap", &[INFO_DESCRIPTION]),
    );
    assert!(matches!(step, Step::Continue { .. }));
    // Empty description is not sent.
    assert_eq!(
        replies.iter().map(|r| r.0).collect::<Vec<_>>(),
        vec![REP_INFO, REP_INFO, REP_ACK]
    );
}

#[test]
fn export_name_replies_size_and_flags_without_zeroes() {
    let mut n = started();
    let mut input = Vec::new();
    encode_option(OPT_EXPORT_NAME, b"snap", &mut input);
    let mut out = Vec::new();
    let step = n.advance(&input, &exports(), &mut out).expect("go");
    assert!(matches!(step, Step::Go { .. }));
    assert_eq!(out.len(), 10);
    assert_eq!(&out[0..8], &8192u64.to_be_bytes());
}

#[test]
fn export_name_with_zeroes_when_not_negotiated() {
    let mut n = Negotiation::new();
    let mut out = Vec::new();
    n.advance(
        &CLIENT_FLAG_FIXED_NEWSTYLE.to_be_bytes(),
        &exports(),
        &mut out,
    )
    .expect("flags");
    let mut input = Vec::new();
    encode_option(OPT_EXPORT_NAME, b"", &mut input);
    n.advance(&input, &exports(), &mut out).expect("go");
    assert_eq!(out.len(), 8 + 2 + 124);
}

#[test]
fn export_name_unknown_hangs_up() {
    let mut n = started();
    let mut input = Vec::new();
    encode_option(OPT_EXPORT_NAME, b"nope", &mut input);
    let err = n.advance(&input, &exports(), &mut Vec::new());
    assert_eq!(
        err,
        Err(NegotiationError::UnknownExportName { name_len_bytes: 4 })
    );
}

#[test]
fn list_names_every_export_then_acks() {
    let mut n = started();
    let (_, replies) = send(&mut n, OPT_LIST, &[]);
    assert_eq!(replies.len(), 3);
    assert_eq!(replies[0].0, REP_SERVER);
    assert_eq!(&replies[0].1[0..4], &4u32.to_be_bytes());
    assert_eq!(&replies[0].1[4..8], b"disk");
    assert_eq!(&replies[0].1[8..], b"the default");
    assert_eq!(replies[2].0, REP_ACK);
    let (_, replies) = send(&mut n, OPT_LIST, b"x");
    assert_eq!(replies[0].0, REP_ERR_INVALID);
}

#[test]
fn unknown_and_unsupported_options_get_err_unsup() {
    let mut n = started();
    for option in [OPT_STARTTLS, OPT_EXTENDED_HEADERS, 4, 99, u32::MAX] {
        let (step, replies) = send(&mut n, option, b"abc");
        assert!(matches!(step, Step::Continue { .. }));
        assert_eq!(
            replies,
            vec![(REP_ERR_UNSUP, b"option not supported".to_vec())]
        );
    }
}

#[test]
fn abort_acks_and_finishes() {
    let mut n = started();
    let (step, replies) = send(&mut n, OPT_ABORT, &[]);
    assert!(matches!(step, Step::Abort { .. }));
    assert_eq!(replies[0].0, REP_ACK);
    assert_eq!(
        n.advance(&[0], &exports(), &mut Vec::new()),
        Err(NegotiationError::AlreadyFinished)
    );
}

#[test]
fn meta_context_needs_structured_replies_first() {
    let mut n = started();
    let payload = encode_meta_context_request("disk", &["base:allocation"]);
    let (_, replies) = send(&mut n, OPT_SET_META_CONTEXT, &payload);
    assert_eq!(replies[0].0, REP_ERR_INVALID);
}

#[test]
fn set_base_allocation_enables_block_status_for_that_export() {
    let mut n = started();
    let (_, replies) = send(&mut n, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(replies[0].0, REP_ACK);
    let payload = encode_meta_context_request("disk", &["x-other:thing", "base:allocation"]);
    let (_, replies) = send(&mut n, OPT_SET_META_CONTEXT, &payload);
    assert_eq!(replies.len(), 2);
    assert_eq!(replies[0].0, REP_META_CONTEXT);
    assert_eq!(
        &replies[0].1[0..4],
        &BASE_ALLOCATION_CONTEXT_ID.to_be_bytes()
    );
    assert_eq!(&replies[0].1[4..], b"base:allocation");
    let (step, _) = send(&mut n, OPT_GO, &encode_info_request("disk", &[]));
    let Step::Go { agreement, .. } = step else {
        panic!("go")
    };
    assert!(agreement.structured_replies && agreement.base_allocation);
    assert!(agreement.transmission_flags & FLAG_SEND_DF != 0);
}

#[test]
fn meta_context_for_another_export_is_not_used() {
    let mut n = started();
    send(&mut n, OPT_STRUCTURED_REPLY, &[]);
    send(
        &mut n,
        OPT_SET_META_CONTEXT,
        &encode_meta_context_request("snap", &["base:allocation"]),
    );
    let (step, _) = send(&mut n, OPT_GO, &encode_info_request("disk", &[]));
    let Step::Go { agreement, .. } = step else {
        panic!("go")
    };
    assert!(!agreement.base_allocation);
}

#[test]
fn list_meta_context_with_no_query_lists_base_allocation() {
    let mut n = started();
    send(&mut n, OPT_STRUCTURED_REPLY, &[]);
    let (_, replies) = send(
        &mut n,
        OPT_LIST_META_CONTEXT,
        &encode_meta_context_request("", &[]),
    );
    assert_eq!(replies.len(), 2);
    assert_eq!(&replies[0].1[4..], b"base:allocation");
    let (_, replies) = send(
        &mut n,
        OPT_LIST_META_CONTEXT,
        &encode_meta_context_request("x", &[]),
    );
    assert_eq!(replies[0].0, REP_ERR_UNKNOWN);
}

#[test]
fn over_long_option_is_skipped_without_buffering() {
    let mut n = started();
    let mut input = Vec::new();
    input.extend_from_slice(&IHAVEOPT_MAGIC.to_be_bytes());
    input.extend_from_slice(&OPT_GO.to_be_bytes());
    input.extend_from_slice(&(OPTION_PAYLOAD_MAX_BYTES + 10).to_be_bytes());
    let mut out = Vec::new();
    assert_eq!(
        n.advance(&input, &exports(), &mut out),
        Ok(Step::Continue { consumed: 16 })
    );
    let body = vec![0u8; (OPTION_PAYLOAD_MAX_BYTES + 10) as usize];
    let mut fed = 0;
    while out.is_empty() {
        let chunk = &body[fed..(fed + 1000).min(body.len())];
        let Ok(Step::Continue { consumed }) = n.advance(chunk, &exports(), &mut out) else {
            panic!("discarding continues")
        };
        fed += consumed;
    }
    assert_eq!(fed, body.len());
    assert_eq!(split_replies(OPT_GO, &out)[0].0, REP_ERR_TOO_BIG);
    // And the connection goes on.
    let (step, _) = send(&mut n, OPT_GO, &encode_info_request("disk", &[]));
    assert!(matches!(step, Step::Go { .. }));
}

#[test]
fn over_long_export_name_hangs_up() {
    let mut n = started();
    let mut input = Vec::new();
    input.extend_from_slice(&IHAVEOPT_MAGIC.to_be_bytes());
    input.extend_from_slice(&OPT_EXPORT_NAME.to_be_bytes());
    input.extend_from_slice(&u32::MAX.to_be_bytes());
    assert!(n.advance(&input, &exports(), &mut Vec::new()).is_err());
}

#[test]
fn bad_option_magic_hangs_up() {
    let mut n = started();
    let err = n.advance(&[0u8; 16], &exports(), &mut Vec::new());
    assert_eq!(err, Err(NegotiationError::BadOptionMagic { magic: 0 }));
}

#[test]
fn too_many_options_hang_up() {
    let mut n = started();
    let mut input = Vec::new();
    encode_option(OPT_STRUCTURED_REPLY, &[], &mut input);
    for _ in 0..OPTIONS_PER_CONNECTION_MAX {
        n.advance(&input, &exports(), &mut Vec::new())
            .expect("under the limit");
    }
    assert!(n.advance(&input, &exports(), &mut Vec::new()).is_err());
}

#[test]
fn malformed_info_request_gets_err_invalid() {
    let mut n = started();
    // Name length says 10 but only 2 bytes follow.
    let (_, replies) = send(&mut n, OPT_GO, &[0, 0, 0, 10, b'a', b'b']);
    assert_eq!(replies[0].0, REP_ERR_INVALID);
    // Trailing junk after the info list.
    let mut payload = encode_info_request("disk", &[]);
    payload.push(0);
    let (_, replies) = send(&mut n, OPT_GO, &payload);
    assert_eq!(replies[0].0, REP_ERR_INVALID);
}

proptest! {
    #[test]
    fn info_request_round_trips(name in "[a-z0-9/._-]{0,64}", infos in proptest::collection::vec(any::<u16>(), 0..8)) {
        let bytes = encode_info_request(&name, &infos);
        let parsed = parse_info_request(&bytes).expect("valid");
        prop_assert_eq!(parsed.name, name.as_bytes());
        prop_assert_eq!(parsed.info_types, infos);
    }

    #[test]
    fn meta_context_request_round_trips(name in "[a-z]{0,16}", queries in proptest::collection::vec("[a-z:]{0,20}", 0..6)) {
        let qs: Vec<&str> = queries.iter().map(String::as_str).collect();
        let bytes = encode_meta_context_request(&name, &qs);
        let parsed = parse_meta_context_request(&bytes).expect("valid");
        prop_assert_eq!(parsed.name, name.as_bytes());
        prop_assert_eq!(parsed.queries, qs.iter().map(|q| q.as_bytes()).collect::<Vec<_>>());
    }

    #[test]
    fn option_header_round_trips(option in any::<u32>(), payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut bytes = Vec::new();
        encode_option(option, &payload, &mut bytes);
        prop_assert_eq!(
            parse_option_header(&bytes),
            Parse::Complete(OptionHeader { option, length_bytes: payload.len() as u32 }, 16)
        );
    }

    /// Arbitrary client bytes, split anywhere, never panic and never consume past the input.
    #[test]
    fn arbitrary_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        crate::fuzzing::fuzz_negotiation(&data);
    }
}

/// A negotiation with `tls`, past the client flags.
fn started_with(tls: TlsMode) -> Negotiation {
    let mut n = Negotiation::with_tls(tls);
    let mut out = Vec::new();
    let flags = (CLIENT_FLAG_FIXED_NEWSTYLE | CLIENT_FLAG_NO_ZEROES).to_be_bytes();
    n.advance(&flags, &exports(), &mut out).expect("flags");
    n
}

#[test]
fn starttls_is_acked_and_the_clear_text_agreement_is_forgotten() {
    let mut n = started_with(TlsMode::Optional);
    let (_, replies) = send(&mut n, OPT_STRUCTURED_REPLY, &[]);
    assert_eq!(replies, [(REP_ACK, vec![])]);
    let (step, replies) = send(&mut n, OPT_STARTTLS, &[]);
    assert_eq!(step, Step::StartTls { consumed: 16 });
    assert_eq!(replies, [(REP_ACK, vec![])]);
    n.tls_started();
    assert!(n.tls_active());
    // Structured replies negotiated in clear no longer hold.
    let payload = encode_info_request("disk", &[]);
    let (step, _) = send(&mut n, OPT_GO, &payload);
    let Step::Go { agreement, .. } = step else {
        panic!("{step:?}")
    };
    assert!(!agreement.structured_replies);
}

#[test]
fn starttls_twice_or_with_data_is_invalid_and_off_is_unsupported() {
    let mut n = started_with(TlsMode::Optional);
    let (_, replies) = send(&mut n, OPT_STARTTLS, b"x");
    assert_eq!(replies[0].0, REP_ERR_INVALID);
    send(&mut n, OPT_STARTTLS, &[]);
    n.tls_started();
    let (_, replies) = send(&mut n, OPT_STARTTLS, &[]);
    assert_eq!(replies[0].0, REP_ERR_INVALID);
    let mut off = started_with(TlsMode::Off);
    let (_, replies) = send(&mut off, OPT_STARTTLS, &[]);
    assert_eq!(replies[0].0, REP_ERR_UNSUP);
}

#[test]
fn required_tls_refuses_every_option_until_starttls() {
    let mut n = started_with(TlsMode::Required);
    for option in [OPT_LIST, OPT_STRUCTURED_REPLY, OPT_INFO, OPT_GO, 99] {
        let (step, replies) = send(&mut n, option, &[]);
        assert_eq!(step, Step::Continue { consumed: 16 });
        assert_eq!(replies[0].0, REP_ERR_TLS_REQD, "option {option}");
    }
    // EXPORT_NAME has no error reply: hang up.
    let mut input = Vec::new();
    encode_option(OPT_EXPORT_NAME, b"disk", &mut input);
    assert_eq!(
        n.advance(&input, &exports(), &mut Vec::new()),
        Err(NegotiationError::TlsRequired)
    );
    // After TLS, the same options work.
    let mut n = started_with(TlsMode::Required);
    send(&mut n, OPT_STARTTLS, &[]);
    n.tls_started();
    let (_, replies) = send(&mut n, OPT_LIST, &[]);
    assert_eq!(replies.last().unwrap().0, REP_ACK);
    // ABORT is allowed in clear.
    let mut n = started_with(TlsMode::Required);
    let (step, _) = send(&mut n, OPT_ABORT, &[]);
    assert_eq!(step, Step::Abort { consumed: 16 });
}
