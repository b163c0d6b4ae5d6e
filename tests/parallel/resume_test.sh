#!/usr/bin/env bash
# A 2-rank data-parallel run stopped after 30 steps and resumed from its checkpoint continues the
# loss curve of the run that never stopped (rank 0 writes the checkpoint, every rank loads it
# and the ranks check they agree on it).
set -euo pipefail
kiln=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train=(train --parallel-mode data --model mlp --epochs 2 --batch-size 16 --print-every 10 --seed 3)
"$kiln" launch -n 2 -- "${train[@]}" --steps 60 >"$work/whole.log" 2>&1
"$kiln" launch -n 2 -- "${train[@]}" --steps 30 --ckpt-dir "$work/ckpt" >"$work/first.log" 2>&1
ckpt=$(ls "$work"/ckpt/*.safetensors | head -1)
"$kiln" launch -n 2 -- "${train[@]}" --steps 30 --resume "$ckpt" >"$work/second.log" 2>&1
python3 - "$work/whole.log" "$work/first.log" "$work/second.log" <<'PY'
import re, sys
def losses(path):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"step: (\d+), loss is ([0-9.eE+-]+)", open(path).read())}
whole, first, second = (losses(p) for p in sys.argv[1:])
resumed = {**first, **second}
steps = sorted(whole)
assert steps == [10, 20, 30, 40, 50, 60], steps
bad = [(s, whole[s], resumed.get(s)) for s in steps
       if resumed.get(s) is None or abs(resumed[s] - whole[s]) > 1e-5 * max(1.0, abs(whole[s]))]
if bad:
    sys.exit(f"resumed loss curve differs (step, whole run, resumed): {bad}")
print("resume: 1 passed, 0 failed")
PY
