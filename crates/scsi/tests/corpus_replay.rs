//! Replays the in-tree seeds and every file under `fuzz/corpus/scsi_cdb/` through the fuzz
//! entry point, so the cargo-fuzz target is covered by a plain `cargo test` on stable.

use std::path::PathBuf;

use weft_scsi::fuzzing::{fuzz_cdb, seed_corpus, CDB_TARGET};

#[test]
fn cdb_corpus_replays_clean() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(CDB_TARGET);
    let mut replayed = 0;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            if path.is_file() {
                fuzz_cdb(&std::fs::read(&path).expect("read corpus file"));
                replayed += 1;
            }
        }
    }
    let seeds = seed_corpus();
    assert!(!seeds.is_empty());
    for bytes in &seeds {
        fuzz_cdb(bytes);
    }
    eprintln!(
        "replayed {replayed} corpus files and {} seeds for {CDB_TARGET} from {}",
        seeds.len(),
        dir.display()
    );
}
