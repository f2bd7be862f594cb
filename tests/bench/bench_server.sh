# Shared by the serve benchmarks (source it): the benchmark data set (bench_data.sh) and a
# `sluice serve` over it.
#   make_bench_data DIR          6,000 ImageNet-like images in 16 shards (once)
#   start_bench_server DIR WORK [LISTEN...]
#                                serves datasets "train" (uncached) and "cached" (DECODED cache,
#                                3 GiB) on 127.0.0.1:<any> plus LISTEN...; sets $server (its pid)
#                                and $tcp (its TCP address)
. "$(dirname "${BASH_SOURCE[0]}")/bench_data.sh"

start_bench_server() {
  local data=$1 work=$2
  shift 2
  {
    echo 'listen: "127.0.0.1:0"'
    for l in "$@"; do echo "listen: \"$l\""; done
    cat <<CONF
threads: 2
datasets {
  name: "train"
  pipeline { files: "$data/train-*.tfrecord" batch_size: 256 shuffle { buffer_size: 1024 } }
}
datasets {
  name: "cached"
  pipeline {
    files: "$data/train-*.tfrecord" batch_size: 256 shuffle { buffer_size: 1024 }
    cache { mode: CACHE_DECODED budget_bytes: 3221225472 } memory_budget_bytes: 4294967296
  }
}
CONF
  } > "$work/sluice.textproto"
  "$sluice" serve --config "$work/sluice.textproto" > "$work/serve.log" &
  server=$!
  for _ in $(seq 100); do
    grep -q "listening on 127" "$work/serve.log" 2>/dev/null && break
    sleep 0.1
  done
  tcp=$(grep -m1 -o 'listening on 127[^ ]*' "$work/serve.log" | cut -d' ' -f3)
}
