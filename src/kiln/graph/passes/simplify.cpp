// Algebraic simplification: identities that autodiff and layer code leave behind.
#include "kiln/graph/detail/passes.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

bool same_meta(const Graph& g, ValueId a, ValueId b) {
  return g.value(a).meta == g.value(b).meta;
}

// A copying op on a strided view is not an identity even when the metas agree.
bool laid_out_as_meta(const Graph& g, ValueId v) {
  return dense_as_meta(g, v);
}

// Mixed precision: momentum(p, cast(g_bf16 -> f32), ...) reads g_bf16 directly (the update ops
// widen a bf16 gradient as they read it, ops/optimizer/common.h), so the cast pass over every
// weight gradient goes. Returns the bf16 gradient, or kNoValue.
ValueId bf16_gradient_behind_cast(const Graph& g, const Node& update) {
  if (update.op != OpKind::momentum_update && update.op != OpKind::sgd_update) return kNoValue;
  const Value& grad = g.value(update.inputs[1]);
  if (grad.producer < 0) return kNoValue;
  const Node& cast = g.node(grad.producer);
  if (cast.dead || cast.type != NodeType::op || cast.op != OpKind::cast) return kNoValue;
  const ValueId source = cast.inputs[0];
  const ops::TensorMeta& m = g.value(source).meta;
  const ops::TensorMeta& param = g.value(update.inputs[0]).meta;
  if (m.dtype != DType::bf16 || m.shape != param.shape || m.layout != param.layout ||
      !dense_as_meta(g, source)) {
    return kNoValue;
  }
  return source;
}

}  // namespace

int simplify_algebra(Graph& graph) {
  std::vector<bool> mutated = mutated_values(graph);
  int rewrites = 0;
  for (NodeId n : graph.schedule()) {
    Node& node = graph.node(n);
    if (node.type == NodeType::op && is_optimizer_update(node)) {
      if (const ValueId g = bf16_gradient_behind_cast(graph, node); g != kNoValue) {
        node.inputs[1] = g;
        ++rewrites;
      }
      continue;
    }
    if (node.type != NodeType::op || !is_pure(node) || node.outputs.size() != 1) continue;
    const ValueId out = node.outputs[0];
    ValueId replacement = kNoValue;
    const auto& in = node.inputs;
    switch (node.op) {
      case OpKind::mul:
        if (constant_equals(graph, in[1], 1.0))
          replacement = in[0];
        else if (constant_equals(graph, in[0], 1.0))
          replacement = in[1];
        break;
      case OpKind::add:
        if (constant_equals(graph, in[1], 0.0))
          replacement = in[0];
        else if (constant_equals(graph, in[0], 0.0))
          replacement = in[1];
        break;
      case OpKind::sub:
        if (constant_equals(graph, in[1], 0.0)) replacement = in[0];
        break;
      case OpKind::div:
        if (constant_equals(graph, in[1], 1.0)) replacement = in[0];
        break;
      case OpKind::mul_scalar:
      case OpKind::pow_scalar:
        if (node.attrs.as<ops::ScalarAttrs>().scalar == 1.0) replacement = in[0];
        break;
      case OpKind::add_scalar:
        if (node.attrs.as<ops::ScalarAttrs>().scalar == 0.0) replacement = in[0];
        break;
      case OpKind::neg: {
        const Value& x = graph.value(in[0]);
        if (x.producer >= 0) {
          const Node& p = graph.node(x.producer);
          if (!p.dead && p.type == NodeType::op && p.op == OpKind::neg) replacement = p.inputs[0];
        }
        break;
      }
      case OpKind::reshape:
      case OpKind::broadcast_to:
      case OpKind::sum_to_shape:
      case OpKind::contiguous:
      case OpKind::cast:
        if (laid_out_as_meta(graph, in[0])) replacement = in[0];
        break;
      default:
        break;
    }
    if (node.op == OpKind::mul_scalar && replacement == kNoValue) {
      // mul_scalar(mul_scalar(x, a), b) -> mul_scalar(x, a*b)
      const Value& x = graph.value(in[0]);
      if (x.producer >= 0) {
        const Node& p = graph.node(x.producer);
        if (!p.dead && p.type == NodeType::op && p.op == OpKind::mul_scalar) {
          double& scalar = node.attrs.as<ops::ScalarAttrs>().scalar;
          scalar *= p.attrs.as<ops::ScalarAttrs>().scalar;
          node.inputs[0] = p.inputs[0];
          ++rewrites;
          continue;
        }
      }
    }
    if (replacement == kNoValue) continue;
    // The replacement must be indistinguishable: same shape, dtype and layout, and not a value
    // that is written in place (a copy of it would not see the write).
    if (!same_meta(graph, replacement, out) || mutated[size_t(replacement)]) continue;
    graph.replace_uses(out, replacement);
    node.dead = true;
    ++rewrites;
  }
  return rewrites;
}

}  // namespace kiln::graph::passes
