#!/bin/bash
# A/B of weft builds over NBD, alternating: fio 1M sequential write QD8 (JOB=seqwrite, the
# default) or 4k random write QD32 (JOB=randwrite) for 20 s into a fresh `weft serve` (4 GiB
# volume) per run; prints MB/s and IOPS, the server's cores (from /proc/PID/stat), CPU-seconds
# per GB written and per 100k IOPS. docs/PERFORMANCE.md quotes it.
# usage: [JOB=randwrite] bench/nbd-ab.sh ROUNDS incompressible|dblike BIN [BIN...]   (work dir:
# $WORK, default /var/tmp/weft-nbd-ab; dblike = fio buffer_compress_percentage=60,
# dedupe_percentage=10)
set -u
rounds=$1; kind=$2; shift 2
case ${JOB:-seqwrite} in
  seqwrite) shape="--rw=write --bs=1M --iodepth=8" ;;
  randwrite) shape="--rw=randwrite --bs=4k --iodepth=32" ;;
  *) echo "JOB is seqwrite or randwrite" >&2; exit 2 ;;
esac
work=${WORK:-/var/tmp/weft-nbd-ab}
mkdir -p "$work" && cd "$work" || exit 1
for r in $(seq 1 $rounds); do
  for bin in "$@"; do
    rm -rf data; port=$((22000 + RANDOM % 5000))
    $bin serve --data-dir ./data --nbd-listen 127.0.0.1:$port --api-listen 127.0.0.1:0 --iscsi-listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --default-volume vol0 --default-volume-size 4G > serve.log 2>&1 &
    pid=$!
    for i in $(seq 50); do grep -q ready serve.log && break; sleep 0.2; done
    extra=""
    [ "$kind" = dblike ] && extra="--buffer_compress_percentage=60 --dedupe_percentage=10"
    t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    fio --name=w --ioengine=nbd --uri=nbd://127.0.0.1:$port/vol0 $shape --size=4G --time_based=1 --runtime=20 --refill_buffers=1 --randrepeat=0 $extra --output-format=json > fio.json 2>/dev/null
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    kill $pid; wait $pid 2>/dev/null
    python3 - "$bin" "$kind" "$t0" "$t1" <<'PY'
import json,sys,os
b,kind,t0,t1=sys.argv[1],sys.argv[2],int(sys.argv[3]),int(sys.argv[4])
t=open('fio.json').read(); j=json.loads(t[t.index('{'):])['jobs'][0]['write']
gb=j['io_bytes']/1e9; secs=j['runtime']/1000
cpu=(t1-t0)/os.sysconf('SC_CLK_TCK')
iops=j['iops']
print(f"{os.path.basename(b)} {kind} {j['bw_bytes']/1e6:.0f} MB/s  {iops/1e3:.1f}k IOPS  server {cpu/secs:.2f} cores  {cpu/gb:.2f} CPU-s/GB  {cpu/(iops*secs/1e5):.2f} CPU-s/100k IOPS", flush=True)
PY
  done
done
