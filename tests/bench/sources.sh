#!/usr/bin/env bash
# Benchmark: the same images as TFRecord shards, WebDataset tar shards and an image folder, each
# through Sluice's TRAIN pipeline (RandomResizedCrop + flip to 224, batches of 256) on the same
# cores, one after another, --runs times in turn; the files are read once first so all three
# come from the page cache. Prints each source's best img/s and its ratio to TFRecord's.
#
#   tests/bench/sources.sh [--threads 2] [--batches 30] [--runs 2]
#
# The data: the benchmarks' 6,000 ImageNet-like JPEGs (tests/bench/bench_data.sh, TFRecord under
# /tmp/sluice-bench-data), written out once by tests/bench/export_sources.py as 16 tar shards
# (/tmp/sluice-bench-tar) and a folder per class (/tmp/sluice-bench-folder): the same JPEG bytes.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
sluice="$root/build/bin/sluice"
data=/tmp/sluice-bench-data
tars=/tmp/sluice-bench-tar
folder=/tmp/sluice-bench-folder
threads=2 batches=30 runs=2
# shellcheck source=tests/bench/bench_data.sh
source "$root/tests/bench/bench_data.sh"
parse_bench_args "$@"
make_bench_data "$data"
if [ ! -f "$tars/train-00015.tar" ]; then
  rm -rf "$folder"
  "$root/build/venv/bin/python" "$root/tests/bench/export_sources.py" \
    "$data/train-*-of-*.tfrecord" "$tars" "$folder"
fi
declare -A globs=(
  [tfrecord]="$data/train-*-of-*.tfrecord"
  [tar]="$tars/train-*.tar"
  [folder]="$folder/*/*.jpg"
)
kinds=(tfrecord tar folder)
# Into the page cache.
for k in "${kinds[@]}"; do
  # shellcheck disable=SC2086  # the glob expands here
  cat ${globs[$k]} >/dev/null
done
declare -A best all
for ((r = 0; r < runs; ++r)); do
  for k in "${kinds[@]}"; do
    ips=$(train_images_per_sec "$threads" "$batches" "${globs[$k]}")
    all[$k]="${all[$k]:-}${all[$k]:+ }$ips"
    if [ -z "${best[$k]:-}" ] || ((ips > best[$k])); then best[$k]=$ips; fi
  done
done
printf '%-9s %8s %12s  %s\n' source img/s vs-tfrecord "all runs"
for k in "${kinds[@]}"; do
  ratio=$(python3 -c "print('%.2f' % (${best[$k]} / ${best[tfrecord]}))")
  printf '%-9s %8s %12s  %s\n' "$k" "${best[$k]}" "$ratio" "${all[$k]}"
done
