//! Cost of reducing one 4 KiB block (zero check, BLAKE3, lz4), random and compressible:
//! `cargo run --release -p weft-engine --example reduce_cost`.

use std::time::Instant;

fn main() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect();
    let mut half = random.clone();
    half[2048..].fill(0);
    let n = 50_000u32;
    for (name, block) in [("random", &random), ("half zero", &half)] {
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(weft_engine::reduce::fingerprint(block));
        }
        let hash = t.elapsed() / n;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(lz4_flex::block::compress(block));
        }
        let lz4 = t.elapsed() / n;
        let t = Instant::now();
        for _ in 0..n {
            std::hint::black_box(weft_engine::reduce::reduce(block));
        }
        let all = t.elapsed() / n;
        println!("{name:>10}: blake3 {hash:?}  lz4 {lz4:?}  reduce {all:?} per block");
    }
}
