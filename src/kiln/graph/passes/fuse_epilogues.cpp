// Graph-kernel fusion (c): conv2d/matmul epilogues. What follows the product and has no other
// reader of its intermediate (a bias add for matmul, relu, a residual add) is folded into the
// producing oneDNN primitive as post-ops, so the product is written to memory once, finished.
//
//   z = matmul(x, w)        ->  y = fused[matmul,add,relu](x, w, b)
//   u = add(z, b)                 (oneDNN matmul with bias and an eltwise_relu post-op)
//   y = relu(u)
//
//   z = conv2d(x, w, b)     ->  y = fused[conv2d,add,relu](x, w, b, r)
//   u = add(z, r)                 (binary_add post-op reading r, then eltwise_relu)
//   y = relu(u)
#include <algorithm>

#include "kiln/core/context.h"
#include "kiln/graph/detail/passes.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/kernels/conv_winograd.h"

namespace kiln::graph::passes {
namespace {
using ops::OpKind;

// The single live consumer of v, or -1.
NodeId only_user(const std::vector<std::vector<NodeId>>& users, ValueId v) {
  const auto& u = users[size_t(v)];
  if (u.empty()) return -1;
  for (NodeId n : u) {
    if (n != u[0]) return -1;
  }
  return u[0];
}

// dx = max_pool2d_grad(dy, x); t = relu_grad(dx, x) with x a relu's output: the pooling
// gradient's one pass also applies the relu mask (LeNet's relu -> pool, backwards).
int fuse_pool_grad_relu_grad(Graph& graph, NodeId pn, const std::vector<std::vector<NodeId>>& users,
                             const std::vector<bool>& is_output) {
  const Node& pg = graph.node(pn);
  const ops::PoolAttrs& a = pg.attrs.as<ops::PoolAttrs>();
  if (a.kernel != a.stride || a.padding[0] != 0 || a.padding[1] != 0) return 0;
  const ValueId dx = pg.outputs[0], x = pg.inputs[1];
  if (graph.value(dx).meta.dtype != DType::f32 || is_output[size_t(dx)]) return 0;
  NodeId n = only_user(users, dx);
  if (n < 0 || !is_live_op(graph.node(n), OpKind::relu_grad)) return 0;
  const Node& rg = graph.node(n);
  if (rg.inputs[0] != dx || rg.inputs[1] != x ||
      !(graph.value(rg.outputs[0]).meta == graph.value(dx).meta)) {
    return 0;
  }
  // relu_grad(g, x) masks with x > 0, which is what the kernel does with the pool's own x; the
  // pooling gradient moves to relu_grad's place, reading only values defined before it.
  Node f;
  f.type = NodeType::epilogue;
  f.op = OpKind::max_pool2d_grad;
  f.attrs = pg.attrs;
  f.inputs = pg.inputs;
  f.outputs = rg.outputs;
  f.post_ops = {PostOp::relu_grad};
  f.members = {"max_pool2d_grad", "relu_grad"};
  graph.node(pn).dead = true;
  graph.node(n) = std::move(f);
  return 1;
}

}  // namespace

int fuse_epilogues(Graph& graph) {
  const ScheduleView view(graph);
  const auto& [order, pos, users, is_output] = view;
  int fused = 0;

  for (NodeId pn : order) {
    Node& prod = graph.node(pn);
    if (prod.dead || prod.type != NodeType::op) continue;
    if (prod.op == OpKind::max_pool2d_grad) {
      fused += fuse_pool_grad_relu_grad(graph, pn, users, is_output);
      continue;
    }
    const bool conv = prod.op == OpKind::conv2d, mm = prod.op == OpKind::matmul;
    if (!conv && !mm) continue;
    const ValueId z = prod.outputs[0];
    const ops::TensorMeta zm = graph.value(z).meta;
    if (zm.dtype != DType::f32 && zm.dtype != DType::bf16) continue;
    if (mm && (zm.shape.rank() != 2 || graph.value(prod.inputs[0]).meta.shape.rank() != 2 ||
               graph.value(prod.inputs[1]).meta.shape.rank() != 2 ||
               !dense_as_meta(graph, prod.inputs[0]) || !dense_as_meta(graph, prod.inputs[1]))) {
      continue;
    }
    if (conv && !(dense_as_meta(graph, prod.inputs[1]) &&
                  graph.value(prod.inputs[1]).meta.layout == ops::Layout::contiguous)) {
      continue;
    }
    // A fused convolution runs oneDNN's direct kernel with post-ops: under conv_algorithm
    // "winograd" one that a Winograd kernel takes stays unfused and runs Winograd.
    if (conv && get_context().conv_algorithm == "winograd") {
      const ops::TensorMeta& xm = graph.value(prod.inputs[0]).meta;
      const Shape& ws = graph.value(prod.inputs[1]).meta.shape;
      const ops::ConvAttrs& ca = prod.attrs.as<ops::ConvAttrs>();
      if (ops::winograd_3x3_fits(xm.shape, ws, ca) ||
          ops::dnnl_util::dnnl_winograd_fits(xm.dtype, xm.shape, ws, ca)) {
        continue;
      }
    }

    Node fusedn;
    fusedn.type = NodeType::epilogue;
    fusedn.op = prod.op;
    fusedn.attrs = prod.attrs;
    fusedn.inputs = {prod.inputs[0], prod.inputs[1],
                     conv && prod.inputs.size() > 2 ? prod.inputs[2] : kNoValue};
    fusedn.members.emplace_back(ops::op_name(prod.op));
    std::vector<NodeId> absorbed;
    ValueId cur = z;
    // The bindings are captured by name: clang before 16 cannot capture a structured binding.
    auto next_of = [&, &is_output = is_output, &users = users](ValueId v) -> NodeId {
      if (is_output[size_t(v)]) return -1;
      return only_user(users, v);
    };
    // matmul: bias add first (oneDNN's bias argument).
    if (mm) {
      NodeId n = next_of(cur);
      if (n >= 0 && is_live_op(graph.node(n), OpKind::add)) {
        const Node& add = graph.node(n);
        ValueId other = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
        const ops::TensorMeta& bm = graph.value(other).meta;
        bool row = (bm.shape == Shape{zm.shape[1]} || bm.shape == Shape{1, zm.shape[1]});
        if (other != cur && row && bm.dtype == zm.dtype && dense_as_meta(graph, other) &&
            graph.value(add.outputs[0]).meta.shape == zm.shape) {
          fusedn.inputs[2] = other;
          fusedn.members.emplace_back("add");
          absorbed.push_back(n);
          cur = add.outputs[0];
        }
      }
    }
    // Residual add (a full-size tensor), then relu; or relu alone.
    {
      NodeId n = next_of(cur);
      if (n >= 0 && is_live_op(graph.node(n), OpKind::add)) {
        const Node& add = graph.node(n);
        ValueId other = add.inputs[0] == cur ? add.inputs[1] : add.inputs[0];
        const ops::TensorMeta& rm = graph.value(other).meta;
        if (other != cur && rm.shape == zm.shape && rm.dtype == zm.dtype &&
            dense_as_meta(graph, other) && graph.value(add.outputs[0]).meta == zm) {
          fusedn.inputs.push_back(other);
          fusedn.post_ops.push_back(PostOp::add_residual);
          fusedn.members.emplace_back("add");
          absorbed.push_back(n);
          cur = add.outputs[0];
        }
      }
    }
    {
      NodeId n = next_of(cur);
      if (n >= 0 && is_live_op(graph.node(n), OpKind::relu) &&
          graph.value(graph.node(n).outputs[0]).meta == zm) {
        fusedn.post_ops.push_back(PostOp::relu);
        fusedn.members.emplace_back("relu");
        absorbed.push_back(n);
        cur = graph.node(n).outputs[0];
      }
    }
    if (absorbed.empty()) continue;
    // The product moves to the last absorbed node's place: nothing in between may write what
    // it reads, and a residual must be computed before that place (it is: the add read it).
    NodeId last = absorbed.back();
    if (crosses_write(graph, order, prod, pos[size_t(pn)], pos[size_t(last)])) continue;
    fusedn.outputs = graph.node(last).outputs;
    graph.node(pn).dead = true;
    for (NodeId n : absorbed) {
      if (n != last) graph.node(n).dead = true;
    }
    graph.node(last) = std::move(fusedn);
    ++fused;
  }
  return fused;
}

}  // namespace kiln::graph::passes
