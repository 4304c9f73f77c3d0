#!/usr/bin/env python3
"""Cluster data path benchmark: weft serve (single process) vs a weft cluster (etcd +
d.nodes + a c.node) with redundancy none and 4+2 vs qemu-nbd (raw file, cache=none,
aio=native), with the same fio jobs (ioengine=nbd) on a prefilled volume.

Then, on 4+2 clusters: degraded reads (one d.node killed, reads reconstructed), the rebuild
rate after a d.node goes out (idle and under a concurrent fio randwrite load), and the
erasure code's CPU per GiB (`cargo run --release -p weft-ec --example ec_speed`).

Reuses bench/nbd-compare.py (imported as a module) for fio, CPU sampling and qemu-nbd/weft
serve start-up.  Python 3.11 standard library only.  See bench/README.md.
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
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"


def _load_nbd_compare():
    spec = importlib.util.spec_from_file_location("nbd_compare", BENCH_DIR / "nbd-compare.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["nbd_compare"] = mod
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


sys.path.insert(0, str(BENCH_DIR))
import benchlib  # noqa: E402

nc = _load_nbd_compare()
log = nc.log
Job = nc.Job
CLK_TCK = nc.CLK_TCK

ALL_TARGETS = ["serve", "cnode-none", "cnode-4+2", "qemu-nbd"]

# Reads first (on the prefilled volume), then writes.
JOBS = [
    Job("randread-qd32", "4k randread QD32", "randread", "4k", 32),
    Job("seqread-qd8", "1M seq read QD8", "read", "1M", 8),
    Job("randwrite-qd32", "4k randwrite QD32", "randwrite", "4k", 32),
    Job("flushwrite-qd1", "4k write+flush QD1 (fsync=1)", "randwrite", "4k", 1, fsync=True),
    Job("seqwrite-qd8", "1M seq write QD8", "write", "1M", 8),
]
JOB_BY_NAME = {j.name: j for j in JOBS}
DEGRADED_JOBS = [
    Job("randread-qd1", "4k randread QD1", "randread", "4k", 1),
    Job("randread-qd32", "4k randread QD32", "randread", "4k", 32),
]
# Goals from the issue: (numerator, denominator, jobs, threshold).
GOAL_4P2 = 0.9  # cnode-4+2 write throughput >= 0.9x cnode-none
GOAL_SERVE_RANDREAD = 1.0  # serve randread QD32 >= 1.0x qemu-nbd

# --------------------------------------------------------------------------
# Processes and targets: the process registry (every process stopped by its PID, last
# started first, at exit and on Ctrl-C/SIGTERM/SIGHUP), Proc and Cluster live in
# bench/benchlib.py, shared with nbd-compare.py and gc-memory.py.
# --------------------------------------------------------------------------

_stop_all = benchlib.stop_all
stop = benchlib.stop_proc
Proc = benchlib.Proc
Cluster = benchlib.Cluster


class Single:
    """weft serve or qemu-nbd, through nbd-compare's Server."""

    def __init__(self, name: str, dir: Path, args: argparse.Namespace, size: int):
        self.name = name
        self.srv = nc.Server("weft" if name == "serve" else name, dir, size, args)
        self.dir = dir
        self.size = size
        self.kind = name
        self.cmds: dict[str, str] = {}

    @property
    def uri(self) -> str:
        return self.srv.uri

    def start(self) -> None:
        self.srv.start()
        self.cmds["server"] = shlex.join(self.srv.cmd)

    def pids(self) -> list[int]:
        return [self.srv.pid] if self.srv.alive() else []

    def other_pids(self) -> list[int]:
        return []

    def alive(self) -> bool:
        return self.srv.alive()

    def log_tail(self) -> str:
        return self.srv.log_tail()

    def stop(self) -> None:
        self.srv.stop()


# --------------------------------------------------------------------------
# CPU sampling over several processes
# --------------------------------------------------------------------------


cpu_ticks = benchlib.cpu_ticks
cores_over = benchlib.cores_over
host_busy_excluding = benchlib.host_busy_excluding


def wait_server_idle(args: argparse.Namespace, t, what: str) -> float:
    """Up to --drain-wait s until the target's processes use < 0.1 cores (destage, GC)."""
    deadline = time.monotonic() + args.drain_wait
    started = time.monotonic()
    cpu = cores_over(t.pids(), 1.0)
    while cpu > 0.1 and time.monotonic() < deadline:
        cpu = cores_over(t.pids(), 1.0)
    if time.monotonic() - started > 1.5:
        log(f"waited {time.monotonic() - started:.0f}s for {t.name} to go idle before {what} "
            f"(now {cpu:.2f} cores)")
    return cpu


def wait_host_quiet(args: argparse.Namespace, t, what: str) -> float:
    ours = t.pids() + t.other_pids()
    busy = host_busy_excluding(ours, 1.0)
    deadline = time.monotonic() + args.wait_idle
    while busy > args.idle_threshold and time.monotonic() < deadline:
        busy = host_busy_excluding(ours, 1.0)
    if busy > args.idle_threshold:
        log(f"warning: host busy ({busy:.2f} cores, not ours) before {t.name} {what}")
    return busy


def wait_loadavg(args: argparse.Namespace) -> dict:
    """Before the measured run: wait until the 1-minute load average is below --wait-load."""
    def la() -> float:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])

    start = la()
    t0 = time.monotonic()
    if args.wait_load <= 0:
        return {"start": start, "waited_s": 0, "end": start, "reached": None}
    last_log = 0.0
    cur = start
    while cur >= args.wait_load and time.monotonic() - t0 < args.wait_load_timeout:
        if time.monotonic() - last_log > 60:
            log(f"load average {cur:.2f} >= {args.wait_load}; waiting "
                f"(up to {args.wait_load_timeout - (time.monotonic() - t0):.0f}s more)")
            last_log = time.monotonic()
        time.sleep(10)
        cur = la()
    reached = cur < args.wait_load
    if not reached:
        log(f"load average still {cur:.2f} after {args.wait_load_timeout:.0f}s; running anyway")
    return {"start": start, "waited_s": round(time.monotonic() - t0), "end": cur, "reached": reached}


# --------------------------------------------------------------------------
# fio
# --------------------------------------------------------------------------


def fio_job_cmd(t, job: Job, runtime: float, ramp: float, out: Path) -> list[str]:
    cmd = nc.fio_base(t.uri, job.name) + [
        f"--rw={job.rw}", f"--bs={job.bs}", f"--iodepth={job.iodepth}",
        "--time_based=1", f"--runtime={runtime:g}", f"--ramp_time={ramp:g}", f"--output={out}"]
    if not job.is_seq:
        cmd.append("--norandommap=1")
    if job.is_write:
        cmd.append("--refill_buffers=1")
    if job.fsync:
        cmd.append("--fsync=1")
    return cmd


