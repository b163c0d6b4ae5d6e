// The kernel of a fused reduction: the elementwise chain runs chunk by chunk over the input's
// memory, each chunk is reduced while it is still in cache, and the chain's result never makes
// a round trip through memory (unless another node reads it too, in which case the chunk is
// written to its buffer once and reduced from there).
#include <algorithm>
#include <cstring>
#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/fused_elementwise.h"
#include "kiln/graph/fused_kernels.h"
#include "kiln/ops/kernels/reduce.h"

namespace kiln::graph {
namespace {

// Elements per chunk: the chunk (and the chain's temporaries) stay in L2.
constexpr int64_t kChunk = 1 << 16;

// Memory order of a meta's dims, outermost first.
std::vector<int> memory_order(const ops::TensorMeta& m) {
  if (m.layout == ops::Layout::channels_last && m.shape.rank() == 4) return {0, 2, 3, 1};
  std::vector<int> order(size_t(m.shape.rank()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int(i);
  return order;
}

// inputs: the chain's externals; outputs: the reduction's result, then (optionally) the chain's
// result when other nodes read it.
class FusedReduction : public SpecialKernel {
 public:
  FusedReduction(const Node& node, std::span<const Tensor> in, std::span<const Tensor> out)
      : chain_(node.chain), mean_(node.op == ops::OpKind::mean) {
    if (!reduction_geometry(node.chain_meta, reduction_mask(node.op, node.attrs, node.chain_meta),
                            geom_)) {
      throw Error(node_label(node) + ": reduction is not one pass over memory");
    }
    for (const Tensor& t : in) {
      if (t.dtype() != DType::f32) throw Error(node_label(node) + ": f32 inputs only");
      scalar_.push_back(t.numel() == 1);
      inputs_.push_back(t.data<float>());
    }
    out_ = out[0].data<float>();
    if (out[0].numel() != geom_.outer * geom_.inner || !out[0].is_contiguous()) {
      throw Error(node_label(node) + ": output " + describe(out[0]) +
                  " does not match the reduction");
    }
    if (out.size() > 1) chain_out_ = out[1].data<float>();
    if (!chain_out_) buffer_.resize(size_t(kChunk));
    partial_.resize(size_t(geom_.inner));
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const int64_t R = geom_.reduced, I = geom_.inner, O = geom_.outer;
    bool scalar[8];
    for (size_t k = 0; k < scalar_.size(); ++k) scalar[k] = scalar_[k];
    auto chunk = [&](int64_t begin, int64_t n) -> float* {
      float* dst = chain_out_ ? chain_out_ + begin : buffer_.data();
      chain_.run_flat(inputs_.data(), scalar, begin, n, dst);
      return dst;
    };
    if (I == 1) {
      const int64_t rows = std::max<int64_t>(1, kChunk / std::max<int64_t>(R, 1));
      if (rows * R > int64_t(buffer_.size()) && !chain_out_) buffer_.resize(size_t(rows * R));
      for (int64_t o = 0; o < O; o += rows) {
        const int64_t m = std::min(rows, O - o);
        ops::reduce_f32(ops::ReduceKind::sum, chunk(o * R, m * R), m, R, 1, out_ + o);
      }
    } else {
      const int64_t rc = std::max<int64_t>(1, kChunk / I);
      if (rc * I > int64_t(buffer_.size()) && !chain_out_) buffer_.resize(size_t(rc * I));
      for (int64_t o = 0; o < O; ++o) {
        float* dst = out_ + o * I;
        for (int64_t r = 0; r < R; r += rc) {
          const int64_t m = std::min(rc, R - r);
          float* x = chunk((o * R + r) * I, m * I);
          ops::reduce_f32(ops::ReduceKind::sum, x, 1, m, I, r == 0 ? dst : partial_.data());
          if (r > 0) {
            for (int64_t j = 0; j < I; ++j) dst[j] += partial_[size_t(j)];
          }
        }
      }
    }
    if (mean_ && R > 0) {
      const float scale = float(1.0 / double(R));
      for (int64_t i = 0; i < O * I; ++i) out_[i] *= scale;
    }
  }

 private:
  FusedElementwise chain_;
  bool mean_;
  ReductionGeometry geom_;
  std::vector<const float*> inputs_;
  std::vector<bool> scalar_;
  float* out_ = nullptr;
  float* chain_out_ = nullptr;
  std::vector<float> buffer_, partial_;
};

}  // namespace

std::vector<bool> reduction_mask(ops::OpKind op, const ops::Attrs& attrs,
                                 const ops::TensorMeta& in) {
  const int r = in.shape.rank();
  std::vector<bool> mask(size_t(r), false);
  if (op == ops::OpKind::sum_to) {
    const Shape target(attrs.shape);
    const int off = r - target.rank();
    for (int i = 0; i < r; ++i) {
      mask[size_t(i)] = i < off || (target[i - off] == 1 && in.shape[i] != 1);
    }
    return mask;
  }
  if (attrs.axes.empty()) return std::vector<bool>(size_t(r), true);
  for (int64_t a : attrs.axes) mask[size_t(in.shape.normalize_axis(int(a)))] = true;
  return mask;
}

bool reduction_geometry(const ops::TensorMeta& in, const std::vector<bool>& mask,
                        ReductionGeometry& g) {
  g = {};
  // In memory order, ignoring size-1 dims: kept* reduced+ kept*, and the kept dims in logical
  // order (so the output's row-major order is the memory order of what is kept).
  int phase = 0;  // 0: outer kept, 1: reduced, 2: inner kept
  int last_kept = -1;
  for (int d : memory_order(in)) {
    const int64_t n = in.shape[d];
    if (n == 1) continue;
    if (mask[size_t(d)]) {
      if (phase == 2) return false;
      phase = 1;
      g.reduced *= n;
    } else {
      if (d < last_kept) return false;
      last_kept = d;
      if (phase == 0) {
        g.outer *= n;
      } else {
        phase = 2;
        g.inner *= n;
      }
    }
  }
  return true;
}

std::shared_ptr<SpecialKernel> make_reduction_kernel(const Node& node,
                                                     std::span<const Tensor> inputs,
                                                     std::span<const Tensor> outputs) {
  return std::make_shared<FusedReduction>(node, inputs, outputs);
}

}  // namespace kiln::graph
