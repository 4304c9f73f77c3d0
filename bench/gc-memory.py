#!/usr/bin/env python3
"""`weft serve` only: write amplification under random overwrites on a nearly full
datastore, metadata memory per stored block (extrapolated per TiB), and restart time after
`kill -9` at a given size.

1. Write amplification (`--phases wa`): `weft serve --capacity C` (default 5G) with a volume
   of V (default 4G: data fills 80% of the capacity); fill the volume with incompressible data
   (fio 1M sequential writes, QD8), `weft sync`, then overwrite it with fio 4k random writes
   at QD32 (uniform random offsets, `norandommap`, fresh random data per write) until
   `--overwrite` x V (default 2x) has been written, `weft sync`, wait until weft is idle, and
   read `weft stats --json`: `write_amplification` (chunk bytes / host bytes since start), and
   the same ratio, GC work and disk writes over the overwrite alone.
2. Metadata memory (`--phases memory`): write `--mem-size` (default 10G) of unique
   incompressible data, `kill -9` the moment fio returns, restart, and read VmRSS from
   /proc/PID/status right after recovery, after `weft sync` and after a clean restart;
   divided by `reduction.unique_blocks` of `weft stats` and extrapolated to 1 TiB of unique
   4 KiB blocks (also net of the RSS of the freshly started, empty server).
3. Restart time (`--phases restart`): the same at `--restart-size` (default 32G): time from
   the process start until the NBD port answers with the NBD greeting and the API answers
   (`GET /api/v1/stats`), after `kill -9` and after a clean stop (not `/volumes`: listing
   volumes computes every volume's space, seconds at 32 GiB).

Memory and restart share one server: the data is written incrementally (first up to the
smaller size, measured, then up to the larger one).  Free ports, data under --workdir,
every process stopped by its PID (also on Ctrl-C/SIGTERM), the run dir removed at the end
unless --keep.  Python 3.11 standard library only.  See bench/README.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import (  # noqa: E402
    REPO, RESULTS_DIR, Proc, block_dev_name, dir_usage, disk_stats, disk_written, fio_base, free_port,
    git_info, human_size, load_fio_json, log, machine_info, parse_size, rss_bytes, run_out,
)

BLOCK = 4096
BLOCKS_PER_TIB = (1 << 40) // BLOCK


class Weft:
    """One `weft serve` data dir; start/kill/stop/restart it on the same ports."""

    def __init__(self, name: str, dir: Path, args: argparse.Namespace, volume: int, capacity: int | None):
        self.name = name
        self.dir = dir
        self.data = dir / "data"
        self.args = args
        self.volume = volume
        self.capacity = capacity
        self.nbd_port = free_port()
        self.api_port = free_port()
        self.uri = f"nbd://127.0.0.1:{self.nbd_port}/vol0"
        self.proc: Proc | None = None
        self.starts = 0

    def cmd(self) -> list[str]:
        c = [str(self.args.weft_bin), "serve", "--data-dir", str(self.data),
             "--nbd-listen", f"127.0.0.1:{self.nbd_port}", "--api-listen", f"127.0.0.1:{self.api_port}",
             "--iscsi-listen", "127.0.0.1:0",
             "--default-volume", "vol0", "--default-volume-size", str(self.volume)]
        if self.capacity:
            c += ["--capacity", str(self.capacity)]
        return c + shlex.split(self.args.weft_args)

    def start(self) -> dict:
        """Start and time it: `ready` printed, NBD greeting received, API answered."""
        self.starts += 1
        self.proc = Proc(f"{self.name}-{self.starts}", self.cmd(), self.dir)
        t0 = self.proc.started
        res: dict = {}
        deadline = t0 + self.args.restart_timeout
        token = None
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"weft exited with {self.proc.proc.returncode} during start:\n"
                                   + self.proc.log_tail())
            now = time.monotonic()
            if "nbd_s" not in res and nbd_greeting(self.nbd_port):
                res["nbd_s"] = round(time.monotonic() - t0, 3)
            if "api_s" not in res:
                if token is None and (self.data / "api-token").exists():
                    token = (self.data / "api-token").read_text().strip()
                if token and api_get(self.api_port, token, "/api/v1/stats", 1.0) is not None:
                    res["api_s"] = round(time.monotonic() - t0, 3)
            if self.proc.ready_at is not None and "ready_s" not in res:
                res["ready_s"] = round(self.proc.ready_at - t0, 3)
            if {"nbd_s", "api_s", "ready_s"} <= res.keys():
                break
            time.sleep(max(0.0, 0.02 - (time.monotonic() - now)))
        else:
            raise RuntimeError(f"weft not serving NBD + API within {self.args.restart_timeout:.0f}s: {res}\n"
                               + self.proc.log_tail())
        res["serving_s"] = max(res["nbd_s"], res["api_s"])
        res["pid"] = self.proc.pid
        log(f"{self.name}: pid {self.proc.pid}: ready {res['ready_s']:.2f}s, NBD {res['nbd_s']:.2f}s, "
            f"API {res['api_s']:.2f}s after exec")
        return res

    def kill9(self) -> None:
        assert self.proc is not None
        log(f"{self.name}: kill -9 {self.proc.pid}")
        self.proc.kill9()

    def stop(self, timeout: float = 900) -> float:
        """SIGTERM (weft destages and checkpoints first); seconds until it exited."""
        if self.proc is None:
            return 0.0
        t0 = time.monotonic()
        self.proc.stop(timeout)
        return time.monotonic() - t0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cli(self, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
        return benchlib.weft_cli(self.args.weft_bin, self.data, *argv, timeout=timeout)

    def stats(self) -> dict:
        s = benchlib.weft_stats(self.args.weft_bin, self.data, timeout=120)
        if not isinstance(s, dict):
            raise RuntimeError(s)
        return s

    def sync(self) -> float:
        t0 = time.monotonic()
        p = self.cli("sync", timeout=self.args.sync_timeout)
        if p.returncode != 0:
            raise RuntimeError(f"weft sync failed: {p.stderr.strip()[-300:]}")
        return round(time.monotonic() - t0, 2)

    def wait_idle(self, limit: float) -> float:
        """Up to `limit` s until weft uses < 0.05 cores (background GC, checkpoints)."""
        t0 = time.monotonic()
        cpu = benchlib.cores_over([self.pid], 1.0)
        while cpu > 0.05 and time.monotonic() - t0 < limit:
            cpu = benchlib.cores_over([self.pid], 1.0)
        return round(time.monotonic() - t0, 1)

    def log_tail(self) -> str:
        return self.proc.log_tail() if self.proc else ""

    def recovered_line(self) -> str | None:
        """The last log line that mentions recovery (what was replayed)."""
        if not self.proc:
            return None
        try:
            lines = [strip_ansi(l) for l in self.proc.logfile.read_text(errors="replace").splitlines()
                     if "recover" in l.lower()]
        except OSError:
            return None
        return lines[-1][:400] if lines else None


def strip_ansi(s: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", s)


def nbd_greeting(port: int) -> bool:
    """True if the server sends the NBD newstyle greeting ("NBDMAGIC")."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
            s.settimeout(1.0)
            buf = b""
            while len(buf) < 8:
                chunk = s.recv(8 - len(buf))
                if not chunk:
                    return False
                buf += chunk
            return buf == b"NBDMAGIC"
    except OSError:
        return False


