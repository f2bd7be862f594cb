#!/usr/bin/env bash
# Benchmark: `sluice inspect` (read + both CRCs + feature scan + JPEG headers) over ~300 MB of
# uncompressed shards from the page cache. Goal (issue 2): >= 2 GB/s on the 2-core dev machine.
#   tests/bench/inspect_throughput.sh [DATA_DIR]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
data=${1:-/tmp/sluice-bench-inspect}
photos=/usr/share/backgrounds/mate/nature

if [ ! -f "$data/labels.txt" ]; then
  "$sluice" synth --photos "$photos" --classes 12 --images 6400 --shards 16 --seed 1 --out "$data"
fi
du -sh "$data"
"$sluice" inspect --json "$data"/*.tfrecord >/dev/null  # warm the page cache
for threads in 1 2; do
  for run in 1 2 3; do
    "$sluice" inspect --json --threads "$threads" "$data"/*.tfrecord | THREADS=$threads python3 -c '
import json, os, sys
j = json.load(sys.stdin)
print("threads=%s records=%d %.0f MB %.2f GB/s" % (os.environ["THREADS"], j["records"],
      j["bytes"] / 1e6, j["bytes_per_sec"] / 1e9))'
  done
done
