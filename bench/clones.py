#!/usr/bin/env python3
"""Thin clones benchmark: what N writable copies of one database image cost.

One `weft serve` (release build, its own temp data dir and ports) and fio's nbd engine:

1. aggregate 8k random read/write IOPS (70% reads) across N clones of one snapshot of a
   prefilled base volume, beside the same load on N independent, equally prefilled volumes,
   same server, same run, for N in --counts (default 1 4 16 26);
2. 4k random read latency at QD1 through the deepest chain weft allows (a clone of the last
   of 127 snapshots, each layer holding a few blocks, the data in the bottom layer), beside the
   same read on a volume with no snapshots;
3. the cost of creating 100 clones (API round trip, p50/p99/max), and what they add to the
   metadata (cluster.json size, engine metadata memory estimate);
4. the I/O pause of cutting snapshots under load (measured first, on a small data dir): fio
   4k randwrite QD1 on a volume while 20 snapshots are taken, its max and p99.9 latency beside
   the same run without snapshots, and the engine's own barrier time per snapshot.

Python 3.11 standard library only.  Results: markdown on stdout, JSON + markdown in
bench/results/ (gitignored).  Usage: bench/clones.py [--size 256M] [--runtime 15]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
REPO = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
CHAIN_SNAPSHOTS = 127  # a clone of the last one reads through 128 layers (CHAIN_LAYERS_MAX)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_size(s: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    s = s.strip().upper().rstrip("B")
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Weft:
    """A `weft serve` process and a client of its management API."""

    def __init__(self, binary: Path, workdir: Path, weft_args: str) -> None:
        self.data = workdir / "data"
        self.nbd_port, self.api_port = free_port(), free_port()
        cmd = [str(binary), "serve", "--data-dir", str(self.data),
               "--nbd-listen", f"127.0.0.1:{self.nbd_port}",
               "--api-listen", f"127.0.0.1:{self.api_port}", "--iscsi-listen", "127.0.0.1:0",
               "--default-volume", "scratch", "--default-volume-size", "64M"] + shlex.split(weft_args)
        log(f"starting: {shlex.join(cmd)}")
        self.log = open(workdir / "server.log", "ab")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL)
        ready = threading.Event()

        def pump() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.strip().startswith(b"ready"):
                    ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(120):
            self.stop()
            raise RuntimeError("weft did not print 'ready' within 120 s")
        self.token = (self.data / "api-token").read_text().strip()

    def api(self, method: str, path: str, body: dict | None = None) -> dict | list | None:
        req = urllib.request.Request(
            f"http://127.0.0.1:{self.api_port}/api/v1{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=600) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"{method} {path}: {e.code} {e.read().decode(errors='replace')}") from None
        return json.loads(raw) if raw else None

    def uri(self, export: str) -> str:
        return f"nbd://127.0.0.1:{self.nbd_port}/{export}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def fio(args: list[str]) -> dict:
    out = subprocess.run(["fio", "--output-format=json"] + args, check=True, capture_output=True, text=True)
    return json.loads(out.stdout[out.stdout.index("{"):])


def prefill(w: Weft, names: list[str], size: int) -> None:
    """Sequential 1M writes of incompressible, never repeating data: reads are of real blocks."""
    jobs = []
    for n in names:
        jobs += [f"--name={n}", "--ioengine=nbd", f"--uri={w.uri(n)}", "--rw=write", "--bs=1M",
                 "--iodepth=8", f"--size={size}", "--refill_buffers", "--randrepeat=0"]
    fio(jobs)


def mixed_load(w: Weft, names: list[str], runtime: int, ramp: int) -> dict:
    """8k random 70/30 read/write, QD4 per image, one fio job per image, aggregated."""
    jobs = ["--group_reporting"]
    for n in names:
        jobs += [f"--name={n}", "--ioengine=nbd", f"--uri={w.uri(n)}", "--rw=randrw",
                 "--rwmixread=70", "--bs=8k", "--iodepth=4", "--norandommap", "--randrepeat=0",
                 "--refill_buffers", "--time_based", f"--runtime={runtime}", f"--ramp_time={ramp}"]
    d = fio(jobs)["jobs"][0]
    return {
        "read_iops": d["read"]["iops"],
        "write_iops": d["write"]["iops"],
        "iops": d["read"]["iops"] + d["write"]["iops"],
        "read_lat_us": d["read"]["clat_ns"]["mean"] / 1000,
        "write_lat_us": d["write"]["clat_ns"]["mean"] / 1000,
    }


def qd1_read(w: Weft, name: str, runtime: int, ramp: int) -> dict:
    d = fio([f"--name={name}", "--ioengine=nbd", f"--uri={w.uri(name)}", "--rw=randread", "--bs=4k",
             "--iodepth=1", "--norandommap", "--randrepeat=0", "--time_based",
             f"--runtime={runtime}", f"--ramp_time={ramp}"])["jobs"][0]["read"]
    pct = d["clat_ns"].get("percentile", {})
    return {"iops": d["iops"], "mean_us": d["clat_ns"]["mean"] / 1000,
            "p99_us": pct.get("99.000000", 0) / 1000}


def snapshot_pause(w: Weft, name: str, runtime: int, snapshots: int, tag: str = "s") -> dict:
    """fio 4k randwrite QD1 for `runtime` s; if `snapshots`, cut that many during the run."""
    cmd = ["fio", "--output-format=json", f"--name={name}", "--ioengine=nbd", f"--uri={w.uri(name)}",
           "--rw=randwrite", "--bs=4k", "--iodepth=1", "--norandommap", "--randrepeat=0",
           "--refill_buffers", "--time_based", f"--runtime={runtime}",
           "--percentile_list=99:99.9:100"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    barriers = []
    if snapshots:
        time.sleep(1.5)
        gap = max(0.05, (runtime - 3) / snapshots)
        for i in range(snapshots):
            s = w.api("POST", f"/volumes/{name}/snapshots", {"name": f"{name}-{tag}{i}"})
            barriers.append(s.get("barrier_micros", 0))
            time.sleep(gap)
    out, _ = p.communicate()
    d = json.loads(out[out.index("{"):])["jobs"][0]["write"]
    pct = d["clat_ns"]["percentile"]
    return {"iops": d["iops"], "mean_us": d["clat_ns"]["mean"] / 1000,
            "p999_us": pct["99.900000"] / 1000, "max_us": d["clat_ns"]["max"] / 1000,
            "barrier_us": barriers}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="256M", help="size of the base volume and of each independent volume")
    ap.add_argument("--counts", default="1 4 16 26", help="numbers of clones / volumes")
    ap.add_argument("--runtime", type=int, default=15, help="seconds per measured point")
    ap.add_argument("--ramp", type=int, default=3, help="warm-up seconds per point")
    ap.add_argument("--clones-to-create", type=int, default=100)
    ap.add_argument("--workdir", default=None,
                    help="where the data dir goes (default: a temp dir, removed at the end)")
    ap.add_argument("--weft-bin", default=str(REPO / "target/release/weft"))
    ap.add_argument("--weft-args", default="", help="extra `weft serve` flags")
    ap.add_argument("--no-build", action="store_true")
    a = ap.parse_args()
    size = parse_size(a.size)
    counts = [int(c) for c in a.counts.split()]
    if not a.no_build:
        subprocess.run(["cargo", "build", "--release", "-p", "weft"], cwd=REPO, check=True)
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="weft-clones-"))
    w = Weft(Path(a.weft_bin), workdir, a.weft_args)
    results: dict = {"size_bytes": size, "runtime_s": a.runtime, "counts": counts,
                     "started": dt.datetime.now().isoformat(timespec="seconds")}
    try:
        # First, while the data dir is small: a checkpoint of a large one pauses I/O for its
        # own reasons (encode under the state lock), which would hide what a snapshot costs.
        log("snapshot pause under a QD1 write load")
        w.api("POST", "/volumes", {"name": "busy", "size_bytes": size})
        results["snapshot_pause"] = {"without": snapshot_pause(w, "busy", a.runtime, 0),
                                     "with": snapshot_pause(w, "busy", a.runtime, 20)}
        n_max = max(counts)
        log(f"base volume {a.size}, {n_max} independent volumes of {a.size}: prefilling")
        w.api("POST", "/volumes", {"name": "base", "size_bytes": size})
        indep = [f"vol{i}" for i in range(n_max)]
        for n in indep:
            w.api("POST", "/volumes", {"name": n, "size_bytes": size})
        prefill(w, ["base"] + indep, size)
        w.api("POST", "/volumes/base/snapshots", {"name": "gold"})
        clones = [f"clone{i}" for i in range(n_max)]
        for c in clones:
            w.api("POST", "/snapshots/gold/clones", {"name": c})
        w.api("POST", "/sync")
        results["load"] = []
        for n in counts:
            log(f"8k randrw 70/30 on {n} clones, then on {n} volumes")
            on_clones = mixed_load(w, clones[:n], a.runtime, a.ramp)
            on_volumes = mixed_load(w, indep[:n], a.runtime, a.ramp)
            results["load"].append({"n": n, "clones": on_clones, "volumes": on_volumes})
        w.api("POST", "/sync")
        space = [w.api("GET", f"/volumes/{c}")["space"] for c in clones]
        fam = w.api("GET", "/volumes/base")["family"]
        results["clone_space"] = {
            "own_bytes": sum(s["own_bytes"] for s in space),
            "unique_stored_bytes": sum(s["unique_stored_bytes"] for s in space),
            "family_stored_bytes": fam["reduction"]["stored_bytes"],
        }

        log(f"deep chain: {CHAIN_SNAPSHOTS} snapshots of 'deep', a few blocks written between")
        w.api("POST", "/volumes", {"name": "deep", "size_bytes": size})
        w.api("POST", "/volumes", {"name": "flat", "size_bytes": size})
        prefill(w, ["deep", "flat"], size)
        for i in range(CHAIN_SNAPSHOTS):
            fio([f"--name=l{i}", "--ioengine=nbd", f"--uri={w.uri('deep')}", "--rw=randwrite",
                 "--bs=4k", "--iodepth=1", "--io_size=64k", f"--size={size}", "--randrepeat=0"])
            w.api("POST", "/volumes/deep/snapshots", {"name": f"deep-{i}"})
        w.api("POST", f"/snapshots/deep-{CHAIN_SNAPSHOTS - 1}/clones", {"name": "deepest"})
        depth = w.api("GET", "/volumes/deepest")["chain_layers"]
        w.api("POST", "/sync")
        results["chain"] = {"layers": depth,
                            "deepest": qd1_read(w, "deepest", a.runtime, a.ramp),
                            "flat": qd1_read(w, "flat", a.runtime, a.ramp)}

        log(f"creating {a.clones_to_create} clones")
        meta = w.data / "meta" / "meta.json"
        before = (meta.stat().st_size, w.api("GET", "/stats")["metadata_memory_bytes"])
        times = []
        for i in range(a.clones_to_create):
            t = time.perf_counter()
            w.api("POST", "/snapshots/gold/clones", {"name": f"many{i}"})
            times.append((time.perf_counter() - t) * 1000)
        after = (meta.stat().st_size, w.api("GET", "/stats")["metadata_memory_bytes"])
        times.sort()
        results["create_clones"] = {
            "count": len(times), "total_s": sum(times) / 1000,
            "p50_ms": statistics.median(times), "p99_ms": times[int(len(times) * 0.99) - 1],
            "max_ms": times[-1], "cluster_json_bytes_added": after[0] - before[0],
            "metadata_memory_bytes_added": after[1] - before[1]}

    finally:
        w.stop()
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)  # gigabytes of chunks
    md = render(results, a)
    print(md)
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    (RESULTS_DIR / f"clones-{stamp}.json").write_text(json.dumps(results, indent=2))
    (RESULTS_DIR / f"clones-{stamp}.md").write_text(md)
    return 0


def render(r: dict, a: argparse.Namespace) -> str:
    mib = 1 << 20
    lines = [f"### Thin clones (`bench/clones.py --size {a.size} --runtime {a.runtime}`, {r['started']})", "",
             "8k random read/write 70/30, QD4 per image, one fio nbd job per image:", "",
             "| images | N clones of one snapshot (IOPS) | N independent volumes (IOPS) | clones/volumes | read lat clones / volumes (µs) |",
             "|---:|---:|---:|---:|---:|"]
    for p in r["load"]:
        c, v = p["clones"], p["volumes"]
        lines.append(f"| {p['n']} | {c['iops']:.0f} | {v['iops']:.0f} | {c['iops'] / max(v['iops'], 1):.2f}x "
                     f"| {c['read_lat_us']:.0f} / {v['read_lat_us']:.0f} |")
    cs = r["clone_space"]
    lines += ["", f"After that load the {max(r['counts'])} clones hold {cs['own_bytes'] / mib:.0f} MiB of their own "
                  f"blocks and would free {cs['unique_stored_bytes'] / mib:.0f} MiB if deleted; the whole family "
                  f"(base + clones) stores {cs['family_stored_bytes'] / mib:.0f} MiB "
                  f"(base {r['size_bytes'] / mib:.0f} MiB).", ""]
    ch = r["chain"]
    lines += [f"4k random read QD1: clone at the bottom of a {ch['layers']}-layer chain "
              f"{ch['deepest']['mean_us']:.0f} µs mean / {ch['deepest']['p99_us']:.0f} µs p99 "
              f"({ch['deepest']['iops']:.0f} IOPS) vs a volume without snapshots "
              f"{ch['flat']['mean_us']:.0f} µs / {ch['flat']['p99_us']:.0f} µs ({ch['flat']['iops']:.0f} IOPS): "
              f"{ch['deepest']['mean_us'] / max(ch['flat']['mean_us'], 1):.2f}x.", ""]
    cc = r["create_clones"]
    lines += [f"Creating {cc['count']} clones: {cc['total_s']:.2f} s in all, {cc['p50_ms']:.1f} ms p50, "
              f"{cc['p99_ms']:.1f} ms p99, {cc['max_ms']:.1f} ms max per clone (API round trip, one "
              f"cluster-state fsync each); +{cc['cluster_json_bytes_added'] / 1024:.0f} KiB cluster.json, "
              f"+{cc['metadata_memory_bytes_added'] / 1024:.0f} KiB metadata memory.", ""]
    sp = r["snapshot_pause"]
    b = sp["with"]["barrier_us"]
    lines += [f"Snapshots under a 4k randwrite QD1 load: {len(b)} snapshots, engine barrier "
              f"{statistics.median(b) if b else 0:.0f} µs median / {max(b) if b else 0} µs max; fio write latency "
              f"max {sp['with']['max_us']:.0f} µs, p99.9 {sp['with']['p999_us']:.0f} µs with snapshots vs "
              f"max {sp['without']['max_us']:.0f} µs, p99.9 {sp['without']['p999_us']:.0f} µs without "
              f"({sp['with']['iops']:.0f} vs {sp['without']['iops']:.0f} IOPS)."]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
