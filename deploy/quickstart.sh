#!/usr/bin/env bash
# From a fresh Debian 12 machine to a demo data set: installs what is missing, builds `sluice`,
# makes an ImageNet-like demo set from the photos of Debian's mate-backgrounds, inspects it and
# runs the training pipeline over it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
demo="$root/build/demo"
photos=/usr/share/backgrounds/mate/nature

# The Python test environment (TensorFlow) is only for deploy/test.sh.
SLUICE_SKIP_PYTHON=1 "$root/deploy/install-deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/build" -j"$(nproc)" --target sluice
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
