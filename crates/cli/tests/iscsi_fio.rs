//! fio's libiscsi engine against `weft serve`: verified writes and reads over iSCSI, kill -9
//! of weft during verified writes with SYNCHRONIZE CACHE between them, and a volume's IOPS
//! limit held over iSCSI (within 5%).
//!
//! Debian's fio has no libiscsi engine: `scripts/build-fio-libiscsi.sh` builds one from Debian's
//! source package into a cache (`scripts/test.sh` and `.ci/run` run it and export
//! `WEFT_FIO_LIBISCSI`). Without it these tests fail, naming the script.
//!
//! Two things about fio 3.33's libiscsi engine shape the jobs:
//! - `fsync=N` sends SYNCHRONIZE CACHE(16) (engines/libiscsi.c: `scsi_cdb_synchronizecache16(0,
//!   num_blocks * block_size, 0, 0)`), with the LUN's size in *bytes* in the 32-bit NUMBER OF
//!   LOGICAL BLOCKS field. On a LUN under 4 GiB that range runs past the end and a conforming
//!   target answers ILLEGAL REQUEST / LBA OUT OF RANGE, which fio ignores (it drops the error of
//!   a sync; only the engine's `iscsi: request failed` line on stderr shows it). On a LUN whose
//!   size is a multiple of 4 GiB the field wraps to 0, "to the end of the LU". So the LUNs here
//!   are 4 GiB (thin: only what fio writes is stored), and every run asserts that no request
//!   failed.
//! - libiscsi reconnects forever when the target goes away, so a fio whose server was killed
//!   never ends by itself. The crash test uses fio's trigger file: fio saves its verify state
//!   when the file appears (`--trigger-file`), then the test SIGKILLs that fio (one process:
//!   `--thread`) before weft restarts, so no write is replayed after the state was taken.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use rand::Rng;
use serde_json::Value;

const TARGET_PREFIX: &str = "iqn.2026-11.dev.weft:";
/// A multiple of 4 GiB, see the module doc.
const LUN_SIZE: &str = "4G";
const FIO_TIMEOUT: Duration = Duration::from_secs(120);
const BUILD_SCRIPT: &str = "scripts/build-fio-libiscsi.sh";

