#!/usr/bin/env python3
"""What the live statistics cost the data path (issue 10): fio 4k randread QD32 and randwrite
QD32 over NBD against `weft serve` in three modes, in the same run:
  off      `--no-io-stats --metrics-listen off`: nothing counted;
  on       statistics on (every I/O timed and counted, the 100 ms sampler running), nobody
           watching;
  watched  statistics on, and a UI-like observer on the same machine reading the 100 ms stream
           of the volume and the 1 s stream of all volumes, and scraping /metrics every second
           (Prometheus scrapes every 10-15 s; this is harsher).

Rounds rotate the order of the modes so drift of the shared machine cancels out.
Each round: a fresh data dir and server, the volume prefilled (reads hit stored data), then the
two jobs. Prints a markdown table with the on/off ratios (the goal: within 3%) and writes JSON
to bench/results/.

Python 3.11 standard library only. Example:
    cargo build --release -p weft
    python3 bench/stats-cost.py --runtime 10 --rounds 2
"""

from __future__ import annotations

import argparse
import datetime as dt
import http.client
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import (  # noqa: E402
    REPO, RESULTS_DIR, Proc, cores_over, free_port, git_info, load_fio_json, log, machine_info,
    stop_all, wait_port,
)

JOBS = {
    "randread-qd32": ["--rw=randread", "--iodepth=32"],
    "randwrite-qd32": ["--rw=randwrite", "--iodepth=32"],
}


class Observer:
    """Reads the SSE streams and scrapes /metrics like the web UI and Prometheus would."""

    def __init__(self, api_port: int, metrics_port: int, token: str):
        self.api_port, self.metrics_port, self.token = api_port, metrics_port, token
        self.stop = threading.Event()
        self.events = 0
        self.scrapes = 0
        self.threads = [
            threading.Thread(target=self._stream, args=("/api/v1/stats/stream?volume=vol0",), daemon=True),
            threading.Thread(target=self._stream, args=("/api/v1/stats/stream",), daemon=True),
            threading.Thread(target=self._scrape, daemon=True),
        ]

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *_):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=5)

    def _stream(self, path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.api_port, timeout=5)
        conn.request("GET", path, headers={"Authorization": f"Bearer {self.token}"})
        resp = conn.getresponse()
        while not self.stop.is_set():
            line = resp.fp.readline()
            if not line:
                break
            if line.startswith(b"data: "):
                self.events += 1
        conn.close()

    def _scrape(self) -> None:
        while not self.stop.wait(1.0):
            conn = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=5)
            conn.request("GET", "/metrics")
            conn.getresponse().read()
            conn.close()
            self.scrapes += 1


def fio(uri: str, job: list[str], runtime: int, size: str, out: Path) -> dict:
    cmd = ["fio", "--name=j", "--ioengine=nbd", f"--uri={uri}", "--bs=4k", "--direct=1",
           f"--size={size}", "--time_based", f"--runtime={runtime}", "--ramp_time=2",
           "--randrepeat=0", "--refill_buffers=1", "--output-format=json", f"--output={out}",
           *job]
    subprocess.run(cmd, check=True, timeout=runtime + 120, stdout=subprocess.DEVNULL)
    d = load_fio_json(out)["jobs"][0]
    side = d["read"] if d["read"]["iops"] > d["write"]["iops"] else d["write"]
    return {"iops": side["iops"], "lat_mean_us": side["clat_ns"]["mean"] / 1000,
            "lat_p99_us": side["clat_ns"]["percentile"]["99.000000"] / 1000}


MODES = ["off", "on", "watched"]


