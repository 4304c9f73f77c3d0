#!/usr/bin/env python3
"""Side-by-side NBD benchmark (issue 8): weft (data reduction on) in up to three modes —
`weft serve`, a c.node over one d.node (pool `none`), a c.node over six d.nodes (pool 4+2) —
vs qemu-nbd (raw file, cache=none, aio=native) vs nbdkit's memory plugin (the ceiling: a
server that does no I/O at all), on one or two data sets (incompressible unique data;
database-like data: compressible and partly duplicate).

For every data set and server: a fresh server, the whole volume prefilled with that data
set, then the same fio jobs (ioengine=nbd).  Per job: throughput, latency, the server's CPU
(and CPU per 100k IOPS), bytes written to the disk, and for weft its own accounting (host
bytes, chunk bytes, GC) from `weft stats --json`.  Prints markdown tables with the ratios and
issue 8's goals; raw results go to bench/results/ (gitignored) as JSON + markdown.

Python 3.11 standard library only.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import (  # noqa: E402,F401  (re-exported: cluster-compare.py uses them as nc.*)
    BENCH_DIR, CLK_TCK, REPO, RESULTS_DIR, Cluster, Job, block_dev_name, cpu_ticks, dir_usage,
    disk_rates, disk_stats, disk_written, fio_base, free_port, fs_type, git_info, host_busy_excluding,
    host_cpu, human_size, load_fio_json, log, machine_info, parse_size, proc_cpu_ticks, run_out,
    stop_proc, summarize_fio, tree_cpu_ticks, wait_port,
)

WEFT_MODES = ["serve", "cnode1", "ec42"]
ALL_SERVERS = ["weft-serve", "weft-cnode1", "weft-ec42", "qemu-nbd", "nbdkit"]
SERVER_TITLES = {"weft-serve": "weft serve", "weft-cnode1": "weft cnode1", "weft-ec42": "weft ec42",
                 "qemu-nbd": "qemu-nbd", "nbdkit": "nbdkit-memory"}
# Issue 8's goals (weft / qemu-nbd) apply to these; ec42 is compared with cnode1, no goal.
GOAL_SERVERS = ["weft-serve", "weft-cnode1"]

# --------------------------------------------------------------------------
# Data sets
# --------------------------------------------------------------------------


@dataclass
class DataSet:
    name: str
    title: str
    fio_opts: list[str]  # buffer-content options of every write (prefill and write jobs)
    describe: str


DATASETS = {
    "incompressible": DataSet(
        "incompressible", "incompressible",
        ["--refill_buffers=1"],
        "unique random data (fio `refill_buffers`, `randrepeat=0`): incompressible and never "
        "repeating, so data reduction cannot help"),
    "dblike": DataSet(
        "dblike", "database-like",
        ["--refill_buffers=1", "--buffer_compress_percentage=60", "--buffer_compress_chunk=4k",
         "--dedupe_percentage=10"],
        "database-like data (fio `buffer_compress_percentage=60 buffer_compress_chunk=4k "
        "dedupe_percentage=10 refill_buffers`): every 4 KiB block is ~40% fresh random bytes "
        "followed by 60% zeros (compresses to ~0.42 of its size), and 10% of the writes repeat "
        "the previous unique write buffer (dedupable); ideal reduction ≈ 2.6x"),
}
DATASET_ALIASES = {"random": "incompressible", "unique": "incompressible", "db": "dblike",
                   "database": "dblike"}

# --------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------

# Order: reads first (on the prefilled volume), then writes, the 60 s sustained randwrite
# last so it runs with the write path already warm/full.  `goal` = issue 8's goal for weft /
# qemu-nbd on incompressible data ("le" = on mean latency, lower is better).  On the
# database-like data every write job's goal is "weft ahead of qemu-nbd" (> 1.0x throughput,
# or < 1.0x latency for the jobs whose goal is on latency).
JOBS = [
    Job("randread-qd1", "4k randread QD1", "randread", "4k", 1, goal=(1.1, "le")),
    Job("randread-qd32", "4k randread QD32", "randread", "4k", 32, goal=(1.3, "ge"), profile=True),
    Job("seqread-qd8", "1M seq read QD8", "read", "1M", 8, goal=(1.0, "ge")),
    Job("randwrite-qd1", "4k randwrite QD1", "randwrite", "4k", 1),
    Job("randwrite-qd32", "4k randwrite QD32", "randwrite", "4k", 32, profile=True),
    Job("flushwrite-qd1", "4k randwrite+flush QD1", "randwrite", "4k", 1, fsync=True, goal=(1.0, "le")),
    Job("seqwrite-qd8", "1M seq write QD8", "write", "1M", 8, goal=(1.0, "ge")),
    Job("randwrite-qd32-sustained", "4k randwrite QD32 sustained", "randwrite", "4k", 32,
        sustained=True, goal=(1.5, "ge")),
]
JOB_BY_NAME = {j.name: j for j in JOBS}

# --------------------------------------------------------------------------
# Waiting for quiet
# --------------------------------------------------------------------------


def wait_for_server_idle(args: argparse.Namespace, what: str, pids: list[int]) -> float:
    """Wait (up to --drain-wait s) until the server's processes are idle (< 0.1 cores), e.g.
    weft destaging/GC-ing what the previous job wrote; returns the last CPU sample."""
    deadline = time.monotonic() + args.drain_wait
    started = time.monotonic()
    cpu = benchlib.cores_over(pids, 1.0)
    while cpu > 0.1 and time.monotonic() < deadline:
        cpu = benchlib.cores_over(pids, 1.0)
    waited = time.monotonic() - started
    if waited > 1.5:
        log(f"waited {waited:.0f}s for the server to go idle {what} (now {cpu:.2f} cores)")
    return cpu


def wait_for_quiet(args: argparse.Namespace, what: str, exclude: list[int]) -> float:
    """Wait (up to --wait-idle s) until the host, apart from the server under test,
    is nearly idle; returns the last busy sample (cores)."""
    busy = host_busy_excluding(exclude, 1.0)
    deadline = time.monotonic() + args.wait_idle
    warned = False
    while busy > args.idle_threshold and time.monotonic() < deadline:
        if not warned:
            log(f"host busy ({busy:.2f} cores) before {what}; waiting up to {args.wait_idle:.0f}s for quiet")
            warned = True
        busy = host_busy_excluding(exclude, 1.0)
    if busy > args.idle_threshold:
        log(f"warning: host still busy ({busy:.2f} cores, not ours) before {what}; results may be noisy")
    return busy


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------


@dataclass
class Server:
    """weft serve ("weft"), qemu-nbd or nbdkit: one process."""
    kind: str
    dir: Path
    size: int
    args: argparse.Namespace
    name: str = ""  # result key (weft-serve, qemu-nbd, nbdkit)
    port: int = 0
    proc: subprocess.Popen | None = None
    uri: str = ""
    logfile: Path | None = None
    cmd: list[str] = field(default_factory=list)
    ready_line: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.name = self.name or ("weft-serve" if self.kind == "weft" else self.kind)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    @property
    def is_weft(self) -> bool:
        return self.kind == "weft"

    @property
    def weft_data_dir(self) -> Path:
        return self.dir / "data"

    @property
    def cmds(self) -> dict[str, str]:
        return {"server": shlex.join(self.cmd)}

    def pids(self) -> list[int]:
        return [self.proc.pid] if self.alive() else []

    def other_pids(self) -> list[int]:
        return []

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.logfile = self.dir / "server.log"
        a = self.args
        if self.kind == "weft":
            api_port = free_port()
            self.cmd = [str(a.weft_bin), "serve", "--data-dir", str(self.weft_data_dir),
                        "--nbd-listen", f"127.0.0.1:{self.port}",
                        "--api-listen", f"127.0.0.1:{api_port}",
                        "--iscsi-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                        "--default-volume", "vol0",
                        "--default-volume-size", str(self.size)] + shlex.split(a.weft_args)
            self.uri = f"nbd://127.0.0.1:{self.port}/vol0"
        elif self.kind == "qemu-nbd":
            img = self.dir / "vol0.raw"
            with open(img, "wb") as f:
                f.truncate(self.size)
            self.cmd = ["qemu-nbd", "-f", "raw", "--cache=none", "--aio=native",
                        "-b", "127.0.0.1", "-p", str(self.port), "-x", "vol0", "-t", str(img)]
            self.uri = f"nbd://127.0.0.1:{self.port}/vol0"
        elif self.kind == "nbdkit":
            self.cmd = ["nbdkit", "-f", "-i", "127.0.0.1", "-p", str(self.port),
                        "--exit-with-parent", "memory", str(self.size)]
            self.uri = f"nbd://127.0.0.1:{self.port}/vol0"
        else:
            raise ValueError(self.kind)
        log(f"{self.name}: starting: {shlex.join(self.cmd)}")
        logf = open(self.logfile, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=logf,
                                     stdin=subprocess.DEVNULL, cwd=self.dir)
        logf.close()
        benchlib.register(self.proc)
        threading.Thread(target=self._pump_stdout, daemon=True).start()
        try:
            if self.kind == "weft":
                deadline = time.monotonic() + a.start_timeout
                while not self.ready_line.wait(0.2):
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"weft exited with code {self.proc.returncode} before 'ready'")
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"weft did not print 'ready' within {a.start_timeout}s")
            wait_port(self.port, self.proc, a.start_timeout)
        except Exception:
            self.stop()
            raise
        log(f"{self.name}: pid {self.pid} listening, {self.uri}")

    def _pump_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.dir / "server.stdout", "ab") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if line.strip().startswith(b"ready"):
                    self.ready_line.set()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 20) -> str:
        try:
            lines = []
            for f in (self.logfile, self.dir / "server.stdout"):
                if f and f.exists():
                    lines += f.read_text(errors="replace").splitlines()[-n:]
            return "\n".join(lines[-n:])
        except OSError:
            return ""

    def disk_usage(self) -> int | None:
        return None if self.kind == "nbdkit" else dir_usage(self.dir)

    def stop(self) -> None:
        if self.proc is not None:
            stop_proc(self.proc)


class WeftCluster(Cluster):
    """A c.node over d.nodes (benchlib.Cluster) with the Server interface used here."""

    is_weft = True

    @property
    def weft_data_dir(self) -> Path:
        return self.cdir

    @property
    def logfile(self) -> Path | None:
        return self.cnode.logfile if self.cnode else None


def make_server(name: str, dir: Path, args: argparse.Namespace):
    if name == "weft-serve":
        return Server("weft", dir, args.size, args, name=name)
    if name == "weft-cnode1":
        return WeftCluster(name, dir, args, "none", 1, args.size)
    if name == "weft-ec42":
        return WeftCluster(name, dir, args, "4+2", 6, args.size)
    return Server(name, dir, args.size, args, name=name)


def srv_weft_stats(srv, args: argparse.Namespace) -> dict | str:
    return benchlib.weft_stats(args.weft_bin, srv.weft_data_dir)


def weft_sync(srv, args: argparse.Namespace) -> dict:
    """`weft sync`: wait until every acknowledged write is destaged (bounded)."""
    t0 = time.monotonic()
    try:
        p = benchlib.weft_cli(args.weft_bin, srv.weft_data_dir, "sync", timeout=args.size / (5 << 20) + 300)
        rc, err = p.returncode, p.stderr.strip()[-300:]
    except subprocess.TimeoutExpired as e:
        rc, err = None, f"timeout: {e}"
    res = {"seconds": round(time.monotonic() - t0, 2), "returncode": rc}
    if rc != 0:
        res["error"] = err
        log(f"{srv.name}: weft sync failed: {err}")
    return res


def stats_delta(a: dict | str | None, b: dict | str | None) -> dict | None:
    """What weft itself accounted between two `weft stats --json` samples."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return None

    def d(*path: str):
        x, y = a, b
        for k in path:
            x = x.get(k) if isinstance(x, dict) else None
            y = y.get(k) if isinstance(y, dict) else None
        return y - x if isinstance(x, (int, float)) and isinstance(y, (int, float)) else None

    r = {"host_written_bytes": d("host_written_bytes"), "chunk_written_bytes": d("chunk_written_bytes"),
         "used_bytes": d("used_bytes"), "stored_bytes": d("reduction", "stored_bytes"),
         "unique_blocks": d("reduction", "unique_blocks"), "gc_bytes_moved": d("gc", "bytes_moved"),
         "gc_bytes_reclaimed": d("gc", "bytes_reclaimed"), "gc_runs": d("gc", "runs")}
    h, c = r["host_written_bytes"], r["chunk_written_bytes"]
    r["write_amplification"] = c / h if h and c is not None else None
    return r


