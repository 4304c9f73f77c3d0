//! The iSCSI login phase (CHAP included) over arbitrary Login Request PDUs.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_iscsi::fuzzing::fuzz_login(data);
});
