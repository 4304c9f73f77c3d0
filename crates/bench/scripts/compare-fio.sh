#!/usr/bin/env bash
# Compares weft bench with fio (nbd engine) on the same nbdkit memory export: small random reads
# at QD1 and QD32, alternating the tools so that background noise hits both alike.
#
# usage: crates/bench/scripts/compare-fio.sh [SECONDS] [REPEATS]
# needs: nbdkit, fio (with the nbd engine), jq, a release build of weft-bench
#        (cargo build --release -p weft-bench). Prints a markdown table for docs/BENCH.md.
set -euo pipefail

secs=${1:-15}
repeats=${2:-2}
warm=2
root=$(cd "$(dirname "$0")/../../.." && pwd)
bench=${WEFT_BENCH:-$root/target/release/weft-bench}
port=${PORT:-$((20000 + RANDOM % 20000))}
work=$(mktemp -d)

[ -x "$bench" ] || { echo "build first: cargo build --release -p weft-bench" >&2; exit 2; }
nbdkit --exit-with-parent -f -p "$port" -i 127.0.0.1 memory 1G &
nbd_pid=$!
trap 'kill "$nbd_pid" 2>/dev/null || true; rm -rf "$work"' EXIT
for _ in $(seq 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

uri="nbd://127.0.0.1:$port/"
echo "| I/O | QD | tool | IOPS | mean µs | p99 µs | tool CPU % | run |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | --- |"
for rep in $(seq "$repeats"); do
  for bs in 4k 8k; do
    for qd in 1 32; do
      # fio: lat = submission to completion, the same span weft bench measures.
      fio --name=r --ioengine=nbd --uri="$uri" --rw=randread --bs="$bs" --iodepth="$qd" \
        --ramp_time="$warm" --runtime="$secs" --time_based --output-format=json \
        --output="$work/fio.json" >/dev/null 2>&1
      jq -r --arg bs "$bs" --arg qd "$qd" --arg rep "$rep" '.jobs[0] |
        "| \($bs) randread | \($qd) | fio | \(.read.iops|round) | \(.read.lat_ns.mean/1000*10|round/10) | \(.read.clat_ns.percentile["99.000000"]/1000|round) | \((.usr_cpu+.sys_cpu)*10|round/10) | \($rep) |"' \
        "$work/fio.json"
      /usr/bin/time -f "%U %S %e" -o "$work/time" "$bench" "$uri" --mode oltp --small "$bs" \
        --qd "$qd" --write 0 --duration "${secs}s" --warmup "${warm}s" --no-progress \
        -o "$work/weft" >/dev/null 2>&1
      read -r u s e < "$work/time"
      cpu=$(echo "$u $s $e" | awk '{printf "%.1f", ($1+$2)/$3*100}')
      jq -r --arg bs "$bs" --arg qd "$qd" --arg rep "$rep" --arg cpu "$cpu" '.points[0].total |
        "| \($bs) randread | \($qd) | weft bench | \(.iops|round) | \(.latency_us.mean*10|round/10) | \(.latency_us.p99|round) | \($cpu) | \($rep) |"' \
        "$work/weft.json"
    done
  done
done
echo
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(uname -r)"
echo "$(fio --version), $(nbdkit --version | sed -n 1p), weft bench $("$bench" --version | cut -d' ' -f2)"
