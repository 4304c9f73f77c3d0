#!/usr/bin/env python3
"""Side-by-side NBD benchmark: weft vs qemu-nbd (raw file, cache=none, aio=native)
vs nbdkit's memory plugin (the ceiling: a server that does no I/O at all).

Runs the same fio jobs (ioengine=nbd) against every server, samples each
server's CPU use over the measured window, optionally profiles weft with perf,
and prints a markdown table with the weft/qemu-nbd ratio and whether each goal
is met.  Raw results go to bench/results/ (gitignored) as JSON + markdown.

Python 3.11 standard library only.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import atexit
import datetime as dt
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
ALL_SERVERS = ["weft", "qemu-nbd", "nbdkit"]
SERVER_TITLES = {"weft": "weft", "qemu-nbd": "qemu-nbd", "nbdkit": "nbdkit-memory"}

# --------------------------------------------------------------------------
# Jobs
# --------------------------------------------------------------------------


@dataclass
class Job:
    name: str
    title: str
    rw: str
    bs: str
    iodepth: int
    fsync: bool = False
    sustained: bool = False  # runtime = --sustained instead of --runtime
    # goal: (ratio threshold, "ge" on throughput | "le" on latency)
    goal: tuple[float, str] | None = None
    profile: bool = False  # profiled with --profile

    @property
    def is_write(self) -> bool:
        return "write" in self.rw

    @property
    def is_seq(self) -> bool:
        return not self.rw.startswith("rand")


# Order: reads first (on the prefilled volume), then writes, the 60 s
# sustained randwrite last so it runs with the write path already warm/full.
JOBS = [
    Job("randread-qd1", "4k randread QD1", "randread", "4k", 1),
    Job("randread-qd32", "4k randread QD32", "randread", "4k", 32, goal=(1.0, "ge"), profile=True),
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
# Helpers
# --------------------------------------------------------------------------


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_size(s: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", s, re.I)
    if not m:
        raise argparse.ArgumentTypeError(f"bad size {s!r}")
    mult = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * mult)


def human_size(n: int) -> str:
    for unit, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{unit}"
    return str(n)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server did not listen on 127.0.0.1:{port} within {timeout:.0f}s")


def proc_cpu_ticks(pid: int) -> int | None:
    """utime+stime (all threads) of pid, in clock ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])  # fields 14, 15
    except (OSError, IndexError, ValueError):
        return None


def tree_cpu_ticks(root: int) -> int | None:
    """utime+stime of root and all its descendants (fio forks a process per job;
    a server might fork helpers).  None if root is gone."""
    stats: dict[int, tuple[int, int]] = {}  # pid -> (ppid, ticks)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                rest = f.read().rsplit(")", 1)[1].split()
            stats[int(d)] = (int(rest[1]), int(rest[11]) + int(rest[12]))
        except (OSError, IndexError, ValueError):
            pass
    if root not in stats:
        return None
    children: dict[int, list[int]] = {}
    for pid, (ppid, _t) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        total += stats[pid][1]
        todo.extend(children.get(pid, []))
    return total


def host_busy_over(seconds: float, exclude_pid: int | None = None) -> float:
    """Busy cores on the whole host over a short interval, minus exclude_pid's share."""
    h0, e0, t0 = host_cpu(), tree_cpu_ticks(exclude_pid) if exclude_pid else 0, time.monotonic()
    time.sleep(seconds)
    h1, e1, t1 = host_cpu(), tree_cpu_ticks(exclude_pid) if exclude_pid else 0, time.monotonic()
    busy = (h1[0] - h0[0]) / max(1, h1[1] - h0[1]) * (os.cpu_count() or 1)
    if e0 is not None and e1 is not None:
        busy -= (e1 - e0) / CLK_TCK / (t1 - t0)
    return max(0.0, busy)


