// Attention's causal mask: over the last two dims [..., T, S] of a score tensor, element (i, j)
// keeps its value where j <= i + (S - T) and becomes `fill` elsewhere, so query i attends to the
// keys up to its own position (S > T: the first S - T keys are a cached prefix every query sees).
// Linear in x with a constant elsewhere, so its gradient is the same mask with fill 0.
#include <cmath>
#include <cstring>

#include "kiln/ops/detail/nn_common.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::ops {
namespace {
using nn::throw_shape_error;

constexpr char kCausalMask[] = "causal_mask";

std::vector<TensorMeta> causal_mask_infer(std::span<const TensorMeta> in, const Attrs& attrs) {
  const TensorMeta& x = in[0];
  if (x.shape.rank() < 2) {
    throw_shape_error(kCausalMask, "scores must be [..., T, S] (rank >= 2)", in);
  }
  if (!is_floating(x.dtype)) {
    throw_shape_error(kCausalMask,
                      "scores must be floating, got " + std::string(dtype_name(x.dtype)), in);
  }
  const int r = x.shape.rank();
  if (x.shape[r - 2] > x.shape[r - 1]) {
    throw_shape_error(kCausalMask,
                      detail::concat("more queries (T=", x.shape[r - 2], ") than keys (S=",
                                     x.shape[r - 1], "): the first queries would see no key"),
                      in);
  }
  if (std::isnan(attrs.as<ScalarAttrs>().scalar)) {
    throw_shape_error(kCausalMask, "fill must not be NaN", in);
  }
  return {{x.shape, x.dtype, Layout::contiguous}};
}

// Row r of each [T, S] matrix keeps its first r + offset + 1 elements.
template <class T>
void mask_rows(const T* x, T* y, int64_t rows, int64_t t, int64_t s, T fill) {
  const int64_t offset = s - t;
#pragma omp parallel for if (rows * s > 65536)
  for (int64_t row = 0; row < rows; ++row) {
    const int64_t keep = std::min(s, row % t + offset + 1);
    const T* xr = x + row * s;
    T* yr = y + row * s;
    std::memcpy(yr, xr, size_t(keep) * sizeof(T));
    for (int64_t j = keep; j < s; ++j) yr[j] = fill;
  }
}

void causal_mask_kernel(std::span<const Tensor> in, std::span<Tensor> out, const Attrs& attrs) {
  Tensor x = nn::row_major(in[0]);
  Tensor& y = out[0];
  if (y.numel() == 0) return;
  const int64_t t = y.dim(-2), s = y.dim(-1), rows = y.numel() / s;
  const double fill = attrs.as<ScalarAttrs>().scalar;
  if (x.dtype() == DType::f32) {
    mask_rows(x.data<float>(), y.data<float>(), rows, t, s, float(fill));
    return;
  }
  // bf16 and f16: the rows are copied as 16-bit patterns; only the fill is converted.
  uint16_t fill_bits = 0;
  kiln::fill(&fill_bits, x.dtype(), fill, 1);
  mask_rows(static_cast<const uint16_t*>(x.raw_data()), static_cast<uint16_t*>(y.raw_data()), rows,
            t, s, fill_bits);
}

Cost causal_mask_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                      const Attrs&) {
  return {0, nn::bytes_of(in) + nn::bytes_of(out)};
}

}  // namespace

const OpDef op_def_causal_mask = {
    .name = kCausalMask,
    .attrs = attrs_kind<ScalarAttrs>,
    .infer = causal_mask_infer,
    .kernel = causal_mask_kernel,
    .grad = [](const GradCtx& c) -> std::vector<Tensor> {
      return {causal_mask(c.grad_outputs[0], 0.0)};
    },
    .amp = AmpClass::follow,
    .cost = causal_mask_cost,
    .shard = &kCausalMaskShardRule,
};

Tensor causal_mask(const Tensor& x, double fill) {
  return call_one_output(OpKind::causal_mask, {x}, ScalarAttrs{.scalar = fill});
}

}  // namespace kiln::ops