def run_job(t, job: Job, args: argparse.Namespace, tag: str = "") -> dict:
    """nbd-compare's run_job, with the server CPU summed over the target's processes."""
    runtime, ramp = args.runtime, args.ramp
    out = t.dir / f"fio-{job.name}{tag}.json"
    cmd = fio_job_cmd(t, job, runtime, ramp, out)
    idle = wait_server_idle(args, t, job.name)
    busy_before = wait_host_quiet(args, t, job.name)
    log(f"{t.name}: {job.name}{tag}: ramp {ramp:g}s + {runtime:g}s")
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(ramp + min(0.3, ramp / 4))
        pids, others = t.pids(), t.other_pids()
        c0, o0, f0 = cpu_ticks(pids), cpu_ticks(others), nc.tree_cpu_ticks(p.pid)
        first0 = cpu_ticks(pids[:1])
        h0, d0, t0 = nc.host_cpu(), nc.disk_stats(args.disk_dev), time.monotonic()
        time.sleep(max(0.0, runtime - 0.3))
        c1, o1, f1 = cpu_ticks(pids), cpu_ticks(others), nc.tree_cpu_ticks(p.pid)
        first1 = cpu_ticks(pids[:1])
        h1, d1, t1 = nc.host_cpu(), nc.disk_stats(args.disk_dev), time.monotonic()
        _stdout, stderr = p.communicate(timeout=runtime + ramp + 120)
    except BaseException:
        p.kill()
        p.wait()
        raise
    if p.returncode != 0:
        raise RuntimeError(f"fio {job.name} failed ({p.returncode}): {stderr.strip()[-800:]}")
    r = nc.summarize_fio(nc.load_fio_json(out), job)
    if job.fsync:
        r["lat_p50_us"] = r["clat_p50_us"] + r["flush_p50_us"]
    else:
        r["lat_p50_us"] = r["clat_p50_us"]
    wall = t1 - t0
    r["server_cpu_cores"] = (c1 - c0) / CLK_TCK / wall
    if len(pids) > 1:
        # Clusters: the c.node is the first of t.pids(), the d.nodes the rest.
        r["cnode_cpu_cores"] = (first1 - first0) / CLK_TCK / wall
        r["dnodes_cpu_cores"] = r["server_cpu_cores"] - r["cnode_cpu_cores"]
    r["etcd_cpu_cores"] = (o1 - o0) / CLK_TCK / wall if others else None
    r["fio_cpu_cores"] = (f1 - f0) / CLK_TCK / wall if f0 is not None and f1 is not None else None
    if h1[1] > h0[1]:
        r["host_busy_cores"] = (h1[0] - h0[0]) / (h1[1] - h0[1]) * (os.cpu_count() or 1)
        r["other_cpu_cores"] = max(0.0, r["host_busy_cores"] - r["server_cpu_cores"]
                                   - (r["fio_cpu_cores"] or 0) - (r["etcd_cpu_cores"] or 0))
    r["server_cpu_before"] = idle
    r["host_busy_before"] = busy_before
    r["disk"] = nc.disk_rates(d0, d1, wall)
    r["runtime_s"], r["ramp_s"] = runtime, ramp
    r["fio_cmd"] = shlex.join(cmd)
    unit = f"{r['bw_MBps']:.0f} MB/s" if job.is_seq else f"{r['iops']:.0f} IOPS"
    log(f"{t.name}: {job.name}{tag}: {unit}, lat mean {r['lat_mean_us']:.0f}us "
        f"p50 {r['lat_p50_us']:.0f}us p99 {r['lat_p99_us']:.0f}us, "
        f"server cpu {r['server_cpu_cores'] * 100:.0f}%"
        + (f" (c.node {r['cnode_cpu_cores'] * 100:.0f}%, d.nodes {r['dnodes_cpu_cores'] * 100:.0f}%)"
           if "cnode_cpu_cores" in r else ""))
    if not t.alive():
        raise RuntimeError(f"{t.name} died during {job.name}:\n{t.log_tail()}")
    return r


def fio_write(t, size: int, args: argparse.Namespace, name: str) -> dict:
    """Sequential 1M QD8 write of `size` bytes of random data (the prefill)."""
    out = t.dir / f"fio-{name}.json"
    cmd = nc.fio_base(t.uri, name) + ["--rw=write", "--bs=1M", "--iodepth=8", f"--size={size}",
                                      "--refill_buffers=1", f"--output={out}"]
    log(f"{t.name}: {name}: write {nc.human_size(size)} of random data")
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=size / (5 << 20) + 300)
    el = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{name} failed ({p.returncode}): {p.stderr.strip()[-500:]}\n{t.log_tail()}")
    mbps = nc.load_fio_json(out)["jobs"][0]["write"]["bw_bytes"] / 1e6
    log(f"{t.name}: {name} done in {el:.1f}s ({mbps:.0f} MB/s)")
    return {"seconds": round(el, 2), "MBps": round(mbps, 1)}


# --------------------------------------------------------------------------
# Experiments
# --------------------------------------------------------------------------


def make_target(name: str, run_dir: Path, args: argparse.Namespace):
    d = run_dir / name.replace("+", "p")
    if name == "cnode-none":
        return Cluster(name, d, args, "none", 1, args.size)
    if name == "cnode-4+2":
        return Cluster(name, d, args, "4+2", 6, args.size, out_grace=args.degraded_out_grace)
    return Single(name, d, args, args.size)


def wait_node_state(c: Cluster, i: int, want: str, timeout: float) -> tuple[float, dict]:
    t0 = time.monotonic()
    while True:
        st = c.status()
        n = c.node_of(st, i)
        if n and n.get("state") == want:
            return time.monotonic() - t0, st
        if time.monotonic() - t0 > timeout:
            raise RuntimeError(f"d.node {i} not {want!r} after {timeout:.0f}s: {n}")
        time.sleep(0.2)


def degraded_reads(c: Cluster, args: argparse.Namespace) -> dict:
    """Healthy then degraded (one d.node killed, shown down) 4k randread QD1 and QD32."""
    res: dict = {"healthy": {}, "degraded": {}}
    for job in DEGRADED_JOBS:
        res["healthy"][job.name] = run_job(c, job, args, tag="-healthy")
    victim = args.victim % c.n_dnodes
    st0 = c.status()
    res["victim"] = {"index": victim, "addr": c.dnode_addrs[victim], "pid": c.dnodes[victim].pid,
                     "node": c.node_of(st0, victim)}
    log(f"{c.name}: kill -9 d.node {victim} (pid {c.dnodes[victim].pid}, {c.dnode_addrs[victim]})")
    c.dnodes[victim].kill9()
    res["seconds_to_down"], st = wait_node_state(c, victim, "down", 120)
    log(f"{c.name}: d.node {victim} down after {res['seconds_to_down']:.1f}s")
    deg0 = st.get("degraded_reads", 0)
    for job in DEGRADED_JOBS:
        before = c.status().get("degraded_reads", 0)
        r = run_job(c, job, args, tag="-degraded")
        after = c.status().get("degraded_reads", 0)
        r["degraded_reads_delta"] = after - before  # includes the ramp
        res["degraded"][job.name] = r
        n = c.node_of(c.status(), victim)
        if n and n.get("state") != "down":
            log(f"warning: d.node {victim} is {n.get('state')} after {job.name} (degraded reads "
                f"measured while {n.get('state')})")
            res.setdefault("warnings", []).append(f"victim {n.get('state')} after {job.name}")
    st = c.status()
    res["degraded_reads_total"] = st.get("degraded_reads", 0) - deg0
    res["status_after"] = {"healthy": st.get("healthy"), "pools": st.get("pools"),
                           "victim": c.node_of(st, victim)}
    return res


