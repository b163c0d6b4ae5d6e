// BatchNorm + [residual add +] ReLU forward and ReLU-grad + BatchNorm-grad backward for the
// graph executor, on the rows kernels (ops/kernels/batch_norm_rows.h) that the batch_norm and
// batch_norm_grad ops use for the same layouts: the statistics bookkeeping (running mean and
// variance update, inv_std) is shared code, so fused and unfused steps agree. The fusion pass
// forms these nodes only over channels-last 4-D or [N, C] activations. A node whose batch is
// one part of several (a batch split's slice, a rank's shard: ops/kernels/batch_norm_parts.h)
// finds the other parts when it runs.
#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/batch_norm_rows.h"

namespace kiln::graph {
namespace {

void check_vector(const Node& node, const Tensor& t, int64_t c, const char* what) {
  if (t.dtype() != DType::f32 || t.shape() != Shape{c} || !t.is_contiguous()) {
    throw Error(node_label(node) + ": " + what + " must be contiguous f32[" + std::to_string(c) +
                "], got " + describe(t));
  }
}

// inputs: x, gamma, beta, running_mean, running_var[, residual]; outputs: r, mean, inv_std.
class BnReluForward : public SpecialKernel {
 public:
  BnReluForward(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : in_(in.begin(), in.end()),
        out_(out.begin(), out.end()),
        residual_(in.size() > 5),
        label_(node_label(node)),
        bn_(node.attrs.as<ops::BatchNormAttrs>()),
        options_{.training = node.attrs.as<ops::BatchNormAttrs>().training,
                 .momentum = node.attrs.as<ops::BatchNormAttrs>().momentum,
                 .eps = node.attrs.as<ops::BatchNormAttrs>().eps,
                 .relu = true,
                 .blocked = layout_bits(node) != 0,
                 .stream_output = node.stream_output} {
    const Tensor& x = in[0];
    for (int i = 1; i < 5; ++i) check_vector(node, in[size_t(i)], x.dim(1), "gamma, beta, stats");
    for (int i = 1; i < 3; ++i) check_vector(node, out[size_t(i)], x.dim(1), "mean, inv_std");
    if (!ops::can_run_batch_norm(x, {&out[0], residual_ ? &in[5] : nullptr}, options_.blocked)) {
      throw Error(node_label(node) + ": input " + describe(x) + ", residual and output are not " +
                  ops::batch_norm_layout_requirement(options_.blocked));
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::BatchNormRowsOptions options = options_;
    const auto parts = ops::batch_parts(label_, bn_);
    options.parts = parts.get();
    ops::batch_norm_rows_forward(in_[0], in_[1], in_[2], in_[3], in_[4],
                                 residual_ ? &in_[5] : nullptr, options, out_[0], out_[1], out_[2]);
  }

 private:
  std::vector<Tensor> in_, out_;
  bool residual_;
  std::string label_;
  ops::BatchNormAttrs bn_;  // which parts of the batch meet (batch_norm_parts.h)
  ops::BatchNormRowsOptions options_;
};

// inputs: g (gradient of r), r (the forward's relu output), x, gamma, mean, inv_std[, beta];
// outputs: dx, dgamma, dbeta. g passes where r > 0, as relu_grad(g, r) would have let it; with
// beta (a forward without residual) the kernel finds those elements from x instead of r.
class BnReluBackward : public SpecialKernel {
 public:
  BnReluBackward(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : in_(in.begin(), in.end()),
        out_(out.begin(), out.end()),
        label_(node_label(node)),
        bn_(node.attrs.as<ops::BatchNormAttrs>()),
        blocked_(layout_bits(node) != 0) {
    const Tensor& x = in[2];
    for (size_t i = 3; i < in.size(); ++i) {
      check_vector(node, in[i], x.dim(1), "gamma, mean, inv_std, beta");
    }
    for (int i = 1; i < 3; ++i) check_vector(node, out[size_t(i)], x.dim(1), "dgamma, dbeta");
    if (!ops::can_run_batch_norm(x, {&in[0], &in[1], &out[0]}, blocked_)) {
      throw Error(node_label(node) + ": gradient, relu output, input " + describe(x) +
                  " and dx are not " + ops::batch_norm_layout_requirement(blocked_));
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::batch_norm_rows_backward(
        in_[0], &in_[1], in_[2], in_[3], in_[4], in_[5], bn_.training, out_[0], out_[1], out_[2],
        blocked_, in_.size() > 6 ? &in_[6] : nullptr, ops::batch_parts(label_, bn_).get());
  }

 private:
  std::vector<Tensor> in_, out_;
  std::string label_;
  ops::BatchNormAttrs bn_;  // training, and which parts of the batch meet (batch_norm_parts.h)
  bool blocked_;            // x, g, r and dx in oneDNN's nChw16c layout (passes/block_layout.cpp)
};

// inputs: a, b (the two gradients arriving at a block's output), r (that output, after its
// relu), x, gamma, mean, inv_std; outputs: dx, dgamma, dbeta, dy = relu_grad(a + b, r).
class BnAddReluBackward : public SpecialKernel {
 public:
  BnAddReluBackward(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : in_(in.begin(), in.end()),
        out_(out.begin(), out.end()),
        label_(node_label(node)),
        bn_(node.attrs.as<ops::BatchNormAttrs>()),
        blocked_(layout_bits(node) != 0) {
    const Tensor& x = in[3];
    for (int i = 4; i < 7; ++i) check_vector(node, in[size_t(i)], x.dim(1), "gamma, mean, inv_std");
    for (int i = 1; i < 3; ++i) check_vector(node, out[size_t(i)], x.dim(1), "dgamma, dbeta");
    if (!ops::can_run_batch_norm(x, {&in[0], &in[1], &in[2], &out[0], &out[3]}, blocked_)) {
      throw Error(node_label(node) + ": gradients, relu output, input " + describe(x) +
                  ", dx and dy are not " + ops::batch_norm_layout_requirement(blocked_));
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::batch_norm_rows_backward_add_relu(in_[0], in_[1], in_[2], in_[3], in_[4], in_[5], in_[6],
                                           bn_.training, out_[3], out_[0], out_[1], out_[2],
                                           blocked_, ops::batch_parts(label_, bn_).get());
  }

 private:
  std::vector<Tensor> in_, out_;
  std::string label_;
  ops::BatchNormAttrs bn_;  // training, and which parts of the batch meet (batch_norm_parts.h)
  bool blocked_;
};

}  // namespace

std::shared_ptr<SpecialKernel> make_bn_relu_kernel(const Node& node, std::span<const Tensor> inputs,
                                                   std::span<const Tensor> outputs) {
  if (node.type == NodeType::bn_relu) {
    return std::make_shared<BnReluForward>(node, inputs, outputs);
  }
  if (node.type == NodeType::bn_add_relu_grad) {
    return std::make_shared<BnAddReluBackward>(node, inputs, outputs);
  }
  return std::make_shared<BnReluBackward>(node, inputs, outputs);
}

}  // namespace kiln::graph
