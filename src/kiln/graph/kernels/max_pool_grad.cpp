// max_pool2d_grad for non-overlapping windows as a graph kernel: the op's one-pass kernel
// (ops/kernels/max_pool_grad.h) bound once to its tensors, with a following relu_grad fused in.
#include "kiln/ops/kernels/max_pool_grad.h"
#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"

namespace kiln::graph {
namespace {

class MaxPoolGrad : public SpecialKernel {
 public:
  MaxPoolGrad(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : dy_(in[0]), x_(in[1]), dx_(out[0]), k_{node.attrs.as<ops::PoolAttrs>().kernel} {
    for (PostOp p : node.post_ops) {
      if (p != PostOp::relu_grad) throw Error("max_pool2d_grad: unsupported post-op");
      relu_mask_ = true;
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::max_pool_grad_one_pass(dy_, x_, dx_, k_, relu_mask_);
  }

 private:
  Tensor dy_, x_, dx_;
  std::array<int64_t, 2> k_;
  bool relu_mask_ = false;
};

}  // namespace

bool can_run_max_pool_grad(const Node& node, std::span<const Tensor> in,
                           std::span<const Tensor> out) {
  if ((node.type != NodeType::op && node.type != NodeType::epilogue) ||
      node.op != ops::OpKind::max_pool2d_grad) {
    return false;
  }
  const ops::PoolAttrs& a = node.attrs.as<ops::PoolAttrs>();
  return ops::can_run_max_pool_grad_one_pass(in[0], in[1], out[0], a.kernel, a.stride, a.padding);
}

std::shared_ptr<SpecialKernel> make_max_pool_grad_kernel(const Node& node,
                                                         std::span<const Tensor> inputs,
                                                         std::span<const Tensor> outputs) {
  return std::make_shared<MaxPoolGrad>(node, inputs, outputs);
}

}  // namespace kiln::graph