# --------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------


def prefill(srv, args: argparse.Namespace, ds: DataSet) -> dict:
    out = srv.dir / "fio-prefill.json"
    cmd = fio_base(srv.uri, "prefill") + [
        "--rw=write", "--bs=1M", "--iodepth=8", f"--size={args.size}"] + ds.fio_opts + [f"--output={out}"]
    log(f"{srv.name}: prefill {human_size(args.size)} with {ds.name} data")
    d0 = disk_stats(args.disk_dev)
    t0 = time.monotonic()
    p = benchlib.run_watched(cmd, args.size / (5 << 20) + 300, srv.pids(), args.stall_timeout)
    el = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"prefill failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    d = load_fio_json(out)["jobs"][0]
    mbps = d["write"]["bw_bytes"] / 1e6
    log(f"{srv.name}: prefill done in {el:.1f}s ({mbps:.0f} MB/s)")
    return {"seconds": round(el, 2), "MBps": round(mbps, 1), "fio_cmd": shlex.join(cmd),
            "disk_written_bytes": disk_written(d0, disk_stats(args.disk_dev))}


def job_cmd(uri: str, job: Job, runtime: float, ramp: float, out: Path, ds: DataSet) -> list[str]:
    cmd = fio_base(uri, job.name) + [
        f"--rw={job.rw}", f"--bs={job.bs}", f"--iodepth={job.iodepth}",
        "--time_based=1", f"--runtime={runtime:g}", f"--ramp_time={ramp:g}", f"--output={out}"]
    if not job.is_seq:
        cmd.append("--norandommap=1")
    if job.is_write:
        cmd += ds.fio_opts  # the data set's buffer contents, fresh for every write
    if job.fsync:
        cmd.append("--fsync=1")  # nbd engine: NBD_CMD_FLUSH after every write
    return cmd


