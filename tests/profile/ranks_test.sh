#!/usr/bin/env bash
# A profiled data-parallel job under mpirun writes one profile per rank (DIR/rank0, DIR/rank1):
# each trace parses, names its rank as the process, holds that rank's steps and launches, and
# `kiln report DIR` rebuilds every rank's report.
set -euo pipefail
kiln=$1
mpirun=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$mpirun" -np 2 --oversubscribe --bind-to none "$kiln" train --parallel-mode data --model mlp \
  --epochs 1 --steps 6 --batch-size 32 --print-every 0 --profile "$work/prof" \
  >"$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
"$kiln" report "$work/prof" >"$work/report.log" 2>&1 || { cat "$work/report.log"; exit 1; }
python3 - "$work/prof" "$work/report.log" <<'PY'
import json, os, sys
prof, report_log = sys.argv[1], sys.argv[2]
for rank in (0, 1):
    folder = os.path.join(prof, f"rank{rank}")
    trace = json.load(open(os.path.join(folder, "trace.json")))
    profile = json.load(open(os.path.join(folder, "profile.json")))
    events = trace["traceEvents"]
    assert profile["rank"] == rank and profile["ranks"] == 2, (folder, profile["rank"])
    names = [e for e in events if e.get("ph") == "M" and e.get("name") == "process_name"]
    assert names and names[0]["pid"] == rank, names
    assert names[0]["args"]["name"] == f"kiln rank {rank}", names
    assert all(e["pid"] == rank for e in events), "every event in the rank's process"
    steps = [e for e in events if e.get("cat") == "step"]
    launches = [e for e in events if e.get("cat") in ("op", "launch")]
    assert len(steps) == 6, (folder, len(steps))
    assert launches, folder
    assert os.path.exists(os.path.join(folder, "report.html")), folder
printed = [line.strip() for line in open(report_log) if line.strip().endswith("report.html")]
assert printed == [os.path.join(prof, "rank0", "report.html"),
                   os.path.join(prof, "rank1", "report.html")], printed
print("profile ranks: 1 passed, 0 failed")
PY