ANSI_RE = re.compile(r"\x1b\[[0-9;]*m")


def repair_starts(c: Cluster, after_wall: float) -> list[tuple[float, int]]:
    """(wall time, chunks) of the c.node's "repair: rebuilding chunks" log lines after
    `after_wall` (the scan logs its start; its end is only visible in the status)."""
    out = []
    try:
        text = c.cnode.logfile.read_text(errors="replace") if c.cnode else ""
    except OSError:
        return out
    for line in text.splitlines():
        if "repair: rebuilding chunks" not in line:
            continue
        line = ANSI_RE.sub("", line)
        m = re.match(r"(\S+)\s", line)
        n = re.search(r"\bchunks=(\d+)", line)
        try:
            ts = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() if m else None
        except ValueError:
            ts = None
        if ts is not None and ts >= after_wall:
            out.append((ts, int(n.group(1)) if n else 0))
    return out


def state_changes(c: Cluster, node_id: str, after_wall: float) -> dict[str, float]:
    """Wall time of the c.node's first "d.node state ... to=Down|Out" log line for node_id
    after `after_wall` (more precise than polling the status)."""
    res: dict[str, float] = {}
    try:
        text = c.cnode.logfile.read_text(errors="replace") if c.cnode else ""
    except OSError:
        return res
    for line in text.splitlines():
        if "d.node state" not in line or node_id not in line:
            continue
        line = ANSI_RE.sub("", line)
        m = re.match(r"(\S+)\s", line)
        to = re.search(r"\bto=(\w+)", line)
        if not m or not to or f"node={node_id}" not in line:
            continue
        try:
            ts = dt.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp()
        except ValueError:
            continue
        if ts >= after_wall:
            res.setdefault(to.group(1).lower(), ts)
    return res


def iops_windows(log: Path, fio_start_wall: float, windows: dict[str, tuple[float, float]]) -> dict:
    """Mean IOPS of fio's 1 s iops log over wall-clock windows."""
    pts = []
    try:
        for line in log.read_text().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) >= 2:
                pts.append((fio_start_wall + int(f[0]) / 1000.0, float(f[1])))
    except (OSError, ValueError):
        return {}
    res = {}
    for name, (a, b) in windows.items():
        vals = [v for t, v in pts if a < t <= b]
        res[name] = {"iops": sum(vals) / len(vals) if vals else None, "seconds": len(vals)}
    res["per_second"] = [(round(t - fio_start_wall, 1), v) for t, v in pts]
    return res


def stop_fio(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGINT)  # fio stops its jobs and writes its report
        try:
            p.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.communicate()


