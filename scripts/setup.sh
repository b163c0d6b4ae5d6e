#!/usr/bin/env bash
# Installs every Debian package Kiln needs to build, test and benchmark. Idempotent: quiet and fast
# when everything is already there.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libdnnl-dev libomp-dev
  nlohmann-json3-dev libcli11-dev libyaml-cpp-dev
  libjpeg62-turbo-dev libpng-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev clang-format
  dataset-fashion-mnist
  python3-torch python3-numpy python3-pil
  pybind11-dev python3-pytest  # the Python module kiln (python/) and its tests
  libopenblas0-pthread  # PyTorch's BLAS for the side-by-side benchmarks (the peer's best configuration)
  graphviz
  chromium  # headless, for the profiler report test (tests/profile/report_test.cpp)
)

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
