#!/usr/bin/env bash
# The trainer's GPU check, for a session with a CUDA device. The lent machine runs one command for
# at most 600 s, so it is two calls:
#   tests/bench/trainer_gpu.sh [DATA_DIR]                  steps 0, 1, 2 and 4 (< 10 minutes)
#   tests/bench/trainer_gpu.sh --sanitize-only             steps 0, 1 and 3 (< 8 minutes)
# (SANITIZE=1 adds step 3 to the first call, for a machine without that limit.)
#   0. records the GPU and its driver (nvidia-smi) first, and says plainly when the driver is too
#      old for the CUDA 13 runtime the binaries link statically — and whether the toolkit's
#      forward-compatibility package would help — since then every gpu test would skip and
#      --device auto would train on the CPU;
#   1. builds the trainer, the server and the GPU tests (Release, CUDA);
#   2. runs the gpu-labelled test binaries (tests/trainer/cuda_*_test.cc: GPU step vs CPU step in
#      bf16/fp16/fp32, graph replay vs eager, NaN guard, fp16 overflow and back-off, pinned
#      in-place staging, loss falls, accumulation with checkpoints and resume, pinned memory
#      released on a client thread during captures, evaluation vs CPU, a wide model's step) with
#      SLUICE_REQUIRE_GPU=1, so a skip is a failure;
#   3. runs the quick ones under compute-sanitizer: memcheck, racecheck, synccheck and initcheck,
#      one log each (sanitizer_<tool>_<binary>.txt), read for errors whatever the exit code;
#      SANITIZER_TIMEOUT seconds per tool and binary (default 45, then SIGKILL 10 s later: at
#      most 8 × 55 s). A run cut off by the timeout is reported as INCOMPLETE, not as clean;
#   4. benchmarks issue 5's model — D=384, L=4, P=16, batch 256, 224x224 — fed by `sluice serve`
#      from a warm DECODED cache on 127.0.0.1 (through shared memory, the default on one host),
#      in bf16, then fp16 and fp32: step time, img/s, data-wait fraction, and the ingest's H2D
#      bandwidth against a plain pinned-copy loop.
# On the lent machine, which lacks our libraries, use binaries packed here by
# tests/bench/device_pack.sh: BIN_DIR=... PHOTOS=... LD_LIBRARY_PATH=... (see that script).
# Writes driver.txt, ctest_gpu.txt, sanitizer_*.txt, trainer_bench_{bf16,fp16,fp32}.txt,
# summary.json (and nvidia-smi.txt) to $OUT when set, else to a temporary directory it names.
# Exit code: 0 when everything run passed; 1 when a gpu test failed (or skipped), a sanitizer
# reported errors or failed, the benchmark data or server could not be made, or a benchmark run
# failed; 2 when nothing failed but a sanitizer run was cut off by its timeout (incomplete).
set -uo pipefail
sanitize=${SANITIZE:-0} bench=1
if [ "${1:-}" = --sanitize-only ]; then
  sanitize=1 bench=0
  shift
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD_DIR:-$root/build-gpu}
data=${1:-/tmp/sluice-bench-data}
out=${OUT:-$(mktemp -d)}
steps=${STEPS:-150}
mkdir -p "$out"
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill $server 2>/dev/null; rm -rf "$work"' EXIT
echo "results in $out"

. "$root/tests/bench/gpu_driver_check.sh"
check_gpu_driver "$out"
if [ -n "${BIN_DIR:-}" ]; then
  bin=$(cd "$BIN_DIR" && pwd)  # packed by tests/bench/device_pack.sh
else
  bin=$build/bin
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$out/cmake.txt" 2>&1 ||
    { tail -30 "$out/cmake.txt"; exit 1; }
  grep -q "Sluice: CUDA ON" "$out/cmake.txt" || { echo "CUDA not enabled (no nvcc?)" >&2; exit 1; }
  ninja -C "$build" -j"$(nproc)" sluice sluice-trainer trainer_cuda_backend_test \
    trainer_cuda_determinism_test trainer_cuda_pinned_test > "$out/build.txt" 2>&1 || { tail -40 "$out/build.txt"; exit 1; }
  cp "$build"/tests/trainer_cuda_*_test "$bin/"
fi

# The gpu-labelled tests (tests/trainer/cuda_*_test.cc), run directly. SLUICE_REQUIRE_GPU=1:
# without a usable device they fail instead of skipping (77). They start `sluice` (synth, serve)
# from $SLUICE_BIN and take photos from $SLUICE_PHOTOS, not the paths of the tree they were
# built in.
photos=$(realpath "${PHOTOS:-/usr/share/backgrounds/mate/nature}")
export SLUICE_REQUIRE_GPU=1 SLUICE_BIN="$bin/sluice" SLUICE_PHOTOS="$photos"
ctest_rc=0 sanitizer_rc=0 bench_rc=0 incomplete=0
if [ "$bench" = 1 ]; then
  : > "$out/ctest_gpu.txt"
  for t in "$bin"/trainer_cuda_*_test; do
    "$t" >> "$out/ctest_gpu.txt" 2>&1 || { ctest_rc=1; echo "FAILED: $(basename "$t")"; }
  done
  tail -15 "$out/ctest_gpu.txt"
fi