def wait_for_server_idle(args: argparse.Namespace, what: str, server_pid: int) -> float:
    """Wait (up to --drain-wait s) until the server itself is idle (< 0.1 cores), e.g.
    weft destaging/GC-ing what the previous job wrote; returns its last CPU sample."""
    deadline = time.monotonic() + args.drain_wait
    t0, c0 = time.monotonic(), tree_cpu_ticks(server_pid)
    time.sleep(1.0)
    cpu = ((tree_cpu_ticks(server_pid) or 0) - (c0 or 0)) / CLK_TCK / (time.monotonic() - t0)
    started = time.monotonic()
    while cpu > 0.1 and time.monotonic() < deadline:
        t0, c0 = time.monotonic(), tree_cpu_ticks(server_pid)
        time.sleep(1.0)
        cpu = ((tree_cpu_ticks(server_pid) or 0) - (c0 or 0)) / CLK_TCK / (time.monotonic() - t0)
    waited = time.monotonic() - started
    if waited > 0.5:
        log(f"waited {waited:.0f}s for the server to go idle before {what} (now {cpu:.2f} cores)")
    return cpu


def wait_for_quiet(args: argparse.Namespace, what: str, server_pid: int | None = None) -> float:
    """Wait (up to --wait-idle s) until the host, apart from the server under test,
    is nearly idle; returns the last busy sample (cores)."""
    busy = host_busy_over(1.0, server_pid)
    deadline = time.monotonic() + args.wait_idle
    warned = False
    while busy > args.idle_threshold and time.monotonic() < deadline:
        if not warned:
            log(f"host busy ({busy:.2f} cores) before {what}; waiting up to {args.wait_idle:.0f}s for quiet")
            warned = True
        busy = host_busy_over(1.0, server_pid)
    if busy > args.idle_threshold:
        log(f"warning: host still busy ({busy:.2f} cores, not ours) before {what}; results may be noisy")
    return busy


def host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals) - idle, sum(vals)