def one_round(a: argparse.Namespace, mode: str, work: Path) -> dict:
    stats_on = mode != "off"
    data = work / mode
    nbd, api, metrics = free_port(), free_port(), free_port()
    cmd = [str(a.weft_bin), "--data-dir", str(data), "serve", "--nbd-listen", f"127.0.0.1:{nbd}",
           "--api-listen", f"127.0.0.1:{api}", "--iscsi-listen", "off",
           "--default-volume-size", a.size]
    cmd += ["--metrics-listen", f"127.0.0.1:{metrics}"] if stats_on else \
        ["--metrics-listen", "off", "--no-io-stats"]
    server = Proc("weft-" + mode, cmd, work)
    server.wait_ready(60)
    wait_port(nbd, server.proc, 30)
    uri = f"nbd://127.0.0.1:{nbd}/vol0"
    subprocess.run(["fio", "--name=fill", "--ioengine=nbd", f"--uri={uri}", "--rw=write",
                    "--bs=1M", "--iodepth=8", f"--size={a.size}", "--refill_buffers=1"],
                   check=True, timeout=600, stdout=subprocess.DEVNULL)
    token = (data / "api-token").read_text().strip()
    result = {"mode": mode, "jobs": {}}
    for name, job in JOBS.items():
        out = work / f"{name}-{mode}.json"
        t0 = time.monotonic()
        cpu_box: dict = {}
        sampler = threading.Thread(
            target=lambda: cpu_box.update(cores=cores_over([server.pid], a.runtime)), daemon=True)
        if mode == "watched":
            with Observer(api, metrics, token) as obs:
                time.sleep(0.5)
                sampler.start()
                r = fio(uri, job, a.runtime, a.size, out)
            r["stream_events"], r["scrapes"] = obs.events, obs.scrapes
        else:
            sampler.start()
            r = fio(uri, job, a.runtime, a.size, out)
        sampler.join(timeout=a.runtime + 30)
        r["server_cores"] = cpu_box.get("cores")
        r["wall_s"] = time.monotonic() - t0
        result["jobs"][name] = r
        log(f"{mode:>7} {name}: {r['iops']:.0f} IOPS, "
            f"mean {r['lat_mean_us']:.0f} µs, p99 {r['lat_p99_us']:.0f} µs"
            + (f", {r['stream_events']} events, {r['scrapes']} scrapes" if mode == "watched" else ""))
    server.stop()
    subprocess.run(["rm", "-rf", str(data)], check=False)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--weft-bin", type=Path, default=REPO / "target/release/weft")
    p.add_argument("--runtime", type=int, default=10, help="seconds per fio job (plus 2 s ramp)")
    p.add_argument("--rounds", type=int, default=2, help="rounds of the three modes, order rotating")
    p.add_argument("--size", default="1G", help="volume size (prefilled)")
    a = p.parse_args()
    if not a.weft_bin.exists():
        sys.exit(f"{a.weft_bin} missing: cargo build --release -p weft")
    rounds = []
    try:
        with tempfile.TemporaryDirectory(prefix="weft-stats-cost-") as tmp:
            for i in range(a.rounds):
                for mode in MODES[i % 3:] + MODES[:i % 3]:
                    rounds.append(one_round(a, mode, Path(tmp)))
    finally:
        stop_all()
    lines = ["| job | off IOPS | on IOPS | on/off | watched IOPS | watched/off | p99 µs off / on / "
             "watched | server cores off / on / watched |", "|---|---|---|---|---|---|---|---|"]
    summary = {}
    for name in JOBS:
        by = {m: [r["jobs"][name] for r in rounds if r["mode"] == m] for m in MODES}
        med = lambda m, k: statistics.median(x[k] for x in by[m] if x.get(k) is not None)  # noqa: E731
        off, on, watched = (med(m, "iops") for m in MODES)
        summary[name] = {"off_iops": off, "on_iops": on, "watched_iops": watched,
                         "on_ratio": on / off, "watched_ratio": watched / off}
        lines.append(f"| {name} | {off:.0f} | {on:.0f} | {on / off:.3f}x | {watched:.0f} | "
                     f"{watched / off:.3f}x | "
                     + " / ".join(f"{med(m, 'lat_p99_us'):.0f}" for m in MODES) + " | "
                     + " / ".join(f"{med(m, 'server_cores'):.2f}" for m in MODES) + " |")
    table = "\n".join(lines)
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS_DIR / f"stats-cost-{stamp}.json"
    out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()}, "rounds": rounds,
                               "summary": summary, "machine": machine_info(), "git": git_info()},
                              indent=2))
    log(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
