//! Data reduction as reported by `weft stats --json`, against a workload whose zero, duplicate
//! and compressible fractions are known from fio's parameters.
//!
//! Three 32 MiB regions of one fresh volume, written by fio's nbd engine (no verify headers,
//! which would make every block unique):
//! - zero: `--zero_buffers`: 8192 blocks of zeroes, all zero-eliminated, none stored.
//! - dedup: `--dedupe_percentage=50 --refill_buffers`, bs=4k: each 4 KiB buffer is, with
//!   probability 1/2, a repeat of the previous unique buffer, else fresh random bytes. Unique
//!   blocks ≈ 4096 (binomial, sd ≈ 45 blocks = 0.5 %), incompressible.
//! - compressible: `--buffer_compress_percentage=50 --buffer_compress_chunk=4096
//!   --refill_buffers`: every 4 KiB chunk is 2048 random bytes followed by 2048 zero bytes. LZ4
//!   stores the random half as literals and the zero half as one match, so a block compresses
//!   to ≈ 2048 + ~25 bytes, i.e. the ideal 2:1 within about 1 %. (A "50 % compressible" buffer
//!   with random interleaving would not be predictable; this one is.)
//!
//! Ideal: logical 96 MiB; zero 32 MiB; dedup saves 16 MiB (8192 dup blocks of 16384 non-zero);
//! unique 12288 blocks = 48 MiB, stored 16 MiB (dedup uniques) + 16 MiB (half of compressible)
//! = 32 MiB, so compression saves 16 MiB and the ratio is 96 / 32 = 3.0.

mod common;

use std::time::Duration;

use common::*;
use serde_json::Value;

const REGION: u64 = 32 * MIB;

fn num(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("stats lack {}: {v}", path.join(".")))
}

fn within(actual: f64, ideal: f64, tol: f64) -> bool {
    (actual - ideal).abs() <= tol * ideal.abs()
}

#[test]
fn reduction_ratio_matches_known_workload() {
    require_tool("fio");
    let srv = Server::start_with("reduction", ServeOpts::default().volume_size("256M"));
    if srv.skip_without_api("reduction_ratio_matches_known_workload") {
        return;
    }
    let (_, seed) = test_rng("reduction_ratio_matches_known_workload");
    let fio_seed = seed % 1_000_000_007;
    let out = fio(
        srv.scratch.path(),
        &srv.nbd_uri("vol0"),
        &[
            "--rw=write".into(),
            "--iodepth=8".into(),
            format!("--randseed={fio_seed}"),
            // zero region
            "--name=zero".into(),
            "--offset=0".into(),
            "--size=32M".into(),
            "--bs=64k".into(),
            "--zero_buffers".into(),
            // duplicate region
            "--name=dedup".into(),
            "--offset=32M".into(),
            "--size=32M".into(),
            "--bs=4k".into(),
            "--dedupe_percentage=50".into(),
            "--refill_buffers".into(),
            // compressible region
            "--name=compress".into(),
            "--offset=64M".into(),
            "--size=32M".into(),
            "--bs=64k".into(),
            "--buffer_compress_percentage=50".into(),
            "--buffer_compress_chunk=4096".into(),
            "--refill_buffers".into(),
        ],
        Duration::from_secs(300),
    );
    assert_fio_ok(&out, "reduction workload");
    srv.cli_ok(&["sync"]);
    let stats = srv.cli_json(&["stats", "--json"]);
    eprintln!("stats after the workload: {stats:#}");
    let r = &stats["reduction"];
    let logical = num(r, &["logical_bytes"]);
    let zero = num(r, &["zero_bytes"]);
    let dedup = num(r, &["dedup_saved_bytes"]);
    let comp = num(r, &["compression_saved_bytes"]);
    let stored = num(r, &["stored_bytes"]);
    let ratio = num(r, &["ratio"]);
    let mib = MIB as f64;

    let mut failures = Vec::new();
    let mut check = |ok: bool, msg: String| {
        if !ok {
            failures.push(msg);
        }
    };
    check(
        logical == (3 * REGION) as f64,
        format!("logical_bytes {logical} != 96 MiB ({})", 3 * REGION),
    );
    check(
        zero == REGION as f64,
        format!("zero_bytes {zero} != 32 MiB ({REGION})"),
    );
    check(
        within(dedup, 16.0 * mib, 0.10),
        format!(
            "dedup_saved_bytes {:.2} MiB not within 10% of 16 MiB",
            dedup / mib
        ),
    );
    check(
        within(comp, 16.0 * mib, 0.10),
        format!(
            "compression_saved_bytes {:.2} MiB not within 10% of 16 MiB",
            comp / mib
        ),
    );
    check(
        within(stored, 32.0 * mib, 0.10),
        format!(
            "stored_bytes {:.2} MiB not within 10% of 32 MiB",
            stored / mib
        ),
    );
    check(
        within(ratio, 3.0, 0.10),
        format!("ratio {ratio:.3} not within 10% of the ideal 3.0"),
    );
    if stored > 0.0 {
        check(
            within(ratio, logical / stored, 0.01),
            format!("ratio {ratio} != logical/stored {}", logical / stored),
        );
    }
    // The identities of the definitions: non-zero logical = dedup saved + unique; unique = comp saved + stored.
    check(
        within(logical - zero - dedup - comp, stored, 0.001),
        format!(
            "logical - zero - dedup_saved - compression_saved = {} != stored {stored}",
            logical - zero - dedup - comp
        ),
    );
    assert!(
        stats["write_amplification"].as_f64().is_some(),
        "write_amplification missing: {stats}"
    );
    let vol = srv.cli_json(&["volume", "info", "vol0", "--json"]);
    check(
        vol["mapped_bytes"].as_u64() == Some(3 * REGION),
        format!("vol0 mapped_bytes: {vol}"),
    );
    check(
        vol["zero_bytes"].as_u64() == Some(REGION),
        format!("vol0 zero_bytes: {vol}"),
    );
    assert!(
        failures.is_empty(),
        "data reduction off the known workload:\n{}\nstats: {stats:#}",
        failures.join("\n")
    );

    // Trimmed blocks leave logical and zero counts; written zeroes (above) stay in them.
    let mut c = srv.nbd_client("vol0");
    c.trim(0, (16 * MIB) as u32).unwrap();
    c.flush().unwrap();
    c.disconnect();
    srv.cli_ok(&["sync"]);
    let stats2 = srv.cli_json(&["stats", "--json"]);
    let r2 = &stats2["reduction"];
    assert_eq!(
        num(r2, &["logical_bytes"]),
        (3 * REGION - 16 * MIB) as f64,
        "logical after trimming 16 MiB of zeroes: {stats2:#}"
    );
    assert_eq!(
        num(r2, &["zero_bytes"]),
        (REGION - 16 * MIB) as f64,
        "zero_bytes after trimming 16 MiB of zeroes: {stats2:#}"
    );
    assert_eq!(
        num(r2, &["stored_bytes"]),
        stored,
        "trimming zero blocks must not change stored bytes"
    );
}
