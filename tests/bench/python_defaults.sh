#!/usr/bin/env bash
# The Python client with its defaults next to the C++ client (`sluice profile --target`, its
# defaults: same-host shared memory), all reading one `sluice serve` over TCP loopback, uncached
# TRAIN at 224 on the synthetic photos (batch 256): the numpy stream (Client.stream: shared
# memory, each batch dropped before the next) and SluiceDataset in a DataLoader with 2 workers
# (shared memory, each worker a shard) and with none (dataloader0: shared memory, each batch
# copied out of its slot). The
# server's decode is the bottleneck, so a client's own CPU time (shared cores) shows as lost
# images/s; goal: >= 90% of C++. Rounds alternate the clients; the median of each is reported.
# The working tree's client runs from a copy with its protos generated (nothing is installed).
#   tests/bench/python_defaults.sh [DATA_DIR] [ROUNDS]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
python=${SLUICE_PYTHON:-$root/build/venv/bin/python}
torch_python=${SLUICE_TORCH_PYTHON:-$root/build/venv-torch/bin/python}
data=${1:-/tmp/sluice-bench-data}
rounds=${2:-3}
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT

. "$root/tests/bench/bench_server.sh"
make_bench_data "$data"
mkdir -p "$work/py"
cp -r "$root/client/python/sluice" "$work/py/"
"$python" -m grpc_tools.protoc -I"$root/proto" --python_out="$work/py" \
  --grpc_python_out="$work/py" "$root/proto/sluice/v1/config.proto" \
  "$root/proto/sluice/v1/service.proto"
touch "$work/py/sluice/v1/__init__.py"
export PYTHONPATH="$work/py"

start_bench_server "$data" "$work"

# Images/s as `profile --target` measures them: over `batches` batches after `warmup` batches of
# a new stream.
cat > "$work/python_client.py" <<'PY'
import json, sys, time
import sluice
target, warmup, batches, loader = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if loader == "numpy":
    client = sluice.Client(target)
    batches_of = client.stream("train", batch_size=256, image_size=224)
else:
    import torch
    import sluice.torch
    ds = sluice.torch.SluiceDataset(target, "train", batch_size=256, image_size=224, epochs=0)
    workers = 2 if loader == "dataloader" else 0
    batches_of = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=workers))
for _ in range(warmup):
    next(batches_of)
t0, images = time.perf_counter(), 0
for _ in range(batches):
    images += len(next(batches_of)[1])
print(json.dumps({"images_per_sec": images / (time.perf_counter() - t0)}))
PY

measure() {  # CLIENT WARMUP BATCHES -> one JSON line
  case "$1" in
    cpp) "$sluice" profile --target "$tcp" --dataset train --batch-size 256 --image-size 224 \
           --warmup-batches "$2" --batches "$3" --json \
         | python3 -c 'import json, sys
print(json.dumps({"images_per_sec": json.load(sys.stdin)["images_per_sec"]}))' ;;
    numpy) "$python" "$work/python_client.py" "$tcp" "$2" "$3" numpy ;;
    dataloader|dataloader0)
         "$torch_python" "$work/python_client.py" "$tcp" "$2" "$3" "$1" ;;
  esac
}

for ((r = 0; r < rounds; ++r)); do
  for client in cpp numpy dataloader dataloader0; do
    echo "$client $(measure "$client" 4 40)" >> "$work/results"
  done
done
python3 - "$work/results" <<'PY'
import json, statistics, sys
results = {}
for line in open(sys.argv[1]):
    client, j = line.split(" ", 1)
    results.setdefault(client, []).append(json.loads(j)["images_per_sec"])
cpp = statistics.median(results["cpp"])
for client, runs in results.items():
    rate = statistics.median(runs)
    print("uncached TRAIN 224  %-10s %6.0f img/s (%3.0f%% of C++)  runs: %s" % (
        client, rate, 100 * rate / cpp, " ".join("%.0f" % r for r in runs)))
PY
kill -TERM $server
wait $server || true
server=
