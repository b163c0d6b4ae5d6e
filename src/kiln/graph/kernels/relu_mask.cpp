// A relu output's mask, one byte per element: the relu_grad that reads it
// (FusedReduction, via FlatInput::u8) needs only whether each element was positive, and the
// bytes take a quarter of the f32 activation's memory while it waits for the backward.
#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"

namespace kiln::graph {
namespace {

// Below this many elements one thread is faster than waking the other.
constexpr int64_t kParallelFrom = 1 << 14;

class ReluMask : public SpecialKernel {
 public:
  ReluMask(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : y_(in[0]), mask_(out[0]) {
    if (y_.dtype() != DType::f32 || mask_.dtype() != DType::u8 || !y_.is_contiguous() ||
        !mask_.is_contiguous() || y_.shape() != mask_.shape()) {
      throw Error(node_label(node) +
                  ": needs a dense f32 input and a u8 output of its shape, got " + describe(y_) +
                  " -> " + describe(mask_));
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const float* y = y_.data<float>();
    auto* mask = static_cast<uint8_t*>(mask_.raw_data());
    const int64_t n = y_.numel();
#pragma omp parallel for simd schedule(static) if (n >= kParallelFrom)
    for (int64_t i = 0; i < n; ++i) mask[i] = y[i] > 0.0f ? 1 : 0;
  }

 private:
  Tensor y_, mask_;
};

}  // namespace

std::shared_ptr<SpecialKernel> make_relu_mask_kernel(const Node& node,
                                                     std::span<const Tensor> inputs,
                                                     std::span<const Tensor> outputs) {
  return std::make_shared<ReluMask>(node, inputs, outputs);
}

}  // namespace kiln::graph
