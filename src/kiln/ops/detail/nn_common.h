#pragma once
// Shared pieces of the neural-network op declarations.
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/dnnl/context.h"
#include "kiln/ops/functional.h"
#include "kiln/ops/op.h"

namespace kiln::ops::nn {

// Throws ShapeError "<op>: <what> (inputs: <shapes>)".
[[noreturn]] void throw_shape_error(std::string_view op, const std::string& what,
                                    std::span<const TensorMeta> inputs);

// Requires a floating dtype the kernel supports (f32, and bf16 when allowed).
void check_float(std::string_view op, const TensorMeta& m, const char* what, bool allow_bf16,
                 std::span<const TensorMeta> inputs);

double bytes_of(const TensorMeta& m);
double bytes_of(std::span<const TensorMeta> metas);

// The tensor itself when oneDNN can read it in place (row-major or channels-last), else a
// row-major copy.
Tensor plain(const Tensor& t);
// The tensor itself when row-major, else a row-major copy.
inline Tensor row_major(const Tensor& t) {
  return t.is_contiguous() ? t : t.contiguous();
}

inline Layout layout_of(const TensorMeta& m) {
  return m.layout;
}

// Output extent of a convolution/pooling window along one axis (may be ≤ 0 when the window
// does not fit; callers check).
inline int64_t window_out(int64_t in, int64_t kernel, int64_t stride, int64_t pad,
                          int64_t dilation) {
  return (in + 2 * pad - dilation * (kernel - 1) - 1) / stride + 1;
}

// Reduces a gradient computed at a broadcast shape back to the input's shape.
inline Tensor reduce_to(const Tensor& g, const Shape& shape) {
  return g.shape() == shape ? g : sum_to_shape(g, shape);
}

// f32 view of a floating tensor's values in row-major order (a copy unless it already is one).
Tensor as_f32_row_major(const Tensor& t);

// Cost of a normalization op (batch/layer norm and their backward): FlopsPerElement per output
// element, every input and output byte moved once.
template <int FlopsPerElement>
Cost normalization_cost(std::span<const TensorMeta> in, std::span<const TensorMeta> out,
                        const Attrs&) {
  return {double(out[0].shape.numel()) * FlopsPerElement, bytes_of(in) + bytes_of(out)};
}

// Points a oneDNN batch/layer normalization backward (use_scale | use_shift) at its data and
// runs it: x, dy, the statistics and gamma in; dx, dgamma, dbeta out.
void run_normalization_backward(dnnl_util::PrimitiveRunner& r, const Tensor& x, const Tensor& dy,
                                void* dx, const Tensor& mean, void* variance, const Tensor& gamma,
                                Tensor& dgamma, Tensor& dbeta);

}  // namespace kiln::ops::nn
