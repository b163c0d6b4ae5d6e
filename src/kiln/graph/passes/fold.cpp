// Constant folding: a pure node whose inputs are all constants runs once, at compile time.
// Constants come from the trace (autodiff's seed and zero fills, tensors a rule built from
// scratch); state (parameters, lr) is never a constant, so nothing that changes is baked in.
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/dispatch.h"

namespace kiln::graph::passes {
namespace {
// Larger results stay computed per step: a folded constant costs memory for the whole run.
constexpr int64_t kMaxFoldedBytes = 1 << 20;
}  // namespace

int fold_constants(Graph& graph) {
  int folded = 0;
  for (NodeId n : graph.schedule()) {
    Node& node = graph.node(n);
    if (node.type != NodeType::op || !is_pure(node) || node.outputs.empty()) continue;
    bool all_constant = true;
    std::vector<Tensor> inputs;
    for (ValueId v : node.inputs) {
      if (v == kNoValue || graph.value(v).kind != ValueKind::constant) {
        all_constant = false;
        break;
      }
      inputs.push_back(graph.value(v).tensor);
    }
    if (!all_constant) continue;
    int64_t bytes = 0;
    for (ValueId v : node.outputs) {
      const ops::TensorMeta& m = graph.value(v).meta;
      bytes += m.shape.numel() * int64_t(dtype_size(m.dtype));
    }
    if (bytes > kMaxFoldedBytes) continue;
    std::vector<Tensor> outputs(node.outputs.size());
    for (size_t i = 0; i < outputs.size(); ++i) {
      outputs[i] = ops::allocate(graph.value(node.outputs[i]).meta);
    }
    ops::NoGradGuard no_grad;
    ops::run_kernel(node.op, inputs, outputs, node.attrs);
    for (size_t i = 0; i < outputs.size(); ++i) {
      Value& v = graph.value(node.outputs[i]);
      v.kind = ValueKind::constant;
      v.producer = -1;
      v.tensor = outputs[i];
      // The graph's metas must describe the folded tensor's real layout.
      v.meta = ops::meta_of(outputs[i]);
    }
    node.dead = true;
    ++folded;
  }
  return folded;
}

}  // namespace kiln::graph::passes
