#!/usr/bin/env bash
# A weft cluster on this machine: etcd, six d.nodes (4+2 erasure coding, one zone each) and
# one c.node, all on 127.0.0.1. Prints the NBD URI and how to manage it; Ctrl-C stops
# everything it started (by PID). Data goes to ./weft-cluster-demo (removed with --clean).
#
#   scripts/cluster-demo.sh [--clean] [--dnodes N] [--redundancy 4+2]
#
# See docs/CLUSTER.md for what each step does and how to run the same on real machines.
set -euo pipefail
cd "$(dirname "$0")/.."

dnodes=6
redundancy=4+2
root="$PWD/weft-cluster-demo"
while [ $# -gt 0 ]; do
  case "$1" in
    --clean) rm -rf "$root"; shift ;;
    --dnodes) dnodes="$2"; shift 2 ;;
    --redundancy) redundancy="$2"; shift 2 ;;
    *) echo "usage: $0 [--clean] [--dnodes N] [--redundancy 4+2|x3|none]" >&2; exit 2 ;;
  esac
done
command -v etcd >/dev/null || { echo "etcd is missing: apt-get install etcd-server" >&2; exit 1; }

# Ports: etcd 23790/23800, d.nodes 24810.., c.node NBD 20809 and API 20810.
etcd_url=etcd://127.0.0.1:23790
cargo build --release -q -p weft
weft="$PWD/target/release/weft"
mkdir -p "$root/logs"
pids=()
stop() {
  trap - EXIT INT TERM
  echo
  echo "stopping: c.node first (it destages and checkpoints), then d.nodes, then etcd"
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
}
trap stop EXIT INT TERM

# Waits until a process prints "ready" in its log (bounded), or fails with the log.
wait_ready() {
  local log="$1" pid="$2"
  for _ in $(seq 1 300); do
    grep -q '^ready' "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { echo "failed to start; see $log:" >&2; tail -20 "$log" >&2; exit 1; }
    sleep 0.1
  done
  echo "not ready after 30 s; see $log" >&2
  exit 1
}

echo "1. etcd (cluster state: d.nodes, pools, placement groups, volumes)"
etcd --name demo --data-dir "$root/etcd" \
  --listen-client-urls http://127.0.0.1:23790 --advertise-client-urls http://127.0.0.1:23790 \
  --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
  --initial-cluster demo=http://127.0.0.1:23800 >"$root/logs/etcd.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do
  curl -fs http://127.0.0.1:23790/health >/dev/null 2>&1 && break
  sleep 0.1
done

echo "2. $dnodes d.nodes (chunk stores; each registers itself in etcd under a lease)"
for ((i = 0; i < dnodes; i++)); do
  "$weft" dnode --cluster "$etcd_url" --listen "127.0.0.1:$((24810 + i))" \
    --data "$root/dnode$i" --zone "z$i" --lease-ttl 3s >"$root/logs/dnode$i.log" 2>&1 &
  pids+=($!)
  wait_ready "$root/logs/dnode$i.log" "${pids[-1]}"
done

echo "3. a c.node (NBD + API; pool 'default' with $redundancy)"
"$weft" --data-dir "$root/cnode" cnode --cluster "$etcd_url" --redundancy "$redundancy" \
  --nbd-listen 127.0.0.1:20809 --api-listen 127.0.0.1:20810 --iscsi-listen 127.0.0.1:23260 \
  --out-grace 1m \
  >"$root/logs/cnode.log" 2>&1 &
pids+=($!)
wait_ready "$root/logs/cnode.log" "${pids[-1]}"

"$weft" --data-dir "$root/cnode" cluster status
cat <<INFO

ready: nbd://127.0.0.1:20809/vol0

  nbdinfo nbd://127.0.0.1:20809/vol0
  fio --name=t --ioengine=nbd --uri=nbd://127.0.0.1:20809/vol0 --rw=randwrite --bs=4k --iodepth=32 --size=1G --verify=crc32c
  $weft --data-dir $root/cnode cluster status        # nodes, pools, rebuild progress
  $weft --data-dir $root/cnode dnode list
  kill -9 ${pids[3]}                                 # lose d.node 2: reads are reconstructed;
                                                     # after 1m it is out and its chunks are
                                                     # rebuilt elsewhere (needs a spare: --dnodes 7)
d.node PIDs: ${pids[*]:1:$dnodes}
logs: $root/logs; Ctrl-C stops everything
INFO
wait "${pids[-1]}"
