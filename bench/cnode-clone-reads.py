#!/usr/bin/env python3
"""Reads of many clones of one snapshot through a c.node, with and without its read cache.

A cluster (etcd + 1 d.node + `weft cnode --redundancy none`) per cache size in --cache-sizes;
the base volume vol0 (--size) is prefilled with incompressible random data, snapshotted, and
--clones clones are made of the snapshot. Then two fio runs (ioengine=nbd, 4k random reads,
--qd per connection, --runtime after --ramp):

- `one volume`: --clones connections to vol0 itself;
- `clones`: one connection to each clone, all at once (Delphix's case: many copies of one
  database read together).

Every clone maps the same stored blocks, so a cache keyed by stored block holds one copy of
each for all of them. Reported: aggregate IOPS, server CPU (c.node + d.node, cores), and the
c.node's read-cache hits and misses (engine stats) over each run.

Python 3.11 standard library only; reuses bench/benchlib.py.  Usage:
  bench/cnode-clone-reads.py --weft-bin target/release/weft [--size 512M] [--clones 26]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
import benchlib  # noqa: E402

log = benchlib.log


def read_cache(c: benchlib.Cluster) -> dict:
    p = c.weft("stats", "--json", timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"weft stats failed: {p.stderr.strip()[-300:]}")
    d = json.loads(p.stdout)
    return (d.get("engine") or d).get("read_cache", {})


def fio_reads(uris: list[str], a: argparse.Namespace, out: Path) -> dict:
    cmd = ["fio", "--ioengine=nbd", "--rw=randread", "--bs=4k", f"--iodepth={a.qd}",
           "--time_based", f"--runtime={a.runtime}", f"--ramp_time={a.ramp}",
           f"--size={a.size}", "--norandommap", "--randrepeat=0", "--group_reporting",
           "--output-format=json", f"--output={out}"]
    for i, uri in enumerate(uris):
        cmd += [f"--name=j{i}", f"--uri={uri}"]
    subprocess.run(cmd, check=True, timeout=a.runtime + a.ramp + 120,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return benchlib.load_fio_json(out)["jobs"][0]["read"]


def measure(c: benchlib.Cluster, uris: list[str], a: argparse.Namespace, out: Path) -> dict:
    before = read_cache(c)
    t0, cpu0 = time.monotonic(), benchlib.cpu_ticks(c.pids())
    r = fio_reads(uris, a, out)
    wall = time.monotonic() - t0
    cores = (benchlib.cpu_ticks(c.pids()) - cpu0) / benchlib.CLK_TCK / wall
    after = read_cache(c)
    hits = after.get("hits", 0) - before.get("hits", 0)
    misses = after.get("misses", 0) - before.get("misses", 0)
    return {"iops": r["iops"], "cores": cores, "hits": hits, "misses": misses,
            "lat_mean_us": r["clat_ns"]["mean"] / 1000,
            "cache_bytes": after.get("bytes", 0)}


def run(cache: str, a: argparse.Namespace, work: Path) -> dict:
    a.cnode_args = f"--read-cache-size {cache}"
    c = benchlib.Cluster(f"cache-{cache}", work / f"cache-{cache}", a, "none", 1,
                         benchlib.parse_size(a.size))
    c.start()
    try:
        log(f"cache {cache}: prefill {a.size}")
        subprocess.run(["fio", "--name=prefill", "--ioengine=nbd", f"--uri={c.uri}", "--rw=write",
                        "--bs=1M", "--iodepth=8", f"--size={a.size}", "--refill_buffers",
                        "--output=/dev/null"], check=True, timeout=600,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for argv in [("sync",), ("snapshot", "create", "vol0@base")] + [
                ("clone", "create", "vol0@base", f"clone{i}") for i in range(a.clones)]:
            p = c.weft(*argv)
            if p.returncode != 0:
                raise RuntimeError(f"weft {' '.join(argv)}: {p.stderr.strip()[-300:]}")
        base = c.uri.rsplit("/", 1)[0]
        one = measure(c, [c.uri] * a.clones, a, work / f"one-{cache}.json")
        log(f"cache {cache}: one volume: {one}")
        clones = measure(c, [f"{base}/clone{i}" for i in range(a.clones)], a,
                         work / f"clones-{cache}.json")
        log(f"cache {cache}: {a.clones} clones: {clones}")
        return {"cache": cache, "one_volume": one, "clones": clones, "cnode": c.cmds["cnode"]}
    finally:
        c.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft-bin", type=Path, required=True)
    ap.add_argument("--size", default="512M", help="base volume size (default 512M)")
    ap.add_argument("--clones", type=int, default=26)
    ap.add_argument("--qd", type=int, default=2, help="iodepth per connection (default 2)")
    ap.add_argument("--runtime", type=int, default=15)
    ap.add_argument("--ramp", type=int, default=5)
    ap.add_argument("--cache-sizes", default="0,256M,1G",
                    help="c.node --read-cache-size values (default 0,256M,1G)")
    ap.add_argument("--start-timeout", type=float, default=60)
    ap.add_argument("--workdir", type=Path, default=None)
    a = ap.parse_args()
    a.weft_bin = a.weft_bin.resolve()
    rows = []
    with tempfile.TemporaryDirectory(dir=a.workdir, prefix="clone-reads-") as tmp:
        for cache in a.cache_sizes.split(","):
            rows.append(run(cache.strip(), a, Path(tmp)))
    print(f"\n{a.clones} connections, 4k random reads QD{a.qd} each, {a.runtime} s after "
          f"{a.ramp} s; base volume {a.size}. Cell: IOPS · server cores · cache hit ratio\n")
    print("| --read-cache-size | one volume | clones | clones / one volume |")
    print("|---|---:|---:|---:|")
    for r in rows:
        def cell(m: dict) -> str:
            n = m["hits"] + m["misses"]
            ratio = f"{m['hits'] / n:.0%}" if n else "-"
            return f"{m['iops'] / 1000:.1f}k · {m['cores']:.2f} · {ratio}"
        print(f"| {r['cache']} | {cell(r['one_volume'])} | {cell(r['clones'])} | "
              f"{r['clones']['iops'] / r['one_volume']['iops']:.2f}x |")
    print(f"\nc.node: `{rows[-1]['cnode']}`")


if __name__ == "__main__":
    main()
