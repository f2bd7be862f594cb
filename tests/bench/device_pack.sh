#!/usr/bin/env bash
# Prepares a run of tests/bench/trainer_gpu.sh on the lent GPU machine, whose image has CUDA, CMake
# and ninja but none of our Debian libraries (gRPC, protobuf, oneTBB, libjpeg-turbo, ...) and no
# package registry (/work/.library/device/KINDS.md). Builds here (Release, CUDA) and packs into
# build-device/pack/: the stripped `sluice`, `sluice-trainer` and GPU test binaries (cuda_*_test),
# the shared libraries they link apart from glibc, libstdc++ and CUDA's own (the machine has newer
# ones), and the benchmark photographs. Then, on the device (carry build-device/pack):
#   BIN_DIR=build-device/pack/bin PHOTOS=build-device/pack/photos \
#     LD_LIBRARY_PATH=build-device/pack/lib tests/bench/trainer_gpu.sh
# and, as a second call (one command may run 600 s), the same with `--sanitize-only`.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$root/build-device
pack=$build/pack
configure=$(cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release)
grep -q "Sluice: CUDA ON" <<<"$configure" ||
  { echo "device_pack: CUDA is not enabled (no nvcc?)" >&2; exit 1; }
cmake --build "$build" --target sluice sluice-trainer trainer_cuda_backend_test \
  trainer_cuda_determinism_test trainer_cuda_pinned_test
rm -rf "$pack"
mkdir -p "$pack/bin" "$pack/lib" "$pack/photos"
bins=("$build/bin/sluice" "$build/bin/sluice-trainer" "$build"/tests/trainer_cuda_*_test)
for b in "${bins[@]}"; do
  strip -o "$pack/bin/$(basename "$b")" "$b"
done
ldd "${bins[@]}" | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -v -E '/(libc|libm|libpthread|libdl|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*)\.so|/usr/local/cuda' |
  while read -r lib; do cp -L "$lib" "$pack/lib/"; done
cp /usr/share/backgrounds/mate/nature/*.jpg "$pack/photos/"
du -sh "$pack"
