#!/usr/bin/env bash
# Benchmark: Sluice's TRAIN pipeline against PyTorch's DataLoader, tf.data and NVIDIA DALI (on the
# CPU) on the same shards and the same cores. Each loader turns TFRecord shards of JPEGs into
# batches of 256 224x224 images by one of two recipes and reports images/s over --batches batches
# after a short warm-up:
#   plain   RandomResizedCrop (area [0.08, 1], aspect [3/4, 4/3]) + horizontal flip (p 0.5)
#           -> uint8 NHWC (PyTorch: NCHW)
#   jitter  the same + ColorJitter(brightness 0.4, contrast 0.4, saturation 0.4) + normalize
#           (ImageNet mean/std) -> bfloat16 NCHW (DALI: float16; it has no bfloat16)
# The loaders (each file says how it spells the recipes):
#   Sluice    build/bin/sluice profile ... --json   (--threads threads; jitter: --options
#             tests/bench/recipe_jitter.textproto)
#   PyTorch   tests/bench/pytorch_loader.py, Debian's python3     (--threads DataLoader workers)
#   tf.data   tests/bench/tfdata_loader.py, build/venv python     (--threads threads in its pool)
#   DALI      tests/bench/dali_loader.py, build/venv-bench python (--threads CPU threads)
# All run under `taskset -c 0-(threads-1)`, one after another, with the shards in the page cache.
#
#   tests/bench/compare.sh [DATA_GLOB] [--recipe plain|jitter|both] [--threads 2] [--batches 30]
#                          [--runs 1]
#
# Without DATA_GLOB it uses (and once writes, with `sluice synth`) 6000 ImageNet-like JPEGs in 16
# shards under /tmp/sluice-bench-data. It first runs `deploy/install-deps.sh --bench` (DALI in
# build/venv-bench, TensorFlow in build/venv; PyTorch, torchvision, Pillow from Debian). A loader
# that fails or is missing, or whose images are not the recipe's size in bytes (a Sluice that
# ignored the transforms), is reported as "n/a (error)" and the others still run. With --runs N
# each loader runs N times and the table uses the best run. --recipe both (the default) prints a
# table per recipe, then each loader's jitter/plain ratio: what the per-pixel ops cost it.
# Columns: img/s (images per second, best run); vs PyTorch (img/s over PyTorch's); Sluice/this
# (Sluice's img/s over this loader's); img/CPU-s (images per CPU-second the loader's processes
# used while timed: less sensitive to other load than img/s); output (the batches' dtype and
# layout); all runs. Figures on a shared 2-core machine are noisy: compare within one run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build="$root/build"
sluice="$build/bin/sluice"
venv_python="$build/venv/bin/python"
bench_python="$build/venv-bench/bin/python"
data=/tmp/sluice-bench-data

glob="" recipe=both threads=2 batches=30 runs=1
while (($#)); do
  case "$1" in
    --recipe) recipe=$2; shift 2 ;;
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
case "$recipe" in
  plain|jitter) recipes=("$recipe") ;;
  both) recipes=(plain jitter) ;;
  *) echo "compare.sh: --recipe wants plain, jitter or both, not $recipe" >&2; exit 2 ;;
esac
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

