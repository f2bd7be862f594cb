#!/usr/bin/env bash
# Benchmark of the Python client against the C++ client (`sluice profile --target`), both reading
# the same `sluice serve` on this machine over TCP loopback (batch 256, 224x224) — through the
# socket (--no-shared-memory for C++; the Python client's default), and through shared memory:
#   - uncached TRAIN: the server's decode is the bottleneck, so a client's own CPU time (shared
#     cores) shows as lost images/s; goal: Python >= 90% of C++
#   - warm DECODED cache: raw delivery, the clients' receive paths alone
# Python runs three times: with glibc's malloc defaults, after sluice.tune_malloc(), and with
# shared_memory=True (images in place in the server's segment; vs the C++ client through shared
# memory too: cpp-shm). Rounds alternate the clients; the median of each is reported.
#   tests/bench/python_client.sh [DATA_DIR] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
python="$root/build/venv/bin/python"
data=${1:-/tmp/sluice-bench-data}
rounds=${2:-3}
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

. "$root/tests/bench/bench_server.sh"
make_bench_data "$data"
# The working tree's client, as ctest installs it.
"$python" -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  "$root/client/python"

start_bench_server "$data" "$work"

# The Python client measured as `profile --target` measures: images/s over `batches` batches
# after `warmup` batches, of a new private stream; also its CPU time per batch.
cat > "$work/python_client.py" <<'PY'
import json, resource, sys, time
import sluice
target, dataset, warmup, batches, tune, shm = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:7])
if tune:
    assert sluice.tune_malloc()
with sluice.Client(target) as client:
    with client.stream(dataset, batch_size=256, image_size=224, shared_memory=bool(shm)) as stream:
        for _ in range(warmup):
            next(stream)
        r0, t0, images = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), 0
        for _ in range(batches):
            images += len(next(stream).labels)
        seconds, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
cpu = r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime
print(json.dumps({"images_per_sec": images / seconds, "cpu_ms_per_batch": 1000 * cpu / batches}))
PY

measure() {  # CLIENT DATASET WARMUP BATCHES -> one JSON line
  case "$1" in
    cpp|cpp-shm)
         shm_flag=--no-shared-memory
         [ "$1" = cpp-shm ] && shm_flag=
         /usr/bin/time -f '%U %S' -o "$work/time" "$sluice" profile --target "$tcp" \
           --dataset "$2" --batch-size 256 --image-size 224 --warmup-batches "$3" \
           --batches "$4" $shm_flag --json > "$work/out"
         python3 -c 'import json, sys
j = json.load(open(sys.argv[1])); u, s = map(float, open(sys.argv[2]).read().split()[-2:])
print(json.dumps({"images_per_sec": j["images_per_sec"],
                  "cpu_ms_per_batch": 1000 * (u + s) / (int(sys.argv[3]) + int(sys.argv[4]))}))' \
           "$work/out" "$work/time" "$3" "$4" ;;
    python) "$python" "$work/python_client.py" "$tcp" "$2" "$3" "$4" 0 0 ;;
    python-tuned) "$python" "$work/python_client.py" "$tcp" "$2" "$3" "$4" 1 0 ;;
    python-shm) "$python" "$work/python_client.py" "$tcp" "$2" "$3" "$4" 0 1 ;;
  esac
}

for case in "train 2 40" "cached 30 100"; do
  set -- $case
  for ((r = 0; r < rounds; ++r)); do
    for client in cpp python python-tuned cpp-shm python-shm; do
      echo "$client $(measure "$client" "$1" "$2" "$3")" >> "$work/$1.results"
    done
  done
  python3 - "$1" "$work/$1.results" <<'PY'
import json, statistics, sys
results = {}
for line in open(sys.argv[2]):
    client, j = line.split(" ", 1)
    results.setdefault(client, []).append(json.loads(j))
label = {"train": "uncached TRAIN", "cached": "warm DECODED cache"}[sys.argv[1]]
cpp = statistics.median(r["images_per_sec"] for r in results["cpp"])
for client, runs in results.items():
    rate = statistics.median(r["images_per_sec"] for r in runs)
    cpu = statistics.median(r["cpu_ms_per_batch"] for r in runs)
    print("%-18s %-13s %6.0f img/s (%3.0f%% of C++)  client CPU %5.1f ms/batch  runs: %s" % (
        label, client, rate, 100 * rate / cpp, cpu,
        " ".join("%.0f" % r["images_per_sec"] for r in runs)))
PY
done
kill -TERM $server
wait $server || true
server=
