//! Option haggling over arbitrary client bytes, then the request parser on what follows Go.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_nbd::fuzzing::fuzz_negotiation(data);
});
