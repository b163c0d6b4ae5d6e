// The kernel of a fused reduction: the elementwise chain runs chunk by chunk over the input's
// memory, each chunk is reduced while it is still in cache, and the chain's result never makes
// a round trip through memory (unless another node reads it too, in which case the chunk is
// written to its buffer once and reduced from there).
//
// One parallel region does it all: each thread takes whole outer slices, or (fewer slices than
// threads: a bias gradient) a range of the reduced rows into its own partial, added up at the
// end in thread order. When the chain and the reduction of each chunk forked and joined on their
// own, the MLP's relu_grad + bias-gradient kernel ([512, 1024], 2 threads) took 0.125 ms, more
// than the two unfused ops (0.10-0.12 ms); in one region it takes 0.100-0.105.
//
// bf16 (mixed precision): the chain runs in f32 on widened tiles and the sums are f32; only what
// is stored is rounded to bf16 (the reduction's result, and the chain's result when shared), so
// the bias gradient of a bf16 layer costs one pass as in f32.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "kiln/core/bf16_convert.h"
#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_elementwise.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/reduce.h"

namespace kiln::graph {
namespace {

// Elements per chunk: the chunk (and the chain's temporaries) stay in L2.
constexpr int64_t kChunk = 1 << 15;

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
    if (in.size() > FusedElementwise::kMaxInputs) {
      throw Error(node_label(node) + ": more than " + std::to_string(FusedElementwise::kMaxInputs) +
                  " inputs");
    }
    for (const Tensor& t : in) {
      FlatInput input;
      if (t.dtype() == DType::f32) {
        input.f32 = t.data<float>();
        input.scalar = t.numel() == 1;
      } else if (t.dtype() == DType::bf16 && (t.is_dense() || t.numel() == 1)) {
        // Read flat in memory order, as f32 inputs are (channels-last ones included).
        input.bf16 = static_cast<const bf16_t*>(t.raw_data());
        input.scalar = t.numel() == 1;
      } else if (t.dtype() == DType::u8 && t.is_contiguous()) {
        input.u8 = static_cast<const uint8_t*>(t.raw_data());
      } else {
        throw Error(node_label(node) + ": input " + describe(t) +
                    " is neither f32, dense bf16 nor a mask");
      }
      inputs_.push_back(input);
    }
    if (out[0].numel() != geom_.outer * geom_.inner || !out[0].is_contiguous()) {
      throw Error(node_label(node) + ": output " + describe(out[0]) +
                  " does not match the reduction");
    }
    for (size_t i = 0; i < out.size(); ++i) {
      if (out[i].dtype() != DType::f32 && out[i].dtype() != DType::bf16) {
        throw Error(node_label(node) + ": output " + describe(out[i]) + " is neither f32 nor bf16");
      }
    }
    if (out[0].dtype() == DType::f32) {
      out_ = out[0].data<float>();
    } else {
      out_bf16_ = static_cast<bf16_t*>(out[0].raw_data());
      result_.resize(size_t(geom_.outer * geom_.inner));
      out_ = result_.data();
    }
    if (out.size() > 1) {
      if (out[1].dtype() == DType::f32) {
        chain_out_ = out[1].data<float>();
      } else {
        chain_out_bf16_ = static_cast<bf16_t*>(out[1].raw_data());
      }
    }
    threads_ = std::max(1, omp_get_max_threads());
    const int64_t O = geom_.outer, I = geom_.inner;
    // The chain's result for one chunk: kChunk elements, or one row of I when that is longer.
    if (!chain_out_) chunks_.resize(size_t(threads_) * size_t(std::max(kChunk, I)));
    if (O < threads_) partials_.resize(size_t(threads_) * size_t(O * I));
    row_sums_.resize(size_t(threads_) * size_t(I));
  }