def run_profile(pids: list[int], seconds: float, out: Path, args: argparse.Namespace) -> dict:
    data = out.with_suffix(".perf.data")
    cmd = ["perf", "record", "-F", str(args.perf_freq), "-g", "-p", ",".join(map(str, pids)), "-o", str(data)]
    if args.perf_event:
        cmd[2:2] = ["-e", args.perf_event]
    cmd += ["--", "sleep", f"{seconds:g}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
    res = {"cmd": shlex.join(cmd), "returncode": p.returncode}
    if p.returncode != 0 or not data.exists():
        res["error"] = p.stderr.strip()[-800:]
        return res
    rep = subprocess.run(
        f"perf report -i {shlex.quote(str(data))} --no-children --percent-limit 2 --stdio 2>&1 | head -60",
        shell=True, capture_output=True, text=True, timeout=300)
    flat = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--percent-limit", "0.5",
         "--stdio", "-g", "none", "--sort", "dso,sym"],
        capture_output=True, text=True, timeout=300)
    threads = subprocess.run(
        ["perf", "report", "-i", str(data), "--no-children", "--stdio", "-g", "none", "--sort", "comm,dso"],
        capture_output=True, text=True, timeout=300)
    # Aggregate per thread pool: "nbd-worker-7" -> "nbd-worker-*".
    agg: dict[tuple[str, str], float] = {}
    for line in threads.stdout.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+(\S+)", line)
        if m and not line.startswith("#"):
            key = (re.sub(r"[-_:]?\d+$", "-*", m.group(2)), m.group(3))
            agg[key] = agg.get(key, 0.0) + float(m.group(1))
    res["threads"] = "\n".join(f"{v:7.2f}%  {c:<20} {d}" for (c, d), v in
                               sorted(agg.items(), key=lambda kv: -kv[1]) if v >= 0.5)
    res["report"] = rep.stdout
    res["flat"] = "\n".join(l for l in flat.stdout.splitlines() if l and not l.startswith("#"))[:8000]
    out.with_suffix(".perf.txt").write_text(rep.stdout + "\n\n==== flat ====\n" + flat.stdout
                                            + "\n\n==== threads ====\n" + threads.stdout)
    res["data"] = str(data)
    return res


