#!/usr/bin/env bash
# Benchmark: Sluice's TRAIN pipeline against PyTorch's DataLoader and tf.data on the same shards and
# the same cores. Each loader turns TFRecord shards of JPEGs into batches of 256 uint8 224x224 images
# with RandomResizedCrop (area [0.08, 1], aspect [3/4, 4/3]) + horizontal flip (p 0.5), and reports
# images/s over --batches batches after a short warm-up:
#   Sluice    build/bin/sluice profile ... --json               (--threads threads)
#   PyTorch   tests/bench/pytorch_loader.py, Debian's python3  (--threads DataLoader workers)
#   tf.data   tests/bench/tfdata_loader.py, build/venv python  (--threads threads in its pool)
# All run under `taskset -c 0-(threads-1)`, one after another, with the shards in the page cache.
#
#   tests/bench/compare.sh [DATA_GLOB] [--threads 2] [--batches 30] [--runs 1]
#
# Without DATA_GLOB it uses (and once writes, with `sluice synth`) 6000 ImageNet-like JPEGs in 16
# shards under /tmp/sluice-bench-data. It first runs `deploy/install-deps.sh --bench` (PyTorch,
# torchvision, Pillow from Debian; TensorFlow in build/venv). A loader that fails or is missing is
# reported as "n/a (error)" and the others still run. With --runs N each loader runs N times and the
# table uses the best run. Figures on a shared 2-core machine are noisy: compare within one run;
# img/CPU-s (images per CPU-second the loader used while timed) is less sensitive to other load.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build"
sluice="$build/bin/sluice"
venv_python="$build/venv/bin/python"
data=/tmp/sluice-bench-data

glob="" threads=2 batches=30 runs=1
while (($#)); do
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --batches) batches=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1 {sub(/^# ?/, ""); print}' "${BASH_SOURCE[0]}"
               exit 0 ;;
    -*) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
    *) [ -z "$glob" ] || { echo "compare.sh: one DATA_GLOB only (quote it)" >&2; exit 2; }
       glob=$1; shift ;;
  esac
done
cores=$(nproc)
if ((threads > cores)); then
  echo "compare.sh: --threads $threads > $cores cores; the loaders will share $cores cores" >&2
fi
cpus="0-$(( (threads < cores ? threads : cores) - 1 ))"
pin=(taskset -c "$cpus")

# Dependencies. A failure here is reported but not fatal: loaders that cannot run show n/a.
install_log=/tmp/sluice-bench-install.log
echo "install-deps --bench (log: $install_log) ..."
if ! "$root/deploy/install-deps.sh" --bench >"$install_log" 2>&1; then
  echo "compare.sh: deploy/install-deps.sh --bench failed; last lines:" >&2
  tail -n 15 "$install_log" >&2
fi

# Waits while a ninja runs in the shared build tree (someone else may be building there).
wait_for_build() {
  local pid busy
  while true; do
    busy=0
    for pid in $(pgrep -x ninja || true); do
      [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$build" ] && busy=1
    done
    ((busy)) || return 0
    echo "waiting for the build running in $build ..."
    sleep 15
  done
}

if [ -z "$glob" ]; then
  if [ ! -x "$sluice" ]; then
    wait_for_build
    cmake --build "$build" --target sluice
  fi
  . "$root/tests/bench/bench_data.sh"
  make_bench_data "$data"
  glob="$data/train-*.tfrecord"
fi
mapfile -t files < <(compgen -G "$glob" | sort)
if ((${#files[@]} == 0)); then
  echo "compare.sh: no files match $glob" >&2
  exit 1
fi
du -ch "${files[@]}" | tail -n 1 | sed "s|total|in ${#files[@]} files matching $glob|"
cat "${files[@]}" >/dev/null  # page cache: measure decoding, not the disk

# run_loader NAME COMMAND...: runs COMMAND pinned, $runs times; appends "NAME<TAB>ips:cpu ..." (or
# "NAME<TAB>error") to $results, from images_per_sec and images_per_cpu_sec (optional) in the JSON
# the command prints last.
results=$(mktemp)
trap 'rm -f "$results" "$results".out "$results".err' EXIT
run_loader() {
  local name=$1 figures="" ips i
  shift
  for ((i = 1; i <= runs; i++)); do
    echo "$name run $i/$runs (load average $(cut -d' ' -f1-3 /proc/loadavg)) ..."
    if "${pin[@]}" "$@" >"$results.out" 2>"$results.err" && ips=$(python3 -c '
import json, sys
text = open(sys.argv[1]).read()
try:
    j = json.loads(text)
except ValueError:
    j = json.loads([l for l in text.splitlines() if l.lstrip().startswith("{")][-1])
print("%.1f:%s" % (float(j["images_per_sec"]), j.get("images_per_cpu_sec", "-")))' \
        "$results.out" 2>>"$results.err"); then
      echo "  $(tail -n 1 "$results.out" | cut -c1-200)"
      figures+="$ips "
    else
      echo "  $name failed:" >&2
      tail -n 8 "$results.err" | sed 's/^/    /' >&2
    fi
  done
  printf '%s\t%s\n' "$name" "${figures:-error}" >>"$results"
}

run_loader "Sluice" "$sluice" profile --files "$glob" --batch-size 256 --image-size 224 \
  --mode train --threads "$threads" --batches "$batches" --json
run_loader "PyTorch" /usr/bin/python3 "$root/tests/bench/pytorch_loader.py" "$glob" \
  --workers "$threads" --batches "$batches"
if [ -x "$venv_python" ] && "$venv_python" -c 'import tensorflow' 2>/dev/null; then
  run_loader "tf.data" "$venv_python" "$root/tests/bench/tfdata_loader.py" "$glob" \
    --threads "$threads" --batches "$batches"
else
  echo "tf.data: skipped ($venv_python cannot import tensorflow)" >&2
  printf 'tf.data\terror\n' >>"$results"
fi

echo
echo "$threads threads on cores $cpus, batch 256, 224x224 uint8, $batches timed batches, best of $runs:"
python3 - "$results" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    name, figures = line.rstrip('\n').split('\t')
    runs = [f.split(':') for f in figures.split()] if figures != 'error' else []
    runs = [(float(ips), None if cpu == '-' else float(cpu)) for ips, cpu in runs]
    rows.append((name, max(runs) if runs else (None, None), runs))
best = {name: ips for name, (ips, _), _ in rows}
def ratio(a, b):
    return '%.2fx' % (a / b) if a and b else 'n/a'
print('%-8s %12s %11s %12s %10s  %s' % (
    'loader', 'img/s', 'vs PyTorch', 'Sluice/this', 'img/CPU-s', 'all runs (img/s)'))
for name, (ips, cpu), runs in rows:
    print('%-8s %12s %11s %12s %10s  %s' % (
        name, '%.0f' % ips if ips else 'n/a (error)', ratio(ips, best.get('PyTorch')),
        ratio(best.get('Sluice'), ips), '%.0f' % cpu if cpu else 'n/a',
        ' '.join('%.0f' % r for r, _ in runs)))
EOF
