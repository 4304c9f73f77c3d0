#!/usr/bin/env python3
"""iSCSI benchmark (issue 9): weft serve against tgt (file LUNs, bsoflags=direct), and weft's
iSCSI against weft's NBD on the same volume, all in one run.

Two sets of rows:

1. iscsi-perf (libiscsi-bin; reads only): random 4 KiB reads at QD1 and QD32 and 1 MiB
   sequential reads at QD8 against 1 GiB LUNs prefilled with the same random data (qemu-img
   convert over iSCSI for weft, a plain copy for tgt's file), and the same jobs with fio's nbd
   engine on weft's volume over NBD.
2. fio with the libiscsi engine (Debian's fio has none: scripts/build-fio-libiscsi.sh builds
   it; WEFT_FIO_LIBISCSI or the script's cache): the jobs of bench/nbd-compare.py, 4k randread
   and randwrite at QD1 and QD32, 4k randwrite + SYNCHRONIZE CACHE after every write at QD1
   (fsync=1; latency of write + sync), 1M sequential read and write at QD8, against weft's
   iSCSI LUN, tgt's, and the same weft volume over NBD (the same fio binary, nbd engine).
   Both LUNs are 4 GiB (fio's libiscsi engine puts the LUN size in bytes into SYNCHRONIZE
   CACHE's 32-bit block count: only a multiple of 4 GiB wraps to 0, "to the end"; smaller LUNs
   answer LBA OUT OF RANGE, which fio ignores), the jobs use the first --fio-size bytes,
   prefilled with fio (1M sequential writes of unique random data). weft reduces data (zero
   detection, dedup, lz4) always.

Per job: throughput, mean latency, the server's CPU (cores, from /proc/PID/stat of the server,
sampled over the measured window after --ramp) and CPU per 100k IOPS; the ratios weft/tgt and
weft iSCSI/NBD against issue 9's goals. Results: bench/results/iscsi-compare-*.{json,md}.

--ab BIN_A BIN_B (issue 19): weft only, no tgt and no iscsi-perf rows. Two weft binaries
(before and after a change), alternating A, B, A, B, ... for --rounds rounds; each round starts
a fresh `weft serve` with one 4 GiB volume, prefills its first --fio-size through iSCSI, then
runs each job (default 4k randread QD32 and 1M sequential read QD8) with fio's libiscsi engine
and with its nbd engine on the same volume, back to back. Per row: IOPS, MB/s, server CPU
seconds per GB moved and per 100k I/Os, and iSCSI/NBD; then the median of the rounds per
binary against issue 19's goal (iSCSI at least 1.0x NBD).

Python 3.11 standard library only.  See bench/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as bl

IQN_TGT = "iqn.2026-11.dev.weft.bench:tgt"
IQN_WEFT = "iqn.2026-11.dev.weft:"
SIZE = 1 << 30
# A multiple of 4 GiB: see the module doc (fio's SYNCHRONIZE CACHE).
FIO_LUN = 4 << 30
FIO_VOLUME = "fio"
# (name, iscsi-perf flags, bytes per I/O, fio rw, queue depth)
JOBS = [
    ("randread 4k QD1", ["-r", "-m", "1"], 4096, "randread", 1),
    ("randread 4k QD32", ["-r", "-m", "32"], 4096, "randread", 32),
    ("seqread 1M QD8", ["-m", "8"], 1 << 20, "read", 8),
]
# fio-libiscsi jobs, reads first (on the prefilled data), then writes. Goals (issue 9), weft /
# tgt: ("ge", x) on throughput, ("le", x) on mean latency (write + sync for the fsync job).
FIO_JOBS = [
    bl.Job("randread-qd1", "4k randread QD1", "randread", "4k", 1),
    bl.Job("randread-qd32", "4k randread QD32", "randread", "4k", 32, goal=(1.5, "ge")),
    bl.Job("seqread-qd8", "1M seq read QD8", "read", "1M", 8, goal=(1.0, "ge")),
    bl.Job("randwrite-qd1", "4k randwrite QD1", "randwrite", "4k", 1),
    bl.Job("randwrite-qd32", "4k randwrite QD32", "randwrite", "4k", 32, goal=(1.5, "ge")),
    bl.Job("syncwrite-qd1", "4k write+sync QD1", "randwrite", "4k", 1, fsync=True, goal=(1.0, "le")),
    bl.Job("seqwrite-qd8", "1M seq write QD8", "write", "1M", 8, goal=(1.0, "ge")),
]
# weft iSCSI within 15% of weft NBD on the same volume (throughput ≥ 0.85x, latency ≤ 1.15x).
NBD_GOAL = 0.15
TARGETS = ["weft iscsi", "tgt iscsi", "weft nbd"]


def iscsi_perf(url: str, flags: list[str], io_bytes: int, block: int, seconds: int,
               pids: list[int]) -> dict:
    cmd = ["iscsi-perf", *flags, "-b", str(io_bytes // block), "-t", str(seconds), url]
    t0 = bl.cpu_ticks(pids)
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60).stdout
    wall = time.monotonic() - start
    cpu = (bl.cpu_ticks(pids) - t0) / bl.CLK_TCK / wall
    m = re.findall(r"iops average (\d+) \((\d+) MB/s\)", out)
    if not m:
        raise RuntimeError(f"iscsi-perf printed no average:\n{out[-2000:]}")
    iops, mbs = map(int, m[-1])
    return {"iops": iops, "mb_s": mbs, "cpu": cpu}


def fio_nbd(uri: str, rw: str, bs: int, qd: int, seconds: int, pids: list[int], d: Path) -> dict:
    out = d / f"fio-{rw}-{qd}.json"
    cmd = bl.fio_base(uri, "j") + [f"--rw={rw}", f"--bs={bs}", f"--iodepth={qd}",
                                   f"--size={SIZE}", f"--runtime={seconds}", "--time_based",
                                   "--output-format=json", f"--output={out}"]
    t0 = bl.cpu_ticks(pids)
    start = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, timeout=seconds + 60)
    cpu = (bl.cpu_ticks(pids) - t0) / bl.CLK_TCK / (time.monotonic() - start)
    r = bl.load_fio_json(out)["jobs"][0]["read"]
    return {"iops": round(r["iops"]), "mb_s": round(r["bw_bytes"] / 1e6), "cpu": cpu}


# --------------------------------------------------------------------------
# fio with the libiscsi engine
# --------------------------------------------------------------------------


def find_fio_libiscsi() -> str:
    """WEFT_FIO_LIBISCSI, else the build script's cache (`--check` never builds)."""
    path = os.environ.get("WEFT_FIO_LIBISCSI")
    if not path:
        p = subprocess.run(["bash", str(bl.REPO / "scripts/build-fio-libiscsi.sh"), "--check"],
                           capture_output=True, text=True, timeout=60)
        path = p.stdout.strip() if p.returncode == 0 else ""
    if not path or not Path(path).is_file():
        raise SystemExit("fio with the libiscsi engine not found: run scripts/build-fio-libiscsi.sh "
                         "(or set WEFT_FIO_LIBISCSI), or pass --no-fio-libiscsi")
    return path


