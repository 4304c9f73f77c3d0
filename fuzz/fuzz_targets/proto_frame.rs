//! c.node <-> d.node frames over arbitrary bytes: both decoders (whole slice and fed in pieces),
//! then every complete frame decoded as a request and as a response, re-encoded and re-decoded.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_proto::fuzzing::fuzz_frames(data);
});
