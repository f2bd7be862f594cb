#!/usr/bin/env bash
# From a fresh Debian 12 machine to a demo data set: installs what is missing, builds `sluice`,
# makes an ImageNet-like demo set from the photos of Debian's mate-backgrounds, inspects it, runs
# the training pipeline over it in-process, then serves it with `sluice serve`, streams from it, and
# trains a small classifier on it for about a minute with `sluice-trainer` (CPU backend).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
demo="$root/build/demo"
photos=/usr/share/backgrounds/mate/nature

# The Python test environment (TensorFlow) is only for deploy/test.sh.
SLUICE_SKIP_PYTHON=1 "$root/deploy/install-deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/build" -j"$(nproc)" --target sluice sluice-trainer
sluice="$root/build/bin/sluice"

if [ ! -f "$demo/labels.txt" ]; then
  echo "== making the demo set in $demo (10 classes of photo crops)"
  "$sluice" synth --photos "$photos" --classes 10 --images 2000 --val-fraction 0.1 \
    --shards 8 --val-shards 2 --seed 1 --out "$demo"
fi
echo "== inspecting it"
"$sluice" inspect "$demo"/train-*.tfrecord "$demo"/validation-*.tfrecord
echo "== running the TRAIN pipeline over it (RandomResizedCrop 224, flip, batches of 128)"
"$sluice" profile --files "$demo/train-*.tfrecord" --batch-size 128 --image-size 224 \
  --shuffle-buffer 512 --batches 20

echo "== serving it: sluice serve on 127.0.0.1:50051, metrics on http://127.0.0.1:9100/"
# Datasets "train" and "val" (the trainer evaluates on val; num_classes sizes its head).
cat >"$demo/serve.textproto" <<CONFIG
listen: "127.0.0.1:50051"
metrics_address: "127.0.0.1:9100"
datasets { name: "train" num_classes: 10 pipeline { files: "$demo/train-*.tfrecord" } }
datasets { name: "val" num_classes: 10
           pipeline { files: "$demo/validation-*.tfrecord" mode: MODE_EVAL epochs: 1 } }
CONFIG
"$sluice" serve --config "$demo/serve.textproto" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 100); do
  "$sluice" profile --target 127.0.0.1:50051 --dataset train --batches 1 --warmup-batches 0 \
    --batch-size 8 --image-size 32 >/dev/null 2>&1 && break
  sleep 0.2
done
echo "== streaming from it over gRPC (what a trainer sees)"
"$sluice" profile --target 127.0.0.1:50051 --dataset train --batch-size 128 --image-size 224 \
  --batches 20
echo "== training on it for about a minute (sluice-trainer, CPU backend, 64x64 images)"
"$root/build/bin/sluice-trainer" --target 127.0.0.1:50051 --dataset train --eval-dataset val \
  --steps 100 --batch-size 64 --image-size 64 --patch 8 --width 128 --depth 2 \
  --log-every 10 --eval-every 50 | tee "$demo/train.log"
echo "== summary: $(tail -n 1 "$demo/train.log")"
kill -TERM $server
wait $server
trap - EXIT