# run_loader RECIPE NAME OUTPUT COMMAND...: runs COMMAND pinned, $runs times; appends
# "RECIPE<TAB>NAME<TAB>OUTPUT<TAB>ips:cpu ..." (or "...<TAB>error") to $results, from
# images_per_sec and images_per_cpu_sec (optional) in the JSON the command prints last. OUTPUT is
# the dtype and layout the recipe asks of this loader; the JSON's "output" (or "dtype" and
# "layout", as `sluice profile` prints them) replaces it when present. A run whose images are not
# the recipe's size in bytes ("image_bytes", else bytes_per_sec / images_per_sec) failed: it did
# not apply the recipe.
results=$(mktemp)
trap 'rm -f "$results" "$results".out "$results".err' EXIT
run_loader() {
  local recipe=$1 name=$2 output=$3 figures="" line i
  shift 3
  local want_bytes=$((224 * 224 * 3))  # uint8
  [ "$recipe" = plain ] || want_bytes=$((want_bytes * 2))  # 16-bit floats
  for ((i = 1; i <= runs; i++)); do
    echo "$recipe: $name run $i/$runs (load average $(cut -d' ' -f1-3 /proc/loadavg)) ..."
    if "${pin[@]}" "$@" >"$results.out" 2>"$results.err" && line=$(python3 -c '
import json, sys
text = open(sys.argv[1]).read()
try:
    j = json.loads(text)
except ValueError:
    j = json.loads([l for l in text.splitlines() if l.lstrip().startswith("{")][-1])
ips = float(j["images_per_sec"])
got = round(float(j["image_bytes"] if "image_bytes" in j else j["bytes_per_sec"] / ips))
if got != int(sys.argv[2]):
    sys.exit("images of %d bytes where the recipe makes %s: the recipe was not applied"
             % (got, sys.argv[2]))
if "output" not in j and "layout" in j:
    j["output"] = "%s %s" % (j["dtype"], j["layout"])
print("%.1f:%s\t%s" % (ips, j.get("images_per_cpu_sec", "-"), j.get("output", sys.argv[3])))' \
        "$results.out" "$want_bytes" "$output" 2>>"$results.err"); then
      echo "  $(tail -n 1 "$results.out" | cut -c1-200)"
      figures+="${line%%$'\t'*} "
      output=${line#*$'\t'}
    else
      echo "  $name failed:" >&2
      tail -n 8 "$results.err" | sed 's/^/    /' >&2
    fi
  done
  printf '%s\t%s\t%s\t%s\n' "$recipe" "$name" "$output" "${figures:-error}" >>"$results"
}

tf_ok=0 dali_ok=0
if [ -x "$venv_python" ] && "$venv_python" -c 'import tensorflow' 2>/dev/null; then
  tf_ok=1
else
  echo "tf.data: skipped ($venv_python cannot import tensorflow)" >&2
fi
if [ -x "$bench_python" ] && "$bench_python" -c 'import nvidia.dali' 2>/dev/null; then
  dali_ok=1
else
  echo "DALI: skipped ($bench_python cannot import nvidia.dali)" >&2
fi
for r in "${recipes[@]}"; do
  if [ "$r" = plain ]; then
    sluice_recipe=() want="uint8 NHWC"
  else
    sluice_recipe=(--options "$root/tests/bench/recipe_jitter.textproto") want="bfloat16 NCHW"
  fi
  run_loader "$r" Sluice "$want" "$sluice" profile "${sluice_recipe[@]}" --files "$glob" \
    --batch-size 256 --image-size 224 --mode train --threads "$threads" --batches "$batches" --json
  run_loader "$r" PyTorch "${want/NHWC/NCHW}" /usr/bin/python3 \
    "$root/tests/bench/pytorch_loader.py" "$glob" --recipe "$r" --workers "$threads" \
    --batches "$batches"
  if ((tf_ok)); then
    run_loader "$r" tf.data "$want" "$venv_python" "$root/tests/bench/tfdata_loader.py" "$glob" \
      --recipe "$r" --threads "$threads" --batches "$batches"
  else
    printf '%s\ttf.data\t%s\terror\n' "$r" "$want" >>"$results"
  fi
  if ((dali_ok)); then
    run_loader "$r" DALI "${want/bfloat16/float16}" "$bench_python" \
      "$root/tests/bench/dali_loader.py" "$glob" --recipe "$r" --threads "$threads" \
      --batches "$batches"
  else
    printf '%s\tDALI\t%s\terror\n' "$r" "${want/bfloat16/float16}" >>"$results"
  fi
done

echo
python3 - "$results" "$threads" "$cpus" "$batches" "$runs" <<'EOF'
import sys
path, threads, cpus, batches, runs = sys.argv[1:]
tables = {}  # recipe -> [(loader, output, (img/s, img/CPU-s) of the best run or None, all runs)]
for line in open(path):
    recipe, name, output, figures = line.rstrip('\n').split('\t')
    each = [f.split(':') for f in figures.split()] if figures != 'error' else []
    each = [(float(ips), None if cpu == '-' else float(cpu)) for ips, cpu in each]
    tables.setdefault(recipe, []).append((name, output, max(each) if each else None, each))
best = {(recipe, name): b[0] for recipe, rows in tables.items() for name, _, b, _ in rows if b}


def ratio(a, b):
    return '%.2fx' % (a / b) if a and b else 'n/a'


titles = {
    'plain': 'plain: RandomResizedCrop + flip -> uint8',
    'jitter': 'jitter: RandomResizedCrop + flip + ColorJitter(0.4, 0.4, 0.4) + normalize'
              ' -> bfloat16 NCHW',
}
row = '  %-8s %12s %11s %12s %10s  %-14s %s'
for recipe, rows in tables.items():
    print('%s\n  %s threads on cores %s, batch 256, 224x224, %s timed batches, best of %s:'
          % (titles[recipe], threads, cpus, batches, runs))
    print(row % ('loader', 'img/s', 'vs PyTorch', 'Sluice/this', 'img/CPU-s', 'output',
                 'all runs (img/s)'))
    for name, output, b, each in rows:
        ips, cpu = b or (None, None)
        print(row % (name, '%.0f' % ips if ips else 'n/a (error)',
                     ratio(ips, best.get((recipe, 'PyTorch'))),
                     ratio(best.get((recipe, 'Sluice')), ips), '%.0f' % cpu if cpu else 'n/a',
                     output, ' '.join('%.0f' % r for r, _ in each)))
    print()
if len(tables) == 2:
    print('jitter / plain (img/s of the jitter recipe over the plain one: what its per-pixel ops'
          ' cost each loader):')
    for name, _, _, _ in tables['plain']:
        print('  %-8s %s' % (name, ratio(best.get(('jitter', name)), best.get(('plain', name)))))
EOF