def fio_target(kind: str, where: str) -> list[str]:
    """fio options naming the target: an iscsi:// URL (colons escaped for --filename) or an
    nbd:// URI."""
    if kind == "iscsi":
        return ["--ioengine=libiscsi", "--filename=" + where.replace(":", "\\:")]
    return ["--ioengine=nbd", f"--uri={where}"]


def fio_checked(cmd: list[str], timeout: float) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    # fio ignores a failed sync; the libiscsi engine prints every failed request.
    failed = [l for l in p.stderr.splitlines() if "iscsi: request failed" in l]
    if p.returncode != 0 or failed:
        raise RuntimeError(f"fio failed ({p.returncode}): {shlex.join(cmd)[:400]}\n"
                           + "\n".join(failed[:3]) + "\n" + p.stderr.strip()[-800:])
    return p


def fio_prefill(fio: str, target: list[str], size: int, out: Path) -> dict:
    cmd = [fio, "--name=prefill", *target, "--rw=write", "--bs=1M", "--iodepth=8", f"--size={size}",
           "--refill_buffers=1", "--randrepeat=0", "--output-format=json", f"--output={out}"]
    t0 = time.monotonic()
    fio_checked(cmd, size / (5 << 20) + 300)
    el = time.monotonic() - t0
    mbps = bl.load_fio_json(out)["jobs"][0]["write"]["bw_bytes"] / 1e6
    return {"seconds": round(el, 2), "MBps": round(mbps, 1), "fio_cmd": shlex.join(cmd)}


