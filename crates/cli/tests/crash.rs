//! kill -9 of `weft serve` at random points, restart on the same data dir and ports, and check
//! that every acknowledged write survived.
//!
//! Contract: a write is acknowledged once it is in the journal handed to the OS, so a kill -9 of
//! the process (the OS and its page cache survive) must lose no acknowledged write, flushed or
//! not. Flushes only matter for power loss, which these tests do not simulate.

mod common;

use std::fs;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use rand::Rng;

const ROUNDS: usize = 3;

// ------------------------------------------------------------------------------------------
// fio with --verify_state_save / --verify_state_load
// ------------------------------------------------------------------------------------------
//
// How fio 3.33's verify state works, and why the job looks like this:
// - With verify_state_save=1 (the default) fio writes `local-<job>-<n>-verify.state` in its cwd
//   when a job ends, also when it ends on an I/O error, as it does when the server dies: the
//   nbd engine fails the in-flight requests with ENOTCONN and the job stops.
// - The state holds the number of writes issued and the offsets of the last `iodepth` writes
//   that completed. `--verify_only --verify_state_load=1` replays the same job (same seed),
//   skips the writes, and verifies the blocks in issue order: everything older than the last
//   `iodepth` issued writes unconditionally, the last `iodepth` only if they completed.
// - That assumes a write older than the last `iodepth` issued ones has completed. With
//   iodepth > 1 a server may complete out of order (nbdkit did: a write issued 446 writes before
//   the crash was still in flight), and the verify pass then reports a false loss. With
//   iodepth=1 the rule is exact, so each job runs at iodepth 1 and concurrency comes from
//   numjobs (one NBD connection each, on disjoint ranges).
// - When the server dies with iodepth > 1 and a rate limit or thinktime, fio 3.33 can spin
//   forever printing "nbd_poll: nothing to poll for in state DEAD": avoid those options, and
//   every fio run has a time limit and bounded output capture.

const JOBS: usize = 4;

/// `bs`: fio's block size option, e.g. `--bs=4k`, or `--bsrange=4k-1m` to mix journaled
/// writes with large ones that are written through to a stripe.
fn fio_crash_job(seed: u64, bs: &str) -> Vec<String> {
    vec![
        "--name=crash".into(),
        "--rw=randwrite".into(),
        bs.into(),
        // 4 x 256 MiB: more than a few seconds of writes, so the kill lands mid-run.
        "--size=256M".into(),
        "--offset_increment=256M".into(),
        format!("--numjobs={JOBS}"),
        "--iodepth=1".into(),
        "--verify=crc32c".into(),
        format!("--randseed={seed}"),
    ]
}

/// Number of writes a job issued, from its verify state file (fio 3.33 layout, version 3).
fn state_numberio(path: &std::path::Path) -> Option<u64> {
    let b = fs::read(path).ok()?;
    // verify_state_hdr (3 x u64), then thread_io_list: no_comps u64, depth u32, nofiles u32, numberio u64
    if b.len() < 48 {
        return None;
    }
    Some(u64::from_le_bytes(b[40..48].try_into().unwrap()))
}

#[test]
fn fio_verify_state_survives_kill9_at_random_points() {
    fio_verify_state_survives_kill9(
        "fio_verify_state_survives_kill9_at_random_points",
        "--bs=4k",
    );
}

/// Writes of 4 KiB to 1 MiB: those of 256 KiB and more skip the journal's data and are
/// acknowledged once their stripe is durable, so kills land in the middle of stripe writes,
/// between a write's journal reference and its data, and in forced seals.
#[test]
fn fio_verify_state_survives_kill9_during_large_writes() {
    fio_verify_state_survives_kill9(
        "fio_verify_state_survives_kill9_during_large_writes",
        "--bsrange=4k-1m",
    );
}

