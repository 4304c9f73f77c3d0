//! fio as extra load: a random-write job with crc32c verify headers on its own volume (vol2),
//! while one or two d.nodes are killed under it; fio must finish with no error and verify
//! every block, and a verify-only pass after they are back must too. The c.node stays up
//! (fio's nbd engine does not reconnect).

use std::time::Duration;

use rand::Rng;

use crate::common::{assert_fio_ok, fio, fio_cmd, strs, Bg};
use crate::thrash_support::thrasher::{Thrasher, M, VOLUME_SIZE};

/// How long one fio pass may run.
const FIO_TIMEOUT: Duration = Duration::from_secs(240);

fn fio_job(size_mib: u64, seed: u64) -> Vec<String> {
    let mut v = strs(&[
        "--name=thrash",
        "--rw=randwrite",
        "--bs=4k",
        "--iodepth=8",
        "--numjobs=1",
        "--verify=crc32c",
        "--randrepeat=1",
        "--group_reporting",
    ]);
    v.push(format!("--size={size_mib}M"));
    v.push(format!("--randseed={seed}"));
    v
}

impl Thrasher {
    pub fn fault_fio(&mut self) {
        let size_mib = self.rng.random_range(16..=32u64);
        let fio_seed = self.rng.random_range(1..1_000_000u64);
        let kill_after_ms = self.rng.random_range(300..1500);
        let n = self.rng.random_range(1..=M);
        let victims = self.pick_dnodes(n);
        if !self.fio_volume {
            self.c
                .cli_ok(&["volume", "create", "vol2", "--size", VOLUME_SIZE]);
            self.fio_volume = true;
        }
        let uri = self.c.nbd_uri("vol2");
        let dir = self.c.scratch.path().to_path_buf();
        let mut args = fio_job(size_mib, fio_seed);
        // At 8 MiB/s the writes last 2-4 s, so the kills land mid-run (the c.node stays up: no
        // nbd-engine spin on a dead server).
        args.push("--do_verify=1".into());
        args.push("--rate=8m".into());
        let mut job = Bg::spawn(&mut fio_cmd(&dir, &uri, &args));
        self.log.record(
            "fio",
            "vol2",
            &format!("randwrite {size_mib} MiB with verify, seed {fio_seed}"),
        );
        std::thread::sleep(Duration::from_millis(kill_after_ms));
        let still_running = job.try_wait().is_none();
        for &i in &victims {
            self.kill_dnode(i);
        }
        let out = job.wait(FIO_TIMEOUT);
        self.fio_ok(
            &out,
            &format!("write+verify with {n} d.node(s) killed (mid-run: {still_running})"),
        );
        for &i in &victims {
            self.restart_dnode(i);
        }
        self.wait_all_up();
        let mut args = fio_job(size_mib, fio_seed);
        args.push("--verify_only=1".into());
        let out = fio(&dir, &uri, &args, FIO_TIMEOUT);
        self.fio_ok(&out, "verify-only after the d.nodes came back");
    }

    fn fio_ok(&mut self, out: &crate::common::CmdOut, what: &str) {
        if !out.success() || !out.stdout.contains("err= 0") {
            self.fail(&format!(
                "fio {what}: ({})\n$ {}\n{}",
                out.describe(),
                out.cmdline,
                out.all()
            ));
        }
        assert_fio_ok(out, what);
        self.log.record("fio ok", "vol2", what);
    }
}
