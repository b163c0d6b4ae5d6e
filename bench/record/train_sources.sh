#!/usr/bin/env bash
# Training speed by data source, side by side: `kiln train` on Fashion-MNIST's 60,000 training
# images read four ways, alternating within each round so every source sees the same machine load:
#   memory     fashion-mnist (the IDX files decoded once into memory: the in-memory data set)
#   folder     imagefolder:DIR (60,000 PNG files, decoded every epoch by the map workers)
#   records    record:DIR/png* (the folder converted: the same PNG bytes in 4 record shards)
#   raw        record:DIR/raw* (the IDX files converted: raw uint8 pixels, no decode)
# Prints each source's images/s (median of the rounds) and its ratio to the folder and to memory.
#   BUILD_DIR=build bench/record/train_sources.sh [--model lenet] [--steps 600] [--rounds 3]
#     [--work DIR] [--mode graph|eager]
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln=${BUILD_DIR:-$root/build}/src/kiln/kiln
model=lenet steps=600 rounds=3 mode=graph work=${TMPDIR:-/tmp}/kiln-train-sources
while [ $# -gt 0 ]; do
  case $1 in
    --model) model=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    *) echo "train_sources.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[ -x "$kiln" ] || { echo "train_sources.sh: no kiln binary at $kiln (set BUILD_DIR)" >&2; exit 2; }
fmnist=/usr/share/datasets/fashion-mnist
[ -f "$fmnist/train-images-idx3-ubyte.gz" ] ||
  { echo "train_sources.sh: needs Debian's dataset-fashion-mnist in $fmnist" >&2; exit 2; }

# The folder: DIR/<label>/<index>.png, written once (PIL from Debian's python3-pil).
mkdir -p "$work"
if [ ! -f "$work/folder.done" ]; then
  rm -rf "$work/folder"
  /usr/bin/python3 - "$fmnist" "$work/folder" <<'EOF'
import gzip, os, sys
import numpy as np
from PIL import Image
src, out = sys.argv[1], sys.argv[2]
with gzip.open(os.path.join(src, "train-images-idx3-ubyte.gz")) as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
with gzip.open(os.path.join(src, "train-labels-idx1-ubyte.gz")) as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)
for c in range(10):
    os.makedirs(os.path.join(out, str(c)), exist_ok=True)
for i, (image, label) in enumerate(zip(images, labels)):
    Image.fromarray(image, mode="L").save(os.path.join(out, str(label), f"{i:05d}.png"))
EOF
  touch "$work/folder.done"
fi
if [ ! -f "$work/records.done" ]; then
  "$kiln" convert imagefolder "$work/folder" "$work/png" --shards 4 --overwrite >/dev/null
  "$kiln" convert idx "$fmnist/train-images-idx3-ubyte.gz" "$fmnist/train-labels-idx1-ubyte.gz" \
    "$work/raw" --shards 4 --overwrite >/dev/null
  touch "$work/records.done"
fi

names=(memory folder records raw)
specs=(fashion-mnist "imagefolder:$work/folder" "record:$work/png*" "record:$work/raw*")
declare -A rates
for ((r = 1; r <= rounds; r++)); do
  for ((k = 0; k < ${#names[@]}; k++)); do
    # Each round starts from another source, so none always runs first.
    i=$(((k + r) % ${#names[@]}))
    json=$("$kiln" train --model "$model" --mode "$mode" --data "${specs[$i]}" \
      --val fashion-mnist --steps "$steps" --json --compile-log off 2>/dev/null | tail -1)
    rate=$(/usr/bin/python3 -c 'import json,sys; print(round(json.loads(sys.argv[1])["images_per_sec"]))' "$json")
    rates[${names[$i]}]+="$rate "
    printf 'round %d %-8s %10.0f images/s\n' "$r" "${names[$i]}" "$rate"
  done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
echo
echo "kiln train --model $model --mode $mode --steps $steps, median of $rounds rounds:"
folder=$(echo "${rates[folder]}" | median)
memory=$(echo "${rates[memory]}" | median)
for name in "${names[@]}"; do
  m=$(echo "${rates[$name]}" | median)
  printf '%-8s %10.0f images/s  %5.2fx the folder  %5.2fx memory  (rounds: %s)\n' "$name" "$m" \
    "$(echo "$m / $folder" | bc -l)" "$(echo "$m / $memory" | bc -l)" "${rates[$name]% }"
done
