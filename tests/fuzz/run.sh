#!/usr/bin/env bash
# Fuzzing campaigns: builds the fuzz targets with clang, libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer in build-fuzz/ and runs each for SECONDS (default 60), one per core
# at a time, starting from its committed corpus (tests/fuzz/corpus/<name>/). New inputs gather in
# build-fuzz/corpus/<name>/, crashes in build-fuzz/artifacts/<name>/ (with the target's log
# beside them). --merge then adds to the committed corpus the inputs that reach new coverage, so
# that every build's replay test (ctest -L fuzz) keeps them; copy a crash there by hand once fixed.
#
#   tests/fuzz/run.sh [--merge] [SECONDS] [TARGET...]
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
merge=0
if [[ ${1:-} == --merge ]]; then merge=1; shift; fi
seconds=${1:-60}
shift || true
targets=("$@")
if ((${#targets[@]} == 0)); then
  targets=($(sed -n 's/^sluice_fuzz_target(\([a-z_]*\) .*/\1/p' "$root/tests/fuzz/CMakeLists.txt"))
fi
SLUICE_SKIP_PYTHON=1 "$root/deploy/install-deps.sh" --fuzz >/dev/null
build=$root/build-fuzz
# crc32c.cc builds its tables at compile time: more constexpr steps than clang allows by default.
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
sanitize+=" -fconstexpr-steps=100000000"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DSLUICE_FUZZ=ON \
  -DSLUICE_ENABLE_CUDA=OFF -DBUILD_TESTING=OFF \
  -DCMAKE_C_FLAGS="$sanitize -fsanitize=fuzzer-no-link" \
  -DCMAKE_CXX_FLAGS="$sanitize -fsanitize=fuzzer-no-link" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]/%/_fuzzer}"

export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1
run_one() {
  local name=$1 work=$build/corpus/$1 artifacts=$build/artifacts/$1
  mkdir -p "$work" "$artifacts"
  "$build/fuzz/${name}_fuzzer" "$work" "$root/tests/fuzz/corpus/$name" \
    -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -malloc_limit_mb=1024 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    >"$artifacts/log" 2>&1 && status=ok || status="FAILED (see $artifacts/log)"
  echo "$name: $(grep -E '^stat::number_of_executed_units' "$artifacts/log" | awk '{print $2}') runs," \
    "$(ls "$work" | wc -l) inputs: $status"
}
running=0
for name in "${targets[@]}"; do
  run_one "$name" &
  running=$((running + 1))
  if ((running >= $(nproc))); then wait -n || true; running=$((running - 1)); fi
done
wait

if ((merge)); then
  for name in "${targets[@]}"; do
    "$build/fuzz/${name}_fuzzer" -merge=1 -max_len=65536 -timeout=10 \
      "$root/tests/fuzz/corpus/$name" "$build/corpus/$name" >/dev/null 2>&1
    echo "$name: $(ls "$root/tests/fuzz/corpus/$name" | wc -l) inputs in the committed corpus"
  done
fi
