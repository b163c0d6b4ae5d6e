#pragma once
// The kernel of a fused elementwise node: one pass of the pointwise engine over the fused
// node's external inputs; inside each tile the chain's ops run one after another on temporaries
// that stay in L1, so no intermediate tensor is ever written to memory.
#include <cstdint>
#include <span>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::graph {

// One external input of a chain that run_flat runs.
struct FlatInput {
  const float* f32 = nullptr;    // in the output's memory order, or one element when `scalar`
  const bf16_t* bf16 = nullptr;  // else bf16, widened tile by tile (or one element: `scalar`)
  const uint8_t* u8 = nullptr;   // else bytes, read as 0.0f / 1.0f: a relu mask
                                 // (passes/compact_relu_masks.cpp)
  bool scalar = false;
};

class FusedElementwise {
 public:
  // External inputs a chain may have, and arguments one of its ops may take.
  static constexpr size_t kMaxInputs = 8;
  explicit FusedElementwise(const std::vector<FusedStep>& chain);
  // `out` may share memory with an input (the memory plan's in-place reuse): every op reads and
  // writes element i only.
  void run(std::span<const Tensor> inputs, Tensor& out) const;
  // The chain over n elements at flat offset `offset` of inputs that all share the output's
  // memory order (but scalars), on the calling thread. For fused reductions, which split the
  // work among the threads themselves. At most kMaxInputs inputs.
  void run_flat(std::span<const FlatInput> inputs, int64_t offset, int64_t n, float* out) const;
  // The chain on one tile of n <= kTile elements.
  void eval_tile(const float* const* inputs, float* out, int64_t n) const;
  size_t num_steps() const { return steps_.size(); }

 private:
  struct Step {
    ops::TileFn fn;
    ops::Attrs attrs;
    int num_args;
    int args[kMaxInputs];
  };
  std::vector<Step> steps_;
};

}  // namespace kiln::graph
