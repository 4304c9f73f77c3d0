#!/usr/bin/env python3
"""Where the engine's ingest CPU goes (issue 19): runs the in-process ingest benchmark
(`crates/engine/examples/ingest.rs`) under `perf record -g`, sampling only its measured
windows (perf's control fifo, which the example drives with `--perf-ctl`), and groups the
samples' own symbols (`perf report --no-children`) into kinds of work: hashing, the reduction
probe, copies, checksums, kernel file writes, engine metadata, locks and scheduling, and so on.
Each group's share of the samples is also given in CPU-seconds per GB, from the CPU-s/GB the
example measured with getrusage in the same run.

Python 3.11 standard library only; perf must be installed. Example:
    cargo build --release -p weft-engine --example ingest
    python3 bench/ingest-profile.py --size 1G --dir /dev/shm --kind incompressible
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# First match wins: (group, regex on "comm symbol"). Groups name work, not functions.
GROUPS = [
    ("BLAKE3 fingerprint", r"blake3"),
    ("lz4 compression", r"lz4"),
    ("zero check + incompressibility probe (reduce::reduce's own time)", r"reduce::reduce\b"),
    ("CRC32C (block table entries, chunk pages)", r"crc32c"),
    ("copy of each write into the write buffer (writer threads)", r"^ingest-writer \S*mem(move|cpy)"),
    ("copy into the open segment (destage)", r"^weft-destage \S*mem(move|cpy)"),
    ("copy into the aligned O_DIRECT buffer (sealer)", r"^weft-seal \S*mem(move|cpy)"),
    ("other user-space copies", r"mem(move|cpy)"),
    ("kernel: copy into the page cache / tmpfs", r"copy_folio_from_iter|copy_user|rep_movs"),
    ("kernel: page allocation, zeroing, faults",
     r"clear_page|folio|alloc_pages|get_page_from_freelist|page_fault|exc_page|memcg|lru|"
     r"shmem|rmqueue|free_unref|__list_(del|add)"),
    ("kernel: block I/O, file system, fsync",
     r"ext4|jbd2|iomap|blk_|bio|virtqueue|vring|submit|dio|nvme|scsi|fsync|writeback|"
     r"gup_|iowrite|pin_user"),
    # cpu-clock samples cannot fire with interrupts off in this VM: they land where the kernel
    # turns them back on, so this is the interrupts-off part of the kernel work around it.
    ("kernel: interrupts-off sections (samples land at the unlock)",
     r"_raw_spin_unlock_irq|pv_queued_spin_unlock"),
    ("engine: dedup index rebuilt as it grows (BlockTable::rebuild_dedup)", r"rebuild_dedup"),
    ("locks, wake-ups, scheduling",
     r"spin|futex|schedule|finish_task_switch|wake_up|parking_lot|lock"),
    ("syscall entry/exit, interrupts", r"syscall|SYSCALL|irqentry|entry_|irq|apic|do_idle"),
    ("allocator (malloc/free)", r"malloc|calloc|_int_free|cfree|free\b|realloc|unlink_chunk|mmap"),
    ("engine metadata: maps, block table, dedup index, write buffer",
     r"weft_engine::|hash_one|sip::|hashbrown|BTree|btree"),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--bin", default=str(REPO / "target/release/examples/ingest"))
    ap.add_argument("--size", default="1G")
    ap.add_argument("--dir", default="/dev/shm")
    ap.add_argument("--kind", default="incompressible")
    ap.add_argument("--cpus", default="2")
    ap.add_argument("--threads", default="0", help="reduction threads (0: one per core)")
    ap.add_argument("--top", type=int, default=25, help="top symbols listed")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="ingest-perf-") as tmp:
        ctl, data = Path(tmp) / "ctl", Path(tmp) / "perf.data"
        subprocess.run(["mkfifo", str(ctl)], check=True)
        record = ["perf", "record", "-g", "-D", "-1", "--control", f"fifo:{ctl}", "-o", str(data),
                  "--", args.bin, "--size", args.size, "--dirs", args.dir, "--kinds", args.kind,
                  "--cpus", args.cpus, "--threads", args.threads, "--perf-ctl", str(ctl)]
        print("$ " + " ".join(record).replace(tmp, "$TMP"))
        run = subprocess.run(record, capture_output=True, text=True, check=True, cwd=REPO)
        print(run.stdout)
        cpu_per_gb = cpu_s_per_gb(run.stdout)
        report = subprocess.run(
            ["perf", "report", "-i", str(data), "--no-children", "--sort", "comm,sym", "--stdio",
             "-g", "none", "--percent-limit", "0"],
            capture_output=True, text=True, check=True).stdout
    rows = parse_report(report)
    total = sum(p for _, _, p in rows) or 1.0
    groups: dict[str, float] = {}
    for comm, sym, pct in rows:
        key = f"{comm} {sym}"
        group = next((g for g, rx in GROUPS if re.search(rx, key)), "other")
        groups[group] = groups.get(group, 0.0) + pct
    print(f"| work | share of samples | CPU-s/GB (of {cpu_per_gb:.2f}) |\n|---|---:|---:|")
    for group, pct in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"| {group} | {pct / total:.1%} | {cpu_per_gb * pct / total:.2f} |")
    print(f"\nTop {args.top} symbols (thread, own samples):\n")
    for comm, sym, pct in rows[: args.top]:
        print(f"- {pct / total:.1%} {comm}: `{sym}`")
    other = [r for r in rows if not any(re.search(rx, f"{r[0]} {r[1]}") for _, rx in GROUPS)]
    print("\nLargest in \"other\": " + ", ".join(
        f"{c} `{s}` {p / total:.1%}" for c, s, p in other[:8]))
    return 0


def cpu_s_per_gb(stdout: str) -> float:
    """The CPU-s/GB column of the example's one table row (found by its header)."""
    column = None
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if "CPU-s/GB" in cells:
            column = cells.index("CPU-s/GB")
        elif column is not None and len(cells) > column and re.fullmatch(r"[0-9.]+", cells[column]):
            return float(cells[column])
    sys.exit("no result row in the benchmark's output")


def parse_report(text: str) -> list[tuple[str, str, float]]:
    """(comm, symbol, percent) of `perf report --sort comm,sym -g none` lines."""
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*?)\s*$", line)
        if m:
            rows.append((m.group(2), m.group(3), float(m.group(1))))
    return rows


if __name__ == "__main__":
    sys.exit(main())
