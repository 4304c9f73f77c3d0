//! Replays every file under `fuzz/corpus/<target>/` through the fuzz entry points, so the
//! cargo-fuzz targets are covered by a plain `cargo test` on stable.

use std::path::PathBuf;

use weft_nbd::fuzzing::{fuzz_negotiation, fuzz_requests, NEGOTIATION_TARGET, REQUEST_TARGET};

fn replay(target: &str, run: fn(&[u8])) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let mut replayed = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            if path.is_file() {
                run(&std::fs::read(&path).expect("read corpus file"));
                replayed += 1;
            }
        }
    }
    // The seeds are in-tree too; replay them even before the unit test writes the files.
    for (_, bytes) in weft_nbd::fuzzing::seed_corpus(target) {
        run(&bytes);
    }
    eprintln!(
        "replayed {replayed} corpus files for {target} from {}",
        dir.display()
    );
}

#[test]
fn negotiation_corpus_replays_clean() {
    replay(NEGOTIATION_TARGET, fuzz_negotiation);
}

#[test]
fn request_corpus_replays_clean() {
    replay(REQUEST_TARGET, fuzz_requests);
}