def wait_idle(pids: list[int], limit: float) -> float:
    """Wait up to `limit` s until the server uses < 0.1 cores (weft destaging the last job's
    writes); returns the last sample."""
    deadline = time.monotonic() + limit
    cpu = bl.cores_over(pids, 1.0)
    while cpu > 0.1 and time.monotonic() < deadline:
        cpu = bl.cores_over(pids, 1.0)
    return cpu


def fio_job(fio: str, target: list[str], job: bl.Job, args, pids: list[int], out: Path) -> dict:
    """One time-based fio run; the server's CPU is sampled over the measured window only."""
    cmd = [fio, f"--name={job.name}", *target, f"--rw={job.rw}", f"--bs={job.bs}",
           f"--iodepth={job.iodepth}", f"--size={args.fio_size}", "--time_based=1",
           f"--runtime={args.runtime}", f"--ramp_time={args.ramp}", "--randrepeat=0",
           "--group_reporting=1", "--output-format=json", f"--output={out}"]
    if not job.is_seq:
        cmd.append("--norandommap=1")
    if job.is_write:
        cmd.append("--refill_buffers=1")  # unique random data: reduction cannot help
    if job.fsync:
        cmd.append("--fsync=1")  # libiscsi: SYNCHRONIZE CACHE(16); nbd: NBD_CMD_FLUSH
    idle = wait_idle(pids, args.drain_wait)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(args.ramp + 0.3)  # log in (or NBD handshake) and ramp
        c0, t0 = bl.cpu_ticks(pids), time.monotonic()
        time.sleep(max(0.5, args.runtime - 0.6))
        c1, t1 = bl.cpu_ticks(pids), time.monotonic()
        _stdout, stderr = p.communicate(timeout=args.runtime + args.ramp + 120)
    except BaseException:
        p.kill()
        p.wait()
        raise
    failed = [l for l in stderr.splitlines() if "iscsi: request failed" in l]
    if p.returncode != 0 or failed:
        raise RuntimeError(f"fio {job.name} failed ({p.returncode}): {shlex.join(cmd)[:400]}\n"
                           + "\n".join(failed[:3]) + "\n" + stderr.strip()[-800:])
    r = bl.summarize_fio(bl.load_fio_json(out), job)
    cores = (c1 - c0) / bl.CLK_TCK / (t1 - t0)
    r["server_cpu_cores"] = cores
    r["server_cpu_per_100k_iops"] = cores / (r["iops"] / 1e5) if r["iops"] else None
    r["server_cpu_before"] = idle
    r["fio_cmd"] = shlex.join(cmd)
    return r


def run_fio_rows(args, fio: str, targets: dict[str, tuple[list[str], list[int]]],
                 run_dir: Path) -> dict:
    """Every FIO_JOBS job against every target, target after target within a job."""
    rows: dict = {}
    jobs = [j for j in FIO_JOBS if not args.fio_jobs or j.name in args.fio_jobs.split(",")]
    for job in jobs:
        row = {}
        for name, (target, pids) in targets.items():
            out = run_dir / f"fio-{job.name}-{name.replace(' ', '-')}.json"
            try:
                row[name] = fio_job(fio, target, job, args, pids, out)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                bl.log(f"{job.name} on {name}: {e}")
                row[name] = {"failed": str(e)[-1500:]}
        rows[job.name] = row
        bl.log(f"{job.title}: " + ", ".join(f"{n} {fmt_tput(job, r)} {fmt_lat(r)}" for n, r in row.items()))
    return rows


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def ok(r: dict | None) -> bool:
    return bool(r) and "failed" not in r


def fmt_tput(job: bl.Job, r: dict) -> str:
    if not ok(r):
        return "FAILED"
    return f"{r['bw_MBps']:.0f} MB/s" if job.is_seq else f"{r['iops']:.0f} IOPS"


def fmt_lat(r: dict) -> str:
    return f"{r['lat_mean_us']:.0f} µs" if ok(r) else ""


