// conv2d with one input channel, plain or with a relu fused in (and conv_relu_pool nodes, with
// the max pool too), as a graph kernel: the op's hand-written kernel
// (ops/kernels/conv_single_channel.h, 2–4× faster than oneDNN there; without AVX-512,
// ops/kernels/conv_single_channel_avx2.h) bound once to its tensors, so the fused conv + relu of
// LeNet's first layer keeps that speed.
#include <omp.h>

#include <array>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/conv_single_channel.h"
#include "kiln/ops/kernels/conv_single_channel_avx2.h"

namespace kiln::graph {
namespace {

bool only_relu(const Node& node) {
  for (PostOp p : node.post_ops) {
    if (p != PostOp::relu) return false;
  }
  return true;
}

class SingleChannelConv : public SpecialKernel {
 public:
  SingleChannelConv(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : x_(in[0]),
        w_(in[1]),
        bias_(in.size() > 2 ? in[2] : Tensor()),
        y_(out[0]),
        attrs_(node.attrs.as<ops::ConvAttrs>()),
        relu_(!node.post_ops.empty()),
        avx512_(ops::can_run_single_channel_conv(x_, w_.shape(), attrs_)) {}

  bool follows_moved_inputs() const override { return true; }  // reads them through tensors
  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const Tensor* bias = bias_.defined() ? &bias_ : nullptr;
    if (avx512_)
      ops::single_channel_conv_forward(x_, w_, bias, relu_, y_);
    else
      ops::single_channel_conv_forward_avx2(x_, w_, bias, attrs_, relu_, y_);
  }

 private:
  Tensor x_, w_, bias_, y_;
  ops::ConvAttrs attrs_;
  bool relu_, avx512_;
};

// conv_relu_pool: inputs x, w[, bias]; outputs pooled, winners.
class SingleChannelConvReluPool : public SpecialKernel {
 public:
  SingleChannelConvReluPool(const Node& node, std::span<const Tensor> in,
                            std::span<const Tensor> out)
      : x_(in[0]),
        w_(in[1]),
        bias_(in.size() > 2 ? in[2] : Tensor()),
        pooled_(out[0]),
        winners_(out[1]),
        padding_(node.attrs.as<ops::ConvAttrs>().padding),
        scratch_{.threads = omp_get_max_threads()},
        scratch_floats_(ops::single_channel_conv_relu_pool_scratch_floats(x_, w_.shape(), padding_,
                                                                          scratch_.threads)) {}

  bool follows_moved_inputs() const override { return true; }  // reads them through tensors
  size_t workspace_bytes() const override { return size_t(scratch_floats_) * sizeof(float); }
  void set_workspace(std::byte* data) override { scratch_.data = reinterpret_cast<float*>(data); }
  void run(std::span<const Tensor>, std::span<Tensor>) override {
    ops::single_channel_conv_relu_pool_forward(x_, w_, bias_.defined() ? &bias_ : nullptr, padding_,
                                               pooled_, winners_, &scratch_);
  }

 private:
  Tensor x_, w_, bias_, pooled_, winners_;
  std::array<int64_t, 2> padding_;
  ops::SingleChannelConvScratch scratch_;
  int64_t scratch_floats_;
};

}  // namespace

bool can_run_single_channel_conv(const Node& node, std::span<const Tensor> in,
                                 std::span<const Tensor> out) {
  if (node.op != ops::OpKind::conv2d || in.size() < 2 || in.size() > 3 || !only_relu(node) ||
      (node.type != NodeType::op && node.type != NodeType::epilogue)) {
    return false;
  }
  const bool bias_ok =
      in.size() == 2 || !in[2].defined() || (in[2].dtype() == DType::f32 && in[2].is_contiguous());
  const ops::ConvAttrs& a = node.attrs.as<ops::ConvAttrs>();
  return bias_ok && in[1].is_contiguous() && out[0].is_channels_last() &&
         (ops::can_run_single_channel_conv(in[0], in[1].shape(), a) ||
          ops::can_run_single_channel_conv_avx2(in[0], in[1].shape(), a, out[0]));
}

std::shared_ptr<SpecialKernel> make_conv_relu_pool_kernel(const Node& node,
                                                          std::span<const Tensor> inputs,
                                                          std::span<const Tensor> outputs) {
  if (inputs.size() < 2 || outputs.size() != 2 ||
      !ops::can_run_single_channel_conv(inputs[0], inputs[1].shape(),
                                        node.attrs.as<ops::ConvAttrs>())) {
    throw Error(node_label(node) + ": operands " + describe(inputs[0]) +
                " cannot run the one-input-channel convolution");
  }
  return std::make_shared<SingleChannelConvReluPool>(node, inputs, outputs);
}

std::shared_ptr<SpecialKernel> make_single_channel_conv_kernel(const Node& node,
                                                               std::span<const Tensor> inputs,
                                                               std::span<const Tensor> outputs) {
  return std::make_shared<SingleChannelConv>(node, inputs, outputs);
}

}  // namespace kiln::graph
