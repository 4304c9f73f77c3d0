//! iSCSI PDU framing (digests chosen by the first byte) and decoding of every PDU, as an
//! initiator PDU and as a target PDU, with a re-encode round trip.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_iscsi::fuzzing::fuzz_pdu(data);
});
