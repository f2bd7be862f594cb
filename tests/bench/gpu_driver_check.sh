# Sourced by tests/bench/trainer_gpu.sh. check_gpu_driver OUT_DIR: records the GPU and its driver
# (nvidia-smi) in OUT_DIR/nvidia-smi.txt and OUT_DIR/driver.txt, and says plainly when the driver
# is too old for the CUDA 13 runtime our binaries link statically — every gpu test would then
# skip (a failure under SLUICE_REQUIRE_GPU=1) and --device auto would train on the CPU — and
# whether the toolkit's forward-compatibility package would help. Always returns 0: the gpu
# tests that follow fail on their own.
#
# CUDA 13.x needs an r580 driver or newer on Linux (CUDA_MIN_DRIVER overrides). Forward
# compatibility (the cuda-compat-13-* package: a newer libcuda.so under /usr/local/cuda/compat,
# put first on LD_LIBRARY_PATH) lets an older kernel driver run the newer runtime, but only on
# data-center GPUs (and some professional ones), not on GeForce or most workstation cards.
check_gpu_driver() {
  local out=$1 min=${CUDA_MIN_DRIVER:-580} query name driver major compat model
  nvidia-smi > "$out/nvidia-smi.txt" 2>&1 || echo "nvidia-smi failed (no NVIDIA driver?)" >&2
  query=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
  if [ -z "$query" ]; then
    echo "driver: unknown (nvidia-smi gave no GPU): the gpu tests will fail" | tee "$out/driver.txt"
    return 0
  fi
  name=${query%%,*}
  driver=$(echo "${query#*,}" | tr -d ' ')
  major=${driver%%.*}
  echo "GPU: $name; driver $driver (CUDA 13 needs $min or newer)" | tee "$out/driver.txt"
  [ "$major" -ge "$min" ] 2>/dev/null && return 0
  compat=$(ls /usr/local/cuda/compat/libcuda.so.* 2>/dev/null | head -1)
  {
    echo "DRIVER TOO OLD: driver $driver is older than the CUDA 13 runtime needs ($min): every"
    echo "  gpu test will fail under SLUICE_REQUIRE_GPU=1 and --device auto would use the CPU."
    # The model is the name's first word after "NVIDIA " or "Tesla ", up to a dash ("NVIDIA
    # A100-SXM4-80GB", "NVIDIA H100 80GB HBM3", "Tesla T4"), matched whole: substrings would
    # take workstation cards ("NVIDIA RTX A1000", "NVIDIA RTX A4000") for A100, A10 or A40.
    model=${name#NVIDIA }
    model=${model#Tesla }
    model=${model%% *}
    model=${model%%-*}
    case "$model" in
      H100 | H200 | H20 | H800 | GH200 | A100 | A800 | A30 | A40 | A10 | A10G | A16 | A2 | L40 | \
        L40S | L4 | L20 | B100 | B200 | GB200 | V100 | T4)
        echo "  $name is a data-center GPU: the toolkit's forward-compatibility package would help"
        if [ -n "$compat" ]; then
          echo "  ($compat is installed: rerun with"
          echo "  LD_LIBRARY_PATH=/usr/local/cuda/compat:\$LD_LIBRARY_PATH)."
        else
          echo "  (cuda-compat-13-*, not installed here), or a driver of r$min or newer."
        fi
        ;;
      *)
        echo "  $name is not a data-center GPU: forward compatibility does not apply; only a"
        echo "  driver of r$min or newer will do."
        ;;
    esac
  } | tee -a "$out/driver.txt"
  return 0
}
