#pragma once
// The single entry point through which every op runs, eager or traced.
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/ops/dispatch_chain.h"
#include "kiln/ops/op.h"

namespace kiln::ops {

// Runs op `kind` through the dispatch chain (dispatch_chain.h, which lists it in order): infers
// output shapes (errors name the op and the shapes), then either records it into the graph being
// traced (when any input is a traced tensor) or allocates the outputs, runs the kernel and lets
// the autograd tape record it.
std::vector<Tensor> call(OpKind kind, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline std::vector<Tensor> call(OpKind kind, std::initializer_list<Tensor> inputs,
                                const Attrs& attrs = {}) {
  return call(kind, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}
// For single-output ops.
Tensor call_one_output(OpKind kind, std::initializer_list<Tensor> inputs, const Attrs& attrs = {});

// Throws Error naming the op and both families unless `attrs` hold the family the op declares
// (OpDef::attrs). call and infer check it.
void check_attrs(OpKind kind, const Attrs& attrs);
// Shape/dtype inference alone, with the op's own checks (graph mode uses it too).
std::vector<TensorMeta> infer(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs);
// Allocates an output for a meta (channels-last when the meta says so).
Tensor allocate(const TensorMeta& meta);
// The threads an eagerly called kernel runs on: what its cost (OpDef::cost) pays for within the
// process's budget (core/kernel_threads.h); the whole budget for an op without a cost.
int eager_kernel_threads(const OpDef& def, std::span<const TensorMeta> inputs,
                         std::span<const TensorMeta> outputs, const Attrs& attrs);
// Runs the kernel (or view) alone, on already-allocated outputs: no tracing, no tape.
void run_kernel(OpKind kind, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const Attrs& attrs);

}  // namespace kiln::ops