def ratio(job: bl.Job, a: dict, b: dict) -> float | None:
    """a / b: mean latency for the latency goal (the sync job), else throughput."""
    if not ok(a) or not ok(b):
        return None
    if job.goal and job.goal[1] == "le":
        return a["lat_mean_us"] / b["lat_mean_us"] if b["lat_mean_us"] else None
    key = "bw_MBps" if job.is_seq else "iops"
    return a[key] / b[key] if b[key] else None


def verdict(r: float | None, thr: float, kind: str) -> str:
    if r is None:
        return "?"
    return "yes" if (r >= thr if kind == "ge" else r <= thr) else "**no**"


def render_fio(rows: dict) -> list[str]:
    L = ["", "### fio with the libiscsi engine: weft vs tgt, and weft iSCSI vs weft NBD (same volume)", "",
         "Cell: throughput · mean latency (write + sync for the sync job) · server CPU (cores) · "
         "server CPU per 100k IOPS.", "",
         "| job | weft iSCSI | tgt iSCSI | weft NBD |", "|---|---:|---:|---:|"]
    jobs = {j.name: j for j in FIO_JOBS}
    for name, row in rows.items():
        job = jobs[name]

        def cell(r: dict | None) -> str:
            if not ok(r):
                return "FAILED"
            per = r.get("server_cpu_per_100k_iops")
            return (f"{fmt_tput(job, r)} · {fmt_lat(r)} · {r['server_cpu_cores']:.2f} · "
                    + (f"{per:.2f}" if per is not None else "-"))
        L.append(f"| {job.title} | " + " | ".join(cell(row.get(t)) for t in TARGETS) + " |")
    L += ["", "Goals (issue 9): weft/tgt, and weft iSCSI/NBD within 15% "
          "(throughput ≥ 0.85x, latency ≤ 1.15x). `(lat)`: ratio of mean latencies, lower is better.", "",
          "| job | weft/tgt | goal | met | weft iSCSI/NBD | within 15% |", "|---|---:|---|---|---:|---|"]
    for name, row in rows.items():
        job = jobs[name]
        lat = bool(job.goal and job.goal[1] == "le")
        rt = ratio(job, row.get("weft iscsi"), row.get("tgt iscsi"))
        rn = ratio(job, row.get("weft iscsi"), row.get("weft nbd"))
        unit = " (lat)" if lat else ""
        g = job.goal
        goal = "" if not g else ("lat ≤" if g[1] == "le" else "≥") + f" {g[0]:.1f}x"
        met = verdict(rt, *g) if g else ""
        nbd_ok = verdict(rn, 1 + NBD_GOAL, "le") if lat else verdict(rn, 1 - NBD_GOAL, "ge")
        fr = lambda x: "-" if x is None else f"{x:.2f}x{unit}"
        L.append(f"| {job.title} | {fr(rt)} | {goal} | {met} | {fr(rn)} | {nbd_ok} |")
    return L


AB_JOBS = "randread-qd32,seqread-qd8"
# Issue 19: weft iSCSI at least as fast as weft NBD on the same volume.
AB_GOAL = 1.0


def ab_round(args, fio: str, binary: Path, run_dir: Path) -> dict:
    """One fresh `weft serve` of `binary`: prefill the volume, then every job over iSCSI and
    over NBD, back to back."""
    nbd, api, portal = bl.free_port(), bl.free_port(), bl.free_port()
    weft_dir = run_dir / "weft"
    weft = bl.Proc("weft", [str(binary), "serve", "--data-dir", str(weft_dir),
                            "--nbd-listen", f"127.0.0.1:{nbd}", "--api-listen", f"127.0.0.1:{api}",
                            "--iscsi-listen", f"127.0.0.1:{portal}"], run_dir)
    try:
        weft.wait_ready(60)
        p = bl.weft_cli(binary, weft_dir, "volume", "create", FIO_VOLUME, "--size",
                        bl.human_size(FIO_LUN))
        if p.returncode != 0:
            raise RuntimeError(f"weft volume create failed: {p.stderr.strip()[-500:]}")
        targets = {
            "iscsi": fio_target("iscsi", f"iscsi://127.0.0.1:{portal}/{IQN_WEFT}{FIO_VOLUME}/0"),
            "nbd": fio_target("nbd", f"nbd://127.0.0.1:{nbd}/{FIO_VOLUME}"),
        }
        fio_prefill(fio, targets["iscsi"], args.fio_size, run_dir / "prefill.json")
        bl.weft_cli(binary, weft_dir, "sync", timeout=600)
        rows: dict = {}
        for job in FIO_JOBS:
            if job.name not in args.fio_jobs.split(","):
                continue
            rows[job.name] = {}
            for name, target in targets.items():
                out = run_dir / f"fio-{job.name}-{name}.json"
                r = fio_job(fio, target, job, args, [weft.pid], out)
                gb_s = r["bw_MBps"] / 1e3
                r["server_cpu_s_per_gb"] = r["server_cpu_cores"] / gb_s if gb_s else None
                rows[job.name][name] = r
            bl.log(f"{binary.name} {job.title}: " + ", ".join(
                f"{n} {fmt_tput(job, r)} {r['server_cpu_cores']:.2f} cores"
                for n, r in rows[job.name].items()))
        return rows
    finally:
        weft.stop()
        shutil.rmtree(weft_dir, ignore_errors=True)


