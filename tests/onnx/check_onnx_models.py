"""Runs the ONNX checker (onnx.checker.check_model with full_check: shape inference too) on each
model given and prints one JSON line describing them, for Kiln's export tests:

  {"models": [{"path", "ok", "error", "opset", "inputs", "outputs", "nodes", "metadata"}]}

inputs/outputs: [{"name", "elem_type", "dims"}] with a symbolic dim as its name (a string);
nodes: [{"op_type", "doc"}] (doc: the Kiln op the node comes from). Uses Debian's python3-onnx.
"""
import json
import sys

import onnx


def value_infos(values):
    out = []
    for v in values:
        t = v.type.tensor_type
        dims = [d.dim_param if d.dim_param else d.dim_value for d in t.shape.dim]
        out.append({"name": v.name, "elem_type": t.elem_type, "dims": dims})
    return out


def describe(path):
    entry = {"path": path, "ok": False, "error": ""}
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model, full_check=True)
        entry["ok"] = True
    except Exception as e:  # the checker's message is what the test reports
        entry["error"] = f"{type(e).__name__}: {e}"
        return entry
    entry["opset"] = max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    entry["inputs"] = value_infos(model.graph.input)
    entry["outputs"] = value_infos(model.graph.output)
    entry["nodes"] = [{"op_type": n.op_type, "doc": n.doc_string} for n in model.graph.node]
    entry["metadata"] = {p.key: p.value for p in model.metadata_props}
    return entry


print(json.dumps({"models": [describe(p) for p in sys.argv[1:]]}))
