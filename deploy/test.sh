#!/usr/bin/env bash
# Installs what is missing, builds everything and runs every test (C++ with ctest, Python interop
# with TensorFlow included). GPU tests skip visibly when no device is present.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
jobs=$(nproc)

"$root/deploy/install-deps.sh"
cmake -S "$root" -B "$root/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build "$root/build" -j"$jobs"
cd "$root/build"
ctest --output-on-failure -j"$jobs"
