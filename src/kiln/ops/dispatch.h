#pragma once
// The single entry point through which every op runs, eager or traced.
#include <initializer_list>
#include <span>
#include <vector>

#include "kiln/ops/op.h"

namespace kiln::ops {

// Runs op `kind`: infers output shapes (errors name the op and the shapes), then either records
// it into the graph being traced (when any input is a traced tensor) or allocates the outputs,
// runs the kernel and lets the autograd tape record it.
std::vector<Tensor> call(OpKind kind, std::span<const Tensor> inputs, const Attrs& attrs = {});
inline std::vector<Tensor> call(OpKind kind, std::initializer_list<Tensor> inputs,
                                const Attrs& attrs = {}) {
  return call(kind, std::span<const Tensor>(inputs.begin(), inputs.size()), attrs);
}
// For single-output ops.
Tensor call1(OpKind kind, std::initializer_list<Tensor> inputs, const Attrs& attrs = {});

// Shape/dtype inference alone, with the op's own checks (graph mode uses it too).
std::vector<TensorMeta> infer(OpKind kind, std::span<const TensorMeta> inputs, const Attrs& attrs);
// Allocates an output for a meta (channels-last when the meta says so).
Tensor allocate(const TensorMeta& meta);
// Runs the kernel (or view) alone, on already-allocated outputs: no tracing, no tape.
void run_kernel(OpKind kind, std::span<const Tensor> inputs, std::span<Tensor> outputs,
                const Attrs& attrs);

// Set by the layers above (dependency inversion: ops knows nothing of autograd or graph).
struct DispatchHooks {
  // Automatic mixed precision: may replace the inputs with cast copies before the op runs
  // (returns false to leave them alone). Set by amp/ while an autocast scope is active.
  bool (*autocast)(OpKind, std::span<const Tensor> inputs,
                   std::vector<Tensor>& cast_inputs) = nullptr;
  std::vector<Tensor> (*trace)(OpKind, std::span<const Tensor> inputs, const Attrs&,
                               std::span<const TensorMeta> outputs) = nullptr;
  void (*record)(OpKind, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                 const Attrs&) = nullptr;
  // Called around every eagerly-run kernel when set (the profiler).
  void (*on_kernel)(OpKind, std::span<const Tensor> inputs, std::span<const Tensor> outputs,
                    int64_t begin_ns, int64_t end_ns) = nullptr;
};
DispatchHooks& hooks();

// Whether ops run now are recorded for backward (thread-local; on by default).
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace kiln::ops