def api_get(port: int, token: str, path: str, timeout: float) -> dict | list | None:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"null") if r.status == 200 else None
    except (OSError, ValueError):
        return None


def fio_run(name: str, cmd: list[str], out: Path, timeout: float, w: "Weft", stall_s: float) -> dict:
    """Run fio against w; killed if it and weft stall (a hung server) or after `timeout`."""
    log(f"fio {name}: {shlex.join(cmd)}")
    t0 = time.monotonic()
    res: dict = {"cmd": shlex.join(cmd)}
    try:
        p = benchlib.run_watched(cmd, timeout, [w.pid], stall_s)
        res["returncode"], err = p.returncode, p.stderr
    except (benchlib.Stalled, subprocess.TimeoutExpired) as e:
        res["returncode"], err = None, str(e)
        res["stalled"] = True
    el = time.monotonic() - t0
    res["seconds"] = round(el, 2)
    try:
        j = load_fio_json(out)["jobs"][0]
        wr = j["write"]
        res.update({"io_bytes": wr["io_bytes"], "MBps": round(wr["bw_bytes"] / 1e6, 1), "iops": round(wr["iops"]),
                    "clat_mean_us": round(wr["clat_ns"]["mean"] / 1e3, 1),
                    "clat_p99_us": round(wr["clat_ns"].get("percentile", {}).get("99.000000", 0) / 1e3, 1),
                    "error": j.get("error", 0)})
    except Exception as e:  # noqa: BLE001
        res["parse_error"] = str(e)[:300]
    if res["returncode"] != 0:
        res["stderr"] = err.strip()[-800:]
        res["enospc"] = "No space left" in err
        log(f"fio {name} failed ({res['returncode']}): {err.strip()[-300:]}")
    else:
        log(f"fio {name}: {res.get('io_bytes', 0) / 2**30:.2f} GiB in {el:.1f}s ({res.get('MBps', 0):.0f} MB/s, "
            f"{res.get('iops', 0)} IOPS)")
    return res