def block_dev_name(path: Path) -> str | None:
    """Kernel name (as in /proc/diskstats) of the block device holding path."""
    try:
        st = os.stat(path)
        name = os.path.basename(os.path.realpath(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}"))
        return name or None
    except OSError:
        return None


def disk_stats(dev: str | None) -> dict | None:
    """Cumulative counters of dev from /proc/diskstats."""
    if not dev:
        return None
    try:
        with open("/proc/diskstats") as f:
            for line in f:
                x = line.split()
                if x[2] == dev:
                    d = {"rd_ios": int(x[3]), "rd_bytes": int(x[5]) * 512,
                         "wr_ios": int(x[7]), "wr_bytes": int(x[9]) * 512}
                    if len(x) >= 20:
                        d["flushes"] = int(x[18])
                    return d
    except (OSError, ValueError, IndexError):
        pass
    return None


def disk_rates(d0: dict | None, d1: dict | None, wall: float) -> dict | None:
    if not d0 or not d1 or wall <= 0:
        return None
    r = {k: (d1[k] - d0[k]) / wall for k in d0 if k in d1}
    return {"read_MBps": r["rd_bytes"] / 1e6, "write_MBps": r["wr_bytes"] / 1e6,
            "read_iops": r["rd_ios"], "write_iops": r["wr_ios"], "flush_per_s": r.get("flushes")}


def run_out(cmd: list[str] | str, shell: bool = False) -> str:
    try:
        return subprocess.run(cmd, shell=shell, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"<{e}>"


def fs_type(path: Path) -> str:
    """Filesystem type of the mount holding path (longest mount-point prefix)."""
    path = path.resolve()
    best, typ = "", "?"
    with open("/proc/mounts") as f:
        for line in f:
            parts = line.split()
            mnt = parts[1].replace("\\040", " ")
            if (str(path) == mnt or str(path).startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, typ = mnt, parts[2]
    return typ


def machine_info() -> dict:
    model = "?"
    mem = "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
        with open("/proc/meminfo") as f:
            mem = f.readline().split(":", 1)[1].strip()
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "kernel": platform.release(),
        "cpu_model": model,
        "mem_total": mem,
        "hostname": platform.node(),
    }


def git_info() -> dict:
    rev = run_out(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    dirty = run_out(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"])
    subject = run_out(["git", "-C", str(REPO), "log", "-1", "--format=%s"])
    return {"revision": rev, "dirty": bool(dirty), "subject": subject}


# --------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------

_live: list[subprocess.Popen] = []


def _cleanup_live() -> None:
    for p in list(_live):
        stop_proc(p)


atexit.register(_cleanup_live)


def _sig_handler(signum, _frame):
    # Unwind like Ctrl-C: stop the servers, write partial results.
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _sig_handler)
signal.signal(signal.SIGHUP, _sig_handler)


def stop_proc(p: subprocess.Popen, timeout: float = 15) -> None:
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        except ProcessLookupError:
            pass
    if p in _live:
        _live.remove(p)


@dataclass
class Server:
    kind: str
    dir: Path
    size: int
    args: argparse.Namespace
    port: int = 0
    proc: subprocess.Popen | None = None
    uri: str = ""
    logfile: Path | None = None
    cmd: list[str] = field(default_factory=list)
    ready_line: threading.Event = field(default_factory=threading.Event)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.logfile = self.dir / "server.log"
        a = self.args
        if self.kind == "weft":
            api_port = free_port()
            data = self.dir / "data"
            self.cmd = [str(a.weft_bin), "serve", "--data-dir", str(data),
                        "--nbd-listen", f"127.0.0.1:{self.port}",
                        "--api-listen", f"127.0.0.1:{api_port}",
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
        log(f"{self.kind}: starting: {shlex.join(self.cmd)}")
        logf = open(self.logfile, "ab")
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=logf,
                                     stdin=subprocess.DEVNULL, cwd=self.dir)
        logf.close()
        _live.append(self.proc)
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
        log(f"{self.kind}: pid {self.pid} listening, {self.uri}")

    def _pump_stdout(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.dir / "server.stdout", "ab") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if line.strip() == b"ready" or line.strip().startswith(b"ready"):
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
        if self.kind == "nbdkit":
            return None
        total = 0
        for root, _dirs, files in os.walk(self.dir):
            for fn in files:
                try:
                    total += os.stat(os.path.join(root, fn)).st_blocks * 512
                except OSError:
                    pass
        return total

    def stop(self) -> None:
        if self.proc is not None:
            stop_proc(self.proc)


# --------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------


def fio_base(uri: str, name: str) -> list[str]:
    return ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}",
            "--output-format=json", "--randrepeat=0", "--group_reporting=1"]


def load_fio_json(path: Path) -> dict:
    s = path.read_text()
    i = s.find("{")  # fio may print "connected to NBD server" before the JSON
    if i < 0:
        raise RuntimeError(f"no JSON in fio output {path}")
    return json.loads(s[i:])


def prefill(srv: Server, args: argparse.Namespace) -> dict:
    out = srv.dir / "fio-prefill.json"
    cmd = fio_base(srv.uri, "prefill") + [
        "--rw=write", "--bs=1M", "--iodepth=8", f"--size={srv.size}",
        "--refill_buffers=1", f"--output={out}"]
    log(f"{srv.kind}: prefill {human_size(srv.size)} with random data")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.size / (20 << 20) + 300)
    el = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"prefill failed ({p.returncode}): {p.stderr.strip()[-500:]}")
    d = load_fio_json(out)["jobs"][0]
    mbps = d["write"]["bw_bytes"] / 1e6
    log(f"{srv.kind}: prefill done in {el:.1f}s ({mbps:.0f} MB/s)")
    return {"seconds": round(el, 2), "MBps": round(mbps, 1)}


