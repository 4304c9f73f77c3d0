"""Helpers shared by the benchmarks in bench/ (nbd-compare.py, cluster-compare.py,
gc-memory.py): logging, sizes, ports, CPU and disk sampling from /proc, machine and git
info, a registry of the processes a script started (stopped by PID at exit, on Ctrl-C,
SIGTERM or SIGHUP), fio helpers, and a weft cluster (etcd + d.nodes + one c.node).

Python 3.11 standard library only.  Import with the bench directory on sys.path.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import re
import shlex
import signal
import socket
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")

# --------------------------------------------------------------------------
# Small helpers
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


def gib(n: float | None) -> str:
    return "-" if n is None else f"{n / 2**30:.2f} GiB"


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


def run_out(cmd: list[str] | str, shell: bool = False) -> str:
    try:
        return subprocess.run(cmd, shell=shell, capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception as e:  # noqa: BLE001
        return f"<{e}>"


# --------------------------------------------------------------------------
# CPU, memory and disk from /proc
# --------------------------------------------------------------------------


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


def cpu_ticks(pids: list[int]) -> int:
    """Sum of tree_cpu_ticks over pids (a gone process counts 0)."""
    return sum(tree_cpu_ticks(p) or 0 for p in pids)


def cores_over(pids: list[int], seconds: float) -> float:
    t0, c0 = time.monotonic(), cpu_ticks(pids)
    time.sleep(seconds)
    return (cpu_ticks(pids) - c0) / CLK_TCK / (time.monotonic() - t0)


def host_cpu() -> tuple[int, int]:
    """(busy, total) jiffies from /proc/stat."""
    with open("/proc/stat") as f:
        vals = [int(x) for x in f.readline().split()[1:]]
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals) - idle, sum(vals)


def host_busy_excluding(pids: list[int], seconds: float) -> float:
    """Busy cores on the whole host over `seconds`, minus what `pids` (and their children) used."""
    h0, e0, t0 = host_cpu(), cpu_ticks(pids), time.monotonic()
    time.sleep(seconds)
    h1, e1, t1 = host_cpu(), cpu_ticks(pids), time.monotonic()
    busy = (h1[0] - h0[0]) / max(1, h1[1] - h0[1]) * (os.cpu_count() or 1)
    return max(0.0, busy - (e1 - e0) / CLK_TCK / (t1 - t0))


def rss_bytes(pid: int) -> int | None:
    """VmRSS of pid from /proc/PID/status."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


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


def disk_written(d0: dict | None, d1: dict | None) -> int | None:
    """Bytes written to the device between two disk_stats samples."""
    if not d0 or not d1:
        return None
    return d1["wr_bytes"] - d0["wr_bytes"]