def fill_cmd(w: Weft, name: str, offset: int, size: int, out: Path) -> list[str]:
    """1M sequential QD8 writes of unique, incompressible data."""
    return fio_base(w.uri, name) + ["--rw=write", "--bs=1M", "--iodepth=8", f"--offset={offset}",
                                    f"--size={size}", "--refill_buffers=1", f"--output={out}"]


def iops_summary(logf: Path) -> dict | None:
    """fio's 1 s IOPS log: mean over the first and last tenth, min of 10 s windows."""
    vals = []
    try:
        for line in logf.read_text().splitlines():
            f = [x.strip() for x in line.split(",")]
            if len(f) >= 2:
                vals.append(float(f[1]))
    except (OSError, ValueError):
        return None
    if not vals:
        return None
    n = max(1, len(vals) // 10)
    wins = [sum(vals[i:i + 10]) / len(vals[i:i + 10]) for i in range(0, len(vals), 10)]
    return {"seconds": len(vals), "first_tenth": round(sum(vals[:n]) / n), "last_tenth": round(sum(vals[-n:]) / n),
            "min_10s": round(min(wins)), "max_10s": round(max(wins)), "per_10s": [round(x) for x in wins]}


# --------------------------------------------------------------------------
# Phases
# --------------------------------------------------------------------------


def phase_wa(run_dir: Path, args: argparse.Namespace, res: dict) -> dict:
    v, c = args.wa_volume, args.capacity
    w = Weft("wa", run_dir / "wa", args, v, c)
    res.update({"volume": v, "capacity": c, "fill_fraction": v / c, "overwrite_factor": args.overwrite})
    ok = False
    try:
        res["start"] = w.start()
        res["cmd"] = shlex.join(w.cmd())
        out = w.dir / "fio-fill.json"
        res["fill"] = fio_run("fill", fill_cmd(w, "fill", 0, v, out), out, v / (2 << 20) + 300, w,
                              args.stall_timeout)
        if res["fill"]["returncode"] != 0:
            raise RuntimeError("fill failed: " + res["fill"].get("stderr", "")[-300:])
        res["fill_sync_s"] = w.sync()
        res["fill_idle_wait_s"] = w.wait_idle(args.drain_wait)
        s0 = w.stats()
        res["stats_after_fill"] = s0
        total = int(v * args.overwrite)
        d0 = disk_stats(args.disk_dev)
        # Out of space (ENOSPC from weft) ends fio; then `weft sync` + `weft gc` and go on with
        # what is left, up to --enospc-retries times (each counted and reported).
        runs: list[dict] = []
        done = 0
        t_start = time.monotonic()
        while done < total:
            i = len(runs)
            out = w.dir / f"fio-overwrite-{i}.json"
            left = total - done
            cmd = fio_base(w.uri, "overwrite") + [
                "--rw=randwrite", "--bs=4k", f"--iodepth={args.iodepth}", f"--size={v}", f"--io_size={left}",
                "--norandommap=1", "--refill_buffers=1",
                f"--runtime={max(1.0, args.wa_max_seconds - (time.monotonic() - t_start)):.0f}",
                f"--write_iops_log={w.dir / f'overwrite{i}'}", "--log_avg_msec=1000", f"--output={out}"]
            r = fio_run(f"overwrite {i}", cmd, out, args.wa_max_seconds + 300, w, args.stall_timeout)
            logs = sorted(w.dir.glob(f"overwrite{i}_iops*.log"))
            r["iops_over_time"] = iops_summary(logs[0]) if logs else None
            runs.append(r)
            done += r.get("io_bytes") or 0
            if r["returncode"] == 0 or time.monotonic() - t_start > args.wa_max_seconds:
                break
            if not r.get("enospc") or i >= args.enospc_retries or not w.proc.alive():
                break
            log(f"wa: out of space after {done / 2**30:.2f} GiB overwritten; weft sync + weft gc, then go on")
            try:
                r["sync_s"] = w.sync()
            except Exception as e:  # noqa: BLE001
                r["sync_error"] = str(e)[:300]
                log(f"wa: {e}")
            used0 = w.stats().get("used_bytes")
            g = w.cli("gc", timeout=args.sync_timeout)
            used1 = w.stats().get("used_bytes")
            r["gc_after"] = {"returncode": g.returncode, "output": (g.stdout or g.stderr).strip()[-500:],
                             "used_before": used0, "used_after": used1}
            log(f"wa: weft gc: used {gibs(used0)} -> {gibs(used1)}")
            if g.returncode != 0 or used0 is None or used1 is None or used1 >= used0:
                break  # nothing reclaimed: going on would fail again
        seconds = time.monotonic() - t_start
        res["overwrite"] = {
            "target_bytes": total, "io_bytes": done, "seconds": round(seconds, 1), "runs": runs,
            "enospc_events": sum(1 for r in runs if r.get("enospc")),
            "iops": round(done / BLOCK / seconds) if seconds > 0 else None,
            "clat_p99_us": max((r.get("clat_p99_us") or 0) for r in runs) if runs else None,
            "complete": done >= total,
            "returncode": runs[-1]["returncode"] if runs else None,
            "stderr": runs[-1].get("stderr", "") if runs else "",
            "iops_over_time": runs[0].get("iops_over_time") if runs else None,
        }
        if not w.proc or not w.proc.alive():
            raise RuntimeError("weft died during the overwrite:\n" + w.log_tail())
        try:
            res["overwrite_sync_s"] = w.sync()
        except Exception as e:  # noqa: BLE001  (e.g. out of space: still read the counters)
            res["overwrite_sync_error"] = str(e)[:500]
            log(f"wa: {e}")
        res["overwrite_idle_wait_s"] = w.wait_idle(args.drain_wait)
        d1 = disk_stats(args.disk_dev)
        s1 = w.stats()
        res["stats_end"] = s1
        dh = s1["host_written_bytes"] - s0["host_written_bytes"]
        dc = s1["chunk_written_bytes"] - s0["chunk_written_bytes"]
        g0, g1 = s0.get("gc", {}), s1.get("gc", {})
        res["overwrite_delta"] = {
            "host_written_bytes": dh, "chunk_written_bytes": dc,
            "write_amplification": dc / dh if dh else None,
            "gc": {k: g1.get(k, 0) - g0.get(k, 0) for k in ("runs", "segments_reclaimed", "bytes_moved",
                                                            "bytes_reclaimed")},
            "disk_written_bytes": disk_written(d0, d1),
            "disk_per_host_byte": (disk_written(d0, d1) or 0) / dh if dh and d0 and d1 else None,
        }
        res["data_dir_bytes"] = dir_usage(w.data)
        log(f"wa: write amplification since start {s1.get('write_amplification')}, over the overwrite "
            f"{res['overwrite_delta']['write_amplification']}")
        ok = True
    except Exception as e:  # noqa: BLE001
        log(f"wa: FAILED: {e}")
        res["error"] = str(e)[:1500]
        res["log_tail"] = w.log_tail()
        try:
            if w.proc and w.proc.alive():
                res.setdefault("stats_end", w.stats())
        except Exception:  # noqa: BLE001
            pass
    finally:
        w.stop(args.restart_timeout if ok else 30)
        if not args.keep:
            shutil.rmtree(w.dir, ignore_errors=True)
    return res


def phase_memory_restart(run_dir: Path, args: argparse.Namespace, sizes: list[int], res: dict) -> dict:
    """Write up to each size in turn; after each: kill -9, timed restart, RSS, stats, sync,
    RSS, clean stop + timed restart, RSS."""
    top = max(sizes)
    w = Weft("mem", run_dir / "mem", args, top, None)
    res.update({"volume": top, "points": []})
    written = 0
    ok = False
    try:
        res["first_start"] = w.start()
        res["cmd"] = shlex.join(w.cmd())
        time.sleep(1.0)
        res["rss_empty"] = rss_bytes(w.pid)
        for size in sizes:
            pt: dict = {"size": size}
            res["points"].append(pt)
            out = w.dir / f"fio-fill-{human_size(size)}.json"
            pt["fill"] = fio_run(f"fill to {human_size(size)}", fill_cmd(w, "fill", written, size - written, out),
                                 out, (size - written) / (2 << 20) + 300, w, args.stall_timeout)
            if pt["fill"]["returncode"] != 0:
                raise RuntimeError("fill failed: " + pt["fill"].get("stderr", "")[-300:])
            written = size
            pt["rss_before_kill"] = rss_bytes(w.pid)
            w.kill9()  # the moment fio returns: write buffer and journal full
            pt["journal_bytes_at_kill"] = dir_usage(w.data / "journal") if (w.data / "journal").exists() else None
            pt["data_dir_bytes_at_kill"] = dir_usage(w.data)
            pt["restart_after_kill9"] = w.start()
            pt["rss_after_recovery"] = rss_bytes(w.pid)
            pt["recovered_log"] = w.recovered_line()
            st = w.stats()
            pt["stats_after_recovery"] = {k: st.get(k) for k in ("buffer_bytes", "buffer_records", "used_bytes",
                                                                 "metadata_memory_bytes", "journal_files")}
            pt["unique_blocks"] = st.get("reduction", {}).get("unique_blocks")
            pt["reduction"] = st.get("reduction")
            pt["sync_s"] = w.sync()
            w.wait_idle(min(30.0, args.drain_wait))
            pt["rss_after_sync"] = rss_bytes(w.pid)
            st = w.stats()
            pt["metadata_memory_bytes"] = st.get("metadata_memory_bytes")
            pt["unique_blocks"] = st.get("reduction", {}).get("unique_blocks") or pt["unique_blocks"]
            if args.clean_restart:
                pt["clean_stop_s"] = round(w.stop(args.restart_timeout), 2)
                pt["restart_after_clean_stop"] = w.start()
                time.sleep(1.0)
                pt["rss_after_clean_restart"] = rss_bytes(w.pid)
            pt["data_dir_bytes"] = dir_usage(w.data)
            ub = pt["unique_blocks"] or 0
            for k in ("rss_after_recovery", "rss_after_sync", "rss_after_clean_restart", "metadata_memory_bytes"):
                v = pt.get(k)
                if v and ub:
                    pt[f"{k}_per_block"] = v / ub
                    pt[f"{k}_per_TiB"] = v / ub * BLOCKS_PER_TIB
                    if k.startswith("rss") and res.get("rss_empty"):
                        pt[f"{k}_net_per_block"] = (v - res["rss_empty"]) / ub
                        pt[f"{k}_net_per_TiB"] = (v - res["rss_empty"]) / ub * BLOCKS_PER_TIB
            log(f"mem: {human_size(size)}: {ub} unique blocks, RSS after recovery "
                f"{(pt['rss_after_recovery'] or 0) / 2**20:.0f} MiB, after sync {(pt['rss_after_sync'] or 0) / 2**20:.0f} MiB"
                + (f", after a clean restart {(pt.get('rss_after_clean_restart') or 0) / 2**20:.0f} MiB"
                   if args.clean_restart else ""))
        ok = True
    except Exception as e:  # noqa: BLE001
        log(f"memory/restart: FAILED: {e}")
        res["error"] = str(e)[:1500]
        res["log_tail"] = w.log_tail()
    finally:
        w.stop(args.restart_timeout if ok else 30)
        if not args.keep:
            shutil.rmtree(w.dir, ignore_errors=True)
    return res


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def mib(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**20:.0f} MiB"


def gibs(b: float | None) -> str:
    return "-" if b is None else f"{b / 2**30:.2f} GiB"


def secs(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f} s"


def cell_text(t: str) -> str:
    """One line, no table-breaking pipes."""
    return " ".join(str(t).split()).replace("|", "/")


def render(meta: dict, results: dict) -> str:
    m, p = meta["machine"], meta["params"]
    L = [f"### weft serve: write amplification, metadata memory, restart time — {meta['date']}", ""]
    L.append(f"git `{meta['git']['revision'][:12]}`{' (dirty)' if meta['git']['dirty'] else ''} · "
             f"{m['nproc']} CPU {m['cpu_model']} · kernel {m['kernel']} · fio {meta['versions'].get('fio', '?')} · "
             f"data on `{p.get('disk_dev')}` · nice {p.get('nice', 0)}"
             + (f" · `weft serve {p['weft_args']}`" if p.get("weft_args") else ""))
    L.append("")
    wa = results.get("wa")
    if wa:
        L.append(f"#### Write amplification: random overwrite of a {human_size(wa['volume'])} volume, "
                 f"`--capacity {human_size(wa['capacity'])}` ({wa['fill_fraction'] * 100:.0f}% full)")
        L.append("")
        if wa.get("error"):
            L.append(f"**FAILED**: {cell_text(wa['error'])[:500]}")
            L.append("")
        f, o = wa.get("fill", {}), wa.get("overwrite", {})
        d = wa.get("overwrite_delta", {})
        s1 = wa.get("stats_end") or {}
        L.append("| | measured |")
        L.append("|---|---|")
        if f:
            L.append(f"| fill (1M sequential writes, QD8, incompressible) | {gibs(f.get('io_bytes'))} at "
                     f"{f.get('MBps', 0):.0f} MB/s; `weft sync` {secs(wa.get('fill_sync_s'))} |")
        if o:
            it = o.get("iops_over_time") or {}
            runs = o.get("runs", [])
            first = runs[0] if runs else {}
            L.append(f"| overwrite (4k random writes, QD{p['iodepth']}, uniform random offsets, fresh random data) | "
                     f"{gibs(o.get('io_bytes'))} of {gibs(o.get('target_bytes'))} "
                     f"({(o.get('io_bytes') or 0) / wa['volume']:.2f}x the volume) in {o.get('seconds', 0):.0f} s; "
                     f"first fio run {first.get('iops', 0)} IOPS mean"
                     + (f" (first tenth {it['first_tenth']}, last tenth {it['last_tenth']}, slowest 10 s "
                        f"{it['min_10s']})" if it else "")
                     + f", p99 {(o.get('clat_p99_us') or 0) / 1e3:.1f} ms"
                     + (f"; **out of space {o['enospc_events']} time(s)**, each followed by `weft sync` + `weft gc` "
                        f"(used {'; '.join(gibs(r['gc_after'].get('used_before')) + ' → ' + gibs(r['gc_after'].get('used_after')) for r in runs if r.get('gc_after'))})"
                        if o.get("enospc_events") else "")
                     + ("" if o.get("complete") else f"; **not completed**: {cell_text(o.get('stderr', ''))[-200:]}")
                     + " |")
        if s1:
            L.append(f"| `write_amplification` (weft stats: chunk bytes / host bytes since start) | "
                     f"**{s1.get('write_amplification') or 0:.2f}** ({gibs(s1.get('chunk_written_bytes'))} / "
                     f"{gibs(s1.get('host_written_bytes'))}) |")
        if d:
            g = d.get("gc", {})
            if wa.get("overwrite_sync_error"):
                L.append(f"| `weft sync` after the overwrite | **failed**: {cell_text(wa['overwrite_sync_error'])[:300]} |")
            L.append(f"| the same over the overwrite alone (through `weft sync` and idle) | "
                     f"**{d.get('write_amplification') or 0:.2f}** ({gibs(d.get('chunk_written_bytes'))} / "
                     f"{gibs(d.get('host_written_bytes'))}) |")
            L.append(f"| GC during the overwrite | {g.get('runs')} runs, {g.get('segments_reclaimed')} segments "
                     f"reclaimed, {gibs(g.get('bytes_moved'))} moved, {gibs(g.get('bytes_reclaimed'))} reclaimed |")
            if d.get("disk_per_host_byte") is not None:
                L.append(f"| disk writes per host byte over the overwrite (`{p.get('disk_dev')}`, whole device, "
                         f"journal included) | {d['disk_per_host_byte']:.2f} ({gibs(d.get('disk_written_bytes'))}) |")
        if s1:
            L.append(f"| used / capacity at the end | {gibs(s1.get('used_bytes'))} / {gibs(s1.get('capacity_bytes'))}"
                     f"; out of space: {'**yes**' if s1.get('out_of_space') else 'no'} |")
        L.append("")
    mr = results.get("memory_restart")
    if mr:
        L.append("#### Metadata memory and restart time after `kill -9`")
        L.append("")
        L.append(f"Unique incompressible data written with 1M sequential writes (QD8) into one "
                 f"{human_size(mr['volume'])} volume, up to each size in turn; `kill -9` the moment fio "
                 "returns (write buffer and journal full), then a restart. Restart time = from exec until "
                 "the NBD port sends the NBD greeting and the API answers `GET /api/v1/stats` (`ready` = "
                 "weft printed `ready`). RSS = VmRSS of the weft process; the freshly started, empty server: "
                 f"{mib(mr.get('rss_empty'))}.")
        L.append("")
        if mr.get("error"):
            L.append(f"**FAILED**: {cell_text(mr['error'])[:500]}")
            L.append("")
        pts = mr.get("points", [])
        if pts:
            L.append("| data written | unique 4 KiB blocks | restart after kill -9: serving (ready) | "
                     "RSS after recovery | RSS after `weft sync` | clean stop; restart: serving | "
                     "RSS after clean restart | engine estimate (`metadata_memory_bytes`) |")
            L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
            for pt in pts:
                r9 = pt.get("restart_after_kill9") or {}
                rc = pt.get("restart_after_clean_stop") or {}
                L.append(f"| {human_size(pt['size'])} | {pt.get('unique_blocks') or '-'} | "
                         f"**{secs(r9.get('serving_s'))}** ({secs(r9.get('ready_s'))}) | "
                         f"{mib(pt.get('rss_after_recovery'))} | {mib(pt.get('rss_after_sync'))} | "
                         f"{secs(pt.get('clean_stop_s'))}; {secs(rc.get('serving_s'))} | "
                         f"{mib(pt.get('rss_after_clean_restart'))} | {mib(pt.get('metadata_memory_bytes'))} |")
            L.append("")
            L.append("Per unique 4 KiB block, and extrapolated to 1 TiB of unique blocks (2^28 blocks); "
                     "\"net\" subtracts the empty server's RSS:")
            L.append("")
            L.append("| data written | RSS after recovery | net | RSS after sync | net | RSS after clean restart | net | "
                     "engine estimate |")
            L.append("|---:|---:|---:|---:|---:|---:|---:|---:|")

            def pb(pt: dict, k: str) -> str:
                b, t = pt.get(f"{k}_per_block"), pt.get(f"{k}_per_TiB")
                return "-" if b is None else f"{b:.0f} B → {t / 2**30:.1f} GiB/TiB"

            for pt in pts:
                L.append(f"| {human_size(pt['size'])} | {pb(pt, 'rss_after_recovery')} | "
                         f"{pb(pt, 'rss_after_recovery_net')} | {pb(pt, 'rss_after_sync')} | "
                         f"{pb(pt, 'rss_after_sync_net')} | {pb(pt, 'rss_after_clean_restart')} | "
                         f"{pb(pt, 'rss_after_clean_restart_net')} | {pb(pt, 'metadata_memory_bytes')} |")
            L.append("")
            for pt in pts:
                extra = []
                if pt.get("journal_bytes_at_kill") is not None:
                    extra.append(f"journal files (preallocated) at the kill {mib(pt['journal_bytes_at_kill'])}")
                sr = pt.get("stats_after_recovery") or {}
                if sr.get("buffer_bytes") is not None:
                    extra.append(f"write buffer after recovery {mib(sr['buffer_bytes'])}")
                if pt.get("sync_s") is not None:
                    extra.append(f"`weft sync` after recovery {pt['sync_s']:.1f} s")
                if pt.get("fill"):
                    extra.append(f"written at {pt['fill'].get('MBps', 0):.0f} MB/s")
                if pt.get("recovered_log"):
                    extra.append(f"log: `{cell_text(pt['recovered_log'])[:200]}`")
                L.append(f"- {human_size(pt['size'])}: " + "; ".join(extra))
            L.append("")
    return "\n".join(L)


# --------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--phases", default="wa,memory,restart",
                    help="which measurements: wa (write amplification), memory, restart (default: all)")
    ap.add_argument("--capacity", type=parse_size, default=None,
                    help="wa: `weft serve --capacity` (default 5G; --quick 640M)")
    ap.add_argument("--wa-volume", type=parse_size, default=None,
                    help="wa: volume size, filled then overwritten (default 4G; --quick 512M)")
    ap.add_argument("--overwrite", type=float, default=2.0,
                    help="wa: bytes overwritten by 4k random writes, as a multiple of the volume (default 2)")
    ap.add_argument("--iodepth", type=int, default=32, help="wa: queue depth of the overwrite (default 32)")
    ap.add_argument("--wa-max-seconds", type=float, default=1800,
                    help="wa: stop the overwrite after this long even if not done (default 1800)")
    ap.add_argument("--enospc-retries", type=int, default=10,
                    help="wa: when weft answers ENOSPC, run `weft sync` + `weft gc` and go on, at most this "
                         "many times (default 10; 0 = stop at the first ENOSPC)")
    ap.add_argument("--mem-size", type=parse_size, default=None,
                    help="memory: unique data written before kill -9 and restart (default 10G; --quick 256M)")
    ap.add_argument("--restart-size", type=parse_size, default=None,
                    help="restart: data written before kill -9 and restart (default 32G; --quick 512M)")
    ap.add_argument("--no-clean-restart", dest="clean_restart", action="store_false",
                    help="skip the clean stop + restart after each kill -9 point")
    ap.add_argument("--restart-timeout", type=float, default=900,
                    help="longest wait for a start (or a clean stop) (default 900 s)")
    ap.add_argument("--sync-timeout", type=float, default=1800, help="longest `weft sync` (default 1800 s)")
    ap.add_argument("--stall-timeout", type=float, default=60,
                    help="kill fio (and report) when it and weft use no CPU for this long: a hung server "
                         "(default 60 s; 0 = off)")
    ap.add_argument("--drain-wait", type=float, default=None,
                    help="after syncs wait up to this long for weft to go idle (default 60; --quick 5)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: --capacity 640M --wa-volume 512M --mem-size 256M --restart-size 512M")
    ap.add_argument("--workdir", type=Path, default=Path("/var/tmp/weft-bench"),
                    help="where the data dirs live (a real disk); a run-* dir is made inside")
    ap.add_argument("--no-build", action="store_true", help="don't run cargo build")
    ap.add_argument("--weft-bin", type=Path, default=REPO / "target" / "release" / "weft")
    ap.add_argument("--weft-args", default="", help="extra `weft serve` flags")
    benchlib.add_run_args(ap)
    args = ap.parse_args()

    if args.render:
        d = json.loads(args.render.read_text())
        print(render(d["meta"], d["results"]))
        return 0

    q = args.quick
    args.capacity = args.capacity or ((640 << 20) if q else (5 << 30))
    args.wa_volume = args.wa_volume or ((512 << 20) if q else (4 << 30))
    args.mem_size = args.mem_size or ((256 << 20) if q else (10 << 30))
    args.restart_size = args.restart_size or ((512 << 20) if q else (32 << 30))
    args.drain_wait = args.drain_wait if args.drain_wait is not None else (5 if q else 60)
    phases = [x.strip() for x in args.phases.split(",") if x.strip()]
    bad = [x for x in phases if x not in ("wa", "memory", "restart")]
    if bad:
        ap.error(f"unknown phases {bad}")
    if "wa" in phases and args.wa_volume > args.capacity:
        ap.error("--wa-volume larger than --capacity")
    sizes = sorted({s for ph, s in (("memory", args.mem_size), ("restart", args.restart_size)) if ph in phases})
    if not shutil.which("fio"):
        log("error: fio not found")
        return 2
    benchlib.apply_nice(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    args.disk_dev = block_dev_name(args.workdir)
    st = os.statvfs(args.workdir)
    free = st.f_bavail * st.f_frsize
    need = max([args.capacity * 1.2 if "wa" in phases else 0] + [s * 1.2 + (1 << 30) for s in sizes])
    if free < need:
        log(f"warning: {free / 2**30:.1f} GiB free in {args.workdir}, about {need / 2**30:.1f} GiB needed")

    run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("run-%Y%m%d-%H%M%S-"), dir=args.workdir))
    now = dt.datetime.now().astimezone()
    meta: dict = {
        "date": now.isoformat(timespec="seconds"),
        "git": git_info(),
        "machine": machine_info(),
        "versions": {"fio": run_out(["fio", "--version"])},
        "params": {"phases": phases, "capacity": args.capacity, "wa_volume": args.wa_volume,
                   "overwrite": args.overwrite, "iodepth": args.iodepth, "wa_max_seconds": args.wa_max_seconds,
                   "mem_size": args.mem_size, "restart_size": args.restart_size, "sizes": sizes,
                   "clean_restart": args.clean_restart, "weft_args": args.weft_args, "nice": args.nice,
                   "quick": q, "workdir": str(run_dir), "disk_dev": args.disk_dev, "argv": sys.argv[1:]},
    }
    results: dict = {}
    rc = 0
    try:
        if not args.no_build:
            log("building weft: cargo build --release -p weft")
            p = subprocess.run(["cargo", "build", "--release", "-p", "weft"], cwd=REPO, capture_output=True,
                               text=True, preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, 10))
            if p.returncode != 0:
                raise RuntimeError("cargo build failed:\n" + p.stderr.strip()[-2000:])
        snap = run_dir / "weft-bin"  # others may rebuild target/release/weft mid-run
        shutil.copy2(args.weft_bin, snap)
        args.weft_bin = snap
        meta["binary_sha256"] = run_out(["sha256sum", str(snap)]).split()[0]
        if "wa" in phases:
            results["wa"] = {}
            phase_wa(run_dir, args, results["wa"])
            rc |= 1 if results["wa"].get("error") else 0
        if sizes:
            results["memory_restart"] = {}
            phase_memory_restart(run_dir, args, sizes, results["memory_restart"])
            rc |= 1 if results["memory_restart"].get("error") else 0
    except KeyboardInterrupt:
        log("interrupted; writing partial results")
        meta["interrupted"] = True
        rc = 130
    except Exception as e:  # noqa: BLE001
        log(f"FAILED: {e}")
        meta["error"] = str(e)[:2000]
        rc = 1
    finally:
        benchlib.finish_run(run_dir, args.keep)

    md = render(meta, results)
    benchlib.write_results(args, "gc-memory", now, q, meta, results, md)
    return rc


if __name__ == "__main__":
    sys.exit(main())
