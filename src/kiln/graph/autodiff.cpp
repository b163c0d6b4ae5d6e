#include "kiln/graph/autodiff.h"

#include <memory>
#include <string>

#include "kiln/core/error.h"
#include "kiln/ops/functional.h"

namespace kiln::graph {

std::vector<Tensor> gradients(Tracer& tracer, const Tensor& loss, const std::vector<Tensor>& wrt,
                              const Tensor& seed) {
  Graph& g = tracer.graph();
  ValueId root = tracer.value_of(loss);
  if (g.value(root).meta.shape.numel() != 1) {
    throw Error("graph autodiff: loss " + describe(loss) + " is not a scalar");
  }
  const size_t forward_nodes = g.num_nodes();

  // Which values depend on something we differentiate with respect to.
  std::vector<ValueId> wrt_ids;
  for (const Tensor& t : wrt) wrt_ids.push_back(tracer.value_of(t));
  std::vector<bool> needs_grad(g.num_values());
  for (ValueId v : wrt_ids) needs_grad[size_t(v)] = true;
  for (size_t n = 0; n < forward_nodes; ++n) {
    const Node& node = g.node(NodeId(n));
    bool any = false;
    for (ValueId v : node.inputs) any = any || (v != kNoValue && needs_grad[size_t(v)]);
    if (!any) continue;
    for (ValueId v : node.outputs) needs_grad[size_t(v)] = is_floating(g.value(v).meta.dtype);
  }

  std::vector<Tensor> grad_of(g.num_values());
  auto accumulate = [&](ValueId v, const Tensor& grad) {
    Tensor& slot = grad_of[size_t(v)];
    slot = slot.defined() ? ops::add(slot, grad) : grad;
  };
  {
    const ops::TensorMeta& m = g.value(root).meta;
    if (!seed.defined()) {
      grad_of[size_t(root)] =
          tracer.tensor_of(tracer.value_of(Tensor::full(m.shape, 1.0, m.dtype)));
    } else if (seed.shape() != m.shape || seed.dtype() != m.dtype) {
      throw ShapeError("graph autodiff: the seed gradient is " + describe(seed) +
                       " but the loss is " + describe(loss) + " (shape and dtype must match)");
    } else {
      grad_of[size_t(root)] = tracer.tensor_of(tracer.value_of(seed));
    }
  }

  for (size_t n = forward_nodes; n-- > 0;) {
    // Copy: gradient rules append nodes, which may move the node list.
    const Node node = g.node(NodeId(n));
    if (node.dead || node.type != NodeType::op) continue;
    bool any_grad = false;
    for (ValueId v : node.outputs) any_grad = any_grad || grad_of[size_t(v)].defined();
    if (!any_grad) continue;
    bool any_requires = false;
    for (ValueId v : node.inputs) any_requires = any_requires || needs_grad[size_t(v)];
    if (!any_requires) continue;

    const ops::OpDef& def = ops::op_def(node.op);
    if (!def.grad) {
      throw Error(std::string(def.name) + ": has no gradient" +
                  (def.no_grad_reason ? std::string(" (") + def.no_grad_reason + ")" : "") +
                  " but a parameter's gradient flows through it");
    }
    // Mirror what the eager tape hands a rule: saved inputs/outputs only, zeros for outputs
    // that received no gradient.
    std::vector<Tensor> inputs(node.inputs.size());
    std::vector<ops::TensorMeta> input_metas;
    std::unique_ptr<bool[]> needs(new bool[node.inputs.size()]);
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      input_metas.push_back(g.value(node.inputs[i]).meta);
      if (i < 32 && (def.saved_inputs >> i & 1u)) inputs[i] = tracer.tensor_of(node.inputs[i]);
      needs[i] = needs_grad[size_t(node.inputs[i])];
    }
    std::vector<Tensor> outputs;
    if (def.saves_outputs) {
      for (ValueId v : node.outputs) outputs.push_back(tracer.tensor_of(v));
    }
    std::vector<Tensor> grad_outputs;
    for (ValueId v : node.outputs) {
      Tensor go = grad_of[size_t(v)];
      if (!go.defined()) {
        const ops::TensorMeta& m = g.value(v).meta;
        go = tracer.tensor_of(tracer.value_of(Tensor::zeros(m.shape, m.dtype)));
      }
      grad_outputs.push_back(go);
    }
    ops::GradCtx ctx{inputs,     input_metas,
                     outputs,    grad_outputs,
                     node.attrs, std::span<const bool>(needs.get(), node.inputs.size())};
    std::vector<Tensor> grads = def.grad(ctx);
    if (grads.size() != node.inputs.size()) {
      throw Error(std::string(def.name) + ": gradient rule returned " +
                  std::to_string(grads.size()) + " gradients for " +
                  std::to_string(node.inputs.size()) + " inputs");
    }
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!needs[i] || !grads[i].defined()) continue;
      if (grads[i].shape() != input_metas[i].shape) {
        throw Error(std::string(def.name) + ": gradient for input " + std::to_string(i) +
                    " has shape " + grads[i].shape().str() + ", expected " +
                    input_metas[i].shape.str());
      }
      accumulate(node.inputs[i], grads[i]);
    }
    // Gradients of this node's outputs are no longer needed; drop the handles.
    for (ValueId v : node.outputs) grad_of[size_t(v)] = Tensor();
  }

  std::vector<Tensor> result;
  for (size_t i = 0; i < wrt.size(); ++i) {
    Tensor gr = grad_of[size_t(wrt_ids[i])];
    if (!gr.defined()) {
      const ops::TensorMeta& m = g.value(wrt_ids[i]).meta;
      gr = tracer.tensor_of(tracer.value_of(Tensor::zeros(m.shape, m.dtype)));
    }
    result.push_back(gr);
  }
  return result;
}

}  // namespace kiln::graph
