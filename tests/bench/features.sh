#!/bin/bash
# What reading features costs: the benchmarks' photos (16 TFRecord shards, /tmp/sluice-bench-data)
# through `sluice profile`, TRAIN at 224, without features and with four of their Examples'
# features declared (a LIST of the label, a SCALAR int64 height, a SCALAR bytes file name, a
# MULTI_HOT of the label) and boxes (none stored: every box list missing, so only the lookups
# run), taken in turn, best of --runs. Prints img/s of each and the ratio.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
sluice=$root/build/bin/sluice
data=/tmp/sluice-bench-data
threads=2 batches=30 runs=3
# shellcheck source=tests/bench/bench_data.sh
source "$root/tests/bench/bench_data.sh"
parse_bench_args "$@"
make_bench_data "$data"
cat "$data"/train-*-of-*.tfrecord >/dev/null
with=$(mktemp)
trap 'rm -f "$with"' EXIT
cat >"$with" <<'OPTIONS'
features { key: "image/class/label" name: "label_list" type: FEATURE_TYPE_INT64 }
features { key: "image/height" type: FEATURE_TYPE_INT64 shape: FEATURE_SHAPE_SCALAR }
features { key: "image/filename" type: FEATURE_TYPE_BYTES shape: FEATURE_SHAPE_SCALAR }
features { key: "image/class/label" name: "tags" type: FEATURE_TYPE_INT64
           shape: FEATURE_SHAPE_MULTI_HOT length: 1000 }
boxes { enabled: true }
OPTIONS
declare -A best all
for ((r = 0; r < runs; ++r)); do
  for k in plain features; do
    extra=()
    [ "$k" = features ] && extra=(--options "$with")
    ips=$(train_images_per_sec "$threads" "$batches" "$data/train-*-of-*.tfrecord" "${extra[@]}")
    all[$k]="${all[$k]:-}${all[$k]:+ }$ips"
    if [ -z "${best[$k]:-}" ] || ((ips > best[$k])); then best[$k]=$ips; fi
  done
done
printf '%-9s %8s %9s  %s\n' pipeline img/s vs-plain "all runs"
for k in plain features; do
  ratio=$(python3 -c "print('%.2f' % (${best[$k]} / ${best[plain]}))")
  printf '%-9s %8s %9s  %s\n' "$k" "${best[$k]}" "$ratio" "${all[$k]}"
done
