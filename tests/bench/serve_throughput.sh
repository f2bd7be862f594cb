#!/usr/bin/env bash
# Benchmark of the serve issue's goals, server and client on this machine:
#   - `profile --target` over TCP loopback >= 90% of the in-process rate (uncached TRAIN 224,
#     batch 256)
#   - raw delivery of a warm DECODED cache at batch 256, 224x224: >= 2 GB/s over TCP loopback,
#     and more over a unix: socket
# each through the socket (--no-shared-memory) and, as a client on the server's host gets by
# default, through shared memory.
#   tests/bench/serve_throughput.sh [DATA_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
data=${1:-/tmp/sluice-bench-data}
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

. "$root/tests/bench/bench_server.sh"
make_bench_data "$data"
summary() {
  python3 -c '
import json, sys
j = json.load(sys.stdin)
extra = ""
if "batch_wait_ms" in j:
    w = j["batch_wait_ms"]
    extra = "  wait p50 %.1f ms p99 %.1f ms" % (w["p50"], w["p99"])
print("%-34s %8.0f img/s %7.2f GB/s  bottleneck=%s%s" % (sys.argv[1], j["images_per_sec"],
      j["bytes_per_sec"] / 1e9, j["bottleneck"]["stage"], extra))
open(sys.argv[2], "w").write(str(j["images_per_sec"]))' "$1" "$2"
}

"$sluice" profile --files "$data/train-*.tfrecord" --batch-size 256 --image-size 224 \
  --shuffle-buffer 1024 --threads 2 --batches 40 --json | summary "in-process, uncached" "$work/inproc"

start_bench_server "$data" "$work" "unix:$work/sluice.sock"

ratio() {
  python3 -c "import sys; print('%s / in-process: %.2f' % (sys.argv[3], float(open(sys.argv[1]).read()) / float(open(sys.argv[2]).read())))" \
    "$1" "$work/inproc" "$2"
}
"$sluice" profile --target "$tcp" --dataset train --batch-size 256 --image-size 224 --batches 40 \
  --no-shared-memory --json | summary "served over TCP, uncached" "$work/tcp"
ratio "$work/tcp" "TCP"
"$sluice" profile --target "$tcp" --dataset train --batch-size 256 --image-size 224 --batches 40 \
  --json | summary "served, shared memory, uncached" "$work/shm"
ratio "$work/shm" "shared memory"
# 6,000 images = 24 batches: 30 warm-up batches fill the job's DECODED cache.
"$sluice" profile --target "$tcp" --dataset cached --batch-size 256 --image-size 224 \
  --warmup-batches 30 --batches 100 --no-shared-memory --json |
  summary "warm DECODED cache, TCP" "$work/c_tcp"
"$sluice" profile --target "unix:$work/sluice.sock" --dataset cached --batch-size 256 \
  --image-size 224 --warmup-batches 30 --batches 100 --no-shared-memory --json |
  summary "warm DECODED cache, unix:" "$work/c_unix"
"$sluice" profile --target "$tcp" --dataset cached --batch-size 256 --image-size 224 \
  --warmup-batches 30 --batches 100 --json | summary "warm DECODED cache, shared memory" "$work/c_shm"
kill -TERM $server
wait $server || true