def run_job(srv, job: Job, args: argparse.Namespace, ds: DataSet, profile: bool = False) -> dict:
    runtime = args.sustained if job.sustained else args.runtime
    ramp = args.ramp
    suffix = "-profile" if profile else ""
    out = srv.dir / f"fio-{job.name}{suffix}.json"
    cmd = job_cmd(srv.uri, job, runtime, ramp, out, ds)
    what = f"{srv.name} {job.name}"
    server_idle = wait_for_server_idle(args, f"before {what}", srv.pids())
    busy_before = wait_for_quiet(args, what, srv.pids() + srv.other_pids())
    ws0 = srv_weft_stats(srv, args) if srv.is_weft and not profile else None
    dj0, tj0 = disk_stats(args.disk_dev), time.monotonic()
    log(f"{srv.name}: {job.name}{' (profiling)' if profile else ''}: ramp {ramp:g}s + {runtime:g}s")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Sample the server's CPU over the measured window only (after ramp).
        # fio needs a moment to connect; that slack goes to the ramp side.
        time.sleep(ramp + min(0.3, ramp / 4))
        pids, others = srv.pids(), srv.other_pids()
        c0, e0, f0 = cpu_ticks(pids), cpu_ticks(others), tree_cpu_ticks(p.pid)
        h0, d0, t0 = host_cpu(), disk_stats(args.disk_dev), time.monotonic()
        prof = None
        if profile:
            prof = run_profile(pids, min(args.profile_seconds, max(1.0, runtime - 1.0)),
                               srv.dir / f"{job.name}", args)
        remaining = runtime - (time.monotonic() - t0) - 0.3
        if remaining > 0:
            time.sleep(remaining)
        c1, e1, f1 = cpu_ticks(pids), cpu_ticks(others), tree_cpu_ticks(p.pid)
        h1, d1, t1 = host_cpu(), disk_stats(args.disk_dev), time.monotonic()
        try:
            _stdout, stderr = p.communicate(timeout=runtime + ramp + 120)
        except subprocess.TimeoutExpired as e:
            raise benchlib.Stalled(f"fio {job.name} still running {runtime + ramp + 120:.0f}s after its "
                                   f"runtime: the server does not answer") from e
    except BaseException:
        p.kill()
        p.wait()
        raise
    if p.returncode != 0:
        raise RuntimeError(f"fio {job.name} failed ({p.returncode}): {stderr.strip()[-800:]}")
    r = summarize_fio(load_fio_json(out), job)
    wall = t1 - t0
    r["server_cpu_cores"] = (c1 - c0) / CLK_TCK / wall if wall > 0 else None
    r["etcd_cpu_cores"] = (e1 - e0) / CLK_TCK / wall if others and wall > 0 else None
    r["fio_cpu_cores"] = (f1 - f0) / CLK_TCK / wall if wall > 0 and f0 is not None and f1 is not None else None
    if h1[1] > h0[1]:
        r["host_busy_cores"] = (h1[0] - h0[0]) / (h1[1] - h0[1]) * (os.cpu_count() or 1)
        # Whatever is neither the server, etcd nor fio: other users of the machine,
        # kernel threads, softirq time not charged to either process.
        r["other_cpu_cores"] = max(0.0, r["host_busy_cores"] - (r["server_cpu_cores"] or 0)
                                   - (r["fio_cpu_cores"] or 0) - (r["etcd_cpu_cores"] or 0))
    sc = r["server_cpu_cores"]
    # cores per 100k IOPS == CPU-seconds per 100k I/Os (the same number).
    r["server_cpu_per_100k_iops"] = sc / (r["iops"] / 1e5) if sc is not None and r["iops"] else None
    r["server_cpu_s_per_GB"] = sc / (r["bw_MBps"] / 1e3) if sc is not None and r["bw_MBps"] else None
    r["host_busy_before"] = busy_before
    r["server_cpu_before"] = server_idle
    # Whole-device I/O during the window (includes other users of the disk).
    r["disk"] = disk_rates(d0, d1, wall)
    r["disk_written_bytes_window"] = disk_written(d0, d1)
    r["runtime_s"] = runtime
    r["ramp_s"] = ramp
    r["fio_cmd"] = shlex.join(cmd)
    if prof is not None:
        r["profile"] = prof
    if not srv.alive():
        raise RuntimeError(f"{srv.name} died during {job.name}\n{srv.log_tail()}")
    if not profile:
        # The whole job: from fio's start until the server is idle again (its destage and GC
        # of what the job wrote included), then weft's own accounting over the same span.
        r["server_cpu_after"] = wait_for_server_idle(args, f"after {what}", srv.pids())
        dj1, tj1 = disk_stats(args.disk_dev), time.monotonic()
        r["job_wall_s"] = round(tj1 - tj0, 2)
        r["disk_written_bytes_job"] = disk_written(dj0, dj1)
        # Host bytes over ramp + runtime: fio reports only the runtime's; the ramp is
        # assumed to run at the same rate.
        r["host_written_bytes_job_est"] = r["bw_MBps"] * 1e6 * (ramp + runtime) if job.is_write else 0
        if ws0 is not None:
            r["weft_delta"] = stats_delta(ws0, srv_weft_stats(srv, args))
        host = (r.get("weft_delta") or {}).get("host_written_bytes") or r["host_written_bytes_job_est"]
        dw = r["disk_written_bytes_job"]
        r["disk_write_per_host_byte"] = dw / host if job.is_write and host and dw is not None else None
    unit = f"{r['bw_MBps']:.0f} MB/s" if job.is_seq else f"{r['iops']:.0f} IOPS"
    log(f"{srv.name}: {job.name}: {unit}, lat mean {r['lat_mean_us']:.0f}us p99 {r['lat_p99_us']:.0f}us, "
        f"server cpu {sc * 100 if sc is not None else float('nan'):.0f}%"
        + (f", disk written {r['disk_written_bytes_job'] / 1e6:.0f} MB" if r.get("disk_written_bytes_job") else ""))
    return r


# --------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------


def fmt_tput(job: Job, r: dict) -> str:
    if job.is_seq:
        return f"{r['bw_MBps']:.0f} MB/s"
    v = r["iops"]
    return f"{v / 1000:.1f}k IOPS" if v >= 10000 else f"{v:.0f} IOPS"


def fmt_us(us: float | None) -> str:
    if us is None:
        return "-"
    if us >= 10000:
        return f"{us / 1000:.0f}ms"
    if us >= 1000:
        return f"{us / 1000:.1f}ms"
    return f"{us:.0f}µs"


def fmt_mb(b: float | None) -> str:
    if b is None:
        return "?"
    return f"{b / 1e9:.2f} GB" if abs(b) >= 1e10 else f"{b / 1e6:.0f} MB"


def ok(r: dict | None) -> bool:
    return bool(r) and "failed" not in r


def cell(job: Job, r: dict | None) -> str:
    if r is None:
        return "n/a"
    if "failed" in r:
        return "FAILED"
    cpu = r.get("server_cpu_cores")
    cpu_s = f"{cpu * 100:.0f}%" if cpu is not None else "?"
    return f"{fmt_tput(job, r)} · {fmt_us(r['lat_mean_us'])}/{fmt_us(r['lat_p99_us'])} · {cpu_s}"


def on_latency(job: Job) -> bool:
    """Jobs whose ratio (and goal) is on mean latency (lower is better)."""
    return bool(job.goal and job.goal[1] == "le")


def ratio_for(job: Job, a: dict | None, b: dict | None) -> float | None:
    """a / b: mean latency for the latency jobs, else throughput."""
    if not ok(a) or not ok(b):
        return None
    if on_latency(job):
        return a["lat_mean_us"] / b["lat_mean_us"] if b["lat_mean_us"] else None
    key = "bw_MBps" if job.is_seq else "iops"
    return a[key] / b[key] if b[key] else None


def goal_for(job: Job, ds: str) -> tuple[float, str] | None:
    if ds == "incompressible":
        return job.goal
    if ds == "dblike" and job.is_write:
        return (1.0, "lt") if on_latency(job) else (1.0, "gt")
    return None


def goal_text(g: tuple[float, str]) -> str:
    thr, kind = g
    sym = {"ge": "≥", "le": "≤", "gt": ">", "lt": "<"}[kind]
    return ("lat " if kind in ("le", "lt") else "") + f"{sym} {thr:.1f}x"


def goal_met(r: float | None, g: tuple[float, str]) -> str:
    if r is None:
        return "?"
    thr, kind = g
    met = {"ge": r >= thr, "le": r <= thr, "gt": r > thr, "lt": r < thr}[kind]
    return "yes" if met else "**no**"


