#pragma once
// Shared checks and helpers of the fused optimizer-update ops. Each update is one in-place pass
// over parameter, gradient and state; it has no outputs (the parameter and state inputs are
// mutated, see OpDef::mutated_inputs), and no gradient.
#include <algorithm>
#include <span>
#include <string>

#include "kiln/core/bf16_convert.h"
#include "kiln/core/error.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/functional.h"

namespace kiln::ops::optimizer {

// Below this many elements a second thread saves less than an OpenMP fork/join costs: biases
// and batch-norm parameters update serially. Measured (momentum, 2 threads): 8,192 elements 4.5
// -> 1.8 µs with both threads, 48,000 (LeNet's fc1) 25 -> 4.6 µs; 4,096: 2.2 -> 1.8.
inline constexpr int64_t kParallelThreshold = 1 << 13;

inline void check_same(std::string_view op, const char* what, const TensorMeta& param,
                       const TensorMeta& other) {
  if (other.shape != param.shape) {
    throw ShapeError(std::string(op) + ": " + what + " has shape " + other.shape.str() +
                     ", but the parameter has shape " + param.shape.str());
  }
}

inline void check_param(std::string_view op, const TensorMeta& param) {
  if (param.dtype != DType::f32) {
    throw ShapeError(std::string(op) + ": the parameter must be f32 (fp32 master weights), got " +
                     std::string(dtype_name(param.dtype)));
  }
}

inline void check_state(std::string_view op, const char* what, const TensorMeta& param,
                        const TensorMeta& state) {
  check_same(op, what, param, state);
  if (state.dtype != DType::f32) {
    throw ShapeError(std::string(op) + ": " + what + " must be f32, got " +
                     std::string(dtype_name(state.dtype)));
  }
}

inline void check_scalar(std::string_view op, const char* what, const TensorMeta& s) {
  if (s.shape.numel() != 1 || s.dtype != DType::f32) {
    throw ShapeError(std::string(op) + ": " + what + " must be a one-element f32 tensor, got " +
                     describe_meta(s));
  }
}

inline float scalar_value(const Tensor& t) {
  return *static_cast<const float*>(t.raw_data());
}

// Mixed precision: a bf16 layer's weight gradient reaches momentum and SGD updates as bf16 (the
// compiled graph drops the cast to f32 in between, graph/passes/simplify.cpp), widened element by
// element as the update reads it: one read of half the bytes instead of a cast pass and an f32
// read.
inline bool reads_bf16_gradient(const Tensor& grad, const Tensor& param) {
  return grad.dtype() == DType::bf16 && grad.strides() == param.strides() && grad.is_dense();
}
inline float gradient_value(const float* g, int64_t i) {
  return g[i];
}
inline float gradient_value(const bf16_t* g, int64_t i) {
  return bf16_to_float(g[i]);
}

// The gradient as f32 in exactly the parameter's memory order, so one flat index walks both.
inline Tensor aligned_gradient(const Tensor& grad, const Tensor& param) {
  if (grad.dtype() == DType::f32 && grad.strides() == param.strides() && grad.is_dense()) {
    return grad;
  }
  Tensor copy = Tensor::empty_strided(param.shape(), param.strides(), DType::f32);
  copy.copy_from(grad);
  return copy;
}

// State tensors are created like the parameter; anything else is a caller bug worth naming.
inline void check_state_layout(std::string_view op, const char* what, const Tensor& param,
                               const Tensor& state) {
  if (state.strides() != param.strides() || !state.is_dense()) {
    throw Error(std::string(op) + ": " + what + " must have the parameter's memory layout");
  }
}

inline void check_param_layout(std::string_view op, const Tensor& param) {
  if (!param.is_dense()) throw Error(std::string(op) + ": the parameter must be dense in memory");
}

// A compiled mixed-precision step gives an update one more input, its last: the parameter's bf16
// copy, which the update rounds from the new values so that the next step's forward reads it
// instead of casting the weight again (graph/passes/bf16_weight_copies.cpp). Eager calls leave it
// out.
inline void check_bf16_copy(std::string_view op, std::span<const TensorMeta> in, size_t index) {
  if (in.size() <= index) return;
  if (in[index].shape != in[0].shape || in[index].dtype != DType::bf16) {
    throw ShapeError(std::string(op) + ": the parameter's bf16 copy must be bf16" +
                     in[0].shape.str() + ", got " + describe_meta(in[index]));
  }
}
inline bf16_t* bf16_copy(std::string_view op, std::span<const Tensor> in, size_t index) {
  if (in.size() <= index) return nullptr;
  if (in[index].strides() != in[0].strides() || !in[index].is_dense()) {
    throw Error(std::string(op) + ": the parameter's bf16 copy must have its memory layout");
  }
  return static_cast<bf16_t*>(in[index].raw_data());
}

// Elements an update handles at a time: the parameter, gradient and state of one block stay in
// L1 while the block's new parameter values are rounded into the bf16 copy, when there is one.
inline constexpr int64_t kUpdateBlock = 2048;
// From this many elements (a 256 KiB copy) the copy is written past the caches
// (core/bf16_convert.h): the next step reads it only after the rest of this step's backward
// and the next forward's earlier layers have passed through the caches.
inline constexpr int64_t kStreamedCopy = 1 << 17;

// copy[0, len) = p[0, len) rounded to bf16, past the caches when `streamed`.
inline void write_bf16_copy(const float* p, bf16_t* copy, int64_t len, bool streamed) {
  if (streamed) {
    detail::f32_to_bf16_stream_n(p, copy, len);
  } else {
    detail::f32_to_bf16_n(p, copy, len);
  }
}

// block(begin, len) over [0, n) on the update's threads (static contiguous ranges, as a
// `parallel for` over the elements), then the bf16 copy of the block's new values.
template <class Block>
void update_blocks(int64_t n, const float* p, bf16_t* copy, const Block& block) {
  const int64_t blocks = (n + kUpdateBlock - 1) / kUpdateBlock;
  const bool streamed = n >= kStreamedCopy;
#pragma omp parallel for schedule(static) if (n >= kParallelThreshold)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kUpdateBlock, len = std::min(kUpdateBlock, n - begin);
    block(begin, len);
    if (copy != nullptr) write_bf16_copy(p + begin, copy + begin, len, streamed);
  }
}

// Bytes of n f32 elements, for the cost functions.
inline double f32_bytes(int64_t n) {
  return double(n) * 4.0;
}

}  // namespace kiln::ops::optimizer
