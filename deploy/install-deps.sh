#!/usr/bin/env bash
# Installs what Sluice needs to build, test and run its demo on Debian 12. Idempotent: packages
# already present are left alone, and apt-get update runs only when something is missing.
#   deploy/install-deps.sh            Debian packages + the Python test environments: build/venv
#                                     (TensorFlow) and build/venv-torch (Debian's PyTorch)
#   deploy/install-deps.sh --bench    also build/venv-bench with NVIDIA DALI (CPU pipelines; the
#                                     competitor loaders in tests/bench/, which use Debian's
#                                     torchvision and build/venv's TensorFlow too)
#   deploy/install-deps.sh --fuzz     also clang and its libFuzzer and sanitizer runtimes (the
#                                     campaigns of tests/fuzz/run.sh; not needed for the tests)
#   SLUICE_SKIP_PYTHON=1 deploy/...   Debian packages only
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

bench=0
fuzz=0
for arg in "$@"; do
  case "$arg" in
    --bench) bench=1 ;;
    --fuzz) fuzz=1 ;;
    *) echo "install-deps: unknown argument: $arg (known: --bench, --fuzz)" >&2; exit 2 ;;
  esac
done

packages=(
  # toolchain
  build-essential cmake ninja-build pkg-config ccache git
  # libraries (DESIGN.md: gRPC + Protobuf, oneTBB, libjpeg-turbo, Boost.Asio/Beast, zlib)
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libtbb-dev libturbojpeg0-dev libjpeg62-turbo-dev zlib1g-dev libboost-dev
  # the CUDA-kernel emulator's fibers (tests/trainer/simt_emulator.h)
  libboost-context-dev
  # PNG decode (formats/png_codec): Debian's libpng, the reference decoder
  libpng-dev
  # WebP decode (formats/webp_codec): Debian's libwebp, the reference decoder Pillow links
  libwebp-dev
  # header-only helpers: CLI parsing, JSON output, formatting; Catch2 v2 for tests
  libcli11-dev nlohmann-json3-dev libfmt-dev catch2
  # demo and benchmark photographs (12 nature photos)
  mate-backgrounds
  # serve tests: a self-signed certificate for TLS, HTTP requests to /metrics
  openssl curl
  # Python interop tests (TensorFlow in a venv under build/)
  python3 python3-venv python3-pip
  # the Python client's PyTorch tests: PyPI's x86-64 torch wheels are CUDA builds (~3.5 GB with
  # their nvidia-* dependencies), Debian's is CPU-only (a few hundred MB)
  python3-torch
  # the transforms' reference: tests compare every op with torchvision's functional ops (and
  # PNG/JPEG decodes with Pillow's)
  python3-torchvision python3-pil
)
if ((fuzz)); then
  packages+=(clang libclang-rt-14-dev)
fi

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}"
fi

if [ "${SLUICE_SKIP_PYTHON:-0}" != 1 ]; then
  # Debian's python3 (not whatever python3 is first on PATH) so the venv matches the system.
  venv="$root/build/venv"
  if [ ! -x "$venv/bin/python" ]; then
    mkdir -p "$root/build"
    /usr/bin/python3 -m venv "$venv"
  fi
  if ! "$venv/bin/python" -c 'import tensorflow, pytest, google.protobuf, grpc_tools' 2>/dev/null; then
    echo "install-deps: installing Python test packages into $venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r "$root/deploy/requirements-test.txt"
  fi
  # PyTorch tests of the Python client: Debian's torch (and its numpy) through the system
  # site-packages, the client's build and test packages in the venv.
  venv_torch="$root/build/venv-torch"
  if [ ! -x "$venv_torch/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv_torch"
  fi
  if ! "$venv_torch/bin/python" -c 'import torch, pytest, grpc_tools, webdataset' 2>/dev/null; then
    echo "install-deps: installing Python test packages into $venv_torch"
    "$venv_torch/bin/pip" install -q --disable-pip-version-check \
      -r "$root/deploy/requirements-test-torch.txt"
  fi
  # The DALI competitor loader (tests/bench/dali_loader.py): a venv of its own, as DALI's wheel
  # pins its own numpy and nvidia-* packages (~700 MB); its CPU pipelines need no GPU or CUDA.
  if ((bench)); then
    venv_bench="$root/build/venv-bench"
    if [ ! -x "$venv_bench/bin/python" ]; then
      /usr/bin/python3 -m venv "$venv_bench"
    fi
    if ! "$venv_bench/bin/python" -c 'import nvidia.dali' 2>/dev/null; then
      echo "install-deps: installing benchmark packages into $venv_bench"
      "$venv_bench/bin/pip" install -q --disable-pip-version-check \
        -r "$root/deploy/requirements-bench.txt"
    fi
  fi
  # The Python client's package test (tests/python/test_package.py) installs the wheel it builds
  # into a fresh venv with no network: the wheels of its runtime dependencies, at the versions
  # build/venv has, and theirs, kept in build/wheels.
  wheels="$root/build/wheels"
  pins=$("$venv/bin/python" -c 'import importlib.metadata as m
print(" ".join("%s==%s" % (p, m.version(p)) for p in ("grpcio", "protobuf", "numpy")))')
  if [ "$(cat "$wheels/pins.txt" 2>/dev/null)" != "$pins" ]; then
    echo "install-deps: saving wheels of $pins into $wheels"
    # shellcheck disable=SC2086  # one argument per pin
    "$venv/bin/pip" download -q --disable-pip-version-check --only-binary=:all: -d "$wheels" $pins
    echo "$pins" >"$wheels/pins.txt"
  fi
fi
echo "install-deps: ok"
