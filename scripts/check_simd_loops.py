#!/usr/bin/env python3
"""Fails when a loop under `#pragma omp ... simd` in the engine's kernels compiles scalar.

GCC may still leave such a loop scalar, and says so only when asked: a lambda's loop whose
captured references it cannot prove unaliased (sgd_update's, 37 us instead of 5 for 48,000
parameters) compiled that way without a warning. This recompiles the compute libraries' units
(ops, graph, optim, data) as the build tree compiles them, with -fopt-info-vec-all, into a
temporary folder, and lists every `omp simd` loop GCC reports it could not vectorize.
About 1.5 minutes on 2 cores; not part of CI.

  scripts/check_simd_loops.py [BUILD_DIR]   (default build/; a GCC build tree)
"""
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

LIBRARIES = ("kiln_ops", "kiln_graph", "kiln_optim", "kiln_data")
MISSED = re.compile(r"^(/[^:]+):(\d+):\d+: missed: couldn't vectorize loop")
# A loop may be compiled twice (a copy per path, an outlined OpenMP body): scalar only if no copy
# was vectorized.
VECTORIZED = re.compile(r"^(/[^:]+):(\d+):\d+: optimized: loop vectorized")


def units(build):
    path = os.path.join(build, "compile_commands.json")
    if not os.path.exists(path):
        sys.exit(f"check_simd_loops: {path} not found (configure the build tree first)")
    for entry in json.load(open(path)):
        source = entry["file"]
        if "cmake_pch" in source:
            continue
        if any(f"/{lib}.dir/" in source for lib in LIBRARIES) or re.search(
            r"/src/kiln/(ops|graph|optim|data)/", source
        ):
            yield entry


def compile_with_report(entry, out_dir, index):
    args = shlex.split(entry["command"])
    args[args.index("-o") + 1] = os.path.join(out_dir, f"{index}.o")
    report = os.path.join(out_dir, f"{index}.txt")
    args.insert(1, f"-fopt-info-vec-all={report}")
    done = subprocess.run(args, cwd=entry["directory"], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"check_simd_loops: compiling {entry['file']} failed:\n{done.stderr[-2000:]}")
    return report


def simd_macros(lines):
    """Names of the file's macros whose body holds an `omp simd` loop (`_Pragma("omp simd")`):
    GCC reports such a loop at the line that expands the macro."""
    names, i = set(), 0
    while i < len(lines):
        m = re.match(r"\s*#\s*define\s+(\w+)", lines[i])
        body = lines[i]
        while body.endswith("\\") and i + 1 < len(lines):
            i += 1
            body += lines[i]
        if m and "omp" in body and "simd" in body:
            names.add(m.group(1))
        i += 1
    return names


def simd_loop_at(lines, line):
    before = " ".join(lines[max(0, line - 3) : line - 1])
    if "omp" in before and "simd" in before:
        return True
    expanded = re.match(r"\s*(\w+)\s*\(", lines[line - 1])
    return bool(expanded) and expanded.group(1) in simd_macros(lines)


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else "build"
    entries = list(units(build))
    with tempfile.TemporaryDirectory() as out_dir:
        jobs = os.cpu_count() or 2
        with ThreadPoolExecutor(jobs) as pool:
            reports = list(
                pool.map(lambda ie: compile_with_report(ie[1], out_dir, ie[0]), enumerate(entries))
            )
        scalar, vectorized = set(), set()
        for report in reports:
            for text in open(report, errors="replace"):
                if m := MISSED.match(text):
                    scalar.add((m.group(1), int(m.group(2))))
                elif m := VECTORIZED.match(text):
                    vectorized.add((m.group(1), int(m.group(2))))
        scalar = {loc for loc in scalar - vectorized if "/src/kiln/" in loc[0]}
    found = []
    for source, line in sorted(scalar):
        lines = open(source, errors="replace").read().split("\n")
        if simd_loop_at(lines, line):
            found.append(f"{source}:{line}: {lines[line - 1].strip()}")
    print(f"check_simd_loops: {len(entries)} units compiled; {len(found)} `omp simd` loops scalar")
    for f in found:
        print("  " + f)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
