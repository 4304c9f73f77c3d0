#!/usr/bin/env python3
"""Quality of service per volume, measured with fio's nbd engine against one release `weft
serve`, in one run:

  limit      a volume limited to 5,000 IOPS under 4k randwrite QD32 (after a 2 s ramp that
             spends its burst): achieved IOPS and the error against the limit;
  burst      a fresh volume limited to 5,000 IOPS with a 20,000 I/O burst, idle, then QD32:
             IOPS per 0.5 s (the burst first, then the sustained rate);
  latency    a 4k randwrite QD1 volume while a neighbour runs 4k randwrite QD64: the QD1
             volume's p99 without QoS, then with `--latency-target` (2 ms, `--target-us`; same
             server, same volumes, back to back), and the neighbour's IOPS in each;
  overhead   4k randread QD32 on one volume with a limit that never binds (10,000,000 IOPS)
             and without QoS, set and cleared live, A/B interleaved over rounds (order
             alternating).

Prints a markdown table and writes JSON to bench/results/. `--parts latency` runs one measure.

Python 3.11 standard library only. Example:
    cargo build --release -p weft
    python3 bench/qos.py --runtime 10 --rounds 3
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    REPO, RESULTS_DIR, Proc, free_port, git_info, load_fio_json, log, machine_info, stop_all,
    wait_port, weft_cli,
)


def fio(uri: str, out: Path, rw: str, qd: int, runtime: int, size: str,
        ramp: int = 2, extra: list[str] | None = None) -> subprocess.Popen:
    cmd = ["fio", "--name=j", "--ioengine=nbd", f"--uri={uri}", "--bs=4k", f"--rw={rw}",
           f"--iodepth={qd}", f"--size={size}", "--time_based", f"--runtime={runtime}",
           f"--ramp_time={ramp}", "--randrepeat=0", "--refill_buffers=1",
           "--output-format=json", f"--output={out}", *(extra or [])]
    return subprocess.Popen(cmd, cwd=out.parent, stdout=subprocess.DEVNULL)


def result(out: Path) -> dict:
    j = load_fio_json(out)["jobs"][0]
    side = j["write"] if j["write"]["iops"] > j["read"]["iops"] else j["read"]
    pct = side["clat_ns"].get("percentile", {})
    return {"iops": side["iops"], "p99_us": pct.get("99.000000", 0) / 1e3,
            "mean_us": side["clat_ns"]["mean"] / 1e3}


def run_fio(*args, **kw) -> dict:
    p = fio(*args, **kw)
    p.wait(timeout=600)
    return result(args[1])


class Weft:
    def __init__(self, a, work: Path):
        self.bin, self.data = a.weft_bin, work / "data"
        self.nbd, api = free_port(), free_port()
        self.server = Proc("weft", [str(a.weft_bin), "--data-dir", str(self.data), "serve",
                                    "--nbd-listen", f"127.0.0.1:{self.nbd}",
                                    "--api-listen", f"127.0.0.1:{api}", "--iscsi-listen", "off",
                                    "--default-volume-size", "64M"], work)
        self.server.wait_ready(120)
        wait_port(self.nbd, self.server.proc, 30)

    def cli(self, *argv: str) -> dict:
        r = weft_cli(self.bin, self.data, "--json", *argv)
        if r.returncode != 0:
            raise RuntimeError(f"weft {' '.join(argv)}: {r.stderr}")
        return json.loads(r.stdout) if r.stdout.strip() else {}

    def uri(self, volume: str) -> str:
        return f"nbd://127.0.0.1:{self.nbd}/{volume}"

    def fill(self, volume: str, size: str) -> None:
        subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={self.uri(volume)}",
                        "--rw=write", "--bs=1M", "--iodepth=8", f"--size={size}",
                        "--refill_buffers=1"], check=True, timeout=600, stdout=subprocess.DEVNULL)


def measure_limit(w: Weft, a, work: Path) -> dict:
    w.cli("volume", "create", "lim", "--size", a.size, "--iops-max", "5000")
    r = run_fio(w.uri("lim"), work / "limit.json", "randwrite", 32, a.runtime, a.size)
    r["limit"] = 5000
    r["error_pct"] = (r["iops"] - 5000) / 5000 * 100
    log(f"limit: {r['iops']:.0f} IOPS under 5,000 ({r['error_pct']:+.2f}%)")
    return r


def measure_burst(w: Weft, a, work: Path) -> dict:
    w.cli("volume", "create", "burst", "--size", a.size, "--iops-max", "5000",
          "--iops-burst", "20000")
    out = work / "burst.json"
    run_fio(w.uri("burst"), out, "randwrite", 32, 6, a.size, ramp=0,
            extra=["--write_iops_log=burst", "--log_avg_msec=500"])
    series = []
    for line in (work / "burst_iops.1.log").read_text().splitlines():
        t_ms, value = (int(x.strip()) for x in line.split(",")[:2])
        series.append((t_ms, value))
    log("burst: IOPS per 0.5 s: " + ", ".join(f"{v}" for _, v in series))
    sustained = [v for t, v in series if t > 3000]
    return {"series": series, "first_interval_iops": series[0][1] if series else None,
            "sustained_iops": statistics.mean(sustained) if sustained else None}


def measure_latency(w: Weft, a, work: Path) -> dict:
    w.cli("volume", "create", "db", "--size", a.size)
    w.cli("volume", "create", "noisy", "--size", a.size)
    out = {}
    for phase in ("without", "with"):
        if phase == "with":
            w.cli("volume", "qos", "db", "--latency-target", f"{a.target_us}us")
        noisy = fio(w.uri("noisy"), work / f"noisy-{phase}.json", "randwrite", 64,
                    a.runtime + 2, a.size, ramp=1)
        db = run_fio(w.uri("db"), work / f"db-{phase}.json", "randwrite", 1, a.runtime, a.size)
        noisy.wait(timeout=600)
        n = result(work / f"noisy-{phase}.json")
        qos = w.cli("volume", "qos", "noisy")
        # The p99 the controller holds to the target (the last 100 ms window's).
        db_qos = w.cli("volume", "qos", "db")
        out[phase] = {"db_p99_us": db["p99_us"], "db_mean_us": db["mean_us"],
                      "db_iops": db["iops"], "noisy_iops": n["iops"],
                      "noisy_throttled_ios": qos.get("throttled_ios"),
                      "db_weft_p99_us": db_qos.get("latency_p99_us")}
        log(f"latency {phase} QoS: db p99 {db['p99_us']:.0f} µs (mean {db['mean_us']:.0f}), "
            f"noisy {n['iops']:.0f} IOPS, noisy throttled {qos.get('throttled_ios')}")
    w.cli("volume", "qos", "db", "--clear")
    return out


def measure_overhead(w: Weft, a, work: Path) -> dict:
    # One volume, its limit set and cleared live between runs: the same data and placement
    # on both sides (two volumes differ by where their data sits: one filled later reads
    # from the write buffer).
    w.cli("volume", "create", "ab", "--size", a.size)
    w.fill("ab", a.size)
    runs: dict[str, list[float]] = {"plain": [], "free": []}
    for i in range(a.rounds):
        order = ["plain", "free"] if i % 2 == 0 else ["free", "plain"]
        for v in order:
            if v == "free":
                w.cli("volume", "qos", "ab", "--iops-max", "10000000")
            else:
                w.cli("volume", "qos", "ab", "--clear")
            r = run_fio(w.uri("ab"), work / f"ovh-{v}-{i}.json", "randread", 32, a.runtime, a.size)
            runs[v].append(r["iops"])
            log(f"overhead round {i} {v}: {r['iops']:.0f} IOPS")
    plain, free = statistics.median(runs["plain"]), statistics.median(runs["free"])
    return {"runs": runs, "plain_median": plain, "limited_median": free,
            "cost_pct": (plain - free) / plain * 100}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weft-bin", type=Path, default=REPO / "target/release/weft")
    p.add_argument("--runtime", type=int, default=10, help="seconds per fio job (plus ramp)")
    p.add_argument("--rounds", type=int, default=3, help="A/B rounds of the overhead runs")
    p.add_argument("--size", default="256M", help="size of each volume")
    p.add_argument("--target-us", type=int, default=2000, help="the QD1 volume's p99 target")
    p.add_argument("--parts", default="limit,burst,latency,overhead",
                   help="which measures to run, comma-separated (default: all)")
    a = p.parse_args()
    if not a.weft_bin.exists():
        sys.exit(f"{a.weft_bin} missing: cargo build --release -p weft")
    try:
        with tempfile.TemporaryDirectory(prefix="weft-qos-bench-") as tmp:
            work = Path(tmp)
            w = Weft(a, work)
            measures = {"limit": measure_limit, "burst": measure_burst,
                        "latency": measure_latency, "overhead": measure_overhead}
            res = {part: measures[part](w, a, work) for part in a.parts.split(",")}
            w.server.stop()
    finally:
        stop_all()
    rows = ["| measure | figure |", "|---|---|"]
    if "limit" in res:
        lim = res["limit"]
        rows.append(f"| 5,000 IOPS limit, 4k randwrite QD32 | {lim['iops']:.0f} IOPS "
                    f"({lim['error_pct']:+.2f}%) |")
    if "burst" in res:
        b = res["burst"]
        rows.append(f"| burst 20,000 then 5,000: first 0.5 s / sustained (after 3 s) | "
                    f"{b['first_interval_iops']} / {b['sustained_iops']:.0f} IOPS |")
    if "latency" in res:
        lat = res["latency"]
        rows.append(f"| QD1 p99 beside a QD64 randwrite neighbour, no QoS | "
                    f"{lat['without']['db_p99_us']:.0f} µs "
                    f"(neighbour {lat['without']['noisy_iops']:.0f} IOPS) |")
        rows.append(f"| same, QD1 volume with `--latency-target {a.target_us}us` | "
                    f"{lat['with']['db_p99_us']:.0f} µs (weft's own p99 "
                    f"{lat['with']['db_weft_p99_us']}, neighbour "
                    f"{lat['with']['noisy_iops']:.0f} IOPS, "
                    f"{lat['with']['noisy_throttled_ios']} I/Os throttled) |")
    if "overhead" in res:
        o = res["overhead"]
        rows.append(f"| 4k randread QD32, no QoS vs a limit that never binds (median of "
                    f"{a.rounds}) | {o['plain_median']:.0f} vs {o['limited_median']:.0f} IOPS "
                    f"({o['cost_pct']:+.2f}%) |")
    table = "\n".join(rows)
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"qos-{stamp}.json"
    path.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "results": res,
                                "machine": machine_info(), "git": git_info()}, indent=2))
    log(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
