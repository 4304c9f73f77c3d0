//! SCSI CDB decode and execution over an in-memory LU (shape chosen by the first byte).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    weft_scsi::fuzzing::fuzz_cdb(data);
});
