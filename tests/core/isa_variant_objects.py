#!/usr/bin/env python3
"""Checks the objects of Kiln's AVX-512 kernel variants (core/isa_variant.h) for code that a
baseline CPU could end up running. Every function such an object defines for the linker to share
(global or weak) must either belong to the variant's own namespace (isa_avx512) or hold no
AVX-512 instruction: an inline function or template instance compiled for AVX-512 under the name
the baseline files also use would let the linker keep that copy for all of them.

usage: isa_variant_objects.py [--expect N] OBJECT_OR_FOLDER...
Objects are the .o files under an isa_avx512/ folder, given or found below a folder given; with
--expect, fewer than N of them is an error (a build that stopped compiling the variants).
"""
import os
import re
import subprocess
import sys

# zmm registers, mask registers, and the upper 16 xmm/ymm registers exist only with AVX-512.
AVX512_OPERAND = re.compile(r"%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b|\{%k")


def shared_functions(obj):
    out = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True, check=True)
    names = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in ("T", "W"):
            names.add(parts[2])
    return names


def functions_with_avx512(obj):
    out = subprocess.run(["objdump", "-d", "--no-show-raw-insn", obj], capture_output=True,
                         text=True, check=True)
    found, current = set(), None
    for line in out.stdout.splitlines():
        label = re.match(r"^[0-9a-f]+ <(.+)>:$", line)
        if label:
            current = label.group(1)
        elif current and AVX512_OPERAND.search(line):
            found.add(current)
    return found


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True)
    return out.stdout.splitlines()


def variant_objects(paths):
    for path in paths:
        if os.path.isdir(path):
            for root, _, files in os.walk(path):
                for name in sorted(files):
                    if name.endswith(".o") and "/isa_avx512/" in os.path.join(root, name):
                        yield os.path.join(root, name)
        elif "/isa_avx512/" in path:
            yield path


def main(args):
    expect = 1
    if args[:1] == ["--expect"]:
        expect, args = int(args[1]), args[2:]
    checked, problems = 0, []
    for obj in variant_objects(args):
        checked += 1
        leaked = sorted(shared_functions(obj) & functions_with_avx512(obj))
        for mangled, name in zip(leaked, demangle(leaked)):
            if "isa_avx512" not in name:
                problems.append(f"{obj}: {name} ({mangled})")
    if checked < expect:
        print(f"isa_variant_objects: {checked} AVX-512 variant objects found, expected {expect}",
              file=sys.stderr)
        return 1
    if problems:
        print("AVX-512 code under a name the baseline shares (include its header before "
              "KILN_ISA_TARGET_BEGIN, or move it into the KILN_ISA namespace):", file=sys.stderr)
        for p in problems:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"isa_variant_objects: {checked} AVX-512 variant objects, no shared AVX-512 code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