def set_repair_rate(c: Cluster, rate: str) -> dict:
    """`weft cluster repair --rate RATE`, checked in `cluster status`. The CLI of the measured
    build sends its PUT as a POST (crates/cli/src/client.rs: every method but GET and DELETE is
    a POST), which the API routes to "scan now": it prints "rate limit set" and changes nothing.
    So if the status still shows another limit, PUT /api/v1/cluster/repair is sent directly."""
    want = nc.parse_size(rate)
    p = c.weft("cluster", "repair", "--rate", rate)
    if p.returncode != 0:
        raise RuntimeError(f"weft cluster repair --rate failed: {p.stderr.strip()[-300:]}")
    res = {"requested": rate, "cli_output": p.stdout.strip(),
           "after_cli": c.status()["repair"].get("rate_limit_bytes_per_s")}
    if res["after_cli"] != want:
        log(f"{c.name}: `weft cluster repair --rate {rate}` left the limit at {res['after_cli']} B/s; "
            "setting it with PUT /api/v1/cluster/repair")
        api = json.loads((c.cdir / "serve.json").read_text())["api"]
        token = (c.cdir / "api-token").read_text().strip()
        req = urllib.request.Request(f"{api}/api/v1/cluster/repair", method="PUT",
                                     data=json.dumps({"rate_bytes_per_s": want}).encode(),
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            r.read()
        res["set_with_http_put"] = True
    res["effective_bytes_per_s"] = c.status()["repair"].get("rate_limit_bytes_per_s")
    if res["effective_bytes_per_s"] != want:
        raise RuntimeError(f"rebuild rate limit is {res['effective_bytes_per_s']}, wanted {want}")
    return res


def rebuild_run(run_dir: Path, args: argparse.Namespace, under_load: bool) -> dict:
    """A fresh 4+2 cluster of 7 d.nodes, --rebuild-data written and synced, one d.node
    killed: time from `out` until the rebuild is done and the cluster healthy.

    Under load, a 4k randwrite QD32 fio runs from before the kill until --load-window s after
    the rebuild scan started; meanwhile only `weft dnode list` and the c.node log are read:
    `cluster status` (engine stats) deadlocks against concurrent writes in this build (stats
    holds the state lock and takes the journal lock, a write holds them the other way round),
    so the repair counters are read right after the load stops."""
    name = "rebuild-load" if under_load else "rebuild-idle"
    c = Cluster(name, run_dir / name, args, "4+2", 7, args.size, out_grace=args.out_grace)
    res: dict = {"under_load": under_load, "data_written": args.rebuild_data,
                 "out_grace": args.out_grace, "lease_ttl": args.lease_ttl}
    load: subprocess.Popen | None = None
    try:
        c.start()
        res["cmds"] = c.cmds
        res["write"] = fio_write(c, args.rebuild_data, args, "rebuild-fill")
        t0 = time.monotonic()
        p = c.weft("sync", timeout=600)
        res["sync_s"] = round(time.monotonic() - t0, 2)
        if p.returncode != 0:
            raise RuntimeError(f"weft sync failed: {p.stderr.strip()[-300:]}")
        res["rate_limit"] = set_repair_rate(c, args.rebuild_rate)
        wait_server_idle(args, c, "the kill")
        st0 = c.status()
        victim = args.victim % c.n_dnodes
        res["victim"] = {"index": victim, "addr": c.dnode_addrs[victim], "node": c.node_of(st0, victim)}
        victim_id = (c.node_of(st0, victim) or {}).get("id")
        res["nodes_before"] = st0.get("nodes")
        r0 = st0["repair"]
        fio_start_wall = 0.0
        if under_load:
            out = c.dir / "fio-rebuild-load.json"
            job = Job("load", "4k randwrite QD32 load", "randwrite", "4k", 32)
            cmd = fio_job_cmd(c, job, 3600, 0, out) + [
                f"--size={args.rebuild_data}", f"--write_iops_log={c.dir / 'load'}", "--log_avg_msec=1000"]
            if args.load_rate_iops:
                cmd.append(f"--rate_iops={args.load_rate_iops}")
            res["load_cmd"] = shlex.join(cmd)
            log(f"{name}: load: {shlex.join(cmd)}")
            fio_start_wall = time.time()
            load = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(args.ramp)
            if load.poll() is not None:
                raise RuntimeError(f"load fio exited: {load.communicate()[1][-500:]}")
        pids_all = c.pids()
        cpu0, tl0 = cpu_ticks(pids_all), time.monotonic()
        log(f"{name}: kill -9 d.node {victim} (pid {c.dnodes[victim].pid})")
        t_kill, t_kill_wall = time.monotonic(), time.time()
        c.dnodes[victim].kill9()
        marks: dict[str, float] = {}
        samples = []
        deadline = t_kill + args.rebuild_timeout
        done_st = None
        cpu_load = None
        while time.monotonic() < deadline:
            loaded = load is not None and load.poll() is None
            if loaded:
                p = c.weft("dnode", "list", "--json", timeout=30)
                nodes = json.loads(p.stdout) if p.returncode == 0 else []
                st, r = None, {}
            else:
                st = c.status()
                nodes, r = st.get("nodes", []), st["repair"]
            now = time.monotonic() - t_kill
            n = next((x for x in nodes if x.get("addr") == c.dnode_addrs[victim]), None)
            state = n and n.get("state")
            samples.append({"t": round(now, 2), "state": state, "healthy": st and st.get("healthy"),
                            "running": r.get("running"), "scans": r.get("scans"),
                            "to_rebuild": r.get("chunks_to_rebuild"), "rebuilt": r.get("chunks_rebuilt"),
                            "bytes_total": r.get("bytes_rebuilt_total"), "rate": r.get("rate_bytes_per_s")})
            # Down/out: when the c.node logged the change (polling lags by up to a poll).
            changes = state_changes(c, victim_id, t_kill_wall) if victim_id else {}
            if (state in ("down", "out") or "down" in changes) and "down" not in marks:
                marks["down"] = changes["down"] - t_kill_wall if "down" in changes else now
                log(f"{name}: down {marks['down']:.1f}s after the kill")
            if (state == "out" or "out" in changes) and "out" not in marks:
                marks["out"] = changes["out"] - t_kill_wall if "out" in changes else now
                log(f"{name}: out {marks['out']:.1f}s after the kill")
            if "out" in marks and "running" not in marks:
                starts = repair_starts(c, t_kill_wall)
                if starts:
                    marks["running"] = starts[0][0] - t_kill_wall
                    res["chunks_to_rebuild_first_scan"] = starts[0][1]
                    log(f"{name}: rebuild scan started {marks['running']:.1f}s after the kill "
                        f"({starts[0][1]} chunks)")
                elif r.get("running"):
                    marks["running"] = now
            if loaded and "running" in marks and now - marks["running"] >= args.load_window:
                cpu_load = (cpu_ticks(pids_all) - cpu0) / CLK_TCK / (time.monotonic() - tl0)
                stop_fio(load)
                marks["load_stopped"] = time.monotonic() - t_kill
                st = c.status()
                rs = st["repair"]
                res["at_load_stop"] = {"t": round(time.monotonic() - t_kill, 2), "repair": rs,
                                       "bytes_rebuilt": rs["bytes_rebuilt_total"] - r0["bytes_rebuilt_total"],
                                       "chunks_rebuilt": rs["chunks_rebuilt_total"] - r0["chunks_rebuilt_total"]}
                log(f"{name}: load stopped {marks['load_stopped']:.1f}s after the kill; repair "
                    f"{'running' if rs.get('running') else 'idle'}, "
                    f"{res['at_load_stop']['bytes_rebuilt'] / 2**30:.2f} GiB rebuilt so far")
                continue
            if (st is not None and "out" in marks and st.get("healthy") and not r.get("running")
                    and r.get("chunks_rebuilt_total", 0) > r0.get("chunks_rebuilt_total", 0)
                    and r.get("chunks_failed", 0) == 0):
                marks["done"] = now
                done_st = st
                log(f"{name}: repair idle and healthy after {now:.1f}s")
                break
            time.sleep(args.poll)
        cpu1, tl1 = cpu_ticks(pids_all), time.monotonic()
        res["samples"] = samples
        res["marks_s_after_kill"] = marks
        res["weft_cpu_cores_kill_to_done"] = (cpu1 - cpu0) / CLK_TCK / (tl1 - tl0)
        res["weft_cpu_cores_under_load"] = cpu_load
        if load is not None:
            stop_fio(load)
            load = None
            try:
                lr = nc.summarize_fio(nc.load_fio_json(c.dir / "fio-rebuild-load.json"),
                                      Job("load", "", "randwrite", "4k", 32))
                res["load"] = {k: lr[k] for k in ("iops", "clat_mean_us", "clat_p50_us", "clat_p99_us",
                                                  "clat_max_us", "total_ios")}
            except Exception as e:  # noqa: BLE001
                res["load"] = {"error": str(e)[:300]}
            w = {"before_kill": (fio_start_wall, t_kill_wall)}
            if "out" in marks:
                w["kill_to_out"] = (t_kill_wall, t_kill_wall + marks["out"])
            if "running" in marks and "load_stopped" in marks:
                w["rebuilding"] = (t_kill_wall + marks["running"], t_kill_wall + marks["load_stopped"])
            logs = sorted(c.dir.glob("load_iops*.log"))
            if logs:
                res["load_iops"] = iops_windows(logs[0], fio_start_wall, w)
        if done_st is None:
            res["error"] = f"not rebuilt within {args.rebuild_timeout:.0f}s"
            try:
                res["status_last"] = c.status()
            except Exception as e:  # noqa: BLE001
                res["status_last"] = str(e)[:300]
            log(f"{name}: {res['error']}")
            return res
        r1 = done_st["repair"]
        bytes_rebuilt = r1["bytes_rebuilt_total"] - r0["bytes_rebuilt_total"]
        res["bytes_rebuilt"] = bytes_rebuilt
        res["chunks_rebuilt"] = r1["chunks_rebuilt_total"] - r0["chunks_rebuilt_total"]
        out_to_done = marks["done"] - marks["out"]
        res["seconds_out_to_done"] = out_to_done
        res["GiB_per_min_out_to_done"] = bytes_rebuilt / 2**30 / (out_to_done / 60) if out_to_done > 0 else None
        if "running" in marks:
            active = marks["done"] - marks["running"]
            res["seconds_running"] = active
            res["GiB_per_min_running"] = bytes_rebuilt / 2**30 / (active / 60) if active > 0 else None
        als = res.get("at_load_stop")
        if als and "running" in marks:
            span = marks["load_stopped"] - marks["running"]
            res["GiB_per_min_under_load"] = als["bytes_rebuilt"] / 2**30 / (span / 60) if span > 0 else None
            # Finished before the load stopped: the rate is a lower bound.
            res["finished_under_load"] = not als["repair"].get("running")
        res["status_done"] = {"healthy": done_st.get("healthy"), "repair": r1, "pools": done_st.get("pools"),
                              "nodes": done_st.get("nodes")}
        # Check: a scan started now finds nothing left to rebuild.
        scans = r1.get("scans", 0)
        c.weft("cluster", "repair")
        t0 = time.monotonic()
        while time.monotonic() - t0 < 120:
            r2 = c.status()["repair"]
            if r2.get("scans", 0) > scans and not r2.get("running"):
                res["verify_scan"] = {"chunks_to_rebuild": r2.get("chunks_to_rebuild"),
                                      "chunks_rebuilt": r2.get("chunks_rebuilt"),
                                      "chunks_failed": r2.get("chunks_failed")}
                break
            time.sleep(0.5)
        log(f"{name}: rebuilt {bytes_rebuilt / 2**30:.2f} GiB ({res['chunks_rebuilt']} chunks) in "
            f"{out_to_done:.1f}s from out: {res['GiB_per_min_out_to_done'] or 0:.2f} GiB/min; "
            f"verify scan {res.get('verify_scan')}")
        return res
    finally:
        if load is not None:
            stop_fio(load)
        c.stop()
        if not args.keep:
            shutil.rmtree(c.dir, ignore_errors=True)


def ec_speed(args: argparse.Namespace) -> dict:
    """`cargo run --release -p weft-ec --example ec_speed`: built with the rest, run here."""
    log(f"ec_speed: {args.ec_bin}")
    p = subprocess.run([str(args.ec_bin)], capture_output=True, text=True, timeout=600)
    return {"cmd": "cargo run --release -p weft-ec --example ec_speed", "returncode": p.returncode,
            "output": p.stdout.strip(), "stderr": p.stderr.strip()[-1000:] if p.returncode else ""}


def cargo_build(src: Path, target_dir: Path | None) -> None:
    env = dict(os.environ)
    if target_dir is not None:
        env["CARGO_TARGET_DIR"] = str(target_dir)
    for cmd in (["cargo", "build", "--release", "-p", "weft"],
                ["cargo", "build", "--release", "-p", "weft-ec", "--example", "ec_speed"]):
        log(f"building in {src}: {shlex.join(cmd)}")
        p = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True,
                           preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 10))  # build politely
        if p.returncode != 0:
            raise RuntimeError(f"{shlex.join(cmd)} failed:\n" + p.stderr.strip()[-2000:])


