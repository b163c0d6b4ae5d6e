#!/usr/bin/env bash
# Side-by-side training throughput: Kiln vs PyTorch 1.13 (Debian's python3-torch) on the same
# model, batch, data (Fashion-MNIST in memory) and thread count, alternating runs so both see the
# same machine load. Prints images/s (median of --repeats runs) and the ratio Kiln / PyTorch.
#
#   bench/compare_torch.sh [--build DIR] [--repeats N] [--threads N] [--steps N]
#                          [--kiln-args "--mode graph --graph-kernel on"] [--amp O0|O2]
#                          [model:batch ...]       (default: lenet:64 resnet20:128 mlp:512)
#
# PyTorch runs in its best configuration on this machine, not its default one: tuned OpenBLAS and
# glibc malloc settings, OPENBLAS_NUM_THREADS=1 (OMP_WAIT_POLICY=passive for the MLP), and
# channels-last memory format for the conv nets (inside torch_train.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build="$here/../build"
repeats=3
threads=2
steps=""
kiln_args=""
amp="O0"
configs=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --kiln-args) kiln_args=$2; shift 2 ;;
    --amp) amp=$2; shift 2 ;;
    *) configs+=("$1"); shift ;;
  esac
done
[ ${#configs[@]} -gt 0 ] || configs=(lenet:64 resnet20:128 mlp:512)
kiln="$build/src/kiln/kiln"
[ -x "$kiln" ] || { echo "compare_torch: $kiln not found; build first (cmake --build build)" >&2; exit 1; }

default_steps() {
  case "$1" in lenet) echo 300 ;; resnet20) echo 30 ;; mlp) echo 100 ;; *) echo 50 ;; esac
}
# shellcheck source=bench/side_by_side.sh
source "$here/side_by_side.sh"

printf '%-10s %6s %14s %14s %8s %12s %12s\n' model batch kiln_img/s torch_img/s ratio kiln_rss_mb torch_rss_mb
for cfg in "${configs[@]}"; do
  model=${cfg%%:*}
  batch=${cfg##*:}
  n=${steps:-$(default_steps "$model")}
  torch_env=(GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824)
  # OpenBLAS's SkylakeX kernels are the peer's best on AVX-512 CPUs and die on the others.
  if grep -qw avx512f /proc/cpuinfo; then torch_env+=(OPENBLAS_CORETYPE=SkylakeX); fi
  if [ "$model" = mlp ]; then torch_env+=(OMP_WAIT_POLICY=passive); else torch_env+=(OPENBLAS_NUM_THREADS=1); fi
  torch_amp=O0
  amp_args=()
  if [ "$amp" != O0 ]; then torch_amp=bf16; amp_args=(--amp-level "$amp"); fi
  k_ips=(); t_ips=(); k_rss=(); t_rss=()
  for ((r = 0; r < repeats; r++)); do
    out=$("$kiln" train --model "$model" --batch-size "$batch" --steps "$((n + 10))" --threads "$threads" \
          "${amp_args[@]}" --json $kiln_args 2>/dev/null | tail -n 1)
    k_ips+=("$(echo "$out" | field images_per_sec)")
    k_rss+=("$(echo "$out" | field peak_rss_mb)")
    out=$(env "${torch_env[@]}" /usr/bin/python3 "$here/torch_train.py" --model "$model" \
          --batch-size "$batch" --steps "$n" --threads "$threads" --amp "$torch_amp" | tail -n 1)
    t_ips+=("$(echo "$out" | field images_per_sec)")
    t_rss+=("$(echo "$out" | field peak_rss_mb)")
  done
  k=$(printf '%s\n' "${k_ips[@]}" | median)
  t=$(printf '%s\n' "${t_ips[@]}" | median)
  kr=$(printf '%s\n' "${k_rss[@]}" | median)
  tr=$(printf '%s\n' "${t_rss[@]}" | median)
  printf '%-10s %6s %14.0f %14.0f %7.2fx %12.0f %12.0f\n' "$model" "$batch" "$k" "$t" \
    "$(python3 -c "print($k / $t)")" "$kr" "$tr"
done
