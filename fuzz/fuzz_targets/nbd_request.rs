//! Transmission-phase request framing, validation and reply encoding over arbitrary bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_nbd::fuzzing::fuzz_requests(data);
});
