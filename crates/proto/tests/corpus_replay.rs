//! Replays every file under `fuzz/corpus/proto_frame/` through the fuzz entry point, so the
//! cargo-fuzz target is covered by a plain `cargo test` on stable. Reads files, nothing else.

use std::path::PathBuf;

use weft_proto::fuzzing::{fuzz_frames, seed_corpus, FRAME_TARGET};

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
    for (_, bytes) in seed_corpus(target) {
        run(&bytes);
    }
    eprintln!(
        "replayed {replayed} corpus files for {target} from {}",
        dir.display()
    );
}

#[test]
fn frame_corpus_replays_clean() {
    replay(FRAME_TARGET, fuzz_frames);
}
