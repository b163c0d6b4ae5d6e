#pragma once
// The strategies AUTO_PARALLEL weighs for one op: every way its rule can split it over the job's
// devices. They come from the rule itself (OpDef::shard's `follow`): for each input and for the
// output, every split of that tensor's dimensions into parts whose product uses the devices
// (MindSpore's fully_use_devices; or any divisor of them), each turned by the rule into the
// op's strategy, kept where shard_form accepts it. Ops without a rule have one candidate: whole.
#include <cstdint>
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/ops/shard_rule.h"

namespace kiln::parallel {

struct CandidateOptions {
  // Every candidate uses all the devices (or runs whole); false: any divisor of them too.
  bool fully_use_devices = true;
};

// The candidates of op node `id`, the replicated strategy first; distinct strategies only.
std::vector<ops::Strategy> candidate_strategies(const graph::Graph& g, graph::NodeId id,
                                                int64_t devices,
                                                const CandidateOptions& options = {});

// Every split of `dims` into parts that divide them, with a product equal to `devices` (or
// dividing it when not `exact`). Part of the interface for the tests.
std::vector<std::vector<int64_t>> splits_of(const std::vector<int64_t>& dims, int64_t devices,
                                            bool exact);

}  // namespace kiln::parallel