def summarize_fio(d: dict, job: Job) -> dict:
    j = d["jobs"][0]
    side = j["write"] if job.is_write else j["read"]
    clat = side["clat_ns"]
    pct = clat.get("percentile", {})
    r = {
        "iops": side["iops"],
        "bw_MBps": side["bw_bytes"] / 1e6,
        "clat_mean_us": clat["mean"] / 1e3,
        "clat_p50_us": pct.get("50.000000", 0) / 1e3,
        "clat_p99_us": pct.get("99.000000", 0) / 1e3,
        "clat_max_us": clat.get("max", 0) / 1e3,
        "total_ios": side["total_ios"],
        "fio_usr_cpu_pct": j.get("usr_cpu"),
        "fio_sys_cpu_pct": j.get("sys_cpu"),
        "error": j.get("error", 0),
    }
    if job.fsync:
        s = j.get("sync", {}).get("lat_ns", {})
        spct = s.get("percentile", {})
        r["flush_count"] = j.get("sync", {}).get("total_ios", 0)
        r["flush_mean_us"] = s.get("mean", 0) / 1e3
        r["flush_p50_us"] = spct.get("50.000000", 0) / 1e3
        r["flush_p99_us"] = spct.get("99.000000", 0) / 1e3
        # Latency of one durable write = write completion + flush completion.
        r["lat_mean_us"] = r["clat_mean_us"] + r["flush_mean_us"]
        r["lat_p99_us"] = r["clat_p99_us"] + r["flush_p99_us"]  # upper-bound-ish
        r["cycle_us"] = 1e6 / r["iops"] if r["iops"] else None
    else:
        r["lat_mean_us"] = r["clat_mean_us"]
        r["lat_p99_us"] = r["clat_p99_us"]
    return r


def run_profile(srv: Server, seconds: float, out: Path, args: argparse.Namespace) -> dict:
    data = out.with_suffix(".perf.data")
    cmd = ["perf", "record", "-F", str(args.perf_freq), "-g", "-p", str(srv.pid), "-o", str(data)]
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


def run_job(srv: Server, job: Job, args: argparse.Namespace, profile: bool = False) -> dict:
    runtime = args.sustained if job.sustained else args.runtime
    ramp = args.ramp
    suffix = "-profile" if profile else ""
    out = srv.dir / f"fio-{job.name}{suffix}.json"
    cmd = fio_base(srv.uri, job.name) + [
        f"--rw={job.rw}", f"--bs={job.bs}", f"--iodepth={job.iodepth}",
        "--time_based=1", f"--runtime={runtime}", f"--ramp_time={ramp}", f"--output={out}"]
    if not job.is_seq:
        cmd.append("--norandommap=1")
    if job.is_write:
        cmd.append("--refill_buffers=1")  # incompressible, never-repeating data
    if job.fsync:
        cmd.append("--fsync=1")  # nbd engine: NBD_CMD_FLUSH after every write
    server_idle = wait_for_server_idle(args, f"{srv.kind} {job.name}", srv.pid)
    busy_before = wait_for_quiet(args, f"{srv.kind} {job.name}", srv.pid)
    log(f"{srv.kind}: {job.name}{' (profiling)' if profile else ''}: ramp {ramp}s + {runtime}s")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Sample the server's CPU over the measured window only (after ramp).
        # fio needs a moment to connect; that slack goes to the ramp side.
        time.sleep(ramp + min(0.3, ramp / 4))
        c0, f0, h0, t0 = tree_cpu_ticks(srv.pid), tree_cpu_ticks(p.pid), host_cpu(), time.monotonic()
        d0 = disk_stats(args.disk_dev)
        prof = None
        if profile:
            prof = run_profile(srv, min(args.profile_seconds, max(1.0, runtime - 1.0)),
                               srv.dir / f"{job.name}", args)
        remaining = runtime - (time.monotonic() - t0) - 0.3
        if remaining > 0:
            time.sleep(remaining)
        c1, f1, h1, t1 = tree_cpu_ticks(srv.pid), tree_cpu_ticks(p.pid), host_cpu(), time.monotonic()
        d1 = disk_stats(args.disk_dev)
        stdout, stderr = p.communicate(timeout=runtime + ramp + 120)
    except BaseException:
        p.kill()
        p.wait()
        raise
    if p.returncode != 0:
        raise RuntimeError(f"fio {job.name} failed ({p.returncode}): {stderr.strip()[-800:]}")
    r = summarize_fio(load_fio_json(out), job)
    wall = t1 - t0
    if c0 is not None and c1 is not None and wall > 0:
        r["server_cpu_cores"] = (c1 - c0) / CLK_TCK / wall
    else:
        r["server_cpu_cores"] = None
    r["fio_cpu_cores"] = (f1 - f0) / CLK_TCK / wall if wall > 0 and f0 is not None and f1 is not None else None
    if h1[1] > h0[1]:
        r["host_busy_cores"] = (h1[0] - h0[0]) / (h1[1] - h0[1]) * (os.cpu_count() or 1)
        # Whatever is neither the server nor fio: other users of the machine,
        # kernel threads, softirq time not charged to either process.
        r["other_cpu_cores"] = max(0.0, r["host_busy_cores"] - (r["server_cpu_cores"] or 0)
                                   - (r["fio_cpu_cores"] or 0))
    r["host_busy_before"] = busy_before
    r["server_cpu_before"] = server_idle
    # Whole-device I/O during the window (includes other users of the disk).
    r["disk"] = disk_rates(d0, d1, wall)
    r["runtime_s"] = runtime
    r["ramp_s"] = ramp
    r["fio_cmd"] = shlex.join(cmd)
    if prof is not None:
        r["profile"] = prof
    unit = f"{r['bw_MBps']:.0f} MB/s" if job.is_seq else f"{r['iops']:.0f} IOPS"
    cpu = r["server_cpu_cores"]
    log(f"{srv.kind}: {job.name}: {unit}, lat mean {r['lat_mean_us']:.0f}us p99 {r['lat_p99_us']:.0f}us, "
        f"server cpu {cpu * 100 if cpu is not None else float('nan'):.0f}%")
    if not srv.alive():
        raise RuntimeError(f"{srv.kind} died during {job.name}")
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


