// Kernels where a blocked nChw16c activation (passes/block_layout.cpp) meets values with one
// entry per (sample, channel): an elementwise node whose other operands are [N, C, 1, 1]-like
// (a pooled gradient, a per-channel scale) or scalars, and a mean/sum over the spatial dims (the
// global average pool). Both see the blocked [N, C, H, W] as the dense [N, C/16, H, W, 16] it is:
// a row (n, c/16) holds H*W runs of the same 16 channels, so a per-(n, c) operand repeats with
// period 16 along the row, and the pool sums a row's runs into 16 outputs.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_elementwise.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::graph {
namespace {

constexpr int kBlock = 16;
constexpr int kMaxInputs = 8;
// Below this many output elements the kernel runs on one thread.
constexpr int64_t kParallelElements = 32768;

bool is_spatial_reduction(const Node& node) {
  return node.type == NodeType::op && (node.op == ops::OpKind::mean || node.op == ops::OpKind::sum);
}

// 16 floats in one AVX-512 register (GCC/Clang vector extension, as in ops/kernels/reduce.cpp).
typedef float v16 __attribute__((vector_size(64)));
inline v16 load16(const float* p) {
  v16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// out = chain(inputs) with out and the full-size inputs blocked; the other inputs hold one value
// per (n, c) (broadcast over H, W) or one value.
class BlockedElementwise : public SpecialKernel {
 public:
  BlockedElementwise(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out) {
    if (node.type == NodeType::fused_elementwise) {
      chain_.emplace(node.chain);
    } else {
      tile_ = ops::op_def(node.op).tile;
      attrs_ = node.attrs;
    }
    if (out.size() != 1 || in.size() > size_t(kMaxInputs)) {
      throw Error(node_label(node) + ": blocked elementwise takes at most 8 inputs and one output");
    }
    const Tensor& y = out[0];
    if (y.rank() != 4 || y.dtype() != DType::f32 || !y.is_dense() || y.dim(1) % kBlock != 0 ||
        !output_is_nchw16c(node, 0)) {
      throw Error(node_label(node) +
                  ": expects a blocked dense f32 [N, C, H, W] output (C a multiple " +
                  "of 16), got " + describe(y));
    }
    N_ = y.dim(0);
    C_ = y.dim(1);
    HW_ = y.dim(2) * y.dim(3);
    out_ = y.data<float>();
    for (size_t i = 0; i < in.size(); ++i) {
      const Tensor& x = in[i];
      Input input;
      if (!x.defined()) {
        throw Error(node_label(node) + ": input " + std::to_string(i) + " is missing");
      }
      if (x.dtype() != DType::f32) {
        throw Error(node_label(node) + ": input " + std::to_string(i) + " " + describe(x) +
                    " is not f32");
      }
      if (x.shape() == y.shape()) {
        if (!input_is_nchw16c(node, int(i)) || !x.is_dense()) {
          throw Error(node_label(node) + ": full-size input " + std::to_string(i) + " " +
                      describe(x) + " is not a blocked dense tensor");
        }
        input.kind = Input::full;
      } else if (x.numel() == 1) {
        input.kind = Input::scalar;
      } else {
        if (!is_per_sample_channel(x.shape(), y.shape()) || input_is_nchw16c(node, int(i))) {
          throw Error(node_label(node) + ": input " + std::to_string(i) + " " + describe(x) +
                      " is neither the blocked output's shape " + y.shape().str() +
                      " nor one value per (sample, channel)");
        }
        // Right-aligned against [N, C, H, W]: the strides of N and C, 0 where broadcast.
        const int shift = 4 - x.rank();
        auto stride = [&](int d) {
          return d < shift || x.dim(d - shift) == 1 ? int64_t(0) : x.strides()[size_t(d - shift)];
        };
        input.kind = Input::per_channel;
        input.stride_n = stride(0);
        input.stride_c = stride(1);
      }
      input.data = x.data<float>();
      inputs_.push_back(input);
    }
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const int64_t row_len = HW_ * kBlock, rows = N_ * (C_ / kBlock);
    const int64_t tiles_per_row = (row_len + ops::kTile - 1) / ops::kTile;
    const int64_t work = rows * tiles_per_row;
    const int nin = int(inputs_.size());
#pragma omp parallel if (rows * row_len > kParallelElements)
    {
      // ops::kTile is a multiple of 16, so every tile starts at channel 0 of a run and a
      // per-(n, c) operand's tile is the same for every tile of a row.
      alignas(64) float repeated[kMaxInputs][ops::kTile];
      const float* ptrs[kMaxInputs];
      int64_t filled_row = -1;
      for (int k = 0; k < nin; ++k) {
        if (inputs_[size_t(k)].kind == Input::scalar) {
          std::fill(repeated[k], repeated[k] + ops::kTile, inputs_[size_t(k)].data[0]);
        }
      }
#pragma omp for schedule(static)
      for (int64_t w = 0; w < work; ++w) {
        const int64_t row = w / tiles_per_row, start = (w % tiles_per_row) * ops::kTile;
        const int64_t n = std::min(ops::kTile, row_len - start);
        const int64_t offset = row * row_len + start;
        const bool new_row = row != filled_row;
        filled_row = row;
        const int64_t sample = row / (C_ / kBlock), c0 = (row % (C_ / kBlock)) * kBlock;
        for (int k = 0; k < nin; ++k) {
          const Input& x = inputs_[size_t(k)];
          if (x.kind == Input::full) {
            ptrs[k] = x.data + offset;
            continue;
          }
          ptrs[k] = repeated[k];
          if (x.kind != Input::per_channel || !new_row) continue;
          float block[kBlock];
          const float* p = x.data + sample * x.stride_n + c0 * x.stride_c;
          for (int j = 0; j < kBlock; ++j) block[j] = p[j * x.stride_c];
          const int64_t span = std::min(ops::kTile, row_len);
          for (int64_t i = 0; i < span; i += kBlock)
            std::copy(block, block + kBlock, repeated[k] + i);
        }
        if (chain_) {
          chain_->eval_tile(ptrs, out_ + offset, n);
        } else {
          tile_(out_ + offset, ptrs, n, attrs_);
        }
      }
    }
  }

 private:
  struct Input {
    enum Kind { full, per_channel, scalar } kind = full;
    const float* data = nullptr;
    int64_t stride_n = 0, stride_c = 0;  // per_channel, in elements (0: broadcast)
  };
  std::optional<FusedElementwise> chain_;
  ops::TileFn tile_ = nullptr;
  ops::Attrs attrs_;
  std::vector<Input> inputs_;
  int64_t N_ = 0, C_ = 0, HW_ = 0;
  float* out_ = nullptr;
};

// mean/sum over H, W of a blocked [N, C, H, W]: each row (n, c/16) of the 5-D view sums its H*W
// runs of 16 channels into 16 outputs, [N, C/16, 16] being [N, C] (or [N, C, 1, 1]) row-major.
// (The reduction engine on the 5-D view does the same, twice as slowly: rows of 16 are too
// short for it.)
class BlockedSpatialReduction : public SpecialKernel {
 public:
  BlockedSpatialReduction(const Node& node, std::span<const Tensor> in,
                          std::span<const Tensor> out) {
    const Tensor& x = in[0];
    if (x.rank() != 4 || x.dtype() != DType::f32 || !x.is_dense() || x.dim(1) % kBlock != 0) {
      throw Error(node_label(node) +
                  ": expects a blocked dense f32 [N, C, H, W] input (C a multiple " +
                  "of 16), got " + describe(x));
    }
    const Tensor& y = out[0];
    const int64_t N = x.dim(0), C = x.dim(1);
    // (n, c) of the output must sit at n * C + c.
    const bool rows_nc = y.rank() >= 2 && y.dim(0) == N && y.dim(1) == C && y.numel() == N * C &&
                         (N == 1 || y.strides()[0] == C) && (C == 1 || y.strides()[1] == 1);
    if (!rows_nc || y.dtype() != DType::f32) {
      throw Error(node_label(node) + ": output " + describe(y) +
                  " is not f32 [N, C] or [N, C, 1, 1] " + "with (n, c) at n * C + c");
    }
    x_ = x.data<float>();
    y_ = y.data<float>();
    rows_ = N * (C / kBlock);
    runs_ = x.dim(2) * x.dim(3);
    mean_ = node.op == ops::OpKind::mean;
    // As the reduction engine scales a mean: the f32 sum times float(1 / count).
    scale_ = float(1.0 / double(runs_));
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const int64_t runs = runs_;
#pragma omp parallel for schedule(static) if (rows_ * runs * kBlock > kParallelElements)
    for (int64_t r = 0; r < rows_; ++r) {
      const float* p = x_ + r * runs * kBlock;
      v16 total = {};
      // Partial sums of kRunBlock runs bound rounding growth on large images.
      for (int64_t b = 0; b < runs; b += kRunBlock) {
        const int64_t e = std::min(runs, b + kRunBlock);
        v16 a0 = {}, a1 = {}, a2 = {}, a3 = {};
        int64_t i = b;
        for (; i + 4 <= e; i += 4) {
          a0 += load16(p + i * kBlock);
          a1 += load16(p + (i + 1) * kBlock);
          a2 += load16(p + (i + 2) * kBlock);
          a3 += load16(p + (i + 3) * kBlock);
        }
        for (; i < e; ++i) a0 += load16(p + i * kBlock);
        total += (a0 + a1) + (a2 + a3);
      }
      float* o = y_ + r * kBlock;
      for (int j = 0; j < kBlock; ++j) o[j] = mean_ ? total[j] * scale_ : total[j];
    }
  }

 private:
  static constexpr int64_t kRunBlock = 256;
  const float* x_ = nullptr;
  float* y_ = nullptr;
  int64_t rows_ = 0, runs_ = 0;
  bool mean_ = false;
  float scale_ = 1.0f;
};

}  // namespace

bool is_per_sample_channel(const Shape& operand, const Shape& out) {
  if (out.rank() != 4 || operand.rank() > 4) return false;
  const int shift = 4 - operand.rank();
  for (int d = 0; d < 4; ++d) {
    const int64_t n = d < shift ? 1 : operand[d - shift];
    if (n != 1 && (d >= 2 || n != out[d])) return false;
  }
  return true;
}

bool runs_blocked_spatial(const Node& node, std::span<const Tensor> inputs,
                          std::span<const Tensor> outputs) {
  if (layout_bits(node) == 0 || outputs.empty()) return false;
  if (is_spatial_reduction(node)) return input_is_nchw16c(node, 0);
  if (!is_elementwise(node)) return false;
  // Same-shape elementwise nodes run on the plain engine: position i is position i in either
  // layout.
  for (const Tensor& x : inputs) {
    if (x.defined() && x.shape() != outputs[0].shape()) return true;
  }
  return false;
}

std::shared_ptr<SpecialKernel> make_blocked_spatial_kernel(const Node& node,
                                                           std::span<const Tensor> inputs,
                                                           std::span<const Tensor> outputs) {
  if (is_spatial_reduction(node)) {
    return std::make_shared<BlockedSpatialReduction>(node, inputs, outputs);
  }
  return std::make_shared<BlockedElementwise>(node, inputs, outputs);
}

}  // namespace kiln::graph
