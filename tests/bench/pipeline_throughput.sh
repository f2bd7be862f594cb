#!/usr/bin/env bash
# Benchmark of the pipeline issue's goals on ImageNet-like data (synth from real photos,
# ~186 kpx, q90-95), TRAIN at 224, batch 256:
#   - uncached, 2 threads: >= 3,700 img/s
#   - 1 -> 2 threads: >= 1.8x
#   - warm DECODED cache, 2 threads: >= 10,000 img/s
# Also prints the single-thread full-decode yardstick (--decode-bound).
#   tests/bench/pipeline_throughput.sh [DATA_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
data=${1:-/tmp/sluice-bench-data}

. "$root/tests/bench/bench_data.sh"
make_bench_data "$data"
files="$data/train-*.tfrecord"
common=(--files "$files" --batch-size 256 --image-size 224 --mode train --shuffle-buffer 1024)

summary() {
  python3 -c '
import json, sys
j = json.load(sys.stdin)
extra = ""
if "decode_bound" in j:
    d = j["decode_bound"]
    extra = "  (one-thread full decode %.0f img/s; ratio %.2f)" % (
        d["single_thread_full_decode_per_sec"], d["ratio"])
print("%-28s %8.0f img/s  bottleneck=%s%s" % (sys.argv[1], j["images_per_sec"],
      j["bottleneck"]["stage"], extra))' "$1"
}

"$sluice" profile "${common[@]}" --threads 1 --batches 15 --json --decode-bound | summary "uncached, 1 thread"
"$sluice" profile "${common[@]}" --threads 2 --batches 30 --json --decode-bound | summary "uncached, 2 threads"
"$sluice" profile "${common[@]}" --threads 2 --cache decoded --cache-budget 3G --warmup-epochs 1 \
  --batches 60 --json | summary "warm DECODED cache, 2 threads"