  void run(std::span<const Tensor>, std::span<Tensor>) override {
    const int64_t O = geom_.outer, R = geom_.reduced, I = geom_.inner;
    const int threads = O * R * I >= 2 * kChunk ? threads_ : 1;
    const bool split_rows = O < threads;
    int used = 1;  // threads the runtime gave the region
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int t = omp_get_thread_num(), nt = omp_get_num_threads();
      if (t == 0) used = nt;
      if (split_rows) {
        const int64_t per = (R + nt - 1) / nt;
        const int64_t r0 = std::min(R, t * per), r1 = std::min(R, r0 + per);
        float* mine = partials_.data() + size_t(t) * size_t(O * I);
        for (int64_t o = 0; o < O; ++o) reduce_rows(t, o, r0, r1, mine + o * I);
      } else {
        const int64_t per = (O + nt - 1) / nt;
        const int64_t o0 = std::min(O, t * per), o1 = std::min(O, o0 + per);
        if (I == 1 && R < kChunk) {
          reduce_whole_rows(t, o0, o1);
        } else {
          for (int64_t o = o0; o < o1; ++o) reduce_rows(t, o, 0, R, out_ + o * I);
        }
      }
    }
    if (split_rows) {
      std::memcpy(out_, partials_.data(), size_t(O * I) * sizeof(float));
      for (int t = 1; t < used; ++t) {
        const float* p = partials_.data() + size_t(t) * size_t(O * I);
        for (int64_t i = 0; i < O * I; ++i) out_[i] += p[i];
      }
    }
    if (mean_ && R > 0) {
      const float scale = float(1.0 / double(R));
      for (int64_t i = 0; i < O * I; ++i) out_[i] *= scale;
    }
    if (out_bf16_) kiln::detail::f32_to_bf16_n(out_, out_bf16_, O * I);
  }

 private:
  // The chain's result over n elements at flat offset `begin`, computed on thread t: in the
  // chain's output buffer when other nodes read it, else in t's chunk.
  float* chain(int t, int64_t begin, int64_t n) {
    float* x = chain_out_ ? chain_out_ + begin
                          : chunks_.data() + size_t(t) * (chunks_.size() / size_t(threads_));
    chain_.run_flat(inputs_, begin, n, x);
    if (chain_out_bf16_) kiln::detail::f32_to_bf16_n(x, chain_out_bf16_ + begin, n);
    return x;
  }

  // dst[j] = sum over rows [r0, r1) of outer slice o, on thread t.
  void reduce_rows(int t, int64_t o, int64_t r0, int64_t r1, float* dst) {
    const int64_t R = geom_.reduced, I = geom_.inner;
    if (r0 >= r1) {
      std::fill(dst, dst + I, 0.0f);
      return;
    }
    float* row_sum = row_sums_.data() + size_t(t) * size_t(I);
    const int64_t rows = std::max<int64_t>(1, kChunk / I);
    for (int64_t r = r0; r < r1; r += rows) {
      const int64_t m = std::min(rows, r1 - r);
      const float* x = chain(t, (o * R + r) * I, m * I);
      ops::reduce_f32(ops::ReduceKind::sum, x, 1, m, I, r == r0 ? dst : row_sum,
                      /*use_threads=*/false);
      if (r > r0) {
        for (int64_t j = 0; j < I; ++j) dst[j] += row_sum[j];
      }
    }
  }

  // out[o] = sum of row o for o in [o0, o1) (inner 1, rows shorter than a chunk): as many whole
  // rows per chunk as fit, on thread t.
  void reduce_whole_rows(int t, int64_t o0, int64_t o1) {
    const int64_t R = geom_.reduced;
    const int64_t rows = std::max<int64_t>(1, kChunk / std::max<int64_t>(R, 1));
    for (int64_t o = o0; o < o1; o += rows) {
      const int64_t m = std::min(rows, o1 - o);
      ops::reduce_f32(ops::ReduceKind::sum, chain(t, o * R, m * R), m, R, 1, out_ + o,
                      /*use_threads=*/false);
    }
  }

  FusedElementwise chain_;
  bool mean_;
  ReductionGeometry geom_;
  std::vector<FlatInput> inputs_;
  float* out_ = nullptr;              // the f32 result (result_ when the output is bf16)
  bf16_t* out_bf16_ = nullptr;        // the bf16 output, rounded from result_ at the end
  float* chain_out_ = nullptr;        // the chain's f32 output, when shared
  bf16_t* chain_out_bf16_ = nullptr;  // the chain's bf16 output, rounded chunk by chunk
  std::vector<float> result_;
  int threads_ = 1;
  // Per thread: the chain's result for one chunk (when no other node reads it), the partial
  // result of a range of rows, the sum of one chunk's rows.
  std::vector<float> chunks_, partials_, row_sums_;
};

}  // namespace

std::vector<bool> reduction_mask(ops::OpKind op, const ops::Attrs& attrs,
                                 const ops::TensorMeta& in) {
  const int r = in.shape.rank();
  std::vector<bool> mask(size_t(r), false);
  if (op == ops::OpKind::sum_to_shape) {
    const Shape target(attrs.as<ops::ShapeAttrs>().shape);
    const int off = r - target.rank();
    for (int i = 0; i < r; ++i) {
      mask[size_t(i)] = i < off || (target[i - off] == 1 && in.shape[i] != 1);
    }
    return mask;
  }
  const std::vector<int64_t>& axes = attrs.as<ops::ReduceAttrs>().axes;
  if (axes.empty()) return std::vector<bool>(size_t(r), true);
  for (int64_t a : axes) mask[size_t(in.shape.normalize_axis(int(a)))] = true;
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
