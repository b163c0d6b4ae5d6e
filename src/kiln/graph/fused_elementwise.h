#pragma once
// The kernel of a fused elementwise node: one pass of the pointwise engine over the fused
// node's external inputs; inside each tile the chain's ops run one after another on temporaries
// that stay in L1, so no intermediate tensor is ever written to memory.
#include <span>
#include <vector>

#include "kiln/graph/ir.h"

namespace kiln::graph {

class FusedElementwise {
 public:
  explicit FusedElementwise(const std::vector<FusedStep>& chain);
  // `out` may share memory with an input (the memory plan's in-place reuse): every op reads and
  // writes element i only.
  void run(std::span<const Tensor> inputs, Tensor& out) const;
  // The chain over n elements at flat offset `offset` of f32 inputs that all share the output's
  // memory order, except those flagged `scalar` (one element, broadcast), on the calling thread.
  // For fused reductions, which split the work among the threads themselves.
  void run_flat(const float* const* inputs, const bool* scalar, int64_t offset, int64_t n,
                float* out) const;
  // The chain on one tile of n <= kTile elements.
  void eval_tile(const float* const* inputs, float* out, int64_t n) const;
  size_t num_steps() const { return steps_.size(); }

 private:
  struct Step {
    ops::TileFn fn;
    ops::Attrs attrs;
    int num_args;
    int args[8];
  };
  std::vector<Step> steps_;
};

}  // namespace kiln::graph
