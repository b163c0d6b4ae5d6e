#!/usr/bin/env bash
# Installs the Debian packages Kiln needs. Idempotent: quiet and fast when everything is there.
#   scripts/setup.sh           building Kiln, its Python module and the default training job
#   scripts/setup.sh --tests   and the tests (GoogleTest, pytest, clang's sanitizers, Chromium)
#   scripts/setup.sh --bench   and the side-by-side benchmarks' peer (PyTorch with OpenBLAS)
set -euo pipefail

# What building Kiln, its Python module and the default training job need.
packages=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev libomp-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libprotobuf-dev protobuf-compiler python3-onnx  # ONNX export: onnx.proto, protoc, the checker
  libopenmpi-dev openmpi-bin
  dataset-fashion-mnist
  pybind11-dev python3-numpy  # the Python module kiln (python/)
  graphviz                    # the profiler report's graph (optional at run time)
)
for flag in "$@"; do
  case "$flag" in
    --tests)
      packages+=(
        libgtest-dev libgmock-dev
        clang libclang-rt-14-dev clang-format  # sanitizer builds and the fuzzers
        python3-pytest python3-pil             # the Python tests
        chromium  # headless, for the profiler report test (tests/profile/report_test.cpp)
      ) ;;
    --bench)
      packages+=(
        python3-torch python3-pil  # the peer of the side-by-side benchmarks
        libopenblas0-pthread       # PyTorch's BLAS in its best configuration here
      ) ;;
    *) echo "setup: unknown flag $flag (--tests, --bench)" >&2; exit 2 ;;
  esac
done

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "setup: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
