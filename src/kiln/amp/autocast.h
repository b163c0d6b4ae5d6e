#pragma once
// Cast insertion for mixed precision. While an AutocastScope is active on a thread, every op
// dispatched on that thread gets its floating inputs cast to the dtype its AMP class calls for at
// the scope's level. The casts are ordinary `cast` ops: the autograd tape differentiates through
// them (fp32 parameters receive fp32 gradients: master weights), and graph mode traces them, so
// the fusion pass sees them and fuses them into neighbouring kernels.
#include <optional>
#include <span>
#include <vector>

#include "kiln/amp/level.h"
#include "kiln/amp/placement.h"
#include "kiln/ops/op.h"

namespace kiln::amp {

// Installs autocast into the dispatch chain, ops/dispatch_chain.h (idempotent, thread-safe;
// AutocastScope's constructor calls it). Outside a scope it leaves every op alone.
void install_autocast();

class AutocastScope {
 public:
  explicit AutocastScope(const AmpConfig& config);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;
  // The placement choices made for ops called inside this scope, in call order (empty when
  // strict, at O0 and O3).
  const std::vector<PlacementDecision>& decisions() const { return decisions_; }

 private:
  std::optional<AmpConfig> previous_;
  std::vector<PlacementDecision>* previous_decisions_;
  std::vector<PlacementDecision> decisions_;
};

// The dtype op `kind` computes in at this config given its inputs' dtypes, or nullopt to leave
// the inputs as they are: MindSpore's placement, which AmpConfig::strict keeps and which the
// cost-weighed placement (amp/placement.h) starts from. Exposed for tests of the cast placement.
std::optional<DType> compute_dtype(ops::OpKind kind, std::span<const DType> input_dtypes,
                                   const AmpConfig& config);

}  // namespace kiln::amp