fn fio_verify_state_survives_kill9(test: &str, bs: &str) {
    require_tool("fio");
    let (mut rng, _) = test_rng(test);
    let mut srv = Server::start_with("crash-fio", ServeOpts::default().volume_size("1G"));
    let uri = srv.nbd_uri("vol0");
    for round in 0..ROUNDS {
        let cwd = srv.scratch.join(format!("fio-round{round}"));
        fs::create_dir_all(&cwd).unwrap();
        let fio_seed = rng.random_range(1..1_000_000_000u64);
        let kill_after = Duration::from_millis(rng.random_range(1000..3000));
        let mut args = fio_crash_job(fio_seed, bs);
        args.push("--verify_state_save=1".into());
        let mut writer = Bg::spawn_group(&mut fio_cmd(&cwd, &uri, &args));
        // Count from the moment fio is connected, not from its start-up.
        let t0 = poll_until(Duration::from_secs(60), "fio to connect", || {
            if writer.try_wait().is_some() {
                return Some(Instant::now());
            }
            writer
                .all_so_far()
                .contains("connected to NBD server")
                .then(Instant::now)
        });
        let mut finished_early = false;
        while t0.elapsed() < kill_after {
            if writer.try_wait().is_some() {
                finished_early = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "round {round}: fio seed {fio_seed}, kill -9 after {kill_after:?}{}",
            if finished_early {
                " (fio finished before the kill: the kill hits an idle server)"
            } else {
                ""
            }
        );
        srv.kill9();
        let wout = writer.wait(Duration::from_secs(60));
        assert!(
            !wout.timed_out,
            "fio did not exit within 60 s after the server died:\n{}",
            wout.all()
        );
        let mut issued = Vec::new();
        for j in 0..JOBS {
            let st = cwd.join(format!("local-crash-{j}-verify.state"));
            let n = state_numberio(&st).unwrap_or_else(|| {
                panic!(
                    "fio wrote no verify state {} (round {round}):\n{}",
                    st.display(),
                    wout.all()
                )
            });
            issued.push(n);
        }
        eprintln!("round {round}: writes issued per job before the kill: {issued:?}");
        assert!(
            issued.iter().sum::<u64>() > 0,
            "fio wrote nothing before the kill:\n{}",
            wout.all()
        );

        srv.restart();
        let mut vargs = fio_crash_job(fio_seed, bs);
        vargs.extend(strs(&[
            "--verify_only",
            "--verify_state_load=1",
            "--verify_state_save=0",
            "--verify_fatal=1",
        ]));
        let vout = fio(&cwd, &uri, &vargs, Duration::from_secs(600));
        if !vout.success() || vout.all().lines().any(|l| l.starts_with("verify:")) {
            panic!(
                "round {round}: acknowledged writes lost or corrupt after kill -9 (fio seed {fio_seed}, \
                 killed after {kill_after:?}, issued {issued:?}):\n$ {}\n{}",
                vout.cmdline,
                vout.all()
            );
        }
    }
}

// ------------------------------------------------------------------------------------------
// Versioned blocks through our own NBD client
// ------------------------------------------------------------------------------------------

const THREADS: usize = 4;
const BLOCKS_PER_THREAD: u64 = 64;
const MAGIC: &[u8; 8] = b"WEFTVER1";

#[derive(Clone, Copy, Default, Debug)]
struct BlockState {
    /// Highest version sent (maybe in flight when the server died).
    issued: u64,
    /// Highest version whose write was acknowledged.
    acked: u64,
    /// Highest version acknowledged before a flush that was acknowledged.
    flushed: u64,
}

fn splitmix(x: &mut u64) -> u64 {
    *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The full content of `block` at `version`: a header, bytes derived from both, a checksum.
fn block_content(salt: u64, block: u64, version: u64) -> Vec<u8> {
    let mut b = vec![0u8; 4096];
    b[0..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&block.to_le_bytes());
    b[16..24].copy_from_slice(&version.to_le_bytes());
    b[24..32].copy_from_slice(&salt.to_le_bytes());
    let mut st = salt ^ block.wrapping_mul(0x1000_0001) ^ version.rotate_left(32);
    for chunk in b[32..].chunks_mut(8) {
        let v = splitmix(&mut st).to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
    b
}

/// Decodes a block read back: Ok(0) for never written (all zeroes), Ok(version), or Err(why).
fn decode_block(salt: u64, block: u64, data: &[u8]) -> Result<u64, String> {
    if data.iter().all(|&x| x == 0) {
        return Ok(0);
    }
    if &data[0..8] != MAGIC {
        return Err(format!("bad magic {:02x?}", &data[0..8]));
    }
    let idx = u64::from_le_bytes(data[8..16].try_into().unwrap());
    let ver = u64::from_le_bytes(data[16..24].try_into().unwrap());
    if idx != block {
        return Err(format!(
            "holds block {idx}'s data (misdirected write), version {ver}"
        ));
    }
    if data != block_content(salt, block, ver).as_slice() {
        return Err(format!("version {ver} header but torn or corrupt content"));
    }
    Ok(ver)
}

/// One writer per connection over its own block range; returns when the connection breaks or
/// `stop` is set.
fn writer(
    srv_addr: std::net::SocketAddr,
    t: usize,
    salt: u64,
    seed: u64,
    state: Arc<Mutex<Vec<BlockState>>>,
    stop: Arc<AtomicBool>,
) -> (u64, u64, String) {
    use rand::SeedableRng;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let first = t as u64 * BLOCKS_PER_THREAD;
    let mut c = match NbdClient::connect(srv_addr, "vol0") {
        Ok(c) => c,
        Err(e) => return (0, 0, format!("connect: {e}")),
    };
    let (mut writes, mut flushes) = (0u64, 0u64);
    let mut until_flush = rng.random_range(1..32);
    while !stop.load(Ordering::Relaxed) {
        let n = rng.random_range(1..=4u64);
        let start = first + rng.random_range(0..=BLOCKS_PER_THREAD - n);
        let mut buf = Vec::with_capacity((n * 4096) as usize);
        let mut versions = Vec::new();
        {
            let mut st = state.lock().unwrap();
            for b in start..start + n {
                let v = st[b as usize].issued + 1;
                st[b as usize].issued = v;
                versions.push(v);
                buf.extend_from_slice(&block_content(salt, b, v));
            }
        }
        let fua = rng.random_range(0..8) == 0;
        let res = if fua {
            c.write_fua(start * 4096, &buf)
        } else {
            c.write(start * 4096, &buf)
        };
        if let Err(e) = res {
            return (writes, flushes, format!("write: {e}"));
        }
        writes += 1;
        {
            let mut st = state.lock().unwrap();
            for (i, b) in (start..start + n).enumerate() {
                st[b as usize].acked = versions[i];
                if fua {
                    st[b as usize].flushed = versions[i];
                }
            }
        }
        until_flush -= 1;
        if until_flush == 0 {
            until_flush = rng.random_range(1..32);
            let snapshot: Vec<u64> = state.lock().unwrap().iter().map(|s| s.acked).collect();
            if let Err(e) = c.flush() {
                return (writes, flushes, format!("flush: {e}"));
            }
            flushes += 1;
            let mut st = state.lock().unwrap();
            for b in first..first + BLOCKS_PER_THREAD {
                let s = &mut st[b as usize];
                s.flushed = s.flushed.max(snapshot[b as usize]);
            }
        }
    }
    (writes, flushes, "stopped".into())
}

#[test]
fn versioned_blocks_survive_kill9_acked_and_flushed() {
    versioned_blocks("versioned_blocks_survive_kill9_acked_and_flushed", false);
}

/// The same with `weft gc`, `weft checkpoint` and `weft sync` running in a loop while the
/// writers overwrite (so GC has garbage to move), and small segments so many get sealed: the
/// kill lands in the middle of maintenance work too.
#[test]
fn versioned_blocks_survive_kill9_during_gc_and_checkpoint() {
    versioned_blocks(
        "versioned_blocks_survive_kill9_during_gc_and_checkpoint",
        true,
    );
}

fn versioned_blocks(test: &str, maintenance: bool) {
    let (mut rng, _) = test_rng(test);
    let mut opts = ServeOpts::default().volume_size("64M");
    if maintenance {
        opts = opts.arg("--segment-size").arg("256K");
    }
    let mut srv = Server::start_with(
        if maintenance {
            "crash-gc"
        } else {
            "crash-versions"
        },
        opts,
    );
    if maintenance && srv.skip_without_api(test) {
        return;
    }
    let salt: u64 = rng.random();
    let nblocks = THREADS as u64 * BLOCKS_PER_THREAD;
    let state = Arc::new(Mutex::new(vec![BlockState::default(); nblocks as usize]));
    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (st, stop, addr, seed) =
                    (state.clone(), stop.clone(), srv.nbd, rng.random::<u64>());
                std::thread::spawn(move || writer(addr, t, salt, seed, st, stop))
            })
            .collect();
        let maint = maintenance.then(|| {
            let (stop, api, token) = (stop.clone(), srv.api.clone(), srv.token());
            std::thread::spawn(move || {
                let mut runs = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    for path in ["/api/v1/gc", "/api/v1/checkpoint", "/api/v1/sync"] {
                        // The server dies mid-call eventually: a transport error ends the loop.
                        match try_api_request(&api, "POST", path, None, Some(&token)) {
                            Ok((st, body)) => runs.push(format!(
                                "{path} {st}{}",
                                if st >= 300 {
                                    format!(" {body}")
                                } else {
                                    String::new()
                                }
                            )),
                            Err(_) => return runs,
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                runs
            })
        });
        let kill_after = Duration::from_millis(rng.random_range(300..2000));
        std::thread::sleep(kill_after);
        srv.kill9();
        stop.store(true, Ordering::Relaxed);
        if let Some(m) = maint {
            let runs = m.join().expect("maintenance thread");
            let failed: Vec<_> = runs
                .iter()
                .filter(|r| !r.ends_with(" 200") && !r.ends_with(" 204"))
                .collect();
            eprintln!(
                "round {round}: {} maintenance calls before the kill",
                runs.len()
            );
            assert!(
                failed.is_empty(),
                "maintenance calls failed while the server was up: {failed:?}"
            );
        }
        let results: Vec<_> = handles
            .into_iter()
            .map(|h| h.join().expect("writer thread"))
            .collect();
        let total_writes: u64 = results.iter().map(|r| r.0).sum();
        eprintln!("round {round}: killed after {kill_after:?}; writers (writes, flushes, ended by): {results:?}");
        assert!(
            total_writes > 0,
            "no write was acknowledged before the kill: {results:?}"
        );

        srv.restart();
        let mut c = srv.nbd_client("vol0");
        let data = c.read(0, (nblocks * 4096) as u32).expect("read back");
        c.disconnect();
        let st = state.lock().unwrap().clone();
        let mut problems = Vec::new();
        let (mut unflushed_checked, mut inflight) = (0, 0);
        for b in 0..nblocks {
            let s = st[b as usize];
            let got = decode_block(
                salt,
                b,
                &data[(b * 4096) as usize..((b + 1) * 4096) as usize],
            );
            if s.acked > s.flushed {
                unflushed_checked += 1;
            }
            if s.issued > s.acked {
                inflight += 1;
            }
            match got {
                Err(why) => problems.push(format!(
                    "block {b}: {why} (acked {}, issued {})",
                    s.acked, s.issued
                )),
                Ok(v) if v < s.acked => problems.push(format!(
                    "block {b}: version {v} < acknowledged {} ({}; flushed version {})",
                    s.acked,
                    if v >= s.flushed {
                        "an acknowledged, unflushed write was lost"
                    } else {
                        "a FLUSHED write was lost"
                    },
                    s.flushed
                )),
                Ok(v) if v > s.issued => problems.push(format!(
                    "block {b}: version {v} was never written (issued {})",
                    s.issued
                )),
                Ok(_) => {}
            }
        }
        eprintln!(
            "round {round}: {nblocks} blocks checked, {unflushed_checked} with acknowledged-but-unflushed versions, {inflight} with a write in flight at the kill"
        );
        assert!(
            problems.is_empty(),
            "round {round}: {} bad blocks after kill -9:\n{}",
            problems.len(),
            problems.join("\n")
        );
        // The in-flight writes either landed or not; from now on the block holds what we read.
        let mut stm = state.lock().unwrap();
        for b in 0..nblocks {
            let v = decode_block(
                salt,
                b,
                &data[(b * 4096) as usize..((b + 1) * 4096) as usize],
            )
            .unwrap();
            let s = &mut stm[b as usize];
            s.acked = v;
            s.flushed = v;
            // Versions only grow: keep `issued` so a stale in-flight version can't be confused
            // with a new write of the same number.
        }
    }
}
