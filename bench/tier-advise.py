#!/usr/bin/env python3
"""The tier advisor on a skewed database-like workload: how much of a volume it puts on flash
and what that saves at stated prices.

A `weft serve` (its store on the `performance` tier) with one volume, filled once with
sequential 32 MiB writes (two per 64 MiB extent, so the initial load barely counts in the hour window); then fio's nbd engine runs 8 KiB random reads and writes (70/30)
with a Zipf distribution (a few hot extents, a long cold tail, like an OLTP database's
B-tree leaves and heap) at a fixed IOPS rate for a while; then `weft tier advise --json` on
the hour window. Printed and written to bench/results/: the share of the data advised on
performance, the monthly cost with everything on performance (now), after the advice, and
with everything on capacity, at the prices given.

Not the pgbench image of the issue (bench/pgbench-image.sh does not exist in this tree): a
synthetic skew whose parameters are stated. The figures are counts and prices, not speeds:
a debug build is fine.

    python3 bench/tier-advise.py [--size 2G] [--zipf 1.2] [--rate-iops 2] [--runtime 120]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib as bl  # noqa: E402


def fio(*argv: str, timeout: float) -> None:
    p = subprocess.run(["fio", "--ioengine=nbd", *argv], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"fio failed ({p.returncode}): {p.stdout[-2000:]}{p.stderr[-2000:]}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weft", default=str(bl.REPO / "target/debug/weft"))
    ap.add_argument("--size", default="2G", help="volume size")
    ap.add_argument("--zipf", default="1.2", help="fio zipf theta (higher: more skew)")
    ap.add_argument("--rate-iops", type=int, default=2, help="fio --rate_iops (per direction: reads, and writes up to it)")
    ap.add_argument("--runtime", type=int, default=120, help="seconds of load")
    ap.add_argument("--perf-gb", type=float, default=0.10, help="$/GB-month of performance (local NVMe)")
    ap.add_argument("--perf-iops", type=float, default=0.0)
    ap.add_argument("--cap-gb", type=float, default=0.015, help="$/GB-month of capacity (HDD)")
    ap.add_argument("--cap-iops", type=float, default=0.10, help="$/IOPS-month of capacity")
    args = ap.parse_args()

    run = Path(tempfile.mkdtemp(prefix="tier-advise-"))
    data = run / "data"
    nbd, api, metrics = bl.free_port(), bl.free_port(), bl.free_port()
    serve = bl.Proc("serve", [
        args.weft, "--data-dir", str(data), "serve",
        "--nbd-listen", f"127.0.0.1:{nbd}", "--api-listen", f"127.0.0.1:{api}",
        "--metrics-listen", f"127.0.0.1:{metrics}", "--iscsi-listen", "off",
        "--default-volume", "db", "--default-volume-size", args.size,
        "--tier", "performance", f"--price-gb={args.perf_gb}", f"--price-iops={args.perf_iops}",
    ], run)
    serve.wait_ready(120)
    cli = lambda *a: bl.weft_cli(Path(args.weft), data, *a)  # noqa: E731
    p = cli("tier", "set", "capacity", f"--price-gb={args.cap_gb}", f"--price-iops={args.cap_iops}")
    assert p.returncode == 0, p.stderr
    uri = f"nbd://127.0.0.1:{nbd}/db"
    bl.log("fill")
    fio(f"--uri={uri}", "--name=fill", "--rw=write", "--bs=32M", f"--size={args.size}", "--iodepth=4",
        timeout=1800)
    bl.log(f"load: 8k randrw 70/30 zipf:{args.zipf} at {args.rate_iops} IOPS for {args.runtime}s")
    t0 = time.monotonic()
    fio(f"--uri={uri}", "--name=oltp", "--rw=randrw", "--rwmixread=70", "--bs=8k", f"--size={args.size}",
        "--iodepth=4", f"--random_distribution=zipf:{args.zipf}", f"--rate_iops={args.rate_iops}",
        "--time_based", f"--runtime={args.runtime}", "--norandommap", timeout=args.runtime + 600)
    load_s = time.monotonic() - t0
    p = cli("tier", "advise", "db", "--window", "hour", "--json")
    assert p.returncode == 0, p.stderr
    advice = json.loads(p.stdout)
    table = cli("tier", "advise", "db", "--window", "hour").stdout
    serve.stop()

    vol = advice["volumes"][0]
    extents = vol["extents"]
    data_total = sum(e["data_bytes"] for e in extents)
    on_perf = vol["data_bytes_by_tier"].get("performance", 0)
    gib = lambda e: e["gib"]  # noqa: E731
    all_cap = sum(max(e["iops"]["hour"] * args.cap_iops, gib(e) * args.cap_gb) for e in extents)
    hot = sorted(extents, key=lambda e: -e["iops"]["hour"])
    result = {
        "params": vars(args) | {"load_s": round(load_s, 1)},
        "extent_bytes": vol["extent_bytes"],
        "extents": len(extents),
        "covered_s": vol["covered_s"]["hour"],
        "total_iops": round(sum(e["iops"]["hour"] for e in extents), 1),
        "share_on_performance": on_perf / data_total if data_total else 0.0,
        "extents_on_performance": sum(1 for e in extents if e["advised_tier"] == "performance"),
        "cost_all_performance": vol["cost_now"],
        "cost_after_advice": vol["cost_after"],
        "cost_all_capacity": all_cap,
        "hottest_iops_per_gb": [round(e["iops_per_gb"]["hour"] or 0, 1) for e in hot[:5]],
        "coldest_iops_per_gb": [round(e["iops_per_gb"]["hour"] or 0, 2) for e in hot[-3:]],
    }
    print(table)
    print(json.dumps(result, indent=2))
    bl.RESULTS_DIR.mkdir(exist_ok=True)
    out = bl.RESULTS_DIR / f"tier-advise-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    bl.log(f"results: {out}; run dir {run}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
