#!/usr/bin/env python3
"""iSCSI read benchmark (issue 9): weft serve against tgt (file LUN, bsoflags=direct) with
libiscsi's iscsi-perf, and the same weft volume over NBD with fio, in one run.

Debian's fio has no libiscsi engine and iscsi-perf only reads, so this covers random 4 KiB
reads at QD1 and QD32 and 1 MiB sequential reads at QD8; the write jobs wait for fio built
with libiscsi. Both LUNs are 1 GiB, prefilled with the same random data (qemu-img convert
over iSCSI for weft, a plain copy for tgt's file). Per job: IOPS, MB/s and server CPU.

Python 3.11 standard library only.  See bench/README.md.
"""
from __future__ import annotations

import argparse
import datetime
import json
import re
import subprocess
import tempfile
import time
from pathlib import Path

import benchlib as bl

IQN_TGT = "iqn.2026-11.dev.weft.bench:tgt"
SIZE = 1 << 30
# (name, iscsi-perf flags, bytes per I/O, fio rw, queue depth)
JOBS = [
    ("randread 4k QD1", ["-r", "-m", "1"], 4096, "randread", 1),
    ("randread 4k QD32", ["-r", "-m", "32"], 4096, "randread", 32),
    ("seqread 1M QD8", ["-m", "8"], 1 << 20, "read", 8),
]


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runtime", type=int, default=10, help="seconds per job")
    ap.add_argument("--weft-bin", type=Path, default=bl.REPO / "target/release/weft")
    bl.add_run_args(ap)
    args = ap.parse_args()
    bl.apply_nice(args)
    now = datetime.datetime.now(datetime.timezone.utc)
    run_dir = Path(tempfile.mkdtemp(prefix="iscsi-compare-", dir="/var/tmp"))
    results: dict = {}
    try:
        src = run_dir / "src.img"
        subprocess.run(["head", "-c", str(SIZE), "/dev/urandom"], stdout=open(src, "wb"), check=True)
        # weft
        nbd, api, portal = bl.free_port(), bl.free_port(), bl.free_port()
        weft = bl.Proc("weft", [str(args.weft_bin), "serve", "--data-dir", str(run_dir / "weft"),
                                 "--nbd-listen", f"127.0.0.1:{nbd}", "--api-listen",
                                 f"127.0.0.1:{api}", "--iscsi-listen", f"127.0.0.1:{portal}",
                                 "--default-volume-size", str(SIZE)], run_dir)
        weft.wait_ready(60)
        weft_url = f"iscsi://127.0.0.1:{portal}/iqn.2026-11.dev.weft:vol0/0"
        subprocess.run(["qemu-img", "convert", "-n", "-f", "raw", "-O", "raw", str(src), weft_url],
                       check=True, timeout=600)
        bl.weft_cli(args.weft_bin, run_dir / "weft", "sync")
        # tgt
        tgt_img = run_dir / "tgt.img"
        subprocess.run(["cp", str(src), str(tgt_img)], check=True)
        tport, control = bl.free_port(), str(bl.free_port() % 30000 + 1000)
        tgt = bl.Proc("tgtd", ["tgtd", "-f", "-C", control, "--iscsi",
                               f"portal=127.0.0.1:{tport}"], run_dir)
        adm = ["tgtadm", "-C", control, "--lld", "iscsi"]
        for _ in range(100):
            if subprocess.run(adm + ["--op", "show", "--mode", "sys"], capture_output=True).returncode == 0:
                break
            time.sleep(0.1)
        subprocess.run(adm + ["--op", "new", "--mode", "target", "--tid", "1", "-T", IQN_TGT], check=True)
        subprocess.run(adm + ["--op", "new", "--mode", "logicalunit", "--tid", "1", "--lun", "1",
                              "-b", str(tgt_img), "--bsoflags", "direct"], check=True)
        subprocess.run(adm + ["--op", "bind", "--mode", "target", "--tid", "1", "-I", "ALL"], check=True)
        tgt_url = f"iscsi://127.0.0.1:{tport}/{IQN_TGT}/1"
        for name, flags, io_bytes, rw, qd in JOBS:
            row = {
                "weft iscsi": iscsi_perf(weft_url, flags, io_bytes, 4096, args.runtime, [weft.pid]),
                "tgt iscsi": iscsi_perf(tgt_url, flags, io_bytes, 512, args.runtime, [tgt.pid]),
                "weft nbd": fio_nbd(f"nbd://127.0.0.1:{nbd}/vol0", rw, io_bytes, qd, args.runtime,
                                    [weft.pid], run_dir),
            }
            results[name] = row
            bl.log(f"{name}: " + json.dumps(row))
    finally:
        bl.finish_run(run_dir, args.keep)
    lines = [f"### weft iSCSI vs tgt (iscsi-perf) and weft NBD (fio) — {now.isoformat(timespec='seconds')}",
             "", "Cell: IOPS · MB/s · server CPU (cores).", "",
             "| job | weft iSCSI | tgt iSCSI | weft NBD | weft/tgt | weft iSCSI/NBD |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, row in results.items():
        cell = lambda r: f"{r['iops']} · {r['mb_s']} · {r['cpu']:.2f}"
        w, t, n = row["weft iscsi"], row["tgt iscsi"], row["weft nbd"]
        lines.append(f"| {name} | {cell(w)} | {cell(t)} | {cell(n)} | {w['iops'] / max(t['iops'], 1):.2f}x "
                     f"| {w['iops'] / max(n['iops'], 1):.2f}x |")
    bl.write_results(args, "iscsi-compare", now, False, {"machine": bl.machine_info(),
                                                         "git": bl.git_info()}, results, "\n".join(lines))


if __name__ == "__main__":
    main()