def cell(job: Job, r: dict | None) -> str:
    if r is None:
        return "n/a"
    if "failed" in r:
        return "FAILED"
    cpu = r.get("server_cpu_cores")
    cpu_s = f"{cpu * 100:.0f}%" if cpu is not None else "?"
    return f"{fmt_tput(job, r)} · {fmt_us(r['lat_mean_us'])}/{fmt_us(r['lat_p99_us'])} · {cpu_s}"


def ratio_for(job: Job, w: dict | None, q: dict | None) -> float | None:
    if not w or not q or "failed" in w or "failed" in q:
        return None
    if job.goal and job.goal[1] == "le":
        return w["lat_mean_us"] / q["lat_mean_us"] if q["lat_mean_us"] else None
    key = "bw_MBps" if job.is_seq else "iops"
    return w[key] / q[key] if q[key] else None


def render_markdown(meta: dict, results: dict, servers: list[str], jobs: list[Job]) -> str:
    L = []
    m = meta["machine"]
    L.append(f"### weft NBD comparison — {meta['date']}")
    L.append("")
    L.append(f"git `{meta['git']['revision'][:12]}`{' (dirty)' if meta['git']['dirty'] else ''} · "
             f"{m['nproc']} CPU {m['cpu_model']} · kernel {m['kernel']} · "
             f"volume {human_size(meta['params']['size'])} prefilled with random data · "
             f"{meta['params']['runtime']}s/point after {meta['params']['ramp']}s ramp, "
             f"sustained {meta['params']['sustained']}s · fio {meta['versions'].get('fio', '?')} · "
             f"nice {meta['params'].get('nice', 0)}")
    L.append("")
    L.append("Cell: throughput · mean/p99 latency · server CPU (100% = one core). "
             "Flush row latency = write + flush.")
    L.append("")
    cols = [SERVER_TITLES[s] for s in servers]
    have_ratio = "weft" in servers and "qemu-nbd" in servers
    hdr = ["job"] + cols + (["weft/qemu-nbd", "goal", "met"] if have_ratio else [])
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for job in jobs:
        row = [job.title]
        for s in servers:
            row.append(cell(job, results.get(s, {}).get("jobs", {}).get(job.name)))
        if have_ratio:
            w = results.get("weft", {}).get("jobs", {}).get(job.name)
            q = results.get("qemu-nbd", {}).get("jobs", {}).get(job.name)
            ratio = ratio_for(job, w, q)
            if job.goal:
                thr, kind = job.goal
                goal = f"lat ≤ {thr:.1f}x" if kind == "le" else f"≥ {thr:.1f}x"
                if ratio is None:
                    met = "?"
                else:
                    met = "yes" if (ratio <= thr if kind == "le" else ratio >= thr) else "**no**"
            else:
                goal, met = "", ""
            rs = "-" if ratio is None else f"{ratio:.2f}x" + (" (lat)" if job.goal and job.goal[1] == "le" else "")
            row += [rs, goal, met]
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    # CPU detail table: how loaded the 2-core box was.
    L.append("CPU detail (cores): server / fio client / other (not server, not fio: "
             "other processes, kernel threads) — host has "
             f"{m['nproc']} cores; 'other' > 0.2 means the run was disturbed. "
             f"Then disk read/write MB/s of the whole device `{meta['params'].get('disk_dev')}` "
             "(all users; nbdkit does no disk I/O, so anything in its column is someone else).")
    L.append("")
    L.append("| job | " + " | ".join(cols) + " |")
    L.append("|---|" + "---:|" * len(cols))
    for job in jobs:
        row = [job.title]
        for s in servers:
            r = results.get(s, {}).get("jobs", {}).get(job.name)
            if not r or "failed" in r:
                row.append("-")
                continue
            sc = r.get("server_cpu_cores")
            fc = r.get("fio_cpu_cores")
            oc = r.get("other_cpu_cores")
            f = lambda v: "?" if v is None else f"{v:.2f}"  # noqa: E731
            dk = r.get("disk")
            dks = f" · {dk['read_MBps']:.0f}/{dk['write_MBps']:.0f}" if dk else ""
            row.append(f"{f(sc)} / {f(fc)} / {f(oc)}" + (" ⚠" if oc is not None and oc > 0.2 else "") + dks)
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    notes = []
    for s in servers:
        info = results.get(s, {})
        if info.get("error"):
            notes.append(f"- **{SERVER_TITLES[s]} failed**: {info['error']}")
        for jn, r in info.get("jobs", {}).items():
            if r and "failed" in r:
                notes.append(f"- {SERVER_TITLES[s]} {jn} failed: {r['failed']}")
        ws = info.get("weft_stats")
        if ws is not None:
            txt = json.dumps(ws, separators=(",", ":")) if not isinstance(ws, str) else ws
            notes.append(f"- weft stats at end: `{txt[:600]}`")
        if info.get("prefill"):
            pf = info["prefill"]
            du = info.get("disk_usage_bytes")
            notes.append(f"- {SERVER_TITLES[s]}: prefill {pf['MBps']:.0f} MB/s"
                         + (f"; disk use at end {du / 2**30:.2f} GiB" if du is not None else ""))
    if notes:
        L.append("Notes:")
        L.extend(notes)
        L.append("")
    return "\n".join(L)