def fmt_ratio(job: Job, r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x" + (" (lat)" if on_latency(job) else "")


def render_dataset(meta: dict, res: dict, ds: str, servers: list[str], jobs: list[Job]) -> list[str]:
    L: list[str] = []
    m = meta["machine"]
    dset = DATASETS[ds]
    cols = [SERVER_TITLES[s] for s in servers]
    weft = [s for s in servers if s.startswith("weft-")]

    def get(s: str, j: Job) -> dict | None:
        return res.get(s, {}).get("jobs", {}).get(j.name)

    L.append(f"#### Data set: {dset.title}")
    L.append("")
    L.append(f"Volume prefilled with {dset.describe}; every write job writes the same kind of data.")
    L.append("")
    L.append("Cell: throughput · mean/p99 latency · server CPU (100% = one core; weft cnode1/ec42: "
             "c.node + d.nodes, etcd not counted). Flush row latency = write + flush.")
    L.append("")
    L.append("| job | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    for job in jobs:
        L.append("| " + " | ".join([job.title] + [cell(job, get(s, job)) for s in servers]) + " |")
    L.append("")

    # Ratios and goals
    have_q = "qemu-nbd" in servers
    rcols: list[tuple[str, str, str]] = []  # (title, numerator, denominator)
    if have_q:
        rcols += [(f"{SERVER_TITLES[s]} / qemu-nbd", s, "qemu-nbd") for s in weft]
    if "weft-ec42" in servers and "weft-cnode1" in servers:
        rcols.append(("weft ec42 / weft cnode1", "weft-ec42", "weft-cnode1"))
    if rcols:
        L.append("Ratios: throughput, or mean latency where marked (lat: lower is better). "
                 "Goal (issue 8) for weft serve and weft cnode1 against qemu-nbd"
                 + (" on incompressible data" if ds == "incompressible" else
                    ": every write job ahead of qemu-nbd") + "; ec42 against cnode1 has no goal.")
        L.append("")
        L.append("| job | goal | " + " | ".join(t for t, _n, _d in rcols) + " |")
        L.append("|---|---|" + "---:|" * len(rcols))
        for job in jobs:
            g = goal_for(job, ds)
            row = [job.title, goal_text(g) if g else ""]
            for _t, n, d in rcols:
                rr = ratio_for(job, get(n, job), get(d, job))
                s = fmt_ratio(job, rr)
                if g and d == "qemu-nbd" and n in GOAL_SERVERS and rr is not None:
                    s += f" {goal_met(rr, g)}"
                row.append(s)
            L.append("| " + " | ".join(row) + " |")
        L.append("")

    # CPU per I/O and disk writes
    L.append("Server CPU per 100k IOPS (cores per 100k IOPS = CPU-seconds per 100k I/Os; a 1M I/O "
             "counts as one; 1M rows also give CPU-seconds per GB) · bytes written to the disk "
             f"`{meta['params'].get('disk_dev')}` from the job's start until the server was idle again "
             "(ramp, run and the destage/GC that followed; whole device, all users) and, for writes, "
             "per byte the job wrote (weft: its own count of host bytes; others: fio's rate × "
             "(ramp + runtime)).")
    L.append("")
    L.append("| job | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    for job in jobs:
        row = [job.title]
        for s in servers:
            r = get(s, job)
            if not ok(r):
                row.append("-")
                continue
            c = r.get("server_cpu_per_100k_iops")
            dw = r.get("disk_written_bytes_job")
            x = r.get("disk_write_per_host_byte")
            gb = r.get("server_cpu_s_per_GB")
            row.append(("?" if c is None else f"{c:.2f}")
                       + (f" ({gb:.2f} s/GB)" if job.is_seq and gb is not None else "") + f" · {fmt_mb(dw)}"
                       + (f" ({x:.2f}x)" if x is not None and s != "nbdkit" else ""))
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    # weft's own accounting
    if weft and any(ok(get(s, j)) and get(s, j).get("weft_delta") for s in weft for j in jobs):
        L.append("weft's own accounting per job (`weft stats --json` before the job and after the "
                 "server went idle): host bytes written → chunk bytes written (sealed segments after "
                 "data reduction, GC moves and summaries; not the journal, not parity) and their ratio, "
                 "weft's write amplification; GC bytes moved; change of `used_bytes`.")
        L.append("")
        L.append("| job | " + " | ".join(SERVER_TITLES[s] for s in weft) + " |")
        L.append("|---|" + "---:|" * len(weft))
        for job in jobs:
            if not job.is_write:
                continue
            row = [job.title]
            for s in weft:
                r = get(s, job)
                wd = (r or {}).get("weft_delta") if ok(r) else None
                if not wd:
                    row.append("-")
                    continue
                wa = wd.get("write_amplification")
                used = wd.get("used_bytes")
                row.append(f"{fmt_mb(wd.get('host_written_bytes'))} → {fmt_mb(wd.get('chunk_written_bytes'))}"
                           + (f" ({wa:.2f}x)" if wa is not None else "")
                           + f" · GC {fmt_mb(wd.get('gc_bytes_moved'))}"
                           + (f" · used {'+' if used >= 0 else '−'}{fmt_mb(abs(used))}" if used is not None else ""))
            L.append("| " + " | ".join(row) + " |")
        L.append("")

    # Noise
    L.append("CPU detail (cores): server / etcd / fio client / other (not ours: other processes, "
             f"kernel threads) — host has {m['nproc']} cores; 'other' > 0.2 (⚠) means the run was "
             "disturbed. Then disk read/write MB/s of the whole device during the measured window "
             "(nbdkit does no disk I/O, so anything in its column is someone else).")
    L.append("")
    L.append("| job | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    f2 = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for job in jobs:
        row = [job.title]
        for s in servers:
            r = get(s, job)
            if not ok(r):
                row.append("-")
                continue
            oc = r.get("other_cpu_cores")
            dk = r.get("disk")
            row.append(f"{f2(r.get('server_cpu_cores'))} / {f2(r.get('etcd_cpu_cores'))} / "
                       f"{f2(r.get('fio_cpu_cores'))} / {f2(oc)}" + (" ⚠" if oc is not None and oc > 0.2 else "")
                       + (f" · {dk['read_MBps']:.0f}/{dk['write_MBps']:.0f}" if dk else ""))
        L.append("| " + " | ".join(row) + " |")
    L.append("")

    notes = []
    for s in servers:
        info = res.get(s, {})
        t = SERVER_TITLES[s]
        if info.get("error"):
            notes.append(f"- **{t} failed**: {info['error']}")
        for jn, r in info.get("jobs", {}).items():
            if r and "failed" in r:
                notes.append(f"- {t} {jn} failed: {r['failed'][:300]}")
        pf = info.get("prefill")
        if pf:
            parts = [f"prefill {pf['MBps']:.0f} MB/s ({pf['seconds']:.0f} s)"]
            if info.get("sync"):
                parts.append(f"`weft sync` {info['sync']['seconds']:.1f} s")
            red = info.get("stats_after_prefill")
            if isinstance(red, dict):
                rd = red.get("reduction", {})
                if rd.get("ratio"):
                    parts.append(f"data reduction after the prefill {rd['ratio']:.2f}x "
                                 f"({fmt_mb(rd.get('stored_bytes'))} stored for {fmt_mb(rd.get('logical_bytes'))})")
                if red.get("write_amplification") is not None:
                    parts.append(f"write amplification {red['write_amplification']:.2f}")
            du = info.get("disk_usage_bytes")
            if du is not None:
                parts.append(f"disk use at end {du / 2**30:.2f} GiB")
            ws = info.get("weft_stats")
            if isinstance(ws, dict):
                rd = ws.get("reduction", {})
                if rd.get("ratio"):
                    parts.append(f"reduction at end {rd['ratio']:.2f}x")
                if ws.get("write_amplification") is not None:
                    parts.append(f"write amplification at end {ws['write_amplification']:.2f}")
            elif isinstance(ws, str):
                parts.append(ws[:200])
            notes.append(f"- {t}: " + "; ".join(parts))
    if notes:
        L.append("Notes:")
        L.extend(notes)
        L.append("")
    return L


def render_goals(results: dict, datasets: list[str], servers: list[str], jobs: list[Job]) -> list[str]:
    """Issue 8's goals in one table: weft serve and weft cnode1 against qemu-nbd."""
    gs = [s for s in GOAL_SERVERS if s in servers]
    if not gs or "qemu-nbd" not in servers:
        return []
    rows = []
    for ds in datasets:
        for job in jobs:
            g = goal_for(job, ds)
            if not g:
                continue
            cells = []
            for s in gs:
                a = results.get(ds, {}).get(s, {}).get("jobs", {}).get(job.name)
                b = results.get(ds, {}).get("qemu-nbd", {}).get("jobs", {}).get(job.name)
                rr = ratio_for(job, a, b)
                cells.append("-" if rr is None else f"{fmt_ratio(job, rr)} {goal_met(rr, g)}")
            rows.append(f"| {DATASETS[ds].title} | {job.title} | {goal_text(g)} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    L = ["#### Goals (issue 8): weft / qemu-nbd", "",
         "| data | job | goal | " + " | ".join(SERVER_TITLES[s] for s in gs) + " |",
         "|---|---|---|" + "---:|" * len(gs)]
    L += rows
    L.append("")
    return L


def render_markdown(meta: dict, results: dict, datasets: list[str], servers: list[str], jobs: list[Job]) -> str:
    m = meta["machine"]
    p = meta["params"]
    L = [f"### weft NBD comparison — {meta['date']}", ""]
    L.append(f"git `{meta['git']['revision'][:12]}`{' (dirty)' if meta['git']['dirty'] else ''} · "
             f"{m['nproc']} CPU {m['cpu_model']} · kernel {m['kernel']} · "
             f"volume {human_size(p['size'])} prefilled · "
             f"{p['runtime']:g}s/point after {p['ramp']:g}s ramp, "
             f"sustained {p['sustained']:g}s · fio {meta['versions'].get('fio', '?')} · "
             f"etcd {meta['versions'].get('etcd', '?')} · nice {p.get('nice', 0)}")
    L.append("")
    L.append("Servers: weft serve = `weft serve` (single process); weft cnode1 = etcd + 1 `weft dnode` + "
             "`weft cnode --redundancy none`; weft ec42 = etcd + 6 `weft dnode` (zones z0..z5) + "
             "`weft cnode --redundancy 4+2`; weft always reduces data (zero detection, dedup, lz4). "
             "qemu-nbd = raw file, `--cache=none --aio=native`; nbdkit-memory = the ceiling (no I/O). "
             "fio `ioengine=nbd`, one connection to 127.0.0.1.")
    L.append("")
    L += render_goals(results, datasets, servers, jobs)
    for ds in datasets:
        L += render_dataset(meta, results.get(ds, {}), ds, servers, jobs)
    return "\n".join(L)


def render_profiles(results: dict) -> str:
    L = []
    for ds, per in results.items():
        for s, info in per.items():
            for jn, prof in info.get("profiles", {}).items():
                L.append(f"#### perf profile: {SERVER_TITLES.get(s, s)} during {jn} ({ds} data)")
                L.append("")
                if prof.get("error"):
                    L.append(f"perf failed: {prof['error']}")
                else:
                    L.append("```")
                    L.append(prof.get("report", "").rstrip())
                    L.append("```")
                    if prof.get("threads"):
                        L.append("")
                        L.append("by thread and object:")
                        L.append("```")
                        L.append("\n".join(prof["threads"].splitlines()[:20]))
                        L.append("```")
                    if prof.get("flat"):
                        L.append("")
                        L.append("flat (dso, symbol), >= 0.5%:")
                        L.append("```")
                        L.append("\n".join(prof["flat"].splitlines()[:40]))
                        L.append("```")
                L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def check_perf(args: argparse.Namespace) -> str | None:
    """Returns None if perf can sample, else why not.  Picks an event."""
    if not shutil.which("perf"):
        return "perf not installed"
    p = subprocess.run(["perf", "stat", "-e", "cycles", "true"], capture_output=True, text=True)
    if p.returncode == 0 and "not supported" not in p.stderr and "<not counted>" not in p.stderr:
        args.perf_event = args.perf_event or None  # default (cycles)
    else:
        # No hardware PMU (typical in VMs): fall back to the software timer.
        args.perf_event = args.perf_event or "cpu-clock"
    p = subprocess.run(["perf", "record", "-e", args.perf_event or "cycles", "-o", "/dev/null", "--", "true"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        return f"perf record unsupported here: {p.stderr.strip()[-300:]}"
    return None


def weft_stats(srv, args: argparse.Namespace) -> dict | str:
    """`weft stats --json` of the running server (data reduction, space, write amplification)."""
    return srv_weft_stats(srv, args)


def build_weft(args: argparse.Namespace) -> None:
    log("building weft: cargo build --release -p weft")
    p = subprocess.run(["cargo", "build", "--release", "-p", "weft"], cwd=REPO,
                       capture_output=True, text=True,
                       preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 10))  # build politely
    if p.returncode != 0:
        raise RuntimeError("cargo build failed:\n" + p.stderr.strip()[-2000:])
    if not Path(args.weft_bin).exists():
        raise RuntimeError(f"{args.weft_bin} not found after build")


def parse_list(s: str, known: list[str], aliases: dict[str, str], what: str, ap: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for x in (t.strip() for t in s.split(",")):
        if not x:
            continue
        x = aliases.get(x, x)
        if x not in known:
            ap.error(f"unknown {what} {x!r}; choose from {known}")
        if x not in out:
            out.append(x)
    return out


def parse_servers(s: str, modes: list[str], ap: argparse.ArgumentParser) -> list[str]:
    out: list[str] = []
    for x in (t.strip() for t in s.split(",")):
        if not x:
            continue
        x = {"nbdkit-memory": "nbdkit", "memory": "nbdkit", "qemu": "qemu-nbd"}.get(x, x)
        if x in WEFT_MODES:
            x = "weft-" + x
        names = [f"weft-{m}" for m in modes] if x == "weft" else [x]
        for n in names:
            if n not in ALL_SERVERS:
                ap.error(f"unknown server {n!r}; choose from weft (= --weft-modes), {ALL_SERVERS}")
            if n not in out:
                out.append(n)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default="weft,qemu-nbd,nbdkit",
                    help="comma-separated servers, in run order: weft (= every --weft-modes), weft-serve, "
                         "weft-cnode1, weft-ec42, qemu-nbd, nbdkit (default: weft,qemu-nbd,nbdkit)")
    ap.add_argument("--weft-modes", default=",".join(WEFT_MODES),
                    help="what `weft` in --servers means: serve (weft serve), cnode1 (c.node + 1 d.node, "
                         "pool `none`), ec42 (c.node + 6 d.nodes, pool 4+2) (default: all three)")
    ap.add_argument("--data", default="incompressible,dblike",
                    help="data sets, in run order: incompressible, dblike (default: both)")
    ap.add_argument("--jobs", default=None,
                    help="comma-separated subset of jobs: " + ",".join(JOB_BY_NAME))
    ap.add_argument("--workdir", type=Path, default=Path("/var/tmp/weft-bench"),
                    help="where volumes/data dirs live (must be a real disk, not tmpfs)")
    ap.add_argument("--size", type=parse_size, default=None, help="volume size (default 4G; --quick 256M)")
    ap.add_argument("--runtime", type=float, default=None, help="seconds per point (default 15; --quick 2)")
    ap.add_argument("--ramp", type=float, default=None, help="warm-up seconds per point (default 5; --quick 1)")
    ap.add_argument("--sustained", type=float, default=None,
                    help="seconds for the sustained randwrite (default 60; --quick 4)")
    ap.add_argument("--settle", type=float, default=None,
                    help="idle seconds between jobs (default 3; --quick 0.5)")
    ap.add_argument("--quick", action="store_true", help="fast smoke run: 2 s points, 256M volume")
    ap.add_argument("--profile", action="store_true",
                    help="perf-profile weft during extra runs of randread/randwrite QD32")
    ap.add_argument("--profile-servers", default="weft",
                    help="servers to profile with --profile (default weft = every weft mode)")
    ap.add_argument("--profile-seconds", type=float, default=10)
    ap.add_argument("--perf-freq", type=int, default=999)
    ap.add_argument("--perf-event", default=None, help="perf event (default cycles, or cpu-clock without PMU)")
    ap.add_argument("--no-build", action="store_true", help="don't run cargo build")
    ap.add_argument("--weft-bin", type=Path, default=REPO / "target" / "release" / "weft")
    ap.add_argument("--weft-args", default="", help="extra args for `weft serve`")
    ap.add_argument("--cnode-args", default="", help="extra args for `weft cnode` (cnode1, ec42)")
    ap.add_argument("--dnode-args", default="", help="extra args for `weft dnode` (cnode1, ec42)")
    ap.add_argument("--lease-ttl", default=None, help="d.node --lease-ttl (default: weft's)")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--stall-timeout", type=float, default=60,
                    help="abort the prefill if fio and the server use no CPU for this long (a hung "
                         "server; default 60 s, 0 = off)")
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="before each job wait up to this many seconds for the host to go quiet "
                         "(default 10; --quick 0)")
    ap.add_argument("--drain-wait", type=float, default=None,
                    help="before and after each job wait up to this many seconds for the server itself to "
                         "go idle (destage/GC of the job's writes; default 60; --quick 5)")
    ap.add_argument("--idle-threshold", type=float, default=0.25,
                    help="host busy cores counted as quiet (default 0.25)")
    benchlib.add_run_args(ap)
    args = ap.parse_args()

    if args.render:
        d = json.loads(args.render.read_text())
        pp = d["meta"]["params"]
        print(render_markdown(d["meta"], d["results"], pp["data"], pp["servers"],
                              [j for j in JOBS if j.name in pp["jobs"]]))
        return 0

    q = args.quick
    args.size = args.size or ((256 << 20) if q else (4 << 30))
    args.runtime = args.runtime if args.runtime is not None else (2 if q else 15)
    args.ramp = args.ramp if args.ramp is not None else (1 if q else 5)
    args.sustained = args.sustained if args.sustained is not None else (4 if q else 60)
    args.settle = args.settle if args.settle is not None else (0.5 if q else 3)
    args.drain_wait = args.drain_wait if args.drain_wait is not None else (5 if q else 60)
    args.wait_idle = args.wait_idle if args.wait_idle is not None else (0 if q else 10)

    modes = parse_list(args.weft_modes, WEFT_MODES, {"cnode-none": "cnode1", "cnode-4+2": "ec42", "4+2": "ec42",
                                                      "none": "cnode1"}, "weft mode", ap)
    servers = parse_servers(args.servers, modes, ap)
    datasets = parse_list(args.data, list(DATASETS), DATASET_ALIASES, "data set", ap)
    if not servers or not datasets:
        ap.error("nothing to run (empty --servers or --data)")
    if args.jobs:
        names = [j.strip() for j in args.jobs.split(",") if j.strip()]
        bad = [n for n in names if n not in JOB_BY_NAME]
        if bad:
            ap.error(f"unknown jobs {bad}; choose from {list(JOB_BY_NAME)}")
        jobs = [j for j in JOBS if j.name in names]
    else:
        jobs = list(JOBS)
    profile_servers = set(parse_servers(args.profile_servers, WEFT_MODES, ap)) & set(servers) if args.profile else set()
    any_weft = any(s.startswith("weft-") for s in servers)
    clusters = any(s in ("weft-cnode1", "weft-ec42") for s in servers)

    tools = ["fio"] + (["qemu-nbd"] if "qemu-nbd" in servers else []) + (["nbdkit"] if "nbdkit" in servers else []) \
        + (["etcd"] if clusters else [])
    for tool in tools:
        if not shutil.which(tool):
            log(f"error: {tool} not found")
            return 2

    benchlib.apply_nice(args)  # inherited by servers and fio
    args.workdir.mkdir(parents=True, exist_ok=True)
    fst = fs_type(args.workdir)
    if fst in ("tmpfs", "ramfs"):
        log(f"warning: --workdir {args.workdir} is on {fst}; qemu-nbd cache=none (O_DIRECT) will fail "
            "and weft's durability cost is not measured. Use a real disk (default /var/tmp/weft-bench).")
    args.disk_dev = block_dev_name(args.workdir)
    st = os.statvfs(args.workdir)
    free = st.f_bavail * st.f_frsize
    if free < 3 * args.size:  # one server at a time; ec42 stores 1.5x + the journal
        log(f"warning: only {free / 2**30:.1f} GiB free in {args.workdir}")

    perf_problem = None
    if args.profile:
        perf_problem = check_perf(args)
        if perf_problem:
            log(f"--profile: {perf_problem}; profiling disabled")
            profile_servers = set()
        else:
            log(f"--profile: perf event {args.perf_event or 'cycles'}")

    per_job = sum((args.sustained if j.sustained else args.runtime) + args.ramp + 2 + args.settle for j in jobs)
    log(f"plan: {len(datasets)} data set(s) x {len(servers)} server(s) x {len(jobs)} job(s); "
        f"roughly {len(datasets) * len(servers) * (per_job + args.size / (300 << 20) + 10) / 60:.0f} min "
        "(+ drain waits)")

    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=args.workdir))
    now = dt.datetime.now().astimezone()
    meta = {
        "date": now.isoformat(timespec="seconds"),
        "git": git_info(),
        "machine": machine_info(),
        "versions": {
            "fio": run_out(["fio", "--version"]),
            "qemu-nbd": run_out(["qemu-nbd", "--version"]).splitlines()[0] if shutil.which("qemu-nbd") else None,
            "nbdkit": run_out(["nbdkit", "--version"]) if shutil.which("nbdkit") else None,
            "etcd": next((l.split(":", 1)[1].strip() for l in run_out(["etcd", "--version"]).splitlines()
                          if l.lower().startswith("etcd version")), "?") if clusters else None,
        },
        "params": {"servers": servers, "weft_modes": modes, "data": datasets, "jobs": [j.name for j in jobs],
                   "size": args.size, "runtime": args.runtime, "ramp": args.ramp, "sustained": args.sustained,
                   "settle": args.settle, "drain_wait": args.drain_wait, "quick": q, "workdir": str(run_dir),
                   "workdir_fs": fst, "weft_args": args.weft_args, "cnode_args": args.cnode_args,
                   "dnode_args": args.dnode_args, "lease_ttl": args.lease_ttl, "nice": args.nice,
                   "disk_dev": args.disk_dev, "profile": sorted(profile_servers), "perf_problem": perf_problem,
                   "data_fio_opts": {d: DATASETS[d].fio_opts for d in datasets}, "argv": sys.argv[1:]},
    }
    results: dict[str, dict[str, dict]] = {}
    rc = 0
    try:
        if any_weft:
            if not args.no_build:
                build_weft(args)
            # Run a private copy: others may rebuild target/release/weft mid-run,
            # which would leave perf with "weft (deleted)" and no symbols.
            snap = run_dir / "weft-bin"
            shutil.copy2(args.weft_bin, snap)
            args.weft_bin = snap
            meta["binary_sha256"] = run_out(["sha256sum", str(snap)]).split()[0]
        for ds_name in datasets:
            ds = DATASETS[ds_name]
            per: dict[str, dict] = {}
            results[ds_name] = per
            for s in servers:
                info: dict = {"jobs": {}}
                per[s] = info
                srv = make_server(s, run_dir / ds_name / s, args)
                try:
                    srv.start()
                    info["cmds"] = srv.cmds
                    info["pids"] = {"server": srv.pids(), "other": srv.other_pids()}
                    info["prefill"] = prefill(srv, args, ds)
                    if srv.is_weft:
                        info["sync"] = weft_sync(srv, args)
                        info["stats_after_prefill"] = srv_weft_stats(srv, args)
                    time.sleep(args.settle)
                    for job in jobs:
                        try:
                            info["jobs"][job.name] = run_job(srv, job, args, ds)
                        except Exception as e:  # noqa: BLE001
                            log(f"{s}: {job.name} FAILED: {e}")
                            info["jobs"][job.name] = {"failed": str(e)[:500]}
                            if not srv.alive():
                                raise RuntimeError(f"server died: {e}\n{srv.log_tail()}") from e
                            if isinstance(e, benchlib.Stalled):
                                raise  # a hung server: the next jobs would hang too
                        time.sleep(args.settle)
                    if s in profile_servers:
                        info["profiles"] = {}
                        for job in jobs:
                            if not job.profile:
                                continue
                            r = run_job(srv, job, args, ds, profile=True)
                            info["profiles"][job.name] = r.pop("profile")
                            if ok(info["jobs"].get(job.name)):
                                info["jobs"][job.name]["profiled_run"] = r
                            time.sleep(args.settle)
                    info["disk_usage_bytes"] = srv.disk_usage()
                    if srv.is_weft:
                        info["weft_stats"] = srv_weft_stats(srv, args)
                except Exception as e:  # noqa: BLE001
                    msg = str(e)
                    tail = srv.log_tail()
                    log(f"{s}: FAILED: {msg}" + (f"\n--- server log tail ---\n{tail}" if tail else ""))
                    info["error"] = msg.splitlines()[0][:300] if msg else type(e).__name__
                    info["error_detail"] = msg[:4000]
                    info["log_tail"] = tail
                    rc = 1
                finally:
                    srv.stop()
                    if isinstance(srv, Server) and srv.proc is not None:
                        info["exit_code"] = srv.proc.returncode
                    if not args.keep:
                        # One server's volume at a time on disk (ec42 keeps 1.5x the data).
                        shutil.rmtree(srv.dir, ignore_errors=True)
    except KeyboardInterrupt:
        log("interrupted; writing partial results")
        meta["interrupted"] = True
        rc = 130
    finally:
        benchlib.finish_run(run_dir, args.keep)

    md = render_markdown(meta, results, datasets, servers, jobs)
    prof_md = render_profiles(results)
    if args.profile and perf_problem:
        prof_md = f"--profile requested but {perf_problem}\n"
    if prof_md:
        md += "\n" + prof_md
    benchlib.write_results(args, "nbd-compare", now, q, meta, results, md)
    return rc


if __name__ == "__main__":
    sys.exit(main())
