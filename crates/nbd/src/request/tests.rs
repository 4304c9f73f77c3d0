use proptest::prelude::*;

use super::*;
use crate::wire::{CMD_CACHE, CMD_FLAG_DF};

fn session() -> Session {
    Session {
        size_bytes: 1 << 20,
        block_size_min_bytes: 4096,
        read_only: false,
        structured_replies: true,
        base_allocation: true,
    }
}

fn header(command: u16, flags: u16, offset_bytes: u64, length_bytes: u32) -> RequestHeader {
    RequestHeader {
        flags,
        command,
        handle: 42,
        offset_bytes,
        length_bytes,
    }
}

#[test]
fn parses_header_and_reports_consumed_bytes() {
    let h = header(CMD_WRITE, CMD_FLAG_FUA, 4096, 8192);
    let mut bytes = h.encode().to_vec();
    bytes.extend_from_slice(&[0u8; 8192]);
    assert_eq!(parse_request_header(&bytes), Parse::Complete(h, 28));
    assert_eq!(h.payload_len_bytes(), 8192);
    assert_eq!(parse_request_header(&bytes[..27]), Parse::Incomplete);
}

#[test]
fn bad_magic_is_invalid() {
    assert_eq!(
        parse_request_header(&[0xde, 0xad, 0xbe, 0xef]),
        Parse::Invalid(RequestError::BadMagic { magic: 0xdead_beef })
    );
}

#[test]
fn write_over_payload_limit_is_invalid_but_read_is_only_einval() {
    let w = header(CMD_WRITE, 0, 0, PAYLOAD_MAX_BYTES + 4096);
    assert!(matches!(
        parse_request_header(&w.encode()),
        Parse::Invalid(RequestError::PayloadTooLarge { .. })
    ));
    let r = header(CMD_READ, 0, 0, PAYLOAD_MAX_BYTES + 4096);
    assert!(matches!(
        parse_request_header(&r.encode()),
        Parse::Complete(..)
    ));
    let big = Session {
        size_bytes: 1 << 40,
        ..session()
    };
    assert_eq!(big.classify(&r), Err(Errno::Invalid));
}

#[test]
fn misaligned_or_out_of_range_requests_are_einval() {
    let s = session();
    for (offset, len) in [
        (1, 4096),
        (0, 512),
        (0, 0),
        (1 << 20, 4096),
        ((1 << 20) - 4096, 8192),
        (u64::MAX - 4095, 4096),
    ] {
        for cmd in [
            CMD_READ,
            CMD_WRITE,
            CMD_TRIM,
            CMD_WRITE_ZEROES,
            CMD_BLOCK_STATUS,
        ] {
            assert_eq!(
                s.classify(&header(cmd, 0, offset, len)),
                Err(Errno::Invalid),
                "cmd {cmd} at {offset}+{len}"
            );
        }
    }
    assert!(s
        .classify(&header(CMD_READ, 0, (1 << 20) - 4096, 4096))
        .is_ok());
}

#[test]
fn a_512_export_takes_sectors_and_refuses_anything_finer() {
    let s = Session {
        block_size_min_bytes: 512,
        ..session()
    };
    for cmd in [
        CMD_READ,
        CMD_WRITE,
        CMD_TRIM,
        CMD_WRITE_ZEROES,
        CMD_BLOCK_STATUS,
    ] {
        for (offset, len) in [(512, 512), (3 * 512, 5 * 512), ((1 << 20) - 512, 512)] {
            assert!(
                s.classify(&header(cmd, 0, offset, len)).is_ok(),
                "cmd {cmd} at {offset}+{len}"
            );
        }
        for (offset, len) in [
            (1, 512),
            (0, 100),
            (256, 512),
            (0, 0),
            ((1 << 20) - 512, 1024),
        ] {
            assert_eq!(
                s.classify(&header(cmd, 0, offset, len)),
                Err(Errno::Invalid),
                "cmd {cmd} at {offset}+{len}"
            );
        }
    }
    // A broken minimum is served as the preferred size, never finer than a sector.
    for odd in [0, 1, 3, 256] {
        let s = Session {
            block_size_min_bytes: odd,
            ..session()
        };
        let ok = s.classify(&header(CMD_READ, 0, 512, 512)).is_ok();
        assert_eq!(ok, odd == 1 || odd == 256, "min {odd}");
        assert_eq!(
            s.classify(&header(CMD_READ, 0, 256, 256)),
            Err(Errno::Invalid)
        );
    }
}

