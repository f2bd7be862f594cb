#!/usr/bin/env bash
# Two `sluice` binaries side by side in one run (a refactoring's "within N% of before"): the
# TRAIN pipeline at 224, batch 256, 2 threads, in process (`sluice profile`) and served over TCP
# loopback (`sluice serve` + `sluice profile --target`, through the socket and through shared
# memory, as a client on the server's host gets by default), on the benchmark data
# set (bench_data.sh). Rounds alternate the order (old, new, new, old, ...) so that drift of the
# machine's speed falls on both alike; the table gives each binary's median img/s and new / old.
#
#   tests/bench/old_vs_new.sh OLD_SLUICE NEW_SLUICE [--rounds 4] [--batches 40] [DATA_DIR]
#
# Build the old binary from a worktree, e.g.
#   git worktree add /tmp/sluice-old <commit> && cmake -S /tmp/sluice-old -B /tmp/sluice-old/build \
#     -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build /tmp/sluice-old/build --target sluice
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

(($# >= 2)) || { sed -n '2,13p' "${BASH_SOURCE[0]}" | sed 's/^# \?//'; exit 2; }
old=$1 new=$2
shift 2
rounds=4 batches=40 data=/tmp/sluice-bench-data
while (($#)); do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    -*) echo "old_vs_new.sh: unknown option $1" >&2; exit 2 ;;
    *) data=$1; shift ;;
  esac
done
for b in "$old" "$new"; do
  [ -x "$b" ] || { echo "old_vs_new.sh: $b is not an executable" >&2; exit 2; }
done

work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -rf "$work"' EXIT
sluice=$new
. "$root/tests/bench/bench_server.sh"
make_bench_data "$data"

rate() { python3 -c 'import json, sys; print(json.load(sys.stdin)["images_per_sec"])'; }

in_process() {
  "$1" profile --files "$data/train-*.tfrecord" --batch-size 256 --image-size 224 \
    --shuffle-buffer 1024 --threads 2 --batches "$batches" --json | rate
}

# Both served figures from one server: "SOCKET SHM".
served() {
  sluice=$1
  start_bench_server "$data" "$work"
  [ -n "$tcp" ] || { echo "old_vs_new.sh: $1 serve did not start:" >&2; cat "$work/serve.log" >&2; exit 1; }
  local socket shm
  socket=$("$1" profile --target "$tcp" --dataset train --batch-size 256 --image-size 224 \
    --batches "$batches" --no-shared-memory --json | rate)
  shm=$("$1" profile --target "$tcp" --dataset train --batch-size 256 --image-size 224 \
    --batches "$batches" --json | rate)
  echo "$socket $shm"
  kill -TERM "$server"
  wait "$server" || true
  server=
}

: > "$work/results"
for ((r = 0; r < rounds; ++r)); do
  if ((r % 2 == 0)); then order=("old:$old" "new:$new"); else order=("new:$new" "old:$old"); fi
  for entry in "${order[@]}"; do
    name=${entry%%:*} bin=${entry#*:}
    echo "round $((r + 1))/$rounds: $name" >&2
    echo "$name in-process $(in_process "$bin")" >> "$work/results"
    out=$(served "$bin")  # waits for the server to stop, unlike a process substitution
    read -r socket shm <<<"$out"
    echo "$name served-tcp $socket" >> "$work/results"
    echo "$name served-shm $shm" >> "$work/results"
  done
done

python3 - "$work/results" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    name, mode, value = line.split()
    runs.setdefault(mode, {}).setdefault(name, []).append(float(value))
print("%-12s %12s %12s %10s   (img/s: median of %d runs each)" %
      ("mode", "old", "new", "new/old", len(next(iter(runs.values()))["old"])))
for mode, by in runs.items():
    o, n = statistics.median(by["old"]), statistics.median(by["new"])
    print("%-12s %12.0f %12.0f %10.3f" % (mode, o, n, n / o))
    print("  old runs: %s" % " ".join("%.0f" % v for v in by["old"]))
    print("  new runs: %s" % " ".join("%.0f" % v for v in by["new"]))
PY