def dir_usage(path: Path) -> int:
    """Allocated bytes of every file under path."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for fn in files:
            try:
                total += os.lstat(os.path.join(root, fn)).st_blocks * 512
            except OSError:
                pass
    return total


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
# Processes we started: stopped by PID, also on exit, Ctrl-C, SIGTERM, SIGHUP
# --------------------------------------------------------------------------

_live: list[subprocess.Popen] = []


def register(p: subprocess.Popen) -> None:
    _live.append(p)


def stop_proc(p: subprocess.Popen, timeout: float = 15) -> None:
    """SIGTERM, SIGKILL after `timeout`, and forget p."""
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


def kill9(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
        p.wait()
    if p in _live:
        _live.remove(p)


def stop_all() -> None:
    """Stop every registered process, last started first (c.node before d.nodes before etcd)."""
    for p in reversed(list(_live)):
        stop_proc(p, 30)


atexit.register(stop_all)


def _sig_handler(signum, _frame):
    # Unwind like Ctrl-C: the scripts stop their servers and write partial results.
    raise KeyboardInterrupt(f"signal {signum}")


signal.signal(signal.SIGTERM, _sig_handler)
signal.signal(signal.SIGHUP, _sig_handler)


class Proc:
    """A child process with stderr to DIR/NAME.log, stdout to DIR/NAME.stdout, and an event
    set when it prints a line starting with "ready"."""

    def __init__(self, name: str, cmd: list[str], dir: Path):
        self.name = name
        self.cmd = cmd
        self.dir = dir
        self.logfile = dir / f"{name}.log"
        self.ready = threading.Event()
        dir.mkdir(parents=True, exist_ok=True)
        log(f"{name}: {shlex.join(cmd)}")
        self.started = time.monotonic()
        with open(self.logfile, "ab") as logf:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=logf,
                                         stdin=subprocess.DEVNULL, cwd=dir)
        register(self.proc)
        self.ready_at: float | None = None
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        with open(self.dir / f"{self.name}.stdout", "ab") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                if line.strip().startswith(b"ready") and not self.ready.is_set():
                    self.ready_at = time.monotonic()
                    self.ready.set()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.ready.wait(0.1):
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} before 'ready':\n"
                                   + self.log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n" + self.log_tail())

    def log_tail(self, n: int = 20) -> str:
        try:
            return "\n".join(self.logfile.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self, timeout: float = 30) -> None:
        stop_proc(self.proc, timeout)

    def kill9(self) -> None:
        kill9(self.proc)


# --------------------------------------------------------------------------
# weft CLI
# --------------------------------------------------------------------------


def weft_cli(weft_bin: Path, data_dir: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([str(weft_bin), "--data-dir", str(data_dir), *argv],
                          capture_output=True, text=True, timeout=timeout)


def weft_stats(weft_bin: Path, data_dir: Path, timeout: float = 30) -> dict | str:
    """`weft stats --json` of the server with that data dir (data reduction, space, write
    amplification, GC); a string saying why on failure."""
    try:
        p = weft_cli(weft_bin, data_dir, "stats", "--json", timeout=timeout)
        if p.returncode != 0:
            return f"weft stats failed ({p.returncode}): {p.stderr.strip()[-300:]}"
        return json.loads(p.stdout)
    except Exception as e:  # noqa: BLE001
        return f"weft stats failed: {e}"


# --------------------------------------------------------------------------
# fio
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


class Stalled(RuntimeError):
    """A watched command made no progress (its CPU and the server's stayed flat)."""


def run_watched(cmd: list[str], timeout: float, watch_pids: list[int], stall_s: float = 60,
                poll: float = 2.0) -> subprocess.CompletedProcess:
    """Run cmd (fio) to completion, but kill it and raise Stalled if it and the processes in
    watch_pids (the server) together used less than 0.02 cores for `stall_s` seconds — a hung
    server leaves fio waiting for replies forever — and TimeoutExpired after `timeout`."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    start = time.monotonic()
    hist: list[tuple[float, int]] = []  # (time, ticks of fio + watched)
    try:
        while True:
            try:
                out, err = p.communicate(timeout=poll)
                return subprocess.CompletedProcess(cmd, p.returncode, out, err)
            except subprocess.TimeoutExpired:
                pass
            now = time.monotonic()
            hist.append((now, cpu_ticks(watch_pids + [p.pid])))
            old = [h for h in hist if now - h[0] >= stall_s]
            if stall_s > 0 and old:
                t0, c0 = old[-1]
                if (hist[-1][1] - c0) / CLK_TCK / (now - t0) < 0.02:
                    raise Stalled(f"no progress for {now - t0:.0f}s (fio and the server idle): "
                                  f"{shlex.join(cmd)[:300]}")
                hist = [h for h in hist if now - h[0] < stall_s + 2 * poll]
            if now - start > timeout:
                raise subprocess.TimeoutExpired(cmd, timeout)
    except BaseException:
        p.kill()
        p.communicate()
        raise


def fio_base(uri: str, name: str) -> list[str]:
    return ["fio", f"--name={name}", "--ioengine=nbd", f"--uri={uri}",
            "--output-format=json", "--randrepeat=0", "--group_reporting=1"]


def load_fio_json(path: Path) -> dict:
    s = path.read_text()
    i = s.find("{")  # fio may print "connected to NBD server" before the JSON
    if i < 0:
        raise RuntimeError(f"no JSON in fio output {path}")
    return json.loads(s[i:])


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
        "io_bytes": side.get("io_bytes"),
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


# --------------------------------------------------------------------------
# A weft cluster: etcd + N d.nodes + one c.node
# --------------------------------------------------------------------------


class Cluster:
    """etcd + N d.nodes (zones z0..) + one c.node with one volume, vol0, in a pool of the
    given redundancy (`none`, `xN`, `k+m`).  Uses args.weft_bin, args.start_timeout and,
    if present, args.lease_ttl (d.node --lease-ttl), args.dnode_args, args.cnode_args."""

    def __init__(self, name: str, dir: Path, args: argparse.Namespace, redundancy: str,
                 dnodes: int, size: int, out_grace: str | None = None):
        self.name = self.kind = name
        self.dir = dir
        self.args = args
        self.redundancy = redundancy
        self.n_dnodes = dnodes
        self.size = size
        self.out_grace = out_grace
        self.etcd: Proc | None = None
        self.dnodes: list[Proc] = []
        self.dnode_addrs: list[str] = []
        self.cnode: Proc | None = None
        self.cdir = dir / "cnode"
        self.uri = ""
        self.etcd_url = ""
        self.cmds: dict[str, str] = {}

    def start(self) -> None:
        a = self.args
        self.dir.mkdir(parents=True, exist_ok=True)
        p1, p2 = free_port(), free_port()
        self.etcd = Proc("etcd", [
            "etcd", "--name", "e1", "--data-dir", str(self.dir / "etcd"),
            "--listen-client-urls", f"http://127.0.0.1:{p1}",
            "--advertise-client-urls", f"http://127.0.0.1:{p1}",
            "--listen-peer-urls", f"http://127.0.0.1:{p2}",
            "--initial-advertise-peer-urls", f"http://127.0.0.1:{p2}",
            "--initial-cluster", f"e1=http://127.0.0.1:{p2}"], self.dir)
        self.cmds["etcd"] = shlex.join(self.etcd.cmd)
        deadline = time.monotonic() + a.start_timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{p1}/health", timeout=1) as r:
                    if b"true" in r.read():
                        break
            except OSError:
                pass
            if not self.etcd.alive():
                raise RuntimeError("etcd exited:\n" + self.etcd.log_tail())
            if time.monotonic() > deadline:
                raise RuntimeError("etcd not healthy:\n" + self.etcd.log_tail())
            time.sleep(0.1)
        url = self.etcd_url = f"etcd://127.0.0.1:{p1}"
        lease = getattr(a, "lease_ttl", None)
        for i in range(self.n_dnodes):
            port = free_port()
            addr = f"127.0.0.1:{port}"
            d = Proc(f"dnode{i}", [str(a.weft_bin), "dnode", "--cluster", url, "--listen", addr,
                                   "--data", str(self.dir / f"dnode{i}"), "--zone", f"z{i}"]
                     + (["--lease-ttl", lease] if lease else [])
                     + shlex.split(getattr(a, "dnode_args", "") or ""), self.dir)
            self.dnodes.append(d)
            self.dnode_addrs.append(addr)
            d.wait_ready(a.start_timeout)
        self.cmds["dnode0"] = shlex.join(self.dnodes[0].cmd)
        nbd, api = free_port(), free_port()
        cmd = self.cnode_cmd(self.cdir, nbd, api)
        self.cnode = Proc("cnode", cmd, self.dir)
        self.cmds["cnode"] = shlex.join(cmd)
        self.cnode.wait_ready(a.start_timeout)
        wait_port(nbd, self.cnode.proc, a.start_timeout)
        self.uri = f"nbd://127.0.0.1:{nbd}/vol0"
        log(f"{self.name}: c.node pid {self.cnode.pid}, d.node pids "
            f"{[d.pid for d in self.dnodes]}, etcd pid {self.etcd.pid}; {self.uri}")

    def cnode_cmd(self, data_dir: Path, nbd_port: int, api_port: int,
                  extra: list[str] | None = None) -> list[str]:
        """`weft cnode` against this cluster's etcd on data_dir (args.cnode_args, then extra,
        appended); also for a second c.node (bench/ha-mirror.py)."""
        cmd = [str(self.args.weft_bin), "--data-dir", str(data_dir), "cnode", "--cluster", self.etcd_url,
               "--nbd-listen", f"127.0.0.1:{nbd_port}", "--api-listen", f"127.0.0.1:{api_port}",
               "--iscsi-listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
               "--default-volume-size", human_size(self.size), "--wait-for-dnodes", "20s",
               "--redundancy", self.redundancy]
        if self.out_grace:
            cmd += ["--out-grace", self.out_grace]
        return cmd + shlex.split(getattr(self.args, "cnode_args", "") or "") + list(extra or [])

    def pids(self) -> list[int]:
        """The weft processes (c.node + live d.nodes): their CPU is the server CPU."""
        ps = [self.cnode.pid] if self.cnode and self.cnode.alive() else []
        return ps + [d.pid for d in self.dnodes if d.alive()]

    def other_pids(self) -> list[int]:
        return [self.etcd.pid] if self.etcd and self.etcd.alive() else []

    def alive(self) -> bool:
        return bool(self.cnode and self.cnode.alive())

    def weft(self, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return weft_cli(self.args.weft_bin, self.cdir, *argv, timeout=timeout)

    def status(self) -> dict:
        p = self.weft("cluster", "status", "--json", timeout=30)
        if p.returncode != 0:
            raise RuntimeError(f"cluster status failed: {p.stderr.strip()[-300:]}")
        return json.loads(p.stdout)

    def node_of(self, st: dict, i: int) -> dict | None:
        for n in st.get("nodes", []):
            if n.get("addr") == self.dnode_addrs[i]:
                return n
        return None

    def log_tail(self) -> str:
        return self.cnode.log_tail() if self.cnode else ""

    def disk_usage(self) -> int:
        """Bytes allocated by the d.nodes' data dirs (the chunks) and the c.node's (journal)."""
        return sum(dir_usage(self.dir / f"dnode{i}") for i in range(len(self.dnodes))) + dir_usage(self.cdir)

    def stop(self) -> None:
        for p in [self.cnode] + self.dnodes[::-1] + [self.etcd]:
            if p is not None:
                p.stop()


def add_run_args(ap, keep_help: str = "keep the run dir (data, logs)") -> None:
    """The options every bench script shares: priority, run dir, results and re-rendering."""
    ap.add_argument("--nice", type=int, default=-10 if os.geteuid() == 0 else 0,
                    help="nice value of the servers and fio (root default -10)")
    ap.add_argument("--keep", action="store_true", help=keep_help)
    ap.add_argument("--out", type=Path, default=RESULTS_DIR, help="results directory")
    ap.add_argument("--label", default="", help="label added to the results file name")
    ap.add_argument("--render", type=Path, default=None, metavar="JSON",
                    help="only print the markdown report of an earlier run's JSON")


def finish_run(run_dir: Path, keep: bool) -> None:
    """Stop every process the run started, then delete its dir unless asked to keep it."""
    stop_all()
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    else:
        log(f"kept {run_dir}")


def apply_nice(args) -> None:
    """Run at `args.nice` (and the servers and fio it starts); 0 when not allowed."""
    if not args.nice:
        return
    try:
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    except OSError as e:
        log(f"warning: cannot set nice {args.nice}: {e}")
        args.nice = 0


def write_results(args, script: str, now, quick: bool, meta: dict, results: dict, md: str) -> None:
    """Save a run as `<script>-<time>[-label][-quick].json` and `.md` in `args.out`, and print
    the markdown."""
    args.out.mkdir(parents=True, exist_ok=True)
    stem = (now.strftime(f"{script}-%Y%m%d-%H%M%S") + (f"-{args.label}" if args.label else "")
            + ("-quick" if quick else ""))
    (args.out / f"{stem}.json").write_text(
        json.dumps({"meta": meta, "results": results}, indent=2, default=str) + "\n")
    (args.out / f"{stem}.md").write_text(md + "\n")
    print(md)
    log(f"results: {args.out / (stem + '.json')} and .md")
