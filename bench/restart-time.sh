#!/usr/bin/env bash
# Restart time of `weft serve` after writing N GiB (default 10) and a kill -9, then after a
# clean stop. Writes random, incompressible data with fio (nbd engine), kills the server the
# moment fio returns (so the write buffer and journal are full), restarts it and times until
# it prints `ready`, verifies a sample with fio, then stops it with SIGTERM and times a clean
# restart. Usage: [KEEP=1] bench/restart-time.sh [GiB] [workdir] (the workdir is removed unless KEEP=1)
set -euo pipefail
gib=${1:-10}
work=${2:-/var/tmp/weft-restart}
root=$(cd "$(dirname "$0")/.." && pwd)
cargo build --release -p weft --manifest-path "$root/Cargo.toml" >/dev/null 2>&1
weft="$root/target/release/weft"
rm -rf "$work" && mkdir -p "$work" && cd "$work"
port=$((20000 + RANDOM % 20000))
api=$((port + 1))
uri="nbd://127.0.0.1:$port/vol0"

start() { # prints seconds until ready
  local t0 t1
  t0=$(date +%s.%N)
  "$weft" serve --data-dir "$work/data" --nbd-listen "127.0.0.1:$port" --api-listen "127.0.0.1:$api" \
    --default-volume-size "$((gib + 2))G" >"$work/serve.out" 2>>"$work/serve.err" &
  pid=$!
  echo "$pid" >"$work/pid"
  until grep -q '^ready' "$work/serve.out" 2>/dev/null; do
    kill -0 "$pid" 2>/dev/null || { echo "server died" >&2; tail "$work/serve.err" >&2; exit 1; }
    sleep 0.02
  done
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc
}

stop() { # SIGTERM, then wait until the process is gone (it destages and checkpoints)
  kill -TERM "$1"
  while kill -0 "$1" 2>/dev/null; do sleep 0.02; done
}

start >/dev/null
pid=$(cat "$work/pid")
echo "writing ${gib} GiB of random data..."
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size="${gib}G" \
  --refill_buffers --randrepeat=0 --verify=crc32c --do_verify=0 --verify_state_save=0 \
  --output-format=terse --terse-version=3 >"$work/fill.terse"
kill -9 "$pid"; while kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
echo "killed -9; journal on disk: $(du -sh "$work/data/journal" | cut -f1), chunks: $(du -sh "$work/data/dnode0" | cut -f1)"
crash_s=$(start)
pid=$(cat "$work/pid")
grep -o 'recovered.*' "$work/serve.err" | tail -1 | sed 's/\x1b\[[0-9;]*m//g'
echo "restart after kill -9: ${crash_s} s"
echo "server memory after recovery: $(grep VmRSS /proc/"$pid"/status | awk '{printf "%.0f MiB", $2/1024}')"
curl -s -H "Authorization: Bearer $(cat "$work/data/api-token")" "http://127.0.0.1:$api/api/v1/stats" \
  | python3 -c 'import json,sys; s=json.load(sys.stdin); print("engine estimate of metadata memory:", s["metadata_memory_bytes"]>>20, "MiB for", s["reduction"]["unique_blocks"], "stored blocks")' || true
fio --name=fill --ioengine=nbd --uri="$uri" --rw=write --bs=1M --iodepth=8 --size="${gib}G" \
  --verify=crc32c --verify_only --output-format=terse >/dev/null \
  && echo "verify of all ${gib} GiB after the crash: ok"
stop "$pid"
clean_s=$(start)
pid=$(cat "$work/pid")
echo "restart after a clean stop: ${clean_s} s"
echo "server memory after a clean restart (empty write buffer): $(grep VmRSS /proc/"$pid"/status | awk '{printf "%.0f MiB", $2/1024}')"
stop "$pid"
echo "metadata checkpoint: $(du -h "$work/data/meta/checkpoint" | cut -f1)"
# The data dir holds N GiB: remove it unless asked to keep it.
[ "${KEEP:-0}" = 1 ] || rm -rf "$work"
