#!/usr/bin/env bash
# `kiln train --parallel-mode auto` on 2 ranks (every op split as AUTO_PARALLEL's search plans it,
# the whole batch on every rank) trains as one process does with the same batch: the same loss
# curve and test accuracy, with op times measured (the default) or estimated; its JSON says how
# it ran; without --mode graph it is a clear error.
set -euo pipefail
kiln=$1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
train=(train --model mlp --mode graph --epochs 1 --steps 30 --batch-size 32 --print-every 10
       --seed 3 --threads 1 --json)
"$kiln" "${train[@]}" >"$work/one.log" 2>&1
"$kiln" launch -n 2 --threads-per-rank 1 -- "${train[@]}" --parallel-mode auto \
  >"$work/auto.log" 2>&1
"$kiln" launch -n 2 --threads-per-rank 1 -- "${train[@]}" --parallel-mode auto \
  --search-mode recursive_programming --op-times estimated >"$work/greedy.log" 2>&1
python3 - "$work/one.log" "$work/auto.log" "$work/greedy.log" <<'PY'
import json, re, sys
def run(path):
    text = open(path).read()
    losses = {int(m.group(1)): float(m.group(2))
              for m in re.finditer(r"step: (\d+), loss is ([0-9.eE+-]+)", text)}
    summary = json.loads(text.strip().splitlines()[-1])
    return text, losses, summary
_, one, one_json = run(sys.argv[1])
failed = []
for path, op_times in zip(sys.argv[2:], ("measured", "estimated")):
    text, losses, summary = run(path)
    if summary.get("op_times") != op_times:
        failed.append(f"{path}: op_times is {summary.get('op_times')}, not {op_times}")
    if ("forward and backward timed" in text) != (op_times == "measured"):
        failed.append(f"{path}: the plan's cost model does not say the op times were {op_times}")
    if sorted(losses) != [10, 20, 30]:
        failed.append(f"{path}: loss lines {sorted(losses)}")
    bad = [(s, one[s], losses.get(s)) for s in sorted(one)
           if losses.get(s) is None or abs(losses[s] - one[s]) > 1e-4 * max(1.0, abs(one[s]))]
    if bad:
        failed.append(f"{path}: loss curve differs from one process (step, one, auto): {bad}")
    if abs(summary["test_accuracy"] - one_json["test_accuracy"]) > 0.002:
        failed.append(f"{path}: test accuracy {summary['test_accuracy']} vs "
                      f"{one_json['test_accuracy']}")
    for key, want in (("parallel_mode", "auto_parallel"), ("ranks", 2), ("global_batch_size", 32)):
        if summary.get(key) != want:
            failed.append(f"{path}: {key} is {summary.get(key)}, not {want}")
    if "AUTO_PARALLEL plan for 2 devices" not in text:
        failed.append(f"{path}: no plan printed")
if failed:
    sys.exit("\n".join(failed))
print("auto train: 2 runs passed, 0 failed")
PY
if "$kiln" train --model mlp --mode eager --steps 2 --parallel-mode auto >"$work/eager.log" 2>&1; then
  echo "auto parallel in eager mode was accepted" >&2
  exit 1
fi
grep -q "add --mode graph" "$work/eager.log" || { cat "$work/eager.log" >&2; exit 1; }