def render_profiles(results: dict) -> str:
    L = []
    for s, info in results.items():
        for jn, prof in info.get("profiles", {}).items():
            L.append(f"#### perf profile: {SERVER_TITLES[s]} during {jn}")
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


def weft_stats(srv: Server, args: argparse.Namespace) -> dict | str:
    """`weft stats --json` of the running server (data reduction, space, write amplification)."""
    try:
        p = subprocess.run([str(args.weft_bin), "--data-dir", str(srv.dir / "data"), "stats", "--json"],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            return f"weft stats failed ({p.returncode}): {p.stderr.strip()[-300:]}"
        return json.loads(p.stdout)
    except Exception as e:  # noqa: BLE001
        return f"weft stats failed: {e}"


def build_weft(args: argparse.Namespace) -> None:
    log("building weft: cargo build --release -p weft")
    p = subprocess.run(["cargo", "build", "--release", "-p", "weft"], cwd=REPO,
                       capture_output=True, text=True,
                       preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 10))  # build politely
    if p.returncode != 0:
        raise RuntimeError("cargo build failed:\n" + p.stderr.strip()[-2000:])
    if not Path(args.weft_bin).exists():
        raise RuntimeError(f"{args.weft_bin} not found after build")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", default=",".join(ALL_SERVERS),
                    help="comma-separated subset of weft,qemu-nbd,nbdkit (default: all)")
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
                    help="servers to profile with --profile (default weft)")
    ap.add_argument("--profile-seconds", type=float, default=10)
    ap.add_argument("--perf-freq", type=int, default=999)
    ap.add_argument("--perf-event", default=None, help="perf event (default cycles, or cpu-clock without PMU)")
    ap.add_argument("--no-build", action="store_true", help="don't run cargo build")
    ap.add_argument("--weft-bin", type=Path, default=REPO / "target" / "release" / "weft")
    ap.add_argument("--weft-args", default="", help="extra args for `weft serve` (e.g. data reduction flags)")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="before each job wait up to this many seconds for the host to go quiet "
                         "(default 10; --quick 0)")
    ap.add_argument("--drain-wait", type=float, default=None,
                    help="before each job wait up to this many seconds for the server itself to go idle "
                         "(background destage/GC of the previous job; default 60; --quick 5)")
    ap.add_argument("--idle-threshold", type=float, default=0.25,
                    help="host busy cores counted as quiet (default 0.25)")
    ap.add_argument("--nice", type=int, default=-10 if os.geteuid() == 0 else 0,
                    help="nice value for the servers and fio (default -10 as root, else 0): "
                         "on a shared box this keeps other work from stealing the benchmark's CPU")
    ap.add_argument("--keep", action="store_true", help="keep the per-run temp dir (volumes, logs)")
    ap.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    ap.add_argument("--label", default="", help="label added to the results file name")
    args = ap.parse_args()

    q = args.quick
    args.size = args.size or ((256 << 20) if q else (4 << 30))
    args.runtime = args.runtime if args.runtime is not None else (2 if q else 15)
    args.ramp = args.ramp if args.ramp is not None else (1 if q else 5)
    args.sustained = args.sustained if args.sustained is not None else (4 if q else 60)
    args.settle = args.settle if args.settle is not None else (0.5 if q else 3)
    args.drain_wait = args.drain_wait if args.drain_wait is not None else (5 if q else 60)
    args.wait_idle = args.wait_idle if args.wait_idle is not None else (0 if q else 10)

    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    servers = ["nbdkit" if s in ("nbdkit-memory", "memory") else s for s in servers]
    bad = [s for s in servers if s not in ALL_SERVERS]
    if bad:
        ap.error(f"unknown servers {bad}; choose from {ALL_SERVERS}")
    if args.jobs:
        names = [j.strip() for j in args.jobs.split(",") if j.strip()]
        bad = [n for n in names if n not in JOB_BY_NAME]
        if bad:
            ap.error(f"unknown jobs {bad}; choose from {list(JOB_BY_NAME)}")
        jobs = [j for j in JOBS if j.name in names]
    else:
        jobs = list(JOBS)
    profile_servers = set(s.strip() for s in args.profile_servers.split(",")) if args.profile else set()

    for tool in ["fio"] + [{"qemu-nbd": "qemu-nbd", "nbdkit": "nbdkit"}[s] for s in servers if s != "weft"]:
        if not shutil.which(tool):
            log(f"error: {tool} not found")
            return 2

    if args.nice:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by servers and fio
        except OSError as e:
            log(f"warning: cannot set nice {args.nice}: {e}")
            args.nice = 0
    args.workdir.mkdir(parents=True, exist_ok=True)
    fst = fs_type(args.workdir)
    if fst in ("tmpfs", "ramfs"):
        log(f"warning: --workdir {args.workdir} is on {fst}; qemu-nbd cache=none (O_DIRECT) will fail "
            "and weft's durability cost is not measured. Use a real disk (default /var/tmp/weft-bench).")
    args.disk_dev = block_dev_name(args.workdir)
    st = os.statvfs(args.workdir)
    free = st.f_bavail * st.f_frsize
    if free < 3 * args.size:
        log(f"warning: only {free / 2**30:.1f} GiB free in {args.workdir}")

    perf_problem = None
    if args.profile:
        perf_problem = check_perf(args)
        if perf_problem:
            log(f"--profile: {perf_problem}; profiling disabled")
            profile_servers = set()
        else:
            log(f"--profile: perf event {args.perf_event or 'cycles'}")

    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=args.workdir))
    now = dt.datetime.now().astimezone()
    meta = {
        "date": now.isoformat(timespec="seconds"),
        "git": git_info(),
        "machine": machine_info(),
        "versions": {
            "fio": run_out(["fio", "--version"]),
            "qemu-nbd": run_out(["qemu-nbd", "--version"]).splitlines()[0] if shutil.which("qemu-nbd") else None,
            "nbdkit": run_out(["nbdkit", "--version"]),
        },
        "params": {"servers": servers, "jobs": [j.name for j in jobs], "size": args.size,
                   "runtime": args.runtime, "ramp": args.ramp, "sustained": args.sustained,
                   "settle": args.settle, "drain_wait": args.drain_wait, "quick": q, "workdir": str(run_dir), "workdir_fs": fst,
                   "weft_args": args.weft_args, "nice": args.nice, "disk_dev": args.disk_dev, "profile": sorted(profile_servers),
                   "perf_problem": perf_problem, "argv": sys.argv[1:]},
    }
    results: dict[str, dict] = {}
    try:
        for s in servers:
            info: dict = {"jobs": {}}
            results[s] = info
            srv = Server(s, run_dir / s, args.size, args)
            try:
                if s == "weft":
                    if not args.no_build:
                        build_weft(args)
                    # Run a private copy: others may rebuild target/release/weft mid-run,
                    # which would leave perf with "weft (deleted)" and no symbols.
                    snap = run_dir / "weft-bin"
                    shutil.copy2(args.weft_bin, snap)
                    args.weft_bin = snap
                    info["binary_sha256"] = run_out(["sha256sum", str(snap)]).split()[0]
                srv.start()
                info["cmd"] = shlex.join(srv.cmd)
                info["pid"] = srv.pid
                info["prefill"] = prefill(srv, args)
                time.sleep(args.settle)
                for job in jobs:
                    try:
                        info["jobs"][job.name] = run_job(srv, job, args)
                    except Exception as e:  # noqa: BLE001
                        log(f"{s}: {job.name} FAILED: {e}")
                        info["jobs"][job.name] = {"failed": str(e)[:500]}
                        if not srv.alive():
                            raise RuntimeError(f"server died: {e}\n{srv.log_tail()}") from e
                    time.sleep(args.settle)
                if s in profile_servers:
                    info["profiles"] = {}
                    for job in jobs:
                        if not job.profile:
                            continue
                        r = run_job(srv, job, args, profile=True)
                        info["profiles"][job.name] = r.pop("profile")
                        info["jobs"][job.name]["profiled_run"] = r
                        time.sleep(args.settle)
                info["disk_usage_bytes"] = srv.disk_usage()
                if s == "weft":
                    info["weft_stats"] = weft_stats(srv, args)
            except Exception as e:  # noqa: BLE001
                msg = str(e)
                tail = srv.log_tail() if srv.logfile else ""
                log(f"{s}: FAILED: {msg}" + (f"\n--- server log tail ---\n{tail}" if tail else ""))
                info["error"] = msg.splitlines()[0][:300] if msg else type(e).__name__
                info["error_detail"] = msg[:4000]
                info["log_tail"] = tail
            finally:
                srv.stop()
                if srv.proc is not None:
                    info["exit_code"] = srv.proc.returncode
    except KeyboardInterrupt:
        log("interrupted; writing partial results")
        meta["interrupted"] = True
    finally:
        if not args.keep:
            # keep logs of failed servers in the results JSON, drop the volumes
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            log(f"kept {run_dir}")

    md = render_markdown(meta, results, servers, jobs)
    prof_md = render_profiles(results)
    if args.profile and perf_problem:
        prof_md = f"--profile requested but {perf_problem}\n"
    args.out.mkdir(parents=True, exist_ok=True)
    stem = now.strftime("nbd-compare-%Y%m%d-%H%M%S") + (f"-{args.label}" if args.label else "") + ("-quick" if q else "")
    (args.out / f"{stem}.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    (args.out / f"{stem}.md").write_text(md + ("\n" + prof_md if prof_md else "") + "\n")
    print(md)
    if prof_md:
        print(prof_md)
    log(f"results: {args.out / (stem + '.json')} and .md")
    failed = [s for s in servers if results.get(s, {}).get("error")]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
