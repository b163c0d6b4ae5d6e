#!/usr/bin/env bash
# Kiln's data pipeline vs torch.utils.data.DataLoader, side by side in one run, each at its best
# worker count. Prints one line per run, then the ratios. See bench/data/README.md.
#
#   bench/data/compare_dataloader.sh [KILN_BINARY]
#
# Env: KILN_BENCH_DATA (default /tmp/kiln_bench_data) holds the generated image folders;
# EPOCHS (default 3) passes over the in-memory set; TORCH_WORKERS / KILN_WORKERS (lists);
# MEMORY_REPS (default 2) rounds of the in-memory case; SCALING_REPS (default 6) interleaved runs
# per worker count in the scaling case; CASES (default
# "memory png scaling") picks the cases to run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
kiln="${1:-$root/build/src/kiln/kiln}"
data="${KILN_BENCH_DATA:-/tmp/kiln_bench_data}"
epochs="${EPOCHS:-3}"
torch_workers="${TORCH_WORKERS:-0 1 2}"
kiln_workers="${KILN_WORKERS:-1 2}"
scaling_reps="${SCALING_REPS:-6}"
memory_reps="${MEMORY_REPS:-2}"
cases="${CASES:-memory png scaling}"
want() { [[ " $cases " == *" $1 "* ]]; }
py=/usr/bin/python3
[ -x "$kiln" ] || { echo "no kiln binary at $kiln (build it, or pass its path)" >&2; exit 1; }

png="$data/fmnist_png"
rgb="$data/fmnist_png256_rgb"
if [ ! -f "$png/.complete" ]; then
  echo "writing 60,000 PNG files to $png (once)..." >&2
  rm -rf "$png" && mkdir -p "$png"
  "$py" "$here/compare_dataloader.py" make-png "$png" && touch "$png/.complete"
fi
if [ ! -f "$rgb/.complete" ]; then
  echo "writing 1,000 256x256 RGB PNG files to $rgb (once)..." >&2
  rm -rf "$rgb" && mkdir -p "$rgb"
  "$py" "$here/compare_dataloader.py" make-rgb "$rgb" 1000 256 png && touch "$rgb/.complete"
fi
# Both sides read the files from the page cache.
find "$png" "$rgb" -type f -print0 | xargs -0 cat > /dev/null

results="$(mktemp)"
trap 'rm -f "$results"' EXIT
common=(--transforms rescale,hflip,hwc2chw --batch-size 64 --json)

kiln_run() {  # case, then kiln data bench arguments
  local case="$1"
  shift
  "$kiln" data bench "$@" | tail -n 1 |
    "$py" -c 'import json,sys; d=json.loads(sys.stdin.read()); d["side"]="kiln"; d["case"]=sys.argv[1]; d.pop("pipeline"); print(json.dumps(d))' "$case" |
    tee -a "$results"
}

if want memory; then
  echo "== 1. in-memory Fashion-MNIST (60k uint8 28x28): rescale, hflip, hwc2chw, batch 64 =="
  for rep in $(seq "$memory_reps"); do
    for w in $torch_workers; do "$py" "$here/compare_dataloader.py" memory "$w" "$epochs" | tee -a "$results"; done
    for w in $kiln_workers; do
      kiln_run memory --source fashion-mnist:train --workers "$w" --epochs "$epochs" "${common[@]}"
    done
  done
fi

if want png; then
  echo "== 2. 60,000 PNG files: decode + the same transforms =="
  for w in $torch_workers; do "$py" "$here/compare_dataloader.py" png "$png" "$w" 1 | tee -a "$results"; done
  for w in $kiln_workers; do
    kiln_run png --source "imagefolder:$png" --decode --source-workers 1 --workers "$w" --epochs 1 "${common[@]}"
  done
fi

if want scaling; then
  echo "== 3. scaling: decode-bound (1,000 PNG 256x256 RGB, decode + randomresizedcrop:112 + hflip) =="
  # Short runs, interleaved, best of each: on a shared machine the best run is the one that had the
  # cores to itself.
  for rep in $(seq "$scaling_reps"); do
    for w in 1 2; do
      kiln_run scaling --source "imagefolder:$rgb" --decode --source-workers 1 --workers "$w" \
        --epochs 1 --transforms randomresizedcrop:112,hflip --batch-size 32 --json
    done
  done
fi

echo "== ratios (best samples/s of each side) =="
"$py" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def best(side, case):
    c = [r for r in rows if r["side"] == side and r["case"] == case]
    return max(c, key=lambda r: r["samples_per_sec"]) if c else None
for case, target in (("memory", 3.0), ("png", 2.0)):
    k, t = best("kiln", case), best("torch", case)
    if k and t:
        ratio = k["samples_per_sec"] / t["samples_per_sec"]
        print(f"{case:8s} kiln {k['samples_per_sec']:>10,.0f}/s ({k['workers']} workers, peak RSS "
              f"{k['peak_rss_mb']:.0f} MiB)  torch {t['samples_per_sec']:>10,.0f}/s "
              f"({t['workers']} workers)  ratio {ratio:.2f}x  target >= {target}x  "
              f"{'OK' if ratio >= target else 'MISSED'}")
s = {}
for r in rows:
    if r["side"] == "kiln" and r["case"] == "scaling":
        if r["workers"] not in s or r["samples_per_sec"] > s[r["workers"]]["samples_per_sec"]:
            s[r["workers"]] = r
if 1 in s and 2 in s:
    ratio = s[2]["samples_per_sec"] / s[1]["samples_per_sec"]
    print(f"scaling  kiln 1 worker {s[1]['samples_per_sec']:,.0f}/s, 2 workers "
          f"{s[2]['samples_per_sec']:,.0f}/s  ratio {ratio:.2f}x  target >= 1.8x  "
          f"{'OK' if ratio >= 1.8 else 'MISSED'}")
PY