def build(args: argparse.Namespace, run_dir: Path, meta: dict) -> None:
    """Build weft and ec_speed: from the working tree (default), or from a clean `git archive`
    of --build-rev in the run dir (others may be editing the working tree), seeding the new
    target dir with the repo's compiled dependencies."""
    if args.build_rev:
        sha = nc.run_out(["git", "-C", str(REPO), "rev-parse", "--verify", args.build_rev + "^{commit}"])
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            raise RuntimeError(f"--build-rev {args.build_rev!r}: {sha}")
        src, target = run_dir / f"src-{sha[:12]}", run_dir / "target"
        src.mkdir()
        subprocess.run(f"git -C {shlex.quote(str(REPO))} archive {sha} | tar -x -C {shlex.quote(str(src))}",
                       shell=True, check=True)
        seed = REPO / "target" / "release"
        for sub in ("deps", "build", ".fingerprint"):
            if (seed / sub).is_dir():
                shutil.copytree(seed / sub, target / "release" / sub, symlinks=True)
        cargo_build(src, target)
        meta["git"] = {"revision": sha, "dirty": False, "built_from": f"git archive {sha}",
                       "subject": nc.run_out(["git", "-C", str(REPO), "log", "-1", "--format=%s", sha])}
        weft_bin, args.ec_bin = target / "release" / "weft", target / "release" / "examples" / "ec_speed"
        shutil.rmtree(src, ignore_errors=True)
    else:
        if not args.no_build:
            cargo_build(REPO, None)
        weft_bin = args.weft_bin
        args.ec_bin = REPO / "target" / "release" / "examples" / "ec_speed"
    snap = run_dir / "weft-bin"  # others may rebuild target/release/weft mid-run
    shutil.copy2(weft_bin, snap)
    args.weft_bin = snap
    meta["binary_sha256"] = nc.run_out(["sha256sum", str(snap)]).split()[0]
    if args.ec_bin.exists():
        ec = run_dir / "ec_speed-bin"
        shutil.copy2(args.ec_bin, ec)
        args.ec_bin = ec


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def tput(job: Job, r: dict) -> float:
    return r["bw_MBps"] if job.is_seq else r["iops"]


def ok(r: dict | None) -> bool:
    return bool(r) and "failed" not in r


def ratio(job: Job, a: dict | None, b: dict | None) -> float | None:
    if not ok(a) or not ok(b):
        return None
    return tput(job, a) / tput(job, b) if tput(job, b) else None


