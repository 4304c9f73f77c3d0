#!/usr/bin/env python3
"""Compare builds of the ingest example on a shared machine: run single cells in rotation, each
after the machine has been idle for 2 s, append every result row to a log, and print medians
of the rows whose `others` column is below a limit (issue 19, docs/PERFORMANCE.md "First wins").

  # one binary per build (copy target/release/examples/ingest aside after each build)
  python3 bench/ingest-rotation.py --rounds 10 --log /tmp/cells.txt \\
      --cell 'main=/tmp/ingest-main --cpus 2' \\
      --cell 't1=/tmp/ingest-new --threads 1' --cell 't2=/tmp/ingest-new --threads 2' \\
      --dirs /dev/shm,$PWD/target --kinds incompressible,database
  python3 bench/ingest-rotation.py --log /tmp/cells.txt --table-only --max-others 0.25

Each cell runs `BINARY ARGS --size SIZE --dirs DIR --kinds KIND` once per round. "Idle" means
`/proc/stat` showed under 0.25 cores busy over 2 s; after 90 s of waiting the cell runs anyway
(its row then usually has a high `others` and is left out of the table).
"""
import argparse
import collections
import os
import shlex
import statistics
import subprocess
import time

IDLE_CORES_MAX = 0.25
IDLE_WAIT_MAX_S = 90


def busy_ticks() -> int:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return v[0] + v[1] + v[2] + v[5] + v[6] + v[7]  # user nice system irq softirq steal


def wait_idle() -> bool:
    hz = os.sysconf("SC_CLK_TCK")
    start = time.time()
    while time.time() - start < IDLE_WAIT_MAX_S:
        b0 = busy_ticks()
        time.sleep(2)
        if (busy_ticks() - b0) / hz / 2 < IDLE_CORES_MAX:
            return True
    return False


def run(args, cells) -> None:
    with open(args.log, "a") as log:
        for _ in range(args.rounds):
            for kind in args.kinds.split(","):
                for d in args.dirs.split(","):
                    for name, cmd in cells:
                        idle = wait_idle()
                        full = cmd + ["--size", args.size, "--dirs", d, "--kinds", kind]
                        p = subprocess.run(full, capture_output=True, text=True)
                        for row in p.stdout.splitlines():
                            if row.startswith("| ") and not row.startswith("| kind"):
                                log.write(f"{time.strftime('%H:%M:%S')} {name} idle={int(idle)} {row}\n")
                        if p.returncode != 0:
                            log.write(f"{name} FAILED {p.stderr[-500:]!r}\n")
                        log.flush()


def table(args, names) -> None:
    rows = collections.defaultdict(list)
    for line in open(args.log):
        if "FAILED" in line or "|" not in line:
            continue
        head, rest = line.split("|", 1)
        name = head.split()[1]
        c = [x.strip() for x in rest.strip().strip("|").split("|")]
        # Columns counted from the right: the example gained columns on the left over time.
        ingest, cpu, busy, others, split = float(c[-6]), float(c[-5]), float(c[-4]), float(c[-2]), c[-1]
        rows[(c[0], c[1], name)].append((ingest, cpu, busy, others, split))
    order = names or sorted({k[2] for k in rows})
    print("| data | dir | cell | n | ingest GB/s | CPU-s/GB | cores busy | others max | per thread (run of median CPU) |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for key in sorted(rows, key=lambda k: (k[0], k[1], order.index(k[2]) if k[2] in order else 99)):
        kept = sorted((r for r in rows[key] if r[3] < args.max_others), key=lambda r: r[1])
        if not kept:
            print(f"| {key[0]} | {key[1]} | {key[2]} | 0 of {len(rows[key])} | | | | | |")
            continue
        med = lambda i: statistics.median(r[i] for r in kept)
        rng = lambda i: f"{min(r[i] for r in kept):.2f}-{max(r[i] for r in kept):.2f}"
        print(f"| {key[0]} | {key[1]} | {key[2]} | {len(kept)} of {len(rows[key])} | {med(0):.2f} ({rng(0)}) "
              f"| {med(1):.2f} ({rng(1)}) | {med(2):.2f} | {max(r[3] for r in kept):.2f} | {kept[(len(kept) - 1) // 2][4]} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cell", action="append", default=[], help="NAME=BINARY [ARGS...]")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", default="1G")
    ap.add_argument("--dirs", default="/dev/shm")
    ap.add_argument("--kinds", default="incompressible")
    ap.add_argument("--log", required=True, help="rows are appended here")
    ap.add_argument("--max-others", type=float, default=0.25, help="rows kept in the table")
    ap.add_argument("--table-only", action="store_true")
    args = ap.parse_args()
    cells = []
    for spec in args.cell:
        name, _, cmd = spec.partition("=")
        cells.append((name, shlex.split(cmd)))
    if not args.table_only:
        run(args, cells)
    table(args, [n for n, _ in cells])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
