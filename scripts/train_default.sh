#!/usr/bin/env bash
# Sets up, builds and runs the default training job: LeNet-5 on Fashion-MNIST.
# Arguments are passed to `kiln train` (e.g. --epochs 1, --mode graph, --json).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/scripts/build.sh"
exec "${KILN_BUILD_DIR:-$root/build}/src/kiln/kiln" train "$@"
