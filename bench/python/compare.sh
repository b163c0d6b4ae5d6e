#!/usr/bin/env bash
# The Python module's speed: a Python-defined LeNet against the engine's C++ LeNet (graph mode,
# same harness), the Python LeNet in eager mode against PyTorch 1.13 eager (bench/torch_train.py,
# tuned as bench/compare_torch.sh runs it, but with OpenBLAS choosing its own kernels: a forced
# SkylakeX core type dies on CPUs without AVX-512), and the binding's cost per op.
# Runs alternate so both sides see the same machine load; medians of --repeats runs.
#
#   bench/python/compare.sh [--build DIR] [--repeats N] [--steps N] [--batch-size N] [--threads N]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../../build"
repeats=3
steps=300
batch=64
threads=2
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --batch-size) batch=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) echo "compare.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
export PYTHONPATH="$build/python"
py=/usr/bin/python3
# shellcheck source=bench/side_by_side.sh
source "$here/../side_by_side.sh"
kiln_run() {
  timeout 600 $py "$here/lenet_bench.py" --steps "$steps" --batch-size "$batch" --threads "$threads" "$@" \
    2>/dev/null | field images_per_sec
}
torch_run() {
  env OPENBLAS_NUM_THREADS=1 \
    GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824 \
    timeout 600 $py "$here/../torch_train.py" --model lenet --batch-size "$batch" --steps "$steps" \
    --threads "$threads" | field images_per_sec
}
py_graph=(); cpp_graph=(); py_eager=(); torch_eager=()
for ((r = 0; r < repeats; r++)); do
  py_graph+=("$(kiln_run --net python --mode graph)")
  cpp_graph+=("$(kiln_run --net cpp --mode graph)")
  py_eager+=("$(kiln_run --net python --mode eager)")
  torch_eager+=("$(torch_run)")
done
pg=$(printf '%s\n' "${py_graph[@]}" | median)
cg=$(printf '%s\n' "${cpp_graph[@]}" | median)
pe=$(printf '%s\n' "${py_eager[@]}" | median)
te=$(printf '%s\n' "${torch_eager[@]}" | median)
printf 'LeNet b%s, %s threads, images/s (median of %s)\n' "$batch" "$threads" "$repeats"
printf '  graph: Python-defined %8.0f   C++ LeNet      %8.0f   ratio %.2fx (target >= 0.95x)\n' \
  "$pg" "$cg" "$($py -c "print($pg / $cg)")"
printf '  eager: Python-defined %8.0f   PyTorch eager  %8.0f   ratio %.2fx (target >= 1.5x)\n' \
  "$pe" "$te" "$($py -c "print($pe / $te)")"
printf '  binding cost per op: %s\n' "$($py "$here/binding_overhead.py")"
