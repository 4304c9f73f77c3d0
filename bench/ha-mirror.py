#!/usr/bin/env python3
"""Compute-layer HA benchmark: what the write-buffer mirror costs and how long a failover
takes, in one run on one 4+2 cluster (etcd + 6 d.nodes on loopback).

1. Mirror cost: the same fio jobs (ioengine=nbd, prefilled volume) against the owner c.node
   without a partner (`single`), then against the same c.node (same data dir) restarted with
   `--partner`/`--mirror-listen` and a caught-up standby (`mirrored`): 4k write + flush QD1
   (latency), 4k randwrite QD32 (IOPS), 1M sequential write QD8 (MB/s); ratios
   mirrored/single against the issue's goals, and CPU-seconds per GB written of the c.node
   processes (owner, plus partner when mirrored).
2. Failover: --kills times, a small fio write load on the owner, `kill -9` of the owner, time
   until the standby serves (prints `ready`, writes serve.json with its pid, answers an NBD
   read), then the killed c.node restarted on its data dir as the new standby and the owner's
   `compute.write_buffer` back to `mirrored` before the next kill.
3. 4k randread QD32 through the owner before the first kill and through the new owner after it.
4. Forwarding (`--parts forward`): the same jobs through the standby's NBD listener (it forwards
   every request to the owner) and through the owner's, alternating, --rounds times: the cost
   of reaching a volume through a c.node that does not own it.

Reuses bench/cluster-compare.py (imported as a module: fio jobs, run_job, CPU split) and
bench/benchlib.py (processes stopped by PID, Cluster).  Python 3.11 standard library only.
See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
sys.path.insert(0, str(BENCH_DIR))
import benchlib  # noqa: E402


def _load(mod_name: str, file: str):
    spec = importlib.util.spec_from_file_location(mod_name, BENCH_DIR / file)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[mod_name] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


cc = _load("cluster_compare", "cluster-compare.py")
nc = cc.nc
log = benchlib.log
Proc = benchlib.Proc

COST_JOBS = [cc.JOB_BY_NAME[n] for n in ("flushwrite-qd1", "randwrite-qd32", "seqwrite-qd8")]
READ_JOB = cc.JOB_BY_NAME["randread-qd32"]
FORWARD_JOBS = [cc.JOB_BY_NAME[n] for n in ("randread-qd32", "randwrite-qd32", "flushwrite-qd1")]
# Goals from the issue, mirrored / single: (threshold, "le" on mean latency | "ge" on throughput).
GOALS = {"flushwrite-qd1": (1.3, "le"), "randwrite-qd32": (0.8, "ge")}
# How often the failover wait looks for `ready`, serve.json and an NBD answer.
POLL_S = 0.02

# --------------------------------------------------------------------------
# The c.nodes: a fio target view over whichever c.node owns the cluster
# --------------------------------------------------------------------------


class Cnode:
    """One `weft cnode` of the pair: fixed data dir and ports, so a restart after a kill
    serves the same addresses."""

    def __init__(self, name: str, cl: benchlib.Cluster, data_dir: Path):
        self.name, self.cl, self.dir = name, cl, data_dir
        self.nbd_port, self.api_port, self.mirror_port = (benchlib.free_port() for _ in range(3))
        self.extra: list[str] = []
        self.lease_ttl = "5s"
        self.proc: Proc | None = None

    def start(self) -> None:
        extra = ["--lease-ttl", self.lease_ttl] + self.extra
        self.proc = Proc(self.name, self.cl.cnode_cmd(self.dir, self.nbd_port, self.api_port, extra),
                         self.cl.dir)

    def alive(self) -> bool:
        return bool(self.proc and self.proc.alive())

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def serve_json_ok(self) -> bool:
        """serve.json names this process and an NBD address (an owner's, not a standby's)."""
        try:
            v = json.loads((self.dir / "serve.json").read_text())
        except (OSError, ValueError):
            return False
        return v.get("pid") == self.pid and bool(v.get("nbd"))

    def weft(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return benchlib.weft_cli(self.cl.args.weft_bin, self.dir, *argv, timeout=timeout)

    def write_buffer(self) -> str | None:
        """`compute.write_buffer` of `weft cluster status --json` through this c.node."""
        p = self.weft("cluster", "status", "--json", timeout=20)
        if p.returncode != 0:
            return None
        try:
            return (json.loads(p.stdout).get("compute") or {}).get("write_buffer")
        except ValueError:
            return None

    def log_tail(self, n: int = 30) -> str:
        return self.proc.log_tail(n) if self.proc else ""


class Target:
    """What cluster-compare's run_job and fio_write need: the owner's NBD URI; server CPU =
    the c.node processes (owner, and the partner when there is one); d.nodes and etcd are
    the "etcd" column (cluster-compare's other_pids)."""

    def __init__(self, name: str, cl: benchlib.Cluster, owner: Cnode, partner: Cnode | None,
                 via: Cnode | None = None):
        self.name, self.cl, self.owner, self.partner = name, cl, owner, partner
        self.dir = cl.dir
        # The c.node the client connects to: the owner, or a standby that forwards to it.
        self.via = via or owner

    @property
    def uri(self) -> str:
        return f"nbd://127.0.0.1:{self.via.nbd_port}/vol0"

    def pids(self) -> list[int]:
        return [c.pid for c in (self.owner, self.partner) if c is not None and c.alive()]

    def other_pids(self) -> list[int]:
        return [d.pid for d in self.cl.dnodes if d.alive()] + self.cl.other_pids()

    def alive(self) -> bool:
        return self.owner.alive()

    def log_tail(self) -> str:
        return self.owner.log_tail()


def wait_write_buffer(owner: Cnode, want: str, timeout: float, also_alive: Cnode | None = None) -> float:
    """Seconds until the owner's `compute.write_buffer` is `want`."""
    t0 = time.monotonic()
    last = None
    while True:
        last = owner.write_buffer()
        if last == want:
            return time.monotonic() - t0
        for c in (owner, also_alive):
            if c is not None and not c.alive():
                raise RuntimeError(f"{c.name} exited (waiting for write_buffer {want}):\n{c.log_tail()}")
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"{owner.name}: write_buffer still {last!r}, not {want!r}, after {timeout:.0f}s")
        time.sleep(0.2)


