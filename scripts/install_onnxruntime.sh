#!/usr/bin/env bash
# Installs onnxruntime-node (npm) into the build tree's onnxruntime/ for the tests that run Kiln's
# ONNX exports in an ONNX runtime (tests/onnx/run_onnx_models.js finds it there); the tests
# skip that check where it is absent. npm's cache stays in the build tree too. Quiet, and
# nothing to do when the pinned version is already there.
# Usage: scripts/install_onnxruntime.sh [BUILD_DIR]   (default: build/ or $KILN_BUILD_DIR)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${KILN_BUILD_DIR:-$root/build}}
version=1.30.0
prefix=$build/onnxruntime
installed=$prefix/node_modules/onnxruntime-node/package.json
if [ -f "$installed" ] && grep -q "\"version\": \"$version\"" "$installed"; then
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install_onnxruntime: npm not found; the tests' ONNX runtime check will skip" >&2
  exit 0
fi
mkdir -p "$prefix"
# --ignore-scripts: the package's install script only fetches the optional CUDA provider from
# outside the npm registry; the CPU runtime the tests use ships in the package itself.
npm install --prefix "$prefix" --cache "$build/npm-cache" --no-save --no-package-lock \
  --ignore-scripts --no-audit --no-fund --loglevel=error "onnxruntime-node@$version" >/dev/null
