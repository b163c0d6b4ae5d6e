// Graph mode's batch norm + relu fused into the 3x3 convolutions that read their output
// (passes/fuse_bn_relu_conv.cpp): the batch norm's statistics alone, and the convolutions
// (forward and weight gradient) in Kiln's Winograd kernel, reading relu(batch_norm(x)) on the fly.
#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/batch_norm_rows.h"
#include "kiln/ops/kernels/conv_winograd.h"

namespace kiln::graph {
namespace {

// inputs: x, gamma, beta, running_mean, running_var; outputs: mean, inv_std.
class BnStatistics : public SpecialKernel {
 public:
  BnStatistics(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : in_(in.begin(), in.end()),
        out_(out.begin(), out.end()),
        label_(node_label(node)),
        bn_(node.attrs.as<ops::BatchNormAttrs>()),
        options_{.training = node.attrs.as<ops::BatchNormAttrs>().training,
                 .momentum = node.attrs.as<ops::BatchNormAttrs>().momentum,
                 .eps = node.attrs.as<ops::BatchNormAttrs>().eps,
                 .blocked = input_is_nchw16c(node, 0)} {
    if (!ops::can_run_batch_norm(in[0], {}, options_.blocked)) {
      throw Error(node_label(node) + ": input " + describe(in[0]) + " is not " +
                  ops::batch_norm_layout_requirement(options_.blocked));
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::BatchNormRowsOptions options = options_;
    const auto parts = ops::batch_parts(label_, bn_);
    options.parts = parts.get();
    ops::batch_norm_rows_statistics(in_[0], in_[3], in_[4], options, out_[0], out_[1]);
  }

 private:
  std::vector<Tensor> in_, out_;
  std::string label_;
  ops::BatchNormAttrs bn_;  // which parts of the batch meet (batch_norm_parts.h)
  ops::BatchNormRowsOptions options_;
};

// conv2d: inputs x, w, gamma, beta, mean, inv_std; output y.
// conv2d_backward_weights: inputs dy, x, gamma, beta, mean, inv_std; output dw.
class BnReluConv : public SpecialKernel {
 public:
  BnReluConv(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : in_(in.begin(), in.end()),
        out_(out.begin(), out.end()),
        attrs_(node.attrs.as<ops::ConvAttrs>()),
        weight_gradient_(node.op == ops::OpKind::conv2d_backward_weights),
        scale_(size_t(in[weight_gradient_ ? 1 : 0].dim(1))) {
    const Tensor& x = in_[weight_gradient_ ? 1 : 0];
    const bool x_blocked = ops::input_is_nchw16c(attrs_, weight_gradient_ ? 1 : 0);
    const bool ok = weight_gradient_
                        ? ops::can_run_winograd_3x3(x, x_blocked, out_[0].shape(), attrs_, in_[0],
                                                    ops::input_is_nchw16c(attrs_, 0))
                        : ops::can_run_winograd_3x3(x, x_blocked, in_[1].shape(), attrs_, out_[0],
                                                    ops::output_is_nchw16c(attrs_, 0));
    if (!ok) {
      throw Error(node_label(node) + ": operands " + describe(in_[0]) + ", " + describe(in_[1]) +
                  " are outside the Winograd kernel's rule");
    }
    for (int i = 2; i < 6; ++i) {
      if (in_[size_t(i)].dtype() != DType::f32 || in_[size_t(i)].shape() != Shape{x.dim(1)} ||
          !in_[size_t(i)].is_contiguous()) {
        throw Error(node_label(node) + ": gamma, beta, mean and inv_std must be contiguous f32[" +
                    std::to_string(x.dim(1)) + "], got " + describe(in_[size_t(i)]));
      }
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const float* gamma = in_[2].data<float>();
    const float* inv_std = in_[5].data<float>();
    for (size_t c = 0; c < scale_.size(); ++c)
      scale_[c] = ops::batch_norm_scale(gamma[c], inv_std[c]);
    const ops::BnReluInput bn{in_[4].data<float>(), scale_.data(), in_[3].data<float>()};
    if (weight_gradient_) {
      ops::winograd_3x3_backward_weights(in_[0], ops::input_is_nchw16c(attrs_, 0), in_[1],
                                         ops::input_is_nchw16c(attrs_, 1), attrs_, out_[0], &bn);
    } else {
      ops::winograd_3x3_forward(in_[0], ops::input_is_nchw16c(attrs_, 0), in_[1], nullptr, attrs_,
                                out_[0], ops::output_is_nchw16c(attrs_, 0), &bn);
    }
  }

 private:
  std::vector<Tensor> in_, out_;
  ops::ConvAttrs attrs_;
  bool weight_gradient_;
  std::vector<float> scale_;  // gamma·inv_std, per run
};

}  // namespace

std::shared_ptr<SpecialKernel> make_bn_relu_conv_kernel(const Node& node,
                                                        std::span<const Tensor> inputs,
                                                        std::span<const Tensor> outputs) {
  if (node.type == NodeType::bn_stats) {
    return std::make_shared<BnStatistics>(node, inputs, outputs);
  }
  return std::make_shared<BnReluConv>(node, inputs, outputs);
}

}  // namespace kiln::graph