/// fio with the libiscsi engine: `$WEFT_FIO_LIBISCSI`, else the build script's cache (asked with
/// `--check`, which never builds). Missing, the test fails and names the script.
fn fio_libiscsi() -> PathBuf {
    if let Some(p) = std::env::var_os("WEFT_FIO_LIBISCSI") {
        let p = PathBuf::from(p);
        assert!(
            p.is_file(),
            "WEFT_FIO_LIBISCSI={} does not exist: run {BUILD_SCRIPT} (it prints the path)",
            p.display()
        );
        return p;
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(BUILD_SCRIPT);
    let out = run(
        Command::new("bash").arg(&script).arg("--check"),
        Duration::from_secs(30),
    );
    let path = PathBuf::from(out.stdout.trim());
    assert!(
        out.success() && path.is_file(),
        "fio with the libiscsi engine is not built (Debian's fio has no libiscsi engine): run \
         {BUILD_SCRIPT} (as root it installs what the build needs; ~30 s) or set \
         WEFT_FIO_LIBISCSI\n{}",
        out.all()
    );
    path
}

/// fio's `--filename` for LUN 0 of `export` (fio splits file names at unescaped colons).
fn lun_filename(srv: &Server, export: &str) -> String {
    let portal = srv
        .iscsi
        .unwrap_or_else(|| panic!("serve.json names no iSCSI portal"));
    format!("iscsi://{portal}/{TARGET_PREFIX}{export}/0").replace(':', "\\:")
}

fn libiscsi_cmd(fio: &Path, cwd: &Path, filename: &str, args: &[String]) -> Command {
    let mut cmd = Command::new(fio);
    cmd.current_dir(cwd)
        .arg("--ioengine=libiscsi")
        .arg(format!("--filename={filename}"))
        .arg("--eta=never")
        .args(args);
    cmd
}

/// fio's JSON report (it may print warnings before the JSON).
fn fio_json(out: &CmdOut) -> Value {
    let s = &out.stdout;
    let at = s
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in fio's output:\n{}", out.all()));
    serde_json::from_str(&s[at..])
        .unwrap_or_else(|e| panic!("fio's JSON does not parse ({e}):\n{}", out.all()))
}

/// Bytes fio wrote and read (verify reads count as reads) over all jobs, failing on any job
/// error, any failed iSCSI request (fio ignores failed syncs) and any verify complaint.
fn fio_bytes(out: &CmdOut, what: &str) -> (u64, u64) {
    let all = out.all();
    let complaint = all.lines().find(|l| {
        l.starts_with("verify:")
            || l.contains("iscsi: request failed")
            || l.contains("bad magic")
            || l.contains("crc32c: verify failed")
    });
    if !out.success() || complaint.is_some() {
        panic!(
            "fio {what} failed ({}): {}\n$ {}\n{all}",
            out.describe(),
            complaint.unwrap_or(""),
            out.cmdline
        );
    }
    let json = fio_json(out);
    let jobs = json["jobs"].as_array().expect("fio JSON has jobs");
    let (mut written, mut read) = (0, 0);
    for job in jobs {
        assert_eq!(job["error"], 0, "fio {what}: a job failed:\n{all}");
        written += job["write"]["io_bytes"].as_u64().unwrap_or(0);
        read += job["read"]["io_bytes"].as_u64().unwrap_or(0);
    }
    (written, read)
}

/// Random writes of 4 KiB to 1 MiB (bsrange: multiples of 4 KiB), two jobs on disjoint 96 MiB
/// ranges at queue depth 8, a SYNCHRONIZE CACHE every 16 writes, crc32c verify headers.
fn verify_job(seed: u64) -> Vec<String> {
    strs(&[
        "--name=verify",
        "--rw=randwrite",
        "--bsrange=4k-1m",
        "--size=96M",
        "--offset_increment=96M",
        "--numjobs=2",
        "--iodepth=8",
        "--fsync=16",
        "--verify=crc32c",
        "--verify_fatal=1",
        "--thread",
        "--output-format=json",
    ])
    .into_iter()
    .chain([format!("--randseed={seed}")])
    .collect()
}

#[test]
fn fio_libiscsi_writes_and_reads_back_verified() {
    let fio_bin = fio_libiscsi();
    let (mut rng, _) = test_rng("fio_libiscsi_writes_and_reads_back_verified");
    let srv = Server::start_with(
        "iscsi-fio-verify",
        ServeOpts::default().volume_size(LUN_SIZE),
    );
    let lun = lun_filename(&srv, "vol0");
    let seed = rng.random_range(1..1_000_000_000u64);
    let cwd = srv.scratch.path();

    // Write with fio's own verify pass at the end of the job.
    let out = run(
        &mut libiscsi_cmd(&fio_bin, cwd, &lun, &verify_job(seed)),
        FIO_TIMEOUT,
    );
    let (written, verified) = fio_bytes(&out, "write + verify");
    assert_eq!(written, 2 * 96 * MIB, "fio wrote {written} bytes");
    assert_eq!(
        verified, written,
        "fio verified {verified} of {written} bytes"
    );

    // A separate read-verify pass: a new session replays the job's writes as reads.
    let mut args = verify_job(seed);
    args.push("--verify_only".into());
    let out = run(&mut libiscsi_cmd(&fio_bin, cwd, &lun, &args), FIO_TIMEOUT);
    // (verify_only counts the writes it skipped as written: only the reads say anything.)
    let (_, verified) = fio_bytes(&out, "verify_only over iSCSI");
    assert_eq!(verified, 2 * 96 * MIB, "verify_only read {verified} bytes");

    // The same blocks through NBD (Debian's fio, nbd engine): the SCSI LBAs are the volume's.
    let out = fio(cwd, &srv.nbd_uri("vol0"), &args, FIO_TIMEOUT);
    let (_, verified) = fio_bytes(&out, "verify_only over NBD");
    assert_eq!(
        verified,
        2 * 96 * MIB,
        "verify_only over NBD read {verified} bytes"
    );
}

/// The QoS limit holds on iSCSI as on NBD: iSCSI pays in `QosExport` on its worker threads
/// (NBD prepays on its connection task), so this is the other half of the throttle's paths.
#[test]
fn fio_libiscsi_holds_a_volumes_iops_limit() {
    const LIMIT: f64 = 1000.0;
    let fio_bin = fio_libiscsi();
    let srv = Server::start_with("iscsi-fio-qos", ServeOpts::default().volume_size("64M"));
    if srv.skip_without_api("fio_libiscsi_holds_a_volumes_iops_limit") {
        return;
    }
    srv.cli_ok(&[
        "volume",
        "create",
        "lim",
        "--size",
        LUN_SIZE,
        "--iops-max",
        &format!("{LIMIT}"),
    ]);
    let lun = lun_filename(&srv, "lim");
    // After a 1 s ramp that spends the burst (0.1 s worth), 4 KiB random writes at QD16.
    let args = strs(&[
        "--name=qos",
        "--rw=randwrite",
        "--bs=4k",
        "--size=64M",
        "--iodepth=16",
        "--time_based",
        "--runtime=5",
        "--ramp_time=1",
        "--thread",
        "--output-format=json",
    ]);
    let out = run(
        &mut libiscsi_cmd(&fio_bin, srv.scratch.path(), &lun, &args),
        FIO_TIMEOUT,
    );
    fio_bytes(&out, "randwrite QD16 under a limit");
    let iops = fio_json(&out)["jobs"][0]["write"]["iops"].as_f64().unwrap();
    eprintln!("iSCSI: {iops:.0} IOPS under a limit of {LIMIT}");
    assert!(
        (iops - LIMIT).abs() <= LIMIT * 0.05,
        "{iops:.0} IOPS over iSCSI, not within 5% of {LIMIT}"
    );
    let q = srv.api_json("GET", "/api/v1/volumes/lim/qos", None);
    assert!(q["throttled_ios"].as_u64().unwrap() > 0, "{q}");
}

// ------------------------------------------------------------------------------------------
// kill -9 during verified writes with SYNCHRONIZE CACHE between them
// ------------------------------------------------------------------------------------------
//
// fio's verify state is exact only at iodepth 1 (see crash.rs): concurrency comes from 4 jobs
// (threads, one iSCSI session each) on disjoint ranges. Writes of 4 KiB to 1 MiB: those of
// 256 KiB and more are written through to a stripe, so kills land mid-stripe too.

const ROUNDS: usize = 3;
const JOBS: usize = 4;
/// A SYNCHRONIZE CACHE after every this many writes of each job.
const SYNC_EVERY: u64 = 4;

fn crash_job(seed: u64) -> Vec<String> {
    strs(&[
        "--name=crash",
        "--rw=randwrite",
        "--bsrange=4k-1m",
        // 4 x 256 MiB: more than the kill delay's worth of writes.
        "--size=256M",
        "--offset_increment=256M",
        "--iodepth=1",
        "--verify=crc32c",
        "--thread",
    ])
    .into_iter()
    .chain([
        format!("--numjobs={JOBS}"),
        format!("--fsync={SYNC_EVERY}"),
        format!("--randseed={seed}"),
    ])
    .collect()
}

/// Writes a job issued, from its verify state file (fio 3.33, version 3; see crash.rs).
fn state_numberio(path: &Path) -> Option<u64> {
    let b = fs::read(path).ok()?;
    (b.len() >= 48).then(|| u64::from_le_bytes(b[40..48].try_into().unwrap()))
}

#[test]
fn fio_libiscsi_verify_state_survives_kill9_with_sync_cache() {
    let fio_bin = fio_libiscsi();
    let (mut rng, _) = test_rng("fio_libiscsi_verify_state_survives_kill9_with_sync_cache");
    let mut srv = Server::start_with(
        "iscsi-fio-kill9",
        ServeOpts::default().volume_size(LUN_SIZE),
    );
    let lun = lun_filename(&srv, "vol0");
    for round in 0..ROUNDS {
        let cwd = srv.scratch.join(format!("fio-round{round}"));
        fs::create_dir_all(&cwd).unwrap();
        let trigger = cwd.join("save-state-now");
        let seed = rng.random_range(1..1_000_000_000u64);
        let kill_after = Duration::from_millis(rng.random_range(500..1500));
        let mut args = crash_job(seed);
        args.push("--verify_state_save=1".into());
        args.push(format!("--trigger-file={}", trigger.display()));
        let mut writer = Bg::spawn(&mut libiscsi_cmd(&fio_bin, &cwd, &lun, &args));
        // Count from the moment the jobs run (each has logged in and read the capacity).
        let t0 = poll_until(Duration::from_secs(60), "fio to start its jobs", || {
            if writer.try_wait().is_some() {
                panic!("fio exited before the kill:\n{}", writer.all_so_far());
            }
            writer
                .stdout_so_far()
                .contains("Starting")
                .then(Instant::now)
        });
        while t0.elapsed() < kill_after {
            assert!(
                writer.try_wait().is_none(),
                "fio finished before the kill: make the job bigger\n{}",
                writer.all_so_far()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        srv.kill9();
        // fio's jobs are stuck reconnecting; its main thread saves the verify state of every
        // job when the trigger file appears (and deletes the file).
        fs::write(&trigger, b"").unwrap();
        let states: Vec<PathBuf> = (0..JOBS)
            .map(|j| cwd.join(format!("local-crash-{j}-verify.state")))
            .collect();
        let issued: Vec<u64> = poll_until(Duration::from_secs(30), "fio's verify state", || {
            if trigger.exists() {
                return None;
            }
            states.iter().map(|s| state_numberio(s)).collect()
        });
        // fio deletes the trigger file before it writes the states: give the writes a moment
        // and check they were whole.
        std::thread::sleep(Duration::from_millis(200));
        let again: Option<Vec<u64>> = states.iter().map(|s| state_numberio(s)).collect();
        assert_eq!(
            again.as_ref(),
            Some(&issued),
            "round {round}: verify state changed"
        );
        // Nothing may reach weft after the state was taken: stop this fio before the restart.
        writer.sigkill();
        let wout = writer.wait(Duration::from_secs(30));
        assert!(
            !wout.all().contains("iscsi: request failed"),
            "round {round}: an iSCSI request failed before the kill (a SYNCHRONIZE CACHE?):\n{}",
            wout.all()
        );
        let total: u64 = issued.iter().sum();
        eprintln!(
            "round {round}: fio seed {seed}, kill -9 after {kill_after:?}; writes issued per job \
             {issued:?}, so {} SYNCHRONIZE CACHE commands completed before the kill",
            issued
                .iter()
                .map(|n| n.saturating_sub(1) / SYNC_EVERY)
                .sum::<u64>()
        );
        // At iodepth 1 a job issues write N+1 only after write N and the sync after it
        // completed: more than SYNC_EVERY writes per job means synchronized writes to check.
        assert!(
            issued.iter().all(|&n| n > SYNC_EVERY),
            "round {round}: a job wrote too little before the kill ({issued:?}):\n{}",
            wout.all()
        );

        srv.restart();
        let mut vargs = crash_job(seed);
        vargs.extend(strs(&[
            "--verify_only",
            "--verify_state_load=1",
            "--verify_state_save=0",
            "--verify_fatal=1",
            "--output-format=json",
        ]));
        let vout = run(&mut libiscsi_cmd(&fio_bin, &cwd, &lun, &vargs), FIO_TIMEOUT);
        let (_, verified) = fio_bytes(
            &vout,
            &format!(
                "verify after kill -9, round {round} (acknowledged writes lost or corrupt? \
                 seed {seed}, killed after {kill_after:?}, issued {issued:?})"
            ),
        );
        let reads: u64 = fio_json(&vout)["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["read"]["total_ios"].as_u64().unwrap_or(0))
            .sum();
        eprintln!("round {round}: {reads} writes ({verified} bytes) verified after restart");
        // Every write but the one in flight per job at the kill is checked.
        assert!(
            reads + JOBS as u64 >= total && verified > 0,
            "round {round}: verified {reads} writes of {total} issued"
        );
    }
}