def render_ab(rounds: list[dict], names: list[str]) -> list[str]:
    """Every round's rows, then the median per binary with the iSCSI/NBD ratio."""
    jobs = {j.name: j for j in FIO_JOBS}
    cell = lambda r: (f"{r['iops']:.0f} · {r['bw_MBps']:.0f} · {r['server_cpu_s_per_gb']:.2f} · "
                      f"{r['server_cpu_per_100k_iops']:.2f}")
    L = ["", "Cell: IOPS · MB/s · server CPU-s per GB · server CPU-s per 100k I/Os.", "",
         "| round | binary | job | iSCSI | NBD | iSCSI/NBD |", "|---:|---|---|---:|---:|---:|"]
    for rd in rounds:
        for jname, row in rd["rows"].items():
            i, n = row["iscsi"], row["nbd"]
            L.append(f"| {rd['round']} | {rd['binary']} | {jobs[jname].title} | {cell(i)} | {cell(n)} "
                     f"| {i['iops'] / n['iops']:.2f}x |")
    L += ["", "Median of the rounds (each column's own median):", "",
          "| binary | job | iSCSI | NBD | iSCSI/NBD (median of rounds) | ≥ 1.0x |",
          "|---|---|---:|---:|---:|---|"]
    med = lambda xs: statistics.median(xs)
    for b in names:
        mine = [rd for rd in rounds if rd["binary"] == b]
        for jname in mine[0]["rows"] if mine else []:
            rs = {k: [rd["rows"][jname][k] for rd in mine] for k in ("iscsi", "nbd")}
            m = {k: {f: med([r[f] for r in v]) for f in ("iops", "bw_MBps", "server_cpu_s_per_gb",
                                                        "server_cpu_per_100k_iops")}
                 for k, v in rs.items()}
            ratio_ = med([i["iops"] / n["iops"] for i, n in zip(rs["iscsi"], rs["nbd"])])
            L.append(f"| {b} | {jobs[jname].title} | {cell(m['iscsi'])} | {cell(m['nbd'])} | "
                     f"{ratio_:.2f}x | {'yes' if ratio_ >= AB_GOAL else '**no**'} |")
    return L