def fmt_ratio(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def render(meta: dict, results: dict, targets: list[str], jobs: list[Job]) -> str:
    us = nc.fmt_us
    L: list[str] = []
    m = meta["machine"]
    p = meta["params"]
    L.append(f"### weft cluster data path — {meta['date']}")
    L.append("")
    L.append(f"git `{meta['git']['revision'][:12]}`{' (dirty)' if meta['git']['dirty'] else ''} · "
             f"{m['nproc']} CPU {m['cpu_model']} · kernel {m['kernel']} · volume "
             f"{nc.human_size(p['size'])} prefilled with random data · {p['runtime']:g}s/point after "
             f"{p['ramp']:g}s ramp · fio {meta['versions'].get('fio', '?')} · etcd "
             f"{meta['versions'].get('etcd', '?')} · nice {p['nice']} · load average before: "
             f"{meta.get('loadavg', {}).get('end', '?')}")
    L.append("")
    L.append("`serve` = weft serve; `cnode-none` = etcd + 1 d.node + c.node (redundancy none); "
             "`cnode-4+2` = etcd + 6 d.nodes (zones z0..z5) + c.node (4+2); qemu-nbd = raw file, "
             "cache=none, aio=native. Cell: throughput · server CPU (100% = one core; weft: c.node "
             "+ d.nodes, etcd not counted).")
    L.append("")
    hdr = ["job"] + targets
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for job in jobs:
        row = [job.title]
        for t in targets:
            r = results.get(t, {}).get("jobs", {}).get(job.name)
            if r is None:
                row.append("n/a")
            elif "failed" in r:
                row.append("FAILED")
            else:
                row.append(f"{nc.fmt_tput(job, r)} · {r['server_cpu_cores'] * 100:.0f}%")
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    L.append("Latency (fio completion latency): mean / p50 / p99. Flush row: write + flush "
             "(p99 = sum of the two p99s).")
    L.append("")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    for job in jobs:
        row = [job.title]
        for t in targets:
            r = results.get(t, {}).get("jobs", {}).get(job.name)
            row.append(f"{us(r['lat_mean_us'])} / {us(r['lat_p50_us'])} / {us(r['lat_p99_us'])}"
                       if ok(r) else "-")
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    # Ratios
    def res(t: str, j: Job):
        return results.get(t, {}).get("jobs", {}).get(j.name)

    L.append("Throughput ratios (IOPS or MB/s; for the flush row IOPS, i.e. 1 / (write + flush "
             "latency)):")
    L.append("")
    L.append("| job | 4+2 / none | goal | serve / qemu-nbd | goal | none / qemu-nbd | 4+2 / qemu-nbd |")
    L.append("|---|---:|---|---:|---|---:|---:|")
    goals = []
    for job in jobs:
        r42 = ratio(job, res("cnode-4+2", job), res("cnode-none", job))
        rsq = ratio(job, res("serve", job), res("qemu-nbd", job))
        g1 = g2 = ""
        if job.is_write:
            g1 = "≥ 0.9x: " + ("?" if r42 is None else ("met" if r42 >= GOAL_4P2 else "**missed**"))
            goals.append((f"cnode-4+2 / cnode-none, {job.title}", r42, GOAL_4P2))
        if job.name == "randread-qd32":
            g2 = "≥ 1.0x: " + ("?" if rsq is None else ("met" if rsq >= GOAL_SERVE_RANDREAD else "**missed**"))
            goals.append((f"serve / qemu-nbd, {job.title}", rsq, GOAL_SERVE_RANDREAD))
        L.append(f"| {job.title} | {fmt_ratio(r42)} | {g1} | {fmt_ratio(rsq)} | {g2} | "
                 f"{fmt_ratio(ratio(job, res('cnode-none', job), res('qemu-nbd', job)))} | "
                 f"{fmt_ratio(ratio(job, res('cnode-4+2', job), res('qemu-nbd', job)))} |")
    L.append("")
    L.append("CPU detail (cores): weft (or qemu-nbd) / etcd / fio / other (rest of the host; > 0.2 ⚠ "
             "= someone else was busy), then disk read/write MB/s of the whole device.")
    L.append("")
    L.append("| " + " | ".join(hdr) + " |")
    L.append("|" + "|".join(["---"] + ["---:"] * (len(hdr) - 1)) + "|")
    f2 = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for job in jobs:
        row = [job.title]
        for t in targets:
            r = res(t, job)
            if not ok(r):
                row.append("-")
                continue
            dk = r.get("disk")
            oc = r.get("other_cpu_cores")
            row.append(f"{f2(r['server_cpu_cores'])} / {f2(r.get('etcd_cpu_cores'))} / "
                       f"{f2(r.get('fio_cpu_cores'))} / {f2(oc)}" + (" ⚠" if oc and oc > 0.2 else "")
                       + (f" · {dk['read_MBps']:.0f}/{dk['write_MBps']:.0f}" if dk else ""))
        L.append("| " + " | ".join(row) + " |")
    L.append("")
    notes = []
    for t in targets:
        info = results.get(t, {})
        if info.get("error"):
            notes.append(f"- **{t} failed**: {info['error']}")
        for jn, r in info.get("jobs", {}).items():
            if r and "failed" in r:
                notes.append(f"- {t} {jn} failed: {r['failed'][:200]}")
        if info.get("prefill"):
            notes.append(f"- {t}: prefill {info['prefill']['MBps']:.0f} MB/s "
                         f"({info['prefill']['seconds']:.0f} s)")
    if notes:
        L.append("Notes:")
        L.extend(notes)
        L.append("")

    # Degraded reads
    deg = results.get("cnode-4+2", {}).get("degraded")
    if deg:
        L.append("#### Degraded reads (cnode-4+2, one of 6 d.nodes killed with -9, shown `down`)")
        L.append("")
        if deg.get("error"):
            L.append(f"FAILED: {deg['error']}")
        else:
            L.append(f"d.node {deg['victim']['index']} killed; `down` after "
                     f"{deg['seconds_to_down']:.1f} s. Degraded reads counted by the c.node during "
                     f"the degraded runs: {deg.get('degraded_reads_total')}.")
            L.append("")
            L.append("| job | healthy IOPS | healthy p50 / p99 | degraded IOPS | degraded p50 / p99 | "
                     "degraded / healthy IOPS | reads reconstructed | weft CPU healthy → degraded |")
            L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
            for job in DEGRADED_JOBS:
                h = deg["healthy"].get(job.name)
                d = deg["degraded"].get(job.name)
                if not ok(h) or not ok(d):
                    L.append(f"| {job.title} | - | - | - | - | - | - | - |")
                    continue
                # The counter covers ramp + runtime; fio's I/O count only the runtime.
                ios = d["iops"] * (d.get("ramp_s", 0) + d.get("runtime_s", 0))
                frac = d.get("degraded_reads_delta", 0) / ios if ios else None
                L.append(f"| {job.title} | {h['iops']:.0f} | {us(h['clat_p50_us'])} / {us(h['clat_p99_us'])} | "
                         f"{d['iops']:.0f} | {us(d['clat_p50_us'])} / {us(d['clat_p99_us'])} | "
                         f"{d['iops'] / h['iops']:.2f}x | "
                         + (f"{d.get('degraded_reads_delta')} (~{frac * 100:.0f}% of I/Os)" if frac is not None else "?")
                         + f" | {h['server_cpu_cores'] * 100:.0f}% → {d['server_cpu_cores'] * 100:.0f}% |")
        L.append("")

    # Rebuild
    rb = [results.get(k) for k in ("rebuild-idle", "rebuild-load") if results.get(k)]
    if rb:
        L.append("#### Rebuild rate (4+2, 7 d.nodes, one killed with -9; c.node `--out-grace "
                 f"{p['out_grace']}`, d.nodes `--lease-ttl {p['lease_ttl']}`; "
                 f"`weft cluster repair --rate {p['rebuild_rate']}`)")
        L.append("")
        L.append(f"{nc.human_size(p['rebuild_data'])} of random data written (1M QD8) and `weft sync`ed "
                 "first. Times are seconds after the kill (`scan` = the c.node logged `repair: rebuilding "
                 "chunks`; `done` = `cluster status` shows repair idle and healthy). GiB/min = "
                 "`repair.bytes_rebuilt_total` growth per minute: from `out` to done, over the scan "
                 f"(scan start to done), and under load (scan start to the load's end, "
                 f"{p.get('load_window')} s after the scan started; ≥ if the scan finished before).")
        L.append("")
        lims = [r.get("rate_limit") for r in rb if isinstance(r.get("rate_limit"), dict)]
        if lims:
            L.append("Rebuild rate limit in effect: " + ", ".join(
                f"{x.get('effective_bytes_per_s', 0) / 2**20:.0f} MiB/s"
                + (" (the CLI left it unchanged; set with `PUT /api/v1/cluster/repair`)"
                   if x.get("set_with_http_put") else "") for x in lims) + ".")
            L.append("")
        L.append("| run | down | out | scan | load stop | done | rebuilt | GiB/min out → done | "
                 "GiB/min scan | GiB/min under load | weft CPU | verify scan |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in rb:
            nm = "under fio load" if r["under_load"] else "idle"
            if r.get("error") and "bytes_rebuilt" not in r:
                L.append(f"| {nm} | FAILED: {r['error'][:200]} |||||||||||")
                continue
            mk = r.get("marks_s_after_kill", {})
            g = lambda k: f"{mk[k]:.1f}" if k in mk else "-"  # noqa: E731
            vs = r.get("verify_scan")
            vss = "-" if not vs else f"{vs['chunks_to_rebuild']} left"
            f2 = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
            ul = r.get("GiB_per_min_under_load")
            uls = "-" if ul is None else (("≥ " if r.get("finished_under_load") else "") + f"{ul:.2f}")
            cpu = r.get("weft_cpu_cores_under_load") if r["under_load"] else r.get("weft_cpu_cores_kill_to_done")
            L.append(f"| {nm} | {g('down')} | {g('out')} | {g('running')} | {g('load_stopped')} | {g('done')} | "
                     f"{r['bytes_rebuilt'] / 2**30:.2f} GiB ({r['chunks_rebuilt']} chunks) | "
                     f"{f2(r.get('GiB_per_min_out_to_done'))} | {f2(r.get('GiB_per_min_running'))} | {uls} | "
                     f"{'-' if cpu is None else f'{cpu * 100:.0f}%'} | {vss} |")
        L.append("")
        for r in rb:
            li = r.get("load_iops")
            ld = r.get("load")
            if not r["under_load"] or not (li or ld):
                continue
            parts = []
            for k, lbl in (("before_kill", "before the kill"), ("kill_to_out", "kill → out"),
                           ("rebuilding", "during the rebuild")):
                v = (li or {}).get(k, {}).get("iops")
                if v is not None:
                    parts.append(f"{v:.0f} IOPS {lbl}")
            if ld and "iops" in ld:
                parts.append(f"whole run {ld['iops']:.0f} IOPS, p99 {us(ld['clat_p99_us'])}, "
                             f"max {us(ld['clat_max_us'])}")
            L.append("Load (fio 4k randwrite QD32" + (f", rate_iops {p['load_rate_iops']}" if p.get('load_rate_iops')
                                                       else ", unthrottled") + "): " + "; ".join(parts) + ".")
            L.append("")

    ec = results.get("ec_speed")
    if ec:
        L.append("#### Parity CPU: `cargo run --release -p weft-ec --example ec_speed`")
        L.append("")
        L.append("```")
        L.append(ec.get("output") or f"failed ({ec.get('returncode')}): {ec.get('stderr')}")
        L.append("```")
        L.append("")
    if any(v is not None for _n, v, _g in goals):
        L.append("Goals: " + "; ".join(
            f"{n}: {fmt_ratio(v)} (≥ {g:.1f}x: {'?' if v is None else ('met' if v >= g else 'MISSED')})"
            for n, v, g in goals))
        L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--targets", default=",".join(ALL_TARGETS),
                    help="comma-separated subset/order of " + ",".join(ALL_TARGETS))
    ap.add_argument("--jobs", default=None, help="subset of jobs: " + ",".join(JOB_BY_NAME))
    ap.add_argument("--workdir", type=Path, default=REPO.parent / "weft-bench-tmp",
                    help="where data dirs live (default: next to the repo, same file system); a "
                         "run-* dir is made inside and removed at the end")
    ap.add_argument("--size", type=nc.parse_size, default=None, help="volume size (default 4G; --quick 512M)")
    ap.add_argument("--runtime", type=float, default=None, help="seconds per job (default 20; --quick 3)")
    ap.add_argument("--ramp", type=float, default=None, help="warm-up seconds per job (default 5; --quick 1)")
    ap.add_argument("--settle", type=float, default=None, help="pause between jobs (default 3; --quick 0.5)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 3 s jobs, 512M volume, 256M rebuilt")
    ap.add_argument("--no-degraded", action="store_true", help="skip the degraded-read runs")
    ap.add_argument("--no-rebuild", action="store_true", help="skip the rebuild runs")
    ap.add_argument("--rebuild-runs", default="idle,load", help="which rebuild runs (idle,load)")
    ap.add_argument("--no-ec", action="store_true", help="skip ec_speed")
    ap.add_argument("--rebuild-data", type=nc.parse_size, default=None,
                    help="data written before the rebuild test (default 2G; --quick 256M)")
    ap.add_argument("--rebuild-rate", default="4G", help="`weft cluster repair --rate` during the rebuild test")
    ap.add_argument("--rebuild-timeout", type=float, default=900)
    ap.add_argument("--load-rate-iops", type=int, default=0,
                    help="cap of the fio randwrite load during the second rebuild run (0 = QD32 flat out)")
    ap.add_argument("--load-window", type=float, default=None,
                    help="under load: keep fio running this many seconds after the rebuild scan starts "
                         "(default 10; --quick 3)")
    ap.add_argument("--out-grace", default="5s", help="c.node --out-grace in the rebuild runs")
    ap.add_argument("--degraded-out-grace", default="30m",
                    help="c.node --out-grace of cnode-4+2 (the victim stays down, not out)")
    ap.add_argument("--lease-ttl", default="2s", help="d.node --lease-ttl")
    ap.add_argument("--victim", type=int, default=2, help="index of the d.node killed")
    ap.add_argument("--poll", type=float, default=0.5, help="cluster status poll interval during rebuild")
    ap.add_argument("--cnode-args", default="", help="extra `weft cnode` flags")
    ap.add_argument("--dnode-args", default="", help="extra `weft dnode` flags")
    ap.add_argument("--weft-args", default="", help="extra `weft serve` flags")
    ap.add_argument("--no-build", action="store_true", help="use --weft-bin as it is")
    ap.add_argument("--build-rev", default=None,
                    help="build weft from a clean `git archive` of this revision (e.g. HEAD) in the run "
                         "dir instead of the working tree")
    ap.add_argument("--weft-bin", type=Path, default=REPO / "target" / "release" / "weft")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--wait-idle", type=float, default=None,
                    help="before each job wait up to this long for the rest of the host to go quiet "
                         "(default 10; --quick 0)")
    ap.add_argument("--idle-threshold", type=float, default=0.25)
    ap.add_argument("--drain-wait", type=float, default=None,
                    help="before each job wait up to this long for weft to go idle (default 60; --quick 5)")
    ap.add_argument("--wait-load", type=float, default=None,
                    help="before measuring, wait until the 1-min load average is below this "
                         "(default 1.0; --quick 0 = don't wait)")
    ap.add_argument("--wait-load-timeout", type=float, default=1200)
    benchlib.add_run_args(ap)
    args = ap.parse_args()

    if args.render:
        d = json.loads(args.render.read_text())
        names = d["meta"]["params"]["jobs"]
        print(render(d["meta"], d["results"], d["meta"]["params"]["targets"],
                     [j for j in JOBS if j.name in names]))
        return 0

    q = args.quick
    args.size = args.size or ((512 << 20) if q else (4 << 30))
    args.runtime = args.runtime if args.runtime is not None else (3 if q else 20)
    args.ramp = args.ramp if args.ramp is not None else (1 if q else 5)
    args.settle = args.settle if args.settle is not None else (0.5 if q else 3)
    args.drain_wait = args.drain_wait if args.drain_wait is not None else (5 if q else 60)
    args.wait_idle = args.wait_idle if args.wait_idle is not None else (0 if q else 10)
    args.wait_load = args.wait_load if args.wait_load is not None else (0 if q else 1.0)
    args.load_window = args.load_window if args.load_window is not None else (3 if q else 10)
    args.rebuild_data = args.rebuild_data or ((256 << 20) if q else (2 << 30))

    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    bad = [t for t in targets if t not in ALL_TARGETS]
    if bad:
        ap.error(f"unknown targets {bad}; choose from {ALL_TARGETS}")
    jobs = list(JOBS)
    if args.jobs:
        names = [j.strip() for j in args.jobs.split(",")]
        bad = [n for n in names if n not in JOB_BY_NAME]
        if bad:
            ap.error(f"unknown jobs {bad}")
        jobs = [j for j in JOBS if j.name in names]
    rebuild_runs = [] if args.no_rebuild else [r.strip() for r in args.rebuild_runs.split(",") if r.strip()]
    for tool in ["fio", "etcd"] + (["qemu-nbd"] if "qemu-nbd" in targets else []):
        if not shutil.which(tool):
            log(f"error: {tool} not found")
            return 2
    benchlib.apply_nice(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.disk_dev = nc.block_dev_name(args.workdir)

    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=args.workdir))
    now = dt.datetime.now().astimezone()
    meta: dict = {
        "date": now.isoformat(timespec="seconds"),
        "git": nc.git_info(),
        "machine": nc.machine_info(),
        "versions": {
            "fio": nc.run_out(["fio", "--version"]),
            "qemu-nbd": nc.run_out(["qemu-nbd", "--version"]).splitlines()[0] if shutil.which("qemu-nbd") else None,
            "etcd": next((l.split(":", 1)[1].strip() for l in nc.run_out(["etcd", "--version"]).splitlines()
                          if l.lower().startswith("etcd version")), "?"),
        },
        "params": {"targets": targets, "jobs": [j.name for j in jobs], "size": args.size,
                   "runtime": args.runtime, "ramp": args.ramp, "quick": q, "nice": args.nice,
                   "workdir": str(run_dir), "workdir_fs": nc.fs_type(args.workdir), "disk_dev": args.disk_dev,
                   "rebuild_data": args.rebuild_data, "rebuild_rate": args.rebuild_rate,
                   "out_grace": args.out_grace, "lease_ttl": args.lease_ttl,
                   "load_rate_iops": args.load_rate_iops, "load_window": args.load_window,
                   "argv": sys.argv[1:]},
    }
    results: dict = {}
    rc = 0
    try:
        build(args, run_dir, meta)
        meta["loadavg"] = wait_loadavg(args)
        if not args.no_ec:
            results["ec_speed"] = ec_speed(args)
            log("ec_speed:\n" + results["ec_speed"]["output"])
        for name in targets:
            info: dict = {"jobs": {}}
            results[name] = info
            t = make_target(name, run_dir, args)
            try:
                t.start()
                info["cmds"] = t.cmds
                info["prefill"] = fio_write(t, args.size, args, "prefill")
                if isinstance(t, Cluster):
                    p = t.weft("sync", timeout=900)
                    info["sync_rc"] = p.returncode
                time.sleep(args.settle)
                for job in jobs:
                    try:
                        info["jobs"][job.name] = run_job(t, job, args)
                    except Exception as e:  # noqa: BLE001
                        log(f"{name}: {job.name} FAILED: {e}")
                        info["jobs"][job.name] = {"failed": str(e)[:1000]}
                        if not t.alive():
                            raise
                    time.sleep(args.settle)
                if isinstance(t, Cluster):
                    st = t.status()
                    info["status_end"] = {"degraded_reads": st.get("degraded_reads"),
                                          "used_bytes": st.get("used_bytes"), "healthy": st.get("healthy")}
                if name == "cnode-4+2" and not args.no_degraded:
                    try:
                        info["degraded"] = degraded_reads(t, args)
                    except Exception as e:  # noqa: BLE001
                        log(f"{name}: degraded reads FAILED: {e}")
                        info["degraded"] = {"error": str(e)[:1000]}
            except Exception as e:  # noqa: BLE001
                log(f"{name}: FAILED: {e}\n{t.log_tail()}")
                info["error"] = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                info["log_tail"] = t.log_tail()
                rc = 1
            finally:
                t.stop()
                if not args.keep:
                    shutil.rmtree(t.dir, ignore_errors=True)
        for kind in rebuild_runs:
            key = f"rebuild-{kind}"
            try:
                results[key] = rebuild_run(run_dir, args, under_load=(kind == "load"))
                if results[key].get("error"):
                    rc = 1
            except Exception as e:  # noqa: BLE001
                log(f"{key}: FAILED: {e}")
                results[key] = {"under_load": kind == "load", "error": str(e)[:1000]}
                rc = 1
    except KeyboardInterrupt:
        log("interrupted; writing partial results")
        meta["interrupted"] = True
        rc = 130
    finally:
        benchlib.finish_run(run_dir, args.keep)

    md = render(meta, results, targets, jobs)
    benchlib.write_results(args, "cluster-compare", now, q, meta, results, md)
    return rc


if __name__ == "__main__":
    sys.exit(main())
