//! Encode and reconstruct throughput of the Reed-Solomon codec over 8 MiB stripes, one line per
//! layout, to quote parity CPU per GiB of data. Single-threaded. Times include the copies and
//! allocations the API makes (chunks are returned as fresh `Vec`s), as a c.node pays them.
//!
//! Every layout is run once untimed first: glibc's malloc adapts its mmap and trim thresholds
//! to the first multi-MiB buffers freed, and until then every fresh chunk is faulted in again
//! (the first layout measured would look several times slower). The figures are for a process
//! in that steady state.
//!
//! Run: `cargo run --release -p weft-ec --example ec_speed`

use std::hint::black_box;
use std::time::{Duration, Instant};

use weft_ec::{encode, reconstruct, Redundancy, StripeGeometry};

/// A sealed segment is 8 MiB.
const STRIPE_DATA_BYTES: usize = 8 << 20;
/// The layouts to quote: small clusters (4+2), mid (8+2), the wide default (21+3).
const LAYOUTS: [(u8, u8); 3] = [(4, 2), (8, 2), (21, 3)];
/// Long enough per measurement for a stable figure, short enough for the whole run to stay
/// around ten seconds.
const MEASURE_MIN_DURATION: Duration = Duration::from_millis(1500);
/// Chunks lost before each reconstruct: data chunks 0 and 1 (the costly case: data is decoded,
/// not just parity recomputed).
const LOST_CHUNKS: usize = 2;
const GIB_BYTES: f64 = (1u64 << 30) as f64;

fn main() {
    let data = pattern(STRIPE_DATA_BYTES);
    for (k, m) in LAYOUTS {
        run_layout(k, m, &data, Duration::ZERO);
    }
    println!(
        "weft-ec ec_speed: {} MiB stripes, 1 thread, GiB/s of stripe data (CPU ms per GiB)",
        STRIPE_DATA_BYTES >> 20
    );
    for (k, m) in LAYOUTS {
        let (encode_secs, reconstruct_secs) = run_layout(k, m, &data, MEASURE_MIN_DURATION);
        let geometry = geometry(k, m);
        println!(
            "{:>5} chunk {:>7} B: encode {}, reconstruct {LOST_CHUNKS} lost {}",
            geometry.redundancy(),
            geometry.chunk_len_bytes(),
            report(encode_secs),
            report(reconstruct_secs),
        );
    }
}

/// Seconds per stripe to encode, and to reconstruct after losing `LOST_CHUNKS` data chunks.
fn run_layout(k: u8, m: u8, data: &[u8], duration: Duration) -> (f64, f64) {
    let geometry = geometry(k, m);
    let encode_secs = measure(duration, || {
        black_box(encode(&geometry, black_box(data)).expect("fits"));
    });
    let chunks = encode(&geometry, data).expect("fits");
    let mut slots: Vec<Option<Vec<u8>>> = chunks.iter().cloned().map(Some).collect();
    let reconstruct_secs = measure(duration, || {
        for slot in &mut slots[..LOST_CHUNKS] {
            *slot = None;
        }
        reconstruct(&geometry, black_box(&mut slots)).expect("enough chunks");
    });
    assert_eq!(
        slots[0].as_deref(),
        Some(&chunks[0][..]),
        "reconstruct is wrong"
    );
    (encode_secs, reconstruct_secs)
}

fn geometry(k: u8, m: u8) -> StripeGeometry {
    let redundancy = Redundancy::erasure(k, m).expect("valid layout");
    StripeGeometry::for_len(redundancy, STRIPE_DATA_BYTES as u64).expect("within limits")
}

/// Seconds per call of `run`: one call, then as many as fit in `duration`.
fn measure(duration: Duration, mut run: impl FnMut()) -> f64 {
    let start = Instant::now();
    run();
    let mut calls = 1u32;
    while start.elapsed() < duration {
        run();
        calls += 1;
    }
    start.elapsed().as_secs_f64() / f64::from(calls)
}

fn report(secs_per_stripe: f64) -> String {
    let gib_per_s = STRIPE_DATA_BYTES as f64 / GIB_BYTES / secs_per_stripe;
    format!("{gib_per_s:6.2} GiB/s ({:6.1} ms/GiB)", 1000.0 / gib_per_s)
}

/// Incompressible-looking bytes (xorshift), so nothing is faster for being regular.
fn pattern(len: usize) -> Vec<u8> {
    let mut state = 0x9E37_79B9_7F4A_7C15_u64;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state.to_le_bytes()[0]
        })
        .collect()
}