#[test]
fn writes_to_read_only_export_are_eperm_reads_are_fine() {
    let s = Session {
        read_only: true,
        ..session()
    };
    for cmd in [CMD_WRITE, CMD_TRIM, CMD_WRITE_ZEROES] {
        assert_eq!(
            s.classify(&header(cmd, 0, 0, 4096)),
            Err(Errno::NotPermitted)
        );
    }
    assert!(s.classify(&header(CMD_READ, 0, 0, 4096)).is_ok());
    assert_eq!(s.classify(&header(CMD_FLUSH, 0, 0, 0)), Ok(Command::Flush));
}

#[test]
fn write_zeroes_honours_no_hole_and_rejects_fast_zero() {
    let s = session();
    assert_eq!(
        s.classify(&header(
            CMD_WRITE_ZEROES,
            CMD_FLAG_NO_HOLE | CMD_FLAG_FUA,
            0,
            4096
        )),
        Ok(Command::WriteZeroes {
            offset_bytes: 0,
            length_bytes: 4096,
            may_trim: false,
            fua: true
        })
    );
    assert_eq!(
        s.classify(&header(CMD_WRITE_ZEROES, 0, 0, 4096)),
        Ok(Command::WriteZeroes {
            offset_bytes: 0,
            length_bytes: 4096,
            may_trim: true,
            fua: false
        })
    );
    assert_eq!(
        s.classify(&header(CMD_WRITE_ZEROES, CMD_FLAG_FAST_ZERO, 0, 4096)),
        Err(Errno::NotSupported)
    );
}

#[test]
fn block_status_needs_negotiated_context() {
    let without = Session {
        base_allocation: false,
        ..session()
    };
    assert_eq!(
        without.classify(&header(CMD_BLOCK_STATUS, 0, 0, 4096)),
        Err(Errno::Invalid)
    );
    assert_eq!(
        session().classify(&header(CMD_BLOCK_STATUS, CMD_FLAG_REQ_ONE, 0, 4096)),
        Ok(Command::BlockStatus {
            offset_bytes: 0,
            length_bytes: 4096,
            req_one: true
        })
    );
}

#[test]
fn unknown_commands_are_einval_and_df_reads_are_plain_reads() {
    let s = session();
    assert_eq!(
        s.classify(&header(CMD_CACHE, 0, 0, 4096)),
        Err(Errno::Invalid)
    );
    assert_eq!(s.classify(&header(999, 0, 0, 4096)), Err(Errno::Invalid));
    assert_eq!(
        s.classify(&header(CMD_READ, CMD_FLAG_DF, 0, 4096)),
        Ok(Command::Read {
            offset_bytes: 0,
            length_bytes: 4096
        })
    );
    assert_eq!(
        s.classify(&header(CMD_DISC, 0, 0, 0)),
        Ok(Command::Disconnect)
    );
}

proptest! {
    #[test]
    fn request_header_round_trips(flags in any::<u16>(), command in any::<u16>(), handle in any::<u64>(), offset in any::<u64>(), length in 0..=PAYLOAD_MAX_BYTES) {
        let h = RequestHeader { flags, command, handle, offset_bytes: offset, length_bytes: length };
        prop_assert_eq!(parse_request_header(&h.encode()), Parse::Complete(h, REQUEST_HEADER_LEN_BYTES));
    }

    /// Whatever a classified range is, it lies inside the export and is aligned.
    #[test]
    fn classified_ranges_are_inside_and_aligned(command in 0u16..9, flags in any::<u16>(), offset in any::<u64>(), length in any::<u32>()) {
        let s = session();
        if let Ok(cmd) = s.classify(&RequestHeader { flags, command, handle: 0, offset_bytes: offset, length_bytes: length }) {
            let range = match cmd {
                Command::Read { offset_bytes, length_bytes }
                | Command::Write { offset_bytes, length_bytes, .. }
                | Command::Trim { offset_bytes, length_bytes, .. }
                | Command::WriteZeroes { offset_bytes, length_bytes, .. }
                | Command::BlockStatus { offset_bytes, length_bytes, .. } => Some((offset_bytes, length_bytes)),
                Command::Flush | Command::Disconnect => None,
            };
            if let Some((o, l)) = range {
                prop_assert!(o % 4096 == 0 && l % 4096 == 0 && l > 0);
                prop_assert!(o + u64::from(l) <= s.size_bytes);
            }
        }
    }

    #[test]
    fn arbitrary_request_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
        crate::fuzzing::fuzz_requests(&data);
    }
}
