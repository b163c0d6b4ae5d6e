#!/usr/bin/env python3
"""Checks that every #include between Kiln's folders follows the layering that
src/kiln/CMakeLists.txt declares.

The one source of truth is the list of `kiln_folder_library(<folder> DEPS ...)` calls: a folder
may include headers of the folders its library links (kiln_<name> in DEPS), transitively, and its
own. Linking already catches a .cpp that calls into a folder it may not use; this catches what
linking cannot: a header-only dependency (an inline function, a type, a template) and a
dependency through a header that nothing calls yet.

Two more rules:
  - a header under <folder>/detail/ is internal to <folder>: no other folder includes it;
  - every folder under src/kiln/ is declared in CMakeLists.txt (so it has a place in the layering).

Usage:
  check_layering.py [REPO_ROOT]     check the tree (default: the repository holding this script)
  check_layering.py --self-test     check that the checker catches breaks (a fixture tree)
Exits 1 and prints one line per break ("file:line: ...") when the layering is broken.
"""
import os
import re
import sys
import tempfile

LIBRARY_CALL = re.compile(r"kiln_folder_library\(\s*(\w+)([^)]*)\)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]kiln/([^/">]+)/([^">]+)[">]')
SOURCE_SUFFIXES = (".h", ".hpp", ".cpp", ".cc", ".inc")


def read_layering(cmake_path):
    """{folder: set of folders it links directly}, in declaration order."""
    with open(cmake_path, encoding="utf-8") as f:
        text = re.sub(r"#[^\n]*", "", f.read())
    direct = {}
    for name, args in LIBRARY_CALL.findall(text):
        tokens = args.split()
        deps = tokens[tokens.index("DEPS") + 1 :] if "DEPS" in tokens else []
        direct[name] = {d[len("kiln_") :] for d in deps if d.startswith("kiln_")}
    return direct


def closure(direct):
    """{folder: every folder it may use, itself included}."""
    allowed = {}

    def visit(folder, stack):
        if folder in allowed:
            return allowed[folder]
        if folder in stack:
            raise SystemExit("check_layering: dependency cycle: " + " -> ".join(stack + [folder]))
        result = {folder}
        for dep in direct.get(folder, ()):
            result |= visit(dep, stack + [folder])
        allowed[folder] = result
        return result

    for folder in direct:
        visit(folder, [])
    return allowed


def check(root):
    """Returns the list of breaks (strings) in the tree at `root`."""
    src = os.path.join(root, "src", "kiln")
    cmake_path = os.path.join(src, "CMakeLists.txt")
    direct = read_layering(cmake_path)
    if not direct:
        return [cmake_path + ": no kiln_folder_library(...) calls found"]
    breaks = []
    for name, deps in direct.items():
        for dep in sorted(deps - set(direct)):
            breaks.append(f"{cmake_path}: {name} links kiln_{dep}, which is not declared")
    allowed = closure(direct)
    for folder in sorted(os.listdir(src)):
        folder_path = os.path.join(src, folder)
        if not os.path.isdir(folder_path):
            continue
        if folder not in direct:
            breaks.append(f"src/kiln/{folder}/: folder has no kiln_folder_library({folder} ...) "
                          "in src/kiln/CMakeLists.txt")
            continue
        for dirpath, _, files in os.walk(folder_path):
            for file in sorted(files):
                if not file.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(dirpath, file)
                shown = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        target, rest = m.group(1), m.group(2)
                        header = f"kiln/{target}/{rest}"
                        if target not in direct:
                            breaks.append(f"{shown}:{number}: includes {header}: no folder "
                                          f"'{target}' is declared in src/kiln/CMakeLists.txt")
                        elif target not in allowed[folder]:
                            may = ", ".join(sorted(allowed[folder] - {folder})) or "nothing"
                            breaks.append(f"{shown}:{number}: includes {header}, but {folder} "
                                          f"may use only {may} (src/kiln/CMakeLists.txt)")
                        elif target != folder and (rest.startswith("detail/") or
                                                   "/detail/" in rest):
                            breaks.append(f"{shown}:{number}: includes {header}, which is "
                                          f"internal to {target}/")
    return breaks


def self_test():
    """The checker must pass a clean fixture and catch each kind of break."""
    cmake = ("# comment: kiln_folder_library(ghost DEPS kiln_graph)\n"
             "kiln_folder_library(core DEPS Threads::Threads)\n"
             "kiln_folder_library(ops DEPS kiln_core dnnl_cpu)\n"
             "kiln_folder_library(graph\n  DEPS kiln_ops)\n")
    clean = {
        "core/tensor.h": "#pragma once\n",
        "ops/op.h": '#include "kiln/core/tensor.h"\n#include "kiln/ops/detail/table.h"\n',
        "ops/detail/table.h": "#pragma once\n",
        "graph/ir.h": '#include "kiln/core/tensor.h"\n#include "kiln/ops/op.h"\n',
        "graph/ir.cpp": '#include "kiln/graph/ir.h"\n',
    }
    cases = {
        "header-only break upwards": {"ops/bad.h": '#include "kiln/graph/ir.h"\n'},
        "internal header of another folder": {"graph/bad.h": '#include "kiln/ops/detail/table.h"\n'},
        "undeclared folder": {"extra/x.h": "#pragma once\n"},
        "include of an undeclared folder": {"core/bad.cpp": '#include <kiln/nowhere/x.h>\n'},
    }

    def run(files):
        with tempfile.TemporaryDirectory() as root:
            src = os.path.join(root, "src", "kiln")
            os.makedirs(src)
            with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
                f.write(cmake)
            for rel, text in files.items():
                path = os.path.join(src, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w") as f:
                    f.write(text)
            return check(root)

    failures = []
    found = run(clean)
    if found:
        failures.append("clean fixture reported breaks: " + "; ".join(found))
    for name, extra in cases.items():
        found = run({**clean, **extra})
        if len(found) != 1:
            failures.append(f"{name}: expected one break, got {found}")
        else:
            print(f"caught ({name}): {found[0]}")
    return failures


def main(argv):
    if len(argv) > 1 and argv[1] == "--self-test":
        failures = self_test()
        for f in failures:
            print("check_layering self-test FAILED: " + f)
        return 1 if failures else 0
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    breaks = check(root)
    for b in breaks:
        print(b)
    if breaks:
        print(f"{len(breaks)} layering break(s); the allowed dependencies are the DEPS of "
              "kiln_folder_library(...) in src/kiln/CMakeLists.txt")
        return 1
    print("layering: every include between folders follows src/kiln/CMakeLists.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
