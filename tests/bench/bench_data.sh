# Shared by the benchmarks (source it, with $sluice set): their one data set.
#   make_bench_data DIR   6,000 ImageNet-like images (synth from real photos: $PHOTOS, default
#                         Debian's mate-backgrounds) in 16 shards, 12 classes; made once
make_bench_data() {
  if [ ! -f "$1/labels.txt" ]; then
    "$sluice" synth --photos "${PHOTOS:-/usr/share/backgrounds/mate/nature}" --classes 12 --images 6000 \
      --shards 16 --seed 1 --out "$1"
  fi
}