def run_ab(args, fio: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc)
    bins = [Path(b).resolve() for b in args.ab]
    names = [f"{'AB'[i]}:{b.name}" for i, b in enumerate(bins)]
    args.fio_jobs = args.fio_jobs or AB_JOBS
    meta: dict = {"machine": bl.machine_info(), "git": bl.git_info(), "binaries": [str(b) for b in bins],
                  "params": {"runtime": args.runtime, "ramp": args.ramp, "fio_size": args.fio_size,
                             "fio_lun": FIO_LUN, "rounds": args.rounds, "jobs": args.fio_jobs},
                  "loadavg_start": os.getloadavg(),
                  "fio_libiscsi": {"path": fio, "version": bl.run_out([fio, "--version"])}}
    rounds: list[dict] = []
    run_dir = Path(tempfile.mkdtemp(prefix="iscsi-ab-", dir="/var/tmp"))
    try:
        for r in range(1, args.rounds + 1):
            for name, binary in zip(names, bins):
                load = os.getloadavg()
                rows = ab_round(args, fio, binary, run_dir)
                rounds.append({"round": r, "binary": name, "loadavg": load, "rows": rows})
    finally:
        bl.finish_run(run_dir, args.keep)
    meta["loadavg_end"] = os.getloadavg()
    lines = [f"### weft iSCSI vs weft NBD, same volume, A/B ({now.isoformat(timespec='seconds')})", "",
             f"A = {bins[0]}, B = {bins[1]}; {args.rounds} rounds alternating; load average "
             f"{meta['loadavg_start'][0]:.2f} at the start, {meta['loadavg_end'][0]:.2f} at the end."]
    lines += render_ab(rounds, names)
    bl.write_results(args, "iscsi-ab", now, False, meta, {"rounds": rounds}, "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", type=int, default=10, help="seconds per job (measured)")
    ap.add_argument("--ramp", type=int, default=2, help="fio-libiscsi rows: warm-up seconds per job")
    ap.add_argument("--fio-size", type=bl.parse_size, default=1 << 30,
                    help="fio-libiscsi rows: bytes of each 4 GiB LUN prefilled and used (default 1G)")
    ap.add_argument("--fio-jobs", default="", help="fio-libiscsi rows: a subset, e.g. randread-qd32,syncwrite-qd1")
    ap.add_argument("--no-fio-libiscsi", action="store_true", help="only the iscsi-perf rows")
    ap.add_argument("--no-iscsi-perf", action="store_true", help="only the fio-libiscsi rows")
    ap.add_argument("--drain-wait", type=float, default=30,
                    help="before each fio job, wait up to this long for the server to go idle")
    ap.add_argument("--weft-bin", type=Path, default=bl.REPO / "target/release/weft")
    ap.add_argument("--ab", nargs=2, type=Path, metavar=("BIN_A", "BIN_B"),
                    help="A/B of two weft binaries, weft iSCSI vs weft NBD only (see above)")
    ap.add_argument("--rounds", type=int, default=3, help="--ab: rounds, A then B in each")
    bl.add_run_args(ap)
    args = ap.parse_args()
    if args.ab:
        bl.apply_nice(args)
        run_ab(args, find_fio_libiscsi())
        return
    args.weft_bin = args.weft_bin.resolve()  # the servers run in the run dir
    fio = None if args.no_fio_libiscsi else find_fio_libiscsi()
    bl.apply_nice(args)
    now = datetime.datetime.now(datetime.timezone.utc)
    run_dir = Path(tempfile.mkdtemp(prefix="iscsi-compare-", dir="/var/tmp"))
    results: dict = {}
    fio_rows: dict = {}
    meta: dict = {"machine": bl.machine_info(), "git": bl.git_info(),
                  "params": {"runtime": args.runtime, "ramp": args.ramp, "fio_size": args.fio_size,
                             "fio_lun": FIO_LUN, "perf_lun": SIZE}}
    if fio:
        meta["fio_libiscsi"] = {"path": fio, "version": bl.run_out([fio, "--version"])}
    tgt = None
    try:
        src = run_dir / "src.img"
        subprocess.run(["head", "-c", str(SIZE), "/dev/urandom"], stdout=open(src, "wb"), check=True)
        # weft
        nbd, api, portal = bl.free_port(), bl.free_port(), bl.free_port()
        weft_dir = run_dir / "weft"
        weft = bl.Proc("weft", [str(args.weft_bin), "serve", "--data-dir", str(weft_dir),
                                 "--nbd-listen", f"127.0.0.1:{nbd}", "--api-listen",
                                 f"127.0.0.1:{api}", "--iscsi-listen", f"127.0.0.1:{portal}",
                                 "--default-volume-size", str(SIZE)], run_dir)
        weft.wait_ready(60)
        weft_url = f"iscsi://127.0.0.1:{portal}/{IQN_WEFT}vol0/0"
        if not args.no_iscsi_perf:
            subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", str(src), weft_url],
                           check=True, timeout=600)
            bl.weft_cli(args.weft_bin, weft_dir, "sync")
        if fio:
            p = bl.weft_cli(args.weft_bin, weft_dir, "volume", "create", FIO_VOLUME, "--size",
                            bl.human_size(FIO_LUN))
            if p.returncode != 0:
                raise RuntimeError(f"weft volume create failed: {p.stderr.strip()[-500:]}")
        # tgt: LUN 1 a copy of src (iscsi-perf rows), LUN 2 a sparse 4 GiB file (fio rows).
        tgt_img, tgt_fio = run_dir / "tgt.img", run_dir / "tgt-fio.img"
        subprocess.run(["cp", str(src), str(tgt_img)], check=True)
        with open(tgt_fio, "wb") as f:
            f.truncate(FIO_LUN)
        # tgtd's control "port" names its socket: at most 32767.
        tport, control = bl.free_port(), str(bl.free_port() % 30000 + 1000)
        tgt = bl.Proc("tgtd", ["tgtd", "-f", "-C", control, "--iscsi",
                               f"portal=127.0.0.1:{tport}"], run_dir)
        adm = ["tgtadm", "-C", control, "--lld", "iscsi"]
        for _ in range(100):
            if subprocess.run(adm + ["--op", "show", "--mode", "sys"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        subprocess.run(adm + ["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN_TGT], check=True)
        for lun, img in ((1, tgt_img), (2, tgt_fio)):
            subprocess.run(adm + ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", str(lun),
                                  "-b", str(img), "--bsoflags", "direct"], check=True)
        subprocess.run(adm + ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"], check=True)
        tgt_url = f"iscsi://127.0.0.1:{tport}/{IQN_TGT}/1"
        if not args.no_iscsi_perf:
            for name, flags, io_bytes, rw, qd in JOBS:
                row = {
                    # vol0 is 512e (weft's default), like tgt's LUN: 512-byte blocks.
                    "weft iscsi": iscsi_perf(weft_url, flags, io_bytes, 512, args.runtime, [weft.pid]),
                    "tgt iscsi": iscsi_perf(tgt_url, flags, io_bytes, 512, args.runtime, [tgt.pid]),
                    "weft nbd": fio_nbd(f"nbd://127.0.0.1:{nbd}/vol0", rw, io_bytes, qd, args.runtime,
                                        [weft.pid], run_dir),
                }
                results[name] = row
                bl.log(f"{name}: " + json.dumps(row))
        if fio:
            targets = {
                "weft iscsi": (fio_target("iscsi", f"iscsi://127.0.0.1:{portal}/{IQN_WEFT}{FIO_VOLUME}/0"),
                               [weft.pid]),
                "tgt iscsi": (fio_target("iscsi", f"iscsi://127.0.0.1:{tport}/{IQN_TGT}/2"), [tgt.pid]),
                "weft nbd": (fio_target("nbd", f"nbd://127.0.0.1:{nbd}/{FIO_VOLUME}"), [weft.pid]),
            }
            meta["prefill"] = {}
            for name in ("weft iscsi", "tgt iscsi"):
                bl.log(f"prefill {bl.human_size(args.fio_size)} of {name}'s 4 GiB LUN")
                meta["prefill"][name] = fio_prefill(fio, targets[name][0], args.fio_size,
                                                    run_dir / f"prefill-{name.split()[0]}.json")
            bl.weft_cli(args.weft_bin, weft_dir, "sync", timeout=600)
            meta["weft_stats_after_prefill"] = bl.weft_stats(args.weft_bin, weft_dir)
            fio_rows = run_fio_rows(args, fio, targets, run_dir)
    finally:
        if tgt is not None:
            tgt.kill9()  # tgtd ignores SIGTERM
        bl.finish_run(run_dir, args.keep)
    lines = [f"### weft iSCSI vs tgt (iscsi-perf) and weft NBD (fio) — {now.isoformat(timespec='seconds')}"]
    if results:
        lines += ["", "Cell: IOPS · MB/s · server CPU (cores).", "",
                  "| job | weft iSCSI | tgt iSCSI | weft NBD | weft/tgt | weft iSCSI/NBD |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, row in results.items():
            cell = lambda r: f"{r['iops']} · {r['mb_s']} · {r['cpu']:.2f}"
            w, t, n = row["weft iscsi"], row["tgt iscsi"], row["weft nbd"]
            lines.append(f"| {name} | {cell(w)} | {cell(t)} | {cell(n)} | {w['iops'] / max(t['iops'], 1):.2f}x "
                         f"| {w['iops'] / max(n['iops'], 1):.2f}x |")
    if fio_rows:
        lines += render_fio(fio_rows)
    bl.write_results(args, "iscsi-compare", now, False, meta,
                     {"iscsi-perf": results, "fio-libiscsi": fio_rows}, "\n".join(lines))


if __name__ == "__main__":
    main()
