//! A full chunk store (`weft serve --capacity 64M`) with a much larger thin volume: writers get
//! ENOSPC, already written data stays readable, the server stays up (also across kill -9), and
//! deleting a volume + GC gives the space back.

mod common;

use std::time::Duration;

use common::*;

#[test]
fn enospc_when_full_reads_still_work_and_gc_frees_space() {
    require_tool("fio");
    let mut srv = Server::start_with(
        "diskfull",
        ServeOpts::default()
            .volume_size("256M")
            .arg("--capacity")
            .arg("64M"),
    );
    if srv.skip_without_api("enospc_when_full_reads_still_work_and_gc_frees_space") {
        return;
    }
    let (mut rng, seed) = test_rng("enospc_when_full_reads_still_work_and_gc_frees_space");

    // 8 MiB of incompressible data that must stay readable throughout.
    let keep = random_bytes(&mut rng, (8 * MIB) as usize);
    let mut c = srv.nbd_client("vol0");
    c.write(0, &keep).unwrap();
    c.flush().unwrap();
    c.disconnect();

    // Fill: 512 MiB of random, unique data into a 1 GiB volume: 8x the capacity.
    srv.cli_ok(&["volume", "create", "fill", "--size", "1G"]);
    let out = fio(
        srv.scratch.path(),
        &srv.nbd_uri("fill"),
        &[
            "--name=fill".into(),
            "--rw=write".into(),
            "--bs=1M".into(),
            "--size=512M".into(),
            "--iodepth=4".into(),
            "--refill_buffers".into(),
            format!("--randseed={}", seed % 1_000_000_007),
        ],
        Duration::from_secs(600),
    );
    let all = out.all();
    eprintln!(
        "fill run: {}\n{}",
        out.describe(),
        all.lines()
            .filter(|l| l.contains("err") || l.contains("WRITE"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        !out.timed_out,
        "fill run hung (server should answer ENOSPC, not block forever):\n{all}"
    );
    assert!(
        all.contains("No space left on device"),
        "writing 512 MiB with --capacity 64M should fail with ENOSPC; fio said ({}):\n{all}",
        out.describe()
    );
    assert!(
        srv.is_alive(),
        "server died when the store filled up:\n{}",
        srv.server_output()
    );

    // fio may have been refused while its writes were still buffered (admission counts them
    // against the free space); once they are destaged there can be room again. Keep writing
    // new unique data until the store is really full: our own client must then get ENOSPC.
    let mut c = srv.nbd_client("vol0");
    let mut refused = false;
    for i in 0..32u64 {
        let fresh = random_bytes(&mut rng, (4 * MIB) as usize);
        match c
            .write((32 + 4 * (i % 48)) * MIB, &fresh)
            .and_then(|_| c.flush())
        {
            Err(NbdError::Server(28)) => {
                refused = true;
                break;
            }
            Ok(_) => {}
            other => panic!("a write to a nearly full store failed oddly: {other:?}"),
        }
    }
    assert!(
        refused,
        "128 MiB of unique writes into a 64 MiB store were never refused with ENOSPC"
    );
    // ...while reads keep working.
    assert!(
        c.read(0, keep.len() as u32).unwrap() == keep,
        "data written before the store filled is not readable"
    );
    c.disconnect();
    assert!(srv.is_alive(), "server died after ENOSPC");
    let stats = srv.stats();
    let (used, cap) = (
        stats["used_bytes"].as_u64(),
        stats["capacity_bytes"].as_u64(),
    );
    assert_eq!(cap, Some(64 * MIB), "capacity_bytes: {stats}");
    assert!(
        used.unwrap_or(u64::MAX) <= 64 * MIB,
        "used_bytes {used:?} exceeds capacity: {stats}"
    );
    let ni = nbdinfo_json(&srv.nbd_uri("vol0"));
    assert_eq!(ni["exports"][0]["export-size"].as_u64(), Some(256 * MIB));

    // A full store survives kill -9 + restart, and the data is still there.
    srv.kill9_and_restart();
    let mut c = srv.nbd_client("vol0");
    assert!(
        c.read(0, keep.len() as u32).unwrap() == keep,
        "kept data after restart on a full store"
    );
    c.disconnect();

    // Deleting the filler and running GC frees space: new writes succeed again.
    srv.cli_ok(&["volume", "delete", "fill", "--yes"]);
    let report = srv.cli_ok(&["gc"]);
    eprintln!("gc report: {report}");
    srv.cli_ok(&["sync"]);
    let after = srv.stats();
    eprintln!("stats after delete + gc: {after:#}");
    let mut c = srv.nbd_client("vol0");
    let fresh = random_bytes(&mut rng, (4 * MIB) as usize);
    c.write(32 * MIB, &fresh).unwrap_or_else(|e| {
        panic!("write after delete + gc should succeed: {e}\nstats: {after:#}")
    });
    c.flush().unwrap();
    assert!(c.read(32 * MIB, fresh.len() as u32).unwrap() == fresh);
    assert!(c.read(0, keep.len() as u32).unwrap() == keep);
    c.disconnect();
}