# compute-sanitizer over the quick cases (the kernels, GEMMs, graphs and staging; not the
# trainer-level runs, which its 10-100x slowdown would stretch past the time limit). A run's log
# is read for errors whatever its exit code: one killed by the timeout may have printed some.
# The tools' error lines start "========= " (compute-sanitizer's prefix); the summary lines
# count them.
sanitizer_errors='ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [0-9]+ hazards? displayed \([1-9]|^========= +(Invalid |Uninitialized |Barrier error|Error: Race|Program hit |Malloc/Free error|Leaked [0-9])'
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if [ "$sanitize" != 0 ] && [ -x "$sanitizer" ]; then
  limit=${SANITIZER_TIMEOUT:-45}
  for tool in memcheck racecheck synccheck initcheck; do
    for t in "$bin/trainer_cuda_backend_test" "$bin/trainer_cuda_pinned_test"; do
      cases='GpuStepMatchesCpuStep,GraphReplayMatchesEagerLaunches,PinnedImagesAreCopiedInPlace*'
      [[ $t == *pinned* ]] && cases='~AWideModelStepMatchesTheCpu'
      log="$out/sanitizer_${tool}_$(basename "$t").txt"
      timeout -k 10 "$limit" "$sanitizer" --tool "$tool" --error-exitcode 99 "$t" "$cases" \
        > "$log" 2>&1
      rc=$?
      errors=$(grep -cE "$sanitizer_errors" "$log")
      if [ "$errors" -gt 0 ] || [ $rc -eq 99 ]; then
        verdict="ERRORS ($errors error lines)"
        sanitizer_rc=1
      elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
        verdict="INCOMPLETE (cut off after ${limit} s; no errors before that)"
        incomplete=1
      elif [ $rc -ne 0 ]; then
        verdict="FAILED (exit $rc)"
        sanitizer_rc=1
      else
        verdict=clean
      fi
      echo "compute-sanitizer $tool $(basename "$t"): $verdict; $log"
      [ "$verdict" = clean ] || grep -E "$sanitizer_errors" "$log" | head -5
    done
  done
elif [ "$sanitize" != 0 ]; then
  echo "compute-sanitizer not found at $sanitizer" >&2
  sanitizer_rc=1
else
  echo "compute-sanitizer not run (a separate call: tests/bench/trainer_gpu.sh --sanitize-only)"
fi

# The benchmarks; a failure to make their data or start the server, a trainer that fails and
# the summary's script count against the exit code (the trainer's through PIPESTATUS: tee's is
# the pipeline's).
run_benchmarks() {
  local rc=0 precision n trainer_rc
  sluice="$bin/sluice"
  . "$root/tests/bench/bench_server.sh"
  if ! make_bench_data "$data" > "$work/synth.log" 2>&1; then
    echo "make_bench_data failed:" >&2
    tail -20 "$work/synth.log" >&2
    return 1
  fi
  start_bench_server "$data" "$work"
  if [ -z "$tcp" ]; then
    echo "sluice serve did not start:" >&2
    cat "$work/serve.log" >&2
    return 1
  fi
  # The first ~25 steps fill the cache (6,000 images = 23 batches); the later log windows are warm.
  for precision in bf16 fp16 fp32; do
    n=$steps
    [ "$precision" = bf16 ] || n=$((steps * 2 / 3))
    "$bin/sluice-trainer" --target "$tcp" --dataset cached --num-classes 12 --device cuda \
      --precision "$precision" --batch-size 256 --image-size 224 --width 384 --depth 4 \
      --patch 16 --steps "$n" --log-every 10 --lr 1e-3 2>&1 | tee "$out/trainer_bench_$precision.txt"
    trainer_rc=${PIPESTATUS[0]}
    if [ "$trainer_rc" -ne 0 ]; then
      echo "FAILED: sluice-trainer --precision $precision exited $trainer_rc" >&2
      rc=1
    fi
  done
  kill -TERM "$server"
  wait "$server" 2>/dev/null
  server=
  return $rc
}

if [ "$bench" = 1 ]; then
  run_benchmarks || bench_rc=1
  python3 - "$out" <<'PY' || bench_rc=1
import json, re, sys
out = sys.argv[1]
summary = {}
for precision in ("bf16", "fp16", "fp32"):
    try:
        text = open(f"{out}/trainer_bench_{precision}.txt").read()
    except OSError:
        continue
    windows = [tuple(map(float, m)) for m in re.findall(
        r"step\s+(\d+)\s+loss (\S+)\s+acc (\S+)\s+img/s (\S+)\s+data-wait (\S+)%\s+step (\S+) ms",
        text)]
    warm = [w for w in windows if w[0] > 40] or windows
    result = {"final": None, "warm_windows": len(warm)}
    if warm:
        result.update({
            "warm_img_per_sec": sum(w[3] for w in warm) / len(warm),
            "warm_data_wait_pct": sum(w[4] for w in warm) / len(warm),
            "warm_step_ms": sum(w[5] for w in warm) / len(warm),
        })
    last = [l for l in text.splitlines() if l.startswith("{")]
    if last:
        final = json.loads(last[-1])
        result["final"] = final
        if final.get("h2d_gb_per_sec") and final.get("h2d_plain_gb_per_sec"):
            result["h2d_vs_plain_pinned_copy"] = (final["h2d_gb_per_sec"] /
                                                  final["h2d_plain_gb_per_sec"])
    summary[precision] = result
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(json.dumps(summary, indent=1))
PY
fi

echo "gpu tests $ctest_rc, sanitizers $sanitizer_rc (incomplete: $incomplete), benchmarks $bench_rc" \
  "(0: passed; 1: failed)"
if [ $ctest_rc -ne 0 ] || [ $sanitizer_rc -ne 0 ] || [ $bench_rc -ne 0 ]; then
  exit 1
fi
[ $incomplete -eq 0 ] || { echo "INCOMPLETE: a sanitizer run was cut off by its timeout"; exit 2; }
exit 0
