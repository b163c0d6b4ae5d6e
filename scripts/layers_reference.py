#!/usr/bin/env python3
"""Writes docs/layers.md, the reference of Kiln's layers, losses, optimizers and training
wrappers, from what defines them: the Python module's classes with the signatures its bindings
declare (MindSpore's argument names and defaults), and, for each, the C++ class's comment,
public constructors and options struct as its header declares them (src/kiln/nn, src/kiln/optim).
Nothing in the reference is written by hand, so it cannot drift from the code.

    PYTHONPATH=build/python scripts/layers_reference.py > docs/layers.md
    PYTHONPATH=build/python scripts/layers_reference.py --check docs/layers.md   # a test
"""
import argparse
import difflib
import inspect
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
HEADERS = sorted((ROOT / "src/kiln/nn").glob("*.h")) + sorted((ROOT / "src/kiln/optim").glob("*.h"))

# The sections, by the base class a Python class derives from.
SECTIONS = [
    ("Layers", "Cell", "`kiln.nn.Cell` subclasses: call them on tensors, or hold them in a network "
     "of your own (a Python `nn.Cell` subclass, or a C++ `kiln::nn::Cell`)."),
    ("Losses", "LossBase", "`loss(logits, labels)`; `Model(net, loss_fn=...)` takes any of them."),
    ("Optimizers", "Optimizer", "`learning_rate` is a number, a list of per-step rates or a "
     "schedule (`kiln.nn.cosine_decay_lr`, ...); in C++ a plain `double` or an `optim::LearningRate`."),
]
PYTHON_ONLY = {"WithLossCell", "TrainOneStepCell"}
# Python classes whose C++ class has another name (MindSpore's name in Python, the common one in C++).
CPP_NAMES = {"AdamWeightDecay": "AdamW"}


def header_text():
    return {h: h.read_text() for h in HEADERS}


def class_block(texts, name):
    """(header, comment above the class, class body) of C++ class `name`, or None."""
    for header, text in texts.items():
        m = re.search(rf"^((?://[^\n]*\n)*)class {name}\b[^;{{]*\{{", text, re.M)
        if not m:
            continue
        depth, i = 1, m.end()
        while depth and i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        comment = " ".join(line.strip()[2:].strip() for line in m.group(1).splitlines())
        return header, comment, text[m.end():i - 1]
    return None


def public_constructors(name, body):
    """The public constructor declarations of a class body, one line each, bodies left out."""
    out, access = [], "private"
    lines = body.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        if re.match(r"(public|protected|private):", line):
            access = line[:-1]
        elif access == "public" and re.match(rf"(explicit\s+)?{name}\(", line):
            decl = line
            while decl.count("(") > decl.count(")") and i + 1 < len(lines):
                i += 1
                decl += " " + lines[i].strip()
            decl = re.sub(r"\)\s*(:.*|\{.*|;.*|=\s*default.*)?$", ")", decl)
            decl = re.sub(r"^explicit\s+", "", decl)
            if "const " + name + "&" not in decl and name + "&&" not in decl:
                out.append(re.sub(r"\s+", " ", decl))
        i += 1
    return out


def options_fields(texts, struct):
    """`name = default` (or `name`) of each field of the options struct `struct`."""
    for text in texts.values():
        m = re.search(rf"^struct {struct} \{{(.*?)^\}};", text, re.M | re.S)
        if not m:
            continue
        fields = []
        for line in m.group(1).splitlines():
            line = line.split("//")[0].strip()
            f = re.match(r"[\w:<>, ]+?\s+(\w+)(?:\s*=\s*(.+?)|(\{.*\}))?;$", line)
            if f:
                default = f.group(2) or f.group(3)
                fields.append(f.group(1) + (" = " + default if default else ""))
        return fields
    return []