# --------------------------------------------------------------------------
# NBD probe: the first moment a client gets a read answered
# --------------------------------------------------------------------------


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def nbd_read_ok(port: int, export: str = "vol0", timeout: float = 1.0) -> bool:
    """Fixed-newstyle handshake, NBD_OPT_GO `export`, one 4 KiB read at offset 0 answered
    without error, NBD_CMD_DISC."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            hello = _recv_exact(s, 18)
            if hello[:16] != b"NBDMAGICIHAVEOPT":
                return False
            (hflags,) = struct.unpack(">H", hello[16:])
            s.sendall(struct.pack(">I", hflags & 0x3))  # FIXED_NEWSTYLE | NO_ZEROES if offered
            name = export.encode()
            data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
            s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)  # NBD_OPT_GO
            while True:
                _magic, _opt, typ, ln = struct.unpack(">QIII", _recv_exact(s, 20))
                _recv_exact(s, ln)
                if typ & 0x8000_0000:
                    return False
                if typ == 1:  # NBD_REP_ACK
                    break
            s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 0, 1, 0, 4096))  # NBD_CMD_READ
            magic, err, _handle = struct.unpack(">IIQ", _recv_exact(s, 16))
            if magic != 0x67446698 or err:
                return False
            _recv_exact(s, 4096)
            s.sendall(struct.pack(">IHHQQI", 0x25609513, 0, 2, 2, 0, 0))  # NBD_CMD_DISC
            return True
    except (OSError, ValueError, struct.error):
        return False


# --------------------------------------------------------------------------
# Parts
# --------------------------------------------------------------------------


# --------------------------------------------------------------------------
# --profile: perf on each c.node during a job
# --------------------------------------------------------------------------

PERF_EVENTS = "task-clock,context-switches,raw_syscalls:sys_enter"


def fio_child_started() -> bool:
    """A fio child of this script is running (run_job started the job's fio)."""
    me = str(os.getpid())
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        ppid = stat[stat.rindex(")") + 2:].split()[1]
        if comm == "fio" and ppid == me:
            return True
    return False


def profile_job(t: Target, args: argparse.Namespace, name: str, out: dict) -> None:
    """Once the job's fio runs and its ramp is over, `perf stat` per thread (CPU, context
    switches, system calls) or `perf record -g` of each c.node for --profile-seconds."""
    deadline = time.monotonic() + args.drain_wait + args.wait_idle + 60
    while not fio_child_started():
        if time.monotonic() > deadline:
            out["error"] = "fio never started"
            return
        time.sleep(0.05)
    time.sleep(args.ramp + 0.5)
    secs = min(args.profile_seconds, max(1.0, args.runtime - 1.5))
    out["seconds"] = secs
    procs = []
    for role, c in (("owner", t.owner), ("partner", t.partner)):
        if c is None or not c.alive():
            continue
        f = args.profile_dir / f"{name}-{role}.{args.profile}"
        if args.profile == "stat":
            cmd = ["perf", "stat", "--per-thread", "-x,", "-e", PERF_EVENTS, "-o", str(f),
                   "-p", str(c.pid), "--", "sleep", str(secs)]
        else:
            cmd = ["perf", "record", "-F", "999", "-g", "-o", str(f), "-p", str(c.pid),
                   "--", "sleep", str(secs)]
        procs.append((role, f, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
    for role, f, p in procs:
        try:
            p.wait(timeout=secs + 30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        out[role] = {"file": str(f)}
        if args.profile == "stat" and f.exists():
            out[role]["threads"] = perf_stat_threads(f)


def perf_stat_threads(f: Path) -> dict:
    """`perf stat --per-thread -x,` output: {thread name: {event: total over its threads}}."""
    by_name: dict = {}
    for line in f.read_text().splitlines():
        cols = line.split(",")
        if len(cols) < 4 or "-" not in cols[0]:
            continue
        comm = cols[0].rsplit("-", 1)[0]
        try:
            value = float(cols[1])
        except ValueError:
            continue
        ev = by_name.setdefault(comm, {})
        ev[cols[3]] = ev.get(cols[3], 0) + value
    return by_name


def profile_per_op(prof: dict, r: dict) -> None:
    """Per role: CPU µs, context switches and system calls per I/O of the job (its IOPS over
    the profiled seconds)."""
    ops = (r.get("iops") or 0) * prof.get("seconds", 0)
    if not ops:
        return
    for role in ("owner", "partner"):
        threads = (prof.get(role) or {}).get("threads")
        if not threads:
            continue
        total = {"cpu_us": 0.0, "switches": 0.0, "syscalls": 0.0}
        per_thread = {}
        for comm, ev in threads.items():
            row = {"cpu_us": ev.get("task-clock", 0) * 1e3 / ops,
                   "switches": ev.get("context-switches", 0) / ops,
                   "syscalls": ev.get("raw_syscalls:sys_enter", 0) / ops}
            per_thread[comm] = {k: round(v, 2) for k, v in row.items()}
            for k in total:
                total[k] += row[k]
        prof[role]["per_op"] = {k: round(v, 2) for k, v in total.items()}
        prof[role]["per_op_by_thread"] = per_thread


def run_jobs(t: Target, jobs: list, args: argparse.Namespace, tag: str = "") -> dict:
    out: dict = {}
    for job in jobs:
        prof: dict = {}
        profiler = None
        if args.profile and job in COST_JOBS:
            profiler = threading.Thread(target=profile_job, args=(t, args, f"{job.name}{tag}", prof),
                                        daemon=True)
            profiler.start()
        try:
            r = cc.run_job(t, job, args, tag=tag)
            if profiler is not None:
                profiler.join(timeout=60)
                profile_per_op(prof, r)
                r["profile"] = prof
                for role in ("owner", "partner"):
                    if (prof.get(role) or {}).get("per_op"):
                        log(f"{t.name}: {job.name}{tag}: {role} per I/O {prof[role]['per_op']}")
            r["cnode_cpu_cores"] = r["server_cpu_cores"]
            r["dnodes_etcd_cpu_cores"] = r.pop("etcd_cpu_cores", None)
            written_gb = r["bw_MBps"] / 1e3 if job.is_write else 0  # GB per second
            r["cnode_cpu_s_per_GB"] = r["cnode_cpu_cores"] / written_gb if written_gb else None
            out[job.name] = r
        except Exception as e:  # noqa: BLE001
            log(f"{t.name}: {job.name}{tag} FAILED: {e}")
            out[job.name] = {"failed": str(e)[:1000]}
            if not t.alive():
                raise
        time.sleep(args.settle)
    return out


def takeover_log(c: Cnode, after_wall: float) -> dict:
    """From the new owner's log: when it logged the takeover, and the records replayed."""
    res: dict = {}
    try:
        text = c.proc.logfile.read_text(errors="replace") if c.proc else ""
    except OSError:
        return res
    for line in text.splitlines():
        line = cc.ANSI_RE.sub("", line)
        m = re.match(r"(\S+)\s", line)
        try:
            ts = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() if m else None
        except ValueError:
            ts = None
        if ts is None or ts < after_wall:
            continue
        if "took over from the last owner" in line:
            res.setdefault("takeover_wall", ts)
        if "c.node epoch taken" in line:
            res.setdefault("epoch_wall", ts)
        if "checkpointed segments unreadable" in line:
            segs = re.search(r"segments=\[([^\]]*)\]", line)
            res.setdefault("unreadable_segments", len(segs.group(1).split(",")) if segs else -1)
        n = re.search(r"journal_records_replayed=(\d+).*?elapsed_ms=(\d+)", line)
        if n and "replayed" not in res:
            res["recovered_wall"] = ts
            res["replayed"], res["recovery_elapsed_ms"] = int(n.group(1)), int(n.group(2))
    return res


def one_failover(i: int, owner: Cnode, standby: Cnode, args: argparse.Namespace, run_dir: Path) -> dict:
    """Load on the owner, kill -9, time until the standby serves; the killed one restarted as
    the standby and the mirror caught up again."""
    res: dict = {"kill": i + 1, "killed": owner.name, "new_owner": standby.name}
    out = run_dir / f"fio-load-{i + 1}.json"
    cmd = nc.fio_base(f"nbd://127.0.0.1:{owner.nbd_port}/vol0", "load") + [
        "--rw=randwrite", "--bs=4k", f"--iodepth={args.load_iodepth}", "--norandommap=1",
        "--refill_buffers=1", "--time_based=1", "--runtime=600", f"--output={out}"]
    if args.load_iops:
        cmd.append(f"--rate_iops={args.load_iops}")
    res["load_cmd"] = shlex.join(cmd)
    errf = run_dir / f"fio-load-{i + 1}.stderr"  # a file: fio's error lines after the kill never block it
    with open(errf, "wb") as ef:  # own process group: fio forks a process per job
        load = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=ef, start_new_session=True)
    try:
        time.sleep(args.load_seconds)
        if load.poll() is not None:
            raise RuntimeError(f"load fio exited before the kill: {errf.read_text(errors='replace')[-500:]}")
        log(f"kill {i + 1}/{args.kills}: kill -9 {owner.name} (pid {owner.pid}) under load; "
            f"{standby.name} (pid {standby.pid}) should take over")
        t_kill_wall, t_kill = time.time(), time.monotonic()
        assert owner.proc is not None
        owner.proc.kill9()
        seen: dict[str, float] = {}
        deadline = t_kill + args.failover_timeout
        # Until all three are seen (the NBD listener answers a little before serve.json and
        # `ready`), at most 30 s after the first NBD answer.
        while len(seen) < 3 and not ("nbd_read" in seen and time.monotonic() - t_kill > seen["nbd_read"] + 30):
            now = time.monotonic()
            if not standby.alive():
                raise RuntimeError(f"{standby.name} exited instead of taking over:\n{standby.log_tail()}")
            if now > deadline:
                raise RuntimeError(f"{standby.name} not serving {args.failover_timeout:.0f}s after the "
                                   f"kill (seen: {seen}):\n{standby.log_tail()}")
            assert standby.proc is not None
            if "ready" not in seen and standby.proc.ready.is_set():
                seen["ready"] = (standby.proc.ready_at or now) - t_kill
            if "serve_json" not in seen and standby.serve_json_ok():
                seen["serve_json"] = now - t_kill
            if "nbd_read" not in seen and nbd_read_ok(standby.nbd_port):
                seen["nbd_read"] = time.monotonic() - t_kill
            time.sleep(POLL_S)
        res.update({f"{k}_s": round(v, 3) for k, v in seen.items()})
        tl = takeover_log(standby, t_kill_wall)
        for k in ("takeover", "epoch", "recovered"):
            if f"{k}_wall" in tl:
                res[f"{k}_logged_s"] = round(tl[f"{k}_wall"] - t_kill_wall, 3)
        res["records_replayed"] = tl.get("replayed")
        res["recovery_elapsed_ms"] = tl.get("recovery_elapsed_ms")
        res["unreadable_segments_logged"] = tl.get("unreadable_segments")
    finally:
        # The load's job is done once the kill is; fio may still be retrying the dead server.
        # SIGKILL goes to its process group (its job processes too, or they would linger).
        if load.poll() is None:
            load.send_signal(signal.SIGINT)
            try:
                load.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(load.pid, signal.SIGKILL)
                load.wait()
        try:
            os.killpg(load.pid, signal.SIGKILL)  # a job process left behind by fio's exit
        except ProcessLookupError:
            pass
    res["load_rc"] = load.returncode
    try:
        j = nc.load_fio_json(out)["jobs"][0]["write"]
        res["load_ios_acked"] = j.get("total_ios")
    except (OSError, RuntimeError, ValueError, KeyError, IndexError):
        pass
    log(f"kill {i + 1}: {standby.name} answered NBD after {res['nbd_read_s']:.2f}s (ready "
        f"{res.get('ready_s', float('nan')):.2f}s, takeover logged "
        f"{res.get('takeover_logged_s', float('nan')):.2f}s, recovery {res.get('recovery_elapsed_ms')} ms, "
        f"{res.get('records_replayed')} records replayed)")
    # The killed c.node back on its data dir, as the new owner's standby.
    owner.start()
    res["resync_s"] = round(wait_write_buffer(standby, "mirrored", args.resync_timeout, also_alive=owner), 3)
    res["kill_to_mirrored_s"] = round(time.monotonic() - t_kill, 3)
    log(f"kill {i + 1}: {owner.name} restarted as standby; mirrored again after {res['resync_s']:.1f}s")
    return res


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def render(meta: dict, results: dict) -> str:
    p = meta["params"]
    m = meta["machine"]
    L = [f"### Compute-layer HA: mirror cost and failover time — {meta['date']}", ""]
    L.append(f"git `{meta['git']['revision'][:12]}`{' (dirty)' if meta['git']['dirty'] else ''} · "
             f"{m['nproc']} CPU {m['cpu_model']} · kernel {m['kernel']} · etcd + 6 d.nodes, 4+2 · "
             f"vol0 {nc.human_size(p['size'])} prefilled with random data · {p['runtime']:g}s/job after "
             f"{p['ramp']:g}s ramp · c.node lease TTL {p.get('cost_lease_ttl', p['lease_ttl'])} (cost) / "
             f"{p['lease_ttl']} (failover) · d.node lease TTL {p.get('dnode_lease_ttl')} · fio {meta['versions'].get('fio', '?')} "
             f"· load average at start {meta.get('loadavg_start', '?')}")
    L.append("")
    cost = results.get("cost", {})
    single, mirr = cost.get("single", {}).get("jobs", {}), cost.get("mirrored", {}).get("jobs", {})
    if single or mirr:
        L.append("`single` = the owner c.node without a partner; `mirrored` = the same c.node (same data "
                 "dir, same volume) with `--partner` and a caught-up standby. Latency is write + flush "
                 "(fio `fsync=1`: mean / p50 / p99, each the sum of the write's and the flush's; the "
                 "ratio and the goal are on the mean). c.node CPU: 100% = one "
                 "core, owner + partner when mirrored; CPU-s/GB = c.node CPU-seconds per GB (10^9 B) "
                 "the host wrote in the measured window.")
        L.append("")
        rounds = p.get("rounds", 1)
        if rounds > 1:
            L.append(f"Each mode ran {rounds} times, alternating (single, mirrored, single, ...); the "
                     "cells are medians over the rounds, the ratio is of the medians, and the last "
                     "column gives each round's ratio (mirrored round n / single round n).")
            L.append("")
        L.append("| job | single | mirrored | mirrored / single | goal | per round |")
        L.append("|---|---:|---:|---:|---|---|")
        for job in COST_JOBS:
            a, b = single.get(job.name), mirr.get(job.name)
            cells = [cost_cell(job, a), cost_cell(job, b)]
            g = GOALS.get(job.name)
            ratio = mirrored_over_single(job, a, b)
            per = [mirrored_over_single(job, ra["jobs"].get(job.name), rb["jobs"].get(job.name))
                   for ra, rb in zip(cost.get("single", {}).get("rounds", []),
                                     cost.get("mirrored", {}).get("rounds", []))]
            ptext = ", ".join("-" if x is None else f"{x:.2f}" for x in per)
            rtext = "-" if ratio is None else f"{ratio:.2f}x" + (" (lat)" if job.fsync else "")
            gtext = "-"
            if g:
                met = ratio is not None and (ratio <= g[0] if g[1] == "le" else ratio >= g[0])
                gtext = f"{'≤' if g[1] == 'le' else '≥'} {g[0]}x: " + (
                    "?" if ratio is None else ("yes" if met else "**no**"))
            L.append(f"| {job.title} | {cells[0]} | {cells[1]} | {rtext} | {gtext} | {ptext} |")
        L.append("")
        L.append("| job | c.node CPU single | c.node CPU mirrored | CPU-s/GB single | CPU-s/GB mirrored | "
                 "ratio | d.nodes+etcd CPU single / mirrored | other host CPU single / mirrored |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
        for job in COST_JOBS:
            a, b = single.get(job.name) or {}, mirr.get(job.name) or {}
            ga, gb = a.get("cnode_cpu_s_per_GB"), b.get("cnode_cpu_s_per_GB")
            L.append(f"| {job.title} | {pcent(a.get('cnode_cpu_cores'))} | {pcent(b.get('cnode_cpu_cores'))} "
                     f"| {num(ga)} | {num(gb)} | {'-' if not ga or not gb else f'{gb / ga:.2f}x'} "
                     f"| {pcent(a.get('dnodes_etcd_cpu_cores'))} / {pcent(b.get('dnodes_etcd_cpu_cores'))} "
                     f"| {pcent(a.get('other_cpu_cores'))} / {pcent(b.get('other_cpu_cores'))} |")
        L.append("")
    if cost.get("error"):
        L.append(f"**The mirror-cost part stopped early**: {cost['error'].splitlines()[0][:400]}")
        L.append("")
    fw = results.get("forward")
    if fw:
        L.append("Forwarding: the same client jobs through the standby's NBD listener (every request "
                 "forwarded to the owner over the c.node-to-c.node protocol) and through the owner's; "
                 f"medians of {p.get('rounds', 1)} alternating rounds. c.node CPU = owner + standby.")
        L.append("")
        L.append("| job | through the owner | through the standby | standby / owner | c.node CPU owner / standby path |")
        L.append("|---|---:|---:|---:|---:|")
        for job in FORWARD_JOBS:
            a, b = fw.get("owner", {}).get("jobs", {}).get(job.name), fw.get("standby", {}).get("jobs", {}).get(job.name)
            ratio = mirrored_over_single(job, a, b)
            rtext = "-" if ratio is None else f"{ratio:.2f}x" + (" (lat)" if job.fsync else "")
            L.append(f"| {job.title} | {cost_cell(job, a)} | {cost_cell(job, b)} | {rtext} "
                     f"| {pcent((a or {}).get('cnode_cpu_cores'))} / {pcent((b or {}).get('cnode_cpu_cores'))} |")
        L.append("")
    fo = results.get("failover")
    if fo:
        kills = [k for k in fo.get("kills", []) if "nbd_read_s" in k]
        rate = f" at {p['load_iops']} IOPS" if p.get("load_iops") else ""
        L.append(f"Failover: {len(kills)} of {p['kills']} kills completed (kill -9 of the owner under a "
                 f"fio 4k randwrite QD{p['load_iodepth']}{rate} load; c.node "
                 f"`--lease-ttl {p['lease_ttl']}`). Seconds after the kill:")
        L.append("")
        L.append("| | p50 | max | min |")
        L.append("|---|---:|---:|---:|")
        for key, title in (("takeover_logged_s", "standby logs the takeover (lease expired)"),
                           ("epoch_logged_s", "new owner has fenced the old epoch on the d.nodes"),
                           ("recovered_logged_s", "new owner logs `recovered` (mirror replayed)"),
                           ("nbd_read_s", "**standby answers an NBD read** (failover time)"),
                           ("serve_json_s", "serve.json names the standby"),
                           ("ready_s", "standby prints `ready`"),
                           ("resync_s", "killed c.node restarted → `mirrored` again (from its restart)")):
            xs = [k[key] for k in kills if k.get(key) is not None]
            if xs:
                L.append(f"| {title} | {statistics.median(xs):.2f} | {max(xs):.2f} | {min(xs):.2f} |")
        rep = [k["records_replayed"] for k in kills if k.get("records_replayed") is not None]
        rec = [k["recovery_elapsed_ms"] / 1e3 for k in kills if k.get("recovery_elapsed_ms") is not None]
        if rep:
            L.append("")
            L.append(f"Journal records the new owner replayed: median {statistics.median(rep):g}, "
                     f"max {max(rep)}" + (f"; recovery (`elapsed_ms` of its `recovered` line): median "
                                         f"{statistics.median(rec):.2f} s, max {max(rec):.2f} s." if rec else "."))
        bad = [k for k in kills if k.get("unreadable_segments_logged")]
        if bad:
            L.append("")
            L.append(f"In {len(bad)} of {len(kills)} takeovers the new owner logged `ERROR checkpointed "
                     f"segments unreadable now` (median {statistics.median(k['unreadable_segments_logged'] for k in bad):g} "
                     "segments) and started a repair scan; see the notes.")
        if fo.get("error"):
            L.append("")
            L.append(f"**Failover stopped at kill {len(fo.get('kills', [])) + 1}**: {fo['error'][:600]}")
        L.append("")
    rd = results.get("reads")
    if rd:
        a, b = rd.get("before"), rd.get("after")
        L.append("| 4k randread QD32 | IOPS · mean / p99 | c.node CPU |")
        L.append("|---|---:|---:|")
        for k, title in (("before", f"owner before the first kill ({rd.get('before_owner')})"),
                         ("after", f"new owner after it ({rd.get('after_owner')})")):
            r = rd.get(k)
            if r:
                L.append(f"| {title} | {nc.cell(READ_JOB, r) if nc.ok(r) else 'FAILED'} | "
                         f"{pcent(r.get('cnode_cpu_cores'))} |")
        if a and b and nc.ok(a) and nc.ok(b) and a["iops"]:
            L.append("")
            L.append(f"After / before: {b['iops'] / a['iops']:.2f}x.")
        parts = []
        for key, when in (("full_read_before", "before the first kill"), ("full_read_after", "after the last kill")):
            r = rd.get(key)
            if r:
                owner = f" ({r['owner']})" if r.get("owner") else ""
                parts.append(f"{when}{owner}: {benchlib.gib(r.get('read_bytes'))} read, "
                             f"{r.get('total_err')} errors")
        if parts:
            L.append("")
            L.append("Whole volume read (1M QD8, `continue_on_error=read`): " + "; ".join(parts) + ".")
        ra = rd.get("repair_after") or {}
        if ra:
            L.append("")
            L.append("Repair state of the new owner before the read job: "
                     + ", ".join(f"{k} {v}" for k, v in ra.items() if not isinstance(v, (dict, list))) + ".")
        L.append("")
    for k in ("error",):
        if results.get(k):
            L.append(f"**Error**: {results[k][:800]}")
            L.append("")
    return "\n".join(L)


def mirrored_over_single(job, a: dict | None, b: dict | None) -> float | None:
    """b / a: mean latency (write + flush) for the flush job, else throughput."""
    if not nc.ok(a) or not nc.ok(b):
        return None
    key = "lat_mean_us" if job.fsync else ("bw_MBps" if job.is_seq else "iops")
    return b[key] / a[key] if a[key] else None


def cost_cell(job, r: dict | None) -> str:
    if not r:
        return "n/a"
    if not nc.ok(r):
        return "FAILED"
    us = nc.fmt_us
    if job.fsync:
        return (f"{us(r['lat_mean_us'])} / p50 {us(r.get('lat_p50_us'))} / p99 {us(r['lat_p99_us'])} "
                f"({r['iops']:.0f}/s)")
    return f"{r['bw_MBps']:.0f} MB/s" if job.is_seq else f"{r['iops']:.0f} IOPS"


def pcent(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.0f}%"


def num(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 256M volume, 3 s jobs, 2 kills")
    ap.add_argument("--kills", type=int, default=None, help="failovers measured (default 20; --quick 2)")
    ap.add_argument("--lease-ttl", dest="cnode_lease_ttl", default="3s",
                    help="c.node --lease-ttl (the ownership lease) in the failover part")
    ap.add_argument("--cost-lease-ttl", default="10s",
                    help="c.node --lease-ttl in the mirror-cost part, both modes (longer: on a starved "
                         "machine a 3 s lease expired under 1M writes and the standby took over mid-job)")
    ap.add_argument("--dnode-lease-ttl", dest="lease_ttl", default="5s", help="d.node --lease-ttl")
    ap.add_argument("--parts", default="cost,forward,failover,reads",
                    help="subset of cost,forward,failover,reads")
    ap.add_argument("--rounds", type=int, default=None,
                    help="single/mirrored alternations of the cost jobs; medians reported (default 2; --quick 1)")
    ap.add_argument("--size", type=nc.parse_size, default=None, help="volume size (default 1G; --quick 256M)")
    ap.add_argument("--runtime", type=float, default=None, help="seconds per job (default 10; --quick 3)")
    ap.add_argument("--ramp", type=float, default=None, help="warm-up seconds per job (default 2; --quick 1)")
    ap.add_argument("--settle", type=float, default=None, help="pause between jobs (default 1; --quick 0.5)")
    ap.add_argument("--load-seconds", type=float, default=2.0, help="load on the owner before each kill")
    ap.add_argument("--load-iodepth", type=int, default=4, help="iodepth of the fio load during failover")
    ap.add_argument("--load-iops", type=int, default=2000, help="fio rate_iops of that load (0 = flat out)")
    ap.add_argument("--failover-timeout", type=float, default=90, help="give up on a takeover after this")
    ap.add_argument("--resync-timeout", type=float, default=120,
                    help="give up waiting for `mirrored` after a restart after this")
    ap.add_argument("--workdir", type=Path, default=REPO.parent / "weft-bench-tmp",
                    help="where data dirs live; a run-* dir is made inside and removed at the end")
    ap.add_argument("--partner-dir", type=Path, default=None,
                    help="the second c.node's data dir (default: in the work dir); e.g. on /dev/shm "
                         "to take its journal's fdatasync off the disk the owner's journal uses, as a "
                         "partner on another machine would")
    ap.add_argument("--cnode-args", default="", help="extra `weft cnode` flags (both c.nodes)")
    ap.add_argument("--dnode-args", default="", help="extra `weft dnode` flags")
    ap.add_argument("--no-build", action="store_true", help="use --weft-bin as it is")
    ap.add_argument("--weft-bin", type=Path, default=REPO / "target" / "release" / "weft")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="before each job wait up to this long for the rest of the host to go quiet "
                         "(default 3; --quick 0)")
    ap.add_argument("--idle-threshold", type=float, default=0.25)
    ap.add_argument("--drain-wait", type=float, default=None,
                    help="before each job wait up to this long for the c.nodes to go idle (default 30; --quick 5)")
    ap.add_argument("--profile", choices=["stat", "record"], default=None,
                    help="during each cost job, after the ramp: `perf stat` per thread (CPU, context "
                         "switches, system calls per I/O, in the JSON and the log) or `perf record -g` "
                         "of each c.node, for --profile-seconds; files in --profile-dir")
    ap.add_argument("--profile-seconds", type=float, default=5)
    ap.add_argument("--profile-dir", type=Path, default=None,
                    help="where the perf files go (default: a profile-* dir in the work dir, kept)")
    benchlib.add_run_args(ap)
    args = ap.parse_args()

    if args.render:
        d = json.loads(args.render.read_text())
        print(render(d["meta"], d["results"]))
        return 0
    q = args.quick
    args.kills = args.kills if args.kills is not None else (2 if q else 20)
    args.rounds = args.rounds if args.rounds is not None else (1 if q else 2)
    args.size = args.size or ((256 << 20) if q else (1 << 30))
    args.runtime = args.runtime if args.runtime is not None else (3 if q else 10)
    args.ramp = args.ramp if args.ramp is not None else (1 if q else 2)
    args.settle = args.settle if args.settle is not None else (0.5 if q else 1)
    args.drain_wait = args.drain_wait if args.drain_wait is not None else (5 if q else 30)
    args.wait_idle = args.wait_idle if args.wait_idle is not None else (0 if q else 3)
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    for tool in ("fio", "etcd"):
        if not shutil.which(tool):
            log(f"error: {tool} not found")
            return 2
    benchlib.apply_nice(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.disk_dev = nc.block_dev_name(args.workdir)
    # /metrics is on a free port (benchlib's cnode_cmd: the default 127.0.0.1:10811 cannot be
    # bound by both c.nodes).  The lease is added per c.node (Cnode.lease_ttl).

    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=args.workdir))
    if args.profile:
        if not shutil.which("perf"):
            log("error: --profile needs perf")
            return 2
        args.profile_dir = args.profile_dir or args.workdir / time.strftime("profile-%Y%m%d-%H%M%S")
        args.profile_dir.mkdir(parents=True, exist_ok=True)
        log(f"perf files in {args.profile_dir}")
    now = dt.datetime.now().astimezone()
    with open("/proc/loadavg") as f:
        loadavg = f.read().split()[0]
    meta: dict = {
        "date": now.isoformat(timespec="seconds"), "git": nc.git_info(), "machine": nc.machine_info(),
        "loadavg_start": loadavg,
        "versions": {"fio": nc.run_out(["fio", "--version"]),
                     "etcd": next((l.split(":", 1)[1].strip() for l in nc.run_out(["etcd", "--version"]).splitlines()
                                   if l.lower().startswith("etcd version")), "?")},
        "params": {"size": args.size, "runtime": args.runtime, "ramp": args.ramp, "quick": q,
                   "kills": args.kills, "rounds": args.rounds, "lease_ttl": args.cnode_lease_ttl,
                   "cost_lease_ttl": args.cost_lease_ttl, "dnode_lease_ttl": args.lease_ttl,
                   "load_seconds": args.load_seconds, "load_iodepth": args.load_iodepth,
                   "load_iops": args.load_iops, "parts": sorted(parts), "nice": args.nice,
                   "workdir": str(run_dir), "workdir_fs": nc.fs_type(args.workdir), "argv": sys.argv[1:]},
    }
    results: dict = {}
    rc = 0
    try:
        if not args.no_build:
            nc.build_weft(args)
        snap = run_dir / "weft-bin"  # others may rebuild the binary mid-run
        shutil.copy2(args.weft_bin, snap)
        args.weft_bin = snap
        meta["binary_sha256"] = nc.run_out(["sha256sum", str(snap)]).split()[0]
        rc = run(run_dir, args, parts, results)
    except KeyboardInterrupt:
        log("interrupted; writing partial results")
        meta["interrupted"] = True
        rc = 130
    except Exception as e:  # noqa: BLE001
        log(f"FAILED: {e}")
        results["error"] = str(e)[:3000]
        rc = 1
    finally:
        benchlib.finish_run(run_dir, args.keep)
    benchlib.write_results(args, "ha-mirror", now, q, meta, results, render(meta, results))
    return rc


def run(run_dir: Path, args: argparse.Namespace, parts: set[str], results: dict) -> int:
    cl = benchlib.Cluster("ha", run_dir / "cluster", args, "4+2", 6, args.size)
    user_cnode_args = args.cnode_args
    args.cnode_args = f"--lease-ttl {args.cost_lease_ttl} {user_cnode_args}"
    cl.start()  # etcd, 6 d.nodes, the c.node (no partner) on cl.cdir
    args.cnode_args = user_cnode_args
    results["cmds"] = dict(cl.cmds)
    c2_dir = args.partner_dir if args.partner_dir else cl.dir / "cnode2"
    c1, c2 = Cnode("c1", cl, cl.cdir), Cnode("c2", cl, c2_dir)
    c1.lease_ttl = c2.lease_ttl = args.cost_lease_ttl
    # The single c.node is c1 without a partner: take over the Proc Cluster started.
    c1.proc = cl.cnode
    c1.nbd_port = int(re.search(r"--nbd-listen 127\.0\.0\.1:(\d+)", cl.cmds["cnode"]).group(1))
    c1.api_port = int(re.search(r"--api-listen 127\.0\.0\.1:(\d+)", cl.cmds["cnode"]).group(1))
    partner_flags = {c1: ["--partner", f"127.0.0.1:{c2.mirror_port}", "--mirror-listen", f"127.0.0.1:{c1.mirror_port}"],
                     c2: ["--partner", f"127.0.0.1:{c1.mirror_port}", "--mirror-listen", f"127.0.0.1:{c2.mirror_port}"]}
    c2.extra = partner_flags[c2]
    single = Target("single", cl, c1, None)
    results["prefill"] = cc.fio_write(single, args.size, args, "prefill")
    p = c1.weft("sync", timeout=900)
    results["sync_rc"] = p.returncode

    def to_mirrored() -> float:
        """c1 restarted (same data dir) with --partner, c2 started as its standby."""
        log(f"c1 restarted with --partner, c2 started as its standby (lease {c1.lease_ttl})")
        if c2.alive():
            c2.proc.stop()
        c1.proc.stop()
        c1.extra = partner_flags[c1]
        c1.start()
        c1.proc.wait_ready(args.start_timeout)
        c2.start()
        results["cmds"]["c1"], results["cmds"]["c2"] = shlex.join(c1.proc.cmd), shlex.join(c2.proc.cmd)
        s = wait_write_buffer(c1, "mirrored", args.resync_timeout, also_alive=c2)
        log(f"c1 mirrored to c2 after {s:.1f}s")
        return s

    def to_single() -> None:
        """The standby stopped, c1 restarted (same data dir) without a partner."""
        log("c2 stopped, c1 restarted without a partner")
        c2.proc.stop()
        c1.proc.stop()
        c1.extra = []
        c1.start()
        c1.proc.wait_ready(args.start_timeout)

    # Mirror cost: single and mirrored alternate, --rounds times, on the same volume, so the
    # other work on a shared machine and the volume's state (GC) hit both alike.
    mode = "single"
    if "cost" in parts:
        cost: dict = {"single": {"rounds": []}, "mirrored": {"rounds": []}}
        results["cost"] = cost
        try:
            for rnd in range(args.rounds):
                for m in ("single", "mirrored"):
                    if m != mode:
                        s = to_mirrored() if m == "mirrored" else to_single()
                        if m == "mirrored":
                            results.setdefault("mirror_catch_up_s", []).append(round(s, 2))
                        mode = m
                    t = Target(m, cl, c1, c2 if m == "mirrored" else None)
                    wb = c1.write_buffer()
                    log(f"round {rnd + 1}/{args.rounds}: {m}: write_buffer {wb!r}")
                    cost[m]["rounds"].append({"write_buffer": wb,
                                              "jobs": run_jobs(t, COST_JOBS, args, tag=f"-{m}{rnd + 1}")})
        except Exception as e:  # noqa: BLE001
            # e.g. the owner lost its lease mid-job and exited; the failover part restarts the pair.
            log(f"mirror cost FAILED in mode {mode}: {e}")
            cost["error"] = str(e)[:3000]
            cost["c1_log_tail"], cost["c2_log_tail"] = c1.log_tail(40), c2.log_tail(40)
            mode = "broken"
        for m in ("single", "mirrored"):
            cost[m]["jobs"] = median_jobs([r["jobs"] for r in cost[m]["rounds"]])
    if not parts & {"failover", "reads", "forward"}:
        return 0
    # The failover part runs with its own (shorter) lease: the pair restarted with it.
    c1.lease_ttl = c2.lease_ttl = args.cnode_lease_ttl
    if mode == "broken" and c2.alive() and not c1.alive():
        c2.proc.stop()  # c2 took over: stop it cleanly so that c1 owns again
    results.setdefault("mirror_catch_up_s", []).append(round(to_mirrored(), 2))
    mirrored = Target("mirrored", cl, c1, c2)
    if "forward" in parts:
        fw: dict = {"owner": {"rounds": []}, "standby": {"rounds": []}}
        results["forward"] = fw
        for rnd in range(args.rounds):
            for via, name in ((c1, "owner"), (c2, "standby")):
                t = Target(f"via-{name}", cl, c1, c2, via=via)
                fw[name]["rounds"].append({"jobs": run_jobs(t, FORWARD_JOBS, args, tag=f"-{name}{rnd + 1}")})
        for name in ("owner", "standby"):
            fw[name]["jobs"] = median_jobs([r["jobs"] for r in fw[name]["rounds"]], FORWARD_JOBS)
    if not parts & {"failover", "reads"}:
        return 0
    if "reads" in parts:
        results["reads"] = {"before_owner": c1.name, "repair_before": repair_state(c1),
                            "before": run_jobs(mirrored, [READ_JOB], args, tag="-before")[READ_JOB.name],
                            "full_read_before": full_read(mirrored, args, "before")}
    owner, standby = c1, c2
    fo: dict = {"lease_ttl": args.cnode_lease_ttl, "kills": []}
    results["failover"] = fo
    kills = args.kills if "failover" in parts else 1
    for i in range(kills):
        try:
            fo["kills"].append(one_failover(i, owner, standby, args, run_dir))
        except Exception as e:  # noqa: BLE001
            log(f"failover {i + 1} FAILED: {e}")
            fo["error"] = str(e)[:3000]
            fo["owner_log_tail"], fo["standby_log_tail"] = owner.log_tail(60), standby.log_tail(60)
            return 1
        owner, standby = standby, owner
        if i == 0 and "reads" in parts:
            t = Target("after-failover", cl, owner, standby)
            results["reads"]["after_owner"] = owner.name
            results["reads"]["repair_after"] = repair_state(owner)
            results["reads"]["after"] = run_jobs(t, [READ_JOB], args, tag="-after")[READ_JOB.name]
            results["reads"]["repair_after_job"] = repair_state(owner)
    if "reads" in parts:
        results["reads"]["full_read_after"] = full_read(Target("final-owner", cl, owner, standby), args,
                                                        f"after-{kills}-kills")
        results["reads"]["full_read_after"]["owner"] = owner.name
    return 0


def full_read(t: Target, args: argparse.Namespace, tag: str) -> dict:
    """Every byte of vol0 read (1M, QD8) through the owner, going on after an error: does any
    block read fail (EIO) — e.g. one mapped to a segment the new owner found unreadable?"""
    out = t.dir / f"fio-full-read-{tag}.json"
    cmd = nc.fio_base(t.uri, "full-read") + ["--rw=read", "--bs=1M", "--iodepth=8", f"--size={args.size}",
                                             "--continue_on_error=read", f"--output={out}"]
    log(f"{t.name}: read all of vol0 ({tag})")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.size / (5 << 20) + 300)
    res: dict = {"rc": p.returncode, "cmd": shlex.join(cmd),
                 "io_u_errors_in_stderr": p.stderr.count("io_u error"), "stderr_tail": p.stderr[-600:]}
    try:
        j = nc.load_fio_json(out)["jobs"][0]
        res.update({"read_bytes": j["read"]["io_bytes"], "MBps": j["read"]["bw_bytes"] / 1e6,
                    "total_err": j.get("total_err"), "first_error": j.get("first_error")})
    except (OSError, RuntimeError, ValueError, KeyError, IndexError) as e:
        res["json_error"] = str(e)
    log(f"{t.name}: read {res.get('read_bytes')} bytes, errors: {res.get('total_err')} "
        f"({res['io_u_errors_in_stderr']} io_u errors)")
    return res


def repair_state(c: Cnode) -> dict | None:
    """The `repair` part of `weft cluster status --json` (a takeover starts a repair scan)."""
    p = c.weft("cluster", "status", "--json", timeout=20)
    try:
        return json.loads(p.stdout).get("repair") if p.returncode == 0 else None
    except ValueError:
        return None


MEDIAN_KEYS = ("iops", "bw_MBps", "lat_mean_us", "lat_p99_us", "lat_p50_us", "cnode_cpu_cores",
               "cnode_cpu_s_per_GB", "dnodes_etcd_cpu_cores", "other_cpu_cores", "fio_cpu_cores")


def median_jobs(rounds: list[dict], jobs: list | None = None) -> dict:
    """Per job, the median over the rounds of each figure (a failed round left out)."""
    out: dict = {}
    for job in jobs or COST_JOBS:
        rs = [r[job.name] for r in rounds if nc.ok(r.get(job.name))]
        if not rs:
            out[job.name] = {"failed": "every round failed"}
            continue
        out[job.name] = {k: statistics.median([r[k] for r in rs]) for k in MEDIAN_KEYS
                         if all(r.get(k) is not None for r in rs)}
        out[job.name]["rounds"] = len(rs)
    return out


if __name__ == "__main__":
    sys.exit(main())
