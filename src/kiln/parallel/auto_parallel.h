#pragma once
// AUTO_PARALLEL: every op's strategy, and every parameter's layout, chosen by a search over a
// cost model instead of given by the user.
//
//   kiln::set_auto_parallel_context({.parallel_mode = kiln::ParallelMode::AUTO_PARALLEL,
//                                    .search_mode = "dynamic_programming",
//                                    .device_num = size, .memory_limit_mb = 64});
//
// The cost of a plan, per rank and per training step, is
//   - compute: each op's cost (OpDef::cost) divided by its shards, at the machine's rates
//     (machine_model.h), three times over for forward and backward;
//   - communication: every redistribution between a producer's layout and what its consumer's
//     strategy needs (α-β model, the backward mirroring the forward), each trainable
//     parameter's gradient all-reduce over the ranks holding the same block, and the loss made
//     whole;
//   - memory: parameters with their gradients and optimizer state, and the activations kept for
//     the backward, per rank.
// dynamic_programming minimises time + λ · memory over the cost graph (dp_search.h) with λ = 0,
// and where the plan exceeds the memory limit, with the smallest λ (found by bisection) whose
// plan fits. sharding_propagation keeps the user's strategies and propagates the rest
// (sharding_plan.h), starting from the batch split of the ops that read the inputs when the user
// gave none. recursive_programming is a faster greedy: the ops in order of their compute, each
// taking its best strategy against the neighbours already decided.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/graph/ir.h"
#include "kiln/parallel/dp_search.h"
#include "kiln/parallel/machine_model.h"
#include "kiln/parallel/tensor_layout.h"

namespace kiln::parallel {

enum class SearchMode : uint8_t {
  dynamic_programming,
  recursive_programming,
  sharding_propagation
};
std::string search_mode_name(SearchMode mode);
// Throws kiln::Error naming the value and the choices.
SearchMode parse_search_mode(const std::string& name);

struct AutoParallelOptions {
  SearchMode search = SearchMode::dynamic_programming;
  double memory_limit_bytes = 0;  // per rank; 0: no limit
  int optimizer_states = 1;       // state tensors per parameter: SGD 0, Momentum 1, Adam 2
  bool fully_use_devices = true;  // MindSpore's: every split uses all devices, or none
  double gradient_bucket_bytes = 25 << 20;  // AutoParallelContext::bucket_cap_mb
  MachineModel machine;
};

// One rank's share of one training step (forward, backward, update).
struct StepPrediction {
  double compute_s = 0;
  double communication_s = 0;
  double parameter_bytes = 0;   // parameters, gradients and optimizer state
  double activation_bytes = 0;  // op outputs kept for the backward
  double seconds() const { return compute_s + communication_s; }
  double memory_bytes() const { return parameter_bytes + activation_bytes; }
};

struct AutoOpChoice {
  ops::Strategy strategy;
  std::string what;  // the strategy in words: "the batch split in 4 (data parallel)", ...
  std::string why;   // against this op's data-parallel strategy, in time and memory
};

struct AutoPlan {
  int64_t devices = 1;
  SearchMode search = SearchMode::dynamic_programming;
  std::map<graph::NodeId, AutoOpChoice> ops;
  std::map<graph::ValueId, TensorLayout> parameters;  // every state value an op reads
  StepPrediction predicted, data_parallel;
  double memory_limit_bytes = 0;
  bool fits = true;   // predicted memory within the limit
  bool exact = true;  // the search proved its plan optimal for the cost model
  double lambda = 0;  // seconds per byte the memory limit cost (0: the limit did not bind)
  SearchStatistics statistics;
  double search_seconds = 0;
  int64_t candidates = 0;  // strategies weighed, over every op and parameter
  std::string machine;     // where the cost model's figures come from

  // The plan for a user: each op's strategy with what and why, the redistributions rank 0 runs,
  // the parameters' layouts, and the predicted step next to plain data parallelism.
  std::string str(const graph::Graph& g) const;
};

// Plans `g` (a step's forward and loss with whole shapes, as semi_auto.h's plan_step traces it)
// for `devices` ranks. `loss`: the output made whole on every rank. `fixed`: parameters already
// split by an earlier compile (their layout is kept). Throws kiln::Error when no plan fits the
// memory limit, naming the limit and the least memory a plan needs.
AutoPlan plan_auto_parallel(const graph::Graph& g, graph::ValueId loss, int64_t devices,
                            const AutoParallelOptions& options,
                            const std::map<graph::ValueId, TensorLayout>& fixed = {});

}  // namespace kiln::parallel
