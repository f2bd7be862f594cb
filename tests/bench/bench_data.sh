# Shared by the benchmarks (source it, with $sluice set): their one data set.
#   make_bench_data DIR   6,000 ImageNet-like images (synth from real photos: $PHOTOS, default
#                         Debian's mate-backgrounds) in 16 shards, 12 classes; made once
make_bench_data() {
  if [ ! -f "$1/labels.txt" ]; then
    "$sluice" synth --photos "${PHOTOS:-/usr/share/backgrounds/mate/nature}" --classes 12 --images 6000 \
      --shards 16 --seed 1 --out "$1"
  fi
}
#   train_images_per_sec THREADS BATCHES GLOB [ARGS...]
#                         img/s of `sluice profile` over GLOB, TRAIN at 224, batches of 256,
#                         pinned to the first THREADS cores; ARGS are passed on
train_images_per_sec() {
  local threads=$1 batches=$2 files=$3
  shift 3
  taskset -c "0-$((threads - 1))" "$sluice" profile --files "$files" --batch-size 256 \
    --image-size 224 --mode train --threads "$threads" --batches "$batches" --json "$@" |
    grep '^{' | tail -1 |
    python3 -c 'import json, sys; print("%.0f" % json.load(sys.stdin)["images_per_sec"])'
}
#   parse_bench_args ARGS  --threads N, --batches N, --runs N into $threads, $batches, $runs
#                         (the caller sets their defaults first)
parse_bench_args() {
  while (($#)); do
    case "$1" in
      --threads) threads=$2; shift 2 ;;
      --batches) batches=$2; shift 2 ;;
      --runs) runs=$2; shift 2 ;;
      *) echo "usage: $0 [--threads N] [--batches N] [--runs N]" >&2; exit 2 ;;
    esac
  done
}
