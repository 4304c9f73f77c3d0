//! Replays the fuzz seeds and every file under `fuzz/corpus/iscsi_*` on the stable
//! toolchain, and runs the fuzz entry points on random bytes.

use proptest::prelude::*;
use weft_iscsi::fuzzing::{fuzz_login, fuzz_pdu, seed_corpus, LOGIN_TARGET, PDU_TARGET};

fn run(target: &str, data: &[u8]) {
    if target == PDU_TARGET {
        fuzz_pdu(data);
    } else {
        fuzz_login(data);
    }
}

#[test]
fn seeds_and_the_checked_in_corpus_replay_clean() {
    for (target, seed) in seed_corpus() {
        run(target, &seed);
    }
    for target in [PDU_TARGET, LOGIN_TARGET] {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../fuzz/corpus")
            .join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            run(target, &std::fs::read(&path).unwrap());
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]
    #[test]
    fn random_bytes_never_panic_the_pdu_parser(data in proptest::collection::vec(any::<u8>(), 0..600)) {
        fuzz_pdu(&data);
    }

    #[test]
    fn mutated_logins_never_panic(seed in 0usize..3, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        let seeds: Vec<Vec<u8>> = seed_corpus().into_iter().filter(|(t, _)| *t == LOGIN_TARGET).map(|(_, s)| s).collect();
        let mut data = seeds[seed % seeds.len()].clone();
        for (at, byte) in flips {
            let i = at % data.len();
            data[i] ^= byte;
        }
        fuzz_login(&data);
    }
}