def python_signature(cls, name):
    """`name(arguments)`: `name` as kiln.nn exports it (an alias keeps its own name)."""
    doc = (cls.__init__.__doc__ or "").strip().splitlines()
    first = doc[0] if doc else ""
    m = re.match(r"__init__\(self(?:: [\w.]+)?(?:, )?(.*)\) -> None$", first)
    if m:
        args = re.sub(r": (?:object|int|float|str|bool|Iterable|List\[int\]|Optional\[\w+\])", "",
                      m.group(1))
        return f"{name}({args.replace(' = ', '=')})"
    if cls.__init__ is not object.__init__ and not first.startswith("__init__"):
        try:
            params = list(inspect.signature(cls.__init__).parameters.values())[1:]
            return f"{name}({', '.join(str(p) for p in params)})"
        except (TypeError, ValueError):
            pass
    return first or f"{name}(...)"


def cpp_entry(texts, name):
    block = class_block(texts, name)
    if block is None:
        return None
    header, comment, body = block
    constructors = public_constructors(name, body)
    option_structs = sorted(set(re.findall(r"\b(\w+Options)\b", " ".join(constructors))))
    fields = {s: options_fields(texts, s) for s in option_structs}
    return header.relative_to(ROOT / "src"), comment, constructors, fields


def reference():
    import kiln
    from kiln import nn

    texts = header_text()
    classes = {name: getattr(nn, name) for name in dir(nn) if isinstance(getattr(nn, name), type)}
    lines = [
        "# Kiln's layers, losses and optimizers",
        "",
        "Generated by `scripts/layers_reference.py` from the Python module's classes (their",
        "signatures as the bindings declare them, with MindSpore's argument names and defaults) and",
        "the C++ headers (each class's comment, public constructors and options struct); a test",
        "fails when this file and the code differ. The ops these layers call are in",
        "[`ops.md`](ops.md).",
        "",
    ]
    for title, base, intro in SECTIONS:
        base_cls = getattr(kiln._kiln.nn, base)
        members = sorted(n for n, c in classes.items()
                         if issubclass(c, base_cls) and c is not base_cls and n not in PYTHON_ONLY)
        lines += [f"## {title}", "", intro, ""]
        for name in members:
            cls = classes[name]
            alias = f" (an alias of `{cls.__name__}`)" if cls.__name__ != name else ""
            cpp_name = CPP_NAMES.get(cls.__name__, cls.__name__)
            lines += [f"### `{name}`{alias}", ""]
            entry = cpp_entry(texts, cpp_name)
            if entry and entry[1]:
                lines += [entry[1], ""]
            lines.append(f"- Python: `kiln.nn.{python_signature(cls, name)}`")
            if entry:
                header, _, constructors, fields = entry
                namespace = "optim" if str(header).startswith("kiln/optim") else "nn"
                for decl in constructors:
                    lines.append(f"- C++ (`{header}`): `kiln::{namespace}::{decl}`")
                for struct, names in fields.items():
                    if names:
                        lines.append(f"  - `{struct}`: " + ", ".join(f"`{n}`" for n in names))
            lines.append("")
    lines += ["## Training wrappers (Python)", ""]
    for name in sorted(PYTHON_ONLY & set(classes)):
        cls = classes[name]
        doc = inspect.getdoc(cls) or ""
        lines += [f"### `{name}`", "", doc.split("\n\n")[0].replace("\n", " "), "",
                  f"- Python: `kiln.nn.{python_signature(cls, name)}`", ""]
    return "\n".join(lines).rstrip() + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", metavar="FILE", help="fail when FILE differs from the reference")
    args = parser.parse_args()
    text = reference()
    if not args.check:
        sys.stdout.write(text)
        return 0
    have = pathlib.Path(args.check).read_text()
    if have == text:
        return 0
    sys.stdout.writelines(difflib.unified_diff(have.splitlines(True), text.splitlines(True),
                                               args.check, "generated"))
    print(f"{args.check} differs from the code; regenerate it with "
          "PYTHONPATH=build/python scripts/layers_reference.py > docs/layers.md", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
