#include "kiln/graph/detail/fused_elementwise.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "kiln/core/error.h"
#include "kiln/graph/detail/fused_kernels.h"
#include "kiln/ops/kernels/pointwise.h"

namespace kiln::graph {
namespace {

// Per-thread temporaries for the chain's intermediate tiles, grown once and kept.
float* scratch(size_t tiles) {
  thread_local std::vector<float> buffer;
  size_t need = tiles * size_t(ops::kTile) + 16;
  if (buffer.size() < need) buffer.resize(need);
  // 64-byte aligned start.
  uintptr_t p = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t(63));
}

void identity_tile(float* out, const float* const* in, int64_t n, const ops::Attrs&) {
  std::memcpy(out, in[0], size_t(n) * sizeof(float));
}

}  // namespace

FusedElementwise::FusedElementwise(const std::vector<FusedStep>& chain) {
  for (const FusedStep& s : chain) {
    const ops::OpDef& def = ops::op_def(s.op);
    if (s.op == ops::OpKind::broadcast_to) {
      steps_.push_back(Step{identity_tile, s.attrs, 1, {s.args[0]}});
      continue;
    }
    if (!def.tile)
      throw Error("fused kernel: op " + std::string(def.name) + " has no tile function");
    if (s.args.size() > kMaxInputs)
      throw Error("fused kernel: op " + std::string(def.name) + " has too many inputs");
    Step step{def.tile, s.attrs, int(s.args.size()), {}};
    for (size_t i = 0; i < s.args.size(); ++i) step.args[i] = s.args[i];
    steps_.push_back(step);
  }
}

void FusedElementwise::eval_tile(const float* const* in, float* o, int64_t n) const {
  const size_t last = steps_.size() - 1;
  float* temps = scratch(last);
  const float* args[kMaxInputs];
  for (size_t s = 0; s <= last; ++s) {
    const Step& st = steps_[s];
    for (int a = 0; a < st.num_args; ++a) {
      int r = st.args[a];
      args[a] = r >= 0 ? in[r] : temps + size_t(-1 - r) * size_t(ops::kTile);
    }
    float* dst = s == last ? o : temps + s * size_t(ops::kTile);
    st.fn(dst, args, n, st.attrs);
  }
}

void FusedElementwise::run(std::span<const Tensor> inputs, Tensor& out) const {
  ops::TileBody body{[](const void* ctx, float* o, const float* const* in, int64_t n) {
                       static_cast<const FusedElementwise*>(ctx)->eval_tile(in, o, n);
                     },
                     this};
  ops::pointwise_apply(inputs, out, body);
}

void FusedElementwise::run_flat(std::span<const FlatInput> inputs, int64_t offset, int64_t n,
                                float* out) const {
  if (inputs.size() > kMaxInputs) throw Error("fused kernel: more than 8 inputs");
  // Broadcast scalars and bytes widened to floats, one tile per input.
  alignas(64) float staged[kMaxInputs][ops::kTile];
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].scalar) {
      const float v = inputs[k].bf16 ? bf16_to_float(inputs[k].bf16[0]) : inputs[k].f32[0];
      std::fill(staged[k], staged[k] + ops::kTile, v);
    }
  }
  const float* ptrs[kMaxInputs];
  for (int64_t begin = 0; begin < n; begin += ops::kTile) {
    const int64_t m = std::min(ops::kTile, n - begin);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const FlatInput& in = inputs[k];
      if (in.scalar) {
        ptrs[k] = staged[k];
      } else if (in.u8) {
        const uint8_t* bytes = in.u8 + offset + begin;
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) staged[k][i] = float(bytes[i]);
        ptrs[k] = staged[k];
      } else if (in.bf16) {
        const bf16_t* b = in.bf16 + offset + begin;
#pragma omp simd
        for (int64_t i = 0; i < m; ++i) staged[k][i] = bf16_to_float(b[i]);
        ptrs[k] = staged[k];
      } else {
        ptrs[k] = in.f32 + offset + begin;
      }
    }
    eval_tile(ptrs, out + begin, m);
  }
}

namespace {

class FusedElementwiseKernel final : public SpecialKernel {
 public:
  explicit FusedElementwiseKernel(const std::vector<FusedStep>& chain) : fused_(chain) {}
  void run(std::span<const Tensor> inputs, std::span<Tensor> outputs) override {
    fused_.run(inputs, outputs[0]);
  }
  // Reads its tensors' addresses on every run.
  bool follows_moved_inputs() const override { return true; }

 private:
  FusedElementwise fused_;
};

}  // namespace

std::shared_ptr<SpecialKernel> make_fused_elementwise_kernel(const Node& node,
                                                             std::span<const Tensor> inputs,
                                                             std::span<const Tensor> outputs) {
  return std::make_shared<FusedElementwiseKernel>(node.chain);
}

}  // namespace kiln::graph
